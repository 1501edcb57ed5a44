//! The report stage end to end on hand-written dep artifacts (metrics.json, metrics.jsonl and
//! MANIFEST.json as docs/metrics.md and the engine write them): the files, their content,
//! determinism, missing upstreams, publishing. The artifacts are built in `common/fixtures.rs`.

use std::path::Path;

use pipeline_engine::stage::{DepArtifact, Stage};
use serde_json::{Map, Value, json};
use stage_report::ReportStage;

#[path = "common/fixtures.rs"]
mod fixtures;
#[path = "common/golden.rs"]
mod golden;

use fixtures::*;

#[test]
fn the_full_report_from_fixture_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let deps = all_deps(root);
    write(
        &root.join("results/bench/cpu.jsonl"),
        &[
            json!({"bench": "train", "model": "tiny", "share_type": "all", "device": "flex",
                "precision": "fp32", "batch": 32, "seq": 128, "masked": 20, "steps": 5,
                "runs": 3, "threads": 2, "seconds_per_step": 1.0, "tokens_per_s": 4096.0,
                "model_tflops_per_s": 0.05, "mfu": null, "peak_rss_bytes": 1,
                "parameters": 4142602})
            .to_string(),
            json!({"bench": "hf_train", "config": "tiny", "device": "cpu", "dtype": "fp32",
                "batch": 32, "seq": 128, "masked": 20, "threads": 2, "tokens_per_s": 2048.0,
                "model_tflops_per_s": 0.025})
            .to_string(),
            "hf train tiny: a human summary line".to_string(),
        ]
        .join("\n"),
    );
    let out = run(
        root,
        &deps,
        json!({"commit": "0123abc", "notes": {"xnli": "A note on XNLI."}}),
        &[],
        "out",
    );
    let produced = files(&out);
    // REPORT_PREVIEW_DIR=/tmp/x keeps a copy of this report, to look at.
    if let Ok(dir) = std::env::var("REPORT_PREVIEW_DIR") {
        for (name, bytes) in &produced {
            write(&Path::new(&dir).join(name), &String::from_utf8_lossy(bytes));
        }
    }
    for f in [
        "README.md",
        "model_size.csv",
        "model_size.json",
        "model_size_grid.csv",
        "model_size_grid.json",
        "pretraining.csv",
        "pretraining.json",
        "lcqmc.csv",
        "lcqmc.json",
        "xnli.csv",
        "xnli.json",
        "throughput.csv",
        "throughput.json",
        "published.json",
        "metrics.json",
        "plots/pretrain_loss.svg",
        "plots/pretrain_mlm_accuracy.svg",
        "plots/pretrain_sop_accuracy.svg",
        "plots/lcqmc_dev_accuracy.svg",
        "plots/xnli_dev_accuracy.svg",
    ] {
        assert!(
            produced.contains_key(f),
            "{f} missing: {:?}",
            produced.keys()
        );
    }

    let readme = text(&out, "README.md");
    assert!(
        readme.starts_with("# ALBERT for Chinese: results\n"),
        "{readme}"
    );
    assert!(readme.contains("Commit `0123abc`"), "{readme}");
    assert!(
        readme.contains("The runs finished 2026-11-20 to 2026-11-21."),
        "{readme}"
    );
    assert!(readme.contains("flex (2 threads)"), "{readme}");
    assert!(readme.contains("> **Note.** A note on XNLI."), "{readme}");
    // Pretraining: ours (percentages) and albert_zh's published rows.
    assert!(
        readme.contains("| ours | pretrain@share_type=all | tiny (E 64, H 128, L 4) | all |"),
        "{readme}"
    );
    assert!(readme.contains("| 18.3 |"), "{readme}");
    assert!(
        readme.contains("| albert_zh (published) | albert_zh_base | base |"),
        "{readme}"
    );
    assert!(readme.contains("53h 00m*"), "{readme}");
    // LCQMC: our protocol in words, our rows, the published rows.
    assert!(
        readme.contains("Ours: fine-tuned on 7,922 examples of `../shared/datasets/lcqmc/dev.tsv`"),
        "{readme}"
    );
    assert!(
        readme.contains("880 examples held out from them (10 %"),
        "{readme}"
    );
    assert!(readme.contains("test (12,500 examples of `../shared/datasets/lcqmc/test.tsv`)"));
    assert!(
        readme.contains("held-out model-selection split"),
        "{readme}"
    );
    assert!(
        readme.contains("| ours | ALBERT (E 64, H 128, L 4), share all | pretrained (pretrain@share_type=all) | lcqmc/dev.tsv | 1,300,000 | 1 | 73.12 | 71.12 |"),
        "{readme}"
    );
    assert!(readme.contains("| none (random init) |"), "{readme}");
    assert!(readme.contains("| published | ERNIE | – | – | – | – | 89.8 (89.6) | 87.2 (87.0) |"));
    // XNLI: dev and test are the named evaluation sets; the dropped overlap is said.
    assert!(readme.contains("after dropping 2,490 whose texts are in an evaluation set"));
    assert!(readme.contains("capped to 20,000"), "{readme}");
    let xnli: Value = serde_json::from_str(&text(&out, "xnli.json")).unwrap();
    let first = &xnli["rows"][0];
    assert_eq!(first["dev_set"], "xnli_dev");
    assert_eq!(first["dev"], json!(52.12));
    assert_eq!(first["test"], json!(50.12));
    assert_eq!(first["selection_accuracy"], json!(53.12));
    assert_eq!(xnli["protocol"]["task"], "xnli");
    // Model size: exact counts, published figures explained.
    let sizes = text(&out, "model_size.csv");
    assert!(sizes.starts_with("model,embedding_size,hidden_size,layers,intermediate_size,"));
    assert!(
        sizes.contains("base,128,768,12,3072,all,10547968,"),
        "{sizes}"
    );
    assert!(readme.contains("at V = 30,000 our backbone is 11.68M, as published"));
    // Throughput: ours beside transformers' (×2), the stage runs, the human line skipped.
    let thr: Value = serde_json::from_str(&text(&out, "throughput.json")).unwrap();
    let bench_row = thr["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["implementation"] == "ours (pipeline bench)")
        .unwrap();
    assert_eq!(bench_row["vs_transformers"], json!(2.0));
    assert!(readme.contains("results/bench/cpu.jsonl:1"));
    assert!(
        readme.contains("1 line(s) are not JSON objects"),
        "{readme}"
    );
    // Plots: one series per instance, deterministic SVG.
    let svg = text(&out, "plots/pretrain_mlm_accuracy.svg");
    assert!(svg.contains("pretrain@share_type=none"), "{svg}");
    assert!(readme.contains("![Masked-LM accuracy](plots/pretrain_mlm_accuracy.svg)"));
    // The artifact's metrics.json says what is in it.
    let m: Value = serde_json::from_str(&text(&out, "metrics.json")).unwrap();
    assert_eq!(m["tables"]["lcqmc"], json!(4 + 14));
    assert_eq!(m["left_out"], json!([]));

    // Published into results/ as well, byte for byte, beside the bench files.
    let results = files(&root.join("results"));
    for (name, bytes) in &produced {
        if name != "metrics.json" {
            assert_eq!(results.get(name), Some(bytes), "{name}");
        }
    }
    assert!(results.contains_key("bench/cpu.jsonl"));
    assert!(results.contains_key(stage_report::LEDGER));
    assert!(!results.contains_key("metrics.json"));
}

