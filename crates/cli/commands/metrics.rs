//! `pipeline metrics`: a table of each stage instance's `metrics.json` across runs (or only
//! each one's latest artifact), flattened to `a.b` keys.

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::inspect;
use serde_json::json;

use crate::global::{Global, load, print_json};
use crate::sanitize;

pub fn metrics(global: &Global, stages: &[String], latest: bool, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let mut rows = inspect::metrics(&p, stages, latest);
    if json {
        print_json(&json!({ "rows": rows }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no metrics yet: stages write them to $PIPELINE_OUT/metrics.json");
        return Ok(ExitCode::SUCCESS);
    }
    // Each row's values cut to a cell as soon as they are flattened, and its record let go:
    // a 60 MB string metric is not kept twice per row.
    let flat: Vec<Vec<(String, String)>> = rows
        .iter_mut()
        .map(|r| {
            let m = std::mem::take(&mut r.metrics);
            inspect::flatten_metrics(&m)
                .into_iter()
                .map(|(k, v)| (k, sanitize::cell(&v, sanitize::CELL)))
                .collect()
        })
        .collect();
    let keys: BTreeSet<&str> = flat.iter().flatten().map(|(k, _)| k.as_str()).collect();
    // Every cell escaped and cut (a key or value of 70,000 characters once panicked the
    // `{:<w$}` padding, whose width must fit in 16 bits), then laid out by the tables' code.
    let mut headers = vec![
        "instance".to_string(),
        "fingerprint".into(),
        "finished".into(),
    ];
    headers.extend(keys.iter().map(|k| sanitize::header(k, sanitize::NAME)));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(&flat)
        .map(|(r, f)| {
            let mark = if r.current { "*" } else { "" };
            let mut row = vec![
                format!("{}{mark}", sanitize::cell(&r.instance, sanitize::NAME)),
                sanitize::prefix(&r.fingerprint, 8),
                sanitize::cell(&r.finished, sanitize::CELL),
            ];
            let value = |k: &&str| f.iter().find(|(fk, _)| fk == k).map(|(_, v)| v.as_str());
            row.extend(
                keys.iter()
                    .map(|k| value(k).unwrap_or_default().to_string()),
            );
            row
        })
        .collect();
    let n = headers.len();
    let table = crate::table::Table {
        headers,
        rows: cells,
        right: vec![false; n],
        ..Default::default()
    };
    print!("{}", crate::table::text(&table, None).0);
    println!("(* = the instance's latest artifact)");
    Ok(ExitCode::SUCCESS)
}
