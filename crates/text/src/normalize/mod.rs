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

mod html;
mod t2s;

use std::borrow::Cow;

use html::{TagKind, html_entity, html_tag};
use t2s::T2s;
pub use t2s::{T2sError, has_traditional, to_simplified};

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

#[cfg(test)]
mod tests;