#[test]
fn two_runs_are_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let deps = all_deps(root);
    let a = run(root, &deps, json!({"publish_dir": ""}), &[], "a");
    let mut deps_b = deps.clone();
    deps_b.reverse();
    let b = run(root, &deps_b, json!({"publish_dir": ""}), &[], "b");
    let (fa, fb) = (files(&a), files(&b));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (name, bytes) in &fa {
        assert!(fb[name] == *bytes, "{name} differs between two runs");
    }
    // publish_dir "" publishes nothing.
    assert!(!root.join("results").exists());
}

#[test]
fn missing_upstreams_are_notes_not_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Only pretraining ran; one pretrain artifact lost its metrics.
    let deps = vec![pretrain(root, "all", 0.2), {
        let d = pretrain(root, "none", 0.2);
        std::fs::remove_file(d.dir.join("metrics.json")).unwrap();
        d
    }];
    // A fine-tuning artifact whose metrics name no task cannot go in a table: a note.
    let mut deps = deps;
    let odd = finetune(root, "lcqmc", "all", "pretrained", 0.7);
    let path = odd.dir.join("metrics.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("task");
    std::fs::write(&path, m.to_string()).unwrap();
    deps.push(odd);
    let out = run(root, &deps, json!({"bench_dir": ""}), &[], "out");
    let readme = text(&out, "README.md");
    assert!(
        readme.contains("init=pretrained: its metrics.json names no `task`; left out"),
        "{readme}"
    );
    assert!(
        readme.contains("## LCQMC (question matching)\n\nNot in this report"),
        "{readme}"
    );
    assert!(readme.contains("`finetune_xnli`"), "{readme}");
    assert!(
        readme.contains("pretrain@share_type=none: its artifact has no readable metrics.json"),
        "{readme}"
    );
    assert!(!out.join("lcqmc.csv").exists() && !out.join("xnli.json").exists());
    assert!(out.join("pretraining.csv").exists());
    let m: Value = serde_json::from_str(&text(&out, "metrics.json")).unwrap();
    assert_eq!(m["left_out"], json!(["lcqmc", "xnli"]));

    // No deps at all: the model-size tables alone, and a note for everything else.
    let out = run(root, &[], json!({"bench_dir": ""}), &[], "empty");
    let readme = text(&out, "README.md");
    assert!(readme.contains("no runs of the experiment yet"), "{readme}");
    assert!(out.join("model_size.csv").exists());
    let m: Value = serde_json::from_str(&text(&out, "metrics.json")).unwrap();
    assert_eq!(
        m["left_out"],
        json!(["pretraining", "lcqmc", "xnli", "throughput"])
    );
    // The later report removed the files the earlier one published and it no longer writes.
    assert!(!root.join("results/pretraining.csv").exists());
    assert!(root.join("results/model_size.csv").exists());
}

