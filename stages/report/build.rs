//! The `report` kind's code version: this crate and the libraries it uses, not the engine, the
//! published figures in `published/` and the tables' columns and texts in `data/` (data the
//! report prints, so a corrected figure or sentence re-runs the report).
use std::path::Path;

fn main() {
    code_version::emit("STAGE_CODE_VERSION", &["pipeline-engine"]);
    let mut files = Vec::new();
    for dir in ["published", "data"] {
        println!("cargo:rerun-if-changed={dir}");
        files.extend(
            std::fs::read_dir(Path::new(dir))
                .map(|d| {
                    d.filter_map(|e| e.ok().map(|e| e.path()))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        );
    }
    files.sort();
    let mut h = blake3::Hasher::new();
    for f in files {
        println!("cargo:rerun-if-changed={}", f.display());
        h.update(f.file_name().unwrap_or_default().as_encoded_bytes());
        h.update(&std::fs::read(&f).unwrap_or_default());
    }
    println!(
        "cargo:rustc-env=PUBLISHED_DATA_VERSION={}",
        h.finalize().to_hex()
    );
}
