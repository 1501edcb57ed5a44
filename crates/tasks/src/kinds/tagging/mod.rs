//! Token classification (NER): a tag per character, `AlbertForTokenClassification`; the whole
//! kind: its formats ([`mod@format`]: MSRA NER's rows, CoNLL's columns, the tag set), its example
//! and reader ([`read`]), and here how it is fine-tuned and served.
//!
//! Alignment: every character (a tagging unit) is tokenized on its own; its tag goes to its
//! first word piece and the other pieces get −100, ignored by the loss as transformers does
//! (bert-base-chinese has most characters as one piece, but not every character is in the
//! vocabulary and Latin or digit runs split). A character the tokenizer drops gets `[UNK]`,
//! so every character has a position and the prediction has the input's length.
//!
//! Windows: a sentence whose pieces do not fit `max_seq_length - 2` is cut at character
//! boundaries into windows that overlap by half; each character is decided by the window in
//! which it has the most context on both sides (as BERT's SQuAD code picks a token's "max
//! context" span), so every character is labelled exactly once. Training uses every window.
//!
//! Metrics: characters are the classes' examples (accuracy, macro-F1 over tags, the confusion
//! of tags), and entities are scored as seqeval's default mode does
//! ([`crate::entities`]); the best epoch is chosen by entity F1.

pub mod format;
pub mod read;

use std::fmt::Write as _;

pub use format::{MSRA_TAGS, TagFormat, TagLayout, check_tags, tags_from_label2id};
pub use read::{TagExample, TagFile, read_tag_file, read_tags};

use crate::kinds::argmax;
use crate::kinds::encode::{Encoded, Encoder};
use crate::kinds::features::{EncodeNotes, EncodedSplit, Targets, Window};
use crate::kinds::io::{
    FoundEntity, Input, InputError, Prediction, PredictionShape, TagPrediction,
};
use crate::kinds::{Head, InputSpec, Kind, Limits, Run, Scores, clean_tsv};
use crate::{TaskKind, entities, evaluate};

/// The loss ignores a position with this label (transformers' convention).
pub const IGNORE: i64 = -100;

/// The tagging kind.
pub struct Tagging;

/// The windows of a sentence whose characters have `pieces[u]` word pieces each, at most
/// `budget` pieces a window: `(start, end)` character ranges covering every character, each
/// next window starting half-way through the previous one.
pub fn windows(pieces: &[usize], budget: usize) -> Vec<(usize, usize)> {
    let n = pieces.len();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let (mut end, mut used) = (start, 0);
        // At least one character a window, even one with more pieces than fit (cut later).
        while end < n && (end == start || used + pieces[end] <= budget) {
            used += pieces[end];
            end += 1;
        }
        out.push((start, end));
        if end == n {
            break;
        }
        start = (start + (end - start).div_ceil(2)).max(start + 1);
    }
    out
}

/// For each character, the window that decides it: the one in which it has the most context
/// (the smaller of its distances to the window's ends), the first on a tie.
pub fn owners(windows: &[(usize, usize)], n: usize) -> Vec<usize> {
    (0..n)
        .map(|u| {
            let context = |&(s, e): &(usize, usize)| (u - s).min(e - 1 - u);
            let mut best = 0;
            for (w, win) in windows.iter().enumerate() {
                if win.0 <= u
                    && u < win.1
                    && (!contains(&windows[best], u) || context(win) > context(&windows[best]))
                {
                    best = w;
                }
            }
            best
        })
        .collect()
}

fn contains(&(s, e): &(usize, usize), u: usize) -> bool {
    s <= u && u < e
}

/// What decoding a tagging split needs: [`Tagging`]'s features.
#[derive(Debug, Clone, PartialEq)]
pub struct TaggingSplit {
    /// One per feature.
    pub windows: Vec<Window>,
    /// One per example: the gold tag id of each of its characters; empty where there is no
    /// gold (in `predict`).
    pub gold_tags: Vec<Vec<usize>>,
    /// One per example: its characters, what the windows' outputs are merged back onto.
    pub lengths: Vec<usize>,
}

