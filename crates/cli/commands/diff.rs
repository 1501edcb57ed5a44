//! `pipeline diff A B`: what differs between two artifacts, two instances or one instance at
//! two runs: the fingerprint's components as the manifests keep them (kind, code version,
//! params, input file digests, deps' output digests), the output files, and the metrics with
//! their deltas.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pipeline_engine::error::suggestion;
use pipeline_engine::inspect::{self, ArtifactInfo};
use pipeline_engine::{Pipeline, UserError};
use serde::Serialize;
use serde_json::{Value, json};
use unicode_width::UnicodeWidthStr;

use crate::global::Global;
use crate::sanitize;
use crate::table::{compact, compact_f64, flatten};

#[derive(Debug, Args)]
#[command(
    after_help = "An artifact is named by an instance (its latest artifact), `NAME~N` (the \
N-th artifact before the latest, as `git` counts), or a fingerprint prefix (4 or more hex digits, \
as `pipeline exp show` prints them).

Examples:
  pipeline diff 'pretrain@share_type=all' 'pretrain@share_type=none'
  pipeline diff finetune_lcqmc              its latest artifact against the one before
  pipeline diff pretrain~2 3f2a9c1e --json"
)]
pub struct DiffArgs {
    /// The first artifact.
    pub a: String,
    /// The second (default: A itself, compared with the artifact before it, `A~1`).
    pub b: Option<String>,
    /// One JSON object with every difference (docs/cli-contract.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Side {
    instance: String,
    stage: String,
    fingerprint: String,
    run_id: String,
    finished: String,
    artifact: PathBuf,
}

/// One key whose value differs; `None` where a side does not have it.
#[derive(Debug, Serialize)]
struct Change {
    key: String,
    a: Option<Value>,
    b: Option<Value>,
}

#[derive(Debug, Serialize)]
struct MetricChange {
    key: String,
    a: Option<Value>,
    b: Option<Value>,
    /// b − a, where both are numbers.
    delta: Option<f64>,
    /// delta / |a|, where a is a non-zero number.
    relative: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Diff {
    a: Side,
    b: Side,
    same_fingerprint: bool,
    kind: Option<Change>,
    code_version: Option<Change>,
    params: Vec<Change>,
    inputs: Vec<Change>,
    deps: Vec<Change>,
    outputs: Vec<Change>,
    metrics: Vec<MetricChange>,
    /// How many of each there are in all (the union of both sides).
    totals: BTreeMap<&'static str, usize>,
}

pub fn diff(global: &Global, args: &DiffArgs) -> Result<ExitCode> {
    let p = crate::global::load(global)?;
    let all = inspect::artifacts(&p, &[], false);
    let (a, b) = match &args.b {
        Some(b) => (resolve(&p, &all, &args.a)?, resolve(&p, &all, b)?),
        None => (
            resolve(&p, &all, &format!("{}~1", args.a))?,
            resolve(&p, &all, &args.a)?,
        ),
    };
    let d = compute(a, b);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        print_text(&d);
    }
    Ok(ExitCode::SUCCESS)
}

/// The artifact a reference names (see the command's help): an instance or a stage with one
/// instance, `~N` steps back in its history, or a fingerprint prefix.
fn resolve<'a>(
    p: &Pipeline,
    all: &'a [ArtifactInfo],
    reference: &str,
) -> Result<&'a ArtifactInfo, UserError> {
    let (name, back) = match reference.rsplit_once('~') {
        Some((n, k)) if k.parse::<usize>().is_ok() => (n, k.parse::<usize>().unwrap_or(0)),
        _ => (reference, 0),
    };
    if let Some(found) = by_name(all, name, back)? {
        return Ok(found);
    }
    let hex = name.len() >= 4 && name.chars().all(|c| c.is_ascii_hexdigit());
    if hex
        && back == 0
        && let Some(found) = by_fingerprint(all, name)?
    {
        return Ok(found);
    }
    Err(not_found(p, all, name))
}

