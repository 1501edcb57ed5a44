//! Sentence splitting for Chinese (and mixed Chinese/Western) paragraphs.
//!
//! A sentence ends after a run of end punctuation — Chinese `。！？；…` (and the half-width
//! `｡`), always; ASCII `! ? ; .` only when what follows is the end, whitespace or a non-ASCII
//! character, so that `3.5`, `www.example.com` and `a.php?id=1` are not split while `好!真的`
//! and `end. Next` are. A `.` after a digit or a lone letter, and a `。` after a sentence that
//! is only a number, mark list items (`1.房间很大 2.服务好`, `1。…`), not ends. Closing quotes
//! and brackets right after the punctuation (`” ’ 」 』 ） 》 】 〕 〉 ) ]`, and `"` / `'`
//! when a quote of that kind is open in the sentence) stay with the sentence they close:
//! `他说：“走吧。”` is one sentence.
//!
//! Sentences longer than `max_chars` characters are cut at a comma (`，、,：:`) once a piece is
//! `target_chars` long, else at a space in the second half of the piece, else hard at
//! `max_chars` (backing off so as not to cut inside an ASCII word).
//!
//! Sentences are returned as slices of the input (`&str`), trimmed of whitespace and never
//! empty: the paragraph is already an owned, normalised `String`, and borrowing from it costs
//! no allocation per sentence. Joining them (whitespace aside) gives back the input.

/// Splits paragraphs into sentences, with a bound on their length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentenceSplitter {
    max_chars: usize,
    target_chars: usize,
}

impl Default for SentenceSplitter {
    /// No bound on length.
    fn default() -> Self {
        SentenceSplitter::new(0)
    }
}

impl SentenceSplitter {
    /// `max_chars` = 0 means no bound; else long sentences are cut at commas once a piece
    /// reaches half of it.
    pub fn new(max_chars: usize) -> Self {
        Self::with_target(max_chars, (max_chars / 2).max(1))
    }

    /// Cut long sentences at the first comma at or past `target_chars` characters.
    pub fn with_target(max_chars: usize, target_chars: usize) -> Self {
        SentenceSplitter {
            max_chars,
            target_chars: target_chars.clamp(1, max_chars.max(1)),
        }
    }

    /// The longest sentence it emits, in characters.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// The sentences of `text`.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut out = Vec::new();
        self.split_into(text, &mut out);
        out
    }

    /// Appends the sentences of `text` to `out`; returns how many sentences were cut because
    /// they were longer than `max_chars`.
    pub fn split_into<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) -> usize {
        let mut cut = 0;
        let mut start = 0;
        let mut dq_open = false;
        let mut sq_open = false;
        let mut it = text.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            match c {
                '"' => dq_open = !dq_open,
                '\'' => sq_open = !sq_open,
                _ => {}
            }
            if !is_terminator(c) {
                continue;
            }
            let mut always = is_cjk_terminator(c);
            let mut end = i + c.len_utf8();
            let mut single = c == '.' || c == '。';
            // The whole run of end punctuation: `？！`, `……`, `...`.
            while let Some(&(j, d)) = it.peek() {
                if !is_terminator(d) {
                    break;
                }
                always |= is_cjk_terminator(d);
                single = false;
                end = j + d.len_utf8();
                it.next();
            }
            // `1.`, `2.`, `a.` number list items (`1.房间很大 2.服务好`), and `3.5` / `2.0版`
            // is no end either.
            if single && list_marker(&text[start..i], c) {
                continue;
            }
            // Closing quotes and brackets belong to the sentence they close.
            while let Some(&(j, d)) = it.peek() {
                let closes = match d {
                    '"' => dq_open,
                    '\'' => sq_open,
                    _ => is_closer(d),
                };
                if !closes {
                    break;
                }
                match d {
                    '"' => dq_open = false,
                    '\'' => sq_open = false,
                    _ => {}
                }
                end = j + d.len_utf8();
                it.next();
            }
            let split = always
                || match it.peek() {
                    None => true,
                    Some(&(_, d)) => d.is_whitespace() || !d.is_ascii(),
                };
            if split {
                cut += self.push(&text[start..end], out);
                start = end;
                dq_open = false;
                sq_open = false;
            }
        }
        cut += self.push(&text[start..], out);
        cut
    }

    /// Pushes one sentence, cut to `max_chars` pieces; returns 1 if it had to be cut.
    fn push<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) -> usize {
        let s = s.trim();
        if s.is_empty() {
            return 0;
        }
        let max = self.max_chars;
        // Bytes ≥ chars: a short byte length needs no counting.
        if max == 0 || s.len() <= max {
            out.push(s);
            return 0;
        }
        let mut remaining = s.chars().count();
        if remaining <= max {
            out.push(s);
            return 0;
        }
        let mut rest = s;
        while remaining > max {
            let (cut_at, chars) = self.cut_point(rest);
            let piece = rest[..cut_at].trim();
            if !piece.is_empty() {
                out.push(piece);
            }
            rest = &rest[cut_at..];
            remaining -= chars;
        }
        let rest = rest.trim();
        if !rest.is_empty() {
            out.push(rest);
        }
        1
    }

    /// Where to cut `rest` (longer than `max_chars`): a byte offset and the number of chars
    /// before it (at least 1, at most `max_chars`).
    fn cut_point(&self, rest: &str) -> (usize, usize) {
        let max = self.max_chars;
        let target = self.target_chars;
        let mut count = 0;
        // Last whitespace in the second half of the window: (byte offset after it, chars).
        let mut space = None;
        // Last position between an ASCII alphanumeric and anything else: (offset, chars).
        let mut boundary = None;
        let mut prev_alnum = false;
        let mut hard = rest.len();
        for (i, c) in rest.char_indices() {
            if count == max {
                hard = i;
                break;
            }
            let alnum = c.is_ascii_alphanumeric();
            if count > 0 && !(alnum && prev_alnum) {
                boundary = Some((i, count));
            }
            prev_alnum = alnum;
            count += 1;
            let after = i + c.len_utf8();
            if is_comma(c) && count >= target {
                return (after, count);
            }
            if c.is_whitespace() && count >= max / 2 {
                space = Some((after, count));
            }
        }
        if let Some(s) = space {
            return s;
        }
        // A hard cut inside an ASCII word backs off to the word's start, if that is not too
        // far back.
        let next_alnum = rest[hard..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        if prev_alnum
            && next_alnum
            && let Some((at, n)) = boundary
            && n >= max / 2
        {
            return (at, n);
        }
        (hard, count)
    }
}

