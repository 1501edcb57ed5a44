//! The `baseline` stage kind: the trivial and linear baselines that a fine-tuned model must
//! beat, on exactly the data a `finetune` stage uses. It reads the same protocol params
//! (`task`, `train`, `dev` / `dev_fraction`, `test` / `eval`, caps, `drop_eval_overlap`; see
//! `pipeline_tasks`) through the same loader, so its train, dev and evaluation splits are the
//! finetune stage's example for example; pipeline.yaml passes both stages the same vars.
//!
//! The methods (`methods`, default: all that suit the task):
//!
//! | method | what | fitted on train |
//! |---|---|---|
//! | `majority` | always the most frequent training class | the class counts |
//! | `overlap` | Jaccard similarity of the two texts' character sets, cut by thresholds into one interval per class | the thresholds that maximise training accuracy |
//! | `length` | the same rule on the pair's length in characters: the shortcut LCQMC's dev set (our training data) offers | idem |
//! | `ngram_lr` | logistic regression on character n-grams of `text_a`, of `text_b`, and those in both | weights (linfa-logistic, L-BFGS), `alpha` chosen on dev |
//! | `hypothesis_lr` | the same on `text_b` alone (NLI only: what the hypothesis gives away) | idem |
//! | `majority_tag`, `lexicon` | tagging: the most frequent tag of each character; the training entities matched longest-first ([`tagging`]) | tag counts, entities |
//! | `sliding_window`, `best_sentence` | span extraction (CMRC 2018): the context span, or the sentence, most like the question, scored with CMRC 2018's EM and F1 ([`reading`], [`comprehension`]) | nothing |
//! | `choice_overlap`, `majority_position` | C3: the choice with the most characters in the context and question; the most frequent training answer position | answer-position counts |
//!
//! | param | default | what |
//! |---|---|---|
//! | `methods` | all that suit the task | a list of the names above (`hypothesis_lr` by default only for tasks with an `entailment` label) |
//! | `ngram_max` | 2 | character n-grams from 1 to this (1–4) |
//! | `max_features` | 4096 | the n-gram features with the highest training document frequency kept (linfa needs a dense matrix: rows × features × 4 bytes, 0.5 GB for XNLI's 30k pairs) |
//! | `min_df` | 2 | features in fewer training pairs are dropped |
//! | `alpha` | `10` | L2 penalty, or a list of them: each is fitted and the best on dev kept (the first on a tie). 10 beat 1 on the dev split of both LCQMC and XNLI on the shared data, and each value costs a fit |
//! | `max_iterations` | 100 | L-BFGS iterations |
//!
//! Output: `metrics.json` (docs/metrics.md): `task`, `labels`, `protocol` (as the finetune
//! stage writes it), `baselines` (per method: `train`, `dev` and `eval` blocks shaped like the
//! finetune stage's: `{examples, accuracy, f1, macro_f1, confusion}`, and what was fitted) and
//! `length` (mean pair length per class in every split: the LCQMC length shortcut, measured).

#![warn(missing_docs)]

pub mod comprehension;
pub mod features;
pub mod kinds;
pub mod logistic;
pub mod params;
pub mod reading;
pub mod rules;
pub mod tagging;

use std::borrow::Cow;
use std::time::Instant;

use anyhow::{Context, bail};
use pipeline_engine::ParamError;
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_metrics::{BaselineEntry, BaselineRecord};
use pipeline_tasks::{Metrics, MetricsBlock, PairExample, Protocol, ProtocolSpec, evaluate};
use serde_json::{Map, Value, json};

use features::{View, Vocabulary, char_jaccard, pair_features, pair_length};
use kinds::Runner;
pub use params::{BaselineParams, Method};
use params::{known, own_params};
use rules::{IntervalRule, majority};

/// The `baseline` stage kind (registered as `baseline`): see the module docs.
pub struct BaselineStage;

