//! The reading-comprehension baselines ([`crate::reading`]'s functions) on the finetune
//! stage's protocol: the same loader, so the same questions in the same train, dev and
//! evaluation splits (CMRC 2018 and C3 split by article or document, seeded).
//!
//! - CMRC 2018 (`sliding_window`, `best_sentence`): nothing is fitted; each predicts a span of
//!   the context, scored with CMRC 2018's EM and F1 ([`pipeline_tasks::cmrc_eval`]), in the
//!   finetune stage's span block (`exact_match`, `f1`, fractions).
//! - C3 (`choice_overlap`, `majority_position`): the second counts the answer positions of the
//!   training questions; both never pick a padding choice; scored by accuracy in the class
//!   block (labels `0` … `3`).

use std::collections::HashMap;
use std::time::Instant;

use anyhow::bail;
use pipeline_metrics::{BaselineEntry, BaselineRecord};
use pipeline_tasks::c3::C3Example;
use pipeline_tasks::cmrc_eval::{self, GoldQuestion};
use pipeline_tasks::squad::SquadExample;
use pipeline_tasks::{MetricsBlock, Protocol, SpanMetricsBlock, Split, evaluate};
use serde_json::{Map, Value, json};

use crate::params::{BaselineParams, Method};
use crate::reading::{MajorityPosition, best_sentence, choice_overlap, sliding_window};

/// Every split of the protocol, named: train, dev, then the evaluation sets.
fn splits(protocol: &Protocol) -> Vec<&Split> {
    std::iter::once(&protocol.train)
        .chain(std::iter::once(&protocol.dev))
        .chain(&protocol.eval)
        .collect()
}

/// `{train, dev, eval: {NAME: …}}` of one method, `block` scoring a split.
fn scored(
    protocol: &Protocol,
    block: &dyn Fn(&Split) -> anyhow::Result<Value>,
) -> anyhow::Result<Map<String, Value>> {
    let mut out = Map::new();
    out.insert("train".into(), block(&protocol.train)?);
    if !protocol.dev.is_empty() {
        out.insert("dev".into(), block(&protocol.dev)?);
    }
    let mut eval = Map::new();
    for s in &protocol.eval {
        eval.insert(s.name.clone(), block(s)?);
    }
    out.insert("eval".into(), Value::Object(eval));
    Ok(out)
}

/// EM and F1 of a span predictor on one split's questions.
fn span_block(
    s: &Split,
    predict: fn(&str, &str) -> std::ops::Range<usize>,
) -> anyhow::Result<Value> {
    let questions: &[SquadExample] = s.examples.as_spans().unwrap_or_default();
    let gold: Vec<GoldQuestion> = questions
        .iter()
        .map(|q| GoldQuestion {
            id: q.id.clone(),
            answers: q.gold_texts().into_iter().map(str::to_string).collect(),
        })
        .collect();
    let predictions: HashMap<String, String> = questions
        .iter()
        .map(|q| {
            let span = predict(&q.context, &q.question);
            (q.id.clone(), q.context.get(span).unwrap_or("").to_string())
        })
        .collect();
    let scores = cmrc_eval::evaluate(&gold, &predictions);
    Ok(SpanMetricsBlock::from_scores(&scores).to_json())
}

/// Accuracy (the class block) of a choice predictor on one split's questions.
fn choice_block(
    s: &Split,
    labels: &[String],
    predict: &dyn Fn(&C3Example) -> usize,
) -> anyhow::Result<Value> {
    let questions: &[C3Example] = s.examples.as_reading_choices().unwrap_or_default();
    let gold: Vec<usize> = questions.iter().map(|q| q.answer).collect();
    let predicted: Vec<usize> = questions.iter().map(predict).collect();
    let m = evaluate(&gold, &predicted, labels)
        .map_err(|e| anyhow::anyhow!("{} metrics: {e}", s.name))?;
    Ok(MetricsBlock::new(&m, None).to_json())
}

