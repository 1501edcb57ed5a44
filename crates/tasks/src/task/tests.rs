use super::*;
use serde_json::json;

fn err(v: Value) -> String {
    Task::from_value(&v, "task").unwrap_err().to_string()
}

#[test]
fn builtins_have_the_documented_labels() {
    let Some(Task::Pair(l)) = Task::builtin("lcqmc") else {
        panic!()
    };
    assert_eq!(l.labels, ["0", "1"]);
    assert!(!l.header);
    assert_eq!(l.columns, Some(3));
    let Some(Task::Pair(x)) = Task::builtin("xnli") else {
        panic!()
    };
    assert_eq!(x.labels, ["contradiction", "entailment", "neutral"]);
    assert!(x.header);
    assert_eq!(x.text_a, Column::Name("text_a".into()));
    assert_eq!(x.label_id("contradictory"), Some(0));
    assert_eq!(x.label_id("entailment"), Some(1));
    assert_eq!(x.label_id(" neutral "), Some(2));
    assert_eq!(x.label_id("-"), None);
    for n in ["cmnli", "ocnli", "cnsd_snli"] {
        let Some(Task::Pair(p)) = Task::builtin(n) else {
            panic!()
        };
        assert_eq!(p.labels, NLI_LABELS);
        assert!(!p.header);
    }
    assert!(Task::builtin("pair").is_none(), "pair needs labels");
    assert!(Task::builtin("nope").is_none());
    assert_eq!(Task::builtin("choice").unwrap().kind(), TaskKind::Choice);
}

#[test]
fn generic_pair_with_names_numbers_and_a_label_map() {
    let t = Task::from_value(
        &json!({"name": "pair", "text_a": "s1", "text_b": "s2", "label": "y",
                "header": true, "labels": [0, 1], "label_map": {"yes": 1, "no": "0"}}),
        "task",
    )
    .unwrap();
    let Task::Pair(p) = t else { panic!() };
    assert_eq!(p.labels, ["0", "1"]);
    assert_eq!(p.label_id("yes"), Some(1));
    assert_eq!(p.label_id("no"), Some(0));
    assert_eq!(p.text_b, Column::Name("s2".into()));
    assert_eq!(p.columns, None);
}

#[test]
fn overriding_a_builtin() {
    let Task::Pair(p) = Task::from_value(&json!({"name": "lcqmc", "header": true}), "t").unwrap()
    else {
        panic!()
    };
    assert!(p.header);
    assert_eq!(p.labels, ["0", "1"]);
    // xnli without a header falls back to positions.
    let Task::Pair(p) = Task::from_value(&json!({"name": "xnli", "header": false}), "t").unwrap()
    else {
        panic!()
    };
    assert_eq!(p.label, Column::Index(2));
    // Relabelling drops aliases whose target is gone.
    let Task::Pair(p) = Task::from_value(
        &json!({"name": "cmnli", "labels": ["entailment", "neutral", "contradiction"]}),
        "t",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(p.label_id("contradictory"), Some(2));
}

#[test]
fn errors_name_the_param() {
    assert!(
        err(json!("lcqcm")).contains("did you mean `lcqmc`"),
        "{}",
        err(json!("lcqcm"))
    );
    assert!(err(json!("pair")).contains("param `task.labels`"));
    assert!(err(json!({"name": "pair", "labels": ["a"]})).contains("at least 2"));
    assert!(err(json!({"name": "pair", "labels": ["a", "a"]})).contains("twice"));
    let e = err(json!({"name": "pair", "labels": ["a", "b"], "lables": []}));
    assert!(
        e.contains("unknown key `lables` (did you mean `labels`?)"),
        "{e}"
    );
    let e = err(json!({"name": "pair", "labels": ["a", "b"], "text_a": "s1"}));
    assert!(
        e.contains("param `task.text_a`") && e.contains("header: true"),
        "{e}"
    );
    let e = err(json!({"name": "pair", "labels": ["a", "b"], "text_b": 0}));
    assert!(e.contains("same column 0 as text_a"), "{e}");
    let e = err(json!({"name": "pair", "labels": ["a", "b"], "label_map": {"c": "d"}}));
    assert!(
        e.contains("param `task.label_map.c`") && e.contains("not one of"),
        "{e}"
    );
    let e = err(json!({"name": "lcqmc", "label": 5}));
    assert!(e.contains("past the 3 columns"), "{e}");
    assert!(err(json!({"labels": ["a"]})).contains("needs `name`"));
    assert!(err(json!(3)).contains("expected a task name"));
    let e = err(json!({"name": "choice", "num_choices": 1}));
    assert!(e.contains("param `task.num_choices`"), "{e}");
    let e = err(json!({"name": "choice", "labels": ["a", "b"]}));
    assert!(e.contains("unknown key `labels`"), "{e}");
}
