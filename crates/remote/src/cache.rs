//! The run cache: `pipeline run` asks the remote for a stale instance's artifact before it
//! runs it (the engine's [`RemoteCache`] hook).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use pipeline_engine::manifest::Manifest;
use pipeline_engine::remote::RemoteCache;
use pipeline_engine::workspace::Workspace;

use crate::{Remote, RemoteError};

/// A remote as the engine's run cache. Pulls show no progress bar: the run draws its own.
#[derive(Debug)]
pub struct RunCache {
    remote: Remote,
    /// Set when the remote could not be reached: the rest of the run does not ask again (each
    /// attempt would wait out the store's retries).
    unreachable: AtomicBool,
    /// (instance, fingerprint) the remote did not have: the run loop asks again for an instance
    /// that waits for a free slot, and each question would be a request.
    misses: Mutex<HashSet<(String, String)>>,
}

impl RunCache {
    /// The run cache of an opened remote; nothing is asked of it until the run's first stale
    /// instance.
    pub fn new(remote: Remote) -> RunCache {
        RunCache {
            remote,
            unreachable: AtomicBool::new(false),
            misses: Mutex::new(HashSet::new()),
        }
    }
}

impl RemoteCache for RunCache {
    fn describe(&self) -> String {
        self.remote.name.clone()
    }

    fn fetch(
        &self,
        ws: &Workspace,
        instance: &str,
        fingerprint: &str,
    ) -> anyhow::Result<Option<(Manifest, PathBuf)>> {
        let key = (instance.to_string(), fingerprint.to_string());
        let missed = self.misses.lock().map_or(true, |m| m.contains(&key));
        if self.unreachable.load(Ordering::Relaxed) || missed {
            return Ok(None);
        }
        let remote = &self.remote;
        // One GET: a missing manifest is the common case and costs one round trip.
        let found = remote.rt.block_on(remote.manifest(instance, fingerprint));
        let rm = match found {
            Ok(Some(rm)) => rm,
            Ok(None) => {
                if let Ok(mut m) = self.misses.lock() {
                    m.insert(key);
                }
                return Ok(None);
            }
            Err(e @ RemoteError::Store { .. }) => {
                self.unreachable.store(true, Ordering::Relaxed);
                return Err(anyhow::Error::from(e).context("not asking it again in this run"));
            }
            Err(e) => {
                // A refused or unreadable manifest stays so: the instance runs here, once,
                // and the run does not ask (and warn) again while it waits for a slot.
                if let Ok(mut m) = self.misses.lock() {
                    m.insert(key);
                }
                return Err(e.into());
            }
        };
        let pulled = remote.pull(ws, &[rm], false);
        if pulled.is_err()
            && let Ok(mut m) = self.misses.lock()
        {
            // A corrupt object or a refused artifact stays so: the instance runs here, once.
            m.insert(key);
        }
        Ok(pulled?.committed.pop())
    }
}
