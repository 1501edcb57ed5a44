//! Tables for the comparison commands: plain text fitted to a terminal's width (cells cut with
//! an ellipsis, as `dvc exp show` and cargo do, and whole columns left out when even the cut
//! ones do not fit), CSV and Markdown, the compact number format they share, and nested params
//! and metrics flattened to `a.b` keys. Cells come in escaped and cut (`crate::sanitize`).

use std::collections::BTreeMap;
use std::io::IsTerminal;

use serde_json::Value;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::sanitize::pad;

/// A table as the commands build it: headers, cells as text, and per column how it may be
/// narrowed.
#[derive(Debug, Default)]
pub struct Table {
    /// The column names.
    pub headers: Vec<String>,
    /// One list of cells per row, as many as `headers`.
    pub rows: Vec<Vec<String>>,
    /// Numbers: aligned right.
    pub right: Vec<bool>,
    /// The narrowest a column may be cut to (its natural width if that is less).
    pub min: Vec<usize>,
    /// Columns that may be left out when the table is too wide, the first to go first.
    pub droppable: Vec<usize>,
}

/// The width to fit: `--width N` (0: no limit), else the terminal's when stdout is one, else
/// `$COLUMNS`, else none (a pipe gets whole cells, as cargo does).
pub fn width(arg: Option<usize>) -> Option<usize> {
    match arg {
        Some(0) => None,
        Some(n) => Some(n),
        None if std::io::stdout().is_terminal() => {
            terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
        }
        None => std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .filter(|&n: &usize| n > 0),
    }
}

