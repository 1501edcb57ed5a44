//! The `baseline` stage's own params (the data protocol's are `pipeline_tasks`'s), checked
//! with errors that name the param.

use pipeline_engine::ParamError;
use pipeline_tasks::TaskKind;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The params the kind reads besides the protocol's: [`Given`]'s fields.
pub(crate) fn own_params() -> &'static [&'static str] {
    pipeline_params::struct_fields::<Given>()
}

/// Every param the kind takes.
pub fn known() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        own_params()
            .iter()
            .chain(pipeline_tasks::known_params())
            .copied()
            .collect()
    })
}

/// A baseline method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `majority`: always the most frequent training class.
    Majority,
    /// `overlap`: a threshold rule on the Jaccard similarity of the two texts' character sets.
    Overlap,
    /// `length`: a threshold rule on the pair's length in characters.
    Length,
    /// `ngram_lr`: logistic regression on character n-grams of both texts and of those they
    /// share (of the text alone for a single-text task).
    NgramLr,
    /// `hypothesis_lr`: the same on `text_b` alone (NLI: what the hypothesis gives away).
    HypothesisLr,
    /// `majority_tag`: tagging, each character's most frequent training tag.
    MajorityTag,
    /// `lexicon`: tagging, the training entities matched longest-first.
    Lexicon,
    /// `sliding_window`: span extraction, the context window most like the question.
    SlidingWindow,
    /// `best_sentence`: span extraction, the context sentence most like the question.
    BestSentence,
    /// `choice_overlap`: C3, the choice with the most of its characters in the context and
    /// question.
    ChoiceOverlap,
    /// `majority_position`: C3, the answer position most frequent in training.
    MajorityPosition,
}

/// Every method by its name in the `methods` param and metrics.json, in the order the stage
/// runs them when `methods` is left out.
pub const METHODS: &[(&str, Method)] = &[
    ("majority", Method::Majority),
    ("overlap", Method::Overlap),
    ("length", Method::Length),
    ("ngram_lr", Method::NgramLr),
    ("hypothesis_lr", Method::HypothesisLr),
    ("majority_tag", Method::MajorityTag),
    ("lexicon", Method::Lexicon),
    ("sliding_window", Method::SlidingWindow),
    ("best_sentence", Method::BestSentence),
    ("choice_overlap", Method::ChoiceOverlap),
    ("majority_position", Method::MajorityPosition),
];

impl Method {
    /// Its name in the `methods` param and metrics.json (`ngram_lr`).
    pub fn name(self) -> &'static str {
        METHODS
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The params, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineParams {
    /// `None`: every method that suits the task (`hypothesis_lr` for NLI tasks only).
    pub methods: Option<Vec<Method>>,
    /// The longest character n-gram of the regressions' features, 1–4 (default 2).
    pub ngram_max: usize,
    /// The n-gram features kept, by training document frequency: 1–65536 (default 4096).
    pub max_features: usize,
    /// Features in fewer training pairs than this are dropped: 1–1000000 (default 2).
    pub min_df: usize,
    /// L2 penalties, each ≥ 0, tried in the order given (default `[10]`); the best on dev is
    /// kept, the first on a tie.
    pub alphas: Vec<f64>,
    /// L-BFGS iterations per fit, 1–100000 (default 100).
    pub max_iterations: u64,
}

/// The params as given, typed (`null` means left out); checked and defaulted into
/// [`BaselineParams`] by [`BaselineParams::parse`].
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Given {
    methods: Option<Listed>,
    ngram_max: Option<Whole>,
    max_features: Option<Whole>,
    min_df: Option<Whole>,
    alpha: Option<OneOrMore>,
    max_iterations: Option<Whole>,
}

/// A whole number (the baseline's words for a count).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "Value")]
struct Whole(u64);

impl TryFrom<Value> for Whole {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        v.as_u64()
            .map(Whole)
            .ok_or_else(|| format!("must be a whole number, not {v}").into())
    }
}

/// `methods`: a non-empty list (its names are checked against [`METHODS`] after).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
struct Listed(Vec<Value>);

impl TryFrom<Value> for Listed {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        match v {
            Value::Array(items) if !items.is_empty() => Ok(Listed(items)),
            v => Err(format!(
                "must be a non-empty list such as [majority, overlap, ngram_lr], not {v}"
            )
            .into()),
        }
    }
}

/// `alpha`: one value or a non-empty list of them (each checked to be a number after).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
struct OneOrMore(Vec<Value>);

impl TryFrom<Value> for OneOrMore {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        match v {
            Value::Array(items) if !items.is_empty() => Ok(OneOrMore(items)),
            Value::Number(_) => Ok(OneOrMore(vec![v])),
            v => Err(format!("must be a number or a list of numbers, not {v}").into()),
        }
    }
}

/// `key`'s count, `default` when left out, within `min..=max`.
fn count(key: &str, given: Option<Whole>, default: u64, min: u64, max: u64) -> Result<u64, String> {
    let v = given.map_or(default, |w| w.0);
    if !(min..=max).contains(&v) {
        return Err(format!("{key} = {v} must be between {min} and {max}"));
    }
    Ok(v)
}

