//! The `report` stage kind: regenerates brightmart/albert_zh's comparison tables from the
//! experiment's artifacts, with the published figures beside ours, and publishes them into
//! `results/`.
//!
//! It aggregates (one instance that sees every instance of its deps): typically
//! `deps: [pretrain, finetune_lcqmc, finetune_xnli, baseline_lcqmc, baseline_xnli]`. It reads
//! each dep's `metrics.json` and `metrics.jsonl` (docs/metrics.md) and the finish time in its
//! `MANIFEST.json`, and tells the deps apart by their stage kind as the engine passes it, so
//! stages may be named freely; each `metrics.json` is parsed once into its kind's record
//! (`pipeline_metrics`).
//! A missing upstream (no XNLI runs) leaves its table out with a note, never an error.
//!
//! Fine-tuning runs that differ only in their `seed` coordinate are one row, mean ± sample sd
//! (`seeds`); runs of different stages of one task (two LCQMC protocols) are rows of the same
//! table, told apart by their `Train data`, each protocol spelt out above the table. Absolute
//! data paths in the deps' metrics are written relative to the workspace root (`portable`).
//!
//! # What it writes
//!
//! Into its artifact and, unless `publish_dir: ""`, into `publish_dir` (default `results`):
//!
//! - `README.md`: what was run (protocol, data, steps, hardware, dates, commit), the tables,
//!   the plots, the sources of the published figures;
//! - per table a CSV (polars' writer) and a JSON (`{table, title, columns, rows, notes}`):
//!   `model_size` (albert_zh's configs and BERT-base: exact counts from our model code, the
//!   published counts, the difference explained), `model_size_grid` (base dimensions, E ∈
//!   {768, 128} × sharing, as the ALBERT paper's Tables 3 and 4), `pretraining` (one row per
//!   pretrain instance beside albert_zh's MLM/SOP/hours table), `lcqmc`, `xnli` (and any other
//!   fine-tuning task: our runs with and without pretraining beside the published rows),
//!   `throughput` (benchmarks and our runs); `ablations` (one row per pretraining run and
//!   fine-tuning stage: the recipe — sharing, objective, masking, task text — beside the effect
//!   of its weights, pretrained minus random init, mean ± sd over seeds; with two pretraining
//!   runs or more); `targets` (the `targets` param's claims read off the rows: met, missed, not
//!   measured, not run, with the evidence; the README's first paragraph says which, the missed
//!   ones first; only when the param states targets); and one per entry of the `tables`
//!   param (the experiment's own tables, declared as data: `declared.rs`). The built-in tables'
//!   columns, the task titles and the fixed sentences are data too, in `data/columns.txt` and
//!   `data/texts.txt`;
//! - `plots/*.svg`: pretraining loss, MLM and SOP accuracy against steps; dev accuracy per epoch
//!   of each fine-tuning task; test accuracy against pretraining tokens (`<task>_curve.svg`) for
//!   every task with runs from intermediate pretraining steps (`pretrain_step`);
//! - `published.json`: the published figures with their sources (a copy of
//!   `stages/report/published/albert_zh.json`).
//!
//! Everything is deterministic: the same artifacts give the same bytes (dates come from the
//! deps' run records, never from the clock; the commit only when given as a param).
//! Publishing writes into a temporary folder beside `publish_dir` and renames the files into
//! place; it never deletes a file it did not write (`results/bench/` stays).
//!
//! # Params
//!
//! | param | default | what |
//! |---|---|---|
//! | `publish_dir` | `results` | folder of the workspace to publish into; `""` publishes nothing |
//! | `title` | `ALBERT for Chinese: results` | the README's title |
//! | `commit` | none | the commit the results come from, printed in the README |
//! | `notes` | none | free text per table: `{summary: "…", pretraining: "…", lcqmc: "…", xnli: "…", model_size: "…", model_size_grid: "…", throughput: "…"}` |
//! | `bench_dir` | `<publish_dir>/bench` | where the benchmark `*.jsonl` files are read from; `""` reads none |
//! | `plots` | `true` | draw the SVG figures |
//! | `main_pretrain` | the pretrain instance with the most tokens seen (among those with fine-tuning runs; ties: the first by name) | the pretraining run whose fine-tuning rows the targets are read off, and the reference of the ablations table |
//! | `tables` | none | the experiment's own tables: `[{key, title, stages: […], group_by: […], columns: [{key, header, metric, scale, decimals}], note}]`, each the runs of `stages` grouped by the `group_by` coordinates, every column's metric (a path into metrics.json) as mean ± sd (see `declared.rs`) |
//! | `targets` | none | the experiment's claims, judged on the rows: `[{threshold: …}, {beats_random_init: …}, {beats_baselines: …}, {curve_points: …}, {device_time: …}, {cell: …}]` (`cell`: a bound on a figure of a row of a `tables` table) (see `targets/spec.rs`); none: no targets paragraph or table |
//!
//! Benchmark files are read from `bench_dir` and from the stage's `inputs:` that end in
//! `.jsonl`; list them as inputs (`inputs: ["results/bench/*.jsonl"]`) so that a new
//! measurement re-runs the report. The report is cached like any stage: to publish again after
//! deleting `results/`, use `pipeline run report --force`.

