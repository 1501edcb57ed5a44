//! Remote artifact stores shared by a lab's machines: a directory (NFS, a mounted disk), S3 or
//! an S3-compatible server, through Apache Arrow's `object_store`.
//!
//! Layout on the remote (under the URL's prefix):
//!
//! ```text
//! objects/ab/cdef…                         one file's bytes, by its blake3 digest (stored once)
//! manifests/<fingerprint>/<instance>.json  an artifact: MANIFEST.json and its logs' digests
//! ```
//!
//! Objects are immutable and content-addressed, so two workspaces uploading the same one write
//! the same bytes (each put is atomic: a rename on a filesystem, one PUT or a completed multipart
//! upload on S3). A manifest is written only after every object it names is there, so a remote
//! never names an object it does not have, and a push killed midway leaves only objects that
//! the next push finds in its one listing and does not send again.

#![warn(missing_docs)]

mod cache;
mod creds;
mod dirfs;
mod downloads;
mod gc;
mod layout;
mod open;
mod pull;
mod push;
mod reads;
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
pub use reads::MANIFEST_LIMIT;

/// What can go wrong with a remote; [`RemoteError::is_user_error`] says which ones the user
/// fixes by changing a flag, pipeline.yaml or the environment.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// `--remote` or `PIPELINE_REMOTE` gave a bare word that is not a declared remote (and does
    /// not look like a URL or a path).
    #[error("remote `{name}` is not declared in pipeline.yaml's `remotes:`")]
    UnknownName {
        /// The word as given.
        name: String,
        /// The nearest declared names, printed under the error.
        help: String,
    },
    /// No `--remote`, no `PIPELINE_REMOTE`, and pipeline.yaml names no default remote, for a
    /// command that needs one (push, pull, gc --remote).
    #[error(
        "no remote to use: pass --remote NAME|URL, set PIPELINE_REMOTE, or declare one in pipeline.yaml's `remotes:` (with `default:` when there are several)"
    )]
    NoRemote,
    /// The URL carries credentials (`user:secret@` or a secret in its query), which belong in
    /// the environment instead; [`RemoteError::help`] says where.
    #[error("{url}: {why}")]
    Credentials {
        /// The remote's URL as given.
        url: String,
        /// Which part of it holds the credentials.
        why: &'static str,
    },
    /// A URL whose scheme is neither `s3`/`s3a` nor `file`, or an `s3://` URL without a bucket.
    #[error("{url}: unsupported remote URL (use s3://BUCKET/PREFIX, file:///DIR or a directory)")]
    Scheme {
        /// The remote's URL as given.
        url: String,
    },
    /// `~/.aws/credentials` or `~/.aws/config` (or the files their environment variables name)
    /// could not be parsed, or the profile lacks a key or a secret.
    #[error("AWS credentials file {path}: {why}")]
    CredentialsFile {
        /// The file read.
        path: PathBuf,
        /// The parser's message, or the keys the profile lacks.
        why: String,
    },
    /// A request to the store failed (after its retries), or the store could not be built
    /// from the URL and the environment. object_store's message already holds its causes: not
    /// chained again as a source.
    #[error("remote {remote}: {cause}")]
    Store {
        /// The remote as [`Remote::describe`] gives it (a directory remote's path while it is
        /// being opened, the URL while an S3 store is being built).
        remote: String,
        /// object_store's error.
        cause: object_store::Error,
    },
    /// An object does not hold what a manifest says (missing, shorter, longer, another blake3
    /// digest), or a manifest names a file outside its artifact or an object by something other
    /// than a digest. A pull with such an object commits nothing.
    #[error("remote object {object} is corrupt: {why}")]
    Corrupt {
        /// The object's URL on the remote, or the path of the manifest that names it badly.
        object: String,
        /// What does not match.
        why: String,
    },
    /// What the remote serves is refused before anything of it is written: a manifest over
    /// [`MANIFEST_LIMIT`], a link, FIFO or folder in a manifest's place, an artifact of more
    /// files or bytes than a pull takes, or more than the local disk has room for.
    #[error("remote {object} is refused: {why}")]
    Refused {
        /// The manifest's URL on the remote (or the manifests' when a pull as a whole is too
        /// large).
        object: String,
        /// Why, with the limit.
        why: String,
    },
    /// A remote manifest is not the JSON of a [`RemoteManifest`].
    #[error("remote manifest {object} is unreadable: {source}")]
    BadManifest {
        /// The manifest's path on the remote.
        object: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A local file or directory could not be read, written, created or removed (the download
    /// area, a staging directory, a directory remote's folder).
    #[error("{}: {source}", path.display())]
    Io {
        /// The local path (`(tokio runtime)` when the runtime could not be started).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// SIGINT or SIGTERM arrived during a push.
    #[error(
        "interrupted: the uploads in flight were aborted; the next push sends only what is missing"
    )]
    Interrupted,
    /// Another upload of the same push failed (its error is the one reported).
    #[error("stopped because another upload failed")]
    Cancelled,
    /// A mistake in the workspace or pipeline.yaml, as the engine reports it (exit code 2).
    #[error("{0}")]
    Workspace(#[from] pipeline_engine::UserError),
    /// The local store failed hashing an artifact's logs or committing a pulled artifact.
    #[error(transparent)]
    LocalStore(#[from] pipeline_engine::error::StoreError),
    /// An instance's fingerprint could not be computed to look it up on the remote.
    #[error(transparent)]
    Fingerprint(#[from] pipeline_engine::error::FingerprintError),
    /// A manifest could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A local file no longer has the digest its manifest gives: it is not sent.
    #[error(
        "{} changed since it was hashed (its digest is no longer {digest}); `pipeline verify` \
         checks the store",
        file.display()
    )]
    Changed {
        /// The file.
        file: PathBuf,
        /// The digest its manifest gives.
        digest: String,
    },
    /// A task uploading one part of an object died (panicked or was cancelled).
    #[error("an upload part: {0}")]
    UploadTask(String),
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

/// The crate's result type: [`RemoteError`] unless another is named.
pub type Result<T, E = RemoteError> = std::result::Result<T, E>;

/// An opened remote: the store, and the runtime its requests run on.
pub struct Remote {
    /// The name from pipeline.yaml, or the URL as given.
    pub name: String,
    /// Its URL (`s3://…`, `file://…`) or directory path, as declared or given; a relative
    /// directory is relative to the workspace root.
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
