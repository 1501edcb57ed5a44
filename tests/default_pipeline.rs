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

/// `experiment.yaml` (issue 23's committed experiment) plans on the fixtures: every stage's
/// params validate, the grid is the one its header describes (one pretraining, five tasks ×
/// pretrained/random × 3 seeds, a curve point each, five baselines, the report). Running it is
/// the experiment itself (results/README.md).
#[test]
fn the_committed_experiment_plans_on_the_fixtures() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/experiment.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    let v = ws.json(&["run", "--dry-run", "report", "--set", &data], 0);
    let names = instances(&v);
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
    assert_eq!(count("pretrain"), 1, "{names:?}");
    for task in [
        "chnsenticorp",
        "smp2020_ewect",
        "msra_ner",
        "lcqmc_afqmc",
        "xnli",
    ] {
        let main: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with(&format!("finetune_{task}@init=")))
            .collect();
        assert_eq!(main.len(), 6, "{task}: {main:?}");
        assert!(
            has_entry(&v, &format!("finetune_{task}_curve@pretrain_step=1250")),
            "{task}: {names:?}"
        );
        assert!(has_entry(&v, &format!("baseline_{task}")), "{names:?}");
    }
    // clean, vocab and mask; pretrain; 30 fine-tunes; 5 curve points; 5 baselines; report.
    assert_eq!(names.len(), 3 + 1 + 30 + 5 + 5 + 1, "{names:?}");
}

#[test]
fn the_ablation_sitting_plans_one_axis_per_pretraining_run() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/ablations.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    let v = ws.json(&["run", "--dry-run", "report", "--set", &data], 0);
    let names = instances(&v);
    let arms = [
        "",
        "_share_none",
        "_mlm_only",
        "_char_masking",
        "_general_corpus",
    ];
    for arm in arms {
        assert!(has_entry(&v, &format!("pretrain{arm}")), "{names:?}");
        for task in ["chnsenticorp", "lcqmc_afqmc"] {
            for init in ["pretrained", "random"] {
                for seed in 1..=3 {
                    let name = format!("finetune_{task}{arm}@init={init},seed={seed}");
                    assert!(has_entry(&v, &name), "{name} not in {names:?}");
                }
            }
        }
    }
    // clean ×2, vocab, mask ×3; 5 pretraining runs; 5 × 2 tasks × 2 inits × 3 seeds; 2
    // baselines; report.
    assert_eq!(names.len(), 6 + 5 + 60 + 2 + 1, "{names:?}");
}
