//! The `report` stage kind: regenerates brightmart/albert_zh's comparison tables from the
//! experiment's artifacts, with the published figures beside ours, and publishes them into
//! `results/`.
//!
//! It aggregates (one instance that sees every instance of its deps): typically
//! `deps: [pretrain, finetune_lcqmc, finetune_xnli, baseline_lcqmc, baseline_xnli]`. It reads
//! each dep's `metrics.json` and `metrics.jsonl` (docs/metrics.md) and the finish time in its
//! `MANIFEST.json`, and tells the deps apart by their metrics (a fine-tuning run has a `task`
//! and a `history`, a baseline stage a `task` and `baselines`), so stages may be named freely.
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
//!   runs or more); `targets` (issue 23's targets read off the rows: met, missed, not run, with
//!   the evidence; the README's first paragraph says which);
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
//!
//! Benchmark files are read from `bench_dir` and from the stage's `inputs:` that end in
//! `.jsonl`; list them as inputs (`inputs: ["results/bench/*.jsonl"]`) so that a new
//! measurement re-runs the report. The report is cached like any stage: to publish again after
//! deleting `results/`, use `pipeline run report --force`.

mod ablations;
mod baselines;
mod bench;
mod corpus;
mod curve;
mod deps;
mod finetune_runs;
mod params;
pub mod plots;
mod portable;
mod publish;
pub mod published;
mod recipes;
mod runs;
mod seeds;
pub mod sizes;
mod span_table;
pub mod table;
mod targets;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use pipeline_engine::ParamError;
use pipeline_engine::stage::{Stage, StageContext};
use serde_json::{Map, Value, json};

pub use deps::{Dep, DepKind};
pub use params::{KNOWN_PARAMS, ReportParams};
pub use publish::{Files, LEDGER};

use bench::BenchLine;
use published::Published;
use table::Table;

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
        KNOWN_PARAMS
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        ReportParams::parse(params).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = ReportParams::parse(ctx.params)?;
        let mut notes = Vec::new();
        let mut deps = deps::load(ctx.deps, &mut notes);
        for d in &mut deps {
            portable::relativize(&mut d.metrics, ctx.root);
        }
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
    pub files: Files,
    pub metrics: Value,
}

fn json_bytes(v: &Value) -> anyhow::Result<Vec<u8>> {
    Ok((serde_json::to_string_pretty(v)? + "\n").into_bytes())
}

/// A section of the README.
struct Section {
    title: String,
    body: String,
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
    let mut files = Files::new();
    let mut sections: Vec<Section> = Vec::new();
    let mut tables: BTreeMap<String, usize> = BTreeMap::new();
    let mut left_out: Vec<String> = Vec::new();

    let pretrain: Vec<&Dep> = all_deps
        .iter()
        .filter(|d| d.kind == DepKind::Pretrain && !d.metrics.is_null())
        .collect();
    let finetune: Vec<&Dep> = all_deps
        .iter()
        .filter(|d| d.kind == DepKind::Finetune && !d.metrics.is_null())
        .collect();
    let baseline: Vec<&Dep> = all_deps
        .iter()
        .filter(|d| d.kind == DepKind::Baseline && !d.metrics.is_null())
        .collect();
    let masks: Vec<&Dep> = all_deps
        .iter()
        .filter(|d| d.kind == DepKind::Mask && !d.metrics.is_null())
        .collect();
    for d in finetune.iter().filter(|d| d.task().is_none()) {
        notes.push(format!(
            "{}: its metrics.json names no `task`; left out of the fine-tuning tables",
            d.instance
        ));
    }
    let cleans: Vec<&Dep> = all_deps
        .iter()
        .filter(|d| d.kind == DepKind::Clean && !d.metrics.is_null())
        .collect();
    let main = recipes::main_pretrain(&pretrain, &finetune, p.main_pretrain.as_deref());
    if let (Some(name), None) = (&p.main_pretrain, main) {
        notes.push(format!(
            "main_pretrain `{name}` is not among the report's pretraining runs; the targets \
             have no main run"
        ));
    }
    let targets = targets::targets(&targets::Rows {
        main,
        pretrain: &pretrain,
        finetune: &finetune,
        baselines: &baseline,
        cleans: &cleans,
    });
    for d in all_deps.iter().filter(|d| d.kind == DepKind::Other) {
        notes.push(format!(
            "{}: not a pretraining or fine-tuning artifact; not used",
            d.instance
        ));
    }

