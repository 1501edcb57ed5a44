//! The corpus's no-context floor under its own masking: the masked-LM accuracy and loss of a
//! predictor that knows only how often each token is a masked label and copies the token an
//! input shows, never looking at the other positions.
//!
//! Why it is a floor: an encoder that has not yet learned to use context can still learn two
//! things from the labels alone, through the MLM head's bias and the tied embeddings — the
//! unigram distribution `q` of the masked labels, and that a visible token at a masked position
//! is the label itself with probability `a` (the share of kept among the visible positions).
//! The best it can then do is this predictor: at a `[MASK]` input, `q` (accuracy `max q` of the
//! labels, loss `−ln q(label)`); at a visible token `t` (a random or a kept corruption),
//! `p(y) = a·[y = t] + (1 − a)·q(y)`, guessing `t` when `a ≥ max q`, else `argmax q`. A
//! pretraining run whose eval accuracy sits at this floor has learned nothing from context
//! yet; one well above it has.
//!
//! `q` and `a` are fitted on the training split (what a model trained on the shards can know),
//! both smoothed so that every loss is finite: `q` add-one over the vocabulary (the argmax, and
//! so the accuracy, is unchanged by it; with few masked positions against a large vocabulary
//! the loss comes out somewhat higher than the labels' entropy), `a` as
//! `(kept + 1) / (visible + 2)`. The floor is then measured on each split's masked positions: in-sample on the
//! training split, held out on the eval split (the one to compare a run's eval with). The
//! guessing rule is the one above; the exact Bayes rule would guess `t` whenever
//! `a + (1 − a)·q(t) ≥ (1 − a)·max q`, which it matches whenever `a ≥ max q` (masking keeps
//! half its visible positions, and no single token is near half of all labels).
//!
//! A position's corruption is read off the instance as the pretrain stage reads it off a
//! batch: the input is `[MASK]`; else it equals the label (kept, a random draw of the label
//! itself included); else random. Memory is three vocabulary-sized counts per split.

use pipeline_shards::Instance;
use serde::Serialize;

use crate::report::round4;

/// Which corruption a masked position's input shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// The input is `[MASK]`.
    Mask,
    /// The input is another token than the label.
    Random,
    /// The input is the label itself.
    Kept,
}

impl Corruption {
    /// The corruption of a masked position whose input is `input` and label `label`.
    pub fn of(input: u32, label: u32, mask_id: u32) -> Corruption {
        if input == mask_id {
            Corruption::Mask
        } else if input == label {
            Corruption::Kept
        } else {
            Corruption::Random
        }
    }
}

/// How often each label was masked, by corruption, over one split's instances.
#[derive(Debug, Clone, Default)]
pub struct LabelCounts {
    mask: Vec<u64>,
    random: Vec<u64>,
    kept: Vec<u64>,
}

impl LabelCounts {
    /// Counts the masked positions of `inst`.
    pub fn add_instance(&mut self, inst: &Instance, mask_id: u32) {
        for (&pos, &label) in inst.masked_positions.iter().zip(&inst.masked_ids) {
            // Positions come from the masker itself; a stray one is not counted rather than
            // guessed at.
            if let Some(&input) = inst.input_ids.get(pos as usize) {
                self.add(label, Corruption::of(input, label, mask_id));
            }
        }
    }

    /// Counts one masked position.
    pub fn add(&mut self, label: u32, corruption: Corruption) {
        let counts = match corruption {
            Corruption::Mask => &mut self.mask,
            Corruption::Random => &mut self.random,
            Corruption::Kept => &mut self.kept,
        };
        let i = label as usize;
        if counts.len() <= i {
            counts.resize(i + 1, 0);
        }
        counts[i] += 1;
    }

    /// Positions counted as `[MASK]`, random and kept.
    pub fn totals(&self) -> [u64; 3] {
        [&self.mask, &self.random, &self.kept].map(|c| c.iter().sum())
    }

