//! `pipeline pull` and the run cache's fetch: objects down from the remote into the download
//! area (crate::downloads), every one verified, then each artifact laid out in a staging
//! directory inside `.pipeline/tmp/` and committed as a run commits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use pipeline_engine::Pipeline;
use pipeline_engine::fingerprint::{Freshness, components, freshness};
use pipeline_engine::index::Index;
use pipeline_engine::manifest::{MANIFEST, Manifest};
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
        let objects = objects(manifests)?;
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

/// The distinct objects the artifacts hold, with their sizes; a manifest that names a file
/// outside its artifact, or an object by anything but a digest, is refused.
fn objects(manifests: &[RemoteManifest]) -> Result<HashMap<String, u64>> {
    let mut out = HashMap::new();
    for rm in manifests {
        for (path, f) in rm.files() {
            if !layout::is_inside(&path) || !layout::is_digest(&f.blake3) {
                return Err(RemoteError::Corrupt {
                    object: layout::manifest_path(&rm.manifest.instance, &rm.manifest.fingerprint)
                        .to_string(),
                    why: format!("it names the file `{path}` as `{}`", f.blake3),
                });
            }
            out.insert(f.blake3.clone(), f.size);
        }
    }
    Ok(out)
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
