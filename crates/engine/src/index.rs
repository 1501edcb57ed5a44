//! The sled index: which fingerprint each instance last produced, every stage run record, and
//! the file-hash cache. It is only an index: everything but the hash cache is rebuilt from the
//! manifests on disk when the database is missing or corrupt.
//!
//! sled lets one process open a database. The `run` that holds the workspace lock keeps it
//! open; read-only commands copy what they need into memory and close it at once, and when a
//! run has it they rebuild the same view from the manifests instead.
//!
//! A run starts from the snapshot of the read side ([`crate::index_snapshot`]) when sled has not
//! changed since it was written, and opens sled only when it has something to write: a run in
//! which nothing runs reads two small files and never pays sled's fsyncs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::error::IndexError;
use crate::hash::FileStamp;
use crate::index_snapshot::{self, Snapshot};
use crate::manifest::{Manifest, StageRecord};
use crate::workspace::Workspace;

/// sled tree: instance name → the fingerprint it last produced.
const LATEST: &str = "latest";
/// sled tree: `finished\0run_id\0instance` → a stage run record (JSON).
const RECORDS: &str = "records";
/// sled tree: file path → its stamp (32 bytes) and blake3 digest (hex), the hash cache.
const HASHES: &str = "hashes";

/// The index of a workspace, open for a run (sled, or the snapshot until the first write) or
/// read into memory for a read-only command.
pub struct Index {
    db: Option<sled::Db>,
    latest: HashMap<String, String>,
    records: Vec<StageRecord>,
    hashes: HashMap<String, (FileStamp, String)>,
    /// Said when the view was rebuilt rather than read, for the CLI to show.
    pub note: Option<String>,
    /// Whether this run changed the database: a run where nothing ran writes nothing and
    /// skips the flush (sled's fsyncs were most of a no-op run's time).
    dirty: bool,
    /// A run's index read from the snapshot: the workspace whose sled to open on the first
    /// write. `None` once sled is open, and for read-only views.
    deferred: Option<Workspace>,
    /// sled's directory, when this index is a run's (its snapshot is rewritten on close).
    run_dir: Option<PathBuf>,
}

impl Index {
    /// Opens the index for writing; the caller holds the workspace lock. Rebuilds it from the
    /// manifests if it is missing or unreadable.
    pub fn open_for_run(ws: &Workspace) -> Result<Index, IndexError> {
        if let Some(Snapshot { latest, hashes }) = index_snapshot::load(&ws.index_path()) {
            return Ok(Index {
                db: None,
                latest,
                records: Vec::new(),
                hashes,
                note: None,
                dirty: false,
                deferred: Some(ws.clone()),
                run_dir: Some(ws.index_path()),
            });
        }
        let mut index = Index::open_sled_for_run(ws)?;
        index.run_dir = Some(ws.index_path());
        Ok(index)
    }

    /// Opens sled itself, waiting for a read-only command that holds it; a corrupt database
    /// is moved aside and rebuilt, a missing or unmarked one rebuilt, from the manifests.
    fn open_sled_for_run(ws: &Workspace) -> Result<Index, IndexError> {
        let path = ws.index_path();
        index_snapshot::remove(&path);
        let existed = path.exists();
        let db = match open_with_retry(&path) {
            Ok(db) => db,
            Err(cause) if is_lock_error(&cause) => return Err(IndexError::Held { path, cause }),
            Err(e) => {
                let aside = path.with_file_name(format!("index.corrupt-{}", std::process::id()));
                std::fs::rename(&path, &aside).map_err(IndexError::MoveAside)?;
                let db = sled::open(&path)?;
                rebuild_into(ws, &db)?;
                return Ok(Index::with_db(
                    db,
                    Some(format!(
                        "the index {} was corrupt ({e}); moved it to {} and rebuilt it from the manifests",
                        path.display(),
                        aside.display()
                    )),
                )
                .dirty());
            }
        };
        let valid = db.get("meta")?.is_some();
        if !existed || !valid {
            let n = rebuild_into(ws, &db)?;
            db.insert("meta", &b"1"[..])?;
            let what = if existed { "unreadable" } else { "missing" };
            let note = (n > 0).then(|| {
                format!(
                    "the index was {what} and has been rebuilt from {n} run records in the artifact store"
                )
            });
            return Ok(Index::with_db(db, note).dirty());
        }
        Ok(Index::with_db(db, None))
    }

