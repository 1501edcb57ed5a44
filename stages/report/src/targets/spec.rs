//! The report's `targets` param: an experiment's claims as data in the pipeline file, each a
//! small typed spec that [`super::targets`] judges on the report's rows. One entry is one row of
//! the targets table:
//!
//! ```yaml
//! targets:
//!   - key: pretraining          # the row's key (default: the kind's name)
//!     threshold: [{metric: mlm_accuracy, at_least: 0.30}, {metric: sop_accuracy, at_least: 0.70}]
//!   - beats_random_init: {by_sd: 2, min_seeds: 3, tasks: [chnsenticorp, xnli]}
//!   - beats_baselines: {at_least: 3, tasks: [chnsenticorp, xnli, {task: lcqmc, data: afqmc}]}
//!   - curve_points: {at_least: 3, tasks: [xnli]}
//!   - device_time: {minutes: 12}
//!     what: "All GPU work within 12 minutes"   # the row's wording (default: from the spec)
//!   - cell: {table: finetune_cost, row: {init: pretrained}, column: wall_seconds, at_most: 900}
//! ```
//!
//! The errors name the entry and the field (`targets[1].beats_random_init.by_sd must be a
//! number, not "two"`), with one "did you mean" for a misspelt name; the engine adds the stage's
//! file:line:col.

use pipeline_engine::ParamError;
use pipeline_params::{Count, Number, Text};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::cell::CellClaim;
use crate::params::suggestion;

/// One target as the param states it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// The row's key in the targets table (unique).
    pub key: String,
    /// The target in the user's words; `None`: worded from the spec.
    pub what: Option<String>,
    pub claim: Claim,
}

/// What a target claims, one kind per entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The main pretraining run's final evaluation: every bound holds.
    Threshold(Vec<Bound>),
    /// On every task, pretrained beats random init by more than `by_sd` times the larger seed sd.
    BeatsRandomInit(BeatsRandomInit),
    /// On at least `at_least` tasks, pretrained beats every baseline on the same data.
    BeatsBaselines(AtLeast),
    /// On every task, test scores at `at_least` pretraining budgets or more.
    CurvePoints(AtLeast),
    /// The GPU work within a wall-clock span.
    DeviceTime(DeviceTime),
    /// A figure of a row of one of the experiment's own tables (`tables`), and its bound.
    Cell(CellClaim),
}

/// An entry as written: `key` and `what` (both optional) and one kind.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    key: Option<Text>,
    what: Option<Text>,
    threshold: Option<Vec<Bound>>,
    beats_random_init: Option<BeatsRandomInit>,
    beats_baselines: Option<AtLeast>,
    curve_points: Option<AtLeast>,
    device_time: Option<DeviceTime>,
}

/// A figure of the main run's final evaluation (`mlm_accuracy`: a fraction) and its bound.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bound {
    pub metric: Text,
    pub at_least: Option<Number>,
    pub at_most: Option<Number>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeatsRandomInit {
    pub by_sd: Number,
    pub min_seeds: Count,
    pub tasks: Vec<TaskSpec>,
}

/// A count of tasks (`beats_baselines`) or of a curve's points on each (`curve_points`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtLeast {
    pub at_least: Count,
    pub tasks: Vec<TaskSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceTime {
    pub minutes: Number,
}

/// A task a target is read on: its name in the fine-tuning metrics, a text its stage's training
/// data paths must contain (to pick one protocol of a task run under several), its title.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub struct TaskSpec {
    pub name: String,
    pub data: Option<String>,
    pub title: String,
}

/// A task as written out: `{task: lcqmc, data: afqmc, title: "LCQMC (AFQMC protocol)"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskGiven {
    task: String,
    data: Option<String>,
    title: Option<String>,
}