/// One sentence's features: for each window its row, the tag of each position (−100 where
/// ignored) and the characters it decides.
pub fn encode_sentence(
    chars: &[String],
    tags: Option<&[usize]>,
    example: usize,
    encoder: &Encoder,
) -> Vec<(Encoded, Vec<i64>, Window)> {
    let budget = encoder.max_seq_length - 2;
    let mut pieces: Vec<Vec<u32>> = chars.iter().map(|c| encoder.pieces(c)).collect();
    for p in &mut pieces {
        p.truncate(budget);
    }
    let lengths: Vec<usize> = pieces.iter().map(Vec::len).collect();
    let spans = windows(&lengths, budget);
    let owner = owners(&spans, chars.len());
    spans
        .iter()
        .enumerate()
        .map(|(w, &(start, end))| {
            let mut ids = Vec::new();
            let mut gold = vec![IGNORE];
            let mut decides = vec![None];
            for u in start..end {
                for (k, &id) in pieces[u].iter().enumerate() {
                    ids.push(id);
                    let first = k == 0;
                    gold.push(match (first, tags) {
                        (true, Some(t)) => t[u] as i64,
                        _ => IGNORE,
                    });
                    decides.push((first && owner[u] == w).then_some(u));
                }
            }
            gold.push(IGNORE);
            decides.push(None);
            let row = encoder.wrap(&ids);
            (row, gold, Window { example, decides })
        })
        .collect()
}

/// The tag of every character of each example from the per-position probabilities of its
/// windows.
pub fn merge(tagging: &TaggingSplit, positions: &[Vec<Vec<f32>>]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = tagging.lengths.iter().map(|&n| vec![0; n]).collect();
    for (window, probs) in tagging.windows.iter().zip(positions) {
        for (j, unit) in window.decides.iter().enumerate() {
            if let (Some(u), Some(p)) = (unit, probs.get(j)) {
                out[window.example][*u] = argmax(p);
            }
        }
    }
    out
}

/// Features of tagged sentences (`tags` `None` when there is no gold, as in `predict`).
pub fn encode_sentences<'a>(
    name: &str,
    sentences: impl Iterator<Item = (&'a [String], Option<&'a [usize]>)>,
    encoder: &Encoder,
) -> EncodedSplit {
    let (mut rows, mut targets, mut windows, mut gold_tags, mut lengths) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (chars, tags)) in sentences.enumerate() {
        for (row, gold, window) in encode_sentence(chars, tags, i, encoder) {
            rows.push(vec![row]);
            targets.push(gold);
            windows.push(window);
        }
        gold_tags.push(tags.map(<[usize]>::to_vec).unwrap_or_default());
        lengths.push(chars.len());
    }
    EncodedSplit {
        name: name.into(),
        examples: gold_tags.len(),
        rows,
        targets: Targets::Tags(targets),
        decoding: Box::new(TaggingSplit {
            windows,
            gold_tags,
            lengths,
        }),
        notes: EncodeNotes::default(),
    }
}

impl Kind for Tagging {
    const KIND: TaskKind = TaskKind::Tagging;
    type Example = TagExample;
    type Features = TaggingSplit;
    type Output = Vec<Vec<f32>>;
    type Prediction = Vec<usize>;

    fn head(&self, labels: &[String]) -> Head {
        Head::Tags(labels.len())
    }

    fn encode(&self, name: &str, examples: &[TagExample], encoder: &Encoder) -> EncodedSplit {
        encode_sentences(
            name,
            examples.iter().map(|e| (&e.chars[..], Some(&e.tags[..]))),
            encoder,
        )
    }

    fn decode(&self, tagging: &TaggingSplit, outputs: Vec<Vec<Vec<f32>>>) -> Vec<Vec<usize>> {
        merge(tagging, &outputs)
    }

    fn score(
        &self,
        split: &EncodedSplit,
        tagging: &TaggingSplit,
        predicted: &[Vec<usize>],
        labels: &[String],
    ) -> anyhow::Result<Scores> {
        let gold_tags = &tagging.gold_tags;
        let flat = |v: &[Vec<usize>]| v.iter().flatten().copied().collect::<Vec<_>>();
        let classes = evaluate(&flat(gold_tags), &flat(predicted), labels)
            .map_err(|e| anyhow::anyhow!("{} metrics: {e}", split.name))?;
        let names = |v: &[Vec<usize>]| -> Vec<Vec<&str>> {
            v.iter()
                .map(|s| s.iter().map(|&t| labels[t].as_str()).collect())
                .collect()
        };
        let entities = entities::score(&names(gold_tags), &names(predicted))
            .map_err(|e| anyhow::anyhow!("{} entity metrics: {e}", split.name))?;
        Ok(Scores::classes(classes, Some(entities)))
    }

