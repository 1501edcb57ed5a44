//! The kinds seen from the stage: [`AnyKind`], what every typed [`Kind`] is once its types are
//! erased. The stage, the training loop and `pipeline predict` hold a `&'static dyn AnyKind`
//! and pass the values every kind shares ([`Examples`], [`Outputs`], [`Decoded`]); here, and
//! only here, they are turned into the kind's own types, and a value of another kind is a
//! [`KindError`] naming both, never an empty list or a skipped row.

use std::fmt;

use crate::{Examples, KindExample, TaskKind, WrongKind};

use super::{Decoded, Head, InputSpec, Kind, Limits, Outputs, Run, Scores};
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction};

/// A value of one kind given where another kind's was expected: a caller paired a kind with a
/// protocol, a model or predictions of another.
#[derive(Debug, Clone, PartialEq)]
pub enum KindError {
    /// The split's examples are of another kind.
    Examples {
        /// The split's name.
        split: String,
        /// The kinds asked for and found.
        wrong: WrongKind,
    },
    /// The head's outputs, the predictions or a split's features have another kind's shape.
    Shape {
        /// The split's name.
        split: String,
        /// What was converted: `head outputs`, `predictions`, `features`, `targets`.
        what: &'static str,
        /// The shape the kind takes (`class rows`, `tag positions`, `spans`, …).
        expected: &'static str,
        /// The shape given.
        found: &'static str,
    },
    /// Not one value per example (or per feature).
    Count {
        /// The split's name.
        split: String,
        /// What was counted against the examples (or features).
        what: &'static str,
        /// How many there should be.
        expected: usize,
        /// How many there are.
        found: usize,
    },
}

impl fmt::Display for KindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindError::Examples { split, wrong } => write!(f, "{split}: {wrong}"),
            KindError::Shape {
                split,
                what,
                expected,
                found,
            } => write!(
                f,
                "{split}: {what} are {found} where {expected} were expected"
            ),
            KindError::Count {
                split,
                what,
                expected,
                found,
            } => write!(f, "{split}: {found} {what} for {expected}"),
        }
    }
}

impl std::error::Error for KindError {}

/// The examples of split `split`, as `E`s.
fn examples_of<'a, E: KindExample>(
    examples: &'a Examples,
    split: &str,
) -> Result<&'a [E], KindError> {
    examples.of().map_err(|wrong| KindError::Examples {
        split: split.to_string(),
        wrong,
    })
}

/// Checks that `found` values were given for `expected` examples (or features) of `split`.
pub(crate) fn check_count(
    split: &str,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), KindError> {
    if expected == found {
        return Ok(());
    }
    Err(KindError::Count {
        split: split.to_string(),
        what,
        expected,
        found,
    })
}

/// `kind`'s predictions, one per example of `split`, from the head's `outputs` on its
/// features: what `pipeline predict` uses, which knows the kind it asks for.
pub fn decode_outputs<K: Kind>(
    kind: &K,
    split: &EncodedSplit,
    outputs: Outputs,
) -> Result<Vec<K::Prediction>, KindError> {
    let features = split.features::<K::Features>()?;
    let outputs = K::Output::from_outputs(outputs, &split.name)?;
    check_count(&split.name, "head outputs", split.rows.len(), outputs.len())?;
    let predictions = kind.decode(features, outputs);
    check_count(
        &split.name,
        "predictions",
        split.examples,
        predictions.len(),
    )?;
    Ok(predictions)
}

/// What a head gives for one feature, taken out of the shared [`Outputs`].
pub trait FeatureOutput: Sized + Send {
    /// The shape's name in errors.
    const SHAPE: &'static str;

    /// One value per feature, if `outputs` are of this shape.
    fn from_outputs(outputs: Outputs, split: &str) -> Result<Vec<Self>, KindError>;
}

fn outputs_shape(o: &Outputs) -> &'static str {
    match o {
        Outputs::Rows(_) => <Vec<f32> as FeatureOutput>::SHAPE,
        Outputs::Positions(_) => <Vec<Vec<f32>> as FeatureOutput>::SHAPE,
        Outputs::Spans(_) => <(Vec<f32>, Vec<f32>) as FeatureOutput>::SHAPE,
    }
}

