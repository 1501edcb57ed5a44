//! `pipeline exp show`: the store's artifacts side by side, one row per instance (its latest
//! artifact) or, with `--all-runs`, one per artifact; columns for the params that differ between
//! the rows, the metrics (`metrics.json`'s scalars, flattened to `a.b` keys), the fingerprint
//! and when it finished. Sorted, filtered, and printed as a table fitted to the terminal, or as
//! CSV, Markdown or JSON. It reads what `pipeline metrics` reads (the manifests and the index).

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use pipeline_engine::error::suggestion;
use pipeline_engine::inspect::{self, ArtifactInfo};
use pipeline_engine::{Pipeline, UserError};
use serde_json::{Map, Value, json};

use crate::global::Global;
use crate::sanitize;
use crate::table::{self, Table, compact, flatten, raw};

#[derive(Debug, Subcommand)]
pub enum ExpCommand {
    /// A table of experiments: each instance's latest artifact (or every artifact) with the
    /// params that differ between them and their metrics.
    #[command(after_help = "Examples:
  pipeline exp show pretrain                       the pretraining variants side by side
  pipeline exp show finetune_lcqmc --metrics 'eval.*.accuracy' --sort eval.lcqmc_test.accuracy --desc
  pipeline exp show pretrain --all-runs --where share_type=all --csv > runs.csv")]
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Only these stages or instances (default: all).
    pub stages: Vec<String>,
    /// One row per artifact (each run that produced one), not only each instance's latest.
    #[arg(long)]
    pub all_runs: bool,
    /// The metric columns: keys of metrics.json, nested ones as `a.b`, `*` globs allowed
    /// (`eval.*`). Default: every scalar, those that differ between the rows first.
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub metrics: Vec<String>,
    /// Param columns to show even where every row has the same value (globs allowed).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub params: Vec<String>,
    /// Sort by this column: a param or metric (`params.X` / `metrics.X` where a name is both),
    /// `instance`, `stage`, `fingerprint` or `when`. Default: pipeline order, then time.
    #[arg(long, value_name = "COL")]
    pub sort: Option<String>,
    /// Sort in descending order (rows without the column stay last).
    #[arg(long, requires = "sort")]
    pub desc: bool,
    /// Keep the rows where `COL OP VALUE` holds, OP one of = != < <= > >= (numbers compare as
    /// numbers); repeatable, every one must hold.
    #[arg(long = "where", value_name = "COL=VALUE")]
    pub filters: Vec<String>,
    /// The table's width (default: the terminal's when stdout is one, else $COLUMNS; 0: no
    /// limit). A cell is cut at 60 columns (an instance or a header at 120) whatever the width.
    #[arg(long, value_name = "N")]
    pub width: Option<usize>,
    /// One JSON object: the columns and every row's params and metrics.
    #[arg(long, conflicts_with_all = ["csv", "md"])]
    pub json: bool,
    /// CSV with every column, values as stored (control characters escaped only when stdout
    /// is a terminal).
    #[arg(long, conflicts_with = "md")]
    pub csv: bool,
    /// A Markdown table (cells escaped and cut as in the text table).
    #[arg(long)]
    pub md: bool,
}

/// One artifact with its params and scalar metrics flattened.
struct Row {
    info: ArtifactInfo,
    params: BTreeMap<String, Value>,
    metrics: BTreeMap<String, Value>,
}

/// Where a column's values come from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    Instance,
    Stage,
    Fingerprint,
    When,
    Param(String),
    Metric(String),
}

impl Row {
    fn get(&self, s: &Source) -> Option<Value> {
        let m = &self.info.manifest;
        match s {
            Source::Instance => Some(Value::String(m.instance.clone())),
            Source::Stage => Some(Value::String(m.stage.clone())),
            Source::Fingerprint => Some(Value::String(m.fingerprint.clone())),
            Source::When => Some(Value::String(m.record.finished.clone())),
            Source::Param(k) => self.params.get(k).cloned(),
            Source::Metric(k) => self.metrics.get(k).cloned(),
        }
    }
}

