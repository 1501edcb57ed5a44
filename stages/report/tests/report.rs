//! The report stage end to end on hand-written dep artifacts (metrics.json, metrics.jsonl and
//! MANIFEST.json as docs/metrics.md and the engine write them): the files, their content,
//! determinism, missing upstreams, publishing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipeline_engine::stage::{DepArtifact, Stage, StageContext};
use serde_json::{Map, Value, json};
use stage_report::ReportStage;

#[path = "common/golden.rs"]
mod golden;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn manifest(instance: &str, finished: &str) -> String {
    json!({"format": 1, "instance": instance, "record": {"finished": finished,
        "status": "ok"}})
    .to_string()
}

fn coords(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

fn pretrain(root: &Path, share: &str, mlm: f64) -> DepArtifact {
    let instance = format!("pretrain@share_type={share}");
    let dir = root.join(".pipeline/artifacts").join(&instance).join("abc");
    let params = if share == "all" { 1_312_000 } else { 1_900_000 };
    write(
        &dir.join("metrics.json"),
        &serde_json::to_string_pretty(&json!({
            "model": "tiny",
            "config": {"vocab_size": 21128, "embedding_size": 64, "hidden_size": 128,
                "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512,
                "share_type": share, "ln_type": "postln"},
            "parameters": {"word_embeddings": 1352192, "embeddings": 1385000,
                "encoder": 200000, "pooler": 16512, "mlm_head": 29000, "sop_head": 258,
                "backbone": params - 30000, "total": params},
            "share_type": share, "ln_type": "postln", "hf_compatible": true,
            "steps": 200, "batch_size": 16, "grad_accum_steps": 1,
            "effective_batch_size": 16, "max_seq_length": 128,
            "optimizer": {"optimizer": "lamb", "learning_rate": 0.002, "weight_decay": 0.01,
                "warmup_steps": 20, "total_steps": 200},
            "tokens_seen": 301234, "padded_tokens_seen": 400000,
            "train_seconds": 95.5, "wall_seconds": 101.25, "tokens_per_s": 3154.0,
            "padded_tokens_per_s": 4188.0, "model_tflops_per_s": 0.012,
            "device": "flex", "precision": "fp32", "threads": 2, "resumed_from_step": null,
            "train_instances_per_epoch": 12000, "epochs": 0.27,
            "eval": {"mlm_loss": 5.125, "mlm_accuracy": mlm, "sop_loss": 0.66,
                "sop_accuracy": 0.61, "instances": 640, "predictions": 12000}
        }))
        .unwrap(),
    );
    let mut lines = String::new();
    for step in [1u64, 10, 20, 30, 40, 50] {
        let loss = 10.5 - step as f64 * 0.08;
        lines.push_str(
            &json!({"step": step, "loss": loss, "mlm_loss": loss - 0.69, "sop_loss": 0.69,
                "mlm_accuracy": 0.01 * step as f64, "sop_accuracy": 0.5, "lr": 0.001,
                "grad_norm": 1.5, "tokens_per_s": 3000.0, "elapsed_s": step as f64})
            .to_string(),
        );
        lines.push('\n');
        if step % 25 == 0 || step == 50 {
            lines.push_str(
                &json!({"step": step, "eval_mlm_loss": 6.0, "eval_mlm_accuracy": mlm,
                    "eval_sop_loss": 0.67, "eval_sop_accuracy": 0.6})
                .to_string(),
            );
            lines.push('\n');
        }
    }
    write(&dir.join("metrics.jsonl"), &lines);
    write(
        &dir.join("MANIFEST.json"),
        &manifest(&instance, "2026-11-20T10:00:00.000Z"),
    );
    DepArtifact {
        instance,
        stage: "pretrain".into(),
        kind: "pretrain".into(),
        coords: coords(&[("share_type", share)]),
        dir,
    }
}

fn protocol(task: &str) -> Value {
    if task == "lcqmc" {
        json!({"task": "lcqmc", "kind": "pair", "labels": ["0", "1"], "split_seed": 12345,
            "dev_fraction": 0.1, "max_train_examples": null, "max_eval_examples": null,
            "max_bad_fraction": 0.01, "drop_eval_overlap": true,
            "train": {"name": "train", "examples": 7922, "available": 7922,
                "label_counts": [3000, 4922],
                "files": [{"path": "../shared/datasets/lcqmc/dev.tsv", "format": "lcqmc",
                    "header": false, "rows": 8802, "examples": 8802, "blank_lines": 0,
                    "label_counts": [3500, 5302], "bad": {"total": 0, "by_reason": {},
                    "samples": []}}]},
            "dev": {"name": "dev", "examples": 880, "available": 880,
                "held_out_from_train": true, "label_counts": [440, 440],
                "files": [{"path": "../shared/datasets/lcqmc/dev.tsv"}]},
            "eval": [{"name": "test", "examples": 12500, "available": 12500,
                "label_counts": [6250, 6250],
                "files": [{"path": "../shared/datasets/lcqmc/test.tsv"}]}]})
    } else {
        json!({"task": "xnli", "kind": "pair",
            "labels": ["contradiction", "entailment", "neutral"], "split_seed": 12345,
            "dev_fraction": 0.05, "max_train_examples": 20000, "max_eval_examples": null,
            "max_bad_fraction": 0.01, "drop_eval_overlap": true,
            "train": {"name": "train", "examples": 20000, "available": 40000,
                "label_counts": [1, 1, 1],
                "files": [{"path": "../shared/datasets/nli_extra/cmnli/dev.tsv",
                    "dropped_eval_overlap": 2490}]},
            "dev": {"name": "dev", "examples": 1000, "available": 2000,
                "held_out_from_train": true, "label_counts": [1, 1, 1], "files": []},
            "eval": [
                {"name": "xnli_dev", "examples": 2490, "available": 2490,
                    "label_counts": [1, 1, 1],
                    "files": [{"path": "../shared/datasets/xnli_zh/dev.tsv"}]},
                {"name": "xnli_test", "examples": 5010, "available": 5010,
                    "label_counts": [1, 1, 1],
                    "files": [{"path": "../shared/datasets/xnli_zh/test.tsv"}]}]})
    }
}

fn finetune(root: &Path, task: &str, share: &str, init: &str, acc: f64) -> DepArtifact {
    let instance = format!("finetune_{task}@share_type={share},init={init}");
    let dir = root.join(".pipeline/artifacts").join(&instance).join("def");
    let metrics = |a: f64| {
        json!({"examples": 1000, "accuracy": a, "f1": null,
        "macro_f1": a - 0.01, "confusion": {"labels": ["0", "1"], "counts": [[1, 0], [0, 1]]}})
    };
    let eval = if task == "lcqmc" {
        json!({"test": metrics(acc - 0.02)})
    } else {
        json!({"xnli_dev": metrics(acc - 0.01), "xnli_test": metrics(acc - 0.03)})
    };
    let history: Vec<Value> = (1..=3)
        .map(|e| {
            json!({"epoch": e, "train_loss": 0.7 - 0.1 * e as f64, "train_accuracy": 0.6,
                "dev_accuracy": acc - 0.05 + 0.02 * e as f64 - 0.01, "dev_f1": null,
                "dev_macro_f1": 0.5, "seconds": 30.0})
        })
        .collect();
    write(
        &dir.join("metrics.json"),
        &serde_json::to_string_pretty(&json!({
            "task": task, "kind": "pair", "labels": ["0", "1"], "init": init,
            "init_from": null,
            "pretrain_instance": if init == "pretrained" {
                Value::from(format!("pretrain@share_type={share}"))
            } else { Value::Null },
            "share_type": share, "ln_type": "postln",
            "config": {"vocab_size": 21128, "embedding_size": 64, "hidden_size": 128,
                "num_hidden_layers": 4},
            "parameters": 1_300_000, "protocol": protocol(task),
            "epochs": 3, "steps": 750, "batch_size": 32, "learning_rate": 0.0001,
            "max_seq_length": 128, "warmup_steps": 75, "dropout": 0.1, "seed": 42,
            "history": history, "best_epoch": 3,
            "dev": metrics(acc), "eval": eval,
            "train_seconds": 90.0, "train_examples_per_s": 264.1,
            "eval_sentences_per_s": 812.5, "wall_seconds": 120.0,
            "device": "flex", "threads": 2
        }))
        .unwrap(),
    );
    write(
        &dir.join("MANIFEST.json"),
        &manifest(&instance, "2026-11-21T08:30:00.000Z"),
    );
    DepArtifact {
        instance,
        stage: format!("finetune_{task}"),
        kind: "finetune".into(),
        coords: coords(&[("share_type", share), ("init", init)]),
        dir,
    }
}

fn all_deps(root: &Path) -> Vec<DepArtifact> {
    let mut deps = vec![
        pretrain(root, "all", 0.1834),
        pretrain(root, "none", 0.2011),
    ];
    for share in ["all", "none"] {
        for (init, acc) in [("pretrained", 0.7312), ("random", 0.6645)] {
            deps.push(finetune(root, "lcqmc", share, init, acc));
            deps.push(finetune(root, "xnli", share, init, acc - 0.2));
        }
    }
    // Another order than the sorted one: the report must not depend on it.
    deps.reverse();
    deps
}

/// Runs the stage; returns the artifact directory.
fn run(root: &Path, deps: &[DepArtifact], params: Value, inputs: &[PathBuf], out: &str) -> PathBuf {
    let out_dir = root.join(out);
    let work = root.join(format!("{out}-work"));
    let log = root.join(format!("{out}-log"));
    for d in [&out_dir, &work, &log] {
        std::fs::create_dir_all(d).unwrap();
    }
    let params: Map<String, Value> = serde_json::from_value(params).unwrap();
    let stage = ReportStage;
    stage.validate(&params, &Value::Null).unwrap();
    let bar = indicatif::ProgressBar::hidden();
    let ctx = StageContext {
        instance: "report",
        stage: "report",
        params: &params,
        spec: &Value::Null,
        root,
        out_dir: &out_dir,
        work_dir: &work,
        log_dir: &log,
        inputs,
        deps,
        progress: &bar,
    };
    stage.run(&ctx).unwrap();
    out_dir
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn text(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

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

/// A fine-tuning run with a `seed` coordinate (its own artifact directory).
fn seeded(root: &Path, seed: u64, acc: f64) -> DepArtifact {
    let mut d = finetune(root, "lcqmc", "all", "pretrained", acc);
    let dir = d.dir.with_file_name(format!("seed{seed}"));
    std::fs::rename(&d.dir, &dir).unwrap();
    d.dir = dir;
    d.instance = format!("{},seed={seed}", d.instance);
    d.coords.insert("seed".into(), json!(seed));
    d
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
