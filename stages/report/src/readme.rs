//! The report's README: the title, one paragraph of what ran (runs by task, hardware, dates,
//! commit), the sections in order with a table of contents, and the sources of the published
//! figures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::ReportParams;
use crate::deps::{self, Dep, DepKind};
use crate::published::Published;
use crate::sections::{Runs, Section};

/// `Model size` → `model-size` (GitHub's heading anchors).
fn anchor(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The README: the title, the targets' paragraph (`opening`, when there are targets), what ran,
/// the note on how it was written, the contents, the sections, the sources and the notes on
/// this report.
pub(crate) fn readme(
    p: &ReportParams,
    published: &Published,
    all: &[Dep],
    runs: &Runs,
    sections: &[Section],
    notes: &[String],
    opening: Option<String>,
) -> String {
    let mut md = format!("# {}\n\n", p.title);
    if let Some(o) = opening {
        let _ = write!(md, "{o}\n\n");
    }
    md.push_str(&what_ran(p, all, &runs.pretrain, &runs.finetune));
    md.push_str("\n\n");
    if let Some(n) = p.notes.get("summary") {
        let _ = write!(md, "> **Note.** {n}\n\n");
    }
    md.push_str(&crate::data::para("readme.written_by"));
    let toc: Vec<String> = sections
        .iter()
        .map(|s| format!("[{}](#{})", s.title, anchor(&s.title)))
        .chain(["[Sources](#sources)".to_string()])
        .collect();
    let _ = writeln!(md, "{}", toc.join(" · "));
    for s in sections {
        let _ = write!(md, "\n## {}\n\n{}", s.title, s.body);
        if !md.ends_with('\n') {
            md.push('\n');
        }
    }
    md.push_str(&sources(published));
    if !notes.is_empty() {
        md.push_str("\n## Notes on this report\n\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

/// One paragraph: the runs by kind and task, the hardware, when they finished, the commit.
fn what_ran(p: &ReportParams, all: &[Dep], pretrain: &[&Dep], finetune: &[&Dep]) -> String {
    let mut what = Vec::new();
    if !pretrain.is_empty() {
        let models: BTreeSet<String> = pretrain
            .iter()
            .filter_map(|d| d.pretrain().model.clone())
            .collect();
        what.push(format!(
            "{} pretraining run{} (`{}`)",
            pretrain.len(),
            if pretrain.len() == 1 { "" } else { "s" },
            models.into_iter().collect::<Vec<_>>().join("`, `")
        ));
    }
    let mut by_task: BTreeMap<String, usize> = BTreeMap::new();
    for d in finetune {
        *by_task
            .entry(d.task().unwrap_or_else(|| "?".into()))
            .or_default() += 1;
    }
    let baseline_stages: Vec<&str> = all
        .iter()
        .filter(|d| d.kind == DepKind::Baseline && !d.metrics.is_null())
        .map(|d| d.instance.as_str())
        .collect();
    if !by_task.is_empty() {
        what.push(format!(
            "fine-tuning runs: {}",
            by_task
                .iter()
                .map(|(t, n)| format!("{} {n}", t.to_uppercase()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !baseline_stages.is_empty() {
        what.push(format!("baselines: `{}`", baseline_stages.join("`, `")));
    }
    let mut intro = if what.is_empty() {
        crate::data::text("readme.no_runs").to_string()
    } else {
        format!("What ran: {}.", what.join("; "))
    };
    intro.push_str(&hardware_dates_commit(p, all, pretrain, finetune));
    intro
}

/// " Hardware: …. The runs finished …. Commit `…`." (each part only when known).
fn hardware_dates_commit(
    p: &ReportParams,
    all: &[Dep],
    pretrain: &[&Dep],
    finetune: &[&Dep],
) -> String {
    let mut out = String::new();
    let hw: BTreeSet<String> = pretrain
        .iter()
        .chain(finetune.iter())
        .filter_map(|d| {
            let dev = d.device()?;
            Some(match d.threads() {
                Some(t) => format!("{dev} ({t} threads)"),
                None => dev,
            })
        })
        .collect();
    if !hw.is_empty() {
        let _ = write!(
            out,
            " Hardware: {}.",
            hw.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(span) = deps::date_span(all) {
        let _ = write!(out, " The runs finished {span}.");
    }
    if let Some(c) = &p.commit {
        let _ = write!(out, " Commit `{c}`.");
    }
    out
}

/// The `Sources` section: each published figure's source, with its repository, path and commit
/// where known.
fn sources(published: &Published) -> String {
    let mut md = String::from("\n## Sources\n\n");
    for (key, s) in &published.sources {
        let at = match (&s.repo, &s.path, &s.commit) {
            (Some(r), Some(path), Some(c)) => format!(" ({r}, `{path}` at {c})"),
            _ => String::new(),
        };
        let _ = writeln!(md, "- `{key}`: [{}]({}){at}", s.title, s.url);
    }
    md
}