/// The artifacts of an instance (or of a stage with one instance), the index's first, then
/// newest first; `back` steps into them. `None` when the name has none.
fn by_name<'a>(
    all: &'a [ArtifactInfo],
    name: &str,
    back: usize,
) -> Result<Option<&'a ArtifactInfo>, UserError> {
    let mut of: Vec<&ArtifactInfo> = all.iter().filter(|a| a.manifest.instance == name).collect();
    if of.is_empty() {
        let instances: BTreeSet<&str> = all
            .iter()
            .filter(|a| a.manifest.stage == name)
            .map(|a| a.manifest.instance.as_str())
            .collect();
        if instances.len() > 1 {
            return Err(
                UserError::new(format!("`{name}` has several instances; name one"))
                    .with_help(instances.into_iter().collect::<Vec<_>>().join(", ")),
            );
        }
        of = all.iter().filter(|a| a.manifest.stage == name).collect();
    }
    if of.is_empty() {
        return Ok(None);
    }
    // The latest (the index's) first, then the others newest first.
    of.reverse();
    of.sort_by_key(|a| !a.current);
    of.get(back).copied().map(Some).ok_or_else(|| {
        UserError::new(format!(
            "`{name}` has {} artifact{} in the store: `{name}` to `{name}~{}`",
            of.len(),
            if of.len() == 1 { "" } else { "s" },
            of.len() - 1
        ))
    })
}

/// The one artifact whose fingerprint starts with `prefix`; an error when several do.
fn by_fingerprint<'a>(
    all: &'a [ArtifactInfo],
    prefix: &str,
) -> Result<Option<&'a ArtifactInfo>, UserError> {
    let found: Vec<&ArtifactInfo> = all
        .iter()
        .filter(|a| {
            a.manifest
                .fingerprint
                .starts_with(&prefix.to_ascii_lowercase())
        })
        .collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(Some(found[0])),
        _ => {
            let list: Vec<String> = found
                .iter()
                .map(|a| {
                    format!(
                        "{} ({})",
                        sanitize::prefix(&a.manifest.fingerprint, 12),
                        a.manifest.instance
                    )
                })
                .collect();
            Err(UserError::new(format!(
                "the fingerprint prefix `{prefix}` is ambiguous; give more digits"
            ))
            .with_help(list.join(", ")))
        }
    }
}

/// No artifact: not run yet (an instance of the plan), or a name to correct.
fn not_found(p: &Pipeline, all: &[ArtifactInfo], name: &str) -> UserError {
    let in_plan = p
        .plan
        .instances
        .iter()
        .any(|i| i.name == name || i.stage == name);
    let msg = format!("no artifact of `{name}` in the store");
    if in_plan {
        UserError::new(msg).with_help(format!("it has not run yet: `pipeline run {name}`"))
    } else {
        let mut names: BTreeSet<&str> = all.iter().map(|a| a.manifest.instance.as_str()).collect();
        names.extend(p.plan.instances.iter().map(|i| i.name.as_str()));
        let names: Vec<&str> = names.into_iter().collect();
        UserError::new(msg).with_help(suggestion(name, &names))
    }
}

fn side(a: &ArtifactInfo) -> Side {
    let m = &a.manifest;
    Side {
        instance: m.instance.clone(),
        stage: m.stage.clone(),
        fingerprint: m.fingerprint.clone(),
        run_id: m.record.run_id.clone(),
        finished: m.record.finished.clone(),
        artifact: a.dir.clone(),
    }
}

/// The keys whose values differ, in key order.
fn changes(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<Change> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Change {
            key: k.clone(),
            a: a.get(k).cloned(),
            b: b.get(k).cloned(),
        })
        .collect()
}

fn strings(m: &BTreeMap<String, String>) -> BTreeMap<String, Value> {
    m.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
}