/// One method: its description, what it fitted, and its blocks.
fn method(
    protocol: &Protocol,
    m: Method,
) -> anyhow::Result<(&'static str, Value, Map<String, Value>)> {
    let labels = &protocol.labels;
    Ok(match m {
        Method::SlidingWindow => (
            "sliding window: the context span most like the question (SQuAD paper)",
            json!({}),
            scored(protocol, &|s| span_block(s, sliding_window))?,
        ),
        Method::BestSentence => (
            "the sentence sharing the most question characters",
            json!({}),
            scored(protocol, &|s| span_block(s, best_sentence))?,
        ),
        Method::ChoiceOverlap => (
            "the choice with the most characters in the context and question",
            json!({}),
            scored(protocol, &|s| choice_block(s, labels, &choice_overlap))?,
        ),
        Method::MajorityPosition => {
            let train: Vec<&C3Example> = protocol
                .train
                .examples
                .as_reading_choices()
                .unwrap_or_default()
                .iter()
                .collect();
            let fitted = MajorityPosition::fit(&train);
            (
                "the most frequent answer position in training (among the real choices)",
                json!({"counts": fitted.counts}),
                scored(protocol, &|s| {
                    choice_block(s, labels, &|q| fitted.predict(q))
                })?,
            )
        }
        other => bail!(
            "method {} is not a reading-comprehension baseline; task {} takes {}",
            other.name(),
            protocol.spec.task.name(),
            crate::kinds::of(protocol.spec.task.kind())
                .default_methods(false)
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The headline of a block for the log: F1 of a span block, else accuracy.
fn headline(block: Option<&Value>) -> String {
    let Some(b) = block else {
        return "–".into();
    };
    match (b.get("f1"), b.get("exact_match"), b.get("accuracy")) {
        (Some(f1), Some(em), _) => format!(
            "EM {:.4} F1 {:.4}",
            em.as_f64().unwrap_or(f64::NAN),
            f1.as_f64().unwrap_or(f64::NAN)
        ),
        (_, _, Some(a)) => format!("accuracy {:.4}", a.as_f64().unwrap_or(f64::NAN)),
        _ => "–".into(),
    }
}

/// Every reading-comprehension baseline on a loaded protocol: the stage's metrics.json.
pub fn run(protocol: &Protocol, p: &BaselineParams, log: &dyn Fn(&str)) -> anyhow::Result<Value> {
    let started = Instant::now();
    if protocol.train.is_empty() {
        bail!("the protocol has no training examples");
    }
    let mut baselines = Vec::new();
    for m in p.methods_for_kind(&protocol.labels, protocol.spec.task.kind()) {
        let t0 = Instant::now();
        let (description, fit, blocks) = method(protocol, m)?;
        let seconds = t0.elapsed().as_secs_f64();
        log(&format!(
            "{}: train {}, dev {} ({seconds:.1} s)",
            m.name(),
            headline(blocks.get("train")),
            headline(blocks.get("dev"))
        ));
        baselines.push(BaselineEntry::new(
            m.name(),
            description,
            fit,
            blocks,
            seconds,
        ));
    }
    let questions = splits(protocol)
        .iter()
        .map(|s| (s.name.clone(), json!(s.len())))
        .collect();
    Ok(serde_json::to_value(BaselineRecord {
        questions: Some(questions),
        ..crate::record(protocol, baselines, started)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline_tasks::ProtocolSpec;

    fn fixture(params: Value) -> Protocol {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        ProtocolSpec::from_params(params.as_object().unwrap())
            .unwrap()
            .load(&root)
            .unwrap()
    }

    #[test]
    fn cmrc_baselines_score_em_and_f1_on_the_finetune_split() {
        let p = fixture(
            json!({"task": "cmrc2018", "train": "datasets/fixtures/cmrc2018/dev.json",
                               "dev_fraction": 0.1, "test_fraction": 0.1}),
        );
        let m = run(&p, &BaselineParams::parse(&Map::new()).unwrap(), &|_| {}).unwrap();
        let names: Vec<&str> = m["baselines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["sliding_window", "best_sentence"]);
        for b in m["baselines"].as_array().unwrap() {
            let test = &b["eval"]["test"];
            let block: SpanMetricsBlock = serde_json::from_value(test.clone()).unwrap();
            assert_eq!(block.examples, p.eval[0].len());
            assert!(block.f1 >= block.exact_match && block.f1 <= 1.0, "{test}");
            // A sentence holds its answer, with more around it: some F1, never a match.
            if b["name"] == "best_sentence" {
                assert!(block.f1 > 0.0 && block.exact_match == 0.0, "{test}");
            }
        }
        assert_eq!(m["protocol"]["group_split"]["by"], "group");
    }

    #[test]
    fn c3_baselines_are_accuracies_and_refuse_other_methods() {
        let params = json!({"task": "c3", "train": "datasets/fixtures/c3/dev.json",
                            "dev_fraction": 0.1, "test_fraction": 0.1});
        let p = fixture(params);
        let m = run(&p, &BaselineParams::parse(&Map::new()).unwrap(), &|_| {}).unwrap();
        let b = &m["baselines"][1];
        assert_eq!(b["name"], "majority_position");
        let counts: Vec<usize> = serde_json::from_value(b["fit"]["counts"].clone()).unwrap();
        assert_eq!(counts.iter().sum::<usize>(), p.train.len());
        let acc = m["baselines"][0]["eval"]["test"]["accuracy"]
            .as_f64()
            .unwrap();
        assert!((0.0..=1.0).contains(&acc));
        let only_lr = json!({"methods": ["ngram_lr"]});
        let e = run(
            &p,
            &BaselineParams::parse(only_lr.as_object().unwrap()).unwrap(),
            &|_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("choice_overlap"), "{e}");
    }
}
