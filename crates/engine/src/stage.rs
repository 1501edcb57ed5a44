//! The `Stage` trait every stage kind implements (the built-in `cmd` kind here, the ALBERT
//! stages in `stages/*`), the context a stage runs with, and the registry of kinds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indicatif::ProgressBar;
use pipeline_params::ParamError;
use serde_json::{Map, Value};

/// A kind of stage: what `kind:` in `pipeline.yaml` names.
///
/// A stage reads its inputs, deps and params from the [`StageContext`] and writes everything it
/// produces under `ctx.out_dir`; the engine hashes that directory into the artifact. Its output
/// must depend only on those, never on time or thread count, or early cutoff cannot work.
pub trait Stage: Send + Sync {
    /// The name `kind:` gives it in `pipeline.yaml` (`cmd`, `pretrain`, …); unique in a
    /// [`Registry`].
    fn kind(&self) -> &'static str;

    /// A digest of the code that decides the stage's output, made at build time by
    /// `code_version::emit` in the stage crate's `build.rs`.
    fn code_version(&self) -> &'static str;

    /// Whether a stage of this kind takes every instance of a matrix dep instead of expanding
    /// with it (a report does). `aggregate:` in `pipeline.yaml` overrides it.
    fn aggregates(&self) -> bool {
        false
    }

    /// Every parameter the kind takes, so that `--set stage.param=…` can set one that
    /// `pipeline.yaml` leaves at its default, and a misspelt one is an error at its line.
    /// Empty means any (the `cmd` kind). Matrix coordinates are always allowed: an instance's
    /// params include its own matrix values and those it inherits from its deps.
    fn known_params(&self) -> &'static [&'static str] {
        &[]
    }

    /// Checks params before anything runs; the message is shown with the stage's position.
    fn validate(&self, _params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        Ok(())
    }

    /// Makes the stage's output in `ctx.out_dir`. An error (or a panic) fails the stage: the
    /// engine keeps its logs under `.pipeline/failed/` and commits nothing. This is a stage
    /// body, so its error is an `anyhow::Error`; the engine passes it on as
    /// [`crate::error::InstanceError::Stage`].
    fn run(&self, ctx: &StageContext) -> anyhow::Result<()>;
}

/// A dep's artifact, as a stage sees it.
#[derive(Debug, Clone)]
pub struct DepArtifact {
    /// The dep's instance name (`pretrain@share_type=all`).
    pub instance: String,
    /// The dep's stage name (`pretrain`).
    pub stage: String,
    /// The dep's stage kind (`pretrain` for a stage named `pretrain_share_none`).
    pub kind: String,
    /// The dep's matrix coordinates (name → value); empty outside a matrix.
    pub coords: BTreeMap<String, Value>,
    /// The dep's artifact directory, read-only to the stage.
    pub dir: PathBuf,
}

/// Everything a stage runs with: who it is, its params, its inputs and deps, and where to
/// write.
pub struct StageContext<'a> {
    /// The instance's name (`finetune@task=tnews`).
    pub instance: &'a str,
    /// Its stage name (`finetune`).
    pub stage: &'a str,
    /// Its params: `pipeline.yaml`'s with `${...}` substituted and `--set` applied, its
    /// matrix values, and the coordinates it inherits from its deps.
    pub params: &'a Map<String, Value>,
    /// What its kind needs besides params: for `cmd`, the command and declared outputs.
    pub spec: &'a Value,
    /// The workspace root; relative paths in params are relative to it.
    pub root: &'a Path,
    /// Empty when the stage starts; becomes the artifact.
    pub out_dir: &'a Path,
    /// Kept across failed attempts with the same fingerprint (checkpoints), removed on success.
    pub work_dir: &'a Path,
    /// Where the stage's logs go; saved with the artifact, or kept apart if the stage fails.
    pub log_dir: &'a Path,
    /// The files its `inputs:` match, sorted by key.
    pub inputs: &'a [PathBuf],
    /// Its deps' artifacts, one per dep instance.
    pub deps: &'a [DepArtifact],
    /// A line on the terminal for this stage: set a length and advance it, or a message.
    pub progress: &'a ProgressBar,
}

impl StageContext<'_> {
    /// The one dep of stage `name` (for stages that expand with their deps), else the one dep
    /// of kind `name`: a `mask` stage reads its corpus from `deps: [clean_general, vocab]` as
    /// from `deps: [clean, vocab]`, so that an ablation can name its variants after what they
    /// change. Two deps of that kind and none of that name: none (the caller's error says
    /// which deps it needs).
    pub fn dep(&self, name: &str) -> Option<&DepArtifact> {
        let by_name = self
            .deps
            .iter()
            .find(|d| d.stage == name || d.instance == name);
        by_name.or_else(|| {
            let mut of_kind = self.deps.iter().filter(|d| d.kind == name);
            let one = of_kind.next()?;
            of_kind.next().is_none().then_some(one)
        })
    }
}

/// The stage kinds a `pipeline` binary knows.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Arc<dyn Stage>>,
}

impl Registry {
    /// The kinds built into the engine (`cmd`).
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        r.register(Arc::new(crate::stages::cmd::CmdStage));
        r
    }

    /// Adds a kind; one of the same [`Stage::kind`] is replaced.
    pub fn register(&mut self, stage: Arc<dyn Stage>) {
        self.kinds.insert(stage.kind(), stage);
    }

    /// The kind named `kind`; `None` if this binary does not have it.
    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Stage>> {
        self.kinds.get(kind)
    }

    /// The names of the kinds, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.kinds.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(stage: &str, kind: &str) -> DepArtifact {
        DepArtifact {
            instance: stage.into(),
            stage: stage.into(),
            kind: kind.into(),
            coords: BTreeMap::new(),
            dir: PathBuf::from(stage),
        }
    }

    fn found(deps: &[DepArtifact], name: &str) -> Option<String> {
        let (params, spec, bar) = (Map::new(), Value::Null, ProgressBar::hidden());
        let ctx = StageContext {
            instance: "x",
            stage: "x",
            params: &params,
            spec: &spec,
            root: Path::new("."),
            out_dir: Path::new("out"),
            work_dir: Path::new("work"),
            log_dir: Path::new("log"),
            inputs: &[],
            deps,
            progress: &bar,
        };
        ctx.dep(name).map(|d| d.stage.clone())
    }

    #[test]
    fn a_dep_is_found_by_its_name_then_by_its_kind_when_only_one_has_it() {
        let deps = [dep("clean_general", "clean"), dep("vocab", "vocab")];
        assert_eq!(found(&deps, "clean"), Some("clean_general".into()));
        assert_eq!(found(&deps, "vocab"), Some("vocab".into()));
        assert_eq!(found(&deps, "mask"), None);
        // The name wins over the kind; two of a kind and neither named: none.
        let deps = [dep("clean_general", "clean"), dep("clean", "clean")];
        assert_eq!(found(&deps, "clean"), Some("clean".into()));
        let deps = [dep("clean_a", "clean"), dep("clean_b", "clean")];
        assert_eq!(found(&deps, "clean"), None);
    }
}
