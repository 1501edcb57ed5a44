//! The house rule on task kinds: a kind is one module plus its registration. Outside its own
//! module (`crates/tasks/src/kinds/<kind>.rs`, or a folder `crates/tasks/src/kinds/<kind>/`)
//! a `TaskKind` variant is named only where the kinds are registered, so that a new kind needs
//! no `match` anywhere else and a place that decides by the kind cannot creep back in. Test
//! code is not looked at: a test names the kind it tests.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where the kinds are registered: the enums and their names (`TaskKind`, `Task`), the
/// examples of each kind (`Examples`, one variant a kind, and the reader each format's files
/// are read with), the kinds' registry (`pipeline_tasks::kinds::of` and the order saved models
/// are matched in), and the baselines each kind gets.
const REGISTRATION: [&str; 4] = [
    "crates/tasks/src/task/mod.rs",
    "crates/tasks/src/protocol/examples.rs",
    "crates/tasks/src/kinds/mod.rs",
    "stages/baseline/src/kinds.rs",
];

/// Where each kind's own module is: `KINDS/<kind>.rs`, or the folder `KINDS/<kind>/`.
const KINDS: &str = "crates/tasks/src/kinds/";

/// The variants of `TaskKind`, read from its definition.
fn variants() -> Vec<String> {
    let text = read("crates/tasks/src/task/mod.rs");
    let body = text
        .split_once("pub enum TaskKind {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(body, _)| body)
        .expect("crates/tasks/src/task/mod.rs defines `pub enum TaskKind`");
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && !l.is_empty())
        .map(|l| l.trim_end_matches(',').to_string())
        .collect()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `PairRegression` → `pair_regression`, a kind module's name.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// The Rust files under `dir`, relative to the root, test files left out.
fn sources(dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(Path::new(ROOT).join(dir)) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let rel = format!("{dir}/{name}");
        if path.is_dir() {
            if !matches!(name, "tests" | "target" | "benches" | "fixtures") {
                sources(&rel, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(rel);
        }
    }
}

/// The code of a file before its first `#[cfg(test)]`: the tests sit at a file's end.
fn code(text: &str) -> &str {
    text.split_once("#[cfg(test)]")
        .map_or(text, |(code, _)| code)
}

/// The lines of `text` that name `TaskKind::<variant>` (not a longer variant it begins).
fn mentions(text: &str, variant: &str) -> Vec<usize> {
    let needle = format!("TaskKind::{variant}");
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            line.match_indices(&needle).any(|(at, _)| {
                let next = line[at + needle.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Whether `file` is (in) the module of kind `variant`: `KINDS/<kind>.rs` or under
/// `KINDS/<kind>/`.
fn is_own_module(file: &str, variant: &str) -> bool {
    let Some(rest) = file.strip_prefix(KINDS) else {
        return false;
    };
    let module = snake(variant);
    rest == format!("{module}.rs") || rest.starts_with(&format!("{module}/"))
}

/// Every place outside a kind's module that names a kind, as `file:line: TaskKind::V`.
fn stray_mentions(variants: &[String], files: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        if REGISTRATION.contains(&file.as_str()) {
            continue;
        }
        let text = read(file);
        for v in variants {
            if is_own_module(file, v) {
                continue;
            }
            for line in mentions(code(&text), v) {
                found.push(format!("{file}:{line}: TaskKind::{v}"));
            }
        }
    }
    found
}

#[test]
fn a_kind_is_named_only_in_its_module_and_where_it_is_registered() {
    let variants = variants();
    assert!(
        variants.iter().any(|v| v == "PairRegression") && variants.len() >= 7,
        "{variants:?}"
    );
    let mut files = Vec::new();
    for dir in ["crates", "stages"] {
        sources(dir, &mut files);
    }
    assert!(
        files
            .iter()
            .any(|f| f == "stages/finetune/src/api/predictor.rs")
    );
    assert!(
        files
            .iter()
            .any(|f| f == "crates/tasks/src/kinds/pair_regression.rs")
    );
    let stray = stray_mentions(&variants, &files);
    assert!(
        stray.is_empty(),
        "a task kind is decided outside its module (crates/tasks/src/kinds/<kind>.rs): ask \
         the kind (`kinds::of(kind)`, a `Kind` method) instead of matching on it, or register \
         it in one of {REGISTRATION:?}:\n{}",
        stray.join("\n")
    );
}

#[test]
fn a_mention_is_found_and_a_longer_variant_is_not_it() {
    let text = "match k {\n    TaskKind::PairRegression => 1,\n    TaskKind::Pair => 2,\n}";
    assert_eq!(mentions(text, "Pair"), vec![3]);
    assert_eq!(mentions(text, "PairRegression"), vec![2]);
    assert_eq!(snake("ReadingChoice"), "reading_choice");
    let with_tests = "fn f() {}\n#[cfg(test)]\nmod tests { TaskKind::Span }";
    assert!(mentions(code(with_tests), "Span").is_empty());
}

#[test]
fn a_kinds_module_is_its_file_or_its_folder() {
    assert!(is_own_module(
        "crates/tasks/src/kinds/pair_regression.rs",
        "PairRegression"
    ));
    assert!(is_own_module(
        "crates/tasks/src/kinds/span/windows.rs",
        "Span"
    ));
    assert!(!is_own_module(
        "crates/tasks/src/kinds/pair.rs",
        "PairRegression"
    ));
    assert!(!is_own_module(
        "crates/tasks/src/kinds/pair_regression.rs",
        "Pair"
    ));
    assert!(!is_own_module("stages/finetune/src/kinds/pair.rs", "Pair"));
}
