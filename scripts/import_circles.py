#!/usr/bin/env python3
"""Import circles between the files of a Rust crate, read off its `use` lines.

    scripts/import_circles.py crates/cli crates/engine          # every circle, largest first
    scripts/import_circles.py --max 3 crates/cli crates/engine  # exit 1 if one spans > 3 files

A file imports another when one of its `use crate::…` / `use super::…` / `use self::…` lines,
or a `crate::…` / `super::…` path written in its code, names a module (or an item of a module)
that the other file holds. Files that import each other
through any chain form a circle (a strongly connected component of that graph). A circle across
many files means none of them can be read, changed or tested without the others. Items that a
module re-exports count as its own, `mod` lines and tests' `use super::*` are not imports of
the parent (a `tests` module's file is left out, and so is a `#[cfg(test)] mod … { … }` block
written inside a file, whose `super` is that file), and names brought in by a glob are not
followed: this is the rough view the house rule needs, not a compiler.
"""

import argparse
import re
import sys
from pathlib import Path

USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+((?:crate|super|self)::[^;]*);", re.M)
# A path written inline in the code (`crate::bench::train(…)`, a field of type
# `crate::diff::DiffArgs`): an import as much as a `use` line is.
INLINE = re.compile(r"(?<![\w:])((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
COMMENT = re.compile(r"//.*$", re.M)
# The opening of a test module written inline: `#[cfg(test)]`, other attributes, `mod name {`.
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
# What brace counting steps over: a comment, a string (raw or not), a char literal.
SKIP = re.compile(
    r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|"(?:\\.|[^"\\])*"'
    r"|'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'",
    re.S,
)


def without_test_modules(text: str) -> str:
    """`text` less its inline `#[cfg(test)] mod … { … }` blocks (braces counted outside strings)."""
    out, pos = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        depth, i = 1, m.end()
        while i < len(text) and depth:
            skip = SKIP.match(text, i)
            if skip:
                i = skip.end()
                continue
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        pos = i
    out.append(text[pos:])
    return "".join(out)


def module_of(src: Path, file: Path) -> tuple:
    """The module path of `file` inside the crate whose root directory is `src`."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand(tree: str) -> list:
    """`a::{b, c::{d, e as f}, self}` -> ['a::b', 'a::c::d', 'a::c::e', 'a'] (globs kept as `a::*`)."""
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix: str, rest: str):
        brace = rest.find("{")
        if brace < 0:
            out.append(prefix + rest)
            return
        head, body = rest[:brace], rest[brace + 1 : rest.rfind("}")]
        for item in split_top(body):
            walk(prefix + head, item)

    walk("", tree)
    return [re.sub(r"(::self|::\*)$", "", p) for p in out]


def split_top(s: str) -> list:
    """Splits on commas outside braces."""
    items, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        items.append(cur)
    return [i for i in items if i]


def resolve(path: str, here: tuple, modules: dict):
    """The file of the longest module prefix of `path` (a `crate::`/`super::`/`self::` path)."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    else:
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    for n in range(len(segs), -1, -1):
        m = base + tuple(segs[:n])
        if m in modules:
            return modules[m]
    return None


def graph(crate: Path) -> dict:
    src = crate / "src" if (crate / "src").is_dir() else crate
    files = [
        f
        for f in src.rglob("*.rs")
        if "target" not in f.parts and f.stem != "tests" and not f.stem.endswith("_tests")
    ]
    modules = {module_of(src, f): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        here = module_of(src, f)
        # A non-mod file's `super` is its parent module; `self` is itself.
        text = COMMENT.sub("", without_test_modules(f.read_text(encoding="utf-8")))
        paths = [p for m in USE.finditer(text) for p in expand(m.group(1))]
        paths += [m.group(1) for m in INLINE.finditer(USE.sub("", text))]
        for path in paths:
            target = resolve(path, here, modules)
            if target is not None and target != f:
                edges[f].add(target)
    return edges


def circles(edges: dict) -> list:
    """Strongly connected components with more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out, key=len, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("crates", nargs="+", type=Path, help="crate directories")
    ap.add_argument("--max", type=int, default=None, help="fail if a circle spans more files")
    args = ap.parse_args()
    worst = 0
    for crate in args.crates:
        found = circles(graph(crate))
        print(f"{crate}: {len(found)} circle(s)" + (f", the largest {len(found[0])} files" if found else ""))
        for comp in found:
            worst = max(worst, len(comp))
            print(f"  {len(comp)} files: " + ", ".join(str(f.relative_to(crate)) for f in comp))
    if args.max is not None and worst > args.max:
        print(f"a circle spans {worst} files, more than --max {args.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
