//! What each pretraining run was, in the terms of the ALBERT ablations (cross-layer sharing,
//! the SOP objective, whole-word or character masking, task text in the corpus), which corpus it
//! read, and the downstream effect of its weights: every fine-tuning stage's runs from it,
//! pretrained against random init of the same architecture, seeds folded.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::deps::Dep;
use crate::finetune_runs::{resolve, train_data};
use crate::seeds::{self, MeanSd};

/// A pretraining run's recipe, as the ablation rows tell them apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub share_type: String,
    /// MLM + SOP (`true`) or MLM only.
    pub sop: bool,
    /// `whole-word ≤3-gram`, `character ≤3-gram`, or `?` for a run that did not record it.
    pub masking: String,
    /// The `task_text` entries its corpus added (empty: the general corpus alone).
    pub task_text: Vec<String>,
    /// The `clean` instance whose corpus it read, when the report has it.
    pub clean: Option<String>,
}

impl Recipe {
    pub fn objective(&self) -> &'static str {
        if self.sop { "MLM + SOP" } else { "MLM only" }
    }

    pub fn task_text_cell(&self) -> String {
        if self.task_text.is_empty() {
            "none".into()
        } else {
            self.task_text.join(", ")
        }
    }

    /// The ablation axes on which `self` differs from `other`.
    pub fn differences(&self, other: &Recipe) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.share_type != other.share_type {
            out.push("sharing");
        }
        if self.sop != other.sop {
            out.push("SOP");
        }
        if self.masking != other.masking {
            out.push("masking");
        }
        if self.task_text != other.task_text {
            out.push("task text");
        }
        out
    }
}

/// The `clean` dep whose corpus a pretrain dep read: the one its metrics name
/// (`clean_instance`, through its `mask`), else the one whose matrix coordinates the pretrain
/// instance carries (a `clean` matrix, `add_task_text: [false, true]`, expands the stages after
/// it), or the only one.
pub fn clean_of<'a>(p: &Dep, cleans: &[&'a Dep]) -> Option<&'a Dep> {
    if let Some(name) = &p.pretrain().clean_instance
        && let Some(c) = cleans.iter().find(|c| &c.instance == name)
    {
        return Some(c);
    }
    let matching: Vec<&'a Dep> = cleans
        .iter()
        .filter(|c| c.coords.iter().all(|(k, v)| p.coords.get(k) == Some(v)))
        .copied()
        .collect();
    match (matching.len(), cleans.len()) {
        (1, _) => Some(matching[0]),
        (_, 1) => Some(cleans[0]),
        _ => None,
    }
}

/// The recipe of a pretrain dep.
pub fn recipe(p: &Dep, cleans: &[&Dep]) -> Recipe {
    let r = p.pretrain();
    let masking = r.masking.as_ref();
    let whole_word = masking
        .and_then(|m| m.get("whole_word"))
        .and_then(Value::as_bool)
        .or_else(|| p.coords.get("whole_word").and_then(Value::as_bool));
    let ngram = masking
        .and_then(|m| m.get("max_ngram"))
        .and_then(Value::as_u64)
        .map(|n| format!(" ≤{n}-gram"))
        .unwrap_or_default();
    let clean = clean_of(p, cleans);
    Recipe {
        share_type: r.share_type.clone().unwrap_or_else(|| "?".into()),
        sop: r.sop.unwrap_or(true),
        masking: match whole_word {
            Some(true) => format!("whole-word{ngram}"),
            Some(false) => format!("character{ngram}"),
            None => "?".into(),
        },
        task_text: clean
            .map(|c| c.clean().task_text.keys().cloned().collect())
            .unwrap_or_default(),
        clean: clean.map(|c| c.instance.clone()),
    }
}

/// The fine-tuning runs of one stage from one pretraining run (its final weights), pretrained
/// and random init, each folded over seeds.
pub struct Effect<'a> {
    pub task: String,
    pub stage: String,
    pub train_data: String,
    pub pretrained: Vec<&'a Dep>,
    pub random: Vec<&'a Dep>,
}

impl Effect<'_> {
    fn test(runs: &[&Dep]) -> Option<MeanSd> {
        seeds::mean_sd(runs.iter().map(|d| resolve(d).test))
    }

    pub fn pretrained_test(&self) -> Option<MeanSd> {
        Effect::test(&self.pretrained)
    }

    pub fn random_test(&self) -> Option<MeanSd> {
        Effect::test(&self.random)
    }

    /// Pretrained minus random init, in points.
    pub fn diff(&self) -> Option<f64> {
        Some(self.pretrained_test()?.mean - self.random_test()?.mean)
    }

    /// `by_sd` times the larger of the two seed sds, when both sides have one.
    pub fn margin(&self, by_sd: f64) -> Option<f64> {
        let (a, b) = (self.pretrained_test()?.sd?, self.random_test()?.sd?);
        Some(by_sd * a.max(b))
    }

    /// Whether pretraining beats random init by more than `by_sd` times the larger seed sd.
    pub fn beyond(&self, by_sd: f64) -> Option<bool> {
        Some(self.diff()? > self.margin(by_sd)?)
    }

    /// [`Self::beyond`] twice the larger seed sd, the ablations' test.
    pub fn beyond_two_sd(&self) -> Option<bool> {
        self.beyond(2.0)
    }

    /// Seeds on the smaller side.
    pub fn seeds(&self) -> usize {
        self.pretrained.len().min(self.random.len())
    }
}

