//! The one way the CLI prints text that came from a file (metric names and values, params and
//! instance names from manifests, run records, plotted series, a stage's error and log): its
//! control characters escaped visibly (`pipeline_engine::error::printable`: an OSC or CSI
//! sequence in a metric name prints as `\u{1b}]0;…`, it does not retitle the terminal or
//! write the clipboard), and a cell cut to a width with `…`, counted in display columns
//! (CJK characters are two). `--json` output does not come through here: JSON escapes
//! control characters itself, and its values stay exact.
//!
//! A cell is cut while it is escaped, reading only as much of the value as fits: a 100 MB
//! string metric costs a cell's worth of work, not a copy of 100 MB per row (issue 31, where
//! `exp show` to a pipe padded every row to the widest cell: 524 MB of output for 4 rows).

use std::borrow::Cow;

use pipeline_engine::error::printable;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The widest a value's cell is in the tables (`exp show`, `metrics`, `diff`), in display
/// columns: wide enough for any number, a path-like name or a short note; a longer value
/// is a job for `--json`.
pub const CELL: usize = 60;
/// The widest an instance name or a metric key is, where a cut would make two rows alike
/// (`finetune_lcqmc@learning_rate=…`).
pub const NAME: usize = 120;
/// The widest one value printed on a line of its own (`show`'s params and metrics, a run's
/// cause, a reason).
pub const FIELD: usize = 1000;
/// The most characters of an error message printed (its start and its end are kept): a
/// message quoting a 200 KB value is not echoed whole.
pub const MESSAGE: usize = 4000;

/// `s` as one line of at most `width` display columns: control characters (tabs and newlines
/// too) escaped, the end replaced by `…` when cut.
pub fn cell(s: &str, width: usize) -> String {
    if width == 0 {
        return String::new();
    }
    // Zero-width characters (combining marks) take no column: a byte budget keeps a value
    // made of millions of them bounded too.
    let budget = 16 * width + 64;
    let mut out = String::new();
    let mut piece = String::new();
    let (mut used, mut fits) = (0, 0);
    for c in s.chars() {
        piece.clear();
        printable::push_char(&mut piece, c, false);
        let w: usize = piece.chars().map(|c| c.width().unwrap_or(0)).sum();
        if used + w > width || out.len() + piece.len() > budget {
            out.truncate(fits);
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        used += w;
        // Where the cut goes if a later character does not fit: room left for the `…`.
        if used < width {
            fits = out.len();
        }
    }
    out
}

/// `s` as a header of at most `width` columns, escaped, its start replaced by `…` when cut:
/// the end of `eval.lcqmc_test.accuracy` says the most.
pub fn header(s: &str, width: usize) -> String {
    crate::table::cut_start(&printable::line(s), width)
}

/// `s` as one line, escaped, not cut (a value whose length the caller already bounds).
pub fn line(s: &str) -> Cow<'_, str> {
    printable::line(s)
}

/// A message of several lines (an error, a stage's failure): control characters but `\n` and
/// `\t` escaped, and at most [`MESSAGE`] characters (its start and end kept).
pub fn message(s: &str) -> String {
    let s = printable::text(s);
    let count = s.chars().count();
    if count <= MESSAGE {
        return s.into_owned();
    }
    let head: String = s.chars().take(MESSAGE / 2).collect();
    let tail: String = s.chars().skip(count - MESSAGE / 2).collect();
    format!(
        "{head} … ({} characters left out) … {tail}",
        count - MESSAGE
    )
}

/// The first `n` characters of `s` (a digest or fingerprint from a manifest, which may be
/// shorter than expected or not hex at all), escaped.
pub fn prefix(s: &str, n: usize) -> String {
    cell(&s.chars().take(n).collect::<String>(), n)
}

/// `s` padded with spaces to `width` display columns (on the right, or on the left when
/// `right`): what `{:<w$}` does, counted in columns, and without its panic on a width over
/// 65,535.
pub fn pad(s: &str, width: usize, right: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(s.width()));
    if right {
        fill + s
    } else {
        s.to_string() + &fill
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_escaped_and_cut_to_their_width() {
        assert_eq!(cell("\u{1b}]0;pwned\u{7}", 60), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(cell("a\tb\nc", 60), "a\\tb\\nc");
        assert_eq!(cell("abcdef", 4), "abc…");
        assert_eq!(cell("abcd", 4), "abcd");
        assert_eq!(cell("中文数据集", 5), "中文…");
        assert_eq!(cell("中文数据集", 5).width(), 5);
        // An escape is cut whole or kept whole, never split.
        assert_eq!(cell("ab\u{1b}", 5), "ab…");
        assert_eq!(cell("x", 0), "");
    }

    #[test]
    fn a_huge_value_costs_a_cell() {
        let big = "v".repeat(20 << 20);
        assert_eq!(cell(&big, CELL).width(), CELL);
        let marks = "\u{301}".repeat(1 << 20);
        assert!(cell(&marks, CELL).len() <= 16 * CELL + 64 + 3);
    }

    #[test]
    fn headers_keep_their_end() {
        assert_eq!(header("eval.lcqmc_test.accuracy", 10), "….accuracy");
        assert_eq!(header("\u{1b}[2J", 20), "\\u{1b}[2J");
    }

    #[test]
    fn messages_keep_lines_and_are_bounded() {
        assert_eq!(message("a\nb\u{1b}"), "a\nb\\u{1b}");
        let long = message(&"x".repeat(100_000));
        assert!(long.len() < MESSAGE + 100, "{}", long.len());
        assert!(long.contains("characters left out"));
    }

    #[test]
    fn padding_counts_columns_and_takes_any_width() {
        assert_eq!(pad("中", 4, false), "中  ");
        assert_eq!(pad("1", 3, true), "  1");
        assert_eq!(pad("k", 70_000, false).len(), 70_000);
        assert_eq!(prefix("ab", 8), "ab");
        assert_eq!(prefix("0123456789", 8), "01234567");
    }
}
