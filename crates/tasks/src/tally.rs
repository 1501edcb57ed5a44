//! The reading-comprehension readers' count of what they dropped or changed: per cause, with
//! the first few question ids and details as samples. Shared by the SQuAD and C3 readers
//! (`squad::Tally`), serialised into metrics.json with each file's report.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Counts by cause, with the first few (id, detail) samples; serialisable for metrics.json.
/// Shared by the SQuAD and C3 readers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tally<I: Ord> {
    /// Questions (or answers) counted, all causes together.
    pub total: usize,
    /// The count of each cause that occurred; they add up to `total`.
    pub by_cause: BTreeMap<I, usize>,
    /// The first [`Tally::MAX_SAMPLES`]: `(cause, question id, detail)`.
    pub samples: Vec<(I, String, String)>,
}

impl<I: Ord> Default for Tally<I> {
    fn default() -> Self {
        Tally {
            total: 0,
            by_cause: BTreeMap::new(),
            samples: Vec::new(),
        }
    }
}

impl<I: Ord + Copy + fmt::Display> Tally<I> {
    /// How many samples are kept with their id and detail.
    pub const MAX_SAMPLES: usize = 20;

    /// Counts one `cause` for the question `id`, and keeps `detail` as a sample while fewer
    /// than [`Tally::MAX_SAMPLES`] are kept.
    pub fn record(&mut self, cause: I, id: &str, detail: impl Into<String>) {
        self.total += 1;
        *self.by_cause.entry(cause).or_default() += 1;
        if self.samples.len() < Self::MAX_SAMPLES {
            self.samples.push((cause, id.to_string(), detail.into()));
        }
    }

    /// How many times `cause` was counted (0 when never).
    pub fn count(&self, cause: I) -> usize {
        self.by_cause.get(&cause).copied().unwrap_or(0)
    }

    /// `empty_context 2 (e.g. DEV_3_QUERY_1: empty context), missing_field 1 (…)`, or `none`.
    pub fn summary(&self) -> String {
        if self.by_cause.is_empty() {
            return "none".into();
        }
        let line = |(c, n): (&I, &usize)| match self.samples.iter().find(|s| s.0 == *c) {
            Some((_, id, detail)) => format!("{c} {n} (e.g. {id}: {detail})"),
            None => format!("{c} {n}"),
        };
        self.by_cause
            .iter()
            .map(line)
            .collect::<Vec<_>>()
            .join(", ")
    }
}