impl Stage for BaselineStage {
    fn kind(&self) -> &'static str {
        "baseline"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        known()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        BaselineParams::parse(params)?;
        protocol_spec(params).map(|_| ()).map_err(ParamError)
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = BaselineParams::parse(ctx.params)?;
        let spec = protocol_spec(ctx.params).map_err(anyhow::Error::msg)?;
        for warning in spec.undeclared(ctx.instance, ctx.root, ctx.inputs) {
            tracing::warn!("{warning}");
        }
        let protocol = spec.load(ctx.root)?;
        let metrics = run(&protocol, &p, &|line| {
            tracing::info!(target: "baseline", "{}: {line}", ctx.instance);
        })?;
        pipeline_metrics::write_metrics(ctx.out_dir, ctx.log_dir, &metrics)?;
        Ok(())
    }
}

/// The protocol part of the params (everything but the kind's own).
fn protocol_spec(params: &Map<String, Value>) -> Result<ProtocolSpec, String> {
    let protocol: Map<String, Value> = params
        .iter()
        .filter(|(k, _)| !own_params().contains(&k.as_str()))
        .filter(|(k, _)| pipeline_tasks::known_params().contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ProtocolSpec::from_params(&protocol).map_err(|e| e.to_string())
}

/// The splits as pair examples: train, dev, then the evaluation sets by name. A single-text
/// task's examples are pairs with an empty `text_a` (the n-gram model then sees the text alone).
struct Splits<'a> {
    train: Cow<'a, [PairExample]>,
    dev: Cow<'a, [PairExample]>,
    eval: Vec<(&'a str, Cow<'a, [PairExample]>)>,
}

/// The pair examples of a split (single texts as pairs); a multiple-choice task has none.
fn pairs<'a>(
    protocol: &Protocol,
    s: &'a pipeline_tasks::Split,
) -> anyhow::Result<Cow<'a, [PairExample]>> {
    if let Some(v) = s.examples.as_singles() {
        return Ok(Cow::Owned(
            v.iter()
                .map(|e| PairExample {
                    text_a: String::new(),
                    text_b: e.text.clone(),
                    label: e.label,
                    file: e.file,
                    line: e.line,
                })
                .collect(),
        ));
    }
    s.examples.as_pairs().map(Cow::Borrowed).with_context(|| {
        let task = protocol.spec.task.name();
        let refusal = kinds::of(protocol.spec.task.kind()).refusal;
        format!("task {task} is {refusal}; leave the baseline stage out for it")
    })
}

fn splits(protocol: &Protocol) -> anyhow::Result<Splits<'_>> {
    let pairs = |s| pairs(protocol, s);
    Ok(Splits {
        train: pairs(&protocol.train)?,
        dev: pairs(&protocol.dev)?,
        eval: protocol
            .eval
            .iter()
            .map(|s| Ok((s.name.as_str(), pairs(s)?)))
            .collect::<anyhow::Result<_>>()?,
    })
}

/// One metrics block, the shape the finetune stage writes.
fn metrics_json(m: &Metrics) -> Value {
    MetricsBlock::new(m, None).to_json()
}

fn labels_of(ex: &[PairExample]) -> Vec<usize> {
    ex.iter().map(|e| e.label).collect()
}

/// Scores a predictor on train, dev and every evaluation set.
fn score(
    s: &Splits,
    labels: &[String],
    predict: &dyn Fn(&[PairExample]) -> Vec<usize>,
) -> anyhow::Result<Map<String, Value>> {
    let block = |name: &str, ex: &[PairExample]| -> anyhow::Result<Value> {
        let m = evaluate(&labels_of(ex), &predict(ex), labels)
            .map_err(|e| anyhow::anyhow!("{name} metrics: {e}"))?;
        Ok(metrics_json(&m))
    };
    let mut out = Map::new();
    out.insert("train".into(), block("train", &s.train)?);
    if !s.dev.is_empty() {
        out.insert("dev".into(), block("dev", &s.dev)?);
    }
    let mut eval = Map::new();
    for (name, ex) in &s.eval {
        eval.insert(name.to_string(), block(name, ex)?);
    }
    out.insert("eval".into(), Value::Object(eval));
    Ok(out)
}

