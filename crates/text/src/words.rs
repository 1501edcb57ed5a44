//! jieba word boundaries.
//!
//! Whole-word masking masks every token of a word together; for Chinese the words come from
//! jieba (jieba-rs with its default dictionary). [`WordSegmenter::word_starts`] gives the byte
//! offsets where words start, which the mask stage lines up with token start offsets.
//!
//! HMM is on, as in albert_zh's `create_pretraining_data.py` (`jieba.lcut`, whose default is
//! HMM on): it glues runs of characters the dictionary does not know (mostly names) into
//! words, so that they are masked whole too. In jieba-rs 0.11 it costs little: 28–40 MB/s
//! with it against 29–41 MB/s without on People's Daily, one thread (`jieba_throughput`
//! below; the spread is the load of the machine), far above the ~10 MB/s the mask stage needs.

use jieba_rs::Jieba;

/// A jieba segmenter with the default dictionary, built once and shared (it is `Sync`).
pub struct WordSegmenter {
    jieba: Jieba,
    hmm: bool,
}

impl Default for WordSegmenter {
    fn default() -> Self {
        Self::new()
    }
}

impl WordSegmenter {
    /// Loads jieba's default dictionary (a fraction of a second); HMM on (see the module doc).
    pub fn new() -> WordSegmenter {
        WordSegmenter {
            jieba: Jieba::new(),
            hmm: true,
        }
    }

    /// The same with HMM off: dictionary words only.
    pub fn without_hmm() -> WordSegmenter {
        WordSegmenter {
            jieba: Jieba::new(),
            hmm: false,
        }
    }

    /// Appends to `out` the byte offsets in `text` where jieba's words start (the first is 0
    /// for a non-empty text). Whitespace and punctuation come out as words of their own.
    pub fn word_starts(&self, text: &str, out: &mut Vec<u32>) {
        let tokens = self.jieba.cut(text, self.hmm);
        out.extend(tokens.iter().map(|t| t.byte_start as u32));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn seg() -> &'static WordSegmenter {
        static S: OnceLock<WordSegmenter> = OnceLock::new();
        S.get_or_init(WordSegmenter::new)
    }

    fn words(text: &str) -> Vec<&str> {
        let mut starts = Vec::new();
        seg().word_starts(text, &mut starts);
        let mut ends: Vec<usize> = starts.iter().skip(1).map(|&s| s as usize).collect();
        ends.push(text.len());
        starts
            .iter()
            .zip(ends)
            .map(|(&s, e)| &text[s as usize..e])
            .collect()
    }

    #[test]
    fn segments_chinese() {
        assert_eq!(words("我们中出了一个叛徒")[..1], ["我们"]);
        assert_eq!(words("南京市长江大桥"), ["南京市", "长江大桥"]);
        assert_eq!(words(""), Vec::<&str>::new());
        let w = words("今天天气很好，ALBERT 模型1024维。");
        assert_eq!(w.concat(), "今天天气很好，ALBERT 模型1024维。");
        assert!(w.contains(&"ALBERT") && w.contains(&"模型"), "{w:?}");
    }

    #[test]
    fn starts_are_char_boundaries_and_increasing() {
        let text = "北京大学生前来应聘。Hello, world! 𠀀字";
        let mut starts = Vec::new();
        seg().word_starts(text, &mut starts);
        assert_eq!(starts[0], 0);
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert!(starts.iter().all(|&s| text.is_char_boundary(s as usize)));
    }

    /// Throughput on ~2 MB of real Chinese text (prints MB/s; skipped without the data).
    /// `cargo test --release -p pipeline-text jieba_throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn jieba_throughput() {
        let Some(p) = crate::vocab::shared_data_file(
            "corpus/peoples_daily_199801/peoples_daily_199801_raw.txt",
        ) else {
            return;
        };
        let bytes = std::fs::read(p).unwrap();
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(2 << 20)]).into_owned();
        for s in [WordSegmenter::without_hmm(), WordSegmenter::new()] {
            let mut out = Vec::new();
            let mut secs = f64::MAX;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                for line in text.lines() {
                    out.clear();
                    s.word_starts(line, &mut out);
                }
                secs = secs.min(t.elapsed().as_secs_f64());
            }
            eprintln!(
                "jieba hmm={}: {:.1} MB/s",
                s.hmm,
                text.len() as f64 / secs / 1e6
            );
        }
    }
}
