//! The bundled `pipeline.yaml` runs on the bundled fixtures (the README's first command), in a
//! temporary workspace so that the repository stays clean.

mod common;

use common::*;

#[test]
fn the_default_pipeline_runs_on_the_fixtures_and_is_then_cached() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/pipeline.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    // A short pretraining (its intermediate model at step 2 for the curve stages): this test
    // checks the wiring, not the model.
    let (steps, saves) = ("pretrain_steps=4", "pretrain_save_steps=[2]");
    let run = |args: &[&str], code: i32| {
        let mut all = args.to_vec();
        all.extend(["--set", &data, "--set", steps, "--set", saves]);
        ws.json(&all, code)
    };

    let v = run(&["run"], 0);
    assert_eq!(v["counts"]["failed"], 0, "{v:#}");
    assert!(v["counts"]["ran"].as_u64().unwrap() > 0, "{v:#}");

    let v = run(&["run"], 0);
    assert_eq!(
        v["counts"]["ran"], 0,
        "a second run re-ran something: {v:#}"
    );

    let status = run(&["status"], 0);
    assert!(
        has_entry(
            &status,
            "finetune_xnli_curve@pretrain_step=2,share_type=all"
        ),
        "{status:#}"
    );
    for s in status["stages"].as_array().unwrap() {
        assert_eq!(s["status"], "fresh", "{s:#}");
    }
}
