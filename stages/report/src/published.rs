//! The published figures the report prints beside ours: `published/albert_zh.json`, compiled
//! in (its digest is part of the stage's code version, so a corrected figure re-runs the
//! report). Every figure names its source.

use std::collections::BTreeMap;

use serde::Deserialize;

pub const FILE_NAME: &str = "albert_zh.json";
pub const TEXT: &str = include_str!("../published/albert_zh.json");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub about: String,
    pub sources: BTreeMap<String, Source>,
    pub model_size: Vec<SizeRow>,
    pub model_size_grid: Vec<GridRow>,
    pub pretraining: PretrainPublished,
    pub lcqmc: TaskPublished,
    pub xnli: TaskPublished,
    pub chnsenticorp: TaskPublished,
    pub msra_ner: TaskPublished,
    /// CMRC 2018: `dev`/`test` are F1, `dev_em`/`test_em` exact match.
    pub cmrc2018: TaskPublished,
    pub c3: TaskPublished,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub title: String,
    pub url: String,
    pub repo: Option<String>,
    pub path: Option<String>,
    pub commit: Option<String>,
    pub sections: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeRow {
    pub model: String,
    pub paper_params_m: Option<f64>,
    pub hf_params_m: Option<f64>,
    pub albert_zh_params_m: Option<f64>,
    pub albert_zh_file_mb: Option<f64>,
    pub albert_zh_source: Option<String>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridRow {
    pub embedding_size: usize,
    pub share_type: String,
    pub paper_params_m: Option<f64>,
    pub albert_pytorch_model_size: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainPublished {
    pub source: String,
    pub protocol: String,
    pub rows: Vec<PretrainRow>,
    pub note: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainRow {
    pub model: String,
    pub config: String,
    pub mlm_accuracy: Option<f64>,
    pub sop_accuracy: Option<f64>,
    pub training_hours: Option<f64>,
    #[serde(default)]
    pub training_hours_estimated: bool,
    pub eval_loss: Option<f64>,
    pub steps: Option<u64>,
    pub batch_size: Option<u64>,
    pub max_seq_length: Option<u64>,
    pub device: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskPublished {
    pub source: String,
    pub protocol: String,
    pub rows: Vec<TaskRow>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRow {
    pub model: String,
    pub dev: Option<f64>,
    pub dev_mean: Option<f64>,
    pub test: Option<f64>,
    pub test_mean: Option<f64>,
    /// Span extraction: exact match beside the F1 of `dev` and `test`.
    pub dev_em: Option<f64>,
    pub dev_em_mean: Option<f64>,
    pub test_em: Option<f64>,
    pub test_em_mean: Option<f64>,
    /// Where the row comes from when it is not the task's `source`.
    pub origin: Option<String>,
    pub note: Option<String>,
}

impl Published {
    pub fn load() -> anyhow::Result<Published> {
        let p: Published = serde_json::from_str(TEXT)
            .map_err(|e| anyhow::anyhow!("published/{FILE_NAME}: {e}"))?;
        p.check()?;
        Ok(p)
    }

    /// Every source a figure names exists.
    fn check(&self) -> anyhow::Result<()> {
        let tasks = [
            &self.lcqmc,
            &self.xnli,
            &self.chnsenticorp,
            &self.msra_ner,
            &self.cmrc2018,
            &self.c3,
        ];
        let mut named: Vec<&str> = vec![&self.pretraining.source];
        named.extend(
            self.model_size
                .iter()
                .filter_map(|r| r.albert_zh_source.as_deref()),
        );
        for t in tasks {
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

    pub fn task(&self, task: &str) -> Option<&TaskPublished> {
        match task {
            "lcqmc" => Some(&self.lcqmc),
            "xnli" => Some(&self.xnli),
            "chnsenticorp" => Some(&self.chnsenticorp),
            "msra_ner" => Some(&self.msra_ner),
            "cmrc2018" => Some(&self.cmrc2018),
            "c3" => Some(&self.c3),
            _ => None,
        }
    }

    /// `title (url)` of a source.
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
        assert!(p.lcqmc.rows.iter().any(|r| r.model == "ALBERT-zh-tiny"));
        assert!(p.xnli.rows.iter().any(|r| r.model == "RoBERTa-zh-Large"));
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
