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
//! ```
//!
//! The errors name the entry and the field (`targets[1].beats_random_init.by_sd must be a
//! number, not "two"`), with one "did you mean" for a misspelt name; the engine adds the stage's
//! file:line:col.

use pipeline_params::{Count, Number, Text};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

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
    BeatsBaselines(BeatsBaselines),
    /// On every task, test scores at `at_least` pretraining budgets or more.
    CurvePoints(CurvePoints),
    /// The GPU work within a wall-clock span.
    DeviceTime(DeviceTime),
}

/// The kinds, as an entry names them.
const KINDS: &[&str] = &[
    "threshold",
    "beats_random_init",
    "beats_baselines",
    "curve_points",
    "device_time",
];

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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeatsBaselines {
    pub at_least: Count,
    pub tasks: Vec<TaskSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurvePoints {
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
    task: Text,
    data: Option<Text>,
    title: Option<Text>,
}

impl TryFrom<Value> for TaskSpec {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        let given = match v {
            Value::String(name) => TaskGiven {
                task: Text(name),
                data: None,
                title: None,
            },
            v @ Value::Object(_) => body::<TaskGiven>(v, "")?,
            v => {
                return Err(format!(
                    "must be a task name or {{task, data, title}}, not {v}"
                ));
            }
        };
        let name = given.task.0.trim().to_string();
        if name.is_empty() {
            return Err("names no task".into());
        }
        Ok(TaskSpec {
            title: given.title.map_or_else(|| name.clone(), |t| t.0),
            data: given.data.map(|d| d.0).filter(|d| !d.is_empty()),
            name,
        })
    }
}

/// `T` from a map, at `at`: an unknown field with the closest known one, a wrong value with its
/// path (`at.by_sd must be a number, not "two"`).
fn body<T: DeserializeOwned>(v: Value, at: &str) -> Result<T, String> {
    let Value::Object(map) = v else {
        return Err(format!("{at} must be a map, not {v}"));
    };
    let fields = pipeline_params::struct_fields::<T>();
    if let Some(k) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!(
            "{at}{}has no field `{k}`{}; the fields are {}",
            if at.is_empty() { "" } else { " " },
            suggestion(k, fields),
            fields.join(", ")
        ));
    }
    let own: Map<String, Value> = map.into_iter().filter(|(_, v)| !v.is_null()).collect();
    pipeline_params::from_object(&own).map_err(|e| match e.0.strip_prefix(". ") {
        Some(root) if at.is_empty() => root.to_string(),
        Some(root) => format!("{at}: {root}"),
        None if at.is_empty() => e.0,
        None => format!("{at}.{}", e.0),
    })
}

/// The `targets` param: a list of targets with unique keys.
pub fn parse(v: Value) -> Result<Vec<TargetSpec>, String> {
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

/// One entry: `key` and `what` (both optional) and exactly one kind.
fn entry(item: Value, at: &str) -> Result<TargetSpec, String> {
    let Value::Object(mut map) = item else {
        return Err(format!(
            "{at} must be a map with one kind of target ({}), not {item}",
            KINDS.join(", ")
        ));
    };
    let mut text = |k: &str| match map.remove(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(v) => Err(format!("{at}.{k} must be a non-empty string, not {v}")),
    };
    let (key, what) = (text("key")?, text("what")?);
    let known: Vec<&str> = KINDS.iter().copied().chain(["key", "what"]).collect();
    if let Some(k) = map.keys().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(format!(
            "{at}: no kind of target `{k}`{}; the kinds are {}",
            suggestion(k, &known),
            KINDS.join(", ")
        ));
    }
    let mut kinds = map.into_iter();
    let (kind, v) = match (kinds.next(), kinds.next()) {
        (Some(kv), None) => kv,
        (None, _) => {
            return Err(format!(
                "{at} names no kind of target: one of {}",
                KINDS.join(", ")
            ));
        }
        (Some((a, _)), Some((b, _))) => {
            return Err(format!(
                "{at} names two kinds of target, `{a}` and `{b}`: one per entry"
            ));
        }
    };
    let at = format!("{at}.{kind}");
    let claim = match kind.as_str() {
        "threshold" => Claim::Threshold(bounds(v, &at)?),
        "beats_random_init" => Claim::BeatsRandomInit(body(v, &at)?),
        "beats_baselines" => Claim::BeatsBaselines(body(v, &at)?),
        "curve_points" => Claim::CurvePoints(body(v, &at)?),
        _ => Claim::DeviceTime(body(v, &at)?),
    };
    check(&claim, &at)?;
    Ok(TargetSpec {
        key: key.unwrap_or(kind),
        what,
        claim,
    })
}

/// `threshold`: one bound or a list of them.
fn bounds(v: Value, at: &str) -> Result<Vec<Bound>, String> {
    let Value::Array(items) = v else {
        return Ok(vec![body(v, at)?]);
    };
    let all: Vec<Bound> = items
        .into_iter()
        .enumerate()
        .map(|(i, b)| body(b, &format!("{at}[{i}]")))
        .collect::<Result<_, _>>()?;
    if all.is_empty() {
        return Err(format!(
            "{at} is empty: give a {{metric, at_least}} or more"
        ));
    }
    Ok(all)
}

/// What the types cannot say: counts that can be met, a bound each, figures that are figures.
fn check(claim: &Claim, at: &str) -> Result<(), String> {
    let tasks = |tasks: &[TaskSpec]| -> Result<usize, String> {
        match tasks.len() {
            0 => Err(format!("{at}.tasks is empty: name the tasks it is read on")),
            n => Ok(n),
        }
    };
    let positive = |x: f64, what: &str| match x.is_finite() && x > 0.0 {
        true => Ok(()),
        false => Err(format!("{at}.{what} must be above 0, not {x}")),
    };
    match claim {
        Claim::Threshold(bounds) => bounds.iter().try_for_each(|b| {
            let figures = [b.at_least, b.at_most].map(|x| x.map(|n| n.0));
            match figures {
                [Some(x), None] | [None, Some(x)] if x.is_finite() => Ok(()),
                _ => Err(format!(
                    "{at}: `{}` needs one bound, at_least or at_most",
                    b.metric.0
                )),
            }
        }),
        Claim::BeatsRandomInit(b) => {
            tasks(&b.tasks)?;
            positive(b.by_sd.0, "by_sd")?;
            match b.min_seeds.0 {
                0 | 1 => Err(format!(
                    "{at}.min_seeds must be 2 or more (a seed sd needs two seeds), not {}",
                    b.min_seeds.0
                )),
                _ => Ok(()),
            }
        }
        Claim::BeatsBaselines(b) => match (b.at_least.usize(), tasks(&b.tasks)?) {
            (k, n) if k == 0 || k > n => Err(format!(
                "{at}.at_least must be between 1 and the {n} tasks, not {k}"
            )),
            _ => Ok(()),
        },
        Claim::CurvePoints(c) => {
            tasks(&c.tasks)?;
            positive(c.at_least.0 as f64, "at_least")
        }
        Claim::DeviceTime(d) => positive(d.minutes.0, "minutes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse(v).unwrap_err()
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
            "targets[0]: no kind of target `beats_randm_init` (did you mean \
             \"beats_random_init\"?); the kinds are threshold, beats_random_init, \
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
        let two = err(json!([{"device_time": {"minutes": 1}, "curve_points": {}}]));
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
