//! A report table: typed columns built row by row, held as a polars `DataFrame`, and written
//! three ways from that frame: CSV (polars' `CsvWriter`), JSON (rows of the frame, with the
//! column descriptions and notes) and Markdown (rendered here: polars' own `Display` draws box
//! tables for terminals, not GitHub Markdown).

use polars::prelude::*;
use serde_json::{Map, Value, json};

/// One cell as the report builds it; the column's [`Kind`] decides how it is stored (an `Int`
/// in a float column becomes a float, a number in a text column its text).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// No value: empty in the CSV, `null` in the JSON, `–` in the Markdown. A non-finite
    /// float and a `None` convert to it.
    Null,
    /// Text.
    Str(String),
    /// A whole number (counts, steps, sizes).
    Int(i64),
    /// A finite number.
    Float(f64),
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Str(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Str(s)
    }
}

impl From<i64> for Cell {
    fn from(n: i64) -> Cell {
        Cell::Int(n)
    }
}

impl From<u64> for Cell {
    fn from(n: u64) -> Cell {
        Cell::Int(n as i64)
    }
}

/// `None` is [`Cell::Null`], `Some` the value's cell.
impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(x: Option<T>) -> Cell {
        x.map_or(Cell::Null, Into::into)
    }
}

impl From<f64> for Cell {
    fn from(x: f64) -> Cell {
        if x.is_finite() {
            Cell::Float(x)
        } else {
            Cell::Null
        }
    }
}

/// A row's cells as `key: value` pairs (the keys are columns' keys), each value converted
/// into a [`Cell`]: `cells! { source: "ours", steps: r.steps }`.
macro_rules! cells {
    ($($key:ident: $value:expr),* $(,)?) => {
        vec![$((stringify!($key), $crate::table::Cell::from($value))),*]
    };
}
pub(crate) use cells;

/// The type of a column: its polars dtype, and so its CSV and JSON values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text, left-aligned in the Markdown.
    Str,
    /// A 64-bit integer (a float cell is rounded), right-aligned.
    Int,
    /// A 64-bit float, right-aligned.
    Float,
}

/// How a column is shown in Markdown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fmt {
    /// As it is: text, or a number's shortest form.
    Text,
    /// An integer with thousands separators.
    Int,
    /// A number with this many decimals.
    Fixed(usize),
    /// A count in millions with this many decimals and an `M`.
    Millions(usize),
    /// Seconds as `2h 05m`, `12m 30s` or `8.1 s`.
    Duration,
    /// A rate: whole numbers with separators from 100 up, one decimal below.
    Rate,
}

/// A column: its key (the CSV/JSON name), its Markdown header, type and format, a
/// description for the JSON, and where it appears.
#[derive(Debug, Clone)]
pub struct Col {
    /// The name in the CSV header and the JSON rows (`params_backbone`); rows name their
    /// cells by it.
    pub key: String,
    /// The Markdown column heading (`Parameters`).
    pub header: String,
    /// How the cells are stored.
    pub kind: Kind,
    /// How the cells are shown in the Markdown (the CSV and JSON hold the value itself).
    pub fmt: Fmt,
    /// What the column holds, with its unit, in the JSON's `columns`.
    pub desc: String,
    /// In the CSV and JSON.
    pub data: bool,
    /// In the Markdown table.
    pub markdown: bool,
}

impl Col {
    /// A column in the CSV, JSON and Markdown alike.
    pub fn new(key: &str, header: &str, kind: Kind, fmt: Fmt, desc: &str) -> Col {
        Col {
            key: key.to_string(),
            header: header.to_string(),
            kind,
            fmt,
            desc: desc.to_string(),
            data: true,
            markdown: true,
        }
    }
}