/// Splits `text` into sentences without a length bound.
pub fn split_sentences(text: &str) -> Vec<&str> {
    SentenceSplitter::default().split(text)
}

/// Whether the `.` or `。` after `before` (the sentence so far) marks a list item or a number
/// rather than an end: after a digit or a lone ASCII letter for `.` (`1.房间很大`, `a.价格`,
/// `2.0版`), after a sentence that is only a number for `。` (`1。房间很大`).
fn list_marker(before: &str, dot: char) -> bool {
    if dot == '。' {
        let t = before.trim();
        return (1..=3).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit());
    }
    let mut rev = before.chars().rev();
    match rev.next() {
        Some(c) if c.is_ascii_digit() => true,
        Some(c) if c.is_ascii_alphabetic() => {
            !rev.next().is_some_and(|p| p.is_ascii_alphanumeric())
        }
        _ => false,
    }
}

/// End punctuation.
#[inline]
pub fn is_terminator(c: char) -> bool {
    matches!(
        c,
        '。' | '！' | '？' | '；' | '…' | '｡' | '!' | '?' | ';' | '.'
    )
}

/// End punctuation that ends a sentence whatever follows.
#[inline]
fn is_cjk_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '；' | '…' | '｡')
}

/// Closing quotes and brackets (the ASCII quotes `"` `'` are decided by what is open).
#[inline]
fn is_closer(c: char) -> bool {
    matches!(
        c,
        '”' | '’' | '」' | '』' | '）' | '》' | '】' | '〕' | '〉' | '〗' | ')' | ']'
    )
}

