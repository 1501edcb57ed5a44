//! One stage instance, run on its own: what the hidden `pipeline run-instance SPEC.json`
//! subcommand does inside a cluster job, and what a local run does in a thread.
//!
//! The spec holds everything the stage needs (params, command, input paths, deps' artifact
//! directories, where to write), so the job does not re-read `pipeline.yaml` (which the user may
//! edit while jobs queue) nor touch the store: it writes into the directories it is given and
//! exits 0 or 1; hashing, the manifest and the rename into the store are the controller's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{InstanceError, UserError};
use crate::manifest::{LOG_DIR, MANIFEST};
use crate::stage::{DepArtifact, Registry, Stage, StageContext};

/// The file, in the job's log directory, that holds the stage's error when it fails.
pub const ERROR_FILE: &str = "error.txt";

/// A dep of the instance, as the spec carries it (what becomes a [`DepArtifact`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpecDep {
    /// The dep's instance name (`pretrain@share_type=all`).
    pub instance: String,
    /// The dep's stage name.
    pub stage: String,
    /// Empty in a spec written before kinds travelled (a dep is then found by its name only).
    #[serde(default)]
    pub kind: String,
    /// The dep's matrix coordinates (empty outside a matrix).
    pub coords: BTreeMap<String, Value>,
    /// The dep's artifact directory.
    pub dir: PathBuf,
}

/// One instance, ready to run anywhere that sees the workspace at the same paths.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceSpec {
    /// The instance's name (`finetune@task=tnews`).
    pub instance: String,
    /// Its stage name.
    pub stage: String,
    /// Its stage kind, which this binary's registry must have.
    pub kind: String,
    /// Its fingerprint, named in the job script's comment (nothing here checks it).
    pub fingerprint: String,
    /// Its resolved params.
    pub params: Map<String, Value>,
    /// What its kind needs besides params: for `cmd`, the command and declared outputs.
    pub spec: Value,
    /// The workspace root, which relative paths in params are resolved against.
    pub root: PathBuf,
    /// The files its `inputs` match, sorted by key.
    pub inputs: Vec<PathBuf>,
    /// Its deps' artifacts.
    pub deps: Vec<SpecDep>,
    /// Emptied when the instance starts; becomes the artifact.
    pub out: PathBuf,
    /// The stage's log directory (stdout, stderr, and `error.txt` when it fails).
    pub log: PathBuf,
    /// Kept across attempts (checkpoints): a retry resumes from it.
    pub work: PathBuf,
}

/// Runs a stage with panics turned into errors, then checks that it left the names the
/// pipeline reserves alone. The stage's own error comes back as [`InstanceError::Stage`].
pub fn run_stage(kind: &dyn Stage, ctx: &StageContext) -> Result<(), InstanceError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kind.run(ctx))) {
        Ok(ran) => ran.map_err(InstanceError::Stage)?,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            return Err(InstanceError::Panicked { message });
        }
    }
    for name in [MANIFEST, LOG_DIR] {
        if ctx.out_dir.join(name).exists() {
            return Err(InstanceError::Reserved { name });
        }
    }
    Ok(())
}

