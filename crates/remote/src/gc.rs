//! `pipeline gc --remote`: manifests the local store does not hold (all kept with `--all`),
//! then the objects no kept manifest names. Manifests go first, so that at no moment does the
//! remote name an object it no longer has.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use pipeline_engine::index::list_artifacts;
use pipeline_engine::manifest::Manifest;
use pipeline_engine::workspace::Workspace;
use serde::Serialize;

use crate::dirfs::{self, Meta, Removed};
use crate::layout::{self, RemoteManifest};
use crate::{Remote, RemoteError, Result};

/// How `gc --remote` chooses what to remove.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Keep every artifact the remote has a manifest for (only orphaned objects go).
    pub all: bool,
    /// Only report what would be removed (`--dry-run`).
    pub dry_run: bool,
    /// Leave what is younger than this: a push in progress has written objects whose manifest
    /// is not there yet.
    pub min_age: Duration,
}

/// What `gc --remote` removed, or would remove with `dry_run`, and what it kept (the `report`
/// of `gc --remote --json`).
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    /// Manifests removed (or that would be): their paths on the remote, sorted.
    pub manifests: Vec<String>,
    /// Objects no kept manifest names, removed (or that would be): their paths on the remote,
    /// sorted.
    pub objects: Vec<String>,
    /// The size of those objects, in bytes.
    pub bytes: u64,
    /// Manifests kept: the local store holds the artifact, `all` was given, or younger than
    /// `min_age`.
    pub kept_manifests: usize,
    /// Objects a kept manifest names.
    pub kept_objects: usize,
    /// Unreferenced but younger than `min_age`.
    pub too_young: usize,
    /// Unfinished uploads older than `min_age` (removed, or that would be): a directory
    /// remote's staging files (`<object>#<n>`), left by a push killed midway.
    pub uploads: Vec<String>,
    /// What is under `objects/` or `manifests/` but is not a file the tool writes there, by name
    /// and kind: a link (and what it points to), a folder or FIFO where a file belongs, a file
    /// named otherwise. Never removed, never looked into.
    pub left_alone: Vec<String>,
    /// What could not be looked at: S3's unfinished multipart uploads.
    pub note: Option<String>,
}

/// Why `gc --remote` leaves an S3 remote's unfinished multipart uploads alone.
const S3_UPLOADS_NOTE: &str = "unfinished multipart uploads are not listed: object_store 0.13 has no ListMultipartUploads (a push aborts its own on an error or an interrupt, but a killed one leaves its parts); a bucket lifecycle rule AbortIncompleteMultipartUpload removes them";

impl Remote {
    /// Removes the manifests of artifacts the local store of `ws` does not hold (none with
    /// `all`), then the objects no remaining manifest names, then a directory remote's
    /// unfinished uploads; nothing younger than `min_age`, and nothing at all with `dry_run`.
    pub fn gc(&self, ws: &Workspace, opts: &GcOptions) -> Result<GcReport> {
        self.rt.block_on(self.gc_async(ws, opts))
    }

    async fn gc_async(&self, ws: &Workspace, opts: &GcOptions) -> Result<GcReport> {
        let cutoff = SystemTime::now() - opts.min_age;
        let old = |m: &Meta| m.modified <= cutoff;
        let local: HashSet<Path> = list_artifacts(ws)
            .into_iter()
            .filter_map(|(dir, _)| Manifest::read(&dir))
            .map(|m| layout::manifest_path(&m.instance, &m.fingerprint))
            .collect();
        let manifests = self.listing(layout::MANIFESTS).await?;
        let mut report = GcReport {
            left_alone: manifests.odd,
            ..Default::default()
        };
        let (mut kept, mut gone_manifests, mut gone_objects) = (Vec::new(), Vec::new(), Vec::new());
        for (path, meta) in manifests.files {
            if !layout::is_manifest_name(&path) {
                report.left_alone.push(path.to_string());
            } else if opts.all || local.contains(&path) || !old(&meta) {
                kept.push(path);
            } else {
                gone_manifests.push(path);
            }
        }
        report.kept_manifests = kept.len();
        let referenced = self.referenced(&kept).await?;
        let objects = self.listing(layout::OBJECTS).await?;
        report.left_alone.extend(objects.odd);
        for (path, meta) in objects.files {
            match layout::digest_of(&path) {
                None => report.left_alone.push(path.to_string()),
                Some(d) if referenced.contains(&d) => report.kept_objects += 1,
                Some(_) if !old(&meta) => report.too_young += 1,
                Some(_) => {
                    report.bytes += meta.size;
                    gone_objects.push(path);
                }
            }
        }
        gone_manifests.sort();
        gone_objects.sort();
        if !opts.dry_run {
            let odd = self.delete_all(&gone_manifests).await?;
            let odd_objects = self.delete_all(&gone_objects).await?;
            gone_manifests.retain(|p| !odd.contains(p));
            gone_objects.retain(|p| !odd_objects.contains(p));
            report
                .left_alone
                .extend(odd.iter().chain(&odd_objects).map(Path::to_string));
        }
        report.manifests = gone_manifests.iter().map(Path::to_string).collect();
        report.objects = gone_objects.iter().map(Path::to_string).collect();
        match &self.dir {
            Some(dir) => report.uploads = stale_uploads(dir, cutoff, opts.dry_run)?,
            None => report.note = Some(S3_UPLOADS_NOTE.into()),
        }
        report.left_alone.sort();
        report.left_alone.dedup();
        Ok(report)
    }

