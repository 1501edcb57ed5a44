//! The bundled `pipeline.yaml` runs on the bundled fixtures (the README's first command), in a
//! temporary workspace so that the repository stays clean.

mod common;

use common::*;

#[test]
fn the_default_pipeline_runs_on_the_fixtures_and_is_then_cached() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/pipeline.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    // A short pretraining: this test checks the wiring, not the model.
    let steps = "pretrain_steps=4";

    let v = ws.run_ok(&["--set", &data, "--set", steps]);
    assert_eq!(v["counts"]["failed"], 0, "{v:#}");
    assert!(v["counts"]["ran"].as_u64().unwrap() > 0, "{v:#}");

    let v = ws.run_ok(&["--set", &data, "--set", steps]);
    assert_eq!(
        v["counts"]["ran"], 0,
        "a second run re-ran something: {v:#}"
    );

    let status = ws.json(&["status", "--set", &data, "--set", steps], 0);
    for s in status["stages"].as_array().unwrap() {
        assert_eq!(s["status"], "fresh", "{s:#}");
    }
}
