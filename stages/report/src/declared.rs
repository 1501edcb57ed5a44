//! Tables declared in the report's params (`tables:`): an experiment's own tables, stated in
//! the pipeline file without touching Rust. A table takes the runs of the stages it names,
//! folds the runs whose coordinates differ only outside `group_by` (the seeds) into one row, and
//! shows each column's metric (a path into the runs' `metrics.json`) as the mean ± sample sd
//! over the row's runs, aggregated by polars ([`seeds::by_key`]).
//!
//! ```yaml
//! tables:
//!   - key: lr_sweep                       # the file stem: lr_sweep.csv, lr_sweep.json
//!     title: ChnSentiCorp by learning rate
//!     stages: [finetune_chnsenticorp]
//!     group_by: [init, learning_rate]     # coordinates; the rest (the seed) is folded
//!     columns:
//!       - {key: test, header: Test %, metric: eval.test.accuracy, scale: 100, decimals: 2}
//!     note: Three seeds per row.
//! ```

use pipeline_engine::ParamError;
use pipeline_params::{Count, Number, Text};
use serde::Deserialize;
use serde_json::Value;

use crate::deps::{Dep, get};
use crate::params::NOTE_KEYS;
use crate::seeds;
use crate::sizes::round;
use crate::table::{Cell, Col, Fmt, Kind, Table};
use crate::targets::spec::typed;

/// One declared table as the param states it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// The file stem and the key of its section; a word of `a-z`, `0-9` and `_`.
    pub key: Text,
    /// The section's heading (default: the key).
    pub title: Option<Text>,
    /// The stages whose runs are the table's rows.
    pub stages: Vec<Text>,
    /// The coordinates that tell the rows apart; runs that differ in no other coordinate
    /// than those left out (the seed) are one row.
    #[serde(default)]
    pub group_by: Vec<Text>,
    /// The figures, each the mean ± sd over a row's runs.
    pub columns: Vec<ColumnSpec>,
    /// A sentence printed under the table.
    pub note: Option<Text>,
}

/// One figure of a declared table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// The column's name in the CSV and JSON (`<key>`, `<key>_sd`).
    pub key: Text,
    /// The Markdown heading (default: the key).
    pub header: Option<Text>,
    /// Where the figure is in each run's metrics.json, dot-separated (`eval.test.accuracy`).
    pub metric: Text,
    /// A factor the figure is multiplied by (100: a fraction shown in %).
    pub scale: Option<Number>,
    /// Decimals shown and kept (default 2).
    pub decimals: Option<Count>,
}

/// A key that is a word and names none of the report's own tables (whose files it would
/// overwrite).
fn check_key(key: &str, what: &str) -> Result<(), String> {
    let word = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !word {
        return Err(format!(
            "{what} {key:?} must be a word of a-z, 0-9 and _ (it names files)"
        ));
    }
    let tasks = pipeline_tasks::task::BUILTIN_TASKS;
    // `published` and `metrics` are files of the report's own (published.json, metrics.json).
    let own = ["published", "metrics"].contains(&key) || NOTE_KEYS.contains(&key);
    if own || tasks.contains(&key) || key.ends_with("_curve") {
        return Err(format!(
            "{what} {key:?} is the name of one of the report's own tables"
        ));
    }
    Ok(())
}

/// The `tables` param: a list of tables with unique keys; errors name the entry and field.
pub fn parse(v: Value) -> Result<Vec<TableSpec>, ParamError> {
    specs(v).map_err(ParamError)
}

/// [`parse`] with its message as text, for the `?` of the field checks below.
fn specs(v: Value) -> Result<Vec<TableSpec>, String> {
    let Value::Array(items) = v else {
        return Err(format!(
            "tables must be a list of tables ([{{key: …, stages: […], columns: […]}}), not {v}"
        ));
    };
    let mut out: Vec<TableSpec> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("tables[{i}]");
        let spec: TableSpec = typed(item, &at)?;
        check_key(&spec.key.0, &format!("{at}.key"))?;
        if out.iter().any(|t| t.key == spec.key) {
            return Err(format!("{at}.key {:?} is another table's", spec.key.0));
        }
        if spec.stages.is_empty() || spec.columns.is_empty() {
            return Err(format!(
                "{at} needs at least one of `stages` and of `columns`"
            ));
        }
        let mut names: Vec<&str> = vec!["run", "seeds"];
        for (j, g) in spec.group_by.iter().enumerate() {
            if names.contains(&g.0.as_str()) {
                return Err(format!("{at}.group_by[{j}] {:?} is taken", g.0));
            }
            names.push(&g.0);
        }
        for (j, c) in spec.columns.iter().enumerate() {
            check_key(&c.key.0, &format!("{at}.columns[{j}].key"))?;
            if names.contains(&c.key.0.as_str()) {
                return Err(format!("{at}.columns[{j}].key {:?} is taken", c.key.0));
            }
            names.push(&c.key.0);
        }
        out.push(spec);
    }
    Ok(out)
}