/// `$ty` is the value of one feature in `Outputs::$variant`.
macro_rules! feature_output {
    ($($variant:ident => $ty:ty, $shape:literal;)*) => {$(
        impl FeatureOutput for $ty {
            const SHAPE: &'static str = $shape;

            fn from_outputs(outputs: Outputs, split: &str) -> Result<Vec<Self>, KindError> {
                match outputs {
                    Outputs::$variant(v) => Ok(v),
                    other => Err(KindError::Shape {
                        split: split.to_string(),
                        what: "head outputs",
                        expected: <Self as FeatureOutput>::SHAPE,
                        found: outputs_shape(&other),
                    }),
                }
            }
        }
    )*};
}

feature_output! {
    Rows => Vec<f32>, "class rows";
    Positions => Vec<Vec<f32>>, "tag positions";
    Spans => (Vec<f32>, Vec<f32>), "start and end logits";
}

/// A task kind as the stage holds it (`&'static dyn AnyKind`, from [`super::of`]): a typed
/// [`Kind`] whose examples, outputs and predictions are taken from, and given back as, the
/// values every kind shares.
pub trait AnyKind: Sync {
    /// The kind's name in metrics.json.
    fn kind(&self) -> TaskKind;

    /// The head, given the protocol's labels.
    fn head(&self, labels: &[String]) -> Head;

    /// Examples to features.
    fn encode(
        &self,
        name: &str,
        examples: &Examples,
        encoder: &Encoder,
    ) -> Result<EncodedSplit, KindError>;

    /// The head's outputs on `split`'s features to one prediction per example.
    fn decode(&self, split: &EncodedSplit, outputs: Outputs) -> Result<Decoded, KindError>;

    /// The scores of `decoded` against `split`'s gold.
    fn score(
        &self,
        split: &EncodedSplit,
        decoded: &Decoded,
        labels: &[String],
    ) -> anyhow::Result<Scores>;

    /// The columns of `predictions.tsv` (without the line end).
    fn prediction_header(&self, labels: &[String]) -> String;

    /// The rows of set `name` in `predictions.tsv`.
    fn prediction_rows(
        &self,
        name: &str,
        examples: &Examples,
        decoded: &Decoded,
        labels: &[String],
        out: &mut String,
    ) -> Result<(), KindError>;

    /// What a request to a model of this kind carries, and the prediction it gets.
    fn input(&self) -> InputSpec;

    /// The cost of `input` in tokens, or why it is too long ([`Kind::input_cost`]).
    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError>;

    /// The predictions of `run`'s model for `inputs`, in order ([`Kind::predict_inputs`]).
    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>>;

    /// Whether a saved model is of this kind ([`Kind::recognises`]).
    fn recognises(&self, architecture: &str, named: Option<TaskKind>) -> bool;

    /// Whether its contexts are cut into span windows ([`Kind::span_windows`]).
    fn span_windows(&self) -> bool;
}

impl<K: Kind> AnyKind for K {
    fn kind(&self) -> TaskKind {
        K::KIND
    }

    fn head(&self, labels: &[String]) -> Head {
        Kind::head(self, labels)
    }

    fn encode(
        &self,
        name: &str,
        examples: &Examples,
        encoder: &Encoder,
    ) -> Result<EncodedSplit, KindError> {
        Ok(Kind::encode(
            self,
            name,
            examples_of(examples, name)?,
            encoder,
        ))
    }

    fn decode(&self, split: &EncodedSplit, outputs: Outputs) -> Result<Decoded, KindError> {
        decode_outputs(self, split, outputs).map(Decoded::new)
    }

    fn score(
        &self,
        split: &EncodedSplit,
        decoded: &Decoded,
        labels: &[String],
    ) -> anyhow::Result<Scores> {
        let predictions = decoded.get::<K::Prediction>(&split.name)?;
        check_count(
            &split.name,
            "predictions",
            split.examples,
            predictions.len(),
        )?;
        Kind::score(self, split, split.features()?, predictions, labels)
    }

    fn prediction_header(&self, labels: &[String]) -> String {
        Kind::prediction_header(self, labels)
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &Examples,
        decoded: &Decoded,
        labels: &[String],
        out: &mut String,
    ) -> Result<(), KindError> {
        let examples = examples_of(examples, name)?;
        let predictions = decoded.get::<K::Prediction>(name)?;
        check_count(name, "predictions", examples.len(), predictions.len())?;
        Kind::prediction_rows(self, name, examples, predictions, labels, out);
        Ok(())
    }

    fn input(&self) -> InputSpec {
        Kind::input(self)
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        Kind::input_cost(self, input, limits)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        Kind::predict_inputs(self, inputs, run)
    }