/// Deps keyed by their stage where a stage has one dep instance on this side, so that
/// `finetune@x=1` and `finetune@x=2` compare their `pretrain@x=1` and `pretrain@x=2` deps.
fn deps(m: &BTreeMap<String, String>) -> BTreeMap<String, Value> {
    let stage = |i: &str| i.split('@').next().unwrap_or(i).to_string();
    let mut per_stage: BTreeMap<String, usize> = BTreeMap::new();
    for i in m.keys() {
        *per_stage.entry(stage(i)).or_default() += 1;
    }
    m.iter()
        .map(|(i, digest)| {
            let key = if per_stage[&stage(i)] == 1 {
                stage(i)
            } else {
                i.clone()
            };
            (key, json!({"instance": i, "output_digest": digest}))
        })
        .collect()
}

fn compute(a: &ArtifactInfo, b: &ArtifactInfo) -> Diff {
    let (ca, cb) = (&a.manifest.components, &b.manifest.components);
    let one = |key: &str, x: &String, y: &String| {
        (x != y).then(|| Change {
            key: key.into(),
            a: Some(json!(x)),
            b: Some(json!(y)),
        })
    };
    let files = |i: &ArtifactInfo| -> BTreeMap<String, Value> {
        i.manifest
            .files
            .iter()
            .map(|f| (f.path.clone(), json!(f.blake3)))
            .collect()
    };
    let (fa, fb) = (files(a), files(b));
    let params =
        |c: &pipeline_engine::manifest::Components| flatten(&Value::Object(c.params.clone()), true);
    let metric = |i: &ArtifactInfo| {
        i.metrics
            .as_ref()
            .map(|m| flatten(m, false))
            .unwrap_or_default()
    };
    let (ma, mb) = (metric(a), metric(b));
    let union = |x: &BTreeMap<String, Value>, y: &BTreeMap<String, Value>| {
        x.keys().chain(y.keys()).collect::<BTreeSet<_>>().len()
    };
    let totals = BTreeMap::from([
        ("params", union(&params(ca), &params(cb))),
        ("inputs", union(&strings(&ca.inputs), &strings(&cb.inputs))),
        ("deps", union(&deps(&ca.deps), &deps(&cb.deps))),
        ("outputs", union(&fa, &fb)),
        ("metrics", union(&ma, &mb)),
    ]);
    Diff {
        a: side(a),
        b: side(b),
        same_fingerprint: a.manifest.fingerprint == b.manifest.fingerprint,
        kind: one("kind", &ca.kind, &cb.kind),
        code_version: one("code_version", &ca.code_version, &cb.code_version),
        params: changes(&params(ca), &params(cb)),
        inputs: changes(&strings(&ca.inputs), &strings(&cb.inputs)),
        deps: changes(&deps(&ca.deps), &deps(&cb.deps)),
        outputs: changes(&fa, &fb),
        metrics: changes(&ma, &mb)
            .into_iter()
            .map(|c| {
                let (x, y) = (
                    c.a.as_ref().and_then(Value::as_f64),
                    c.b.as_ref().and_then(Value::as_f64),
                );
                let delta = x.zip(y).map(|(x, y)| y - x);
                MetricChange {
                    relative: delta
                        .zip(x)
                        .filter(|(_, x)| *x != 0.0)
                        .map(|(d, x)| d / x.abs()),
                    delta,
                    key: c.key,
                    a: c.a,
                    b: c.b,
                }
            })
            .collect(),
        totals,
    }
}

/// A digest, or a dep's instance and digest, shortened for the text output; any other value
/// as a cell (escaped and cut: the manifests and metrics are files).
fn short(v: &Option<Value>) -> String {
    match v {
        None => "(none)".into(),
        Some(Value::String(s)) if s.len() >= 32 && s.chars().all(|c| c.is_ascii_hexdigit()) => {
            s[..12].to_string()
        }
        Some(Value::Object(o)) => format!(
            "{} ({})",
            sanitize::cell(
                o.get("instance").and_then(Value::as_str).unwrap_or("?"),
                sanitize::NAME
            ),
            sanitize::prefix(
                o.get("output_digest")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                12
            )
        ),
        Some(v) => sanitize::cell(&compact(v), sanitize::CELL),
    }
}