    /// How often `label` was masked, whatever the corruption.
    fn of_label(&self, label: usize) -> u64 {
        [&self.mask, &self.random, &self.kept]
            .iter()
            .map(|c| c.get(label).copied().unwrap_or(0))
            .sum()
    }
}

/// A split's no-context floor and the shares of its corruptions, as `metrics.json` writes it
/// (`train.no_context_floor`, `eval.no_context_floor`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    /// Share of the masked positions the no-context predictor gets right.
    pub mlm_accuracy: f64,
    /// Its mean cross-entropy over them, in nats.
    pub mlm_loss: f64,
    /// The masked positions measured.
    pub predictions: u64,
    /// Share of them whose input is `[MASK]`.
    pub mask_share: f64,
    /// Share whose input is another token than the label.
    pub random_share: f64,
    /// Share whose input is the label.
    pub kept_share: f64,
    /// `a`: the (smoothed, training-split) share of kept among the visible positions.
    pub kept_among_visible: f64,
    /// Whether a visible token is guessed as the label (`a ≥ max q`), else `argmax q`.
    pub copies_visible: bool,
}

/// The no-context predictor, fitted on the training split's counts.
#[derive(Debug, Clone)]
pub struct NoContext {
    /// `q(y)`, add-one smoothed over the vocabulary.
    q: Vec<f64>,
    /// `argmax q` (the lowest id among ties).
    top: usize,
    /// `a`, smoothed.
    a: f64,
    /// `q` of an id past the vocabulary (as of one never masked in training).
    unseen: f64,
}

impl NoContext {
    /// The predictor of the labels in `train`, over a vocabulary of `vocab_size` ids (more if
    /// a label lies past it).
    pub fn fit(train: &LabelCounts, vocab_size: usize) -> NoContext {
        let size = [&train.mask, &train.random, &train.kept]
            .iter()
            .map(|c| c.len())
            .fold(vocab_size.max(1), usize::max);
        let total: u64 = train.totals().iter().sum();
        let denominator = (total + size as u64) as f64;
        let q: Vec<f64> = (0..size)
            .map(|y| (train.of_label(y) + 1) as f64 / denominator)
            .collect();
        let top = (0..size).fold(0, |best, y| if q[y] > q[best] { y } else { best });
        let [_, random, kept] = train.totals();
        let a = (kept + 1) as f64 / (kept + random + 2) as f64;
        NoContext {
            q,
            top,
            a,
            unseen: 1.0 / denominator,
        }
    }

