//! Text normalisation for the `clean` stage: one pass over a paragraph that
//!
//! - turns full-width ASCII-range characters (U+FF01–U+FF5E: digits, Latin letters, most
//!   symbols) into their ASCII forms and the ideographic space U+3000 into a space, but keeps
//!   the full-width punctuation that Chinese text uses as its own (`！，：；？（）`);
//! - removes control characters (C0 other than whitespace, DEL, C1) and invisible format
//!   characters (zero-width space/joiners U+200B–U+200D, word joiner U+2060, BOM U+FEFF, soft
//!   hyphen U+00AD, bidi marks and embeddings, variation selectors);
//! - strips HTML remnants: tags of known HTML (and MediaWiki) elements such as `<br>`,
//!   `<p class="x">`, `</a>`, `<ref name=y>`, comments `<!-- … -->`, and decodes character
//!   references (`&nbsp;` `&amp;` `&lt;` `&gt;` `&quot;` `&#39;` `&#183;` `&#x4E2D;` …);
//! - collapses every run of whitespace (any Unicode white space, tabs and newlines included) to
//!   one ASCII space and trims both ends;
//! - optionally converts Traditional to Simplified Chinese with `ferrous-opencc` (OpenCC's
//!   `t2s`), which is the costly step, so it only runs on text that holds at least one character
//!   the conversion could change (see [`has_traditional`]).
//!
//! Newlines are whitespace here: a caller that wants to keep line structure normalises line by
//! line (the corpus readers yield paragraphs without their newline).
//!
//! Text that needs no change comes back borrowed ([`Cow::Borrowed`]), without allocating.

use std::borrow::Cow;
use std::sync::OnceLock;

use ferrous_opencc::OpenCC;
use ferrous_opencc::config::BuiltinConfig;

/// What [`Normalizer`] does; every step is on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormalizeOptions {
    /// Traditional → Simplified Chinese (OpenCC `t2s`).
    pub to_simplified: bool,
    /// Full-width ASCII-range characters → ASCII, U+3000 → space.
    pub fullwidth_to_halfwidth: bool,
    /// Remove HTML tags and comments, decode character references.
    pub strip_html: bool,
}

impl Default for NormalizeOptions {
    fn default() -> Self {
        NormalizeOptions {
            to_simplified: true,
            fullwidth_to_halfwidth: true,
            strip_html: true,
        }
    }
}

/// The Traditional → Simplified converter could not be built (its embedded dictionaries did not
/// load: a broken build of `ferrous-opencc`, not bad input).
#[derive(Debug, thiserror::Error)]
#[error("could not load the OpenCC t2s dictionaries: {0}")]
pub struct T2sError(String);

/// A text normaliser, built once and shared between threads (it is `Sync`).
pub struct Normalizer {
    options: NormalizeOptions,
    t2s: Option<&'static T2s>,
}

impl std::fmt::Debug for Normalizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Normalizer")
            .field("options", &self.options)
            .finish()
    }
}

impl Normalizer {
    /// Builds a normaliser. With `to_simplified` the OpenCC dictionaries are loaded (once per
    /// process, tens of milliseconds; later normalisers share them).
    pub fn new(options: NormalizeOptions) -> Result<Normalizer, T2sError> {
        let t2s = if options.to_simplified {
            Some(T2s::get()?)
        } else {
            None
        };
        Ok(Normalizer { options, t2s })
    }

    /// What this normaliser does.
    pub fn options(&self) -> NormalizeOptions {
        self.options
    }