    fn with_db(db: sled::Db, note: Option<String>) -> Index {
        Index {
            db: Some(db),
            latest: HashMap::new(),
            records: Vec::new(),
            hashes: HashMap::new(),
            note,
            dirty: false,
            deferred: None,
            run_dir: None,
        }
    }

    /// Opens sled for a run that started from the snapshot, now that it has to write.
    fn ensure_db(&mut self) -> Result<(), IndexError> {
        if let Some(ws) = self.deferred.take() {
            let opened = Index::open_sled_for_run(&ws)?;
            self.dirty |= opened.dirty;
            self.db = opened.db.clone();
            self.latest.clear();
            self.hashes.clear();
        }
        Ok(())
    }

    /// Marks unflushed writes (a rebuilt index).
    fn dirty(mut self) -> Index {
        self.dirty = true;
        self
    }

    /// An in-memory view for read-only commands, from sled if it is free, else from the
    /// manifests (while a run holds it).
    pub fn open_read_only(ws: &Workspace) -> Index {
        let path = ws.index_path();
        if path.exists()
            && let Ok(db) = sled::open(&path)
            && db.get("meta").ok().flatten().is_some()
        {
            let mut index = Index {
                db: None,
                latest: HashMap::new(),
                records: Vec::new(),
                hashes: HashMap::new(),
                note: None,
                dirty: false,
                deferred: None,
                run_dir: None,
            };
            if index.load_from(&db).is_ok() {
                return index;
            }
        }
        let (latest, records) = scan(ws);
        let note = (ws.holder().is_some())
            .then(|| "a run is in progress; read from the manifests".to_string());
        Index {
            db: None,
            latest,
            records,
            hashes: HashMap::new(),
            note,
            dirty: false,
            deferred: None,
            run_dir: None,
        }
    }

    fn load_from(&mut self, db: &sled::Db) -> sled::Result<()> {
        for kv in db.open_tree(LATEST)?.iter() {
            let (k, v) = kv?;
            self.latest.insert(
                String::from_utf8_lossy(&k).into(),
                String::from_utf8_lossy(&v).into(),
            );
        }
        for kv in db.open_tree(RECORDS)?.iter() {
            let (_, v) = kv?;
            if let Ok(r) = serde_json::from_slice(&v) {
                self.records.push(r);
            }
        }
        for kv in db.open_tree(HASHES)?.iter() {
            let (k, v) = kv?;
            if let Some(stamp) = FileStamp::from_bytes(&v) {
                self.hashes.insert(
                    String::from_utf8_lossy(&k).into(),
                    (stamp, String::from_utf8_lossy(&v[32..]).into()),
                );
            }
        }
        Ok(())
    }

    /// The fingerprint `instance` produced last; `None` if it never succeeded (or the index
    /// cannot be read).
    pub fn latest(&self, instance: &str) -> Option<String> {
        match &self.db {
            Some(db) => db
                .open_tree(LATEST)
                .ok()?
                .get(instance)
                .ok()
                .flatten()
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            None => self.latest.get(instance).cloned(),
        }
    }

