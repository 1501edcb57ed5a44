//! Matrix coordinates: how instances are named, how a stage's axes combine with those it
//! inherits from its deps, and which dep instances an instance takes.
//!
//! Everything here is linear in the number of instances (hash lookups keyed by the values'
//! JSON text): a 10,000-value matrix with a dependent stage used to take ~14 s to plan, because
//! each dependent instance scanned every dep instance.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::Instance;

/// An instance's matrix coordinates: axis name → value.
pub type Coords = BTreeMap<String, Value>;

/// The union of two coordinate sets, or `None` when they give a shared axis different values.
pub(super) fn merge(a: &Coords, b: &Coords) -> Option<Coords> {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(existing) if existing != v => return None,
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(out)
}

fn product(matrix: &[(String, Vec<Value>)]) -> Vec<Vec<(String, Value)>> {
    let mut out = vec![Vec::new()];
    for (axis, values) in matrix {
        out = out
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |v| {
                    let mut next = base.clone();
                    next.push((axis.clone(), v.clone()));
                    next
                })
            })
            .collect();
    }
    out
}

/// A matrix value as it appears in an instance's name.
pub fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `stage` alone without coordinates, else `stage@axis=value,...` in axis order.
pub(super) fn instance_name(stage: &str, coords: &Coords) -> String {
    if coords.is_empty() {
        return stage.to_string();
    }
    let parts: Vec<String> = coords
        .iter()
        .map(|(k, v)| format!("{k}={}", display_value(v)))
        .collect();
    format!("{stage}@{}", parts.join(","))
}

/// Canonical text of coordinates (BTreeMap order, serde_json's text of each value).
fn key(coords: &Coords) -> String {
    serde_json::to_string(coords).unwrap_or_default()
}

/// Inherited coordinates: the join of the deps' instances on shared axes.
pub(super) fn inherited_coords<'a>(
    deps: impl Iterator<Item = &'a Vec<usize>>,
    instances: &[Instance],
) -> Vec<Coords> {
    let mut inherited: Vec<Coords> = vec![BTreeMap::new()];
    for dep_instances in deps {
        let mut next = Vec::new();
        let mut seen = HashSet::new();
        for base in &inherited {
            for &d in dep_instances {
                if let Some(merged) = merge(base, &instances[d].coords)
                    && seen.insert(key(&merged))
                {
                    next.push(merged);
                }
            }
        }
        inherited = next;
    }
    inherited
}

/// Each inherited coordinate set with each point of the stage's own matrix that agrees with
/// it: the instance's coordinates and its own part of them.
pub(super) fn combine(
    inherited: Vec<Coords>,
    matrix: &[(String, Vec<Value>)],
) -> Vec<(Coords, Coords)> {
    let points: Vec<Coords> = product(matrix)
        .into_iter()
        .map(|own| own.into_iter().collect())
        .collect();
    let mut combos = Vec::new();
    for base in inherited {
        for own in &points {
            if let Some(merged) = merge(&base, own) {
                combos.push((merged, own.clone()));
            }
        }
    }
    combos
}

/// The instances of one stage by their coordinates, so that a dependent instance finds the
/// dep instances whose coordinates it contains without scanning them all.
#[derive(Default)]
pub(super) struct CoordIndex {
    /// Per set of axes (a stage's instances normally share one): projected values → instances.
    groups: Vec<(Vec<String>, ByValues)>,
}

/// The canonical text of projected coordinates → the instances that have them.
type ByValues = HashMap<String, Vec<usize>>;

impl CoordIndex {
    pub(super) fn new(members: &[usize], instances: &[Instance]) -> CoordIndex {
        let mut index = CoordIndex::default();
        for &i in members {
            let coords = &instances[i].coords;
            let axes: Vec<String> = coords.keys().cloned().collect();
            let pos = match index.groups.iter().position(|(a, _)| *a == axes) {
                Some(pos) => pos,
                None => {
                    index.groups.push((axes, HashMap::new()));
                    index.groups.len() - 1
                }
            };
            index.groups[pos].1.entry(key(coords)).or_default().push(i);
        }
        index
    }

    /// The members whose coordinates all agree with `coords`, in index order.
    pub(super) fn within(&self, coords: &Coords) -> Vec<usize> {
        let mut out = Vec::new();
        for (axes, by_key) in &self.groups {
            let projected: Option<Coords> = axes
                .iter()
                .map(|a| coords.get(a).map(|v| (a.clone(), v.clone())))
                .collect();
            if let Some(found) = projected.and_then(|p| by_key.get(&key(&p))) {
                out.extend(found);
            }
        }
        out.sort_unstable();
        out
    }
}