    /// Normalises one paragraph (see the module documentation for what that means).
    pub fn normalize<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let (out, traditional) = self.normalize_pass(text);
        match (traditional, self.t2s) {
            (true, Some(t2s)) => match t2s.convert_runs(&out) {
                Some(converted) => Cow::Owned(converted),
                None => out,
            },
            _ => out,
        }
    }

    /// The single pass: everything but t2s. Also says whether the result holds a character
    /// that t2s might change (only looked for when t2s is on).
    fn normalize_pass<'a>(&self, text: &'a str) -> (Cow<'a, str>, bool) {
        let mut out = Out::new(text);
        let mut traditional = false;
        let triggers = self.t2s.map(|t| &t.triggers);
        // A run of whitespace not yet written: (start, end, whether it is exactly one ' ').
        let mut pending: Option<(usize, usize, bool)> = None;
        // Where the source bytes that are kept as they are, not yet written, start: written
        // in one piece when something else comes.
        let mut span: Option<usize> = None;
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let (c, len) = decode(bytes, i);
            let action = match c {
                '<' if self.options.strip_html => match html_tag(&bytes[i..]) {
                    Some((n, TagKind::Inline)) => Action::Drop(n),
                    Some((n, TagKind::Block)) => Action::Space(n, false),
                    None => Action::Keep(1),
                },
                '&' if self.options.strip_html => match html_entity(&text[i..]) {
                    // The decoded character goes through the same rules (`&nbsp;` is a space,
                    // `&#65297;` a full-width digit), but never starts a tag.
                    Some((n, decoded)) => match self.classify(decoded, 0) {
                        Action::Keep(_) => Action::Replace(decoded, n),
                        Action::Replace(r, _) => Action::Replace(r, n),
                        Action::Space(..) => Action::Space(n, false),
                        Action::Drop(_) => Action::Drop(n),
                    },
                    None => Action::Keep(1),
                },
                _ => self.classify(c, len),
            };
            match action {
                Action::Keep(n) => {
                    if span.is_none() {
                        flush_space(&mut out, &mut pending);
                        span = Some(i);
                    }
                    if !traditional && (c as u32) >= 0x3400 {
                        traditional = triggers.is_some_and(|t| t.contains(c));
                    }
                    i += n;
                    continue;
                }
                _ => {
                    if let Some(s) = span.take() {
                        out.keep(s, i);
                    }
                }
            }
            match action {
                Action::Replace(r, n) => {
                    flush_space(&mut out, &mut pending);
                    if !traditional && (r as u32) >= 0x3400 {
                        traditional = triggers.is_some_and(|t| t.contains(r));
                    }
                    out.push(r);
                    i += n;
                }
                Action::Space(n, plain) => {
                    space(&mut pending, i, i + n, plain);
                    i += n;
                }
                Action::Drop(n) | Action::Keep(n) => i += n,
            }
        }
        if let Some(s) = span {
            out.keep(s, bytes.len());
        }
        // Trailing whitespace is simply never written.
        (out.finish(), traditional)
    }

    /// What to do with `c` (`len` bytes in the source).
    #[inline]
    fn classify(&self, c: char, len: usize) -> Action {
        let u = c as u32;
        if u < 0x80 {
            return match c {
                ' ' => Action::Space(1, true),
                '\t' | '\n' | '\r' | '\u{0B}' | '\u{0C}' => Action::Space(1, false),
                '\0'..='\u{1F}' | '\u{7F}' => Action::Drop(1),
                _ => Action::Keep(1),
            };
        }
        // CJK ideographs and most other scripts: nothing to do.
        if (0x3400..0xFE00).contains(&u) {
            return Action::Keep(len);
        }
        match u {
            0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F => {
                Action::Space(len, false)
            }
            0x3000 if self.options.fullwidth_to_halfwidth => Action::Space(len, false),
            0x80..=0x9F
            | 0xAD
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFE00..=0xFE0F
            | 0xFEFF => Action::Drop(len),
            0xFF01..=0xFF5E if self.options.fullwidth_to_halfwidth => {
                if KEPT_FULLWIDTH.contains(&c) {
                    Action::Keep(len)
                } else {
                    // The block mirrors ASCII 0x21–0x7E at a fixed offset.
                    char::from_u32(u - 0xFEE0)
                        .map_or(Action::Keep(len), |r| Action::Replace(r, len))
                }
            }
            _ => Action::Keep(len),
        }
    }
}