    let add_table = |t: &Table,
                     extra: Map<String, Value>,
                     files: &mut Files,
                     tables: &mut BTreeMap<String, usize>|
     -> anyhow::Result<String> {
        files.insert(format!("{}.csv", t.key), t.csv()?);
        files.insert(format!("{}.json", t.key), json_bytes(&t.json(extra)?)?);
        tables.insert(t.key.clone(), t.rows.len());
        let mut md = t.markdown()?;
        for n in &t.notes {
            let _ = write!(md, "\n{n}\n");
        }
        if let Some(n) = p.notes.get(&t.key) {
            let _ = write!(md, "\n> **Note.** {n}\n");
        }
        let _ = write!(
            md,
            "\nData: [{k}.csv]({k}.csv) · [{k}.json]({k}.json)\n",
            k = t.key
        );
        Ok(md)
    };
    let mut figures: Vec<plots::Figure> = Vec::new();
    let figure_md = |figs: &[plots::Figure], figures: &mut Vec<plots::Figure>| -> String {
        let mut md = String::new();
        for f in figs {
            if !p.plots || f.is_empty() {
                continue;
            }
            let _ = writeln!(md, "\n![{}]({})", f.title, f.file);
            figures.push(f.clone());
        }
        md
    };

    // 0. The targets, their evidence.
    {
        let t = targets::table(&targets);
        let mut body = String::from(
            "Issue 23's targets for the committed experiment, each read off this report's rows \
             (the main pretraining run's fine-tuning stages, pretrained against random init of \
             the same architecture; a difference counts when it exceeds twice the larger seed \
             sd, with at least 3 seeds on each side). `not run`: the rows it needs are not among \
             the report's deps.\n\n",
        );
        body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
        sections.push(Section {
            title: "Targets".into(),
            body,
        });
    }

    // 1. Model size.
    {
        let t = sizes::model_size(&published);
        let mut body = String::from(
            "Parameters and fp32 size of albert_zh's configurations, counted exactly by our \
             model code (`AlbertConfig::parameter_count`), beside the published figures.\n\n",
        );
        body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
        let g = sizes::model_size_grid(&published);
        let _ = write!(
            body,
            "\n### {}\n\nThe ALBERT paper's ablation (Tables 3 and 4) at base dimensions, counted \
             for our vocabulary and at V = 30,000.\n\n",
            g.title
        );
        body.push_str(&add_table(&g, Map::new(), &mut files, &mut tables)?);
        sections.push(Section {
            title: "Model size".into(),
            body,
        });
    }

    // 2. Pretraining.
    if pretrain.is_empty() {
        left_out.push("pretraining".into());
        sections.push(Section {
            title: "Pretraining".into(),
            body: "Not in this report: no pretraining run among the report's deps (add the \
                   `pretrain` stage to `deps`). albert_zh's published figures are in \
                   [published.json](published.json).\n"
                .into(),
        });
    } else {
        let t = runs::pretraining(&pretrain, &published, &cleans);
        let mut body = runs::pretraining_sentence(&pretrain);
        body.push_str("\n\n");
        if let Some(m) = masks.first() {
            let _ = write!(body, "{}\n\n", corpus::mask_sentence(m));
        }
        for c in &cleans {
            let _ = write!(body, "{}\n\n", corpus::corpus_sentence(c));
        }
        body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
        body.push_str(&figure_md(&plots::pretraining(&pretrain), &mut figures));
        sections.push(Section {
            title: "Pretraining".into(),
            body,
        });
    }

    // 2b. Ablations: two pretraining runs or more with fine-tuning runs.
    // (One pretraining run is no ablation: no section, nothing left out.)
    if let Some(t) = ablations::ablations(&pretrain, &finetune, &cleans, main) {
        let mut body = String::from(
            "Each pretraining run's recipe beside the downstream effect of its weights on every \
             fine-tuning stage run from them: ALBERT's own ablations (cross-layer sharing, the \
             SOP objective, whole-word masking) and task text in the corpus, at this \
             experiment's budget, stated under the table.\n\n",
        );
        body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
        sections.push(Section {
            title: "Ablations".into(),
            body,
        });
    }

