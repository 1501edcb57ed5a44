//! Upkeep of the artifact store: `gc` removes what nothing references, `verify` re-hashes
//! every artifact and moves corrupt ones into quarantine. Both write, so the caller holds the
//! workspace lock.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Pipeline;
use crate::exec::{hash_tree, predict};
use crate::index::{Index, list_artifacts};
use crate::manifest::{LOG_DIR, MANIFEST, Manifest, now_string};
use crate::workspace::dir_name;

#[derive(Debug, Serialize)]
pub struct Removed {
    pub instance: String,
    pub fingerprint: String,
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub removed: Vec<Removed>,
    pub kept: usize,
    pub bytes_freed: u64,
}

/// An artifact is referenced if it is the latest of an instance in the current pipeline, or
/// what the instance's current fingerprint would fetch. Everything else goes, with stale work
/// areas, leftovers of killed runs and the quarantine.
pub fn gc(p: &Pipeline, index: &mut Index, dry_run: bool) -> anyhow::Result<GcReport> {
    let mut keep: HashSet<(String, String)> = HashSet::new();
    for inst in &p.plan.instances {
        if let Some(fp) = index.latest(&inst.name) {
            keep.insert((dir_name(&inst.name), fp));
        }
    }
    let all: Vec<usize> = (0..p.plan.instances.len()).collect();
    for o in predict(p, index, &all, &HashSet::new())? {
        if let Some(fp) = o.fingerprint {
            keep.insert((dir_name(&o.instance), fp));
        }
    }
    let mut report = GcReport {
        dry_run,
        removed: Vec::new(),
        kept: 0,
        bytes_freed: 0,
    };
    for (dir, fp) in list_artifacts(&p.ws) {
        let instance_dir = dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if keep.contains(&(instance_dir.clone(), fp.clone())) {
            report.kept += 1;
            continue;
        }
        let instance = Manifest::read(&dir)
            .map(|m| m.instance)
            .unwrap_or(instance_dir);
        remove(&mut report, instance, fp, dir, dry_run)?;
    }
    let work = p.ws.state.join("work");
    for (dir, fp) in two_levels(&work) {
        let instance_dir = dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !keep.contains(&(instance_dir.clone(), fp.clone())) {
            remove(
                &mut report,
                format!("{instance_dir} (work area)"),
                fp,
                dir,
                dry_run,
            )?;
        }
    }
    // The gc holds the run lock, so everything in tmp/ is the leftover of a killed run.
    if let Ok(entries) = std::fs::read_dir(p.ws.tmp()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            remove(
                &mut report,
                "(killed run)".into(),
                name,
                entry.path(),
                dry_run,
            )?;
        }
    }
    for (dir, name) in two_levels(&p.ws.quarantine()) {
        remove(&mut report, "(quarantined)".into(), name, dir, dry_run)?;
    }
    if !dry_run {
        for parent in [p.ws.artifacts(), work, p.ws.quarantine()] {
            remove_empty_children(&parent);
        }
    }
    Ok(report)
}

fn remove(
    report: &mut GcReport,
    instance: String,
    fingerprint: String,
    path: PathBuf,
    dry_run: bool,
) -> anyhow::Result<()> {
    let bytes = dir_size(&path);
    if !dry_run {
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| anyhow::anyhow!("removing {}: {e}", path.display()))?;
    }
    report.bytes_freed += bytes;
    report.removed.push(Removed {
        instance,
        fingerprint,
        path,
        bytes,
    });
    Ok(())
}

fn two_levels(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for a in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            out.push((b.path(), b.file_name().to_string_lossy().into_owned()));
        }
    }
    out
}

fn remove_empty_children(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = std::fs::remove_dir(e.path());
    }
}

fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| dir_size(&e.path()))
            .sum()
    } else {
        meta.len()
    }
}

#[derive(Debug, Serialize)]
pub struct Corrupt {
    pub instance: String,
    pub fingerprint: String,
    pub problems: Vec<String>,
    pub quarantined_to: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub checked: usize,
    pub corrupt: Vec<Corrupt>,
}

/// Re-hashes every artifact against its manifest; moves the ones that differ into
/// `.pipeline/quarantine/` so that the next run makes them again.
pub fn verify(p: &Pipeline) -> anyhow::Result<VerifyReport> {
    let mut report = VerifyReport {
        ok: true,
        checked: 0,
        corrupt: Vec::new(),
    };
    for (dir, fp) in list_artifacts(&p.ws) {
        report.checked += 1;
        let problems = check(&dir, &fp);
        if problems.is_empty() {
            continue;
        }
        let instance_dir = dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let instance = Manifest::read(&dir)
            .map(|m| m.instance)
            .unwrap_or_else(|| instance_dir.clone());
        let dest =
            p.ws.quarantine()
                .join(&instance_dir)
                .join(format!("{fp}-{}", now_string().replace(':', "-")));
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&dir, &dest)
            .map_err(|e| anyhow::anyhow!("quarantining {}: {e}", dir.display()))?;
        report.ok = false;
        report.corrupt.push(Corrupt {
            instance,
            fingerprint: fp,
            problems,
            quarantined_to: dest,
        });
    }
    Ok(report)
}

fn check(dir: &Path, fp: &str) -> Vec<String> {
    let Some(m) = Manifest::read(dir) else {
        return vec!["MANIFEST.json is missing or unreadable".into()];
    };
    let mut problems = Vec::new();
    if m.fingerprint != fp {
        problems.push(format!(
            "the manifest is for fingerprint {}, not {fp}",
            m.fingerprint
        ));
    }
    let actual = match hash_tree(dir) {
        Ok(files) => files,
        Err(e) => return vec![format!("cannot read the artifact: {e:#}")],
    };
    let actual: HashMap<&str, (&u64, &str)> = actual
        .iter()
        .filter(|f| f.path != MANIFEST && !f.path.starts_with(&format!("{LOG_DIR}/")))
        .map(|f| (f.path.as_str(), (&f.size, f.blake3.as_str())))
        .collect();
    for f in &m.files {
        match actual.get(f.path.as_str()) {
            None => problems.push(format!("{} is missing", f.path)),
            Some((size, digest)) if **size != f.size || *digest != f.blake3 => {
                problems.push(format!(
                    "{} changed (blake3 {} expected {})",
                    f.path,
                    &digest[..12],
                    &f.blake3[..12]
                ));
            }
            _ => {}
        }
    }
    let listed: HashSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    for path in actual.keys().filter(|p| !listed.contains(*p)) {
        problems.push(format!("{path} is not in the manifest"));
    }
    problems
}