/// Columns from a spec, one a line: `key | Header | type | description`. The type is `text`,
/// `int` or `fN` (a float shown with N decimals), then optionally a Markdown format
/// (`=int`, `=fN`, `=MN` millions, `=rate`) and where it appears (`data`: CSV and JSON only,
/// `md`: the Markdown only). A table's columns read as a table this way; a malformed line is a
/// bug in the report, caught by the tests that build every table.
pub fn cols(spec: &'static str) -> Vec<Col> {
    spec.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .map(|line| {
            let parts: Vec<&'static str> = line.splitn(4, '|').map(str::trim).collect();
            let [key, header, ty, desc] = parts[..] else {
                panic!("column spec `{line}`: not `key | header | type | description`")
            };
            let mut words = ty.split_whitespace();
            let (kind, fmt) = match words.next() {
                Some("text") => (Kind::Str, Fmt::Text),
                Some("int") => (Kind::Int, Fmt::Int),
                Some(f) => (Kind::Float, Fmt::Fixed(decimals(f, line))),
                None => panic!("column spec `{line}`: no type"),
            };
            let mut col = Col::new(key, header, kind, fmt, desc);
            for w in words {
                match w {
                    "data" => col.markdown = false,
                    "md" => col.data = false,
                    "=int" => col.fmt = Fmt::Int,
                    "=rate" => col.fmt = Fmt::Rate,
                    _ if w.starts_with("=M") => col.fmt = Fmt::Millions(decimals(&w[2..], line)),
                    _ if w.starts_with("=f") => col.fmt = Fmt::Fixed(decimals(&w[1..], line)),
                    _ => panic!("column spec `{line}`: unknown `{w}`"),
                }
            }
            col
        })
        .collect()
}

/// The N of `fN` (or of `MN`'s digits).
fn decimals(word: &str, line: &str) -> usize {
    word.trim_start_matches('f')
        .parse()
        .unwrap_or_else(|_| panic!("column spec `{line}`: bad type `{word}`"))
}