/// The char at byte `i` of valid UTF-8 (a char boundary) and its length.
#[inline]
fn decode(bytes: &[u8], i: usize) -> (char, usize) {
    let b0 = bytes[i] as u32;
    let cont = |k: usize| bytes.get(i + k).map_or(0, |&b| b as u32 & 0x3F);
    let (u, len) = if b0 < 0x80 {
        (b0, 1)
    } else if b0 < 0xE0 {
        ((b0 & 0x1F) << 6 | cont(1), 2)
    } else if b0 < 0xF0 {
        ((b0 & 0x0F) << 12 | cont(1) << 6 | cont(2), 3)
    } else {
        (
            (b0 & 0x07) << 18 | cont(1) << 12 | cont(2) << 6 | cont(3),
            4,
        )
    };
    (char::from_u32(u).unwrap_or('\u{FFFD}'), len)
}

/// Full-width punctuation that Chinese text uses as its own and that BERT's Chinese
/// vocabulary keeps apart from the ASCII forms; everything else in U+FF01–U+FF5E becomes ASCII.
pub const KEPT_FULLWIDTH: [char; 7] = ['！', '，', '：', '；', '？', '（', '）'];

/// What becomes of the next `n` source bytes.
#[derive(Debug, Clone, Copy)]
enum Action {
    Keep(usize),
    Drop(usize),
    /// Whitespace; `true` when it is one plain space (kept as it is if alone).
    Space(usize, bool),
    Replace(char, usize),
}

/// Records whitespace at `start..end` in the pending run.
#[inline]
fn space(pending: &mut Option<(usize, usize, bool)>, start: usize, end: usize, plain: bool) {
    *pending = match *pending {
        None => Some((start, end, plain)),
        Some((s, _, _)) => Some((s, end, false)),
    };
}

/// Writes the pending whitespace run as one space, unless nothing was written yet (leading
/// whitespace is dropped).
#[inline]
fn flush_space(out: &mut Out<'_>, pending: &mut Option<(usize, usize, bool)>) {
    if let Some((s, e, plain)) = pending.take()
        && !out.is_empty()
    {
        if plain {
            out.keep(s, e);
        } else {
            out.push(' ');
        }
    }
}

/// The output of a pass: a slice of the source as long as what is written is a contiguous part
/// of it, a `String` from the first change on.
struct Out<'a> {
    src: &'a str,
    owned: Option<String>,
    start: usize,
    end: usize,
}

impl<'a> Out<'a> {
    fn new(src: &'a str) -> Self {
        Out {
            src,
            owned: None,
            start: 0,
            end: 0,
        }
    }

    fn is_empty(&self) -> bool {
        match &self.owned {
            Some(s) => s.is_empty(),
            None => self.start == self.end,
        }
    }

    /// Source bytes `start..end` go to the output unchanged.
    #[inline]
    fn keep(&mut self, start: usize, end: usize) {
        match &mut self.owned {
            None if self.start == self.end => {
                self.start = start;
                self.end = end;
            }
            None if self.end == start => self.end = end,
            None => {
                let mut s = String::with_capacity(self.src.len());
                s.push_str(&self.src[self.start..self.end]);
                s.push_str(&self.src[start..end]);
                self.owned = Some(s);
            }
            Some(s) => s.push_str(&self.src[start..end]),
        }
    }

    #[inline]
    fn push(&mut self, c: char) {
        match &mut self.owned {
            Some(s) => s.push(c),
            None => {
                let mut s = String::with_capacity(self.src.len());
                s.push_str(&self.src[self.start..self.end]);
                s.push(c);
                self.owned = Some(s);
            }
        }
    }