    fn prediction_header(&self, _labels: &[String]) -> String {
        "set\tline\ttext\tgold\tpredicted".into()
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[TagExample],
        predicted: &[Vec<usize>],
        labels: &[String],
        out: &mut String,
    ) {
        let tags = |ids: &[usize]| -> String {
            ids.iter()
                .map(|&t| labels[t].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        for (e, p) in examples.iter().zip(predicted) {
            let _ = writeln!(
                out,
                "{name}\t{}\t{}\t{}\t{}",
                e.line,
                clean_tsv(&e.chars.join(" ")),
                tags(&e.tags),
                tags(p)
            );
        }
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["text"],
            usage: "`text`",
            model: "a tagger",
            predicts: PredictionShape::Tags,
        }
    }

    /// A text is cut into windows, so only its characters are bounded.
    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        Ok(limits.text("text", &input.text)? + 2)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        tag_inputs(inputs, run)
    }

    fn recognises(&self, architecture: &str, _named: Option<TaskKind>) -> bool {
        architecture == "AlbertForTokenClassification"
    }
}

/// Tags of each text's characters (whitespace gets `O`, the first tag) and the entities they
/// make.
fn tag_inputs(inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
    let texts: Vec<String> = inputs
        .into_iter()
        .map(|x| x.text.unwrap_or_default())
        .collect();
    let units: Vec<(Vec<String>, Vec<usize>)> = texts.iter().map(|t| units(t)).collect();
    let sentences = units.iter().map(|(u, _)| (&u[..], None));
    let split = encode_sentences("predict", sentences, run.model.encoder());
    let tags = run.predict(&Tagging, &split, run.batch_size)?;
    let labels = &run.model.labels();
    let name = |t: usize| labels.get(t).cloned().unwrap_or_default();
    Ok(texts
        .into_iter()
        .zip(&units)
        .zip(&tags)
        .map(|((text, (_, at)), ids)| {
            let chars: Vec<char> = text.chars().collect();
            let mut full = vec![name(0); chars.len()];
            for (&pos, &t) in at.iter().zip(ids) {
                full[pos] = name(t);
            }
            let found = entities::entities(&full)
                .into_iter()
                .map(|e| FoundEntity {
                    text: chars[e.start..e.end].iter().collect(),
                    kind: e.kind,
                    start: e.start,
                    end: e.end,
                })
                .collect();
            Prediction::Tags(TagPrediction {
                text,
                tags: full,
                entities: found,
            })
        })
        .collect())
}

/// The characters of a raw text as tagging units (each `char`), with the whitespace ones left
/// out (they get no tag: the model never saw them) and their positions kept, so that entity
/// spans index the text as given.
pub fn units(text: &str) -> (Vec<String>, Vec<usize>) {
    text.chars()
        .enumerate()
        .filter(|(_, c)| !c.is_whitespace())
        .map(|(i, c)| (c.to_string(), i))
        .unzip()
}

/// An example's sentence, for predictions made outside a protocol.
pub fn sentence(text: &str) -> TagExample {
    let (chars, _) = units(text);
    TagExample {
        tags: vec![0; chars.len()],
        chars,
        file: 0,
        line: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_every_character_once_as_owner() {
        for n in [1usize, 5, 17, 60] {
            for budget in [1usize, 4, 7, 126] {
                let pieces: Vec<usize> = (0..n).map(|i| 1 + (i % 3 == 0) as usize).collect();
                let w = windows(&pieces, budget);
                assert_eq!(w[0].0, 0);
                assert_eq!(w.last().unwrap().1, n);
                for &(s, e) in &w {
                    let used: usize = pieces[s..e].iter().sum();
                    assert!(
                        e > s && (used <= budget || e - s == 1),
                        "{n} {budget} {w:?}"
                    );
                }
                let own = owners(&w, n);
                for (u, &o) in own.iter().enumerate() {
                    assert!(contains(&w[o], u), "{u} not in its owner");
                }
            }
        }
        // The middle of an overlap is decided by the window that centres it.
        let w = windows(&[1; 10], 6);
        assert_eq!(w, [(0, 6), (3, 9), (6, 10)]);
        assert_eq!(owners(&w, 10), [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]);
    }

    #[test]
    fn units_keep_positions() {
        let (u, at) = units("张 三在A");
        assert_eq!(u, ["张", "三", "在", "A"]);
        assert_eq!(at, [0, 2, 3, 4]);
    }
}