impl TryFrom<Value> for TaskSpec {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        let given: TaskGiven = match v {
            Value::String(task) => TaskGiven {
                task,
                data: None,
                title: None,
            },
            v @ Value::Object(_) => serde_json::from_value(v).map_err(|e| {
                let e = e.to_string();
                misspelt(&e).unwrap_or(e)
            })?,
            v => {
                return Err(format!(
                    "must be a task name or {{task, data, title}}, not {v}"
                ));
            }
        };
        let name = given.task.trim().to_string();
        if name.is_empty() {
            return Err("names no task".into());
        }
        Ok(TaskSpec {
            title: given.title.unwrap_or_else(|| name.clone()),
            data: given.data.filter(|d| !d.is_empty()),
            name,
        })
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" in the pipeline's words: "has no field
/// `x` (did you mean "a"?); the fields are a, b".
fn misspelt(message: &str) -> Option<String> {
    let (field, expected) = message.strip_prefix("unknown field `")?.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    Some(format!(
        "has no field `{field}`{}; the fields are {}",
        suggestion(field, &known),
        known.join(", ")
    ))
}

/// `T` from a map, errors placed under `at`: `at.by_sd must be a number, not "two"`,
/// `at.curve_points has no field `at_lest` (did you mean "at_least"?); …`.
pub(crate) fn typed<T: DeserializeOwned>(v: Value, at: &str) -> Result<T, ParamError> {
    let Value::Object(map) = v else {
        return Err(ParamError(format!("{at} must be a map, not {v}")));
    };
    pipeline_params::from_object(&map).map_err(|e| {
        let (path, message) = e.0.split_once(' ').unwrap_or((".", &e.0));
        let under = |path: &str| match path {
            "." => at.to_string(),
            path => format!("{at}.{path}"),
        };
        ParamError(match misspelt(message) {
            // The path ends in the misspelt key: the place is the map that holds it.
            Some(m) => format!("{} {m}", under(path.rsplit_once('.').map_or(".", |p| p.0))),
            None if message.starts_with("missing") => format!("{}: {message}", under(path)),
            None => format!("{} {message}", under(path)),
        })
    })
}

/// The `targets` param: a list of targets with unique keys; the error names the entry and the
/// field, and the engine adds where in the pipeline file the stage is.
pub fn parse(v: Value) -> Result<Vec<TargetSpec>, ParamError> {
    targets(v).map_err(ParamError)
}

/// [`parse`] with the message as a `String` (the helpers it calls build them so).
fn targets(v: Value) -> Result<Vec<TargetSpec>, String> {
    let Value::Array(items) = v else {
        return Err(format!(
            "targets must be a list of targets ([{{threshold: …}}, {{beats_random_init: …}}]), \
             not {v}"
        ));
    };
    let mut out: Vec<TargetSpec> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("targets[{i}]");
        let spec = entry(item, &at)?;
        if let Some(j) = out.iter().position(|t| t.key == spec.key) {
            return Err(format!(
                "{at}: key `{}` is also targets[{j}]'s; give each target its own `key`",
                spec.key
            ));
        }
        out.push(spec);
    }
    Ok(out)
}

/// One entry: exactly one kind, checked; `key` defaults to the kind's name.
fn entry(mut item: Value, at: &str) -> Result<TargetSpec, String> {
    // `threshold: {metric, at_least}` is a list of one.
    if let Some(one) = item.get_mut("threshold").filter(|t| t.is_object()) {
        *one = Value::Array(vec![one.take()]);
    }
    // `cell` is read apart from the other kinds, so that the list of fields a misspelt one
    // names stays that of the kinds judged on the experiment's fixed rows.
    let cell = match item.as_object_mut().and_then(|m| m.remove("cell")) {
        Some(c) => Some(typed::<CellClaim>(c, &format!("{at}.cell"))?),
        None => None,
    };
    let e: Entry = typed(item, at)?;
    let given = [
        e.threshold.map(|b| ("threshold", Claim::Threshold(b))),
        e.beats_random_init
            .map(|b| ("beats_random_init", Claim::BeatsRandomInit(b))),
        e.beats_baselines
            .map(|b| ("beats_baselines", Claim::BeatsBaselines(b))),
        e.curve_points
            .map(|c| ("curve_points", Claim::CurvePoints(c))),
        e.device_time.map(|d| ("device_time", Claim::DeviceTime(d))),
        cell.map(|c| ("cell", Claim::Cell(c))),
    ];
    let mut given = given.into_iter().flatten();
    let (kind, claim) = match (given.next(), given.next()) {
        (Some(one), None) => one,
        (None, _) => {
            let fields = pipeline_params::struct_fields::<Entry>();
            let kinds: Vec<&str> = fields
                .iter()
                .copied()
                .filter(|f| !["key", "what"].contains(f))
                .chain(["cell"])
                .collect();
            return Err(format!(
                "{at} names no kind of target: one of {}",
                kinds.join(", ")
            ));
        }
        (Some((a, _)), Some((b, _))) => {
            return Err(format!(
                "{at} names two kinds of target, `{a}` and `{b}`: one per entry"
            ));
        }
    };
    check(&claim, &format!("{at}.{kind}"))?;
    let text = |t: Option<Text>| Some(t?.0.trim().to_string()).filter(|t| !t.is_empty());
    Ok(TargetSpec {
        key: text(e.key).unwrap_or_else(|| kind.to_string()),
        what: text(e.what),
        claim,
    })
}