/// `pipeline run-instance SPEC.json`: runs the instance the spec describes into its `out`
/// directory. An unreadable spec is [`InstanceError::Spec`]; a failing stage leaves its
/// message in `log/error.txt` and returns the error.
pub fn run_spec(registry: &Registry, path: &Path) -> Result<(), InstanceError> {
    let bytes = std::fs::read(path).map_err(|e| {
        InstanceError::Spec(
            UserError::new(format!("cannot read the instance spec {}: {e}", path.display()))
                .with_help("`run-instance` is started by `pipeline run` on a cluster node; it is not meant to be run by hand"),
        )
    })?;
    let spec: InstanceSpec = serde_json::from_slice(&bytes).map_err(|e| {
        InstanceError::Spec(UserError::new(format!(
            "{}: not an instance spec: {e}",
            path.display()
        )))
    })?;
    let kind = registry.get(&spec.kind).ok_or_else(|| {
        InstanceError::Spec(
            UserError::new(format!(
                "this `pipeline` binary has no stage kind `{}` (instance `{}`)",
                spec.kind, spec.instance
            ))
            .with_help("the cluster nodes must run the same `pipeline` build as the login node"),
        )
    })?;
    std::fs::create_dir_all(&spec.log).map_err(creating(&spec.log))?;
    let _ = std::fs::remove_file(spec.log.join(ERROR_FILE));
    let result = (|| -> Result<(), InstanceError> {
        // A retry starts from an empty output (the work directory keeps its checkpoints).
        // `out` is the attempt's own folder, named by the controller's spec (remove_dir_all
        // does not follow symlinks inside it, and removes only the link if it is one).
        if spec.out.exists() {
            std::fs::remove_dir_all(&spec.out).map_err(|source| InstanceError::EmptyOut {
                dir: spec.out.clone(),
                source,
            })?;
        }
        std::fs::create_dir_all(&spec.out).map_err(creating(&spec.out))?;
        crate::owned::create_in_marked(&spec.work).map_err(creating(&spec.work))?;
        let deps: Vec<DepArtifact> = spec
            .deps
            .iter()
            .map(|d| DepArtifact {
                instance: d.instance.clone(),
                stage: d.stage.clone(),
                kind: d.kind.clone(),
                coords: d.coords.clone(),
                dir: d.dir.clone(),
            })
            .collect();
        let bar = ProgressBar::hidden();
        let ctx = StageContext {
            instance: &spec.instance,
            stage: &spec.stage,
            params: &spec.params,
            spec: &spec.spec,
            root: &spec.root,
            out_dir: &spec.out,
            work_dir: &spec.work,
            log_dir: &spec.log,
            inputs: &spec.inputs,
            deps: &deps,
            progress: &bar,
        };
        run_stage(kind.as_ref(), &ctx)
    })();
    if let Err(e) = &result {
        let text = crate::error::chain_text(e);
        let _ = std::fs::write(spec.log.join(ERROR_FILE), format!("{text}\n"));
    }
    result
}

/// The error of failing to create `dir`.
fn creating(dir: &Path) -> impl FnOnce(std::io::Error) -> InstanceError + '_ {
    move |source| InstanceError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_runs_a_cmd_into_its_directories() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let spec = InstanceSpec {
            instance: "hello".into(),
            stage: "hello".into(),
            kind: "cmd".into(),
            fingerprint: "f".into(),
            params: Map::new(),
            spec: serde_json::json!({"cmd": "echo hi > $PIPELINE_OUT/hi.txt; echo log", "outs": ["hi.txt"]}),
            root: d.to_path_buf(),
            inputs: vec![],
            deps: vec![],
            out: d.join("a/out"),
            log: d.join("a/log"),
            work: d.join("w"),
        };
        std::fs::create_dir_all(d.join("a/out")).unwrap();
        std::fs::write(d.join("a/out/stale"), "x").unwrap();
        std::fs::write(d.join("spec.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
        run_spec(&Registry::builtin(), &d.join("spec.json")).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("a/out/hi.txt")).unwrap(),
            "hi\n"
        );
        assert!(!d.join("a/out/stale").exists());
        assert_eq!(
            std::fs::read_to_string(d.join("a/log/stdout.txt")).unwrap(),
            "log\n"
        );

        let mut bad = spec.clone();
        bad.spec = serde_json::json!({"cmd": "exit 3", "outs": []});
        std::fs::write(d.join("spec.json"), serde_json::to_vec(&bad).unwrap()).unwrap();
        let e = run_spec(&Registry::builtin(), &d.join("spec.json")).unwrap_err();
        assert!(format!("{e:#}").contains("status 3"));
        let kept = std::fs::read_to_string(d.join("a/log").join(ERROR_FILE)).unwrap();
        assert!(kept.contains("status 3"), "{kept}");

        std::fs::write(d.join("spec.json"), "{").unwrap();
        let e = run_spec(&Registry::builtin(), &d.join("spec.json")).unwrap_err();
        assert!(e.user_error().is_some());
    }
}
