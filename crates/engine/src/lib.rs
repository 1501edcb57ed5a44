//! The pipeline engine: `pipeline.yaml` schema and validation, the DAG of stage instances,
//! content fingerprints, the executor, the artifact store with its sled index, and the
//! read-only views (`status`, `show`, `runs`, `metrics`) and upkeep (`gc`, `verify`) the CLI
//! prints. It knows nothing about ALBERT: stage kinds plug in through [`stage::Stage`].

#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod exec;
pub mod executor;
pub mod fingerprint;
pub mod hash;
pub mod index;
mod index_snapshot;
pub mod inspect;
pub mod maintain;
pub mod manifest;
/// The split of a stage's metrics into the digested record and the full one in `.log/`.
pub use pipeline_metrics as metrics;
pub mod outputs;
pub mod owned;
pub mod plan;
pub mod procgroup;
pub mod remote;
pub mod remotes;
pub mod stage;
pub mod stages;
pub mod workspace;
pub mod yaml;

use std::path::Path;

pub use error::UserError;
/// What a stage kind's `validate` returns: its params' problem, shown at the stage's line.
pub use pipeline_params::ParamError;
pub use stage::{DepArtifact, Registry, Stage, StageContext};

use config::PipelineFile;
use plan::{Overrides, Plan};
use workspace::Workspace;

/// A loaded, expanded pipeline and the workspace it lives in.
pub struct Pipeline {
    /// The workspace: the pipeline file's directory and its `.pipeline/` store.
    pub ws: Workspace,
    /// The expanded DAG of stage instances.
    pub plan: Plan,
    /// The stage kinds the pipeline was checked against and runs with.
    pub registry: Registry,
}

impl Pipeline {
    /// Reads `file`, applies `--set` flags and expands the DAG. Every mistake in the file or the
    /// flags comes back as a [`UserError`].
    pub fn load(file: &Path, sets: &[String], registry: Registry) -> Result<Pipeline, UserError> {
        let file = PipelineFile::load(file)?;
        let overrides = Overrides::parse(sets)?;
        let plan = Plan::build(file, &overrides, &registry)?;
        let ws = Workspace::new(&plan.root);
        Ok(Pipeline { ws, plan, registry })
    }
}
