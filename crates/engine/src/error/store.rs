//! Errors of the artifact store ([`StoreError`]), its sled index ([`IndexError`]), the
//! fingerprints computed from both ([`FingerprintError`]), and the commands that read the store
//! ([`InspectError`]) or keep it ([`MaintainError`]).

use std::io;
use std::path::PathBuf;

use super::UserError;

/// Why an output could not be walked and hashed ([`crate::outputs::hash_tree`]), committed
/// ([`crate::exec::commit`]) or moved within the store (`verify`'s quarantine).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A directory of the output could not be listed.
    #[error("listing {}", dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry of a listed directory, its type or its size could not be read (the system's
    /// message alone, as it always was).
    #[error(transparent)]
    Entry(#[from] io::Error),
    /// An output's name is not UTF-8: two such names could print, and be recorded, as one.
    #[error("output `{name}` has a name that is not valid UTF-8; name outputs in UTF-8")]
    NotUtf8 {
        /// The name relative to the output, with the invalid bytes replaced.
        name: String,
    },
    /// An output is a symlink: followed, it could hang the hash or reach outside the store.
    #[error(
        "output `{path}` is a symlink (to {target}); outputs must be regular files and \
         directories: copy the file into $PIPELINE_OUT instead of linking it"
    )]
    Symlink {
        /// The link, relative to the output.
        path: String,
        /// What it points to, as read; `?` when it could not be read.
        target: String,
    },
    /// An output is a FIFO, a socket or a device file.
    #[error("output `{path}` is {what}; outputs must be regular files and directories")]
    Special {
        /// The entry, relative to the output.
        path: String,
        /// What it is: "a FIFO", "a socket", "a device file" or "not a regular file".
        what: &'static str,
    },
    /// A file of the output could not be read to hash it.
    #[error("hashing {path}")]
    Hash {
        /// The file, relative to the output.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The folder a committed or moved entry goes into could not be created (and marked as
    /// the store's).
    #[error("creating {}", dir.display())]
    CreateDir {
        /// The folder.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The artifact a `--force` re-run replaces could not be renamed out of the way.
    #[error("moving the old {} aside", dest.display())]
    MoveAside {
        /// The artifact directory.
        dest: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The artifact a `--force` re-run replaces is on another filesystem than `tmp/` and
    /// could not be removed instead.
    #[error("removing the old {}", dest.display())]
    RemoveOld {
        /// The artifact directory.
        dest: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Across filesystems, the output could not be copied next to its destination.
    #[error("copying the output to {} (another filesystem)", staging.display())]
    CopyAcross {
        /// The staging copy beside the destination (removed before the copy starts).
        staging: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The final rename into the store failed.
    #[error("committing {}", dest.display())]
    Commit {
        /// The artifact directory.
        dest: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry of the store could not be renamed to its new place.
    #[error("moving {}", from.display())]
    Move {
        /// The entry.
        from: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry moved across filesystems was copied, but the original stayed.
    #[error(
        "{} was copied to {} (another filesystem) but not removed: {cause}",
        from.display(),
        dest.display()
    )]
    NotRemoved {
        /// The original entry.
        from: PathBuf,
        /// Where the copy is.
        dest: PathBuf,
        /// Why it stayed (part of the message, as it always was): an [`io::Error`] for a
        /// symlink, else the [`crate::owned::Refused`] of the store's removal.
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why the sled index could not be opened, rebuilt or written.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Another process (a `pipeline` command) keeps the database open past the wait.
    #[error("the index {} is held by another process: {cause}", path.display())]
    Held {
        /// The index directory, `.pipeline/index`.
        path: PathBuf,
        /// sled's lock error (part of the message, as it always was).
        cause: sled::Error,
    },
    /// The corrupt database could not be renamed aside to make room for a rebuilt one.
    #[error(transparent)]
    MoveAside(io::Error),
    /// sled failed to open, read, write or flush the database.
    #[error(transparent)]
    Sled(#[from] sled::Error),
    /// A run record could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Why the fingerprint of an instance could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// The instance's kind is not in the registry.
    #[error("unknown stage kind {kind}")]
    UnknownKind {
        /// The kind.
        kind: String,
    },
    /// An input file of the instance is missing or cannot be stat'ed.
    #[error("input {key} of stage {stage}: {cause}")]
    Input {
        /// The input's key in `inputs:`.
        key: String,
        /// The instance.
        stage: String,
        /// Why (part of the message, as it always was).
        cause: io::Error,
    },
    /// An input file could not be read to hash it.
    #[error("hashing input {key}: {cause}")]
    Hash {
        /// The input's key in `inputs:`.
        key: String,
        /// Why (part of the message, as it always was).
        cause: io::Error,
    },
}

/// Why `status` or `show` could not answer.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// A target or stage name that the pipeline does not have.
    #[error(transparent)]
    User(#[from] UserError),
    /// An instance's fingerprint could not be computed.
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
    /// The prediction for the instance `show` asked about is missing (a bug: every selected
    /// instance is predicted).
    #[error("instance vanished from the plan")]
    NotPredicted {
        /// The instance.
        instance: String,
    },
}

impl InspectError {
    /// The mistake of the user's this is, if it is one (the CLI exits with 2).
    pub fn user_error(&self) -> Option<&UserError> {
        match self {
            InspectError::User(e) => Some(e),
            _ => None,
        }
    }
}

/// Why `gc` or `verify` stopped.
#[derive(Debug, thiserror::Error)]
pub enum MaintainError {
    /// Another pipeline file of the workspace does not load, so `gc` cannot tell what it
    /// references and removes nothing.
    #[error(transparent)]
    User(#[from] UserError),
    /// The fingerprint of an instance, needed to know what it references, could not be
    /// computed.
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
    /// A corrupt artifact could not be moved into `.pipeline/quarantine/`.
    #[error("quarantining {}", dir.display())]
    Quarantine {
        /// The artifact directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
}

impl MaintainError {
    /// The mistake of the user's this is, if it is one (the CLI exits with 2).
    pub fn user_error(&self) -> Option<&UserError> {
        match self {
            MaintainError::User(e) => Some(e),
            _ => None,
        }
    }
}