    fn finish(self) -> Cow<'a, str> {
        match self.owned {
            Some(s) => Cow::Owned(s),
            None => Cow::Borrowed(&self.src[self.start..self.end]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagKind {
    /// Removed without trace (`<a>`, `<span>`): text on both sides belongs together.
    Inline,
    /// Becomes whitespace (`<br>`, `<p>`, `</div>`).
    Block,
}

/// Elements whose tags are stripped. Only known names count, so that `a<b` or a book title in
/// angle brackets (`<Breaking Away>`) stays text.
const INLINE_TAGS: &[&str] = &[
    "a",
    "abbr",
    "b",
    "big",
    "cite",
    "code",
    "del",
    "em",
    "font",
    "i",
    "img",
    "includeonly",
    "ins",
    "mark",
    "noinclude",
    "nowiki",
    "onlyinclude",
    "q",
    "rp",
    "rt",
    "ruby",
    "s",
    "small",
    "span",
    "strike",
    "strong",
    "sub",
    "sup",
    "tt",
    "u",
    "var",
];
const BLOCK_TAGS: &[&str] = &[
    "article",
    "blockquote",
    "body",
    "br",
    "caption",
    "center",
    "dd",
    "div",
    "dl",
    "dt",
    "footer",
    "form",
    "gallery",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hr",
    "html",
    "li",
    "nav",
    "ol",
    "p",
    "pre",
    "ref",
    "references",
    "section",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "ul",
];

/// Longest tag (attributes included) and comment recognised as HTML.
const MAX_TAG_BYTES: usize = 1024;
const MAX_COMMENT_BYTES: usize = 4096;

/// If `s` (starting at `<`) opens a tag of a known element or a comment: its length and kind.
fn html_tag(s: &[u8]) -> Option<(usize, TagKind)> {
    if s.starts_with(b"<!--") {
        let limit = s.len().min(MAX_COMMENT_BYTES);
        let end = memchr::memmem::find(&s[4..limit], b"-->")?;
        return Some((4 + end + 3, TagKind::Inline));
    }
    let mut j = 1;
    if s.get(j) == Some(&b'/') {
        j += 1;
    }
    let name_start = j;
    while j < s.len() && j - name_start < 16 && s[j].is_ascii_alphanumeric() {
        j += 1;
    }
    if j == name_start || !s[name_start].is_ascii_alphabetic() {
        return None;
    }
    let mut name = [0u8; 16];
    let n = j - name_start;
    if n > name.len() {
        return None;
    }
    for (d, b) in name.iter_mut().zip(&s[name_start..j]) {
        *d = b.to_ascii_lowercase();
    }
    let name = std::str::from_utf8(&name[..n]).ok()?;
    let kind = if INLINE_TAGS.binary_search(&name).is_ok() {
        TagKind::Inline
    } else if BLOCK_TAGS.binary_search(&name).is_ok() {
        TagKind::Block
    } else {
        return None;
    };
    match s.get(j) {
        Some(b'>') => return Some((j + 1, kind)),
        Some(b'/') => {}
        Some(b' ' | b'\t') => {
            // Attributes start with an ASCII name: `<b 且 c>` is not a tag.
            let k = j + s[j..]
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
            if !s
                .get(k)
                .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'/' | b'>'))
            {
                return None;
            }
        }
        _ => return None,
    }
    let limit = s.len().min(MAX_TAG_BYTES);
    let rest = &s[j..limit];
    let close = memchr::memchr3(b'>', b'<', b'\n', rest)?;
    (rest[close] == b'>').then_some((j + close + 1, kind))
}

/// If `s` (starting at `&`) is a character reference: its length and the character.
/// `&nbsp` without its semicolon is accepted too, as scraped text often has it.
fn html_entity(s: &str) -> Option<(usize, char)> {
    let b = s.as_bytes();
    if b.get(1) == Some(&b'#') {
        let (digits_start, radix) = match b.get(2) {
            Some(b'x' | b'X') => (3, 16),
            _ => (2, 10),
        };
        let mut j = digits_start;
        while j < b.len() && j - digits_start < 8 && (b[j] as char).is_digit(radix) {
            j += 1;
        }
        if j == digits_start || b.get(j) != Some(&b';') {
            return None;
        }
        let code = u32::from_str_radix(&s[digits_start..j], radix).ok()?;
        let c = char::from_u32(code)?;
        return Some((j + 1, c));
    }
    let mut j = 1;
    while j < b.len() && j < 10 && b[j].is_ascii_alphanumeric() {
        j += 1;
    }
    let name = &s[1..j];
    let c = match name {
        "nbsp" => '\u{A0}',
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "middot" => '·',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        "ldquo" => '“',
        "rdquo" => '”',
        "lsquo" => '‘',
        "rsquo" => '’',
        "laquo" => '«',
        "raquo" => '»',
        "times" => '×',
        "divide" => '÷',
        "deg" => '°',
        "copy" => '©',
        "reg" => '®',
        "yen" => '¥',
        "emsp" | "ensp" | "thinsp" => ' ',
        "zwj" | "zwnj" | "shy" => '\u{200B}',
        _ => return None,
    };
    if b.get(j) == Some(&b';') {
        Some((j + 1, c))
    } else if name == "nbsp" {
        Some((j, c))
    } else {
        None
    }
}

/// The OpenCC `t2s` converter and the characters that can start a change.
struct T2s {
    cc: OpenCC,
    triggers: Triggers,
}

/// Characters in whose presence t2s may change a text (a bit set over U+0000–U+2FFFF).
struct Triggers {
    bits: Vec<u64>,
}

impl Triggers {
    #[inline]
    fn contains(&self, c: char) -> bool {
        let u = c as usize;
        self.bits
            .get(u >> 6)
            .is_some_and(|w| (w >> (u & 63)) & 1 == 1)
    }
}

static T2S: OnceLock<Result<T2s, String>> = OnceLock::new();

/// Characters that t2s leaves alone on their own but changes inside a phrase of OpenCC's
/// `TSPhrases` (瞭 in 明瞭 → 明了, 覆 in 反覆 → 反复, …). Found by diffing `TSPhrases.txt`
/// against `TSCharacters.txt` of ferrous-opencc 0.4.0; a test checks every phrase we know of.
const PHRASE_ONLY_TRIGGERS: &str = "沈牴瞭藉衹覆";

/// Code points probed for single-character conversions: CJK Extension A and the unified block,
/// compatibility ideographs, and the supplementary ideographic planes (OpenCC's t2s keys lie
/// in U+346E–U+2B726).
const PROBE_RANGES: [(u32, u32); 3] = [(0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FFFF)];

/// Whether OpenCC's t2s dictionaries hold `c` in a key: all their keys are made of CJK
/// ideographs (checked by a test), so no match spans anything else.
#[inline]
fn is_ideograph(c: char) -> bool {
    PROBE_RANGES
        .iter()
        .any(|&(a, b)| (a..=b).contains(&(c as u32)))
}

impl T2s {
    /// Converts each run of ideographs that holds a trigger, copying the rest: the same result
    /// as converting the whole text (a dictionary match never crosses a non-ideograph), for a
    /// fraction of the work when a text has a single Traditional character. `None` when nothing
    /// changed.
    fn convert_runs(&self, text: &str) -> Option<String> {
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut run_start: Option<usize> = None;
        let mut run_has_trigger = false;
        // A sentinel non-ideograph at the end closes the last run.
        for (i, c) in text
            .char_indices()
            .chain(std::iter::once((text.len(), ' ')))
        {
            let ideograph = i < text.len() && is_ideograph(c);
            if ideograph {
                if run_start.is_none() {
                    run_start = Some(i);
                    run_has_trigger = false;
                }
                run_has_trigger |= self.triggers.contains(c);
                continue;
            }
            if let Some(start) = run_start.take()
                && run_has_trigger
            {
                let run = &text[start..i];
                let converted = self.cc.convert(run);
                if converted != run {
                    let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
                    o.push_str(&text[copied..start]);
                    o.push_str(&converted);
                    copied = i;
                }
            }
        }
        out.map(|mut o| {
            o.push_str(&text[copied..]);
            o
        })
    }