pub fn dispatch(global: &Global, cmd: &ExpCommand) -> Result<ExitCode> {
    match cmd {
        ExpCommand::Show(args) => show(global, args),
    }
}

fn show(global: &Global, a: &ShowArgs) -> Result<ExitCode> {
    let p = crate::global::load(global)?;
    let mut rows = rows(&p, &a.stages, a.all_runs)?;
    let filters = a
        .filters
        .iter()
        .map(|f| Filter::parse(f, &rows))
        .collect::<Result<Vec<_>, _>>()?;
    rows.retain(|r| filters.iter().all(|f| f.holds(r)));
    if let Some(col) = &a.sort {
        let src = resolve(col, &rows)?;
        sort(&mut rows, &src, a.desc);
    }
    let params = param_columns(&rows, &a.params)?;
    let metrics = metric_columns(&rows, &a.metrics)?;
    if a.json {
        return print_json(&rows, &params, &metrics, a.metrics.is_empty());
    }
    if rows.is_empty() && !a.csv && !a.md {
        println!("no artifacts yet{}", for_names(&a.stages));
        return Ok(ExitCode::SUCCESS);
    }
    let columns = columns(&params, &metrics);
    if a.csv || a.md {
        // CSV is data: its values as stored, escaped only on a terminal (as `ls` escapes
        // names); Markdown is for reading, escaped and cut like the text table.
        let csv_text = |s: String| match std::io::stdout().is_terminal() {
            true => sanitize::line(&s).into_owned(),
            false => s,
        };
        let headers: Vec<String> = columns
            .iter()
            .map(|c| match a.csv {
                true => csv_text(c.header.clone()),
                false => sanitize::header(&c.header, sanitize::NAME),
            })
            .collect();
        let cell = |r: &Row, c: &Column| {
            let v = r.get(&c.source).unwrap_or(Value::Null);
            if a.csv {
                csv_text(raw(&v))
            } else {
                display(&v, &c.source)
            }
        };
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| columns.iter().map(|c| cell(r, c)).collect())
            .collect();
        if a.csv {
            print!("{}", table::csv(&headers, &cells));
        } else {
            let right: Vec<bool> = columns.iter().map(|c| numeric(&rows, &c.source)).collect();
            print!("{}", table::markdown(&headers, &cells, &right));
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_text(&rows, &columns, a.all_runs, table::width(a.width));
    Ok(ExitCode::SUCCESS)
}

fn for_names(names: &[String]) -> String {
    if names.is_empty() {
        ": `pipeline run` makes them".into()
    } else {
        format!(
            " for {}: `pipeline run {}` makes them",
            names.join(", "),
            names.join(" ")
        )
    }
}

/// The artifacts of `names` (each instance's latest, or all), in pipeline order then time;
/// a name that is neither in the store nor in the pipeline is an error.
fn rows(p: &Pipeline, names: &[String], all_runs: bool) -> Result<Vec<Row>> {
    let found = inspect::artifacts(p, names, !all_runs);
    for n in names {
        let known = found
            .iter()
            .any(|a| a.manifest.stage == *n || a.manifest.instance == *n);
        if !known {
            // Not in the store: the pipeline's own error (with its "did you mean") if it does
            // not know the name either.
            p.plan.select(std::slice::from_ref(n))?;
        }
    }
    let order: BTreeMap<&str, usize> = p
        .plan
        .instances
        .iter()
        .enumerate()
        .map(|(i, inst)| (inst.name.as_str(), i))
        .collect();
    let mut rows: Vec<Row> = found
        .into_iter()
        .map(|mut info| Row {
            params: flatten(
                &Value::Object(info.manifest.components.params.clone()),
                true,
            ),
            // Taken, not borrowed: the flattened copy is the only one kept (twelve 60 MB
            // string metrics took 1.7 GB while both were).
            metrics: info
                .metrics
                .take()
                .map(|m| flatten(&m, false))
                .unwrap_or_default(),
            info,
        })
        .collect();
    let key = |r: &Row| {
        let m = &r.info.manifest;
        let pos = order
            .get(m.instance.as_str())
            .copied()
            .unwrap_or(usize::MAX);
        (pos, m.instance.clone(), m.record.finished.clone())
    };
    rows.sort_by_key(key);
    Ok(rows)
}

/// Whether `key` differs between the rows (a row without it differs from one with it).
fn varies(rows: &[Row], get: impl Fn(&Row) -> Option<&Value>) -> bool {
    let mut values = rows.iter().map(get);
    let first = values.next().flatten();
    values.any(|v| v != first)
}

fn matches_any(key: &str, patterns: &[glob::Pattern]) -> bool {
    patterns.iter().any(|p| p.matches(key))
}

fn patterns(list: &[String], flag: &str) -> Result<Vec<glob::Pattern>, UserError> {
    list.iter()
        .map(|s| {
            glob::Pattern::new(s.trim())
                .map_err(|e| UserError::new(format!("{flag} {s}: not a pattern: {e}")))
        })
        .collect()
}

/// Each pattern must match some key, else it is a typo.
fn check_patterns(
    list: &[String],
    pats: &[glob::Pattern],
    keys: &BTreeSet<&str>,
    flag: &str,
) -> Result<(), UserError> {
    for (s, p) in list.iter().zip(pats) {
        if !keys.iter().any(|k| p.matches(k)) {
            let all: Vec<&str> = keys.iter().copied().collect();
            return Err(
                UserError::new(format!("{flag}: no row has `{s}`")).with_help(suggestion(s, &all))
            );
        }
    }
    Ok(())
}

/// The params that differ between the rows, and those `--params` names.
fn param_columns(rows: &[Row], wanted: &[String]) -> Result<Vec<String>, UserError> {
    let keys: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.params.keys())
        .map(String::as_str)
        .collect();
    let pats = patterns(wanted, "--params")?;
    if !rows.is_empty() {
        check_patterns(wanted, &pats, &keys, "--params")?;
    }
    Ok(keys
        .iter()
        .filter(|k| matches_any(k, &pats) || varies(rows, |r| r.params.get(**k)))
        .map(|k| k.to_string())
        .collect())
}

