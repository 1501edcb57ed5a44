//! The house rule on structure: no import circle across more than three files inside
//! crates/cli or crates/engine, read by `scripts/import_circles.py` (its `use` lines and inline
//! `crate::` paths). A circle means none of its files can be read, changed or tested without
//! the others; the script prints each circle and what it holds when this fails.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The most files one import circle may span.
const MAX_CIRCLE: &str = "3";

#[test]
fn no_import_circle_spans_more_than_three_files() {
    let script = Path::new(ROOT).join("scripts/import_circles.py");
    let out = match Command::new("python3")
        .arg(&script)
        .args(["--max", MAX_CIRCLE, "crates/cli", "crates/engine"])
        .current_dir(ROOT)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: python3 is not available here ({e})");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("crates/cli:") && text.contains("crates/engine:"),
        "{text}"
    );
}

#[test]
fn the_script_finds_a_planted_circle() {
    let dir = std::env::temp_dir().join(format!("import-circle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("a temporary crate");
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "use crate::c::C;\npub struct B;\n"),
        ("c.rs", "pub struct C;\nfn f() -> crate::d::D { todo!() }\n"),
        ("d.rs", "use crate::a::{A, self};\npub struct D;\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).expect("a file of the temporary crate");
    }
    let out = match Command::new("python3")
        .arg(Path::new(ROOT).join("scripts/import_circles.py"))
        .args(["--max", MAX_CIRCLE])
        .arg(&dir)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: python3 is not available here ({e})");
            return;
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a 4-file circle must fail: {text}");
    assert!(
        text.contains("4 files: src/a.rs, src/b.rs, src/c.rs, src/d.rs"),
        "{text}"
    );
}

/// The `stage_*::<module>` paths a file of crates/cli names, other than a stage's public API
/// module (`api`) or its root (the stage's type, registered with the engine).
fn stage_internals(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("stage_") {
        let path: String = text[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let mut parts = path.split("::");
        let (Some(_stage), Some(next)) = (parts.next(), parts.next()) else {
            continue;
        };
        let is_module = next.chars().next().is_some_and(|c| c.is_lowercase());
        if is_module && next != "api" {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_cli_uses_each_stage_through_its_api_module_only() {
    let mut offending = Vec::new();
    let mut stack = vec![Path::new(ROOT).join("crates/cli")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("crates/cli is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                for p in stage_internals(&text) {
                    offending.push(format!("{}: {p}", path.display()));
                }
            }
        }
    }
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}

#[test]
fn a_stage_internal_path_is_found_and_the_api_is_not() {
    let text = "use stage_finetune::api::Predictor;\nuse stage_finetune::kinds::tagging;\n\
                r.register(Arc::new(stage_finetune::FinetuneStage));\n\
                let x = stage_pretrain::trainer::Trainer::new();";
    assert_eq!(
        stage_internals(text),
        [
            "stage_finetune::kinds::tagging",
            "stage_pretrain::trainer::Trainer::new"
        ]
    );
}
