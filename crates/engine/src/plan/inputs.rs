//! A stage's `inputs`: `${vars.x}` substituted, globs expanded into files (directories walked,
//! `.pipeline` and `.git` skipped), `!PATTERN` exclusions, keys relative to the workspace root.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{InputFile, subst_str};
use crate::config::{Located, PipelineFile, StageDecl};
use crate::error::UserError;

/// The files a stage's `inputs` name, sorted and deduplicated, minus those a `!PATTERN`
/// drops; a missing file is kept as the error for when the stage is selected.
pub(super) fn inputs_of(
    file: &PipelineFile,
    root: &Path,
    decl: &StageDecl,
    vars: &Map<String, Value>,
) -> Result<(Vec<InputFile>, Option<UserError>), UserError> {
    let mut inputs = Vec::new();
    let mut excludes = Vec::new();
    let mut input_error = None;
    let mut expanded = Vec::new();
    for pattern in &decl.inputs {
        let p = subst_str(file, pattern.mark, &pattern.value, vars, None)?;
        match p.strip_prefix('!') {
            Some(negated) => excludes.push(exclusion(file, root, pattern, negated)?),
            None => expanded.push((pattern, p)),
        }
    }
    let mut store = StoreReach::new(&root.join(".pipeline"));
    for (pattern, p) in expanded {
        // A malformed pattern is a mistake in the file; a missing file is only a
        // problem for runs that need this stage.
        if is_glob(&p) {
            check_glob(file, pattern, &p)?;
        }
        match resolve_inputs(file, root, pattern, &p) {
            Ok(mut found) => {
                found.retain(|i| !excludes.iter().any(|x| x.matches_path(&i.path)));
                if let Some(inside) = found.iter().find(|i| store.reaches(&i.path)) {
                    return Err(into_the_store(file, pattern, &p, &inside.key));
                }
                inputs.extend(found);
            }
            Err(e) => {
                input_error.get_or_insert(e);
            }
        }
    }
    inputs.sort_by(|a, b| a.key.cmp(&b.key));
    inputs.dedup_by(|a, b| a.key == b.key);
    Ok((inputs, input_error))
}

/// Whether a path lies in the store once symlinks are resolved: `data -> .pipeline` in the
/// workspace reaches it as surely as `.pipeline/artifacts` does. Each directory is resolved
/// once (a stage may have 10^5 input files in a few folders); a file that is itself a symlink
/// is resolved on its own.
struct StoreReach {
    /// The store as written and resolved (the same path while `.pipeline/` does not exist).
    state: PathBuf,
    resolved: PathBuf,
    dirs: std::collections::HashMap<PathBuf, bool>,
}

impl StoreReach {
    fn new(state: &Path) -> StoreReach {
        StoreReach {
            state: state.to_path_buf(),
            resolved: state.canonicalize().unwrap_or_else(|_| state.to_path_buf()),
            dirs: std::collections::HashMap::new(),
        }
    }

    fn inside(&self, resolved: &Path) -> bool {
        resolved.starts_with(&self.resolved) || resolved.starts_with(&self.state)
    }

    fn reaches(&mut self, path: &Path) -> bool {
        if path.starts_with(&self.state) {
            return true;
        }
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            return path.canonicalize().is_ok_and(|r| self.inside(&r));
        }
        let Some(dir) = path.parent() else {
            return false;
        };
        if let Some(&known) = self.dirs.get(dir) {
            return known;
        }
        let known = dir.canonicalize().is_ok_and(|r| self.inside(&r));
        self.dirs.insert(dir.to_path_buf(), known);
        known
    }
}

/// An input inside `.pipeline/` changes whenever a run commits, so the stage would flip between
/// failing and re-running.
fn into_the_store(
    file: &PipelineFile,
    pattern: &Located<String>,
    expanded: &str,
    first: &str,
) -> UserError {
    file.error_at(
        pattern.mark,
        format!("input pattern `{expanded}` reaches into the pipeline's own store (`{first}`)"),
    )
    .with_help("inputs are files of the workspace; take another stage's output with `deps:`, or add `!.pipeline/**` to `inputs`")
}

fn resolve_inputs(
    file: &PipelineFile,
    root: &Path,
    pattern: &Located<String>,
    expanded: &str,
) -> Result<Vec<InputFile>, UserError> {
    let full = if Path::new(expanded).is_absolute() {
        PathBuf::from(expanded)
    } else {
        root.join(expanded)
    };
    let mut files = Vec::new();
    if is_glob(expanded) {
        let paths = glob::glob(&full.to_string_lossy()).map_err(|e| {
            file.error_at(
                pattern.mark,
                format!("input pattern `{expanded}` is not a valid glob: {}", e.msg),
            )
        })?;
        for p in paths.flatten() {
            collect_files(&p, &mut files);
        }
        if files.is_empty() {
            return Err(file
                .error_at(
                    pattern.mark,
                    format!("input pattern `{expanded}` matches no file"),
                )
                .with_help(format!("it was looked up relative to {}", root.display())));
        }
    } else {
        if !full.exists() {
            return Err(file
                .error_at(pattern.mark, format!("input `{expanded}` does not exist"))
                .with_help(format!("it was looked up as {}", full.display())));
        }
        collect_files(&full, &mut files);
    }
    Ok(files
        .into_iter()
        .map(|path| {
            let key = match path.strip_prefix(root) {
                Ok(rel) => rel.to_string_lossy().into_owned(),
                Err(_) => path.to_string_lossy().into_owned(),
            };
            InputFile { key, path }
        })
        .collect())
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Errors point into the pattern as the user wrote it, not the absolute path built from it.
fn check_glob(
    file: &PipelineFile,
    pattern: &Located<String>,
    expanded: &str,
) -> Result<glob::Pattern, UserError> {
    glob::Pattern::new(expanded).map_err(|e| {
        file.error_at(
            pattern.mark,
            format!(
                "input pattern `{expanded}` is not a valid glob: {} (at character {})",
                e.msg,
                e.pos + 1
            ),
        )
    })
}

/// `!PATTERN` in `inputs` drops the files it matches from those the other patterns found
/// (`["data/*/*.txt", "!data/*/SOURCE.txt"]`). It may match nothing.
fn exclusion(
    file: &PipelineFile,
    root: &Path,
    pattern: &Located<String>,
    negated: &str,
) -> Result<glob::Pattern, UserError> {
    check_glob(file, pattern, negated)?;
    let full = if Path::new(negated).is_absolute() {
        PathBuf::from(negated)
    } else {
        root.join(negated)
    };
    check_glob(file, pattern, &full.to_string_lossy())
}

/// A file, or every file below a directory (skipping the pipeline's own state and VCS dirs).
/// A symlink to a directory is followed once: a link back up the tree is not walked again.
fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    collect_files_once(path, out, &mut std::collections::HashSet::new());
}

fn collect_files_once(
    path: &Path,
    out: &mut Vec<PathBuf>,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) {
    use std::os::unix::fs::MetadataExt;
    if path.is_dir() {
        let first_visit = std::fs::metadata(path).is_ok_and(|m| seen.insert((m.dev(), m.ino())));
        if !first_visit {
            return;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        children.sort();
        for child in children {
            let name = child
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name == ".pipeline" || name == ".git" {
                continue;
            }
            collect_files_once(&child, out, seen);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}
