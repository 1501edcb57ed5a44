//! The README's sections, one method each, in the order the README shows them: the targets,
//! model size, pretraining, ablations, one section per fine-tuning task, throughput. A
//! [`Sections`] collects what they write (the tables' CSV and JSON files, the figures, the
//! left-out sections) so that [`crate::build`] reads as the list of sections.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pipeline_figures as plots;
use serde_json::{Map, Value};

use crate::bench::BenchLine;
use crate::deps::Dep;
use crate::published::Published;
use crate::table::Table;
use crate::{
    ReportParams, ablations, baselines, bench, corpus, curve, finetune_runs, runs, sizes, targets,
};

/// A section of the README.
pub(crate) struct Section {
    pub title: String,
    pub body: String,
}

/// The deps, sorted by kind (those without metrics left out).
pub(crate) struct Runs<'a> {
    pub pretrain: Vec<&'a Dep>,
    pub finetune: Vec<&'a Dep>,
    pub baseline: Vec<&'a Dep>,
    pub masks: Vec<&'a Dep>,
    pub cleans: Vec<&'a Dep>,
}

impl<'a> Runs<'a> {
    pub fn sort(all: &'a [Dep]) -> Self {
        let of = |kind: crate::DepKind| -> Vec<&'a Dep> {
            all.iter()
                .filter(|d| d.kind == kind && !d.metrics.is_null())
                .collect()
        };
        Runs {
            pretrain: of(crate::DepKind::Pretrain),
            finetune: of(crate::DepKind::Finetune),
            baseline: of(crate::DepKind::Baseline),
            masks: of(crate::DepKind::Mask),
            cleans: of(crate::DepKind::Clean),
        }
    }

    /// The tasks of `always_tasks` in data/texts.txt (LCQMC and XNLI: albert_zh's tables; a
    /// section says when they did not run), then every other task with a fine-tuning or
    /// baseline run, in the order of the deps.
    pub fn tasks(&self) -> Vec<String> {
        let always = crate::data::text("always_tasks").split(',').map(str::trim);
        let mut tasks: Vec<String> = always
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        for d in self.finetune.iter().chain(&self.baseline) {
            if let Some(task) = d.task()
                && !tasks.contains(&task)
            {
                tasks.push(task);
            }
        }
        tasks
    }

    fn of_task(deps: &[&'a Dep], task: &str) -> Vec<&'a Dep> {
        deps.iter()
            .filter(|d| d.task().as_deref() == Some(task))
            .copied()
            .collect()
    }
}

/// What the sections have written so far.
pub(crate) struct Sections<'p> {
    p: &'p ReportParams,
    published: &'p Published,
    pub files: crate::Files,
    pub sections: Vec<Section>,
    pub tables: BTreeMap<String, usize>,
    pub figures: Vec<plots::Figure>,
    pub left_out: Vec<String>,
}

impl<'p> Sections<'p> {
    pub fn new(p: &'p ReportParams, published: &'p Published) -> Self {
        Sections {
            p,
            published,
            files: crate::Files::new(),
            sections: Vec::new(),
            tables: BTreeMap::new(),
            figures: Vec::new(),
            left_out: Vec::new(),
        }
    }

    fn push(&mut self, title: impl Into<String>, body: String) {
        self.sections.push(Section {
            title: title.into(),
            body,
        });
    }

    /// Writes the table's CSV and JSON files and returns its markdown, with its notes, the
    /// param note for its key and the links to its data.
    fn add_table(&mut self, t: &Table, extra: Map<String, Value>) -> anyhow::Result<String> {
        self.files.insert(format!("{}.csv", t.key), t.csv()?);
        self.files.insert(
            format!("{}.json", t.key),
            crate::json_bytes(&t.json(extra)?)?,
        );
        self.tables.insert(t.key.clone(), t.rows.len());
        let mut md = t.markdown()?;
        for n in &t.notes {
            let _ = write!(md, "\n{n}\n");
        }
        if let Some(n) = self.p.notes.get(&t.key) {
            let _ = write!(md, "\n> **Note.** {n}\n");
        }
        let _ = write!(
            md,
            "\nData: [{k}.csv]({k}.csv) · [{k}.json]({k}.json)\n",
            k = t.key
        );
        Ok(md)
    }