#![warn(missing_docs)]

mod ablations;
mod baselines;
mod bench;
mod corpus;
mod curve;
mod data;
mod declared;
mod deps;
mod figure_runs;
mod finetune_runs;
mod params;
mod portable;
mod protocol_sentence;
mod publish;
pub mod published;
mod readme;
mod recipes;
mod runs;
mod sections;
mod seeds;
pub mod sizes;
mod span_table;
pub mod table;
mod targets;

use std::path::PathBuf;

use anyhow::Context;
use pipeline_engine::ParamError;
use pipeline_engine::stage::{Stage, StageContext};
use serde_json::{Map, Value, json};

pub use deps::{Dep, DepKind};
pub use params::{ReportParams, known_params};
pub use publish::{Files, LEDGER};

use bench::BenchLine;
use published::Published;
use sections::{Runs, Sections};

/// The `report` stage kind (registered as `report`): see the module docs.
pub struct ReportStage;

impl Stage for ReportStage {
    fn kind(&self) -> &'static str {
        "report"
    }

    fn code_version(&self) -> &'static str {
        concat!(
            env!("STAGE_CODE_VERSION"),
            "+",
            env!("PUBLISHED_DATA_VERSION")
        )
    }

    fn aggregates(&self) -> bool {
        true
    }

    fn known_params(&self) -> &'static [&'static str] {
        known_params()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        ReportParams::parse(params).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = ReportParams::parse(ctx.params)?;
        let mut notes = Vec::new();
        let deps = deps::load(ctx.deps, ctx.root, &mut notes);
        let mut bench_files: Vec<PathBuf> = ctx
            .inputs
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
            .cloned()
            .collect();
        if let Some(dir) = &p.bench_dir {
            bench_files.extend(bench::list(&ctx.root.join(dir)));
        }
        let lines = bench::read(&bench_files, ctx.root, &mut notes);
        let report = build(&p, &deps, &lines, bench_files.is_empty(), notes)?;
        publish::write_all(ctx.out_dir, &report.files)?;
        std::fs::write(
            ctx.out_dir.join("metrics.json"),
            serde_json::to_string_pretty(&report.metrics)? + "\n",
        )?;
        if let Some(dir) = &p.publish_dir {
            let removed = publish::publish(ctx.root, dir, &report.files)
                .with_context(|| format!("publishing the report into {}", dir.display()))?;
            tracing::info!(
                target: "report",
                "published {} files into {}{}",
                report.files.len(),
                dir.display(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(" (removed {} it no longer writes)", removed.len())
                }
            );
        }
        Ok(())
    }
}