    /// Records `fingerprint` as what `instance` produced last (a run from the snapshot opens
    /// sled only when it changes).
    pub fn set_latest(&mut self, instance: &str, fingerprint: &str) -> Result<(), IndexError> {
        if self.deferred.is_some() {
            if self.latest.get(instance).map(String::as_str) == Some(fingerprint) {
                return Ok(());
            }
            self.ensure_db()?;
        }
        match &self.db {
            Some(db) => {
                let tree = db.open_tree(LATEST)?;
                if tree.get(instance)?.as_deref() != Some(fingerprint.as_bytes()) {
                    tree.insert(instance, fingerprint.as_bytes())?;
                    self.dirty = true;
                }
            }
            None => {
                self.latest
                    .insert(instance.to_string(), fingerprint.to_string());
            }
        }
        Ok(())
    }

    /// Adds a stage run record (a success, a failure, or a pull from a remote).
    pub fn add_record(&mut self, record: &StageRecord) -> Result<(), IndexError> {
        self.ensure_db()?;
        match &self.db {
            Some(db) => {
                let key = format!(
                    "{}\0{}\0{}",
                    record.finished, record.run_id, record.instance
                );
                db.open_tree(RECORDS)?
                    .insert(key, serde_json::to_vec(record)?)?;
                self.dirty = true;
            }
            None => self.records.push(record.clone()),
        }
        Ok(())
    }

    /// Every stage run record, oldest first (a run's index started from the snapshot has
    /// none in memory: read them from sled).
    pub fn records(&mut self) -> Vec<StageRecord> {
        if let Err(e) = self.ensure_db() {
            warn!(
                "could not open the index to read run records: {}",
                crate::error::chain_text(&e)
            );
        }
        let mut out: Vec<StageRecord> = match &self.db {
            Some(db) => db
                .open_tree(RECORDS)
                .map(|t| {
                    t.iter()
                        .values()
                        .filter_map(|v| v.ok().and_then(|v| serde_json::from_slice(&v).ok()))
                        .collect()
                })
                .unwrap_or_default(),
            None => self.records.clone(),
        };
        out.sort_by(|a, b| a.finished.cmp(&b.finished));
        out
    }

    /// The cached digest of `path` if its stamp is unchanged.
    pub fn cached_hash(&self, path: &str, stamp: FileStamp) -> Option<String> {
        let (s, h) = match &self.db {
            Some(db) => {
                let v = db.open_tree(HASHES).ok()?.get(path).ok()??;
                (
                    FileStamp::from_bytes(&v)?,
                    String::from_utf8_lossy(&v[32..]).into_owned(),
                )
            }
            None => self.hashes.get(path).cloned()?,
        };
        (s == stamp).then_some(h)
    }

    /// Caches the digest of `path` under its stamp. A file modified in the last two seconds is
    /// not cached (it could change again within the same timestamp tick); a failure to write
    /// is a warning.
    pub fn store_hash(&mut self, path: &str, stamp: FileStamp, digest: &str) {
        if !stamp.is_settled() {
            return;
        }
        if self.deferred.is_some() {
            if self.hashes.get(path) == Some(&(stamp, digest.to_string())) {
                return;
            }
            if let Err(e) = self.ensure_db() {
                warn!(
                    "could not open the index to cache a file hash: {}",
                    crate::error::chain_text(&e)
                );
                return;
            }
        }
        match &self.db {
            Some(db) => {
                let mut v = stamp.to_bytes().to_vec();
                v.extend_from_slice(digest.as_bytes());
                if let Ok(t) = db.open_tree(HASHES)
                    && t.get(path).ok().flatten().as_deref() != Some(&v[..])
                    && t.insert(path, v).is_ok()
                {
                    self.dirty = true;
                }
            }
            None => {
                self.hashes
                    .insert(path.to_string(), (stamp, digest.to_string()));
            }
        }
    }

    /// Makes this run's writes durable; a no-op when the run wrote nothing.
    pub fn flush(&mut self) {
        if !self.dirty {
            return;
        }
        if let Some(db) = &self.db
            && let Err(e) = db.flush()
        {
            warn!("could not flush the index: {e}");
        }
        self.dirty = false;
    }
}

