//! Jobs a previous controller left behind: it was killed (`kill -9`, a lost login session)
//! while its jobs ran on. Its run record still says `running` and lists them; since this run
//! holds the workspace lock, that controller is gone. The jobs become this run's: one whose
//! instance is submitted again with the same fingerprint is re-attached instead of submitted
//! twice; the others are cancelled.

use std::path::Path;

use crate::manifest::{JobEntry, RunSummary};
use crate::workspace::Workspace;

/// The unfinished jobs of interrupted runs. Their records are marked `interrupted` and the jobs
/// done there: this run's record lists them from now on, so a crash of this run too loses
/// nothing.
pub fn take(ws: &Workspace, current_run: &str) -> Vec<JobEntry> {
    let Ok(entries) = std::fs::read_dir(ws.runs()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(mut summary) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<RunSummary>(&b).ok())
        else {
            continue;
        };
        if summary.run_id == current_run || summary.status != "running" {
            continue;
        }
        let open: Vec<JobEntry> = summary.jobs.iter().filter(|j| !j.done).cloned().collect();
        summary.status = "interrupted".into();
        for j in &mut summary.jobs {
            j.done = true;
        }
        write(&path, &summary);
        out.extend(open);
    }
    out
}

fn write(path: &Path, summary: &RunSummary) {
    let tmp = path.with_extension("json.tmp");
    if let Ok(bytes) = serde_json::to_vec_pretty(summary)
        && std::fs::write(&tmp, bytes).is_ok()
    {
        let _ = std::fs::rename(&tmp, path);
    }
}
