//! The README and the guide in docs/ are checked like code: the README stays a short guide that
//! opens with the two commands a fresh clone runs, every relative link of README.md and
//! docs/*.md names a file of the repository (and, with `#anchor`, a heading of it), and no
//! issue-tracker number reaches what a user reads (README, docs/, every `--help`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_pipeline");
/// The README is a guide that links into docs/, not the reference itself.
const README_MAX_LINES: usize = 250;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every Markdown page of docs/.
fn guide_pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let docs = std::fs::read_dir(Path::new(ROOT).join("docs")).expect("docs/ is there");
    let mut md: Vec<PathBuf> = docs
        .map(|e| e.expect("a readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    md.sort();
    pages.extend(md);
    pages
}

/// The text outside fenced code blocks, with inline code spans removed: a `](` inside code is
/// not a link.
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the Markdown links `[text](target)` in a page's prose.
fn link_targets(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        targets.push(rest[..end].trim().to_string());
        rest = &rest[end..];
    }
    targets
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation dropped.
fn slug(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.trim().to_lowercase().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else if c == ' ' {
            out.push('-');
        }
    }
    out
}

/// The anchors a Markdown page's headings give (outside code blocks).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Why a relative link of `page` does not resolve, or `None` when it does (or is not relative).
fn dead(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("a page in a folder").join(file)
    };
    if !path.exists() {
        return Some(format!("{target}: no file {}", path.display()));
    }
    let canonical = path.canonicalize().expect("an existing path");
    let root = Path::new(ROOT).canonicalize().expect("the repository root");
    if !canonical.starts_with(&root) {
        return Some(format!("{target}: outside the repository"));
    }
    let markdown = path.extension().is_some_and(|x| x == "md");
    if anchor.is_empty() || !markdown {
        return None;
    }
    (!anchors(&read(&path)).contains(anchor)).then(|| format!("{target}: no heading #{anchor}"))
}

/// Where a text names an issue-tracker number: `issue 23`, `issue #7`, `issues 5`, or points at
/// "the issue" / "this issue" as if the reader had it open.
fn issue_mentions(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for (at, _) in lower.match_indices("issue") {
        let after = lower[at + "issue".len()..].trim_start_matches('s');
        let after = after.trim_start_matches(' ').trim_start_matches('#');
        let numbered = after.starts_with(|c: char| c.is_ascii_digit());
        let before = &lower[..at];
        let pointed = before.ends_with("the ") || before.ends_with("this ");
        if numbered || pointed {
            let start = lower[..at]
                .char_indices()
                .rev()
                .nth(30)
                .map_or(0, |(i, _)| i);
            let end = (at + 40).min(lower.len());
            let end = (end..=lower.len())
                .find(|&i| lower.is_char_boundary(i))
                .unwrap_or(end);
            found.push(lower[start..end].replace('\n', " "));
        }
    }
    found
}

#[test]
fn the_readme_opens_with_the_two_commands_of_a_fresh_clone() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let first_block: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    let commands: Vec<&str> = first_block
        .iter()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release -- run", "cargo test --workspace"],
        "the README's first code block"
    );
    let ci = read(&Path::new(ROOT).join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim() == "cargo test --workspace"),
        ".ci/run runs the README's test command"
    );
}

#[test]
fn the_readme_is_a_short_guide() {
    let lines = read(&Path::new(ROOT).join("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}: the rest belongs in docs/)"
    );
}

#[test]
fn every_relative_link_of_the_guide_resolves() {
    let mut broken = Vec::new();
    for page in guide_pages() {
        for target in link_targets(&read(&page)) {
            if let Some(why) = dead(&page, &target) {
                broken.push(format!("{}: {why}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "dead links:\n{}", broken.join("\n"));
}

#[test]
fn the_guide_names_no_issue_numbers() {
    let mut found = Vec::new();
    for page in guide_pages() {
        for m in issue_mentions(&read(&page)) {
            found.push(format!("{}: …{m}…", page.display()));
        }
    }
    assert!(found.is_empty(), "issue numbers:\n{}", found.join("\n"));
}

/// Every Markdown page under results/ (the published tables' READMEs and the benchmark notes):
/// the report writes most of them, and a reader meets them without the tracker either.
fn results_pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let mut dirs = vec![Path::new(ROOT).join("results")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("results/ is readable") {
            let path = entry.expect("a readable results/ entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

#[test]
fn the_published_results_name_no_issue_numbers() {
    let pages = results_pages();
    assert!(pages.len() >= 3, "results/ holds its READMEs: {pages:?}");
    let mut found = Vec::new();
    for page in pages {
        for m in issue_mentions(&read(&page)) {
            found.push(format!("{}: …{m}…", page.display()));
        }
    }
    assert!(found.is_empty(), "issue numbers:\n{}", found.join("\n"));
}

/// The subcommands a `--help` lists under `Commands:` (not `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

fn help_of(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("the pipeline binary runs");
    assert!(out.status.success(), "pipeline {path:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

#[test]
fn no_help_text_names_an_issue_number() {
    let mut pending = vec![Vec::<String>::new()];
    let mut seen = 0;
    let mut found = Vec::new();
    while let Some(path) = pending.pop() {
        let help = help_of(&path);
        seen += 1;
        for m in issue_mentions(&help) {
            found.push(format!("pipeline {} --help: …{m}…", path.join(" ")));
        }
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    assert!(
        seen > 10,
        "only {seen} help texts were read: is `Commands:` still parsed?"
    );
    assert!(found.is_empty(), "issue numbers:\n{}", found.join("\n"));
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let page =
        "See [the store](docs/store.md#the-store) and `[x](not-a-link)`.\n```\n[y](z)\n```\n";
    assert_eq!(link_targets(page), ["docs/store.md#the-store"]);
    assert_eq!(slug(" The `cmd` contract"), "the-cmd-contract");
    assert_eq!(slug("What runs where?"), "what-runs-where");
    assert_eq!(issue_mentions("as issue 23's targets").len(), 1);
    assert_eq!(issue_mentions("(issue #7)").len(), 1);
    assert_eq!(issue_mentions("before this issue's change").len(), 1);
    assert!(issue_mentions("a known issue with sled").is_empty());
    let readme = Path::new(ROOT).join("README.md");
    assert!(dead(&readme, "no/such/file.md").is_some());
    assert!(dead(&readme, "..").is_some_and(|why| why.contains("outside")));
    assert!(dead(&readme, "README.md#no-such-heading").is_some());
    assert!(dead(&readme, "https://burn.dev").is_none());
}