/// A table of the report.
#[derive(Debug, Clone)]
pub struct Table {
    /// The file stem (`model_size` → `model_size.csv`, `model_size.json`).
    pub key: String,
    /// What the table shows, in words: the JSON's `title`, and the heading of a table that
    /// shares a README section with another.
    pub title: String,
    /// The columns, in the order they are written.
    pub cols: Vec<Col>,
    /// One cell per column in each row, in [`Self::cols`]' order ([`Self::push`] fills them).
    pub rows: Vec<Vec<Cell>>,
    /// Sentences printed under the table (and kept in the JSON).
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table: no rows, no notes.
    pub fn new(key: &str, title: &str, cols: Vec<Col>) -> Table {
        Table {
            key: key.to_string(),
            title: title.to_string(),
            cols,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row given as `(key, cell)` pairs; columns not named are null. A key that is not
    /// a column is a bug in the report, caught by the tests.
    pub fn push(&mut self, cells: Vec<(&str, Cell)>) {
        let mut row = vec![Cell::Null; self.cols.len()];
        for (key, cell) in cells {
            match self.cols.iter().position(|c| c.key == key) {
                Some(i) => row[i] = cell,
                None => panic!("table {}: no column {key}", self.key),
            }
        }
        self.rows.push(row);
    }

    /// The frame of the data columns, or of the Markdown columns.
    fn frame(&self, markdown: bool) -> anyhow::Result<DataFrame> {
        let mut columns = Vec::new();
        for (i, col) in self.cols.iter().enumerate() {
            if (markdown && !col.markdown) || (!markdown && !col.data) {
                continue;
            }
            let name = PlSmallStr::from_str(&col.key);
            let cells = self.rows.iter().map(|r| &r[i]);
            let column = match col.kind {
                Kind::Str => Column::new(
                    name,
                    cells
                        .map(|c| match c {
                            Cell::Str(s) => Some(s.clone()),
                            Cell::Int(n) => Some(n.to_string()),
                            Cell::Float(x) => Some(x.to_string()),
                            Cell::Null => None,
                        })
                        .collect::<Vec<Option<String>>>(),
                ),
                Kind::Int => Column::new(
                    name,
                    cells
                        .map(|c| match c {
                            Cell::Int(n) => Some(*n),
                            Cell::Float(x) => Some(x.round() as i64),
                            _ => None,
                        })
                        .collect::<Vec<Option<i64>>>(),
                ),
                Kind::Float => Column::new(
                    name,
                    cells
                        .map(|c| match c {
                            Cell::Float(x) => Some(*x),
                            Cell::Int(n) => Some(*n as f64),
                            _ => None,
                        })
                        .collect::<Vec<Option<f64>>>(),
                ),
            };
            columns.push(column);
        }
        DataFrame::new(self.rows.len(), columns)
            .map_err(|e| anyhow::anyhow!("building the {} table: {e}", self.key))
    }

    /// The data columns as CSV (polars' writer: a header line, `\n` line ends, quoting where
    /// needed, nulls empty).
    pub fn csv(&self) -> anyhow::Result<Vec<u8>> {
        let mut df = self.frame(false)?;
        let mut out = Vec::new();
        CsvWriter::new(&mut out)
            .include_header(true)
            .finish(&mut df)
            .map_err(|e| anyhow::anyhow!("writing {}.csv: {e}", self.key))?;
        Ok(out)
    }

    /// The data columns as JSON: `{table, title, columns: [{name, header, description}],
    /// rows: [{name: value}], notes}`.
    pub fn json(&self, extra: Map<String, Value>) -> anyhow::Result<Value> {
        let df = self.frame(false)?;
        let data_cols: Vec<&Col> = self.cols.iter().filter(|c| c.data).collect();
        let mut rows = Vec::with_capacity(df.height());
        for i in 0..df.height() {
            let mut row = Map::new();
            for (col, column) in data_cols.iter().zip(df.columns()) {
                row.insert(col.key.clone(), any_to_json(column.get(i)?));
            }
            rows.push(Value::Object(row));
        }
        let columns: Vec<Value> = data_cols
            .iter()
            .map(|c| json!({"name": c.key, "header": c.header, "description": c.desc}))
            .collect();
        let mut v = Map::new();
        v.insert("table".into(), json!(self.key));
        v.insert("title".into(), json!(self.title));
        v.insert("columns".into(), Value::Array(columns));
        v.insert("rows".into(), Value::Array(rows));
        v.insert("notes".into(), json!(self.notes));
        v.extend(extra);
        Ok(Value::Object(v))
    }

    /// The Markdown columns as a GitHub table (numbers right-aligned, nulls as `–`).
    pub fn markdown(&self) -> anyhow::Result<String> {
        let df = self.frame(true)?;
        let cols: Vec<&Col> = self.cols.iter().filter(|c| c.markdown).collect();
        let mut out = String::new();
        out.push('|');
        for c in &cols {
            out.push_str(&format!(" {} |", escape(&c.header)));
        }
        out.push_str("\n|");
        for c in &cols {
            out.push_str(if c.kind == Kind::Str { "---|" } else { "---:|" });
        }
        out.push('\n');
        for i in 0..df.height() {
            out.push('|');
            for (c, column) in cols.iter().zip(df.columns()) {
                let cell = format_cell(&column.get(i)?, c.fmt);
                out.push_str(&format!(" {} |", escape(&cell)));
            }
            out.push('\n');
        }
        Ok(out)
    }
}

fn any_to_json(v: AnyValue<'_>) -> Value {
    match v {
        AnyValue::Null => Value::Null,
        AnyValue::Boolean(b) => json!(b),
        AnyValue::String(s) => json!(s),
        AnyValue::StringOwned(s) => json!(s.as_str()),
        AnyValue::Int64(n) => json!(n),
        AnyValue::Int32(n) => json!(n),
        AnyValue::UInt64(n) => json!(n),
        AnyValue::UInt32(n) => json!(n),
        AnyValue::Float64(x) => json!(x),
        AnyValue::Float32(x) => json!(x),
        other => json!(other.to_string()),
    }
}

fn format_cell(v: &AnyValue<'_>, fmt: Fmt) -> String {
    let number = match v {
        AnyValue::Null => return "–".to_string(),
        AnyValue::String(s) => return s.to_string(),
        AnyValue::StringOwned(s) => return s.to_string(),
        AnyValue::Int64(n) => *n as f64,
        AnyValue::Float64(x) => *x,
        other => return other.to_string(),
    };
    match fmt {
        Fmt::Text => number.to_string(),
        Fmt::Int => thousands(number.round() as i64),
        Fmt::Fixed(d) => format!("{number:.d$}"),
        Fmt::Millions(d) => format!("{:.d$}M", number / 1e6),
        Fmt::Duration => duration(number),
        Fmt::Rate if number.abs() >= 100.0 => thousands(number.round() as i64),
        Fmt::Rate => format!("{number:.1}"),
    }
}

/// `12345678` → `12,345,678`.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Seconds as a readable duration.
pub fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else if seconds < 3600.0 {
        let s = seconds.round() as u64;
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        let m = (seconds / 60.0).round() as u64;
        format!("{}h {:02}m", m / 60, m % 60)
    }
}

/// A Markdown table cell: `|` escaped, line breaks as spaces.
fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(
            "t",
            "A table",
            cols(
                r#"
        name | Name | text | the name
        n | Count | int | a count
        x | Share % | f1 | a share
        shown | Shown | text md | display
        hidden | Hidden | f2 data | data only
        "#,
            ),
        );
        t.push(vec![
            ("name", "a|b".into()),
            ("n", 1234567i64.into()),
            ("x", 12.345.into()),
            ("shown", "yes".into()),
            ("hidden", 0.5.into()),
        ]);
        t.push(vec![("name", "c, \"d\"".into())]);
        t
    }

    #[test]
    fn csv_json_and_markdown_come_from_one_frame() {
        let t = sample();
        let csv = String::from_utf8(t.csv().unwrap()).unwrap();
        assert_eq!(
            csv,
            "name,n,x,hidden\na|b,1234567,12.345,0.5\n\"c, \"\"d\"\"\",,,\n"
        );
        let j = t.json(Map::new()).unwrap();
        assert_eq!(j["rows"][0]["n"], json!(1234567));
        assert_eq!(j["rows"][1]["x"], Value::Null);
        assert!(j["rows"][0].get("shown").is_none());
        let md = t.markdown().unwrap();
        assert_eq!(
            md,
            "| Name | Count | Share % | Shown |\n|---|---:|---:|---|\n\
             | a\\|b | 1,234,567 | 12.3 | yes |\n| c, \"d\" | – | – | – |\n"
        );
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(-11683584), "-11,683,584");
        assert_eq!(duration(8.06), "8.1 s");
        assert_eq!(duration(754.0), "12m 34s");
        assert_eq!(duration(6.0 * 3600.0), "6h 00m");
        assert_eq!(
            format_cell(&AnyValue::Float64(11_683_584.0), Fmt::Millions(2)),
            "11.68M"
        );
        assert_eq!(
            format_cell(&AnyValue::Float64(64564.4), Fmt::Rate),
            "64,564"
        );
        assert_eq!(format_cell(&AnyValue::Float64(3.46), Fmt::Rate), "3.5");
    }

    #[test]
    #[should_panic(expected = "no column nope")]
    fn unknown_columns_are_bugs() {
        sample().push(vec![("nope", Cell::Null)]);
    }

    #[test]
    fn a_column_spec_reads_its_formats_and_refuses_what_it_does_not_know() {
        let c = cols("t | Tokens | int =M2 data | tokens\nr | Rate | f1 =rate md | a rate");
        assert_eq!(
            (c[0].kind, c[0].fmt, c[0].markdown),
            (Kind::Int, Fmt::Millions(2), false)
        );
        assert_eq!(
            (c[1].kind, c[1].fmt, c[1].data),
            (Kind::Float, Fmt::Rate, false)
        );
        assert_eq!(c[1].desc, "a rate");
        let bad = std::panic::catch_unwind(|| cols("t | Tokens | int =K2 | tokens"));
        assert!(bad.is_err());
    }
}