/// A coordinate's value as text (`0.0001`, `random`), `None` where the run has none.
fn coord(d: &Dep, name: &str) -> Option<String> {
    let v = d.coords.get(name)?;
    Some(v.as_str().map_or_else(|| v.to_string(), str::to_string))
}

/// The figure of a column in one run, scaled.
fn figure(d: &Dep, c: &ColumnSpec) -> Option<f64> {
    let path: Vec<&str> = c.metric.0.split('.').collect();
    let x = get(&d.metrics, &path)?.as_f64()?;
    Some(x * c.scale.map_or(1.0, |s| s.0))
}

/// The table's columns: the run, the grouping coordinates, the seeds, then each figure's
/// mean and sd (data) and `mean ± sd` (Markdown).
fn columns(spec: &TableSpec) -> Vec<Col> {
    let text = |key: &str, desc: &str| Col::new(key, key, Kind::Str, Fmt::Text, desc);
    let mut cols = vec![Col::new("run", "Run", Kind::Str, Fmt::Text, "the stage")];
    cols.extend(spec.group_by.iter().map(|g| text(&g.0, "a coordinate")));
    cols.push(Col::new(
        "seeds",
        "Seeds",
        Kind::Int,
        Fmt::Int,
        "runs in the row",
    ));
    for c in &spec.columns {
        let (k, m) = (&c.key.0, &c.metric.0);
        let header = c.header.as_ref().map_or(k, |h| &h.0);
        let number = |key: &str, desc: &str| {
            let mut col = Col::new(key, header, Kind::Float, Fmt::Fixed(decimals(c)), desc);
            col.markdown = false;
            col
        };
        let mut md = Col::new(
            &format!("{k}_md"),
            header,
            Kind::Str,
            Fmt::Text,
            "mean ± sd",
        );
        md.data = false;
        cols.extend([
            number(k, &format!("{m}: mean over the row's runs")),
            number(
                &format!("{k}_sd"),
                &format!("{m}: sample sd over the row's runs"),
            ),
            md,
        ]);
    }
    cols
}

fn decimals(c: &ColumnSpec) -> usize {
    c.decimals.map_or(2, |d| d.0 as usize)
}

