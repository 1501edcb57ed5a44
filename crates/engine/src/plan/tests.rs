//! Unit tests of the planner.
use super::*;
use crate::stage::Registry;

fn plan(text: &str, sets: &[&str]) -> Result<Plan, UserError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, text).unwrap();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let file = PipelineFile::load(&path)?;
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Plan::build(file, &Overrides::parse(&sets)?, &Registry::builtin())
}

#[test]
fn matrix_expands_and_dependents_follow() {
    let p = plan(
        "stages:\n  pre:\n    cmd: x\n    matrix: {share: [all, ffn]}\n  ft:\n    cmd: y\n    deps: [pre]\n  rep:\n    cmd: z\n    deps: [ft]\n    aggregate: true\n",
        &[],
    )
    .unwrap();
    let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pre@share=all",
            "pre@share=ffn",
            "ft@share=all",
            "ft@share=ffn",
            "rep"
        ]
    );
    assert_eq!(p.instances[2].deps, [0]);
    assert_eq!(p.instances[3].deps, [1]);
    assert_eq!(p.instances[4].deps, [2, 3]);
    assert_eq!(p.instances[0].params["share"], "all");
}

#[test]
fn a_matrix_axis_may_take_a_list_var_and_set_changes_it() {
    let text = "vars: {steps: [5, 10]}\nstages:\n  t:\n    cmd: x\n    matrix:\n      step: ${vars.steps}\n";
    let names = |p: Plan| -> Vec<String> { p.instances.into_iter().map(|i| i.name).collect() };
    assert_eq!(names(plan(text, &[]).unwrap()), ["t@step=5", "t@step=10"]);
    assert_eq!(names(plan(text, &["steps=[7]"]).unwrap()), ["t@step=7"]);
    assert_eq!(
        plan(text, &["steps=3"]).unwrap().instances[0].params["step"],
        3
    );
    for (set, want) in [
        ("steps=[]", "the var's list is empty"),
        ("steps=[[1]]", "must be scalars"),
        ("steps={a: 1}", "the var holds a map"),
    ] {
        let e = plan(text, &[set]).unwrap_err().to_string();
        assert!(
            e.contains(want) && e.contains("pipeline.yaml:6"),
            "{set}: {e}"
        );
    }
    let e = plan(text, &["steps=[5, 5]"]).unwrap_err().to_string();
    assert!(
        e.contains("matrix axis `step` of stage `t` lists 5 twice"),
        "{e}"
    );
    let e = plan(text, &["t.step=[7, 7]"]).unwrap_err().to_string();
    assert!(
        e.contains("lists 7 twice") && e.contains("pipeline.yaml:6"),
        "{e}"
    );
    let e = plan(&text.replace("vars.steps", "vars.stepz"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("stepz"), "{e}");
}

#[test]
fn two_axes_make_a_product_and_set_narrows_one() {
    let text = "stages:\n  t:\n    cmd: x\n    matrix: {a: [1, 2], b: [x, y]}\n";
    assert_eq!(plan(text, &[]).unwrap().instances.len(), 4);
    let p = plan(text, &["t.a=2"]).unwrap();
    let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["t@a=2,b=x", "t@a=2,b=y"]);
}

#[test]
fn vars_substitute_with_types_and_overrides() {
    let text = "vars: {lr: 0.1, dir: d, path: '${vars.dir}/x'}\nstages:\n  t:\n    cmd: echo ${params.lr} ${vars.path} ${HOME}\n    params: {lr: '${vars.lr}'}\n";
    let p = plan(text, &[]).unwrap();
    assert_eq!(p.instances[0].params["lr"], 0.1);
    assert_eq!(p.instances[0].spec["cmd"], "echo 0.1 d/x ${HOME}");
    let p = plan(text, &["lr=2e-4", "t.lr=5"]).unwrap();
    assert_eq!(p.instances[0].params["lr"], 5);
}

#[test]
fn cycles_are_printed() {
    let e = plan(
        "stages:\n  a:\n    cmd: x\n    deps: [b]\n  b:\n    cmd: y\n    deps: [a]\n",
        &[],
    )
    .unwrap_err();
    assert!(e.message.contains("cycle: a → b → a"), "{e}");
}

#[test]
fn select_takes_ancestors_only() {
    let p = plan(
        "stages:\n  a:\n    cmd: x\n  b:\n    cmd: y\n    deps: [a]\n  c:\n    cmd: z\n",
        &[],
    )
    .unwrap();
    assert_eq!(p.select(&["b".into()]).unwrap(), [0, 1]);
    assert!(
        p.select(&["bb".into()])
            .unwrap_err()
            .help
            .unwrap()
            .contains("`b`")
    );
}

#[test]
fn unknown_names_are_errors() {
    assert!(
        plan("stages:\n  a:\n    cmd: x\n", &["nope=1"])
            .unwrap_err()
            .message
            .contains("no var named `nope`")
    );
    assert!(
        plan(
            "stages:\n  a:\n    cmd: x\n    params: {lr: 1}\n",
            &["a.lx=1"]
        )
        .unwrap_err()
        .help
        .unwrap()
        .contains("`lr`")
    );
    assert!(
        plan("stages:\n  a:\n    cmd: echo ${vars.nope}\n", &[])
            .unwrap_err()
            .message
            .contains("undefined var `nope`")
    );
    // A missing input is an error only for a run that needs the stage.
    let p = plan(
        "stages:\n  a:\n    cmd: x\n    inputs: ['*.zip']\n  b:\n    cmd: y\n  c:\n    cmd: z\n    deps: [a]\n",
        &[],
    )
    .unwrap();
    assert_eq!(p.select(&["b".into()]).unwrap(), [1]);
    for targets in [vec![], vec!["a".to_string()], vec!["c".to_string()]] {
        let e = p.select(&targets).unwrap_err();
        assert!(e.message.contains("matches no file"), "{targets:?}: {e:?}");
        assert_eq!(e.location.unwrap().1.line, 4);
    }
}

#[test]
fn negated_inputs_drop_what_they_match() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["d/a.txt", "d/b.txt", "d/SOURCE.txt"] {
        std::fs::create_dir_all(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join(f), f).unwrap();
    }
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(
        &path,
        "stages:\n  a:\n    cmd: x\n    inputs: ['d/*.txt', '!d/SOURCE.txt', '!nothing/*']\n",
    )
    .unwrap();
    let file = PipelineFile::load(&path).unwrap();
    let p = Plan::build(file, &Overrides::parse(&[]).unwrap(), &Registry::builtin()).unwrap();
    let keys: Vec<&str> = p.instances[0]
        .inputs
        .iter()
        .map(|i| i.key.as_str())
        .collect();
    assert_eq!(keys, ["d/a.txt", "d/b.txt"]);
}
