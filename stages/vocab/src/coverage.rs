//! How well a vocabulary covers a corpus: the `[UNK]` rate of its tokens and the characters that
//! map to `[UNK]` on their own.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;

use pipeline_text::train::for_each_block;
use pipeline_text::wordpiece::TokenizeWithOffsets;
use rayon::prelude::*;
use serde::Serialize;

/// Characters reported in `top_unk_chars`.
pub const TOP_UNK: usize = 20;

/// Coverage counts (deterministic: integer sums, ties broken by character).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Coverage {
    /// Corpus bytes tokenised (the whole corpus, or its first `coverage_sample_mb`).
    pub sample_bytes: u64,
    /// Lines tokenised.
    pub lines: u64,
    /// Tokens produced.
    pub tokens: u64,
    /// Of which `[UNK]`.
    pub unk_tokens: u64,
    /// unk_tokens / tokens.
    pub unk_rate: f64,
    /// Characters other than whitespace.
    pub chars: u64,
    /// Occurrences of characters that are `[UNK]` on their own.
    pub unk_chars: u64,
    /// unk_chars / chars.
    pub unk_char_rate: f64,
    /// Distinct characters other than whitespace.
    pub distinct_chars: u64,
    /// Of which `[UNK]` on their own.
    pub distinct_unk_chars: u64,
    /// The most frequent `[UNK]` characters, most frequent first.
    pub top_unk_chars: Vec<UnkChar>,
}

/// A character that is `[UNK]` on its own, and how often it occurs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnkChar {
    /// The character.
    pub char: String,
    /// Its occurrences.
    pub count: u64,
}

#[derive(Default)]
struct Partial {
    lines: u64,
    tokens: u64,
    unk_tokens: u64,
    chars: HashMap<char, u64>,
}

impl Partial {
    fn merge(mut self, other: Partial) -> Partial {
        self.lines += other.lines;
        self.tokens += other.tokens;
        self.unk_tokens += other.unk_tokens;
        for (c, n) in other.chars {
            *self.chars.entry(c).or_default() += n;
        }
        self
    }
}

/// Tokenises the corpus files (in order, up to `limit` bytes if given, cut at a line) and
/// counts tokens, `[UNK]`s and characters. `progress` gets the bytes of each block.
pub fn coverage(
    files: &[PathBuf],
    tok: &dyn TokenizeWithOffsets,
    unk_id: u32,
    limit: Option<u64>,
    progress: &dyn Fn(u64),
) -> anyhow::Result<Coverage> {
    let (total, bytes) = count(files, tok, unk_id, limit, progress)?;
    let mut chars: Vec<(char, u64)> = total.chars.into_iter().collect();
    chars.sort_unstable();
    let unk: Vec<(char, u64)> = chars
        .par_iter()
        .filter(|(c, _)| {
            let (mut ids, mut starts) = (Vec::new(), Vec::new());
            let mut buf = [0u8; 4];
            tok.encode_with_offsets(c.encode_utf8(&mut buf), &mut ids, &mut starts);
            ids == [unk_id]
        })
        .copied()
        .collect();
    let n_chars: u64 = chars.iter().map(|(_, n)| n).sum();
    let n_unk_chars: u64 = unk.iter().map(|(_, n)| n).sum();
    let mut top = unk.clone();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(TOP_UNK);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Ok(Coverage {
        sample_bytes: bytes,
        lines: total.lines,
        tokens: total.tokens,
        unk_tokens: total.unk_tokens,
        unk_rate: ratio(total.unk_tokens, total.tokens),
        chars: n_chars,
        unk_chars: n_unk_chars,
        unk_char_rate: ratio(n_unk_chars, n_chars),
        distinct_chars: chars.len() as u64,
        distinct_unk_chars: unk.len() as u64,
        top_unk_chars: top
            .into_iter()
            .map(|(c, count)| UnkChar {
                char: c.to_string(),
                count,
            })
            .collect(),
    })
}

/// The counts over the files (up to `limit` bytes, cut at a line), and the bytes read.
fn count(
    files: &[PathBuf],
    tok: &dyn TokenizeWithOffsets,
    unk_id: u32,
    limit: Option<u64>,
    progress: &dyn Fn(u64),
) -> anyhow::Result<(Partial, u64)> {
    let mut total = Partial::default();
    let mut bytes = 0u64;
    for path in files {
        let mut stop = false;
        for_each_block(path, |block| {
            let mut block = block;
            if let Some(limit) = limit {
                let left = limit.saturating_sub(bytes) as usize;
                if block.len() >= left {
                    // Cut at the last line break within the budget.
                    let cut = block.as_bytes()[..left.min(block.len())]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1);
                    block = &block[..cut];
                    stop = true;
                }
            }
            bytes += block.len() as u64;
            progress(block.len() as u64);
            let lines: Vec<&str> = block.lines().collect();
            let part = lines
                .par_chunks(2048)
                .map(|chunk| count_lines(chunk, tok, unk_id))
                .reduce(Partial::default, Partial::merge);
            total = std::mem::take(&mut total).merge(part);
            if stop {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        if stop {
            break;
        }
    }
    Ok((total, bytes))
}

/// The counts of a few lines (one rayon task).
fn count_lines(lines: &[&str], tok: &dyn TokenizeWithOffsets, unk_id: u32) -> Partial {
    let mut p = Partial::default();
    let (mut ids, mut starts) = (Vec::new(), Vec::new());
    for line in lines {
        ids.clear();
        starts.clear();
        tok.encode_with_offsets(line, &mut ids, &mut starts);
        p.lines += 1;
        p.tokens += ids.len() as u64;
        p.unk_tokens += ids.iter().filter(|&&i| i == unk_id).count() as u64;
        for c in line.chars().filter(|c| !c.is_whitespace()) {
            *p.chars.entry(c).or_default() += 1;
        }
    }
    p
}