/// A threshold rule on one number per pair.
fn interval_baseline(
    s: &Splits,
    labels: &[String],
    value: fn(&PairExample) -> f64,
) -> anyhow::Result<(IntervalRule, Map<String, Value>)> {
    let values: Vec<f64> = s.train.iter().map(value).collect();
    let rule = IntervalRule::fit(&values, &labels_of(&s.train), labels.len(), labels.len());
    let scored = score(s, labels, &|ex| {
        ex.iter().map(|e| rule.predict(value(e))).collect()
    })?;
    Ok((rule, scored))
}

fn jaccard(e: &PairExample) -> f64 {
    char_jaccard(&e.text_a, &e.text_b)
}

fn length(e: &PairExample) -> f64 {
    pair_length(&e.text_a, &e.text_b)
}

/// The logistic regression on one view of the pairs.
fn ngram_baseline(
    s: &Splits,
    labels: &[String],
    p: &BaselineParams,
    view: View,
) -> anyhow::Result<(Value, Map<String, Value>)> {
    let docs = |ex: &[PairExample]| -> Vec<Vec<String>> {
        ex.iter()
            .map(|e| pair_features(&e.text_a, &e.text_b, p.ngram_max, view))
            .collect()
    };
    let train_docs = docs(&s.train);
    let vocab = Vocabulary::fit(&train_docs, p.max_features, p.min_df);
    if vocab.is_empty() {
        bail!(
            "no character n-gram is in {} or more training pairs: lower min_df",
            p.min_df
        );
    }
    let x = vocab.matrix(&train_docs);
    drop(train_docs);
    let dev_x = vocab.matrix(&docs(&s.dev));
    let fitted = logistic::fit(
        &x,
        &labels_of(&s.train),
        &dev_x,
        &labels_of(&s.dev),
        &p.alphas,
        p.max_iterations,
    )?;
    drop((x, dev_x));
    let scored = score(s, labels, &|ex| fitted.predict(&vocab.matrix(&docs(ex))))?;
    let fit = json!({
        "features": vocab.len(),
        "ngram_max": p.ngram_max,
        "min_df": p.min_df,
        "alpha": fitted.alpha,
        "dev_accuracy_by_alpha": fitted.tried.iter().map(|(a, acc)| json!({"alpha": a, "accuracy": acc})).collect::<Vec<_>>(),
        "max_iterations": p.max_iterations,
    });
    Ok((fit, scored))
}

/// Mean pair length (characters) per class of one split.
fn length_by_class(ex: &[PairExample], labels: &[String]) -> Value {
    let mut sum = vec![0.0; labels.len()];
    let mut n = vec![0usize; labels.len()];
    for e in ex {
        if e.label < labels.len() {
            sum[e.label] += length(e);
            n[e.label] += 1;
        }
    }
    let mean: Map<String, Value> = labels
        .iter()
        .enumerate()
        .map(|(c, l)| {
            let m = (n[c] > 0).then(|| sum[c] / n[c] as f64);
            (l.clone(), json!(m))
        })
        .collect();
    json!({"examples": ex.len(), "mean_chars": mean})
}

