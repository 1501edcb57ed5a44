//! The published figures the report prints beside ours: `published/albert_zh.json`, compiled
//! in (its digest is part of the stage's code version, so a corrected figure re-runs the
//! report). Every figure names its source.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The data file's name under `stages/report/published/`, named in the errors of
/// [`Published::load`].
pub const FILE_NAME: &str = "albert_zh.json";
/// The data file's text, compiled in; the report also writes it out as `published.json`.
pub const TEXT: &str = include_str!("../published/albert_zh.json");

/// The published figures, as `published/albert_zh.json` holds them (a key the structs do not
/// name is an error, so a misspelt key cannot drop a figure silently: a key that is not one
/// of the fields must be a task's rows). Percentages and
/// millions are as the source prints them; `None` where it prints `-`, `--` or `?`.
#[derive(Debug, Clone, Deserialize)]
pub struct Published {
    /// The file's own note on its conventions (units, what null means, that the fine-tuning
    /// rows are not under our protocol); kept for the reader of the JSON, not printed.
    pub about: String,
    /// Every source a figure names, by the key that `source`, `albert_zh_source` and
    /// `origin` refer to; listed in the README's Sources section.
    pub sources: BTreeMap<String, Source>,
    /// The published counts of albert_zh's configs and BERT-base, beside ours in the
    /// `model_size` table (matched by [`SizeRow::model`]).
    pub model_size: Vec<SizeRow>,
    /// The ALBERT paper's base-size counts by embedding size and sharing, beside ours in the
    /// `model_size_grid` table.
    pub model_size_grid: Vec<GridRow>,
    /// albert_zh's pretraining table (MLM and SOP accuracy, hours), under our pretraining runs.
    pub pretraining: PretrainPublished,
    /// The published results of each fine-tuning task, by the task's name (every other key of
    /// the file): `lcqmc`, `xnli`, `chnsenticorp`, `msra_ner` (entity F1 in `test`), `cmrc2018`
    /// (`dev`/`test` F1, `dev_em`/`test_em` exact match), `c3`. A task added to the file is
    /// printed beside our runs of it, no code needed; a misspelt key fails to parse as a task.
    #[serde(flatten)]
    pub tasks: BTreeMap<String, TaskPublished>,
}

/// Where published figures come from: a page, or a file of a repository at a commit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// What the source is and which of its tables the figures are read from, printed in the
    /// README's Sources section ([`Published::cite`] cuts it at the first `:` for a source
    /// that is not a repository file).
    pub title: String,
    /// The link (`https://`), pinned to the commit for a repository file.
    pub url: String,
    /// `owner/name` on GitHub, for a file of a repository.
    pub repo: Option<String>,
    /// The file within `repo` (`README.md`).
    pub path: Option<String>,
    /// The 40-hex commit the figures were read at; with `repo` and `path` it makes the short
    /// citation `repo path @ 52149e8`.
    pub commit: Option<String>,
    /// The headings of the source the figures are under, for whoever checks them; not
    /// printed.
    pub sections: Option<String>,
}

/// One model of the `model_size` table: published parameter counts (millions) and file size.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeRow {
    /// Our config's name (`tiny` … `xxlarge`, `bert-base`), which the row is matched to.
    pub model: String,
    /// The ALBERT paper's Table 1 count (English, V = 30,000), millions.
    pub paper_params_m: Option<f64>,
    /// The count on transformers' model cards of Google's English checkpoints, millions.
    pub hf_params_m: Option<f64>,
    /// The count albert_zh's README gives, millions.
    pub albert_zh_params_m: Option<f64>,
    /// The checkpoint's file size albert_zh's README gives, in its `M` (unit not stated).
    pub albert_zh_file_mb: Option<f64>,
    /// The key of [`Published::sources`] the two albert_zh figures come from (its current
    /// README or an earlier version's release plan).
    pub albert_zh_source: Option<String>,
    /// Appended, in brackets, to the row's explanation of the paper's count.
    pub note: Option<String>,
}

/// One cell of the ALBERT paper's Tables 3 and 4: ALBERT-base with embedding size E and a
/// cross-layer sharing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridRow {
    /// E: 768 (BERT's) or 128 (ALBERT's).
    pub embedding_size: usize,
    /// The sharing as our configs spell it: `none`, `attention`, `ffn` or `all`.
    pub share_type: String,
    /// The paper's count (English, V = 30,000), millions.
    pub paper_params_m: Option<f64>,
    /// lonePatient/albert_pytorch README's `model_size` (V = 21,128), as printed: the README
    /// gives neither its unit nor how it was measured.
    pub albert_pytorch_model_size: Option<f64>,
}

/// albert_zh's pretraining table and how those models were pretrained.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainPublished {
    /// The key of [`Published::sources`] the rows come from.
    pub source: String,
    /// How albert_zh pretrained (corpus, batch, steps, hardware), printed under the
    /// pretraining table.
    pub protocol: String,
    /// One row per albert_zh checkpoint.
    pub rows: Vec<PretrainRow>,
    /// How the table's columns are read (what its `Loss eval` is, what `*` marks), printed
    /// after `protocol`.
    pub note: String,
}

