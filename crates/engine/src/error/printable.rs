//! Text that came from a file, made safe to print to a terminal or to put in an SVG: every
//! control character is replaced by a visible escape (`\u{1b}`, `\n`), so that a metric name
//! holding `ESC ] 0 ; … BEL` (an OSC sequence that retitles the terminal; OSC 52 writes the
//! clipboard) or `ESC [ 2 J` (clear the screen) prints as those characters' names instead of
//! acting. The rest of the sequence is plain text once its ESC is escaped.
//!
//! The CLI's tables (`crates/cli/sanitize.rs`) and the report's figures
//! (`pipeline_figures`) both use these functions, so a name reads alike everywhere. JSON
//! output needs none of this: JSON escapes control characters itself (`\u001b`).

use std::borrow::Cow;

/// Whether `c` is escaped: C0 controls (U+0000–U+001F), DEL, C1 controls (U+0080–U+009F,
/// which some terminals read as the 8-bit form of ESC sequences: U+009B is CSI), the
/// bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069, which reorder the text
/// around them: "Trojan Source", CVE-2021-42574), and U+FFFE/U+FFFF (not characters; XML 1.0
/// forbids them). `keep_lines` keeps `\n` and `\t`, for text printed as lines rather than
/// in a cell.
pub fn is_escaped(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{fffe}' | '\u{ffff}' => true,
        _ => false,
    }
}

/// Appends `c` to `out`, escaped if [`is_escaped`] says so: `\n`, `\t`, `\r` by those names,
/// any other as `\u{hex}` (Rust's own escape, so `\u{1b}` is ESC).
pub fn push_char(out: &mut String, c: char, keep_lines: bool) {
    if !is_escaped(c, keep_lines) {
        out.push(c);
        return;
    }
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        other => {
            use std::fmt::Write;
            let _ = write!(out, "\\u{{{:x}}}", u32::from(other));
        }
    }
}

/// `s` with every control character escaped (newlines and tabs too): one line, for a table
/// cell, a name in a sentence or an SVG text. Borrowed when there was nothing to escape.
pub fn line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` with every control character but `\n` and `\t` escaped: for a message of several lines
/// (an error, a log's last lines).
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_escaped(c, keep_lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_char(&mut out, c, keep_lines);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_lose_their_escape() {
        assert_eq!(line("\u{1b}]0;pwned\u{7}"), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(line("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(line("a\u{9b}31m"), "a\\u{9b}31m");
        assert_eq!(line("\u{7f}"), "\\u{7f}");
        assert_eq!(line("x\u{202e}y"), "x\\u{202e}y");
    }

    #[test]
    fn lines_and_tabs_are_kept_only_in_text() {
        assert_eq!(line("a\nb\tc\r"), "a\\nb\\tc\\r");
        assert_eq!(text("a\nb\tc\r"), "a\nb\tc\\r");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in ["eval.lcqmc_test.accuracy", "中文数据集", "é ü ß", ""] {
            assert!(matches!(line(s), Cow::Borrowed(_)), "{s}");
            assert_eq!(line(s), s);
        }
    }
}
