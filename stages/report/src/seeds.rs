//! Fine-tuning runs that differ only in their `seed` coordinate are one row of a table: the
//! mean over the seeds with its sample standard deviation. A single fine-tuning run of a small
//! model moves by a point or more from seed to seed, so a table of single runs would rank
//! noise.

use polars::prelude::*;
use serde_json::Value;

use crate::deps::Dep;
use crate::sizes::round;

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
        let rest = other_coords(d);
        if self.runs.len() == 1 || !d.coords.contains_key(SEED) {
            d.instance.clone()
        } else if rest.is_empty() {
            d.stage.clone()
        } else {
            format!("{}@{rest}", d.stage)
        }
    }
}

/// `init=random,step=0`: the coordinates of a run but its seed.
fn other_coords(d: &Dep) -> String {
    let rest: Vec<String> = d
        .coords
        .iter()
        .filter(|(k, _)| k.as_str() != SEED)
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect();
    rest.join(",")
}

fn value_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The group key of a run: its stage and every coordinate but the seed.
fn key(d: &Dep) -> String {
    format!("{}@{}", d.stage, other_coords(d))
}

/// A score of a run (a percentage, seconds), `None` where the run has none.
pub type Score<'s> = &'s dyn Fn(&Dep) -> Option<f64>;

/// Groups runs by stage and every coordinate but the seed, keeping the order in which each
/// group's first run appears, with each score's mean and sd over each group's runs.
pub fn fold<'a, const N: usize>(
    runs: &[&'a Dep],
    scores: &[Score<'_>; N],
) -> Vec<(SeedGroup<'a>, [Option<MeanSd>; N])> {
    let keys = runs.iter().map(|d| key(d)).collect();
    let columns = scores
        .iter()
        .map(|f| runs.iter().map(|d| f(d)).collect())
        .collect();
    by_key(keys, columns)
        .into_iter()
        .map(|(rows, stats)| {
            let runs = rows.iter().map(|&i| runs[i]).collect();
            (SeedGroup { runs }, std::array::from_fn(|i| stats[i]))
        })
        .collect()
}

/// One group of [`by_key`]: the indices of its rows, and each score column's [`MeanSd`].
pub type Folded = (Vec<usize>, Vec<Option<MeanSd>>);

/// Mean and sample standard deviation (n − 1) of each score column per key, by polars: a frame
/// of one row per run (its key, its index, its scores) partitioned by key in the order the keys
/// first appear. Per group: the rows' indices, and each column's [`MeanSd`] (`None` where
/// the group has no value of it).
pub fn by_key(keys: Vec<String>, scores: Vec<Vec<Option<f64>>>) -> Vec<Folded> {
    // The frame is built here from columns of one length with distinct names: polars cannot
    // refuse it or its partitions, so an error is a bug in this function.
    fold_frame(keys, scores).expect("the seeds frame is well formed")
}

fn fold_frame(keys: Vec<String>, scores: Vec<Vec<Option<f64>>>) -> PolarsResult<Vec<Folded>> {
    let height = keys.len();
    if height == 0 {
        return Ok(Vec::new());
    }
    let mut columns = vec![
        Column::new("key".into(), keys),
        Column::new("row".into(), (0..height as i64).collect::<Vec<i64>>()),
    ];
    for (i, values) in scores.iter().enumerate() {
        columns.push(Column::new(format!("score{i}").into(), values));
    }
    let df = DataFrame::new(height, columns)?;
    let mut out = Vec::new();
    for part in df.partition_by_stable(["key"], false)? {
        let rows = part
            .column("row")?
            .i64()?
            .into_no_null_iter()
            .map(|i| i as usize)
            .collect();
        let mut stats = Vec::with_capacity(scores.len());
        for i in 0..scores.len() {
            stats.push(mean_sd_of(part.column(&format!("score{i}"))?)?);
        }
        out.push((rows, stats));
    }
    Ok(out)
}

/// The mean and sample sd of a column's values, `None` when it has none; `sd` `None` for one.
fn mean_sd_of(c: &Column) -> PolarsResult<Option<MeanSd>> {
    let n = c.len() - c.null_count();
    let mean = c.mean_reduce()?.value().extract::<f64>();
    let sd = c.std_reduce(1)?.value().extract::<f64>().filter(|_| n > 1);
    Ok(mean.filter(|_| n > 0).map(|mean| MeanSd { mean, sd, n }))
}

/// Mean and sample standard deviation (n − 1) of the values present; `sd` is `None` for a
/// single value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanSd {
    pub mean: f64,
    pub sd: Option<f64>,
    pub n: usize,
}

/// [`MeanSd`] of the values present, `None` when there are none.
pub fn mean_sd(values: impl IntoIterator<Item = Option<f64>>) -> Option<MeanSd> {
    let values: Vec<Option<f64>> = values.into_iter().collect();
    let keys = vec![String::new(); values.len()];
    by_key(keys, vec![values])
        .pop()
        .and_then(|(_, mut stats)| stats.pop().flatten())
}

/// The mean rounded to 2 decimals (a table's data column).
pub fn mean2(m: Option<MeanSd>) -> Option<f64> {
    m.map(|m| round(m.mean, 2))
}

/// The sd rounded to 2 decimals, `None` for one run.
pub fn sd2(m: Option<MeanSd>) -> Option<f64> {
    m.and_then(|m| m.sd).map(|s| round(s, 2))
}

/// `2, 3 / 3`: the epoch each seed kept, and the epochs trained.
pub fn epochs_cell(g: &SeedGroup<'_>) -> Option<String> {
    let best: Vec<String> = g
        .runs
        .iter()
        .map(|d| {
            d.finetune()
                .best_epoch
                .map_or("–".into(), |b| b.to_string())
        })
        .collect();
    let epochs = g.first().finetune().epochs?;
    Some(format!("{} / {epochs}", best.join(", ")))
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
        let tail: Vec<String> = coords
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        Dep::new(
            &format!("{stage}@{}", tail.join(",")),
            DepKind::Finetune,
            Value::Null,
        )
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
        let groups: Vec<SeedGroup> = fold(&[&a, &b, &c, &d], &[])
            .into_iter()
            .map(|(g, _)| g)
            .collect();
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

    #[test]
    fn polars_gives_the_two_pass_mean_and_sd_of_the_tables() {
        // The figures the tables printed before polars folded them: the mean, then the sum of
        // squared deviations over n − 1, on scores like a table's (percentages, 2 decimals).
        let two_pass = |xs: &[f64]| {
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let ss: f64 = xs.iter().map(|x| (x - mean).powi(2)).sum();
            (mean, (ss / (xs.len() - 1) as f64).sqrt())
        };
        let mut x = 0.618_f64;
        for n in 2..12 {
            let xs: Vec<f64> = (0..n)
                .map(|_| {
                    x = (x * 9301.0 + 0.49297).fract();
                    round(50.0 + 40.0 * x, 2)
                })
                .collect();
            let m = mean_sd(xs.iter().map(|x| Some(*x))).unwrap();
            let (mean, sd) = two_pass(&xs);
            assert!(
                (m.mean - mean).abs() < 1e-9 && (m.sd.unwrap() - sd).abs() < 1e-9,
                "{xs:?}"
            );
            assert_eq!(
                cell(Some(m), 2),
                cell(
                    Some(MeanSd {
                        mean,
                        sd: Some(sd),
                        n
                    }),
                    2
                )
            );
        }
    }
}