    /// The floor on the masked positions of `split`; `None` when it has none.
    pub fn floor(&self, split: &LabelCounts) -> Option<Floor> {
        let [masks, randoms, kepts] = split.totals();
        let n = masks + randoms + kepts;
        if n == 0 {
            return None;
        }
        let q = |y: usize| self.q.get(y).copied().unwrap_or(self.unseen);
        let a = self.a;
        let copies_visible = a >= self.q[self.top];
        let at = |c: &Vec<u64>, y: usize| c.get(y).copied().unwrap_or(0);
        let visible_correct = if copies_visible {
            kepts
        } else {
            at(&split.random, self.top) + at(&split.kept, self.top)
        };
        let correct = at(&split.mask, self.top) + visible_correct;
        let nll = |counts: &Vec<u64>, p: &dyn Fn(usize) -> f64| -> f64 {
            counts
                .iter()
                .enumerate()
                .filter(|(_, k)| **k > 0)
                .map(|(y, &k)| -(k as f64) * p(y).ln())
                .sum()
        };
        let loss = nll(&split.mask, &q)
            + nll(&split.random, &|y| (1.0 - a) * q(y))
            + nll(&split.kept, &|y| a + (1.0 - a) * q(y));
        let share = |k: u64| round4(k as f64 / n as f64);
        Some(Floor {
            mlm_accuracy: round4(correct as f64 / n as f64),
            mlm_loss: round4(loss / n as f64),
            predictions: n,
            mask_share: share(masks),
            random_share: share(randoms),
            kept_share: share(kepts),
            kept_among_visible: round4(a),
            copies_visible,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: u32 = 3;

    /// A vocabulary of 6 ids; training labels: id 4 six times ([MASK] 4, random 1, kept 1),
    /// id 5 twice ([MASK] 1, kept 1).
    fn train() -> LabelCounts {
        let mut c = LabelCounts::default();
        for (label, corruption, times) in [
            (4, Corruption::Mask, 4),
            (4, Corruption::Random, 1),
            (4, Corruption::Kept, 1),
            (5, Corruption::Mask, 1),
            (5, Corruption::Kept, 1),
        ] {
            for _ in 0..times {
                c.add(label, corruption);
            }
        }
        c
    }

    #[test]
    fn the_floor_of_a_small_case_is_the_one_computed_by_hand() {
        // q = (count + 1) / (8 + 6): q(4) = 7/14 = 0.5, q(5) = 3/14, every other id 1/14.
        // a = (kept 2 + 1) / (visible 3 + 2) = 0.6 ≥ max q = 0.5: visible tokens are copied.
        let model = NoContext::fit(&train(), 6);
        let f = model.floor(&train()).unwrap();
        // Right: the 4 [MASK]ed 4s (argmax q) and the 2 kept positions: 6 of 8.
        assert_eq!(f.mlm_accuracy, 0.75);
        // Loss: [MASK]: 4·−ln 0.5 + 1·−ln(3/14); random 4: −ln(0.4·0.5);
        // kept 4: −ln(0.6 + 0.4·0.5); kept 5: −ln(0.6 + 0.4·3/14).
        let by_hand = (4.0 * -(0.5f64).ln()
            - (3.0f64 / 14.0).ln()
            - (0.4f64 * 0.5).ln()
            - (0.8f64).ln()
            - (0.6 + 0.4 * 3.0 / 14.0f64).ln())
            / 8.0;
        assert_eq!(f.mlm_loss, round4(by_hand));
        assert_eq!(
            (f.predictions, f.mask_share, f.random_share, f.kept_share),
            (8, 0.625, 0.125, 0.25)
        );
        assert_eq!((f.kept_among_visible, f.copies_visible), (0.6, true));
    }

    #[test]
    fn when_a_label_is_more_likely_than_a_kept_token_it_is_guessed_everywhere() {
        // Training: id 4 masked 20 times, all [MASK]; no visible position: a = 1/2.
        let mut train = LabelCounts::default();
        for _ in 0..20 {
            train.add(4, Corruption::Mask);
        }
        // q(4) = 21/(20 + 2) > a = 0.5 over a vocabulary of 2 ids.
        let model = NoContext::fit(&train, 2);
        let mut eval = LabelCounts::default();
        eval.add(4, Corruption::Random);
        eval.add(4, Corruption::Kept);
        eval.add(1, Corruption::Kept);
        eval.add(1, Corruption::Mask);
        let f = model.floor(&eval).unwrap();
        // argmax q = 4 is guessed at every position: right at the random 4 and the kept 4.
        assert!(!f.copies_visible);
        assert_eq!(f.mlm_accuracy, 0.5);
        // An id the training split never masked still has a finite loss.
        assert!(f.mlm_loss.is_finite() && f.mlm_loss > 0.0);
        assert!(model.floor(&LabelCounts::default()).is_none());
    }

    #[test]
    fn corruptions_are_read_off_the_instance_as_pretrain_reads_them() {
        let inst = Instance {
            input_ids: vec![1, MASK, 7, 9, 2],
            token_type_ids: vec![0; 5],
            masked_positions: vec![1, 2, 3],
            masked_ids: vec![8, 7, 10],
            sentence_order_label: 0,
        };
        let mut c = LabelCounts::default();
        c.add_instance(&inst, MASK);
        assert_eq!(c.totals(), [1, 1, 1]);
        assert_eq!((c.mask[8], c.kept[7], c.random[10]), (1, 1, 1));
    }
}