/// A key of a section (a param, an input path, a metric), escaped and cut.
fn key(k: &str) -> String {
    sanitize::cell(k, sanitize::NAME)
}

/// The widest of `keys`, in display columns.
fn widest<'a>(keys: impl Iterator<Item = &'a str>) -> usize {
    keys.map(UnicodeWidthStr::width).max().unwrap_or(0)
}

fn section(title: &str, list: &[Change], total: usize, unit: &str, limit: usize) {
    if list.is_empty() {
        println!("{title:<13} same ({total} {unit})");
        return;
    }
    println!("{title:<13} {} of {total} differ", list.len());
    let keys: Vec<String> = list.iter().take(limit).map(|c| key(&c.key)).collect();
    let w = widest(keys.iter().map(String::as_str));
    for (c, k) in list.iter().zip(&keys) {
        let k = sanitize::pad(k, w, false);
        println!("  {k}  {} → {}", short(&c.a), short(&c.b));
    }
    if list.len() > limit {
        println!(
            "  … and {} more (--json lists them all)",
            list.len() - limit
        );
    }
}

fn print_text(d: &Diff) {
    for (tag, s) in [("a", &d.a), ("b", &d.b)] {
        println!(
            "{tag}  {}  {}  finished {}",
            sanitize::cell(&s.instance, sanitize::NAME),
            sanitize::prefix(&s.fingerprint, 8),
            sanitize::prefix(&s.finished, 16).replacen('T', " ", 1)
        );
    }
    if d.same_fingerprint {
        println!("the same fingerprint: one artifact");
        return;
    }
    println!();
    for c in [&d.kind, &d.code_version].into_iter().flatten() {
        println!(
            "{:<13} {} → {}",
            c.key.replace('_', " "),
            short(&c.a),
            short(&c.b)
        );
    }
    if d.code_version.is_none() {
        println!("{:<13} same", "code version");
    }
    section(
        "params",
        &d.params,
        d.totals["params"],
        "params",
        usize::MAX,
    );
    section("inputs", &d.inputs, d.totals["inputs"], "files", 20);
    section("deps", &d.deps, d.totals["deps"], "deps", usize::MAX);
    section("outputs", &d.outputs, d.totals["outputs"], "files", 10);
    print_metrics(&d.metrics, d.totals["metrics"]);
}

fn print_metrics(list: &[MetricChange], total: usize) {
    if list.is_empty() {
        println!("{:<13} same ({total} metrics)", "metrics");
        return;
    }
    println!("{:<13} {} of {total} differ", "metrics", list.len());
    let keys: Vec<String> = list.iter().map(|c| key(&c.key)).collect();
    let w = widest(keys.iter().map(String::as_str));
    let val = |v: &Option<Value>| {
        v.as_ref().map_or("-".to_string(), |v| {
            sanitize::cell(&compact(v), sanitize::CELL)
        })
    };
    let blank = sanitize::pad("", w, false);
    println!("  {blank}  {:>12}  {:>12}  {:>12}", "a", "b", "Δ");
    for (c, k) in list.iter().zip(&keys) {
        let delta = c.delta.map_or(String::new(), |d| {
            let sign = if d > 0.0 { "+" } else { "" };
            format!("{sign}{}", compact_f64(d))
        });
        let rel = c.relative.map_or(String::new(), |r| {
            format!("  ({}{:.1} %)", if r > 0.0 { "+" } else { "" }, r * 100.0)
        });
        println!(
            "  {}  {:>12}  {:>12}  {:>12}{rel}",
            sanitize::pad(k, w, false),
            val(&c.a),
            val(&c.b),
            delta
        );
    }
}