/// One of albert_zh's pretrained checkpoints, a row of the `pretraining` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainRow {
    /// The checkpoint's name (`albert_zh_base`), shown as the row's run.
    pub model: String,
    /// Its config's name (`base` … `xxlarge`).
    pub config: String,
    /// Masked-LM accuracy as albert_zh's table prints it, %.
    pub mlm_accuracy: Option<f64>,
    /// Sentence-order prediction accuracy, %.
    pub sop_accuracy: Option<f64>,
    /// Wall-clock pretraining time, hours.
    pub training_hours: Option<f64>,
    /// `training_hours` is albert_zh's estimate, not a measurement (marked `*`); false when
    /// the key is absent.
    #[serde(default)]
    pub training_hours_estimated: bool,
    /// albert_zh's `Loss eval`, read as the total eval loss (MLM + SOP).
    pub eval_loss: Option<f64>,
    /// Optimiser steps (`None`: not stated, as for xxlarge's longer run).
    pub steps: Option<u64>,
    /// Sequences per step.
    pub batch_size: Option<u64>,
    /// Tokens per sequence.
    pub max_seq_length: Option<u64>,
    /// What it was trained on (`TPU v3-256`).
    pub device: Option<String>,
}

/// The published results of one fine-tuning task, the `published` rows of its table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskPublished {
    /// The key of [`Published::sources`] the rows come from (a row's `origin` overrides it);
    /// cited above the table.
    pub source: String,
    /// How the published models were fine-tuned and evaluated (training set, splits), which
    /// is not our protocol; printed above the table.
    pub protocol: String,
    /// One row per published model.
    pub rows: Vec<TaskRow>,
}

/// One published model's results on a task, in % (accuracy, or F1 where the task's doc says).
/// Where the source prints `best (average)` of several runs, the plain field is the best and
/// the `_mean` field the average; `None` where the source gives no figure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRow {
    /// The model as the source names it (`ALBERT-zh-base`, `RoBERTa-wwm-ext`).
    pub model: String,
    /// Dev-set figure (best of the runs where the source gives both).
    pub dev: Option<f64>,
    /// Dev-set average over the runs.
    pub dev_mean: Option<f64>,
    /// Test-set figure (best of the runs where the source gives both).
    pub test: Option<f64>,
    /// Test-set average over the runs.
    pub test_mean: Option<f64>,
    /// Span extraction: exact match beside the F1 of `dev` and `test`.
    pub dev_em: Option<f64>,
    /// Dev exact match, average over the runs.
    pub dev_em_mean: Option<f64>,
    /// Test exact match (best of the runs where the source gives both).
    pub test_em: Option<f64>,
    /// Test exact match, average over the runs.
    pub test_em_mean: Option<f64>,
    /// Where the row comes from when it is not the task's `source`.
    pub origin: Option<String>,
    /// The task table's `note` column (`run once only`, which split, which settings): in its
    /// CSV and JSON, not its Markdown.
    pub note: Option<String>,
}

impl Published {
    /// Parses the compiled-in file and checks that every source a figure names is in
    /// `sources`; the error names `published/albert_zh.json` (a bug in that file, which the
    /// tests catch).
    pub fn load() -> anyhow::Result<Published> {
        let p: Published = serde_json::from_str(TEXT)
            .map_err(|e| anyhow::anyhow!("published/{FILE_NAME}: {e}"))?;
        p.check()?;
        Ok(p)
    }

    /// Every source a figure names exists.
    fn check(&self) -> anyhow::Result<()> {
        let mut named: Vec<&str> = vec![&self.pretraining.source];
        named.extend(
            self.model_size
                .iter()
                .filter_map(|r| r.albert_zh_source.as_deref()),
        );
        for t in self.tasks.values() {
            named.push(&t.source);
            named.extend(t.rows.iter().filter_map(|r| r.origin.as_deref()));
        }
        for s in named {
            if !self.sources.contains_key(s) {
                anyhow::bail!("published/{FILE_NAME}: unknown source {s:?}");
            }
        }
        Ok(())
    }

    /// The published results of a fine-tuning task by its name (`lcqmc`, `cmrc2018`, …);
    /// `None` for a task with none in the file (`afqmc`, `ocnli`, …).
    pub fn task(&self, task: &str) -> Option<&TaskPublished> {
        self.tasks.get(task)
    }

    /// A Markdown link to a source: `[repo path @ 52149e8](url)` for a repository file, else
    /// its title up to the first `:`; the key itself when it names no source.
    pub fn cite(&self, key: &str) -> String {
        match self.sources.get(key) {
            Some(s) => format!("[{}]({})", short_title(s), s.url),
            None => key.to_string(),
        }
    }
}

fn short_title(s: &Source) -> String {
    match (&s.repo, &s.path, &s.commit) {
        (Some(repo), Some(path), Some(commit)) => {
            format!("{repo} {path} @ {}", &commit[..commit.len().min(7)])
        }
        _ => s
            .title
            .split(':')
            .next()
            .unwrap_or(&s.title)
            .trim()
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_file_parses_and_names_its_sources() {
        let p = Published::load().unwrap();
        assert_eq!(p.model_size_grid.len(), 8);
        assert!(
            p.tasks["lcqmc"]
                .rows
                .iter()
                .any(|r| r.model == "ALBERT-zh-tiny")
        );
        assert!(
            p.tasks["xnli"]
                .rows
                .iter()
                .any(|r| r.model == "RoBERTa-zh-Large")
        );
        for s in p.sources.values() {
            assert!(s.url.starts_with("https://"), "{}", s.url);
            if let Some(c) = &s.commit {
                assert_eq!(c.len(), 40, "{c}");
            }
        }
        assert!(p.cite("albert_zh_readme").contains("@ 52149e8"));
        let cmrc = p.task("cmrc2018").unwrap();
        assert!(
            cmrc.rows
                .iter()
                .all(|r| r.test_em.is_some() && r.test.is_some())
        );
        assert!(
            p.task("c3")
                .unwrap()
                .rows
                .iter()
                .any(|r| r.model == "ALBERT-tiny")
        );
    }
}