/// The metrics `--metrics` names (in its order), or every scalar one, those that differ first.
fn metric_columns(rows: &[Row], wanted: &[String]) -> Result<Vec<String>, UserError> {
    let keys: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.metrics.keys())
        .map(String::as_str)
        .collect();
    if wanted.is_empty() {
        let (mut vary, same): (Vec<&str>, Vec<&str>) = keys
            .iter()
            .partition(|k| varies(rows, |r| r.metrics.get(**k)));
        vary.extend(same);
        return Ok(vary.into_iter().map(str::to_string).collect());
    }
    let pats = patterns(wanted, "--metrics")?;
    if !rows.is_empty() {
        check_patterns(wanted, &pats, &keys, "--metrics")?;
    }
    let mut out: Vec<String> = Vec::new();
    for p in &pats {
        for k in keys.iter().filter(|k| p.matches(k)) {
            if !out.iter().any(|o| o == k) {
                out.push(k.to_string());
            }
        }
    }
    Ok(out)
}

/// A column of the table.
struct Column {
    source: Source,
    header: String,
}

/// instance, params, metrics, fingerprint, when; a name that is both a param and a metric
/// column is shown as `params.X` and `metrics.X`.
fn columns(params: &[String], metrics: &[String]) -> Vec<Column> {
    let both = |k: &String| params.contains(k) && metrics.contains(k);
    let mut out = vec![Column {
        source: Source::Instance,
        header: "instance".into(),
    }];
    out.extend(params.iter().map(|k| Column {
        source: Source::Param(k.clone()),
        header: if both(k) {
            format!("params.{k}")
        } else {
            k.clone()
        },
    }));
    out.extend(metrics.iter().map(|k| Column {
        source: Source::Metric(k.clone()),
        header: if both(k) {
            format!("metrics.{k}")
        } else {
            k.clone()
        },
    }));
    out.push(Column {
        source: Source::Fingerprint,
        header: "fingerprint".into(),
    });
    out.push(Column {
        source: Source::When,
        header: "when".into(),
    });
    out
}