/// What the types cannot say: counts that can be met, one bound each, figures above 0.
fn check(claim: &Claim, at: &str) -> Result<(), String> {
    let fail = |what: String| Err(format!("{at}{what}"));
    let tasks = |tasks: &[TaskSpec]| tasks.len();
    match claim {
        Claim::Threshold(bounds) if bounds.is_empty() => {
            fail(" is empty: give a {metric, at_least} or more".into())
        }
        Claim::Threshold(bounds) => match bounds.iter().find(|b| {
            let figures = [b.at_least, b.at_most].map(|x| x.map(|n| n.0));
            !matches!(figures, [Some(x), None] | [None, Some(x)] if x.is_finite())
        }) {
            Some(b) => fail(format!(
                ": `{}` needs one bound, at_least or at_most",
                b.metric.0
            )),
            None => Ok(()),
        },
        Claim::BeatsRandomInit(b) if tasks(&b.tasks) == 0 => fail(".tasks is empty".into()),
        Claim::BeatsRandomInit(b) if !(b.by_sd.0.is_finite() && b.by_sd.0 > 0.0) => {
            fail(format!(".by_sd must be above 0, not {}", b.by_sd.0))
        }
        Claim::BeatsRandomInit(b) if b.min_seeds.0 < 2 => fail(format!(
            ".min_seeds must be 2 or more (a seed sd needs two seeds), not {}",
            b.min_seeds.0
        )),
        Claim::BeatsBaselines(c) | Claim::CurvePoints(c) if tasks(&c.tasks) == 0 => {
            fail(".tasks is empty".into())
        }
        Claim::BeatsBaselines(c) if c.at_least.usize() > tasks(&c.tasks) || c.at_least.0 == 0 => {
            fail(format!(
                ".at_least must be between 1 and the {} tasks, not {}",
                tasks(&c.tasks),
                c.at_least.0
            ))
        }
        Claim::CurvePoints(c) if c.at_least.0 == 0 => fail(".at_least must be above 0".into()),
        Claim::Cell(c) => match [c.at_least, c.at_most].map(|x| x.map(|n| n.0)) {
            [Some(x), None] | [None, Some(x)] if x.is_finite() => Ok(()),
            _ => fail(" needs one bound, at_least or at_most".into()),
        },
        Claim::DeviceTime(d) if !(d.minutes.0.is_finite() && d.minutes.0 > 0.0) => {
            fail(format!(".minutes must be above 0, not {}", d.minutes.0))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse(v).unwrap_err().0
    }

    #[test]
    fn every_kind_parses_with_its_defaults() {
        let t = parse(json!([
            {"key": "pretraining", "threshold": [{"metric": "mlm_accuracy", "at_least": 0.3},
                                                 {"metric": "sop_accuracy", "at_least": 0.7}]},
            {"threshold": {"metric": "mlm_loss", "at_most": 3.5}, "what": " Low loss "},
            {"beats_random_init": {"by_sd": 2, "min_seeds": 3,
                "tasks": ["xnli", {"task": "lcqmc", "data": "afqmc", "title": "LCQMC"}]}},
            {"beats_baselines": {"at_least": 1, "tasks": ["xnli"]}},
            {"curve_points": {"at_least": 3, "tasks": ["xnli"]}},
            {"device_time": {"minutes": 12}},
        ]))
        .unwrap();
        let keys: Vec<&str> = t.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "pretraining",
                "threshold",
                "beats_random_init",
                "beats_baselines",
                "curve_points",
                "device_time"
            ]
        );
        assert_eq!(t[1].what.as_deref(), Some("Low loss"));
        let Claim::BeatsRandomInit(b) = &t[2].claim else {
            panic!("{:?}", t[2]);
        };
        assert_eq!((b.by_sd.0, b.min_seeds.0), (2.0, 3));
        assert_eq!(b.tasks[0].title, "xnli");
        assert_eq!(b.tasks[1].data.as_deref(), Some("afqmc"));
        assert_eq!(parse(json!([])).unwrap(), []);
    }

    #[test]
    fn errors_name_the_entry_and_the_field() {
        assert_eq!(
            err(
                json!([{"device_time": {"minutes": 12}}, {"beats_random_init":
                {"by_sd": "two", "min_seeds": 3, "tasks": ["x"]}}])
            ),
            "targets[1].beats_random_init.by_sd must be a number, not \"two\""
        );
        assert_eq!(
            err(json!([{"beats_randm_init": {}}])),
            "targets[0] has no field `beats_randm_init` (did you mean \
             \"beats_random_init\"?); the fields are key, what, threshold, beats_random_init, \
             beats_baselines, curve_points, device_time"
        );
        let e = err(json!([{"wat": "x", "device_time": {"minutes": 1}}]));
        assert!(e.contains("(did you mean \"what\"?)"), "{e}");
        assert_eq!(
            err(json!([{"curve_points": {"at_lest": 3, "tasks": ["x"]}}])),
            "targets[0].curve_points has no field `at_lest` (did you mean \"at_least\"?); the \
             fields are at_least, tasks"
        );
        assert_eq!(
            err(json!([{"curve_points": {"at_least": 3}}])),
            "targets[0].curve_points: missing field `tasks`"
        );
        let e = err(json!([{"curve_points": {"at_least": 3, "tasks": ["x", {"tsk": "y"}]}}]));
        assert!(e.starts_with("targets[0].curve_points.tasks[1]"), "{e}");
        assert!(e.contains("(did you mean \"task\"?)"), "{e}");
        assert!(err(json!({"device_time": {}})).starts_with("targets must be a list"));
        assert!(err(json!([{}])).contains("names no kind of target"));
        let two = err(json!([{"device_time": {"minutes": 1},
                                "curve_points": {"at_least": 1, "tasks": ["x"]}}]));
        assert!(two.contains("two kinds of target"), "{two}");
        let dup = err(json!([{"device_time": {"minutes": 1}}, {"device_time": {"minutes": 2}}]));
        assert!(
            dup.starts_with("targets[1]: key `device_time` is also targets[0]'s"),
            "{dup}"
        );
    }

    #[test]
    fn figures_that_cannot_be_met_are_refused() {
        let tasks = json!(["a", "b"]);
        for (v, says) in [
            (
                json!({"beats_baselines": {"at_least": 3, "tasks": tasks}}),
                "between 1 and the 2",
            ),
            (
                json!({"beats_random_init": {"by_sd": 2, "min_seeds": 1, "tasks": tasks}}),
                "2 or more",
            ),
            (
                json!({"beats_random_init": {"by_sd": -1, "min_seeds": 3, "tasks": tasks}}),
                "above 0",
            ),
            (
                json!({"curve_points": {"at_least": 2, "tasks": []}}),
                "tasks is empty",
            ),
            (
                json!({"device_time": {"minutes": 0}}),
                "minutes must be above 0",
            ),
            (json!({"threshold": {"metric": "m"}}), "needs one bound"),
            (
                json!({"threshold": {"metric": "m", "at_least": 1, "at_most": 2}}),
                "needs one bound",
            ),
            (json!({"threshold": []}), "is empty"),
            (
                json!({"key": 3, "threshold": {"metric": "m", "at_least": 1}}),
                "key must be",
            ),
        ] {
            let e = err(json!([v]));
            assert!(e.contains(says), "{e} should say {says}");
        }
    }
}