/// The text table and how many columns were left out to fit `limit`.
pub fn text(t: &Table, limit: Option<usize>) -> (String, usize) {
    let n = t.headers.len();
    let natural: Vec<usize> = (0..n)
        .map(|c| {
            t.rows
                .iter()
                .map(|r| r[c].width())
                .chain([t.headers[c].width()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let min: Vec<usize> = (0..n)
        .map(|c| natural[c].min(t.min.get(c).copied().unwrap_or(6)))
        .collect();
    let mut shown: Vec<bool> = vec![true; n];
    let total = |widths: &[usize], shown: &[bool]| {
        let k = shown.iter().filter(|s| **s).count();
        let sum: usize = (0..n).filter(|&c| shown[c]).map(|c| widths[c]).sum();
        sum + 2 * k.saturating_sub(1)
    };
    let mut widths = natural.clone();
    if let Some(limit) = limit {
        let mut dropped = t.droppable.iter();
        while total(&min, &shown) > limit {
            match dropped.next() {
                Some(&c) => shown[c] = false,
                None => break,
            }
        }
        // Still too wide with every droppable column gone: cut below the minimums too.
        let floor = if total(&min, &shown) > limit {
            vec![1; n]
        } else {
            min
        };
        widths = fit(&natural, &floor, &shown, limit, total);
    }
    let mut out = String::new();
    let line = |cells: Vec<String>| cells.join("  ").trim_end().to_string() + "\n";
    let cols: Vec<usize> = (0..n).filter(|&c| shown[c]).collect();
    out += &line(
        cols.iter()
            .map(|&c| pad(&cut_start(&t.headers[c], widths[c]), widths[c], t.right[c]))
            .collect(),
    );
    for r in &t.rows {
        out += &line(
            cols.iter()
                .map(|&c| pad(&cut_end(&r[c], widths[c]), widths[c], t.right[c]))
                .collect(),
        );
    }
    (out, n - cols.len())
}

/// The widths that fit `limit`: every column capped at the largest width `cap` for which the
/// table fits (no column below its minimum), found by bisection.
fn fit(
    natural: &[usize],
    min: &[usize],
    shown: &[bool],
    limit: usize,
    total: impl Fn(&[usize], &[bool]) -> usize,
) -> Vec<usize> {
    let capped = |cap: usize| -> Vec<usize> {
        natural
            .iter()
            .zip(min)
            .map(|(&n, &m)| n.min(cap.max(m)))
            .collect()
    };
    let (mut lo, mut hi) = (0, natural.iter().copied().max().unwrap_or(0));
    if total(&capped(hi), shown) <= limit {
        return capped(hi);
    }
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if total(&capped(mid), shown) <= limit {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    capped(lo)
}

/// `s` in at most `width` columns, its end replaced by `…` when cut.
pub fn cut_end(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for ch in s.chars() {
        let w = ch.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(ch);
        used += w;
    }
    out + "…"
}

/// `s` in at most `width` columns, its start replaced by `…` when cut: for headers such as
/// `eval.lcqmc_test.accuracy`, whose end says the most.
pub fn cut_start(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_string();
    }
    let mut kept = Vec::new();
    let mut used = 0;
    for ch in s.chars().rev() {
        let w = ch.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        kept.push(ch);
        used += w;
    }
    "…".to_string() + &kept.into_iter().rev().collect::<String>()
}

/// RFC 4180 CSV: a field is quoted when it holds a comma, a quote or a line break. (Twelve
/// lines; the `csv` crate is not among our dependencies for this.)
pub fn csv(headers: &[String], rows: &[Vec<String>]) -> String {
    let field = |s: &String| {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.clone()
        }
    };
    let line = |cells: &[String]| cells.iter().map(field).collect::<Vec<_>>().join(",") + "\n";
    std::iter::once(line(headers))
        .chain(rows.iter().map(|r| line(r)))
        .collect()
}

/// A GitHub-flavoured Markdown table, numbers aligned right.
pub fn markdown(headers: &[String], rows: &[Vec<String>], right: &[bool]) -> String {
    let esc = |s: &String| s.replace('|', "\\|").replace('\n', " ");
    let line = |cells: &[String]| {
        format!(
            "| {} |\n",
            cells.iter().map(esc).collect::<Vec<_>>().join(" | ")
        )
    };
    let rule: Vec<String> = right
        .iter()
        .map(|r| if *r { "---:".into() } else { "---".into() })
        .collect();
    std::iter::once(line(headers))
        .chain([format!("|{}|\n", rule.join("|"))])
        .chain(rows.iter().map(|r| line(r)))
        .collect()
}

/// A value as a table shows it: integers whole, other numbers with four decimals at most
/// (trailing zeros dropped), very small or large ones in exponent form, strings bare.
pub fn compact(v: &Value) -> String {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => compact_f64(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub fn compact_f64(f: f64) -> String {
    let a = f.abs();
    if f == 0.0 {
        "0".into()
    } else if !(1e-3..1e7).contains(&a) {
        format!("{f:.2e}")
    } else if a >= 1e4 {
        format!("{f:.0}")
    } else {
        let s = format!("{f:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Nested objects flattened to `a.b` keys. Params keep every value (lists as lists); metrics
/// keep scalars only (numbers, strings, booleans): lists such as the per-epoch history are
/// not columns.
pub(crate) fn flatten(v: &Value, keep_all: bool) -> BTreeMap<String, Value> {
    fn go(prefix: &str, v: &Value, keep_all: bool, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    go(&key, v, keep_all, out);
                }
            }
            Value::Array(_) | Value::Null if !keep_all => {}
            other => {
                out.insert(prefix.to_string(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    go("", v, keep_all, &mut out);
    out
}

/// A value as CSV and JSON-minded tools want it: numbers as written, strings bare.
pub fn raw(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            headers: vec!["instance".into(), "eval.mlm_accuracy".into(), "note".into()],
            rows: vec![
                vec![
                    "pretrain@share_type=all".into(),
                    "0.4123".into(),
                    "a long note here".into(),
                ],
                vec!["pretrain@share_type=none".into(), "0.3".into(), "b".into()],
            ],
            right: vec![false, true, false],
            min: vec![12, 6, 6],
            droppable: vec![2],
        }
    }

    #[test]
    fn a_table_that_fits_is_not_cut() {
        let (s, dropped) = text(&table(), Some(100));
        assert_eq!(dropped, 0);
        assert!(s.contains("pretrain@share_type=none  "), "{s}");
        assert!(s.contains("a long note here"));
        assert!(s.lines().all(|l| l.width() <= 100));
        // Numbers are aligned right under their header.
        assert!(s.contains("           0.3"), "{s}");
    }

    #[test]
    fn a_narrow_terminal_cuts_cells_with_an_ellipsis_then_drops_columns() {
        let (s, dropped) = text(&table(), Some(40));
        assert_eq!(dropped, 0);
        assert!(s.lines().all(|l| l.width() <= 40), "{s}");
        assert!(s.contains('…'), "{s}");
        let (s, dropped) = text(&table(), Some(22));
        assert_eq!(dropped, 1);
        assert!(!s.contains("note"), "{s}");
        assert!(s.lines().all(|l| l.width() <= 22), "{s}");
        // Narrower than the minimums: cut below them rather than overflow.
        let (s, _) = text(&table(), Some(15));
        assert!(s.lines().all(|l| l.width() <= 15), "{s}");
    }

    #[test]
    fn cutting_counts_wide_characters_twice() {
        assert_eq!(cut_end("中文数据集", 5), "中文…");
        assert_eq!(cut_end("中文数据集", 5).width(), 5);
        assert_eq!(cut_start("eval.lcqmc_test.accuracy", 10), "….accuracy");
        assert_eq!(cut_end("abc", 3), "abc");
    }

    #[test]
    fn csv_quotes_what_needs_it_and_markdown_escapes_pipes() {
        let h = vec!["a".to_string(), "b".to_string()];
        let rows = vec![vec!["x,y".to_string(), "say \"hi\"".to_string()]];
        assert_eq!(csv(&h, &rows), "a,b\n\"x,y\",\"say \"\"hi\"\"\"\n");
        let md = markdown(&h, &[vec!["a|b".into(), "1".into()]], &[false, true]);
        assert_eq!(md, "| a | b |\n|---|---:|\n| a\\|b | 1 |\n");
    }

    #[test]
    fn params_keep_lists_and_metrics_keep_scalars() {
        use serde_json::json;
        let v = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": null});
        let p = flatten(&v, true);
        assert_eq!(p["a.c"], json!([1, 2]));
        assert!(p.contains_key("e"));
        let m = flatten(&v, false);
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["a.b", "d"]);
    }

    #[test]
    fn numbers_are_compact() {
        use serde_json::json;
        assert_eq!(compact(&json!(0.412345)), "0.4123");
        assert_eq!(compact(&json!(0.5)), "0.5");
        assert_eq!(compact(&json!(12)), "12");
        assert_eq!(compact(&json!(2e-4)), "2.00e-4");
        assert_eq!(compact(&json!(123456.7)), "123457");
        assert_eq!(compact(&json!("all")), "all");
    }
}