    /// The figures' markdown (none when `plots: false` or a figure has nothing to draw); the
    /// figures are kept to be drawn into files at the end.
    fn figure_md(&mut self, figs: &[plots::Figure]) -> String {
        let mut md = String::new();
        for f in figs {
            if !self.p.plots || f.is_empty() {
                continue;
            }
            let _ = writeln!(md, "\n![{}]({})", f.title, f.file);
            self.figures.push(f.clone());
        }
        md
    }

    /// 0. The targets, their evidence (no section when the params state none).
    pub fn targets(&mut self, targets: &[targets::Target]) -> anyhow::Result<()> {
        if targets.is_empty() {
            return Ok(());
        }
        let t = targets::table(targets);
        let mut body = crate::data::para("targets.intro");
        body.push_str(&self.add_table(&t, Map::new())?);
        self.push("Targets", body);
        Ok(())
    }

    /// 1. Model size.
    pub fn model_size(&mut self) -> anyhow::Result<()> {
        let t = sizes::model_size(self.published);
        let mut body = crate::data::para("model_size.intro");
        body.push_str(&self.add_table(&t, Map::new())?);
        let g = sizes::model_size_grid(self.published);
        let _ = write!(
            body,
            "\n### {}\n\nThe ALBERT paper's ablation (Tables 3 and 4) at base dimensions, counted \
             for our vocabulary and at V = 30,000.\n\n",
            g.title
        );
        body.push_str(&self.add_table(&g, Map::new())?);
        self.push("Model size", body);
        Ok(())
    }

    /// 2. Pretraining.
    pub fn pretraining(&mut self, runs: &Runs) -> anyhow::Result<()> {
        if runs.pretrain.is_empty() {
            self.left_out.push("pretraining".into());
            self.push("Pretraining", crate::data::line("pretraining.not_run"));
            return Ok(());
        }
        let t = runs::pretraining(&runs.pretrain, self.published, &runs.cleans);
        let mut body = runs::pretraining_sentence(&runs.pretrain);
        body.push_str("\n\n");
        if let Some(m) = runs.masks.first() {
            let _ = write!(body, "{}\n\n", corpus::mask_sentence(m));
        }
        for c in &runs.cleans {
            let _ = write!(body, "{}\n\n", corpus::corpus_sentence(c));
        }
        body.push_str(&self.add_table(&t, Map::new())?);
        body.push_str(&self.figure_md(&plots::pretraining(&runs.pretrain)));
        self.push("Pretraining", body);
        Ok(())
    }

    /// Section 2b, the ablations: two pretraining runs or more with fine-tuning runs (one
    /// pretraining run is no ablation: no section, nothing left out).
    pub fn ablations(&mut self, runs: &Runs, main: Option<&Dep>) -> anyhow::Result<()> {
        let Some(t) = ablations::ablations(&runs.pretrain, &runs.finetune, &runs.cleans, main)
        else {
            return Ok(());
        };
        let mut body = crate::data::para("ablations.intro");
        body.push_str(&self.add_table(&t, Map::new())?);
        self.push("Ablations", body);
        Ok(())
    }

