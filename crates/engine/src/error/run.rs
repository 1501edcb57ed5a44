//! Errors of running: the run itself ([`RunError`]), one instance run on its own
//! ([`InstanceError`]), and the controller's side of a cluster job ([`JobError`]).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{IndexError, StoreError, UserError, write_sources};

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
///
/// Its `{:#}` prints the sources after the message, as `anyhow` does: the job tracker records
/// the error that way.
#[derive(Debug)]
pub enum JobError {
    /// The attempt's log directory (or its instance folder's marker) could not be created.
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// `spec.json` or `job.sh` could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The instance spec or the manifest could not be serialised.
    Json(serde_json::Error),
    /// The job succeeded, but its output directory did not show on this node in time.
    NotVisible {
        /// The output directory.
        dir: PathBuf,
        /// How long the controller waited (`fs_wait`).
        waited: Duration,
    },
    /// The stage wrote a name the pipeline keeps for itself into its output.
    Reserved {
        /// `MANIFEST.json` or `.log`.
        name: &'static str,
    },
    /// The output could not be hashed or committed into the store.
    Store(StoreError),
    /// The job's logs could not be moved into the output's `.log/`.
    MoveLogs(io::Error),
    /// `MANIFEST.json` could not be written into the output.
    WriteManifest(io::Error),
}

impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        JobError::Store(e)
    }
}

impl From<serde_json::Error> for JobError {
    fn from(e: serde_json::Error) -> Self {
        JobError::Json(e)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::CreateDir { dir, .. } => write!(f, "creating {}", dir.display())?,
            JobError::Write { path, .. } => write!(f, "writing {}", path.display())?,
            JobError::Json(e) => write!(f, "{e}")?,
            JobError::NotVisible { dir, waited } => write!(
                f,
                "the job succeeded but its output {} did not appear within {waited:?} (is \
                 .pipeline on a filesystem the compute nodes share?)",
                dir.display()
            )?,
            JobError::Reserved { name } => write!(
                f,
                "the stage wrote `{name}` into its output; that name is reserved for the pipeline"
            )?,
            JobError::Store(e) => write!(f, "{e}")?,
            JobError::MoveLogs(_) => write!(f, "moving the logs into the artifact")?,
            JobError::WriteManifest(_) => write!(f, "writing MANIFEST.json")?,
        }
        if f.alternate() {
            write_sources(f, std::error::Error::source(self))?;
        }
        Ok(())
    }
}

impl std::error::Error for JobError {
    /// The wrapped error; for a JSON or store error, which stand in for themselves, its own
    /// source.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JobError::CreateDir { source, .. } | JobError::Write { source, .. } => Some(source),
            JobError::MoveLogs(e) | JobError::WriteManifest(e) => Some(e),
            JobError::Json(e) => std::error::Error::source(e),
            JobError::Store(e) => std::error::Error::source(e),
            JobError::NotVisible { .. } | JobError::Reserved { .. } => None,
        }
    }
}
