//! Remote artifact stores shared by a lab's machines: a directory (NFS, a mounted disk), S3 or
//! an S3-compatible server, through Apache Arrow's `object_store`.
//!
//! Layout on the remote (under the URL's prefix):
//!
//! ```text
//! objects/ab/cdef…            one file's bytes, named by its blake3 digest (stored once)
//! manifests/<instance>/<fp>.json   an artifact: its MANIFEST.json and the log files' digests
//! ```
//!
//! Objects are immutable and content-addressed, so two workspaces uploading the same one write
//! the same bytes (each put is atomic: a rename on a filesystem, one PUT or a completed multipart
//! upload on S3). A manifest is written only after every object it names is there, so a remote
//! never names an object it does not have, and a push killed midway leaves only objects that
//! the next push finds in its one listing and does not send again.

mod cache;
mod creds;
mod downloads;
mod gc;
mod layout;
mod open;
mod pull;
mod push;
mod transfer;

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;

pub use cache::RunCache;
pub use gc::{GcOptions, GcReport};
pub use layout::RemoteManifest;
pub use open::{Spec, resolve};
pub use pull::{Place, PullReport, Transfer};
pub use push::PushReport;

/// What can go wrong with a remote; [`RemoteError::is_user_error`] says which ones the user
/// fixes by changing a flag, pipeline.yaml or the environment.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("remote `{name}` is not declared in pipeline.yaml's `remotes:`")]
    UnknownName { name: String, help: String },
    #[error(
        "no remote to use: pass --remote NAME|URL, set PIPELINE_REMOTE, or declare one in pipeline.yaml's `remotes:` (with `default:` when there are several)"
    )]
    NoRemote,
    #[error("{url}: {why}")]
    Credentials { url: String, why: &'static str },
    #[error("{url}: unsupported remote URL (use s3://BUCKET/PREFIX, file:///DIR or a directory)")]
    Scheme { url: String },
    #[error("AWS credentials file {path}: {why}")]
    CredentialsFile { path: PathBuf, why: String },
    /// object_store's message already holds its causes: not chained again as a source.
    #[error("remote {remote}: {cause}")]
    Store {
        remote: String,
        cause: object_store::Error,
    },
    #[error("remote object {object} is corrupt: {why}")]
    Corrupt { object: String, why: String },
    #[error("remote manifest {object} is unreadable: {source}")]
    BadManifest {
        object: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "interrupted: the uploads in flight were aborted; the next push sends only what is missing"
    )]
    Interrupted,
    /// Another upload of the same push failed (its error is the one reported).
    #[error("stopped because another upload failed")]
    Cancelled,
    #[error("{0}")]
    Workspace(#[from] pipeline_engine::UserError),
    #[error("{0:#}")]
    Engine(#[from] anyhow::Error),
}

impl RemoteError {
    /// A mistake in the input (exit code 2), rather than a failure of the remote or the disk.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            RemoteError::UnknownName { .. }
                | RemoteError::NoRemote
                | RemoteError::Credentials { .. }
                | RemoteError::Scheme { .. }
                | RemoteError::CredentialsFile { .. }
                | RemoteError::Workspace(_)
        )
    }

    /// The hint printed under the error, where there is one.
    pub fn help(&self) -> Option<String> {
        match self {
            RemoteError::UnknownName { help, .. } => Some(help.clone()),
            RemoteError::Credentials { .. } => {
                Some(pipeline_engine::remote::CREDENTIALS_HELP.to_string())
            }
            _ => None,
        }
    }
}

pub type Result<T, E = RemoteError> = std::result::Result<T, E>;

/// An opened remote: the store, and the runtime its requests run on.
pub struct Remote {
    /// The name from pipeline.yaml, or the URL as given.
    pub name: String,
    pub url: String,
    store: Arc<dyn ObjectStore>,
    /// A directory remote's folder: `gc --remote` looks there for the files of unfinished
    /// uploads, which object_store's listing leaves out.
    dir: Option<PathBuf>,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({} = {})", self.name, self.url)
    }
}

impl Remote {
    /// `name (url)` for messages, or the URL alone when it was given as one.
    pub fn describe(&self) -> String {
        if self.name == self.url {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.url)
        }
    }

    fn store_err(&self, cause: object_store::Error) -> RemoteError {
        RemoteError::Store {
            remote: self.describe(),
            cause,
        }
    }
}
