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
