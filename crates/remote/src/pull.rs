//! `pipeline pull` and the run cache's fetch: objects down from the remote into the download
//! area (crate::downloads), every one verified, then each artifact laid out in a staging
//! directory inside `.pipeline/tmp/` and committed as a run commits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use pipeline_engine::Pipeline;
use pipeline_engine::fingerprint::{Freshness, components, freshness};
use pipeline_engine::index::Index;
use pipeline_engine::manifest::{FileEntry, MANIFEST, Manifest};
use pipeline_engine::workspace::Workspace;
use serde::Serialize;

use crate::downloads::Area;
use crate::layout::{self, FORMAT, RemoteManifest};
use crate::{Remote, RemoteError, Result};

const FILE_CONCURRENCY: usize = 8;

/// What a pull committed, and what it moved.
#[derive(Debug)]
pub struct PullReport {
    /// Each artifact's manifest (as committed) and directory.
    pub committed: Vec<(Manifest, PathBuf)>,
    /// The objects it needed, and how many of them came from the remote.
    pub transfer: Transfer,
}

/// The objects of a pull: a file that several artifacts hold is one object, fetched once.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Transfer {
    /// Distinct objects the artifacts hold.
    pub objects: usize,
    /// Their total size, in bytes.
    pub bytes: u64,
    /// Objects fetched from the remote, whole or the rest of one; the others were in the
    /// download area already, left by a pull that did not finish.
    pub objects_fetched: usize,
    /// Bytes fetched from the remote (`bytes` less what the download area held).
    pub bytes_fetched: u64,
}

/// Where the current plan's artifact of one instance is.
#[derive(Debug)]
pub enum Place {
    /// Fresh in the local store: nothing to pull.
    Local,
    /// Stale here, and the remote has it: the manifest to pull.
    Remote(Box<RemoteManifest>),
    /// Neither here nor on the remote (or a dep's output is unknown).
    Neither,
}

impl Remote {
    /// For each selected instance (in plan order), where its artifact at the current plan's
    /// fingerprint is. A dep pulled from the remote gives its output digest from the remote
    /// manifest, so instances downstream of it get fingerprints without running anything.
    pub fn locate(
        &self,
        p: &Pipeline,
        index: &mut Index,
        selected: &[usize],
    ) -> Result<Vec<(usize, Place)>> {
        let listed = self.rt.block_on(self.list(layout::MANIFESTS))?;
        let mut outputs: HashMap<usize, Option<String>> = HashMap::new();
        let mut out = Vec::new();
        for &i in selected {
            let inst = &p.plan.instances[i];
            let mut deps = BTreeMap::new();
            for d in &inst.deps {
                if let Some(Some(o)) = outputs.get(d) {
                    deps.insert(p.plan.instances[*d].name.clone(), o.clone());
                }
            }
            if deps.len() < inst.deps.len() {
                outputs.insert(i, None);
                out.push((i, Place::Neither));
                continue;
            }
            let comps = components(inst, &p.registry, index, deps)?;
            let fp = comps.fingerprint();
            let place = match freshness(&p.ws, index, inst, &comps) {
                Freshness::Fresh { manifest, .. } => {
                    outputs.insert(i, Some(manifest.output_digest));
                    Place::Local
                }
                Freshness::Stale { .. } => {
                    let key = layout::manifest_path(&inst.name, &fp);
                    let found = if listed.contains_key(&key) {
                        self.rt.block_on(self.manifest(&inst.name, &fp))?
                    } else {
                        None
                    };
                    outputs.insert(i, found.as_ref().map(|m| m.manifest.output_digest.clone()));
                    found.map_or(Place::Neither, |m| Place::Remote(Box::new(m)))
                }
            };
            out.push((i, place));
        }
        Ok(out)
    }

    /// The remote manifest of `instance` at `fingerprint`, if the remote has it.
    pub(crate) async fn manifest(
        &self,
        instance: &str,
        fp: &str,
    ) -> Result<Option<RemoteManifest>> {
        let key = layout::manifest_path(instance, fp);
        let Some(bytes) = self.get_small(&key).await? else {
            return Ok(None);
        };
        let rm: RemoteManifest =
            serde_json::from_slice(&bytes).map_err(|source| RemoteError::BadManifest {
                object: key.to_string(),
                source,
            })?;
        let matches = rm.format == FORMAT
            && rm.manifest.fingerprint == fp
            && rm.manifest.instance == instance;
        Ok(matches.then_some(rm))
    }