/// Whether a fine-tuning run is from `pretrain`'s final weights (not a curve's earlier step).
fn from_final(d: &Dep, pretrain: &str) -> bool {
    let r = d.finetune();
    r.pretrain_instance.as_deref() == Some(pretrain) && r.pretrain_step.is_none()
}

/// Every fine-tuning stage's effect of `pretrain`, in stage order.
pub fn effects<'a>(pretrain: &str, finetune: &[&'a Dep]) -> Vec<Effect<'a>> {
    let mut by_stage: BTreeMap<String, Effect<'a>> = BTreeMap::new();
    for d in finetune.iter().filter(|d| from_final(d, pretrain)) {
        let e = by_stage.entry(d.stage.clone()).or_insert_with(|| Effect {
            task: d.task().unwrap_or_else(|| "?".into()),
            stage: d.stage.clone(),
            train_data: d
                .protocol()
                .as_ref()
                .and_then(train_data)
                .unwrap_or_else(|| "?".into()),
            pretrained: Vec::new(),
            random: Vec::new(),
        });
        match d.finetune().init.as_deref() {
            Some("pretrained") => e.pretrained.push(d),
            Some("random") => e.random.push(d),
            _ => {}
        }
    }
    by_stage.into_values().collect()
}

/// The main pretraining run: `main` when the report's params name it, else the one with the
/// most tokens seen among those that have fine-tuning runs (ties: the first by name). The
/// ablation rows may have smaller budgets; the targets are read off this one.
pub fn main_pretrain<'a>(
    pretrain: &[&'a Dep],
    finetune: &[&Dep],
    main: Option<&str>,
) -> Option<&'a Dep> {
    if let Some(name) = main {
        return pretrain.iter().find(|p| p.instance == name).copied();
    }
    let mut best: Option<&'a Dep> = None;
    for p in pretrain {
        if effects(&p.instance, finetune).is_empty() {
            continue;
        }
        let tokens = p.pretrain().tokens_seen.unwrap_or(0);
        if best.is_none_or(|b| tokens > b.pretrain().tokens_seen.unwrap_or(0)) {
            best = Some(p);
        }
    }
    best
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    pub(crate) fn dep(instance: &str, kind: DepKind, metrics: Value) -> Dep {
        Dep::new(instance, kind, metrics)
    }

    #[test]
    fn recipes_come_from_the_metrics_and_the_matching_clean() {
        let clean_plain = dep(
            "clean@add_task_text=false",
            DepKind::Clean,
            json!({"documents_in": 1, "formats": {}}),
        );
        let clean_task = dep(
            "clean@add_task_text=true",
            DepKind::Clean,
            json!({"documents_in": 1, "formats": {},
                   "task_text": {"chnsenticorp": {}, "lcqmc": {}}}),
        );
        let cleans = [&clean_plain, &clean_task];
        let p = dep(
            "pretrain@add_task_text=true,share_type=none,sop=false",
            DepKind::Pretrain,
            json!({"share_type": "none", "sop": false,
                   "masking": {"whole_word": false, "max_ngram": 3}}),
        );
        let r = recipe(&p, &cleans);
        assert_eq!(r.share_type, "none");
        assert_eq!(r.objective(), "MLM only");
        assert_eq!(r.masking, "character ≤3-gram");
        assert_eq!(r.task_text, ["chnsenticorp", "lcqmc"]);
        assert_eq!(r.clean.as_deref(), Some("clean@add_task_text=true"));
        // An older run: SOP on, masking unknown, and no clean to match among two.
        let old = dep(
            "pretrain@share_type=all",
            DepKind::Pretrain,
            json!({"share_type": "all"}),
        );
        let o = recipe(&old, &cleans);
        assert_eq!(
            (o.sop, o.masking.as_str(), o.clean.clone()),
            (true, "?", None)
        );
        assert_eq!(
            r.differences(&o),
            ["sharing", "SOP", "masking", "task text"]
        );
        // The only clean is everyone's.
        assert!(clean_of(&old, &[&clean_plain]).is_some());
        // The name in the metrics wins over the coordinates.
        let named = dep(
            "pretrain@add_task_text=false",
            DepKind::Pretrain,
            json!({"clean_instance": "clean@add_task_text=true"}),
        );
        assert_eq!(
            clean_of(&named, &cleans).map(|c| c.instance.as_str()),
            Some("clean@add_task_text=true")
        );
    }
}