/// The report's files and its metrics.json.
pub struct Report {
    /// Every file the report writes, by path relative to its artifact (and to `publish:`).
    pub files: Files,
    /// The report's own `metrics.json`: the main pretraining run, each target's status, the
    /// tables, figures, deps and files it wrote, and its notes.
    pub metrics: Value,
}

pub(crate) fn json_bytes(v: &Value) -> anyhow::Result<Vec<u8>> {
    Ok((serde_json::to_string_pretty(v)? + "\n").into_bytes())
}

/// Builds every file of the report from the deps and benchmark lines (no I/O: the tests call
/// it on hand-made fixtures).
pub fn build(
    p: &ReportParams,
    all_deps: &[Dep],
    bench_lines: &[BenchLine],
    no_bench_files: bool,
    mut notes: Vec<String>,
) -> anyhow::Result<Report> {
    let published = Published::load()?;
    let runs = Runs::sort(all_deps);
    for d in runs.finetune.iter().filter(|d| d.task().is_none()) {
        notes.push(format!(
            "{}: its metrics.json names no `task`; left out of the fine-tuning tables",
            d.instance
        ));
    }
    let main = recipes::main_pretrain(&runs.pretrain, &runs.finetune, p.main_pretrain.as_deref());
    if let (Some(name), None) = (&p.main_pretrain, main) {
        notes.push(format!(
            "main_pretrain `{name}` is not among the report's pretraining runs; the targets \
             have no main run"
        ));
    }
    // The experiment's own tables first: the targets may state claims on their rows.
    let declared: Vec<_> = p
        .tables
        .iter()
        .map(|s| declared::table(s, all_deps))
        .collect();
    let built: Vec<table::Table> = declared.iter().flatten().cloned().collect();
    let rows = targets::Rows {
        main,
        pretrain: &runs.pretrain,
        finetune: &runs.finetune,
        baselines: &runs.baseline,
        tables: &built,
    };
    let targets = targets::targets(&p.targets, &rows);
    other_dep_notes(all_deps, &mut notes);

    let mut s = Sections::new(p, &published);
    s.targets(&targets)?;
    s.model_size()?;
    s.pretraining(&runs)?;
    s.ablations(&runs, main)?;
    for task in runs.tasks() {
        s.task(&task, &runs)?;
    }
    for (spec, t) in p.tables.iter().zip(declared) {
        s.declared(spec, t)?;
    }
    s.throughput(bench_lines, &runs, no_bench_files)?;

    let mut files = std::mem::take(&mut s.files);
    for f in &s.figures {
        files.insert(f.file.clone(), f.svg()?.into_bytes());
    }
    files.insert("published.json".into(), published::TEXT.as_bytes().to_vec());
    // The targets' paragraph comes first, under the title.
    let opening = (!targets.is_empty()).then(|| targets::paragraph(&targets, main));
    let readme = readme::readme(p, &published, all_deps, &runs, &s.sections, &notes, opening);
    files.insert("README.md".into(), readme.into_bytes());

    let metrics = json!({
        "main_pretrain": main.map(|m| m.instance.clone()),
        "targets": targets
            .iter()
            .map(|t| (t.key.to_string(), json!(t.status_word())))
            .collect::<Map<String, Value>>(),
        "tables": s.tables,
        "left_out": s.left_out,
        "figures": s.figures.iter().map(|f| f.file.clone()).collect::<Vec<_>>(),
        "deps": all_deps.iter().map(|d| d.instance.clone()).collect::<Vec<_>>(),
        "benchmark_lines": bench_lines.len(),
        "notes": notes,
        "published_to": p.publish_dir.as_ref().map(|d| d.display().to_string()),
        "files": files.keys().collect::<Vec<_>>(),
    });
    Ok(Report { files, metrics })
}

/// A note for each dep that is neither a pretraining nor a fine-tuning artifact.
fn other_dep_notes(all_deps: &[Dep], notes: &mut Vec<String>) {
    for d in all_deps.iter().filter(|d| d.kind == DepKind::Other) {
        notes.push(format!(
            "{}: not a pretraining or fine-tuning artifact; not used",
            d.instance
        ));
    }
}