/// Fits one method of a classification baseline on train and scores it on every split: its
/// description, what it fitted, and the scores by split.
fn fit_method(
    method: Method,
    protocol: &Protocol,
    s: &Splits<'_>,
    p: &BaselineParams,
) -> anyhow::Result<(&'static str, Value, Map<String, Value>)> {
    let labels = &protocol.labels;
    let single = kinds::of(protocol.spec.task.kind()).single;
    Ok(match method {
        Method::Majority => {
            let c = majority(&labels_of(&s.train), labels.len());
            let scored = score(s, labels, &|ex| vec![c; ex.len()])?;
            ("majority class", json!({"class": labels[c]}), scored)
        }
        Method::MajorityTag | Method::Lexicon => bail!(
            "method {} is a tagging baseline, and task {} is not a tagging task",
            method.name(),
            protocol.spec.task.name()
        ),
        Method::SlidingWindow
        | Method::BestSentence
        | Method::ChoiceOverlap
        | Method::MajorityPosition => bail!(
            "method {} is a reading-comprehension baseline (tasks cmrc2018, squad, c3), and \
                 task {} is not one",
            method.name(),
            protocol.spec.task.name()
        ),
        Method::Overlap | Method::Length => {
            let (what, f): (&str, fn(&PairExample) -> f64) = if method == Method::Overlap {
                ("character-overlap (Jaccard) threshold", jaccard)
            } else {
                ("pair-length threshold", length)
            };
            let (rule, scored) = interval_baseline(s, labels, f)?;
            let classes: Vec<&str> = rule.classes.iter().map(|&c| labels[c].as_str()).collect();
            let fit = json!({"thresholds": rule.thresholds, "classes": classes,
                                 "train_accuracy": rule.train_accuracy});
            (what, fit, scored)
        }
        Method::NgramLr | Method::HypothesisLr => {
            let view = if method == Method::NgramLr && !single {
                View::Pair
            } else {
                View::Hypothesis
            };
            let (fit, scored) = ngram_baseline(s, labels, p, view)?;
            let what = match (method, single) {
                (Method::NgramLr, true) => "character n-gram logistic regression (text)",
                (Method::NgramLr, false) => "character n-gram logistic regression (pair)",
                _ => "character n-gram logistic regression (hypothesis only)",
            };
            (what, fit, scored)
        }
    })
}

/// Every baseline on a loaded protocol: the metrics.json of the stage.
pub fn run(protocol: &Protocol, p: &BaselineParams, log: &dyn Fn(&str)) -> anyhow::Result<Value> {
    let kind = protocol.spec.task.kind();
    match kinds::of(kind).runner {
        Runner::Tagging => return tagging::run(protocol, p, log),
        Runner::Reading => return comprehension::run(protocol, p, log),
        Runner::Classes => {}
    }
    let started = Instant::now();
    let s = splits(protocol)?;
    if s.train.is_empty() {
        bail!("the protocol has no training examples");
    }
    let labels = &protocol.labels;
    let mut baselines = Vec::new();
    for method in p.methods_for_kind(labels, kind) {
        let t0 = Instant::now();
        let (description, fit, scored) = fit_method(method, protocol, &s, p)?;
        let seconds = t0.elapsed().as_secs_f64();
        let acc = |k: &str| {
            scored
                .get(k)
                .and_then(|b| b.get("accuracy"))
                .and_then(Value::as_f64)
                .map_or("–".into(), |a| format!("{:.4}", a))
        };
        log(&format!(
            "{}: train {} dev {} ({seconds:.1} s)",
            method.name(),
            acc("train"),
            acc("dev")
        ));
        baselines.push(BaselineEntry::new(
            method.name(),
            description,
            fit,
            scored,
            seconds,
        ));
    }
    let mut length = Map::new();
    length.insert("train".into(), length_by_class(&s.train, labels));
    length.insert("dev".into(), length_by_class(&s.dev, labels));
    for (name, ex) in &s.eval {
        length.insert(name.to_string(), length_by_class(ex, labels));
    }
    let record = BaselineRecord {
        length: Some(length),
        ..record(protocol, baselines, started)
    };
    Ok(serde_json::to_value(record)?)
}

/// The record of a baseline stage over `protocol` that ran `baselines` since `started`, without
/// the blocks of one kind of task (`length`, `questions`).
pub(crate) fn record(
    protocol: &Protocol,
    baselines: Vec<BaselineEntry>,
    started: Instant,
) -> BaselineRecord {
    BaselineRecord {
        task: Some(protocol.spec.task.name().into()),
        kind: Some("baseline".into()),
        labels: Some(protocol.labels.clone()),
        protocol: Some(protocol.to_json()),
        baselines: Some(baselines),
        length: None,
        questions: None,
        seconds: Some(started.elapsed().as_secs_f64()),
        threads: Some(std::thread::available_parallelism().map_or(1, |n| n.get()) as u64),
    }
}

#[cfg(test)]
mod tests;
