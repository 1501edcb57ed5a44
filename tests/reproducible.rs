//! A stage's artifact is a function of its inputs, params, code and seed (issue 21 §7): two
//! runs of the same instances in two fresh workspaces give the same fingerprints and the same
//! bytes in every output file, pretrain's and finetune's included. Timings and host facts live
//! in each artifact's log directory, which the output digest leaves out, so they cannot make
//! two runs differ; and because the digests match, a re-run pretrain lets the cache cut off
//! below it.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use serde_json::Value;

/// instance → (fingerprint, the manifest's files: path, size, blake3).
fn outputs(v: &Value) -> BTreeMap<String, (String, Value)> {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let dir = PathBuf::from(s["artifact"].as_str().unwrap());
            let m: Value = serde_json::from_str(&read(dir.join("MANIFEST.json"))).unwrap();
            (
                s["instance"].as_str().unwrap().to_string(),
                (
                    s["fingerprint"].as_str().unwrap().to_string(),
                    m["files"].clone(),
                ),
            )
        })
        .collect()
}

#[test]
fn two_runs_of_the_default_stages_write_the_same_bytes() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let yaml = read(format!("{repo}/pipeline.yaml"));
    let data = format!("data={repo}/datasets/fixtures");
    // The data stages, a short pretraining, one fine-tuning run from it and one from random
    // weights, and a baseline: one instance of each kind that writes timings.
    let args = [
        "finetune_chnsenticorp",
        "baseline_chnsenticorp",
        "--set",
        &data,
        "--set",
        "pretrain_steps=4",
        "--set",
        "pretrain_save_steps=[2]",
        "--set",
        "finetune_epochs=1",
        "--set",
        "pretrain.share_type=all",
        "--set",
        "finetune_chnsenticorp.seed=1",
    ];
    let (a, b) = (Ws::new(&yaml), Ws::new(&yaml));
    let (ra, rb) = (outputs(&a.run_ok(&args)), outputs(&b.run_ok(&args)));
    assert_eq!(ra.keys().collect::<Vec<_>>(), rb.keys().collect::<Vec<_>>());
    for kind in ["clean", "vocab", "mask", "pretrain", "finetune", "baseline"] {
        assert!(
            ra.keys().any(|k| k.starts_with(kind)),
            "no {kind} instance ran: {:?}",
            ra.keys()
        );
    }
    for (instance, (fp, files)) in &ra {
        let (fp_b, files_b) = &rb[instance];
        assert_eq!(fp, fp_b, "the fingerprints of {instance} differ");
        assert_eq!(files, files_b, "the outputs of {instance} differ");
    }
}