    fn get() -> Result<&'static T2s, T2sError> {
        T2S.get_or_init(|| {
            let cc = OpenCC::from_config(BuiltinConfig::T2s).map_err(|e| e.to_string())?;
            let triggers = Triggers::probe(&cc);
            Ok(T2s { cc, triggers })
        })
        .as_ref()
        .map_err(|e| T2sError(e.clone()))
    }
}

impl Triggers {
    /// Asks the converter which characters it changes on their own, in one call: candidates
    /// separated by newlines (no dictionary key holds a newline, so each converts alone).
    /// Cheaper and sturdier than reading OpenCC's dictionaries, which the crate keeps private.
    fn probe(cc: &OpenCC) -> Triggers {
        let mut bits = vec![0u64; 0x30000 / 64];
        let mut set = |c: char| bits[c as usize >> 6] |= 1 << (c as usize & 63);
        let candidates: Vec<char> = PROBE_RANGES
            .iter()
            .flat_map(|&(a, b)| (a..=b).filter_map(char::from_u32))
            .collect();
        let mut joined = String::with_capacity(candidates.len() * 5);
        for &c in &candidates {
            joined.push(c);
            joined.push('\n');
        }
        let converted = cc.convert(&joined);
        for (&c, piece) in candidates.iter().zip(converted.split('\n')) {
            if piece.chars().ne(std::iter::once(c)) {
                set(c);
            }
        }
        for c in PHRASE_ONLY_TRIGGERS.chars() {
            set(c);
        }
        Triggers { bits }
    }
}