    /// The digests the kept manifests name (each manifest read once, several at a time).
    async fn referenced(&self, kept: &[Path]) -> Result<HashSet<String>> {
        let manifests: Vec<Option<bytes::Bytes>> = futures::stream::iter(kept)
            .map(|p| self.get_small(p))
            .buffered(16)
            .try_collect()
            .await?;
        let mut out = HashSet::new();
        for (bytes, path) in manifests.iter().zip(kept) {
            let Some(bytes) = bytes else { continue };
            let rm: RemoteManifest =
                serde_json::from_slice(bytes).map_err(|source| RemoteError::BadManifest {
                    object: path.to_string(),
                    source,
                })?;
            out.extend(rm.digests().map(str::to_string));
        }
        Ok(out)
    }

    /// Removes `paths`; on a directory remote only a regular file reached without a link (see
    /// [`dirfs::remove`]). Returns those that turned out not to be one, left in place.
    async fn delete_all(&self, paths: &[Path]) -> Result<HashSet<Path>> {
        if let Some(dir) = &self.dir {
            let mut odd = HashSet::new();
            for p in paths {
                let removed = dirfs::remove(dir, p.as_ref()).map_err(|source| RemoteError::Io {
                    path: dir.join(p.as_ref()),
                    source,
                })?;
                if removed == Removed::NotPlain {
                    odd.insert(p.clone());
                }
            }
            return Ok(odd);
        }
        futures::stream::iter(paths)
            .map(|p| async move {
                match self.store.delete(p).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.store_err(e)),
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| HashSet::new())
    }
}

/// A directory remote's unfinished uploads: object_store writes an object (or manifest) to
/// `<name>#<n>` and renames it when complete, and its listing leaves such files out. Those not
/// modified since `cutoff` are a killed push's (a push in progress writes to its own
/// continuously); they are removed unless `dry_run`, each only if it is a regular file reached
/// without a link ([`dirfs::remove`]). Returns their paths inside the remote.
fn stale_uploads(dir: &std::path::Path, cutoff: SystemTime, dry_run: bool) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for top in [layout::OBJECTS, layout::MANIFESTS] {
        for sub in read_dirs(&dir.join(top)) {
            for file in read_dirs(&sub) {
                let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                let meta = std::fs::symlink_metadata(&file);
                let old = meta
                    .as_ref()
                    .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t <= cutoff));
                let Ok(rel) = file.strip_prefix(dir) else {
                    continue;
                };
                let rel = rel.display().to_string();
                if !dirfs::is_staging(name) || !old {
                    continue;
                }
                if !dry_run {
                    let removed = dirfs::remove(dir, &rel).map_err(|source| RemoteError::Io {
                        path: file.clone(),
                        source,
                    })?;
                    if removed != Removed::Yes {
                        continue;
                    }
                }
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The entries of a directory (none when it cannot be read, or is itself a link), sorted;
/// links left out.
fn read_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    if std::fs::symlink_metadata(dir).map_or(true, |m| !m.is_dir()) {
        return Vec::new();
    }
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}