#[test]
fn benchmark_inputs_are_read_too() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let file = root.join("bench/hf.jsonl");
    write(
        &file,
        &json!({"bench": "hf_infer", "config": "tiny", "device": "cpu", "dtype": "fp32",
            "batch": 64, "seq": 64, "threads": 2, "sentences_per_s": 321.5})
        .to_string(),
    );
    let out = run(
        root,
        &[],
        json!({"publish_dir": "", "plots": false}),
        &[file],
        "out",
    );
    let thr = text(&out, "throughput.csv");
    assert!(
        thr.contains("inference,transformers,tiny,cpu,fp32,2,64,64,321.5,sentences/s"),
        "{thr}"
    );
    assert!(text(&out, "README.md").contains("bench/hf.jsonl:1"));
}

#[test]
fn bad_params_fail_validation() {
    let stage = ReportStage;
    let check = |v: Value| {
        let m: Map<String, Value> = serde_json::from_value(v).unwrap();
        stage.validate(&m, &Value::Null)
    };
    assert!(check(json!({"publish_dir": "../elsewhere"})).is_err());
    assert!(
        check(json!({"notes": {"pretrian": "x"}}))
            .unwrap_err()
            .0
            .contains("pretraining")
    );
    assert!(check(json!({"publish_dir": "out", "title": "T"})).is_ok());
    assert!(stage.aggregates());
    assert_eq!(stage.kind(), "report");
    assert!(stage.known_params().contains(&"publish_dir"));
}

#[test]
fn runs_differing_only_in_seed_are_one_row_of_mean_and_sd() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let deps = vec![
        seeded(root, 3, 0.74),
        seeded(root, 1, 0.70),
        seeded(root, 2, 0.72),
        pretrain(root, "all", 0.1834),
    ];
    let out = run(root, &deps, json!({"publish_dir": ""}), &[], "art");
    let t: Value = serde_json::from_str(&text(&out, "lcqmc.json")).unwrap();
    let ours: Vec<&Value> = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "ours")
        .collect();
    assert_eq!(ours.len(), 1, "{t:#}");
    let row = ours[0];
    assert_eq!(row["seeds"], 3);
    // Test accuracies 68, 70, 72 %: mean 70, sample sd 2.
    assert_eq!(row["test"], json!(70.0));
    assert_eq!(row["test_sd"], json!(2.0));
    assert!(
        row["init"].as_str().unwrap().starts_with("pretrained"),
        "{row:#}"
    );
    assert_eq!(row["run"], "finetune_lcqmc@init=pretrained,share_type=all");
    let readme = text(&out, "README.md");
    assert!(readme.contains("| 70.00 ± 2.00 |"), "{readme}");
    assert!(
        readme.contains("| 3 / 3 |") || readme.contains("3, 3, 3 / 3"),
        "{readme}"
    );
}

