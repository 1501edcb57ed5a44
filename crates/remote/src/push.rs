//! `pipeline push`: artifacts of the local store up to the remote, objects first, manifests
//! last.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use pipeline_engine::manifest::{LOG_DIR, Manifest};
use serde::Serialize;

use crate::layout::{self, FORMAT, RemoteManifest};
use crate::transfer::Stop;
use crate::{Remote, RemoteError, Result};

/// Files uploaded at once: enough to keep a link busy with small files, few enough that the
/// multipart parts of large ones (4 each) stay within a reasonable number of connections.
const FILE_CONCURRENCY: usize = 8;

/// What a push sent and what the remote had already (the `report` of `push --json`).
#[derive(Debug, Default, Serialize)]
pub struct PushReport {
    /// Artifacts asked for.
    pub artifacts: usize,
    /// Artifacts whose manifest the remote already had (nothing sent for them).
    pub already_there: usize,
    /// Manifests written: the artifacts the remote did not have, all of them complete there now.
    pub manifests_sent: usize,
    /// Distinct objects uploaded.
    pub objects_sent: usize,
    /// Objects the remote already had (another artifact's, or sent by a killed push).
    pub objects_present: usize,
    /// The size of the objects uploaded, in bytes.
    pub bytes_sent: u64,
    /// Objects sent as multipart uploads (bigger than one part).
    pub multipart: usize,
}

/// One file to send: where it is here.
struct Upload {
    digest: String,
    file: PathBuf,
    size: u64,
}

impl Remote {
    /// Pushes the artifacts `(directory, manifest)` of the local store. SIGINT and SIGTERM
    /// stop it: the multipart uploads in flight are aborted on the remote first.
    pub fn push(&self, artifacts: &[(PathBuf, Manifest)], progress: bool) -> Result<PushReport> {
        pipeline_engine::executor::catch_interrupts();
        let stop = Stop::default();
        self.rt
            .block_on(self.push_async(artifacts, progress, &stop))
    }

    async fn push_async(
        &self,
        artifacts: &[(PathBuf, Manifest)],
        progress: bool,
        stop: &Stop,
    ) -> Result<PushReport> {
        let mut report = PushReport {
            artifacts: artifacts.len(),
            ..Default::default()
        };
        // One listing says which artifacts are complete there: a push where everything is
        // present makes this one request (and reads nothing else).
        let present = stop.unless_stopped(self.list(layout::MANIFESTS)).await?;
        let todo: Vec<&(PathBuf, Manifest)> = artifacts
            .iter()
            .filter(|(_, m)| {
                !present.contains_key(&layout::manifest_path(&m.instance, &m.fingerprint))
            })
            .collect();
        report.already_there = artifacts.len() - todo.len();
        if todo.is_empty() {
            return Ok(report);
        }
        let manifests = todo
            .iter()
            .map(|(dir, m)| remote_manifest(dir, m))
            .collect::<Result<Vec<_>>>()?;
        let objects = stop.unless_stopped(self.list(layout::OBJECTS)).await?;
        let have: HashSet<String> = objects.keys().filter_map(layout::digest_of).collect();
        let uploads = missing(&todo, &manifests, &have, &mut report);
        report.bytes_sent = uploads.iter().map(|u| u.size).sum();
        report.multipart = self.upload_all(&uploads, progress, stop).await?;
        // Every object is there: now the manifests may name them.
        let put_manifests = futures::stream::iter(manifests.iter().map(Ok))
            .try_for_each_concurrent(FILE_CONCURRENCY * 2, |rm| async move {
                let m = &rm.manifest;
                let bytes = serde_json::to_vec_pretty(rm)?;
                self.put_small(&layout::manifest_path(&m.instance, &m.fingerprint), bytes)
                    .await
            });
        stop.unless_stopped(put_manifests).await?;
        report.manifests_sent = manifests.len();
        Ok(report)
    }

    /// Sends `uploads`, [`FILE_CONCURRENCY`] at a time. Each upload ends itself (completed or
    /// aborted) before this returns: a failure stops the others, which abort their multipart
    /// uploads rather than being dropped midway. Returns how many went up in parts.
    async fn upload_all(&self, uploads: &[Upload], progress: bool, stop: &Stop) -> Result<usize> {
        let total = uploads.iter().map(|u| u.size).sum();
        let bar = bar(progress, total, "push");
        let results: Vec<Result<bool>> = futures::stream::iter(uploads)
            .map(|u| async {
                let sent = self.upload(&u.file, &u.digest, &bar, stop).await;
                if sent.is_err() {
                    stop.fail();
                }
                sent
            })
            .buffer_unordered(FILE_CONCURRENCY)
            .collect()
            .await;
        bar.finish_and_clear();
        let mut multipart = 0;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(parts) => multipart += usize::from(parts),
                Err(RemoteError::Cancelled) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(multipart),
        }
    }
}

/// The remote manifest of a local artifact: its MANIFEST.json and its logs' digests.
fn remote_manifest(dir: &std::path::Path, m: &Manifest) -> Result<RemoteManifest> {
    let logs_dir = dir.join(LOG_DIR);
    let logs = if logs_dir.is_dir() {
        pipeline_engine::exec::hash_tree(&logs_dir)?
    } else {
        Vec::new()
    };
    Ok(RemoteManifest {
        format: FORMAT,
        manifest: m.clone(),
        logs,
    })
}

/// The distinct objects the remote lacks, each with one local file that holds it.
fn missing(
    todo: &[&(PathBuf, Manifest)],
    manifests: &[RemoteManifest],
    have: &HashSet<String>,
    report: &mut PushReport,
) -> Vec<Upload> {
    let mut wanted: HashMap<String, Upload> = HashMap::new();
    let mut present = HashSet::new();
    for ((dir, _), rm) in todo.iter().zip(manifests) {
        for (path, f) in rm.files() {
            if have.contains(&f.blake3) {
                present.insert(f.blake3.clone());
                continue;
            }
            wanted.entry(f.blake3.clone()).or_insert_with(|| Upload {
                digest: f.blake3.clone(),
                file: dir.join(&path),
                size: f.size,
            });
        }
    }
    report.objects_present = present.len();
    report.objects_sent = wanted.len();
    let mut uploads: Vec<Upload> = wanted.into_values().collect();
    // Largest first, so that a big model does not start last and run alone at the end.
    uploads.sort_by_key(|u| std::cmp::Reverse(u.size));
    uploads
}

/// A byte progress bar on a terminal, hidden otherwise.
pub(crate) fn bar(show: bool, total: u64, verb: &str) -> ProgressBar {
    if !show || total == 0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(&format!(
        "{verb} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
