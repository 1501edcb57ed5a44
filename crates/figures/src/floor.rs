//! The no-context floor on the pretraining MLM-accuracy figure: a flat line at the accuracy a
//! model reaches from label frequencies and copying visible tokens alone, which the pretrain
//! stage copies from its mask dep into `eval.floor` (docs/metrics.md). A run whose curve lies
//! on it has learnt nothing from context; runs without a floor (an older mask artifact) draw
//! none.

use crate::{Run, Series, TRAINING_CAPTION};

/// The MLM-accuracy figure's caption when it draws a floor.
pub(crate) fn caption() -> String {
    format!(
        "{TRAINING_CAPTION} · flat line: no-context floor (label frequencies and copying, no \
         context)"
    )
}

/// The floor's accuracy a pretrain run's metrics carry (`eval.floor.mlm_accuracy`), if finite.
fn floor_accuracy<R: Run + ?Sized>(d: &R) -> Option<f64> {
    d.mlm_floor().filter(|a| a.is_finite())
}

/// One flat line per distinct floor of `deps` from step 0 to `x_max`, in colours from
/// `first_colour` on (after the runs' own): runs on the same masking share one line, labelled
/// `no-context floor`, or with several floors by the first run that has each.
pub(crate) fn floor_series<R: Run + ?Sized>(
    deps: &[&R],
    first_colour: usize,
    x_max: f64,
) -> Vec<Series> {
    let mut floors: Vec<(f64, &str)> = Vec::new();
    for d in deps {
        if let Some(a) = floor_accuracy(*d)
            && !floors.iter().any(|(b, _)| *b == a)
        {
            floors.push((a, d.instance()));
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
    use serde_json::{Value, json};

    /// A pretrain run as the report reads one: its floor from its metrics' `eval.floor`.
    struct TestRun {
        instance: String,
        metrics: Value,
        lines: Vec<Value>,
    }

    impl Run for TestRun {
        fn instance(&self) -> &str {
            &self.instance
        }
        fn lines(&self) -> &[Value] {
            &self.lines
        }
        fn metrics(&self) -> &Value {
            &self.metrics
        }
        fn mlm_floor(&self) -> Option<f64> {
            self.metrics["eval"]["floor"]["mlm_accuracy"].as_f64()
        }
    }

    fn run(instance: &str, eval: Value) -> TestRun {
        TestRun {
            instance: instance.into(),
            metrics: json!({"steps": 20, "eval": eval}),
            lines: vec![
                json!({"step": 10, "mlm_accuracy": 0.1}),
                json!({"step": 20, "eval_mlm_accuracy": 0.3}),
            ],
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
        let figures = crate::pretraining(&[&a]);
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
        let figures = crate::pretraining(&[&old]);
        assert!(
            figures
                .iter()
                .all(|f| f.caption.as_deref() == Some(TRAINING_CAPTION))
        );
    }
}
