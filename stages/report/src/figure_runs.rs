//! The report's deps as the figures' runs ([`pipeline_figures::Run`]): the figures read a
//! dep's name, its `metrics.jsonl` lines and `metrics.json`, and a pretrain dep's no-context
//! floor from its typed record, so a dep of another kind, or a record this version cannot
//! read, draws no floor.

use pipeline_figures::Run;
use serde_json::Value;

use crate::deps::Dep;

impl Run for Dep {
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
        self.pretrain()
            .eval
            .as_ref()
            .and_then(|e| e.get("floor"))
            .and_then(|f| f.get("mlm_accuracy"))
            .and_then(Value::as_f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    fn dep(kind: DepKind, metrics: Value) -> Dep {
        Dep {
            lines: vec![json!({"step": 10, "mlm_accuracy": 0.1})],
            ..Dep::new("pretrain@a", kind, metrics)
        }
    }

    #[test]
    fn only_a_pretrain_dep_with_a_floor_in_its_record_has_one() {
        let floor = json!({"steps": 20, "eval": {"floor": {"mlm_accuracy": 0.128}}});
        let d = dep(DepKind::Pretrain, floor.clone());
        assert_eq!(d.mlm_floor(), Some(0.128));
        assert_eq!((d.instance(), d.lines().len()), ("pretrain@a", 1));
        assert_eq!(dep(DepKind::Finetune, floor).mlm_floor(), None);
        assert_eq!(
            dep(DepKind::Pretrain, json!({"eval": null})).mlm_floor(),
            None
        );
        // The pretraining figures draw it on the MLM-accuracy figure.
        let figures = pipeline_figures::pretraining(&[&d]);
        let mlm = figures
            .iter()
            .find(|f| f.file.ends_with("mlm_accuracy.svg"));
        let last = mlm.and_then(|f| f.series.last()).map(|s| s.points.clone());
        assert_eq!(last, Some(vec![(0.0, 0.128), (10.0, 0.128)]));
    }
}