    fn recognises(&self, architecture: &str, named: Option<TaskKind>) -> bool {
        Kind::recognises(self, architecture, named)
    }

    fn span_windows(&self) -> bool {
        Kind::span_windows(self)
    }
}

#[cfg(test)]
mod tests {
    use crate::PairExample;

    use super::*;
    use crate::kinds::encode::tests::encoder;
    use crate::kinds::{pair::Pairs, tagging::Tagging};

    fn pairs(n: usize) -> Examples {
        Examples::Pair(
            (0..n)
                .map(|i| PairExample {
                    line: i + 1,
                    text_a: "汤".into(),
                    text_b: "喝".into(),
                    label: i % 2,
                    file: 0,
                })
                .collect(),
        )
    }

    #[test]
    fn another_kinds_examples_outputs_or_predictions_are_errors() {
        let e = encoder(16);
        let err = AnyKind::encode(&Tagging, "dev", &pairs(2), &e).err();
        assert_eq!(
            err.map(|e| e.to_string()).unwrap_or_default(),
            "dev: the examples are of a pair task, not of a tagging task"
        );
        let split = AnyKind::encode(&Pairs, "dev", &pairs(2), &e).unwrap();
        let positions = Outputs::Positions(vec![Vec::new(); 2]);
        let err = AnyKind::decode(&Pairs, &split, positions).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dev: head outputs are tag positions where class rows were expected"
        );
        let positions = Outputs::Positions(vec![Vec::new(); 2]);
        let err = AnyKind::decode(&Tagging, &split, positions).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("dev: features are another kind's where "),
            "{err}"
        );
        let err = AnyKind::score(&Pairs, &split, &Decoded::new(vec![vec![0usize]; 2]), &[]);
        assert!(
            err.unwrap_err()
                .to_string()
                .starts_with("dev: predictions are another kind's where ")
        );
        let mut out = String::new();
        let one = Decoded::new(vec![vec![0.5f32, 0.5]]);
        let labels = ["0".to_string(), "1".to_string()];
        let err = AnyKind::prediction_rows(&Pairs, "dev", &pairs(2), &one, &labels, &mut out);
        assert_eq!(err.unwrap_err().to_string(), "dev: 1 predictions for 2");
        assert!(out.is_empty(), "no row is written for a mismatch");
    }

    #[test]
    fn a_kinds_own_values_go_through() {
        let e = encoder(16);
        let split = AnyKind::encode(&Pairs, "dev", &pairs(2), &e).unwrap();
        let probs = vec![vec![0.9, 0.1], vec![0.2, 0.8]];
        let decoded = AnyKind::decode(&Pairs, &split, Outputs::Rows(probs.clone())).unwrap();
        assert_eq!(decoded.get::<Vec<f32>>("dev").unwrap(), &probs[..]);
        let labels = ["0".to_string(), "1".to_string()];
        let s = AnyKind::score(&Pairs, &split, &decoded, &labels).unwrap();
        assert_eq!(s.selection(), 1.0);
        let mut out = String::new();
        AnyKind::prediction_rows(&Pairs, "dev", &pairs(2), &decoded, &labels, &mut out).unwrap();
        assert_eq!(out.lines().count(), 2);
    }
}

#[cfg(test)]
mod registration_tests {
    use crate::TaskKind;

    use super::*;
    use crate::kinds::encode::tests::encoder;
    use crate::kinds::features::Targets;

    /// Every registered kind is the kind it is registered for, and the gold its encoding
    /// makes is what its head trains on (a kind that broke this would fail its first step).
    #[test]
    fn every_kind_is_registered_as_itself_and_its_targets_fit_its_head() {
        let e = encoder(16);
        let labels = ["O".to_string(), "B-PER".to_string()];
        for kind in [
            TaskKind::Pair,
            TaskKind::Choice,
            TaskKind::Single,
            TaskKind::Tagging,
            TaskKind::Span,
            TaskKind::ReadingChoice,
        ] {
            let k = crate::kinds::of(kind);
            assert_eq!(k.kind(), kind);
            let split = k.encode("dev", &Examples::empty(kind), &e).unwrap();
            let fits = matches!(
                (k.head(&labels), &split.targets),
                (Head::Classes(_) | Head::Choice, Targets::Classes(_))
                    | (Head::Tags(_), Targets::Tags(_))
                    | (Head::Span, Targets::Spans(_))
            );
            assert!(fits, "{kind}: its head does not train on its targets");
        }
    }
}
