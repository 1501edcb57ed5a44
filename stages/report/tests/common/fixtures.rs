//! The hand-written dep artifacts the report's end-to-end tests run on (metrics.json,
//! metrics.jsonl and MANIFEST.json as docs/metrics.md and the engine write them), and running
//! the stage on them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipeline_engine::stage::{DepArtifact, Stage, StageContext};
use serde_json::{Map, Value, json};
use stage_report::ReportStage;

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

pub fn manifest(instance: &str, finished: &str) -> String {
    json!({"format": 1, "instance": instance, "record": {"finished": finished,
        "status": "ok"}})
    .to_string()
}

pub fn coords(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

pub fn pretrain(root: &Path, share: &str, mlm: f64) -> DepArtifact {
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

pub fn protocol(task: &str) -> Value {
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

pub fn finetune(root: &Path, task: &str, share: &str, init: &str, acc: f64) -> DepArtifact {
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

pub fn all_deps(root: &Path) -> Vec<DepArtifact> {
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
pub fn run(
    root: &Path,
    deps: &[DepArtifact],
    params: Value,
    inputs: &[PathBuf],
    out: &str,
) -> PathBuf {
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

pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
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

pub fn text(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// A fine-tuning run with a `seed` coordinate (its own artifact directory).
pub fn seeded(root: &Path, seed: u64, acc: f64) -> DepArtifact {
    let mut d = finetune(root, "lcqmc", "all", "pretrained", acc);
    let dir = d.dir.with_file_name(format!("seed{seed}"));
    std::fs::rename(&d.dir, &dir).unwrap();
    d.dir = dir;
    d.instance = format!("{},seed={seed}", d.instance);
    d.coords.insert("seed".into(), json!(seed));
    d
}
