//! A claim on any figure of the experiment's own tables (the `tables` param): the row picked by
//! the values of some of its columns, one column's figure, and one bound. With the tables as
//! data this states a claim of one's own without touching Rust:
//!
//! ```yaml
//! - key: cost
//!   cell: {table: finetune_cost, row: {run: finetune_xnli, init: pretrained},
//!          column: wall_seconds, at_most: 900}
//! ```

use std::collections::BTreeMap;

use pipeline_params::{Number, Text};
use serde::Deserialize;
use serde_json::Value;

use super::{Status, Target};
use crate::table::{Cell, Table};

/// A figure of one row of a declared table, and its bound (one of `at_least`, `at_most`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellClaim {
    /// The declared table's key.
    pub table: Text,
    /// The row: column name → value (its text, or a number), every one must match.
    #[serde(default)]
    pub row: BTreeMap<String, Value>,
    /// The column whose figure is judged (a figure's mean: `wall_seconds`, not `_md`).
    pub column: Text,
    pub at_least: Option<Number>,
    pub at_most: Option<Number>,
}

impl CellClaim {
    /// `run = finetune_xnli, init = pretrained`.
    fn row_text(&self) -> String {
        let pairs: Vec<String> = self
            .row
            .iter()
            .map(|(k, v)| format!("{k} = {}", text(v)))
            .collect();
        pairs.join(", ")
    }

    /// `≤ 900`, `≥ 0.5`.
    fn bound_text(&self) -> String {
        match (self.at_least, self.at_most) {
            (Some(lo), _) => format!("≥ {}", lo.0),
            (None, Some(hi)) => format!("≤ {}", hi.0),
            (None, None) => String::new(),
        }
    }
}

/// A value as the row's cells print it (`pretrained`, `3`).
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// A cell as text, to be matched against the claim's `row`.
fn cell_text(c: &Cell) -> Option<String> {
    match c {
        Cell::Null => None,
        Cell::Str(s) => Some(s.clone()),
        Cell::Int(n) => Some(n.to_string()),
        Cell::Float(x) => Some(x.to_string()),
    }
}

/// The figure of the one matching row, or why there is none.
fn figure(t: &Table, c: &CellClaim) -> Result<Option<f64>, String> {
    let col = |name: &str| t.cols.iter().position(|x| x.key == name);
    let Some(j) = col(&c.column.0) else {
        return Err(format!("`{}` has no column {}", t.key, c.column.0));
    };
    let mut rows = t.rows.iter().filter(|r| {
        c.row
            .iter()
            .all(|(k, v)| col(k).is_some_and(|i| cell_text(&r[i]).as_deref() == Some(&text(v))))
    });
    match (rows.next(), rows.next()) {
        (Some(r), None) => Ok(match r[j] {
            Cell::Int(n) => Some(n as f64),
            Cell::Float(x) => Some(x),
            _ => None,
        }),
        (None, _) => Err(format!("no row of `{}` with {}", t.key, c.row_text())),
        (Some(_), Some(_)) => Err(format!(
            "more than one row of `{}` with {}",
            t.key,
            c.row_text()
        )),
    }
}

/// The claim judged on the declared tables that were built (a table none of whose stages ran
/// is not among them: not run).
pub(super) fn cell(tables: &[Table], c: &CellClaim) -> Target {
    let row = c.row_text();
    let what = format!(
        "{}: {}{} {}",
        c.table.0,
        c.column.0,
        if row.is_empty() {
            String::new()
        } else {
            format!(" of {row}")
        },
        c.bound_text()
    );
    let found = tables
        .iter()
        .find(|t| t.key == c.table.0)
        .ok_or_else(|| format!("no runs of `{}` among the report's deps", c.table.0))
        .and_then(|t| figure(t, c));
    let (status, brief) = match found {
        Err(why) => (Status::NotRun, why),
        Ok(None) => (Status::NotMeasured, format!("no {} in the row", c.column.0)),
        Ok(Some(x)) => {
            let holds = match (c.at_least, c.at_most) {
                (Some(lo), _) => x >= lo.0,
                (None, hi) => hi.is_some_and(|hi| x <= hi.0),
            };
            let status = if holds { Status::Met } else { Status::Missed };
            (status, format!("{} {x}", c.column.0))
        }
    };
    Target {
        key: String::new(),
        evidence: format!(
            "`{}` {}: {brief} (target {})",
            c.table.0,
            row,
            c.bound_text()
        ),
        what,
        status,
        brief,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Col, Fmt, Kind};
    use serde_json::json;

    fn cost() -> Table {
        let mut t = Table::new(
            "cost",
            "Cost",
            vec![
                Col::new("run", "Run", Kind::Str, Fmt::Text, ""),
                Col::new("init", "Init", Kind::Str, Fmt::Text, ""),
                Col::new("wall", "Wall", Kind::Float, Fmt::Fixed(1), ""),
            ],
        );
        t.push(vec![
            ("run", "ft".into()),
            ("init", "pretrained".into()),
            ("wall", 812.5.into()),
        ]);
        t.push(vec![("run", "ft".into()), ("init", "random".into())]);
        t
    }

    fn claim(v: Value) -> CellClaim {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_row_s_figure_is_judged_against_its_bound() {
        let tables = [cost()];
        let judge = |v: Value| cell(&tables, &claim(v));
        let met = judge(json!({"table": "cost", "row": {"init": "pretrained"},
            "column": "wall", "at_most": 900}));
        assert_eq!(met.status, Status::Met);
        assert_eq!(
            met.evidence,
            "`cost` init = pretrained: wall 812.5 (target ≤ 900)"
        );
        assert_eq!(met.what, "cost: wall of init = pretrained ≤ 900");
        let missed = judge(json!({"table": "cost", "row": {"init": "pretrained"},
            "column": "wall", "at_least": 900}));
        assert_eq!(missed.status, Status::Missed);
        let empty = judge(json!({"table": "cost", "row": {"init": "random"},
            "column": "wall", "at_most": 900}));
        assert_eq!(empty.status, Status::NotMeasured);
        let two = judge(json!({"table": "cost", "row": {"run": "ft"},
            "column": "wall", "at_most": 900}));
        assert_eq!(two.status, Status::NotRun);
        assert!(two.brief.contains("more than one row"), "{}", two.brief);
        let absent = judge(json!({"table": "other", "column": "wall", "at_most": 1}));
        assert_eq!(absent.status, Status::NotRun);
        let no_col = judge(json!({"table": "cost", "column": "nope", "at_most": 1}));
        assert!(
            no_col.brief.contains("has no column nope"),
            "{}",
            no_col.brief
        );
    }
}