/// The declared table on the deps: `None` when none of its stages ran.
pub fn table(spec: &TableSpec, deps: &[Dep]) -> Option<Table> {
    let mut runs: Vec<&Dep> = deps
        .iter()
        .filter(|d| !d.metrics.is_null() && spec.stages.iter().any(|s| s.0 == d.stage))
        .collect();
    if runs.is_empty() {
        return None;
    }
    // The engine's order of the deps is not the report's: rows follow the instance names.
    runs.sort_by(|a, b| a.instance.cmp(&b.instance));
    let group =
        |d: &Dep| -> Vec<Option<String>> { spec.group_by.iter().map(|g| coord(d, &g.0)).collect() };
    let keys = runs
        .iter()
        .map(|d| format!("{}\u{1f}{:?}", d.stage, group(d)))
        .collect();
    let scores = spec
        .columns
        .iter()
        .map(|c| runs.iter().map(|d| figure(d, c)).collect())
        .collect();
    let title = spec.title.as_ref().map_or(&spec.key.0, |t| &t.0);
    let mut t = Table::new(&spec.key.0, title, columns(spec));
    for (rows, stats) in seeds::by_key(keys, scores) {
        let first = runs[rows[0]];
        let mut cells: Vec<(String, Cell)> = vec![
            ("run".into(), first.stage.as_str().into()),
            ("seeds".into(), (rows.len() as u64).into()),
        ];
        for (g, v) in spec.group_by.iter().zip(group(first)) {
            cells.push((g.0.clone(), v.into()));
        }
        for (c, m) in spec.columns.iter().zip(stats) {
            let d = decimals(c);
            cells.push((c.key.0.clone(), m.map(|m| round(m.mean, d as i32)).into()));
            let sd = m.and_then(|m| m.sd).map(|s| round(s, d as i32));
            cells.push((format!("{}_sd", c.key.0), sd.into()));
            cells.push((format!("{}_md", c.key.0), seeds::cell(m, d).into()));
        }
        t.push(cells.iter().map(|(k, v)| (k.as_str(), v.clone())).collect());
    }
    t.notes
        .extend(spec.note.as_ref().map(|n| n.0.trim().to_string()));
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    fn spec(v: Value) -> Result<Vec<TableSpec>, String> {
        specs(v)
    }

    fn lr_sweep() -> TableSpec {
        spec(json!([{"key": "lr_sweep", "title": "By learning rate",
            "stages": ["ft"], "group_by": ["lr"],
            "columns": [{"key": "test", "header": "Test %", "metric": "eval.test.accuracy",
                         "scale": 100, "decimals": 1}],
            "note": "Three seeds."}]))
        .unwrap()
        .remove(0)
    }

    fn run(lr: &str, seed: u64, acc: f64) -> Dep {
        Dep::new(
            &format!("ft@lr={lr},seed={seed}"),
            DepKind::Finetune,
            json!({"eval": {"test": {"accuracy": acc}}}),
        )
    }

    #[test]
    fn runs_are_grouped_by_the_named_coordinates_with_mean_and_sd() {
        let deps = vec![
            run("0.001", 2, 0.72),
            run("0.0001", 1, 0.60),
            run("0.001", 1, 0.70),
            run("0.001", 3, 0.74),
            Dep::new("other@lr=0.001", DepKind::Finetune, json!({})),
        ];
        let t = table(&lr_sweep(), &deps).unwrap();
        let j = t.json(serde_json::Map::new()).unwrap();
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{j:#}");
        assert_eq!(rows[0]["lr"], "0.0001");
        assert_eq!(rows[0]["seeds"], 1);
        assert_eq!(rows[0]["test_sd"], Value::Null, "one run has no sd");
        // 70, 72, 74 %: mean 72, sample sd 2.
        assert_eq!(rows[1]["test"], json!(72.0));
        assert_eq!(rows[1]["test_sd"], json!(2.0));
        let md = t.markdown().unwrap();
        assert!(md.contains("| ft | 0.001 | 3 | 72.0 ± 2.0 |"), "{md}");
        assert_eq!(t.notes, ["Three seeds."]);
        assert!(table(&lr_sweep(), &deps[4..]).is_none(), "no run of `ft`");
    }

    #[test]
    fn bad_tables_are_errors_that_name_the_entry() {
        let err = |v: Value| spec(v).unwrap_err();
        assert!(err(json!({"key": "x"})).contains("must be a list"));
        let e = err(json!([{"key": "x", "stages": ["a"], "colums": []}]));
        assert!(e.contains("tables[0] has no field `colums`"), "{e}");
        assert!(e.contains("did you mean \"columns\""), "{e}");
        let e = err(json!([{"key": "lcqmc", "stages": ["a"],
            "columns": [{"key": "t", "metric": "m"}]}]));
        assert!(e.contains("the report's own tables"), "{e}");
        let e = err(json!([{"key": "A b", "stages": ["a"],
            "columns": [{"key": "t", "metric": "m"}]}]));
        assert!(e.contains("must be a word"), "{e}");
        let e = err(json!([{"key": "x", "stages": ["a"],
            "columns": [{"key": "t", "metric": "m", "decimals": "2"}]}]));
        assert!(e.starts_with("tables[0].columns[0].decimals"), "{e}");
        let e = err(json!([{"key": "x", "stages": ["a"], "group_by": ["seeds"],
            "columns": [{"key": "seeds", "metric": "m"}]}]));
        assert!(e.contains("is taken"), "{e}");
        let e = err(json!([{"key": "published", "stages": ["a"],
            "columns": [{"key": "t", "metric": "m"}]}]));
        assert!(e.contains("the report's own tables"), "{e}");
        let e = err(json!([{"key": "x", "stages": ["a"], "group_by": ["run"],
            "columns": [{"key": "t", "metric": "m"}]}]));
        assert!(e.contains("tables[0].group_by[0] \"run\" is taken"), "{e}");
        let e = err(json!([{"key": "x", "stages": [], "columns": []}]));
        assert!(e.contains("at least one"), "{e}");
    }
}