    // 3. Fine-tuning: LCQMC and XNLI always get a section; other tasks when they ran.
    let mut tasks: Vec<String> = vec!["lcqmc".into(), "xnli".into()];
    for d in finetune.iter().chain(&baseline) {
        if let Some(task) = d.task()
            && !tasks.contains(&task)
        {
            tasks.push(task);
        }
    }
    for task in &tasks {
        let runs_of: Vec<&Dep> = finetune
            .iter()
            .filter(|d| d.task().as_deref() == Some(task.as_str()))
            .copied()
            .collect();
        let baselines_of: Vec<&Dep> = baseline
            .iter()
            .filter(|d| d.task().as_deref() == Some(task.as_str()))
            .copied()
            .collect();
        let title = finetune_runs::task_title(task);
        let pubd = published.task(task);
        if runs_of.is_empty() && baselines_of.is_empty() {
            left_out.push(task.clone());
            sections.push(Section {
                title,
                body: format!(
                    "Not in this report: no fine-tuning run of {} among the report's deps (a \
                     `finetune` stage with `task: {task}`, such as `finetune_{task}`, in \
                     `deps`).{}\n",
                    task.to_uppercase(),
                    if pubd.is_some() {
                        " albert_zh's published figures are in [published.json](published.json)."
                    } else {
                        ""
                    }
                ),
            });
            continue;
        }
        let t = finetune_runs::finetune(task, &runs_of, &baselines_of, pubd);
        let mut body = String::new();
        let (sentences, protocols) = protocol_sentences(&runs_of, &baselines_of);
        for s in sentences {
            let _ = write!(body, "{s}\n\n");
        }
        if let Some(pb) = pubd {
            let _ = write!(
                body,
                "Published ({}): {}. Shown as best (average) where the source gives both.\n\n",
                published.cite(&pb.source),
                pb.protocol
            );
        }
        let mut extra = Map::new();
        extra.insert(
            "protocol".into(),
            runs_of
                .iter()
                .chain(&baselines_of)
                .find_map(|d| deps::get(&d.metrics, &["protocol"]))
                .cloned()
                .unwrap_or(Value::Null),
        );
        extra.insert("protocols".into(), Value::Object(protocols));
        body.push_str(&add_table(&t, extra, &mut files, &mut tables)?);
        for d in &baselines_of {
            if let Some(s) = baselines::length_analysis(d) {
                let _ = write!(body, "\n{s}\n");
            }
        }
        let fig = plots::finetune(task, &title, &runs_of);
        body.push_str(&figure_md(&[fig], &mut figures));
        if let Some((t, sentences, fig)) = curve::curve(task, &title, &runs_of, &baselines_of) {
            let _ = write!(
                body,
                "\n### {}\n\nThe same fine-tuning from the backbone as it was after fewer \
                 pretraining steps (`save_steps` of `pretrain`, fine-tuned with \
                 `pretrain_step`); 0 tokens is random init. Points of one seed have no sd.\n\n",
                t.title
            );
            body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
            for s in sentences {
                let _ = write!(body, "\n{s}\n");
            }
            body.push_str(&figure_md(&[fig], &mut figures));
        }
        sections.push(Section { title, body });
    }

    // 4. Throughput.
    {
        let t = bench::throughput(bench_lines, &pretrain, &finetune);
        let mut body = String::new();
        if t.rows.is_empty() {
            left_out.push("throughput".into());
            body.push_str(
                "Not in this report: no benchmark outputs and no runs to take throughput from.\n",
            );
        } else {
            body.push_str(
                "Data preparation instances/s, training tokens/s and inference sentences/s: \
                 fixed-shape benchmarks (`pipeline bench train|infer --json`, \
                 `benches/hf_baseline.py`) with ours beside transformers' on the same shape, \
                 and the throughput of this experiment's own runs.\n\n",
            );
            body.push_str(&add_table(&t, Map::new(), &mut files, &mut tables)?);
        }
        if no_bench_files {
            let where_ = p
                .bench_dir
                .as_ref()
                .map(|d| format!("`{}/`", d.display()))
                .unwrap_or_else(|| "the stage's inputs".into());
            let _ = write!(
                body,
                "\nNo benchmark outputs were found in {where_}: measure with `pipeline bench \
                 train --json >> {d}/train.jsonl` (and `infer`), and `benches/hf_baseline.py \
                 train|infer >> {d}/hf.jsonl`.\n",
                d = p
                    .bench_dir
                    .as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|| "results/bench".into())
            );
        }
        sections.push(Section {
            title: "Throughput".into(),
            body,
        });
    }

    // The figures.
    for f in &figures {
        files.insert(f.file.clone(), f.svg()?.into_bytes());
    }
    files.insert("published.json".into(), published::TEXT.as_bytes().to_vec());
    let opening = targets::paragraph(&targets, main);
    // The targets' paragraph comes first, under the title.
    let readme = readme(
        p, &published, all_deps, &pretrain, &finetune, &sections, &notes,
    )
    .replacen("\n\n", &format!("\n\n{opening}\n\n"), 1);
    files.insert("README.md".into(), readme.into_bytes());

    let metrics = json!({
        "main_pretrain": main.map(|m| m.instance.clone()),
        "targets": targets
            .iter()
            .map(|t| (t.key.to_string(), json!(t.status_word())))
            .collect::<Map<String, Value>>(),
        "tables": tables,
        "left_out": left_out,
        "figures": figures.iter().map(|f| f.file.clone()).collect::<Vec<_>>(),
        "deps": all_deps.iter().map(|d| d.instance.clone()).collect::<Vec<_>>(),
        "benchmark_lines": bench_lines.len(),
        "notes": notes,
        "published_to": p.publish_dir.as_ref().map(|d| d.display().to_string()),
        "files": files.keys().collect::<Vec<_>>(),
    });
    Ok(Report { files, metrics })
}