/// A cell as the text and Markdown tables show it: short fingerprints, minutes for times.
fn display(v: &Value, source: &Source) -> String {
    match (source, v) {
        (Source::Fingerprint, Value::String(s)) => sanitize::prefix(s, 8),
        // 2026-11-25T10:31:02.123Z → 2026-11-25 10:31 (UTC, as the run records keep it)
        (Source::When, Value::String(s)) => sanitize::prefix(s, 16).replacen('T', " ", 1),
        (Source::Instance, _) => sanitize::cell(&compact(v), sanitize::NAME),
        _ => sanitize::cell(&compact(v), sanitize::CELL),
    }
}

/// Whether every value of the column is a number (aligned right).
fn numeric(rows: &[Row], s: &Source) -> bool {
    let mut any = false;
    for r in rows {
        match r.get(s) {
            Some(Value::Number(_)) => any = true,
            None | Some(Value::Null) => {}
            Some(_) => return false,
        }
    }
    any
}

fn print_text(rows: &[Row], columns: &[Column], all_runs: bool, width: Option<usize>) {
    let mark = |r: &Row| if all_runs && r.info.current { "*" } else { "" };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| match &c.source {
                    Source::Instance => format!(
                        "{}{}",
                        sanitize::cell(&r.info.manifest.instance, sanitize::NAME),
                        mark(r)
                    ),
                    s => display(&r.get(s).unwrap_or(Value::Null), s),
                })
                .collect()
        })
        .collect();
    let n = columns.len();
    // Left out first when the terminal is too narrow: the metrics from the last (those every
    // row shares are last), then the params from the last, then the time.
    let metric_cols = (0..n).filter(|&c| matches!(columns[c].source, Source::Metric(_)));
    let param_cols = (0..n).filter(|&c| matches!(columns[c].source, Source::Param(_)));
    let mut droppable: Vec<usize> = metric_cols.rev().collect();
    droppable.extend(param_cols.rev());
    droppable.push(n - 1);
    let headers: Vec<String> = columns
        .iter()
        .map(|c| sanitize::header(&c.header, sanitize::NAME))
        .collect();
    let t = Table {
        right: columns.iter().map(|c| numeric(rows, &c.source)).collect(),
        // Headers of up to 12 columns stay whole: a column is left out before its name is cut
        // to `…curacy`.
        min: columns
            .iter()
            .zip(&headers)
            .map(|(c, h)| match c.source {
                Source::Instance => 16,
                Source::Fingerprint => 11,
                Source::When => 16,
                _ => h.chars().count().clamp(7, 12),
            })
            .collect(),
        droppable,
        headers,
        rows: cells,
    };
    let (text, dropped) = table::text(&t, width);
    print!("{text}");
    if dropped > 0 {
        println!(
            "({dropped} more column{}: --metrics/--params pick them, --csv/--json/--width 0 show all)",
            if dropped == 1 { "" } else { "s" },
        );
    }
    if all_runs {
        println!("(* = the instance's latest artifact)");
    }
}

