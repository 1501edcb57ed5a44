//! Build-script helper that turns a crate's source code into a "code version": a blake3 digest
//! of its `Cargo.toml` and `src/` tree, and of the workspace crates it uses through `path`
//! dependencies. Stage crates call [`emit`] from `build.rs`; the engine folds the digest into
//! every fingerprint of that stage kind, so editing a stage's code re-runs that stage only.

#![warn(missing_docs)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Hashes the crate being built (and its workspace path dependencies, except `exclude`) and
/// exports the digest as the compile-time environment variable `var`.
///
/// `exclude` names packages whose code does not affect the stage's output (typically the
/// engine, which only supplies the `Stage` trait).
pub fn emit(var: &str, exclude: &[&str]) {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run from build.rs"));
    let mut crates = BTreeSet::new();
    collect_crates(&manifest_dir, exclude, &mut crates);
    let mut hasher = blake3::Hasher::new();
    for dir in &crates {
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        let mut files = vec![dir.join("Cargo.toml")];
        list_files(&dir.join("src"), &mut files);
        hash_files(&mut hasher, dir, &files);
    }
    println!("cargo:rustc-env={var}={}", hasher.finalize().to_hex());
}

/// Hashes only the named files of the crate being built (paths relative to its manifest
/// directory) and exports the digest as `var`. For a built-in stage that lives inside a larger
/// crate, such as the engine's `cmd` kind.
pub fn emit_files(var: &str, files: &[&str]) {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run from build.rs"));
    let files: Vec<PathBuf> = files.iter().map(|f| manifest_dir.join(f)).collect();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let mut hasher = blake3::Hasher::new();
    hash_files(&mut hasher, &manifest_dir, &files);
    println!("cargo:rustc-env={var}={}", hasher.finalize().to_hex());
}

fn hash_files(hasher: &mut blake3::Hasher, base: &Path, files: &[PathBuf]) {
    for file in files {
        // Relative names keep the digest independent of where the checkout lives.
        let rel = file.strip_prefix(base).unwrap_or(file);
        let name = rel.to_string_lossy().replace('\\', "/");
        let bytes = fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
}

fn list_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            list_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Follows `path = ...` entries of `[dependencies]` (not dev- or build-dependencies: they do not
/// end up in the stage's code).
fn collect_crates(dir: &Path, exclude: &[&str], seen: &mut BTreeSet<PathBuf>) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    if !seen.insert(dir.clone()) {
        return;
    }
    let text = fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    let Ok(doc) = text.parse::<toml::Table>() else {
        return;
    };
    let workspace_deps = workspace_path_deps(&dir);
    let Some(deps) = doc.get("dependencies").and_then(|d| d.as_table()) else {
        return;
    };
    for (name, spec) in deps {
        let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(name);
        if exclude.contains(&package) {
            continue;
        }
        let path = if let Some(p) = spec.get("path").and_then(|p| p.as_str()) {
            Some(dir.join(p))
        } else if spec.get("workspace").and_then(|w| w.as_bool()) == Some(true) {
            workspace_deps
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| p.clone())
        } else {
            None
        };
        if let Some(path) = path {
            collect_crates(&path, exclude, seen);
        }
    }
}

/// `[workspace.dependencies]` entries with a `path`, resolved against the workspace root.
fn workspace_path_deps(start: &Path) -> Vec<(String, PathBuf)> {
    let mut dir = start.parent();
    while let Some(d) = dir {
        if let Ok(text) = fs::read_to_string(d.join("Cargo.toml"))
            && let Ok(doc) = text.parse::<toml::Table>()
            && let Some(ws) = doc.get("workspace").and_then(|w| w.as_table())
        {
            let Some(deps) = ws.get("dependencies").and_then(|d| d.as_table()) else {
                return Vec::new();
            };
            return deps
                .iter()
                .filter_map(|(n, s)| Some((n.clone(), d.join(s.get("path")?.as_str()?))))
                .collect();
        }
        dir = d.parent();
    }
    Vec::new()
}