    /// Section 3, once per fine-tuning task: its protocols, the table of our runs beside the
    /// baselines and the published rows, the dev-accuracy figure and, with intermediate
    /// models, the curve.
    pub fn task(&mut self, task: &str, runs: &Runs) -> anyhow::Result<()> {
        let runs_of = Runs::of_task(&runs.finetune, task);
        let baselines_of = Runs::of_task(&runs.baseline, task);
        let title = crate::data::task_title(task);
        let pubd = self.published.task(task);
        if runs_of.is_empty() && baselines_of.is_empty() {
            self.left_out.push(task.to_string());
            let body = not_run_body(task, pubd.is_some());
            self.push(title, body);
            return Ok(());
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
                self.published.cite(&pb.source),
                pb.protocol
            );
        }
        let mut extra = Map::new();
        extra.insert(
            "protocol".into(),
            runs_of
                .iter()
                .chain(&baselines_of)
                .find_map(|d| d.protocol())
                .unwrap_or(Value::Null),
        );
        extra.insert("protocols".into(), Value::Object(protocols));
        body.push_str(&self.add_table(&t, extra)?);
        for d in &baselines_of {
            if let Some(s) = baselines::length_analysis(d) {
                let _ = write!(body, "\n{s}\n");
            }
        }
        let fig = plots::finetune(task, &title, &runs_of);
        body.push_str(&self.figure_md(&[fig]));
        body.push_str(&self.curve(task, &title, &runs_of, &baselines_of)?);
        self.push(title, body);
        Ok(())
    }

    /// A task's curve subsection (empty without runs from intermediate pretraining steps).
    fn curve(
        &mut self,
        task: &str,
        title: &str,
        runs_of: &[&Dep],
        baselines_of: &[&Dep],
    ) -> anyhow::Result<String> {
        let mut body = String::new();
        let Some((t, sentences, fig)) = curve::curve(task, title, runs_of, baselines_of) else {
            return Ok(body);
        };
        let _ = write!(
            body,
            "\n### {}\n\nThe same fine-tuning from the backbone as it was after fewer \
             pretraining steps (`save_steps` of `pretrain`, fine-tuned with \
             `pretrain_step`); 0 tokens is random init. Points of one seed have no sd.\n\n",
            t.title
        );
        body.push_str(&self.add_table(&t, Map::new())?);
        for s in sentences {
            let _ = write!(body, "\n{s}\n");
        }
        body.push_str(&self.figure_md(&[fig]));
        Ok(body)
    }

    /// A table of the `tables` param, after the tasks' sections (left out when none of its
    /// stages ran).
    pub fn declared(
        &mut self,
        spec: &crate::declared::TableSpec,
        table: Option<Table>,
    ) -> anyhow::Result<()> {
        let title = spec.title.as_ref().map_or(&spec.key.0, |t| &t.0).clone();
        let body = match table {
            Some(t) => self.add_table(&t, Map::new())?,
            None => {
                self.left_out.push(spec.key.0.clone());
                let stages: Vec<String> =
                    spec.stages.iter().map(|s| format!("`{}`", s.0)).collect();
                format!(
                    "Not in this report: no run of {} among the report's deps.\n",
                    stages.join(", ")
                )
            }
        };
        self.push(title, body);
        Ok(())
    }

    /// 4. Throughput.
    pub fn throughput(
        &mut self,
        bench_lines: &[BenchLine],
        runs: &Runs,
        no_bench_files: bool,
    ) -> anyhow::Result<()> {
        let t = bench::throughput(bench_lines, &runs.pretrain, &runs.finetune);
        let mut body = String::new();
        if t.rows.is_empty() {
            self.left_out.push("throughput".into());
            body.push_str(&crate::data::line("throughput.not_run"));
        } else {
            body.push_str(&crate::data::para("throughput.intro"));
            body.push_str(&self.add_table(&t, Map::new())?);
        }
        let most = bench::max_batch(bench_lines);
        if !most.rows.is_empty() {
            let _ = write!(body, "\n### {}\n\n", most.title);
            body.push_str(&self.add_table(&most, Map::new())?);
        }
        if no_bench_files {
            body.push_str(&self.no_bench_files_sentence());
        }
        self.push("Throughput", body);
        Ok(())
    }

    fn no_bench_files_sentence(&self) -> String {
        let bench_dir = self.p.bench_dir.as_ref();
        let where_ = bench_dir
            .map(|d| format!("`{}/`", d.display()))
            .unwrap_or_else(|| "the stage's inputs".into());
        let d = bench_dir
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "results/bench".into());
        format!(
            "\nNo benchmark outputs were found in {where_}: measure with `pipeline bench \
             train --json >> {d}/train.jsonl` (and `infer`), and `benches/hf_baseline.py \
             train|infer >> {d}/hf.jsonl`.\n"
        )
    }
}

/// The section of a task with no runs and no baselines among the deps.
fn not_run_body(task: &str, published: bool) -> String {
    format!(
        "Not in this report: no fine-tuning run of {} among the report's deps (a \
         `finetune` stage with `task: {task}`, such as `finetune_{task}`, in \
         `deps`).{}\n",
        task.to_uppercase(),
        if published {
            " albert_zh's published figures are in [published.json](published.json)."
        } else {
            ""
        }
    )
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
        if let Some(p) = of.first().and_then(|d| d.protocol()) {
            protocols.insert(stage.to_string(), p);
        }
    }
    for b in baselines {
        let p = b.protocol();
        let same = stages
            .iter()
            .find(|s| p.is_some() && protocols.get(**s).is_some_and(|q| Some(q) == p.as_ref()));
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
