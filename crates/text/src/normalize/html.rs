//! HTML remnants in scraped text: tags of known elements and comments ([`html_tag`]), and
//! character references ([`html_entity`]).

/// How a recognised tag is stripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TagKind {
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
pub(super) fn html_tag(s: &[u8]) -> Option<(usize, TagKind)> {
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
pub(super) fn html_entity(s: &str) -> Option<(usize, char)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_tables_are_sorted_for_binary_search() {
        assert!(INLINE_TAGS.windows(2).all(|w| w[0] < w[1]));
        assert!(BLOCK_TAGS.windows(2).all(|w| w[0] < w[1]));
    }
}
