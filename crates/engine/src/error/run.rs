//! Errors of running: the run itself ([`RunError`]), one instance run on its own
//! ([`InstanceError`]), and the controller's side of a cluster job ([`JobError`]).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{IndexError, StoreError, UserError};

/// Why [`crate::exec::run`] stopped the run. A failing stage is not one: it is an outcome.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run cannot start: a stage needs more GPUs than `--gpus`, or a cluster executor's
    /// tools or partitions are missing.
    #[error(transparent)]
    User(#[from] UserError),
    /// The index could not record a finished, cached or pulled instance.
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl RunError {
    /// The mistake of the user's this is, if it is one (the CLI exits with 2).
    pub fn user_error(&self) -> Option<&UserError> {
        match self {
            RunError::User(e) => Some(e),
            RunError::Index(_) => None,
        }
    }
}

/// Why an instance failed when run on its own: by `pipeline run-instance` in a cluster job
/// ([`crate::executor::instance::run_spec`]), or by a local run's thread
/// ([`crate::executor::instance::run_stage`]).
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The instance spec is unreadable, not a spec, or names a kind this binary lacks.
    #[error(transparent)]
    Spec(UserError),
    /// A directory of the instance (its log, output or work directory) could not be created.
    #[error("creating {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The output a previous attempt left could not be removed.
    #[error("emptying {}", dir.display())]
    EmptyOut {
        /// The output directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The stage's own `run` failed: its error, as the stage made it.
    #[error(transparent)]
    Stage(anyhow::Error),
    /// The stage panicked.
    #[error("the stage panicked: {message}")]
    Panicked {
        /// The panic's message; "unknown panic" when it was not a string.
        message: String,
    },
    /// The stage wrote a name the pipeline keeps for itself into its output.
    #[error("the stage wrote `{name}` into its output; that name is reserved for the pipeline")]
    Reserved {
        /// `MANIFEST.json` or `.log`.
        name: &'static str,
    },
}

impl InstanceError {
    /// The mistake of the user's this is, if it is one (the CLI exits with 2): a bad spec, or
    /// a stage that failed with a [`UserError`].
    pub fn user_error(&self) -> Option<&UserError> {
        match self {
            InstanceError::Spec(e) => Some(e),
            InstanceError::Stage(e) => e.downcast_ref::<UserError>(),
            _ => None,
        }
    }
}

/// Why a cluster job could not be prepared ([`crate::executor::slurm::script::Attempt::prepare`])
/// or its output committed ([`crate::executor::slurm::finish::commit_job`]).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The attempt's log directory (or its instance folder's marker) could not be created.
    #[error("creating {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// `spec.json` or `job.sh` could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The instance spec or the manifest could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The job succeeded, but its output directory did not show on this node in time.
    #[error(
        "the job succeeded but its output {} did not appear within {waited:?} (is .pipeline on \
         a filesystem the compute nodes share?)",
        dir.display()
    )]
    NotVisible {
        /// The output directory.
        dir: PathBuf,
        /// How long the controller waited (`fs_wait`).
        waited: Duration,
    },
    /// The stage wrote a name the pipeline keeps for itself into its output.
    #[error("the stage wrote `{name}` into its output; that name is reserved for the pipeline")]
    Reserved {
        /// `MANIFEST.json` or `.log`.
        name: &'static str,
    },
    /// The output could not be hashed or committed into the store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The job's logs could not be moved into the output's `.log/`.
    #[error("moving the logs into the artifact")]
    MoveLogs(#[source] io::Error),
    /// `MANIFEST.json` could not be written into the output.
    #[error("writing MANIFEST.json")]
    WriteManifest(#[source] io::Error),
}
