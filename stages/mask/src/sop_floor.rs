//! The sentence-order floor of the corpus's pairs: the SOP accuracy of a rule that reads
//! nothing but whether each segment starts or ends with sentence-final punctuation.
//!
//! Why it is a floor: cutting and trimming leave marks at the segments' edges. A segment that
//! ends where the document's text ends is likelier to end with `。` than one cut in the middle
//! of a sentence, and which of A and B that is depends on the order. A model can learn those
//! four bits without reading a word, so its eval SOP accuracy says what it learned of the text
//! only above this rule's. On experiment.yaml's corpus (2026-11-30, one masking pass) the rule
//! orders 54.8 % of the eval pairs (54.5 % unpacked); pairs trimmed at their outer ends only
//! would have given it 66.4 % (`pairs` says why they are not).
//!
//! The rule is fitted on the training split (for each of the 16 edge patterns, the label most
//! of its pairs have; 0 on a tie or for a pattern never seen) and scored on each split, as the
//! MLM floor is: in-sample on the training split, held out on the eval split (the same rule
//! fitted with pyarrow from the written shards gave the same 54.8 % and 54.5 %). Memory is 32
//! counts per split.

use pipeline_shards::Instance;
use serde::Serialize;

use crate::report::round4;

/// The sentence-final marks whose presence at a segment's edge the rule reads.
pub const SENTENCE_FINAL: [&str; 11] =
    ["。", "！", "？", "!", "?", "…", "；", ";", "」", "”", "\""];

/// How many pairs of each edge pattern had each order label, over one split's instances.
#[derive(Debug, Clone, Default)]
pub struct EdgeCounts {
    /// `[pattern][label]`: pattern bit 0 A's last token is a mark, bit 1 B's last, bit 2 A's
    /// first, bit 3 B's first.
    by_pattern: [[u64; 2]; 16],
}

/// The floor on one split: the rule's accuracy and the pairs it was scored on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SopFloor {
    /// Share of the pairs whose order the rule gets right.
    pub sop_accuracy: f64,
    /// Pairs scored.
    pub pairs: u64,
}

impl EdgeCounts {
    /// Counts the pair of `inst`, reading its edges' original tokens (a masked edge is read
    /// from its label). `final_ids` is sorted; an instance without two non-empty segments is
    /// not counted.
    pub fn add_instance(&mut self, inst: &Instance, sep: u32, final_ids: &[u32]) {
        let ids = &inst.input_ids;
        let Some(first_sep) = ids.iter().position(|&t| t == sep) else {
            return;
        };
        if first_sep < 2 || first_sep + 3 > ids.len() {
            return;
        }
        let original = |p: usize| match inst.masked_positions.binary_search(&(p as u32)) {
            Ok(k) => inst.masked_ids[k],
            Err(_) => ids[p],
        };
        let is_mark = |p: usize| final_ids.binary_search(&original(p)).is_ok();
        let edges = [first_sep - 1, ids.len() - 2, 1, first_sep + 1];
        let pattern = edges
            .iter()
            .enumerate()
            .map(|(bit, &p)| usize::from(is_mark(p)) << bit)
            .sum::<usize>();
        let label = usize::from(inst.sentence_order_label == 1);
        self.by_pattern[pattern][label] += 1;
    }

    /// The rule fitted on these counts: each pattern's majority label.
    pub fn fit(&self) -> [u8; 16] {
        self.by_pattern.map(|[zero, one]| u8::from(one > zero))
    }

    /// `rule`'s accuracy on these counts; `None` without pairs.
    pub fn floor(&self, rule: &[u8; 16]) -> Option<SopFloor> {
        let pairs: u64 = self.by_pattern.iter().flatten().sum();
        let right: u64 = self
            .by_pattern
            .iter()
            .zip(rule)
            .map(|(counts, &label)| counts[label as usize])
            .sum();
        (pairs > 0).then(|| SopFloor {
            sop_accuracy: round4(right as f64 / pairs as f64),
            pairs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEP: u32 = 102;
    const STOP: u32 = 7;

    /// `[CLS] a [SEP] b [SEP]` with order label `label`.
    fn pair(a: &[u32], b: &[u32], label: u8) -> Instance {
        let mut input_ids = vec![101];
        input_ids.extend_from_slice(a);
        input_ids.push(SEP);
        input_ids.extend_from_slice(b);
        input_ids.push(SEP);
        Instance {
            token_type_ids: vec![0; input_ids.len()],
            input_ids,
            masked_positions: vec![],
            masked_ids: vec![],
            sentence_order_label: label,
        }
    }

    #[test]
    fn the_rule_learns_which_segment_ends_with_a_stop() {
        // Training: where only the second segment ends with a stop, the pair was swapped 3
        // times in 4; where only the first does, it never was.
        let mut train = EdgeCounts::default();
        for label in [1, 1, 1, 0] {
            train.add_instance(&pair(&[5, 6], &[8, STOP], label), SEP, &[STOP]);
        }
        train.add_instance(&pair(&[5, STOP], &[8, 9], 0), SEP, &[STOP]);
        let rule = train.fit();
        assert_eq!(rule[0b0010], 1);
        assert_eq!(rule[0b0001], 0);
        assert_eq!(rule[0b0000], 0, "an unseen pattern guesses 0");
        let f = train.floor(&rule).unwrap();
        assert_eq!((f.sop_accuracy, f.pairs), (0.8, 5));
        // Held out: two pairs the rule orders right, one it does not.
        let mut eval = EdgeCounts::default();
        eval.add_instance(&pair(&[5, 6], &[8, STOP], 1), SEP, &[STOP]);
        eval.add_instance(&pair(&[5, STOP], &[8, 9], 0), SEP, &[STOP]);
        eval.add_instance(&pair(&[5, STOP], &[8, 9], 1), SEP, &[STOP]);
        assert_eq!(eval.floor(&rule).unwrap().sop_accuracy, 0.6667);
        assert_eq!(EdgeCounts::default().floor(&rule), None);
    }

    #[test]
    fn a_masked_edge_is_read_from_its_label() {
        let mut masked = pair(&[5, 6], &[8, 103], 1);
        masked.masked_positions = vec![5];
        masked.masked_ids = vec![STOP];
        let mut counts = EdgeCounts::default();
        counts.add_instance(&masked, SEP, &[STOP]);
        assert_eq!(counts.by_pattern[0b0010], [0, 1]);
        // A pair without a segment is not counted.
        counts.add_instance(&pair(&[], &[8, 9], 0), SEP, &[STOP]);
        assert_eq!(counts.by_pattern.iter().flatten().sum::<u64>(), 1);
    }
}