fn print_json(
    rows: &[Row],
    params: &[String],
    metrics: &[String],
    all_metrics: bool,
) -> Result<ExitCode> {
    let out: Vec<Value> = rows
        .iter()
        .map(|r| {
            let m = &r.info.manifest;
            let chosen: Map<String, Value> = r
                .metrics
                .iter()
                .filter(|(k, _)| all_metrics || metrics.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            json!({
                "instance": m.instance, "stage": m.stage, "fingerprint": m.fingerprint,
                "run_id": m.record.run_id, "finished": m.record.finished,
                "duration_ms": m.record.duration_ms, "current": r.info.current,
                "artifact": r.info.dir, "params": r.params, "metrics": chosen,
            })
        })
        .collect();
    let v = json!({"columns": {"params": params, "metrics": metrics}, "rows": out});
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(ExitCode::SUCCESS)
}

/// The column a `--sort` or `--where` names.
fn resolve(name: &str, rows: &[Row]) -> Result<Source, UserError> {
    let has_param = |k: &str| rows.iter().any(|r| r.params.contains_key(k));
    let has_metric = |k: &str| rows.iter().any(|r| r.metrics.contains_key(k));
    match name {
        "instance" => return Ok(Source::Instance),
        "stage" => return Ok(Source::Stage),
        "fingerprint" => return Ok(Source::Fingerprint),
        "when" | "finished" => return Ok(Source::When),
        _ => {}
    }
    if let Some(k) = name.strip_prefix("params.").filter(|k| has_param(k)) {
        return Ok(Source::Param(k.into()));
    }
    if let Some(k) = name.strip_prefix("metrics.").filter(|k| has_metric(k)) {
        return Ok(Source::Metric(k.into()));
    }
    if has_param(name) {
        return Ok(Source::Param(name.into()));
    }
    if has_metric(name) {
        return Ok(Source::Metric(name.into()));
    }
    let mut known: BTreeSet<&str> = ["instance", "stage", "fingerprint", "when"].into();
    for r in rows {
        known.extend(r.params.keys().map(String::as_str));
        known.extend(r.metrics.keys().map(String::as_str));
    }
    let known: Vec<&str> = known.into_iter().collect();
    Err(UserError::new(format!("no column `{name}` in these rows"))
        .with_help(suggestion(name, &known)))
}

/// Numbers compare as numbers, anything else as its text.
fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => raw(a).cmp(&raw(b)),
    }
}

/// Stable; rows without the column go last in either order.
fn sort(rows: &mut [Row], by: &Source, desc: bool) {
    rows.sort_by(|a, b| match (a.get(by), b.get(by)) {
        (Some(x), Some(y)) if desc => compare(&y, &x),
        (Some(x), Some(y)) => compare(&x, &y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
}

/// `--where COL OP VALUE`.
struct Filter {
    source: Source,
    op: &'static str,
    value: String,
}

impl Filter {
    fn parse(s: &str, rows: &[Row]) -> Result<Filter, UserError> {
        let bad = || {
            UserError::new(format!("--where {s}: expected COL OP VALUE"))
                .with_help("OP is one of = != < <= > >=, e.g. --where share_type=all or --where eval.mlm_accuracy>=0.4")
        };
        let at = s.find(['=', '!', '<', '>']).ok_or_else(bad)?;
        let op = ["!=", "<=", ">=", "=", "<", ">"]
            .into_iter()
            .find(|op| s[at..].starts_with(op))
            .ok_or_else(bad)?;
        let col = s[..at].trim();
        if col.is_empty() {
            return Err(bad());
        }
        Ok(Filter {
            source: resolve(col, rows)?,
            op,
            value: s[at + op.len()..].trim().to_string(),
        })
    }

    /// A row without the column matches no filter on it.
    fn holds(&self, r: &Row) -> bool {
        let Some(v) = r.get(&self.source) else {
            return false;
        };
        let ord = match (v.as_f64(), self.value.parse::<f64>()) {
            (Some(x), Ok(y)) => x.total_cmp(&y),
            _ => raw(&v).as_str().cmp(self.value.as_str()),
        };
        use std::cmp::Ordering::*;
        match self.op {
            "=" => ord == Equal,
            "!=" => ord != Equal,
            "<" => ord == Less,
            "<=" => ord != Greater,
            ">" => ord == Greater,
            _ => ord != Less,
        }
    }
}