/// The methods named, each once, in the order given.
fn methods(items: &[Value]) -> Result<Vec<Method>, String> {
    let mut out = Vec::new();
    for item in items {
        let name = item.as_str().unwrap_or_default();
        let Some((_, m)) = METHODS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "methods: unknown method {item}; the methods are {}",
                METHODS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        if !out.contains(m) {
            out.push(*m);
        }
    }
    Ok(out)
}

/// The L2 penalties, each a non-negative number.
fn alphas(items: &[Value]) -> Result<Vec<f64>, String> {
    let alphas: Vec<f64> = items
        .iter()
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| format!("alpha: {v} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    if let Some(a) = alphas.iter().find(|a| !(a.is_finite() && **a >= 0.0)) {
        return Err(format!("alpha {a} must be a non-negative number"));
    }
    Ok(alphas)
}

impl BaselineParams {
    /// Reads the kind's own params from a stage's params (the protocol's are left to
    /// `pipeline_tasks`), with the defaults; the error names the param.
    pub fn parse(p: &Map<String, Value>) -> Result<BaselineParams, ParamError> {
        Self::parse_text(p).map_err(ParamError)
    }

    /// [`Self::parse`] with the message as a `String` (the helpers it calls build them so).
    fn parse_text(p: &Map<String, Value>) -> Result<BaselineParams, String> {
        let g: Given = pipeline_params::from_own_keys(p).map_err(String::from)?;
        Ok(BaselineParams {
            methods: g.methods.map(|l| methods(&l.0)).transpose()?,
            ngram_max: count("ngram_max", g.ngram_max, 2, 1, 4)? as usize,
            max_features: count("max_features", g.max_features, 4096, 1, 1 << 16)? as usize,
            min_df: count("min_df", g.min_df, 2, 1, 1_000_000)? as usize,
            alphas: alphas(&g.alpha.map_or_else(|| vec![Value::from(10.0)], |a| a.0))?,
            max_iterations: count("max_iterations", g.max_iterations, 100, 1, 100_000)?,
        })
    }

    /// The methods to run for a sentence-pair task with these labels.
    pub fn methods_for(&self, labels: &[String]) -> Vec<Method> {
        self.methods_for_kind(labels, crate::kinds::PAIRS)
    }

    /// The methods to run for a task of `kind` with these labels: the given ones, or every
    /// method that suits the kind (pairs: all the pair methods, `hypothesis_lr` for NLI only;
    /// single texts: `majority`, `ngram_lr`; tagging: `majority_tag`, `lexicon`; span
    /// extraction: `sliding_window`, `best_sentence`; C3: `choice_overlap`,
    /// `majority_position`).
    pub fn methods_for_kind(&self, labels: &[String], kind: TaskKind) -> Vec<Method> {
        if let Some(m) = &self.methods {
            return m.clone();
        }
        let nli = labels.iter().any(|l| l == "entailment");
        crate::kinds::of(kind).default_methods(nli)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<BaselineParams, String> {
        BaselineParams::parse(v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn defaults_and_methods_by_task() {
        let p = parse(json!({})).unwrap();
        assert_eq!((p.ngram_max, p.max_features, p.min_df), (2, 4096, 2));
        assert_eq!(p.alphas, vec![10.0]);
        let nli: Vec<String> = ["contradiction", "entailment", "neutral"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(p.methods_for(&nli).contains(&Method::HypothesisLr));
        let binary = vec!["0".to_string(), "1".to_string()];
        assert!(!p.methods_for(&binary).contains(&Method::HypothesisLr));
        let p =
            parse(json!({"methods": ["majority", "ngram_lr", "majority"], "alpha": 0.5})).unwrap();
        assert_eq!(p.methods, Some(vec![Method::Majority, Method::NgramLr]));
        assert_eq!(p.alphas, vec![0.5]);
    }

    #[test]
    fn bad_params_are_clear_errors() {
        let err = |v: Value| parse(v).unwrap_err();
        let e = err(json!({"methods": ["majority", "bow"]}));
        assert!(
            e.contains("unknown method \"bow\"") && e.contains("ngram_lr"),
            "{e}"
        );
        assert!(err(json!({"methods": []})).contains("non-empty list"));
        assert!(err(json!({"ngram_max": 9})).contains("between 1 and 4"));
        assert!(err(json!({"max_features": "many"})).contains("whole number"));
        assert!(err(json!({"alpha": [1, "x"]})).contains("not a number"));
        assert!(err(json!({"alpha": -1})).contains("non-negative"));
    }

    #[test]
    fn the_messages_are_whole_sentences_that_name_the_param() {
        let err = |v: Value| parse(v).unwrap_err();
        assert_eq!(
            err(json!({"max_features": "many"})),
            "max_features must be a whole number, not \"many\""
        );
        assert_eq!(
            err(json!({"methods": []})),
            "methods must be a non-empty list such as [majority, overlap, ngram_lr], not []"
        );
        assert_eq!(
            err(json!({"alpha": true})),
            "alpha must be a number or a list of numbers, not true"
        );
        assert_eq!(
            err(json!({"alpha": [1, "x"]})),
            "alpha: \"x\" is not a number"
        );
        assert_eq!(
            err(json!({"min_df": 0})),
            "min_df = 0 must be between 1 and 1000000"
        );
        // null is "left out": the defaults.
        let p = parse(json!({"alpha": null, "methods": null, "ngram_max": null})).unwrap();
        assert_eq!((p.alphas, p.methods, p.ngram_max), (vec![10.0], None, 2));
    }
}