/// The sentences that say what data each fine-tuning stage and baseline stage of a task used
/// (one protocol per stage), and the protocols by stage for the table's JSON. A baseline stage
/// on the same data as a fine-tuning stage says so instead of repeating the protocol.
fn protocol_sentences(runs: &[&Dep], baselines: &[&Dep]) -> (Vec<String>, Map<String, Value>) {
    let mut stages: Vec<&str> = runs.iter().map(|d| d.stage.as_str()).collect();
    stages.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut protocols = Map::new();
    let push = |s: String, out: &mut Vec<String>| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for stage in &stages {
        let of: Vec<&Dep> = runs.iter().filter(|d| d.stage == *stage).copied().collect();
        let opening = if stages.len() == 1 {
            "Ours: fine-tuned".to_string()
        } else {
            format!("Ours (`{stage}`): fine-tuned")
        };
        for s in finetune_runs::protocol_sentence_as(&of, &opening) {
            push(s, &mut out);
        }
        if let Some(p) = of
            .first()
            .and_then(|d| deps::get(&d.metrics, &["protocol"]))
        {
            protocols.insert(stage.to_string(), p.clone());
        }
    }
    for b in baselines {
        let p = deps::get(&b.metrics, &["protocol"]);
        let same = stages
            .iter()
            .find(|s| p.is_some() && protocols.get(**s).is_some_and(|q| Some(q) == p));
        match same {
            Some(stage) => push(
                format!(
                    "Baselines (`{}`): fitted on the same training examples as `{stage}`, the \
                     n-gram models' L2 penalty chosen on its dev split, and reported on the same \
                     evaluation sets.",
                    b.stage
                ),
                &mut out,
            ),
            None => {
                for s in finetune_runs::protocol_sentence_as(
                    &[b],
                    &format!("Baselines (`{}`): fitted", b.stage),
                ) {
                    push(s, &mut out);
                }
            }
        }
        if let Some(p) = p {
            protocols.insert(b.stage.clone(), p.clone());
        }
    }
    (out, protocols)
}

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

fn readme(
    p: &ReportParams,
    published: &Published,
    all: &[Dep],
    pretrain: &[&Dep],
    finetune: &[&Dep],
    sections: &[Section],
    notes: &[String],
) -> String {
    let mut md = format!("# {}\n\n", p.title);
    // What was run, in one paragraph.
    let mut what = Vec::new();
    if !pretrain.is_empty() {
        let models: std::collections::BTreeSet<String> =
            pretrain.iter().filter_map(|d| d.str(&["model"])).collect();
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
        "This report has no runs of the experiment yet: only the model-size tables, which need \
         none."
            .to_string()
    } else {
        format!("What ran: {}.", what.join("; "))
    };
    let hw: std::collections::BTreeSet<String> = pretrain
        .iter()
        .chain(finetune.iter())
        .filter_map(|d| {
            let dev = d.str(&["device"])?;
            Some(match d.u64(&["threads"]) {
                Some(t) => format!("{dev} ({t} threads)"),
                None => dev,
            })
        })
        .collect();
    if !hw.is_empty() {
        let _ = write!(
            intro,
            " Hardware: {}.",
            hw.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(span) = deps::date_span(all) {
        let _ = write!(intro, " The runs finished {span}.");
    }
    if let Some(c) = &p.commit {
        let _ = write!(intro, " Commit `{c}`.");
    }
    md.push_str(&intro);
    md.push_str("\n\n");
    if let Some(n) = p.notes.get("summary") {
        let _ = write!(md, "> **Note.** {n}\n\n");
    }
    md.push_str(
        "Written by the `report` stage (`pipeline run report`) from the experiment's artifacts: \
         do not edit by hand, the next run rewrites it. Every table is also here as CSV and \
         JSON; published figures are marked as such, with their sources below and in \
         [published.json](published.json). Ours and the published fine-tuning numbers are not \
         the same protocol: albert_zh trained on the full train sets, which the shared data \
         does not have.\n\n",
    );
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
    md.push_str("\n## Sources\n\n");
    for (key, s) in &published.sources {
        let at = match (&s.repo, &s.path, &s.commit) {
            (Some(r), Some(path), Some(c)) => format!(" ({r}, `{path}` at {c})"),
            _ => String::new(),
        };
        let _ = writeln!(md, "- `{key}`: [{}]({}){at}", s.title, s.url);
    }
    if !notes.is_empty() {
        md.push_str("\n## Notes on this report\n\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}
