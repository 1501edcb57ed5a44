//! The baselines of each task kind, registered in one place: which runner serves it (the
//! classification baselines on sentence pairs, the tagging ones, the reading-comprehension
//! ones), which methods it gets by default, whether its texts are single texts, and why the
//! pair baselines refuse it when they do. The rest of the stage asks [`of`] rather than
//! matching on a kind; the `match` here is exhaustive, so a new kind does not build until it
//! says what its baselines are.

use pipeline_tasks::TaskKind;

use crate::params::{METHODS, Method};

/// Which of the stage's runners serves a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// The classification baselines, on sentence pairs (single texts as pairs).
    Classes,
    /// The tagging baselines ([`crate::tagging`]).
    Tagging,
    /// The reading-comprehension baselines ([`crate::comprehension`]).
    Reading,
}

/// What the baselines are for one task kind.
#[derive(Debug, Clone, Copy)]
pub struct KindBaselines {
    /// The runner that serves it.
    pub runner: Runner,
    /// Whether a method is run by default (`nli`: the task has an `entailment` label, the one
    /// `hypothesis_lr` is for).
    pub suits: fn(Method, bool) -> bool,
    /// Its texts are single texts: the pair baselines see each as `text_b` with an empty
    /// `text_a`, and the methods that need two texts are not run.
    pub single: bool,
    /// Why the pair baselines cannot take its examples, completing "task X is …".
    pub refusal: &'static str,
}

/// The pair methods (and `hypothesis_lr` for NLI).
fn pair_methods(m: Method, nli: bool) -> bool {
    matches!(
        m,
        Method::Majority | Method::Overlap | Method::Length | Method::NgramLr
    ) || (nli && m == Method::HypothesisLr)
}

/// The sentence-pair kind, whose methods are the baselines' first.
pub const PAIRS: TaskKind = TaskKind::Pair;

/// Why a task whose examples are not pairs has no pair baseline.
const NOT_PAIRS: &str = "a multiple-choice task: the baselines take sentence-pair tasks (lcqmc, \
                         afqmc, xnli, …) only";

/// The baselines of `kind`: the one place a kind is named in this stage.
pub fn of(kind: TaskKind) -> KindBaselines {
    let classes = |suits: fn(Method, bool) -> bool, single, refusal| KindBaselines {
        runner: Runner::Classes,
        suits,
        single,
        refusal,
    };
    let other = |runner, suits: fn(Method, bool) -> bool| KindBaselines {
        runner,
        suits,
        single: false,
        refusal: NOT_PAIRS,
    };
    match kind {
        TaskKind::Pair | TaskKind::Choice => classes(pair_methods, false, NOT_PAIRS),
        TaskKind::Single => classes(
            |m, _| matches!(m, Method::Majority | Method::NgramLr),
            true,
            NOT_PAIRS,
        ),
        // No baseline method predicts a score.
        TaskKind::PairRegression => classes(
            |_, _| false,
            false,
            "a regression task: no baseline method predicts a score",
        ),
        TaskKind::Tagging => other(Runner::Tagging, |m, _| {
            matches!(m, Method::MajorityTag | Method::Lexicon)
        }),
        TaskKind::Span => other(Runner::Reading, |m, _| {
            matches!(m, Method::SlidingWindow | Method::BestSentence)
        }),
        TaskKind::ReadingChoice => other(Runner::Reading, |m, _| {
            matches!(m, Method::ChoiceOverlap | Method::MajorityPosition)
        }),
    }
}

impl KindBaselines {
    /// The methods run by default, in [`METHODS`]' order.
    pub fn default_methods(&self, nli: bool) -> Vec<Method> {
        METHODS
            .iter()
            .map(|(_, m)| *m)
            .filter(|&m| (self.suits)(m, nli))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(kind: TaskKind) -> String {
        let methods = of(kind).default_methods(false);
        let names: Vec<&str> = methods.iter().map(|m| m.name()).collect();
        names.join(", ")
    }

    /// The messages and defaults read as they did when each place matched on the kind.
    #[test]
    fn each_kind_gets_its_runner_methods_and_words() {
        assert_eq!(names(TaskKind::Span), "sliding_window, best_sentence");
        assert_eq!(
            names(TaskKind::ReadingChoice),
            "choice_overlap, majority_position"
        );
        assert_eq!(names(TaskKind::Tagging), "majority_tag, lexicon");
        assert_eq!(names(TaskKind::Single), "majority, ngram_lr");
        assert_eq!(names(PAIRS), "majority, overlap, length, ngram_lr");
        assert!(
            of(PAIRS)
                .default_methods(true)
                .contains(&Method::HypothesisLr)
        );
        assert_eq!(names(TaskKind::PairRegression), "");
        let refusal = |k| {
            format!(
                "task t is {}; leave the baseline stage out for it",
                of(k).refusal
            )
        };
        assert_eq!(
            refusal(TaskKind::PairRegression),
            "task t is a regression task: no baseline method predicts a score; leave the \
             baseline stage out for it"
        );
        assert_eq!(
            refusal(TaskKind::Choice),
            "task t is a multiple-choice task: the baselines take sentence-pair tasks (lcqmc, \
             afqmc, xnli, …) only; leave the baseline stage out for it"
        );
        assert!(of(TaskKind::Single).single && !of(PAIRS).single);
        assert_eq!(of(TaskKind::Tagging).runner, Runner::Tagging);
        assert_eq!(of(TaskKind::Span).runner, Runner::Reading);
        assert_eq!(of(TaskKind::ReadingChoice).runner, Runner::Reading);
        assert_eq!(of(TaskKind::Choice).runner, Runner::Classes);
    }
}
