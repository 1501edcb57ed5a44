//! Seeded splits by group: the protocols of the reading-comprehension sets, whose examples
//! share texts. CMRC 2018's questions come in articles (several questions on one context) and
//! C3's in documents, so a split by question would put one context on both sides and measure
//! memory of the passage; [`split_by_group`] splits whole groups instead.
//!
//! It reuses [`crate::split`]'s frozen machinery (ChaCha8, the `Dev` stream, its Fisher–Yates
//! and bounded draws), unstratified (every group in one class), so the same `split_seed` gives
//! the same split on every machine and in every future build. The fractions count groups, not
//! questions: "10 % by article" is 10 % of the articles.

use crate::split::{Stream, stratified_choice};

/// Salt of the seed of the second draw (which held-out groups are test rather than dev), so
/// that it is not the first draw's stream again. Part of the frozen protocol.
const TEST_SALT: u64 = 0x7465_7374_5f73_706c; // "test_spl"

/// A partition of the items (questions) into train, dev and test, each ascending (file order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSplit {
    /// The items of the groups left for training.
    pub train: Vec<usize>,
    /// The items of the groups held out for model selection.
    pub dev: Vec<usize>,
    /// Empty when `test_fraction` is 0 (the test set comes from elsewhere).
    pub test: Vec<usize>,
    /// Groups on each side: `[train, dev, test]`.
    pub groups: [usize; 3],
}

impl GroupSplit {
    /// What metrics.json records of the split: how it was drawn and its sizes, not the indices.
    pub fn summary(&self, split_seed: u64, dev_fraction: f64, test_fraction: f64) -> SplitSummary {
        SplitSummary {
            by: "group",
            split_seed,
            dev_fraction,
            test_fraction,
            groups: self.groups,
            items: [self.train.len(), self.dev.len(), self.test.len()],
        }
    }
}

/// The record of a [`GroupSplit`] (sizes as `[train, dev, test]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SplitSummary {
    /// `group`: by article (CMRC 2018) or document (C3), never by question.
    pub by: &'static str,
    /// The seed of the draws (the protocol's `split_seed`).
    pub split_seed: u64,
    /// The share of groups held out for dev.
    pub dev_fraction: f64,
    /// The share of groups held out as the evaluation set `test` (0: none).
    pub test_fraction: f64,
    /// Groups on each side.
    pub groups: [usize; 3],
    /// Items (questions) on each side.
    pub items: [usize; 3],
}

/// Fractions that cannot make a split of these groups.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GroupSplitError {
    /// A fraction out of range: each must be in [0, 1), dev above 0, their sum below 1.
    #[error(
        "dev fraction {dev} and test fraction {test} must be in [0, 1) with dev > 0 and dev + \
         test < 1"
    )]
    Fractions {
        /// The dev fraction asked for.
        dev: f64,
        /// The test fraction asked for.
        test: f64,
    },
    /// Valid fractions, but not enough groups to leave at least one on every side that needs
    /// one (train always, dev always, test when its fraction is above 0).
    #[error(
        "{groups} group(s) (articles or documents) are too few for dev fraction {dev} and test \
         fraction {test}: each side needs at least one"
    )]
    TooFewGroups {
        /// Distinct groups among the items.
        groups: usize,
        /// The dev fraction asked for.
        dev: f64,
        /// The test fraction asked for.
        test: f64,
    },
}

/// Splits items by group: `groups[i]` is item `i`'s group (any number; equal numbers are one
/// group). `round(dev_fraction · G)` of the G groups go to dev and `round(test_fraction · G)`
/// to test (each at least 1 when its fraction is above 0), the rest to train; seeded.
pub fn split_by_group(
    groups: &[usize],
    dev_fraction: f64,
    test_fraction: f64,
    seed: u64,
) -> Result<GroupSplit, GroupSplitError> {
    let ok = |f: f64| (0.0..1.0).contains(&f);
    if !(ok(dev_fraction) && ok(test_fraction) && dev_fraction > 0.0)
        || dev_fraction + test_fraction >= 1.0
    {
        return Err(GroupSplitError::Fractions {
            dev: dev_fraction,
            test: test_fraction,
        });
    }
    let (group_of, g) = compact(groups);
    let count = |f: f64| {
        if f > 0.0 {
            ((f * g as f64).round() as usize).max(1)
        } else {
            0
        }
    };
    let (n_dev, n_test) = (count(dev_fraction), count(test_fraction));
    if n_dev + n_test >= g {
        return Err(GroupSplitError::TooFewGroups {
            groups: g,
            dev: dev_fraction,
            test: test_fraction,
        });
    }
    // Draw 1: the held-out groups (dev ∪ test). Draw 2: which of them are test.
    let (held, _) = stratified_choice(&vec![0; g], n_dev + n_test, seed, Stream::Dev);
    let (test_of_held, _) =
        stratified_choice(&vec![0; held.len()], n_test, seed ^ TEST_SALT, Stream::Dev);
    // 0 train, 1 dev, 2 test, per compacted group.
    let mut side = vec![0u8; g];
    for &h in &held {
        side[h] = 1;
    }
    for &t in &test_of_held {
        side[held[t]] = 2;
    }
    let mut split = GroupSplit {
        train: Vec::new(),
        dev: Vec::new(),
        test: Vec::new(),
        groups: [g - n_dev - n_test, n_dev, n_test],
    };
    for (item, &grp) in group_of.iter().enumerate() {
        match side[grp] {
            0 => split.train.push(item),
            1 => split.dev.push(item),
            _ => split.test.push(item),
        }
    }
    Ok(split)
}