#[test]
fn the_full_report_carries_the_golden_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // The seeded runs first: `seeded` moves the directory `finetune` writes, which
    // `all_deps` then writes again for its own run.
    let mut deps: Vec<DepArtifact> = [(1, 0.70), (2, 0.72), (3, 0.75)]
        .into_iter()
        .map(|(seed, acc)| seeded(root, seed, acc))
        .collect();
    deps.extend(all_deps(root));
    write(
        &root.join("results/bench/cpu.jsonl"),
        &json!({"bench": "train", "model": "tiny", "share_type": "all", "device": "flex",
            "precision": "fp32", "batch": 32, "seq": 128, "masked": 20, "steps": 5,
            "runs": 3, "threads": 2, "seconds_per_step": 1.0, "tokens_per_s": 4096.0,
            "model_tflops_per_s": 0.05, "mfu": null, "peak_rss_bytes": 1,
            "parameters": 4142602})
        .to_string(),
    );
    let out = run(root, &deps, json!({"commit": "0123abc"}), &[], "out");
    golden::check("report", &files(&out));
}

#[test]
fn a_table_declared_in_the_params_is_a_section_with_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut deps: Vec<DepArtifact> = [(1, 0.70), (2, 0.72), (3, 0.74)]
        .into_iter()
        .map(|(seed, acc)| seeded(root, seed, acc))
        .collect();
    deps.push(finetune(root, "xnli", "all", "random", 0.5));
    let tables = json!([{"key": "by_init", "title": "Test accuracy by init",
        "stages": ["finetune_lcqmc", "finetune_xnli"], "group_by": ["init"],
        "columns": [{"key": "test", "header": "Test %", "metric": "eval.test.accuracy",
                     "scale": 100}]},
        {"key": "nothing", "stages": ["finetune_c3"],
         "columns": [{"key": "test", "metric": "eval.test.accuracy"}]}]);
    // A claim of one's own on a row of it.
    let targets = json!([{"key": "lcqmc_test", "cell": {"table": "by_init",
        "row": {"run": "finetune_lcqmc", "init": "pretrained"}, "column": "test",
        "at_least": 65}}]);
    let out = run(
        root,
        &deps,
        json!({"publish_dir": "", "tables": tables, "targets": targets}),
        &[],
        "art",
    );
    let t: Value = serde_json::from_str(&text(&out, "targets.json")).unwrap();
    assert_eq!(t["rows"][0]["status"], "met", "{t:#}");
    assert_eq!(
        t["rows"][0]["evidence"],
        "`by_init` init = pretrained, run = finetune_lcqmc: test 70 (target ≥ 65)"
    );
    let t: Value = serde_json::from_str(&text(&out, "by_init.json")).unwrap();
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{t:#}");
    // Test accuracies 68, 70, 72 %: mean 70, sample sd 2; XNLI has no `test` set.
    assert_eq!(rows[0]["run"], "finetune_lcqmc");
    assert_eq!(
        (rows[0]["seeds"].clone(), rows[0]["test"].clone()),
        (json!(3), json!(70.0))
    );
    assert_eq!(rows[0]["test_sd"], json!(2.0));
    assert_eq!(rows[1]["test"], Value::Null);
    assert!(text(&out, "by_init.csv").starts_with("run,init,seeds,test,test_sd\n"));
    let readme = text(&out, "README.md");
    assert!(readme.contains("## Test accuracy by init"), "{readme}");
    assert!(
        readme.contains("| finetune_lcqmc | pretrained | 3 | 70.00 ± 2.00 |"),
        "{readme}"
    );
    assert!(readme.contains("no run of `finetune_c3`"), "{readme}");
    let bad = ReportStage.validate(
        json!({"tables": [{"key": "x", "stages": ["a"], "columns": [{"key": "t"}]}]})
            .as_object()
            .unwrap(),
        &Value::Null,
    );
    let e = bad.unwrap_err().0;
    assert!(
        e.contains("tables[0].columns[0]") && e.contains("metric"),
        "{e}"
    );
    let undeclared = ReportStage.validate(
        json!({"targets": [{"cell": {"table": "by_int", "column": "t", "at_most": 1}}],
               "tables": [{"key": "by_init", "stages": ["a"],
                           "columns": [{"key": "t", "metric": "m"}]}]})
        .as_object()
        .unwrap(),
        &Value::Null,
    );
    let e = undeclared.unwrap_err().0;
    assert!(
        e.contains(
            "targets[0].cell.table `by_int` is not a table of `tables` (did you mean \"by_init\"?)"
        ),
        "{e}"
    );
    let two_bounds = ReportStage.validate(
        json!({"targets": [{"cell": {"table": "x", "column": "t", "at_most": 1, "at_least": 0}}]})
            .as_object()
            .unwrap(),
        &Value::Null,
    );
    assert!(
        two_bounds
            .unwrap_err()
            .0
            .contains("targets[0].cell needs one bound")
    );
}
