//! `pipeline pull` and the run cache's fetch: artifacts down from the remote into a staging
//! directory inside `.pipeline/tmp/`, every file verified, then committed as a run commits.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use futures::TryStreamExt;
use pipeline_engine::Pipeline;
use pipeline_engine::fingerprint::{Freshness, components, freshness};
use pipeline_engine::index::Index;
use pipeline_engine::manifest::{MANIFEST, Manifest};
use pipeline_engine::workspace::Workspace;
use serde::Serialize;

use crate::layout::{self, FORMAT, RemoteManifest};
use crate::{Remote, RemoteError, Result};

const FILE_CONCURRENCY: usize = 8;

#[derive(Debug, Default, Serialize)]
pub struct PullReport {
    /// Instances already in the local store.
    pub local: usize,
    /// Artifacts brought in: (instance, fingerprint).
    pub pulled: Vec<(String, String)>,
    /// Instances neither here nor there (they would run).
    pub missing: Vec<String>,
    pub bytes: u64,
}

/// Where the current plan's artifact of one instance is.
#[derive(Debug)]
pub enum Place {
    Local,
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

    /// Brings `manifests` into `ws`'s store: all of them are downloaded and verified before the
    /// first is committed, so a corrupt object anywhere commits nothing. The caller holds the
    /// workspace lock. Returns each artifact's manifest (as committed) and directory.
    pub fn pull(
        &self,
        ws: &Workspace,
        manifests: &[RemoteManifest],
        progress: bool,
    ) -> Result<Vec<(Manifest, PathBuf)>> {
        let staging = ws.tmp().join(format!(
            "pull-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        // Marked as the store's, so that a run or `gc` after a killed pull may remove it.
        pipeline_engine::owned::create_marked(&staging).map_err(|source| RemoteError::Io {
            path: staging.clone(),
            source,
        })?;
        let result = self.rt.block_on(self.stage(&staging, manifests, progress));
        let committed = result.and_then(|()| commit_all(ws, &staging, manifests));
        let _ = std::fs::remove_dir_all(&staging);
        committed
    }

    async fn stage(
        &self,
        staging: &std::path::Path,
        manifests: &[RemoteManifest],
        progress: bool,
    ) -> Result<()> {
        let mut files = Vec::new();
        for (k, rm) in manifests.iter().enumerate() {
            let out = staging.join(k.to_string());
            for (path, f) in rm.files() {
                files.push((out.join(path), f));
            }
        }
        let total = files.iter().map(|(_, f)| f.size).sum();
        let bar = crate::push::bar(progress, total, "pull");
        futures::stream::iter(files.iter().map(Ok))
            .try_for_each_concurrent(FILE_CONCURRENCY, |(dest, f)| {
                self.download(&f.blake3, f.size, dest, &bar)
            })
            .await?;
        bar.finish_and_clear();
        Ok(())
    }
}

/// Writes each staged artifact's MANIFEST.json (its record pointing at its new home) and
/// renames it into the store, as a run commits its output.
fn commit_all(
    ws: &Workspace,
    staging: &std::path::Path,
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
        let bytes = serde_json::to_vec_pretty(&m).map_err(anyhow::Error::from)?;
        std::fs::write(dir.join(MANIFEST), bytes).map_err(|source| RemoteError::Io {
            path: dir.join(MANIFEST),
            source,
        })?;
        pipeline_engine::exec::commit(&dir, &dest, staging)?;
        out.push((m, dest));
    }
    Ok(out)
}