    /// Brings `manifests` into `ws`'s store: every object is downloaded (once, however many
    /// files hold it) into the download area and verified before the first artifact is staged
    /// and committed, so a corrupt object anywhere commits nothing. The caller holds the
    /// workspace lock.
    pub fn pull(
        &self,
        ws: &Workspace,
        manifests: &[RemoteManifest],
        progress: bool,
    ) -> Result<PullReport> {
        let objects = objects(self, manifests)?;
        let bytes = manifests
            .iter()
            .flat_map(|m| m.files())
            .fold(0u64, |sum, (_, f)| sum.saturating_add(f.size));
        check_room(ws, bytes)?;
        let area = Area::open(ws)?;
        let transfer = self
            .rt
            .block_on(self.fetch_all(&area, &objects, progress))?;
        let staging = ws.tmp().join(format!(
            "pull-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let committed =
            stage(&area, &staging, manifests).and_then(|()| commit_all(ws, &staging, manifests));
        let _ = std::fs::remove_dir_all(&staging);
        let committed = committed?;
        area.forget(&objects.keys().map(String::as_str).collect());
        Ok(PullReport {
            committed,
            transfer,
        })
    }

    /// Brings every object into the download area, several at a time, largest first.
    async fn fetch_all(
        &self,
        area: &Area,
        objects: &HashMap<String, u64>,
        progress: bool,
    ) -> Result<Transfer> {
        let mut todo: Vec<(&String, &u64)> = objects.iter().collect();
        todo.sort_by_key(|(_, size)| std::cmp::Reverse(**size));
        let total = todo.iter().map(|(_, size)| **size).sum();
        let bar = crate::push::bar(progress, total, "pull");
        let fetched: Vec<u64> = futures::stream::iter(todo)
            .map(|(digest, size)| self.download(digest, *size, area, &bar))
            .buffer_unordered(FILE_CONCURRENCY)
            .try_collect()
            .await?;
        bar.finish_and_clear();
        Ok(Transfer {
            objects: objects.len(),
            objects_fetched: fetched.iter().filter(|n| **n > 0).count(),
            bytes: total,
            bytes_fetched: fetched.iter().sum(),
        })
    }
}

/// The most files one pulled artifact may hold (its outputs and logs), well above what a stage
/// of this project writes (checkpoints, shards and logs). The bound is what stops a manifest
/// naming one small object under 10^5 paths from writing that many files (and, with a large
/// object, hundreds of MB per KB of manifest): such a manifest of 10 MB is refused in 0.1 s.
/// 50,000 files make a manifest of about 9 MB, within [`crate::MANIFEST_LIMIT`].
pub(crate) const MAX_FILES: usize = 50_000;
/// The most bytes one pulled artifact may hold: far above any artifact of this project (a
/// pretraining checkpoint set is a few GB), low enough that a manifest's sizes cannot add up
/// to an overflow. The free space of the local store is checked as well.
pub(crate) const MAX_BYTES: u64 = 1 << 40;
/// Problems of one manifest named in its error (one may list thousands).
const SHOWN: usize = 3;

/// The distinct objects the artifacts hold, with their sizes, once each artifact is checked as
/// a committed one is ([`Manifest::inconsistencies`]: paths inside the artifact and not
/// reserved, none twice, digests that are digests, and the output digest that of the listed
/// files; the log files likewise) and within [`MAX_FILES`] and [`MAX_BYTES`]. Nothing is
/// fetched or written for a refused one.
fn objects(remote: &Remote, manifests: &[RemoteManifest]) -> Result<HashMap<String, u64>> {
    let mut out = HashMap::new();
    for rm in manifests {
        let key = layout::manifest_path(&rm.manifest.instance, &rm.manifest.fingerprint);
        // Counted first: the checks below cost time in the number of files.
        let files = rm.manifest.files.len() + rm.logs.len();
        let bytes = rm
            .files()
            .fold(0u64, |sum, (_, f)| sum.saturating_add(f.size));
        let refused = |why| RemoteError::Refused {
            object: remote.url_of(&key),
            why,
        };
        if files > MAX_FILES {
            return Err(refused(format!(
                "it lists {files} files, more than the {MAX_FILES} a pull takes"
            )));
        }
        if bytes > MAX_BYTES {
            return Err(refused(format!(
                "it lists {bytes} bytes, more than the {} a pull takes",
                pipeline_bounded::size_text(MAX_BYTES)
            )));
        }
        let mut problems = rm.manifest.inconsistencies();
        problems.extend(log_problems(&rm.logs));
        if !problems.is_empty() {
            let more = problems.len().saturating_sub(SHOWN);
            let mut why = problems[..problems.len().min(SHOWN)].join("; ");
            if more > 0 {
                why.push_str(&format!("; and {more} more"));
            }
            return Err(RemoteError::Corrupt {
                object: remote.url_of(&key),
                why,
            });
        }
        for (_, f) in rm.files() {
            out.insert(f.blake3.clone(), f.size);
        }
    }
    Ok(out)
}

/// What is wrong with the list of an artifact's log files: a path leaving the log directory,
/// one listed twice, a digest that is not one.
fn log_problems(logs: &[FileEntry]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for f in logs {
        let name: String = f.path.chars().take(80).collect();
        if !layout::is_inside(&f.path) {
            out.push(format!(
                "log file {name:?} is not a relative path inside the log directory"
            ));
        } else if !seen.insert(f.path.as_str()) {
            out.push(format!("log file {name:?} is listed twice"));
        }
        if !layout::is_digest(&f.blake3) {
            out.push(format!(
                "log file {name:?} has a digest that is not a blake3 digest"
            ));
        }
    }
    out
}

/// Refuses a pull of `bytes` (every file of every artifact: each is written once) when the
/// filesystem of `ws`'s `tmp/` (where objects arrive and artifacts are staged) has not that much
/// free, before anything is fetched. An `artifacts/` on another disk (a link to a scratch disk)
/// is not measured here.
fn check_room(ws: &Workspace, bytes: u64) -> Result<()> {
    let tmp = ws.tmp();
    let probe = tmp
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(tmp.as_path())
        .to_path_buf();
    let free = crate::dirfs::free_space(&probe).map_err(|source| RemoteError::Io {
        path: probe.clone(),
        source,
    })?;
    if bytes <= free {
        return Ok(());
    }
    Err(RemoteError::Refused {
        object: "the pull".into(),
        why: format!(
            "its artifacts hold {:.1} MB, and {} has {:.1} MB free",
            bytes as f64 / 1e6,
            probe.display(),
            free as f64 / 1e6
        ),
    })
}

/// Lays the artifacts out in `staging/<k>/` from the download area. The staging directory is
/// marked as the store's, so that `gc` may remove what a killed pull left of it.
fn stage(area: &Area, staging: &Path, manifests: &[RemoteManifest]) -> Result<()> {
    pipeline_engine::owned::create_marked(staging).map_err(|source| RemoteError::Io {
        path: staging.to_path_buf(),
        source,
    })?;
    let mut used = HashSet::new();
    for (k, rm) in manifests.iter().enumerate() {
        let out = staging.join(k.to_string());
        for (path, f) in rm.files() {
            let first_use = used.insert(f.blake3.as_str());
            area.place(&f.blake3, &out.join(path), first_use)?;
        }
    }
    Ok(())
}

/// Writes each staged artifact's MANIFEST.json (its record pointing at its new home) and
/// renames it into the store, as a run commits its output.
fn commit_all(
    ws: &Workspace,
    staging: &Path,
    manifests: &[RemoteManifest],
) -> Result<Vec<(Manifest, PathBuf)>> {
    let mut out = Vec::new();
    for (k, rm) in manifests.iter().enumerate() {
        let dir = staging.join(k.to_string());
        std::fs::create_dir_all(&dir).map_err(|source| RemoteError::Io {
            path: dir.clone(),
            source,
        })?;
        let mut m = rm.manifest.clone();
        let dest = ws.artifact_dir(&m.instance, &m.fingerprint);
        m.record.dir = dest.clone();
        let bytes = serde_json::to_vec_pretty(&m)?;
        std::fs::write(dir.join(MANIFEST), bytes).map_err(|source| RemoteError::Io {
            path: dir.join(MANIFEST),
            source,
        })?;
        pipeline_engine::exec::commit(&dir, &dest, staging)?;
        out.push((m, dest));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, blake3: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: 1,
            blake3: blake3.into(),
        }
    }

    #[test]
    fn log_lists_are_checked_like_file_lists() {
        let d = blake3::hash(b"log").to_hex().to_string();
        assert!(log_problems(&[entry("stdout.txt", &d), entry("a/b.txt", &d)]).is_empty());
        let p = log_problems(&[
            entry("stdout.txt", &d),
            entry("stdout.txt", &d),
            entry("../../x", &d),
            entry("/etc/passwd", &d),
            entry("ok.txt", "../../x"),
        ]);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[0].contains("listed twice"), "{p:?}");
        assert!(p[1].contains("inside the log directory"), "{p:?}");
        assert!(p[3].contains("not a blake3 digest"), "{p:?}");
    }

    #[test]
    fn free_space_is_checked_before_anything_is_fetched() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::new(tmp.path());
        assert!(check_room(&ws, 1).is_ok());
        let e = check_room(&ws, u64::MAX).unwrap_err().to_string();
        assert!(e.contains("MB free"), "{e}");
    }
}
