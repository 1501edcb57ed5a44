//! The hook through which `pipeline run` asks a remote store for an instance's artifact before
//! running it (a run cache shared across machines). The `remotes:` block that names the stores
//! is read in [`crate::remotes`] (re-exported here for the remote crate and the CLI).
//!
//! The engine knows no object store: the `pipeline-remote` crate implements [`RemoteCache`],
//! and the CLI hands it to the run through [`crate::exec::RunOptions::remote`].

use std::path::PathBuf;

use tracing::{info, warn};

use crate::error::IndexError;
use crate::exec::{Outcome, Status};
use crate::index::Index;
use crate::manifest::{LOG_DIR, Manifest};
use crate::plan::Instance;
pub use crate::remotes::{
    CREDENTIALS_HELP, DEFAULT_KEY, Remotes, credentials_in_url, parse_remotes,
};
use crate::workspace::Workspace;

/// A remote store that may hold an instance's artifact (implemented by `pipeline-remote`).
pub trait RemoteCache: Send + Sync + std::fmt::Debug {
    /// The remote's name or URL, for messages.
    fn describe(&self) -> String;
    /// Brings the artifact of `instance` at `fingerprint` into `ws`'s store if the remote has
    /// it: every file verified, then committed as a run commits. `Ok(None)`: not there.
    fn fetch(
        &self,
        ws: &Workspace,
        instance: &str,
        fingerprint: &str,
    ) -> anyhow::Result<Option<(Manifest, PathBuf)>>;
}

/// The exec loop's one call: a stale instance whose artifact the remote has is pulled instead
/// of run, and counts as cached. A remote that fails (unreachable, a corrupt object) is a
/// warning: the instance then runs here. An error is the index failing to record the pull.
pub fn pull_instead_of_run(
    remote: Option<&dyn RemoteCache>,
    ws: &Workspace,
    index: &mut Index,
    inst: &Instance,
    fingerprint: &str,
) -> Result<Option<(Outcome, String, PathBuf)>, IndexError> {
    let Some(remote) = remote else {
        return Ok(None);
    };
    let (manifest, dir) = match remote.fetch(ws, &inst.name, fingerprint) {
        Ok(Some(hit)) => hit,
        Ok(None) => return Ok(None),
        Err(e) => {
            let e = crate::error::anyhow_text(&e);
            warn!(stage = %inst.name, "remote {}: {e}; running it here", remote.describe());
            return Ok(None);
        }
    };
    info!(stage = %inst.name, fingerprint, "pulled from remote {}", remote.describe());
    index.add_record(&manifest.record)?;
    index.set_latest(&inst.name, fingerprint)?;
    let outcome = Outcome {
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        status: Status::Cached,
        reasons: vec![format!("pulled from remote {}", remote.describe())],
        fingerprint: Some(fingerprint.to_string()),
        duration_ms: None,
        artifact: Some(dir.clone()),
        log: Some(dir.join(LOG_DIR)),
        error: None,
    };
    Ok(Some((outcome, manifest.output_digest, dir)))
}