/// Where a long sentence may be cut.
#[inline]
fn is_comma(c: char) -> bool {
    matches!(c, '，' | '、' | ',' | '：' | ':')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_on_chinese_end_punctuation() {
        assert_eq!(
            split_sentences("今天天气很好。我们去公园吧！好不好？好；走……出发"),
            [
                "今天天气很好。",
                "我们去公园吧！",
                "好不好？",
                "好；",
                "走……",
                "出发"
            ]
        );
    }

    #[test]
    fn closing_quotes_stay_with_their_sentence() {
        assert_eq!(
            split_sentences(
                "他说：“我们走吧。”她点点头。「真的？」『是的！』（完。）《书名。》下一句"
            ),
            [
                "他说：“我们走吧。”",
                "她点点头。",
                "「真的？」",
                "『是的！』",
                "（完。）",
                "《书名。》",
                "下一句"
            ]
        );
        assert_eq!(
            split_sentences("他说\"好的。\"然后走了。\"下一句。\""),
            ["他说\"好的。\"", "然后走了。", "\"下一句。\""]
        );
    }

    #[test]
    fn runs_of_end_punctuation_are_one_end() {
        assert_eq!(
            split_sentences("真的吗？！太好了！！！房间太小。。。其他一般"),
            ["真的吗？！", "太好了！！！", "房间太小。。。", "其他一般"]
        );
    }

    #[test]
    fn ascii_punctuation_splits_only_before_space_end_or_chinese() {
        assert_eq!(
            split_sentences("It costs 3.5 dollars. Visit www.example.com now! OK"),
            ["It costs 3.5 dollars.", "Visit www.example.com now!", "OK"]
        );
        assert_eq!(
            split_sentences("宝宝不太喜欢.也许太简单了.价格1.5元,还行!下次再买?"),
            [
                "宝宝不太喜欢.",
                "也许太简单了.",
                "价格1.5元,还行!",
                "下次再买?"
            ]
        );
        assert_eq!(split_sentences("a.php?id=1;b=2"), ["a.php?id=1;b=2"]);
        // Numbered list items stay with their text.
        assert_eq!(
            split_sentences("优点：1.房间很大 2.服务好。缺点：a.价格贵"),
            ["优点：1.房间很大 2.服务好。", "缺点：a.价格贵"]
        );
        assert_eq!(split_sentences("版本2.0版很好用"), ["版本2.0版很好用"]);
        assert_eq!(
            split_sentences("1。房间很大。2。服务好。"),
            ["1。房间很大。", "2。服务好。"]
        );
        assert_eq!(
            split_sentences("He said (yes.) Then"),
            ["He said (yes.)", "Then"]
        );
    }

    #[test]
    fn whitespace_is_trimmed_and_empty_sentences_dropped() {
        assert_eq!(split_sentences("  一。  二。 "), ["一。", "二。"]);
        assert!(split_sentences("   ").is_empty());
        assert!(split_sentences("").is_empty());
    }

    #[test]
    fn long_sentences_are_cut_at_commas_past_the_target() {
        let s = SentenceSplitter::with_target(8, 4);
        // Commas at 3, 7 and 14 chars: cut at the first one past 4 chars of each piece.
        assert_eq!(
            s.split("一二，三四五，六七八九十一，二三。"),
            ["一二，三四五，", "六七八九十一，", "二三。"]
        );
    }

    #[test]
    fn long_sentences_without_commas_are_hard_cut() {
        let s = SentenceSplitter::new(4);
        assert_eq!(
            s.split("一二三四五六七八九。"),
            ["一二三四", "五六七八", "九。"]
        );
        let mut out = Vec::new();
        assert_eq!(s.split_into("一二三四五六。短。", &mut out), 1);
        assert_eq!(out, ["一二三四", "五六。", "短。"]);
    }

    #[test]
    fn hard_cuts_avoid_splitting_ascii_words() {
        let s = SentenceSplitter::new(10);
        assert_eq!(
            s.split("中文中文中文ABCDEFGH"),
            ["中文中文中文", "ABCDEFGH"]
        );
        assert_eq!(s.split("one two three four"), ["one two", "three four"]);
    }

    fn squash(s: &str) -> String {
        s.chars().filter(|c| !c.is_whitespace()).collect()
    }

    proptest! {
        #[test]
        fn sentences_are_bounded_and_cover_the_input(
            text in "[一二三四五六七八九十ab1. ，,：。！？；…”」）\"]{0,200}",
            max in 1usize..40,
        ) {
            let s = SentenceSplitter::new(max);
            let parts = s.split(&text);
            for p in &parts {
                prop_assert!(p.chars().count() <= max, "{:?} longer than {}", p, max);
                prop_assert!(!p.is_empty() && p.trim() == *p);
            }
            prop_assert_eq!(squash(&parts.concat()), squash(&text));
        }

        #[test]
        fn unbounded_split_covers_the_input(text in "\\PC{0,100}") {
            let parts = split_sentences(&text);
            prop_assert_eq!(squash(&parts.concat()), squash(&text));
        }
    }
}
