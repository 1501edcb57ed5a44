//! The tagging (NER) baselines, on the finetune stage's sentences:
//!
//! - `majority_tag`: each character gets the tag it had most often in train (ties: the lower
//!   tag id); a character never seen in train gets tag 0 (`O`). What a model that ignores
//!   context scores.
//! - `lexicon`: the entities of train (their surface strings and types; a string seen with
//!   several types takes its most frequent) are matched in each sentence longest-first, left
//!   to right, without overlaps, and tagged `B-`/`I-`; everything else is `O`. What
//!   memorising the training entities scores.
//!
//! Scored as the finetune stage scores a tagger: entity precision, recall and F1 the way
//! seqeval's default mode computes them, and per-character accuracy.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::bail;
use pipeline_metrics::BaselineEntry;
use pipeline_tasks::entities::{entities, score};
use pipeline_tasks::{MetricsBlock, Protocol, TagExample, evaluate};
use serde_json::{Map, Value, json};

use crate::params::{BaselineParams, Method};

/// The most frequent training tag of each character.
pub struct MajorityTag {
    tags: HashMap<String, usize>,
}

impl MajorityTag {
    /// Counts the tags of each character of `train`, whose tag ids are below `classes`.
    pub fn fit(train: &[TagExample], classes: usize) -> MajorityTag {
        let mut counts: HashMap<&str, Vec<usize>> = HashMap::new();
        for e in train {
            for (c, &t) in e.chars.iter().zip(&e.tags) {
                counts.entry(c.as_str()).or_insert_with(|| vec![0; classes])[t] += 1;
            }
        }
        let tags = counts
            .into_iter()
            .map(|(c, n)| {
                // max_by_key keeps the last maximum; reversed, the lowest id wins a tie.
                let best = (0..n.len()).rev().max_by_key(|&t| n[t]).unwrap_or(0);
                (c.to_string(), best)
            })
            .collect();
        MajorityTag { tags }
    }

    /// The tag id of each character: its most frequent training tag, 0 (`O`) for a character
    /// never seen in train.
    pub fn predict(&self, chars: &[String]) -> Vec<usize> {
        chars
            .iter()
            .map(|c| self.tags.get(c).copied().unwrap_or(0))
            .collect()
    }

    /// How many distinct characters train had.
    pub fn len(&self) -> usize {
        self.tags.len()
    }

    /// Whether train had no character.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
}

/// The training entities, matched longest-first.
pub struct Lexicon {
    /// Surface (characters joined) → entity type.
    entries: HashMap<String, String>,
    /// The longest entry, in characters.
    longest: usize,
    /// `B-X` and `I-X` ids of each type X.
    ids: HashMap<String, (usize, usize)>,
}

impl Lexicon {
    /// The entities of `train` (tag ids into `labels`, BIO), each surface string with its most
    /// frequent type; types without both a `B-` and an `I-` label are left out.
    pub fn fit(train: &[TagExample], labels: &[String]) -> Lexicon {
        let mut seen: HashMap<String, HashMap<String, usize>> = HashMap::new();
        for e in train {
            let tags: Vec<&str> = e.tags.iter().map(|&t| labels[t].as_str()).collect();
            for ent in entities(&tags) {
                let surface = e.chars[ent.start..ent.end].concat();
                *seen
                    .entry(surface)
                    .or_default()
                    .entry(ent.kind)
                    .or_default() += 1;
            }
        }
        let mut ids = HashMap::new();
        for l in labels {
            if let Some(kind) = l.strip_prefix("B-")
                && let Some(i) = labels.iter().position(|x| *x == format!("I-{kind}"))
                && let Some(b) = labels.iter().position(|x| x == l)
            {
                ids.insert(kind.to_string(), (b, i));
            }
        }
        let entries: HashMap<String, String> = seen
            .into_iter()
            .filter_map(|(surface, kinds)| {
                let mut kinds: Vec<(String, usize)> = kinds.into_iter().collect();
                // Most frequent type; a tie goes to the first name, so the result is fixed.
                kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let kind = kinds.into_iter().next()?.0;
                ids.contains_key(&kind).then_some((surface, kind))
            })
            .collect();
        let longest = entries.keys().map(|s| s.chars().count()).max().unwrap_or(0);
        Lexicon {
            entries,
            longest,
            ids,
        }
    }

    /// Tags of a sentence: at each position the longest entry starting there, if any.
    pub fn predict(&self, chars: &[String]) -> Vec<usize> {
        let mut out = vec![0; chars.len()];
        let mut i = 0;
        while i < chars.len() {
            let found = (1..=self.longest.min(chars.len() - i)).rev().find_map(|n| {
                let kind = self.entries.get(&chars[i..i + n].concat())?;
                Some((n, self.ids.get(kind)?))
            });
            match found {
                Some((n, &(b, inside))) => {
                    out[i] = b;
                    for t in &mut out[i + 1..i + n] {
                        *t = inside;
                    }
                    i += n;
                }
                None => i += 1,
            }
        }
        out
    }

