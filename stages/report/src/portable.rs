//! Paths in what the report publishes are relative to the workspace root, never the absolute
//! paths of the machine that ran the experiment: `--set data=/work/shared/datasets` puts
//! `/work/shared/datasets/lcqmc/dev.tsv` into every fine-tuning run's metrics.json, and
//! results/ is committed and read elsewhere. The report rewrites the deps' metrics before it
//! builds anything, so every table, sentence and JSON file sees the portable form.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// The keys whose string values are file or directory paths in the stages' metrics.
const PATH_KEYS: &[&str] = &["path", "init_from"];

/// `path` relative to `root` when it is absolute (`../shared/datasets/lcqmc/dev.tsv` for a
/// workspace at `/work/main`); relative paths are kept as they are.
pub fn relative(path: &str, root: &Path) -> String {
    let p = Path::new(path);
    if !p.is_absolute() {
        return path.to_string();
    }
    let (pc, rc) = (normal(p), normal(root));
    let common = pc.iter().zip(&rc).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..rc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c.as_os_str());
    }
    if out.as_os_str().is_empty() {
        ".".into()
    } else {
        out.to_string_lossy().replace('\\', "/")
    }
}

/// The components of a path without `.`.
fn normal(p: &Path) -> Vec<Component<'_>> {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// Rewrites every absolute path under a path key of `v`, at any depth.
pub fn relativize(v: &mut Value, root: &Path) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                match x {
                    Value::String(s) if PATH_KEYS.contains(&k.as_str()) => {
                        *s = relative(s, root);
                    }
                    _ => relativize(x, root),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| relativize(x, root)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absolute_paths_become_relative_to_the_workspace() {
        let root = Path::new("/work/main");
        assert_eq!(
            relative("/work/shared/datasets/lcqmc/dev.tsv", root),
            "../shared/datasets/lcqmc/dev.tsv"
        );
        assert_eq!(
            relative("/work/main/datasets/fixtures/lcqmc/dev.tsv", root),
            "datasets/fixtures/lcqmc/dev.tsv"
        );
        assert_eq!(relative("datasets/x.tsv", root), "datasets/x.tsv");
        assert_eq!(relative("/work/main", root), ".");
    }

    #[test]
    fn every_path_key_is_rewritten_and_nothing_else() {
        let mut v = json!({
            "protocol": {"train": {"files": [{"path": "/data/lcqmc/dev.tsv", "rows": 3}]},
                         "eval": [{"name": "/not/a/path/key", "files": [{"path": "/data/t.tsv"}]}]},
            "init_from": "/models/hf",
            "note": "/kept/as/is"
        });
        relativize(&mut v, Path::new("/data"));
        assert_eq!(v["protocol"]["train"]["files"][0]["path"], "lcqmc/dev.tsv");
        assert_eq!(v["protocol"]["eval"][0]["files"][0]["path"], "t.tsv");
        assert_eq!(v["protocol"]["eval"][0]["name"], "/not/a/path/key");
        assert_eq!(v["init_from"], "../models/hf");
        assert_eq!(v["note"], "/kept/as/is");
    }
}
