//! Fine-tuning runs that differ only in their `seed` coordinate are one row of a table: the
//! mean over the seeds with its sample standard deviation. A single fine-tuning run of a small
//! model moves by a point or more from seed to seed, so a table of single runs would rank
//! noise.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::deps::Dep;

/// The matrix coordinate that names a fine-tuning seed.
pub const SEED: &str = "seed";

/// Runs of one stage whose coordinates are equal except for the seed.
pub struct SeedGroup<'a> {
    pub runs: Vec<&'a Dep>,
}

impl SeedGroup<'_> {
    /// The first run, which stands for the group where a single value is needed (config,
    /// protocol, epochs).
    pub fn first(&self) -> &Dep {
        self.runs[0]
    }

    /// The instance name without its seed coordinate: `finetune_xnli@init=random`.
    pub fn name(&self) -> String {
        let d = self.first();
        let rest: Vec<String> = d
            .coords
            .iter()
            .filter(|(k, _)| k.as_str() != SEED)
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        if self.runs.len() == 1 || !d.coords.contains_key(SEED) {
            d.instance.clone()
        } else if rest.is_empty() {
            d.stage.clone()
        } else {
            format!("{}@{}", d.stage, rest.join(","))
        }
    }
}

fn value_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Groups runs by stage and every coordinate but the seed, keeping the order in which each
/// group's first run appears.
pub fn group<'a>(runs: &[&'a Dep]) -> Vec<SeedGroup<'a>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, Vec<&'a Dep>> = BTreeMap::new();
    for d in runs {
        let key: Vec<String> = d
            .coords
            .iter()
            .filter(|(k, _)| k.as_str() != SEED)
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        let key = format!("{}@{}", d.stage, key.join(","));
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(d);
    }
    order
        .into_iter()
        .filter_map(|k| groups.remove(&k))
        .map(|runs| SeedGroup { runs })
        .collect()
}

/// Mean and sample standard deviation (n − 1) of the values present; `sd` is `None` for a
/// single value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanSd {
    pub mean: f64,
    pub sd: Option<f64>,
    pub n: usize,
}

pub fn mean_sd(values: impl IntoIterator<Item = Option<f64>>) -> Option<MeanSd> {
    let xs: Vec<f64> = values.into_iter().flatten().collect();
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = (n > 1).then(|| {
        let ss: f64 = xs.iter().map(|x| (x - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    Some(MeanSd { mean, sd, n })
}

/// `57.31 ± 0.42` (or `57.31` for one run).
pub fn cell(m: Option<MeanSd>, decimals: usize) -> Option<String> {
    m.map(|m| match m.sd {
        Some(sd) => format!("{:.decimals$} ± {sd:.decimals$}", m.mean),
        None => format!("{:.decimals$}", m.mean),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    fn dep(stage: &str, coords: &[(&str, Value)]) -> Dep {
        let coords: BTreeMap<String, Value> = coords
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let tail: Vec<String> = coords
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        Dep {
            instance: format!("{stage}@{}", tail.join(",")),
            stage: stage.into(),
            coords,
            dir: std::path::PathBuf::new(),
            kind: DepKind::Finetune,
            metrics: Value::Null,
            lines: vec![],
            finished: None,
        }
    }

    #[test]
    fn runs_differing_only_in_seed_form_one_group() {
        let a = dep("ft", &[("init", json!("pretrained")), ("seed", json!(1))]);
        let b = dep("ft", &[("init", json!("random")), ("seed", json!(1))]);
        let c = dep("ft", &[("init", json!("pretrained")), ("seed", json!(2))]);
        let d = dep(
            "other",
            &[("init", json!("pretrained")), ("seed", json!(1))],
        );
        let groups = group(&[&a, &b, &c, &d]);
        let sizes: Vec<usize> = groups.iter().map(|g| g.runs.len()).collect();
        assert_eq!(sizes, vec![2, 1, 1]);
        assert_eq!(groups[0].name(), "ft@init=pretrained");
        assert_eq!(groups[1].name(), "ft@init=random,seed=1");
    }

    #[test]
    fn mean_and_sample_sd() {
        let m = mean_sd([Some(1.0), Some(2.0), None, Some(3.0)]).unwrap();
        assert_eq!(m.n, 3);
        assert!((m.mean - 2.0).abs() < 1e-12);
        assert!((m.sd.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(cell(Some(m), 2).as_deref(), Some("2.00 ± 1.00"));
        let one = mean_sd([Some(57.3)]).unwrap();
        assert_eq!(one.sd, None);
        assert_eq!(cell(Some(one), 1).as_deref(), Some("57.3"));
        assert!(mean_sd([None]).is_none());
    }
}