    /// How many distinct entity strings it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether train had no entity it could tag.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The metrics block of `predicted` tags against a split's gold.
fn block(
    name: &str,
    ex: &[TagExample],
    labels: &[String],
    predict: &dyn Fn(&[String]) -> Vec<usize>,
) -> anyhow::Result<Value> {
    let predicted: Vec<Vec<usize>> = ex.iter().map(|e| predict(&e.chars)).collect();
    let gold: Vec<Vec<usize>> = ex.iter().map(|e| e.tags.clone()).collect();
    let flat = |v: &[Vec<usize>]| v.iter().flatten().copied().collect::<Vec<_>>();
    let classes = evaluate(&flat(&gold), &flat(&predicted), labels)
        .map_err(|e| anyhow::anyhow!("{name} metrics: {e}"))?;
    let names = |v: &[Vec<usize>]| -> Vec<Vec<&str>> {
        v.iter()
            .map(|s| s.iter().map(|&t| labels[t].as_str()).collect())
            .collect()
    };
    let entities = score(&names(&gold), &names(&predicted))
        .map_err(|e| anyhow::anyhow!("{name} entity metrics: {e}"))?;
    Ok(MetricsBlock::new(&classes, Some(entities)).to_json())
}

/// The tagged sentences of a split.
fn sentences(s: &pipeline_tasks::Split) -> &[TagExample] {
    s.examples.as_tagged().unwrap_or_default()
}

/// Scores a predictor on train, dev and every evaluation set.
fn scored(
    protocol: &Protocol,
    predict: &dyn Fn(&[String]) -> Vec<usize>,
) -> anyhow::Result<Map<String, Value>> {
    let labels = &protocol.labels;
    let mut out = Map::new();
    out.insert(
        "train".into(),
        block("train", sentences(&protocol.train), labels, predict)?,
    );
    if !protocol.dev.is_empty() {
        out.insert(
            "dev".into(),
            block("dev", sentences(&protocol.dev), labels, predict)?,
        );
    }
    let mut eval = Map::new();
    for s in &protocol.eval {
        eval.insert(
            s.name.clone(),
            block(&s.name, sentences(s), labels, predict)?,
        );
    }
    out.insert("eval".into(), Value::Object(eval));
    Ok(out)
}

/// Every tagging baseline on a loaded protocol: the stage's metrics.json.
pub fn run(protocol: &Protocol, p: &BaselineParams, log: &dyn Fn(&str)) -> anyhow::Result<Value> {
    let started = Instant::now();
    let labels = &protocol.labels;
    let train = sentences(&protocol.train);
    if train.is_empty() {
        bail!("the protocol has no training examples");
    }
    let mut baselines = Vec::new();
    for method in p.methods_for_kind(labels, protocol.spec.task.kind()) {
        let t0 = Instant::now();
        let (description, fit, scores) = match method {
            Method::MajorityTag => {
                let m = MajorityTag::fit(train, labels.len());
                let fit = json!({"characters": m.len()});
                (
                    "most frequent tag of each character",
                    fit,
                    scored(protocol, &|c| m.predict(c))?,
                )
            }
            Method::Lexicon => {
                let m = Lexicon::fit(train, labels);
                let fit = json!({"entries": m.len(), "longest": m.longest});
                (
                    "training entities matched longest-first",
                    fit,
                    scored(protocol, &|c| m.predict(c))?,
                )
            }
            other => bail!(
                "method {} takes classification tasks; task {} is a tagging task (its methods: \
                 majority_tag, lexicon)",
                other.name(),
                protocol.spec.task.name()
            ),
        };
        let seconds = t0.elapsed().as_secs_f64();
        let f1 = |k: &str| {
            scores
                .get(k)
                .and_then(|b| b["entities"]["micro"]["f1"].as_f64())
                .map_or("–".into(), |f| format!("{f:.4}"))
        };
        log(&format!(
            "{}: entity F1 train {} dev {} ({seconds:.1} s)",
            method.name(),
            f1("train"),
            f1("dev")
        ));
        baselines.push(BaselineEntry::new(
            method.name(),
            description,
            fit,
            scores,
            seconds,
        ));
    }
    Ok(serde_json::to_value(crate::record(
        protocol, baselines, started,
    ))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(text: &str, tags: &[usize]) -> TagExample {
        TagExample {
            chars: text.chars().map(|c| c.to_string()).collect(),
            tags: tags.to_vec(),
            file: 0,
            line: 1,
        }
    }

    fn labels() -> Vec<String> {
        ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn lexicon_matches_longest_first_and_majority_tags_characters() {
        let train = [
            ex("北京大学在北京", &[0, 0, 0, 0, 0, 1, 2]),
            ex("北京很大", &[1, 2, 0, 0]),
            ex("小明去了北京", &[3, 4, 0, 0, 1, 2]),
        ];
        let lex = Lexicon::fit(&train, &labels());
        assert_eq!(lex.len(), 2);
        let chars = |s: &str| s.chars().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(lex.predict(&chars("小明在北京")), [3, 4, 0, 1, 2]);
        assert_eq!(lex.predict(&chars("大北京")), [0, 1, 2]);
        let m = MajorityTag::fit(&train, labels().len());
        // 北 is B-LOC 3 times and O once; 在 is O; 上 was never seen.
        assert_eq!(m.predict(&chars("北在上")), [1, 0, 0]);
    }
}
