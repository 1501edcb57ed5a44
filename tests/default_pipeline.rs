//! The bundled `pipeline.yaml` runs on the bundled fixtures (the README's first command), in a
//! temporary workspace so that the repository stays clean.

mod common;

use common::*;

#[test]
fn the_default_pipeline_runs_on_the_fixtures_and_is_then_cached() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/pipeline.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    // A short pretraining (its intermediate model at step 2 for the curve stages), one
    // fine-tuning seed and epoch: this test checks the wiring, not the model. (Every seed of
    // the eight tasks took 1,100 s of CI's 2 cores in the debug build; this plan is 48
    // instances, not 112.)
    let short = [
        "pretrain_steps=4",
        "pretrain_save_steps=[2]",
        "finetune_seeds=[1]",
        "finetune_epochs=1",
    ];
    let run = |args: &[&str], code: i32| {
        let mut all = args.to_vec();
        all.extend(["--set", &data]);
        for s in short {
            all.extend(["--set", s]);
        }
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