impl Drop for Index {
    /// A run's index closes sled and then writes the snapshot the next run starts from.
    fn drop(&mut self) {
        let (Some(dir), Some(db)) = (self.run_dir.take(), self.db.take()) else {
            return;
        };
        let read = || -> sled::Result<Snapshot> {
            let mut latest = HashMap::new();
            for kv in db.open_tree(LATEST)?.iter() {
                let (k, v) = kv?;
                latest.insert(
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                );
            }
            let mut hashes = HashMap::new();
            for kv in db.open_tree(HASHES)?.iter() {
                let (k, v) = kv?;
                if let Some(stamp) = FileStamp::from_bytes(&v) {
                    hashes.insert(
                        String::from_utf8_lossy(&k).into_owned(),
                        (stamp, String::from_utf8_lossy(&v[32..]).into_owned()),
                    );
                }
            }
            Ok(Snapshot { latest, hashes })
        };
        let snapshot = read();
        if self.dirty
            && let Err(e) = db.flush()
        {
            warn!("could not flush the index: {e}");
        }
        // sled writes its log when the last handle goes: the snapshot's stamp must come after.
        drop(db);
        match snapshot {
            Ok(s) => index_snapshot::save(&dir, &s),
            Err(e) => tracing::debug!("no index snapshot: {e}"),
        }
    }
}

fn is_lock_error(e: &sled::Error) -> bool {
    e.to_string().contains("could not acquire lock")
}

/// A read-only command may hold the database for a moment; wait for it rather than fail.
fn open_with_retry(path: &Path) -> sled::Result<sled::Db> {
    let mut last = None;
    for _ in 0..100 {
        match sled::open(path) {
            Ok(db) => return Ok(db),
            Err(e) if is_lock_error(&e) => {
                last = Some(e);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("loop ran"))
}

/// Latest fingerprint per instance and all stage records, from the manifests (successful
/// runs) and the kept records of failed ones.
pub fn scan(ws: &Workspace) -> (HashMap<String, String>, Vec<StageRecord>) {
    let mut records = Vec::new();
    for (dir, _) in list_artifacts(ws) {
        if let Some(m) = Manifest::read(&dir) {
            records.push(m.record);
        }
    }
    for instance_dir in read_dirs(&ws.failed()) {
        for run_dir in read_dirs(&instance_dir) {
            if let Ok(bytes) = std::fs::read(run_dir.join("record.json"))
                && let Ok(r) = serde_json::from_slice::<StageRecord>(&bytes)
            {
                records.push(r);
            }
        }
    }
    records.sort_by(|a, b| a.finished.cmp(&b.finished));
    let mut latest = HashMap::new();
    for r in records.iter().filter(|r| r.status == "ok") {
        latest.insert(r.instance.clone(), r.fingerprint.clone());
    }
    (latest, records)
}

/// Fills `db` from the manifests and kept failure records ([`scan`]); returns how many
/// records it holds.
fn rebuild_into(ws: &Workspace, db: &sled::Db) -> Result<usize, IndexError> {
    let (latest, records) = scan(ws);
    let t = db.open_tree(LATEST)?;
    for (k, v) in &latest {
        t.insert(k.as_str(), v.as_bytes())?;
    }
    let t = db.open_tree(RECORDS)?;
    for r in &records {
        let key = format!("{}\0{}\0{}", r.finished, r.run_id, r.instance);
        t.insert(key, serde_json::to_vec(r)?)?;
    }
    db.insert("meta", &b"1"[..])?;
    db.flush()?;
    if !records.is_empty() {
        info!("rebuilt the index from {} run records", records.len());
    }
    Ok(records.len())
}

/// Every artifact directory with its fingerprint.
pub fn list_artifacts(ws: &Workspace) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for instance_dir in read_dirs(&ws.artifacts()) {
        for fp_dir in read_dirs(&instance_dir) {
            let fp = fp_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((fp_dir, fp));
        }
    }
    out
}

fn read_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}
