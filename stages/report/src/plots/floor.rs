//! The no-context floor on the pretraining MLM-accuracy figure: a flat line at the accuracy a
//! model reaches from label frequencies and copying visible tokens alone, which the pretrain
//! stage copies from its mask dep into `eval.floor` (docs/metrics.md). A run whose curve lies
//! on it has learnt nothing from context; runs without a floor (an older mask artifact) draw
//! none.

use serde_json::Value;

use super::{Series, TRAINING_CAPTION};
use crate::deps::Dep;

/// The MLM-accuracy figure's caption when it draws a floor.
pub(super) fn caption() -> String {
    format!(
        "{TRAINING_CAPTION} · flat line: no-context floor (label frequencies and copying, no \
         context)"
    )
}

/// The floor's accuracy a pretrain run's metrics carry (`eval.floor.mlm_accuracy`).
fn floor_accuracy(d: &Dep) -> Option<f64> {
    d.pretrain()
        .eval
        .as_ref()
        .and_then(|e| e.get("floor"))
        .and_then(|f| f.get("mlm_accuracy"))
        .and_then(Value::as_f64)
        .filter(|a| a.is_finite())
}

/// One flat line per distinct floor of `deps` from step 0 to `x_max`, in colours from
/// `first_colour` on (after the runs' own): runs on the same masking share one line, labelled
/// `no-context floor`, or with several floors by the first run that has each.
pub(super) fn floor_series(deps: &[&Dep], first_colour: usize, x_max: f64) -> Vec<Series> {
    let mut floors: Vec<(f64, &str)> = Vec::new();
    for d in deps {
        if let Some(a) = floor_accuracy(d)
            && !floors.iter().any(|(b, _)| *b == a)
        {
            floors.push((a, &d.instance));
        }
    }
    let several = floors.len() > 1;
    floors
        .into_iter()
        .enumerate()
        .map(|(k, (a, instance))| Series {
            label: if several {
                format!("no-context floor · {instance}")
            } else {
                "no-context floor".into()
            },
            points: vec![(0.0, a), (x_max.max(1.0), a)],
            marked: false,
            colour: first_colour + k,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    fn run(instance: &str, eval: Value) -> Dep {
        Dep {
            instance: instance.into(),
            stage: "pretrain".into(),
            coords: Default::default(),
            dir: "/nonexistent".into(),
            kind: DepKind::Pretrain,
            metrics: json!({"steps": 20, "eval": eval}),
            lines: vec![
                json!({"step": 10, "mlm_accuracy": 0.1}),
                json!({"step": 20, "eval_mlm_accuracy": 0.3}),
            ],
            finished: None,
        }
    }

    #[test]
    fn runs_on_one_masking_share_a_floor_and_older_runs_draw_none() {
        let floor = json!({"mlm_accuracy": 0.13, "floor": {"mlm_accuracy": 0.128,
            "mlm_loss": 6.2}, "above_floor": false});
        let (a, b) = (run("pretrain@a", floor.clone()), run("pretrain@b", floor));
        let old = run("pretrain@old", json!({"mlm_accuracy": 0.4}));
        let s = floor_series(&[&a, &b, &old], 3, 20.0);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].label, "no-context floor");
        assert_eq!(s[0].points, vec![(0.0, 0.128), (20.0, 0.128)]);
        assert_eq!((s[0].colour, s[0].marked), (3, false));
        assert!(floor_series(&[&old], 1, 20.0).is_empty());
        let other = run(
            "pretrain@other",
            json!({"floor": {"mlm_accuracy": 0.2, "mlm_loss": 5.0}}),
        );
        let s = floor_series(&[&a, &other], 2, 20.0);
        let labels: Vec<&str> = s.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "no-context floor · pretrain@a",
                "no-context floor · pretrain@other"
            ]
        );
    }

    #[test]
    fn the_mlm_accuracy_figure_draws_the_floor_and_says_what_it_is() {
        let a = run(
            "pretrain@a",
            json!({"floor": {"mlm_accuracy": 0.128, "mlm_loss": 6.2}}),
        );
        let figures = super::super::pretraining(&[&a]);
        let mlm = figures
            .iter()
            .find(|f| f.file.ends_with("pretrain_mlm_accuracy.svg"))
            .unwrap();
        let floor = mlm.series.last().unwrap();
        assert_eq!(floor.points, vec![(0.0, 0.128), (20.0, 0.128)]);
        assert_eq!(mlm.caption.as_deref(), Some(caption().as_str()));
        assert!(mlm.svg().unwrap().contains("no-context floor"));
        // The loss figure is MLM + SOP: no floor there.
        assert!(figures.iter().all(|f| f.file.ends_with("mlm_accuracy.svg")
            || f.series.iter().all(|s| !s.label.contains("floor"))));
        // A run without a floor: the figure as before.
        let old = run("pretrain@old", json!({"mlm_accuracy": 0.3}));
        let figures = super::super::pretraining(&[&old]);
        assert!(
            figures
                .iter()
                .all(|f| f.caption.as_deref() == Some(TRAINING_CAPTION))
        );
    }
}