/// Whether t2s could change `text` (it holds a Traditional character, or one of the few that
/// only change inside a phrase). Loads the converter on first use.
pub fn has_traditional(text: &str) -> Result<bool, T2sError> {
    let t2s = T2s::get()?;
    Ok(text.chars().any(|c| t2s.triggers.contains(c)))
}

/// Traditional → Simplified alone (OpenCC `t2s`), skipping texts it cannot change.
pub fn to_simplified(text: &str) -> Result<Cow<'_, str>, T2sError> {
    if !has_traditional(text)? {
        return Ok(Cow::Borrowed(text));
    }
    let t2s = T2s::get()?;
    Ok(t2s
        .convert_runs(text)
        .map_or(Cow::Borrowed(text), Cow::Owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn norm(s: &str) -> String {
        Normalizer::new(NormalizeOptions::default())
            .unwrap()
            .normalize(s)
            .into_owned()
    }

    fn plain() -> Normalizer {
        Normalizer::new(NormalizeOptions {
            to_simplified: false,
            ..NormalizeOptions::default()
        })
        .unwrap()
    }

    #[test]
    fn fullwidth_ascii_becomes_halfwidth_but_chinese_punctuation_stays() {
        assert_eq!(norm("１９９８年ＡＢＣｘｙｚ"), "1998年ABCxyz");
        assert_eq!(norm("５．５％＋＃＠～"), "5.5%+#@~");
        assert_eq!(
            norm("你好，世界！真的？是：对；（好）"),
            "你好，世界！真的？是：对；（好）"
        );
        assert_eq!(norm("一\u{3000}\u{3000}二"), "一 二");
    }

    #[test]
    fn control_and_zero_width_characters_are_removed() {
        assert_eq!(norm("零\u{200B}宽\u{200C}字\u{200D}符\u{2060}"), "零宽字符");
        assert_eq!(norm("\u{FEFF}开头"), "开头");
        assert_eq!(norm("软\u{AD}连字符"), "软连字符");
        assert_eq!(norm("控\u{0}制\u{7}符\u{7F}\u{85}号\u{9F}"), "控制符 号");
        assert_eq!(norm("a\u{200E}b\u{202A}c\u{FE0F}"), "abc");
    }

    #[test]
    fn whitespace_is_collapsed_and_trimmed() {
        assert_eq!(norm("  a \t\n b\u{A0}\u{2003}c  "), "a b c");
        assert_eq!(norm("\t\n"), "");
        assert_eq!(norm(""), "");
        assert_eq!(norm("一 \u{200B} 二"), "一 二");
    }

    #[test]
    fn html_tags_and_entities_are_stripped() {
        assert_eq!(
            norm("第一行<br>第二行<br/>三<BR />四"),
            "第一行 第二行 三 四"
        );
        assert_eq!(norm("<p class=\"x\">段落</p>"), "段落");
        assert_eq!(
            norm("点击<a href='http://x.cn/?a=1&b=2'>这里</a>查看"),
            "点击这里查看"
        );
        assert_eq!(
            norm("鱼&amp;熊掌&nbsp;&lt;不可&gt;兼得"),
            "鱼&熊掌 <不可>兼得"
        );
        assert_eq!(norm("&quot;引号&quot;&#39;单&#39;"), "\"引号\"'单'");
        assert_eq!(norm("圆点&#183;号&#xB7;与&#20013;文"), "圆点·号·与中文");
        assert_eq!(norm("全角&#65297;&#65292;"), "全角1，");
        assert_eq!(norm("前&nbsp后"), "前 后");
        assert_eq!(norm("注<!-- 隐藏 -->释<ref name=x>来源</ref>"), "注释 来源");
        assert_eq!(norm("<nowiki>维基</nowiki>"), "维基");
    }

    #[test]
    fn text_that_only_looks_like_html_stays() {
        for s in [
            "a<b 且 c>d",
            "书名<Breaking Away>",
            "1 < 2",
            "A&B公司",
            "&unknown;",
            "<br",
            "&#;",
            "&#x110000;",
        ] {
            assert_eq!(norm(s), s, "{s}");
        }
    }

    #[test]
    fn traditional_becomes_simplified() {
        assert_eq!(norm("這個國家的歷史"), "这个国家的历史");
        assert_eq!(
            norm("數學是利用符號語言研究數量"),
            "数学是利用符号语言研究数量"
        );
        // Characters that change only inside a phrase.
        assert_eq!(norm("一目瞭然，反覆思量"), "一目了然，反复思量");
        // Off: left alone.
        assert_eq!(plain().normalize("這個國家").as_ref(), "這個國家");
        assert!(has_traditional("歷史").unwrap());
        assert!(!has_traditional("历史").unwrap());
        assert_eq!(to_simplified("國家").unwrap(), "国家");
    }

    #[test]
    fn converting_runs_of_ideographs_equals_converting_the_whole() {
        let t2s = T2s::get().unwrap();
        for text in [
            "數學，是利用符號語言研究數量、結構。A&B 歷史1998年",
            "一目瞭然的反覆思量，沈船與藉口",
            "这是简体，这個是繁體，最後是English words和數字123。",
            "乾隆年間的乾燥天氣",
        ] {
            let whole = t2s.cc.convert(text);
            let runs = t2s.convert_runs(text).unwrap_or_else(|| text.to_string());
            assert_eq!(runs, whole, "{text}");
        }
        assert!(t2s.convert_runs("全是简体字，没有繁体。").is_none());
    }

    #[test]
    fn unchanged_text_is_borrowed() {
        let n = Normalizer::new(NormalizeOptions::default()).unwrap();
        for s in [
            "这是一个简单的句子。",
            "Plain ASCII text, one space.",
            "a b",
        ] {
            assert!(matches!(n.normalize(s), Cow::Borrowed(_)), "{s}");
        }
        // Trimming the ends alone still borrows.
        assert!(matches!(n.normalize("  中文  "), Cow::Borrowed("中文")));
        assert!(matches!(n.normalize("中  文"), Cow::Owned(_)));
    }

    #[test]
    fn every_known_t2s_phrase_is_triggered() {
        // Phrases of OpenCC's TSPhrases whose characters t2s leaves alone one by one.
        for s in ["明瞭", "反覆", "找藉口", "沈船", "牴牾", "衹得"] {
            assert!(has_traditional(s).unwrap(), "{s}");
            assert_ne!(norm(s), s);
        }
    }

    #[test]
    fn a_normalizer_is_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Normalizer>();
    }

    #[test]
    fn tag_tables_are_sorted_for_binary_search() {
        assert!(INLINE_TAGS.windows(2).all(|w| w[0] < w[1]));
        assert!(BLOCK_TAGS.windows(2).all(|w| w[0] < w[1]));
    }

    proptest! {
        #[test]
        fn output_is_trimmed_collapsed_and_idempotent(s in "[ a-z\u{3000}\u{200B}>/;#0-9中文國\u{FF10}-\u{FF19}\u{FF21}-\u{FF3A}！，\t\n]{0,40}") {
            // (No `&` or `<`: `&amp;lt;` and `<Ｂ>` change again on a second pass, by design.)
            let n = plain();
            let once = n.normalize(&s).into_owned();
            prop_assert!(!once.starts_with(' ') && !once.ends_with(' '));
            prop_assert!(!once.contains("  "));
            let bad = ['\t', '\n', '\u{3000}', '\u{200B}'];
            prop_assert!(!once.contains(bad), "{:?}", once);
            let twice = n.normalize(&once).into_owned();
            prop_assert_eq!(twice, once);
        }
    }
}