/// Renumbers groups 0.. in order of first appearance; returns (per item, number of groups).
fn compact(groups: &[usize]) -> (Vec<usize>, usize) {
    let mut ids = std::collections::HashMap::new();
    let per_item = groups
        .iter()
        .map(|&grp| {
            let next = ids.len();
            *ids.entry(grp).or_insert(next)
        })
        .collect();
    (per_item, ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_fractions_and_too_few_groups_are_errors() {
        let g = [0, 0, 1, 2];
        assert!(matches!(
            split_by_group(&g, 0.0, 0.1, 1),
            Err(GroupSplitError::Fractions { .. })
        ));
        assert!(split_by_group(&g, 0.5, 0.5, 1).is_err());
        assert!(split_by_group(&g, f64::NAN, 0.1, 1).is_err());
        assert!(matches!(
            split_by_group(&g, 0.5, 0.4, 1),
            Err(GroupSplitError::TooFewGroups { groups: 3, .. })
        ));
        assert!(split_by_group(&[7], 0.1, 0.0, 1).is_err());
    }

    #[test]
    fn the_split_is_frozen() {
        // A change here changes the CMRC 2018 and C3 protocols of every recorded run.
        let groups: Vec<usize> = (0..20).map(|i| i / 2).collect();
        let s = split_by_group(&groups, 0.2, 0.2, 12345).unwrap();
        assert_eq!(s.groups, [6, 2, 2]);
        assert_eq!(s.dev, FROZEN_DEV);
        let summary = serde_json::to_value(s.summary(12345, 0.2, 0.2)).unwrap();
        assert_eq!(summary["groups"], serde_json::json!([6, 2, 2]));
        assert_eq!(summary["items"], serde_json::json!([12, 4, 4]));
        assert_eq!(s.test, FROZEN_TEST);
    }
    const FROZEN_DEV: [usize; 4] = [2, 3, 18, 19];
    const FROZEN_TEST: [usize; 4] = [8, 9, 10, 11];

    proptest! {
        #[test]
        fn a_seeded_partition_that_never_splits_a_group(
            groups in prop::collection::vec(0usize..40, 3..300),
            dev in 0.01f64..0.4,
            test in prop_oneof![Just(0.0), 0.01f64..0.4],
            seed in any::<u64>(),
        ) {
            let Ok(s) = split_by_group(&groups, dev, test, seed) else {
                return Ok(());
            };
            let mut all: Vec<usize> = s.train.iter().chain(&s.dev).chain(&s.test).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..groups.len()).collect::<Vec<_>>());
            for side in [&s.train, &s.dev, &s.test] {
                prop_assert!(side.windows(2).all(|w| w[0] < w[1]));
            }
            let of = |side: &Vec<usize>| side.iter().map(|&i| groups[i]).collect::<std::collections::BTreeSet<_>>();
            let (tr, dv, te) = (of(&s.train), of(&s.dev), of(&s.test));
            prop_assert!(tr.is_disjoint(&dv) && tr.is_disjoint(&te) && dv.is_disjoint(&te));
            prop_assert_eq!([tr.len(), dv.len(), te.len()], s.groups);
            prop_assert!(!s.train.is_empty() && !s.dev.is_empty());
            prop_assert_eq!(s.test.is_empty(), test == 0.0);
            prop_assert_eq!(split_by_group(&groups, dev, test, seed).unwrap(), s);
        }
    }
}
