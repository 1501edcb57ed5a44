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
    no_column_of_ours_is_empty(&ws.path("results/local"));
    every_metrics_key_is_documented(&ws.path(".pipeline/artifacts"));
}

/// docs/metrics.md is checked against what the stages write: every top-level key of every
/// artifact's metrics (the full record, timings included) is named there in backticks.
fn every_metrics_key_is_documented(artifacts: &std::path::Path) {
    let doc = read(format!("{}/docs/metrics.md", env!("CARGO_MANIFEST_DIR")));
    // The words inside `…` spans: a key counts when one of them is the key itself.
    let named: std::collections::BTreeSet<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| span.split(|c: char| !(c.is_alphanumeric() || c == '_')))
        .collect();
    let mut undocumented = std::collections::BTreeSet::new();
    for stage in std::fs::read_dir(artifacts).unwrap() {
        for artifact in std::fs::read_dir(stage.unwrap().path()).unwrap() {
            let dir = artifact.unwrap().path();
            let full = dir.join(".log/metrics.json");
            let path = if full.is_file() {
                full
            } else {
                dir.join("metrics.json")
            };
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            for key in m.as_object().into_iter().flat_map(|o| o.keys()) {
                if !named.contains(key.as_str()) {
                    undocumented.insert(format!("{key} ({})", path.display()));
                }
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "keys docs/metrics.md does not name: {undocumented:#?}"
    );
}

/// The contract between the stages that write metrics and the report that reads them by name:
/// in every published table, every column has a value in at least one of our rows, except the
/// columns that cannot have one in this run (spreads over seeds: one seed here; the published
/// rows' own columns). A field renamed on one side empties its column and fails here, naming
/// the table and the column.
fn no_column_of_ours_is_empty(published: &std::path::Path) {
    let may_be_empty = |c: &str| {
        c.ends_with("_sd")
            || c == "beyond_2sd"
            || c == "note"
            || (c.ends_with("_mean") && (c.starts_with("dev_") || c.starts_with("test_")))
    };
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(published).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
        let Some(rows) = v["rows"].as_array() else {
            continue;
        };
        let ours: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["source"].is_null() || r["source"] == "ours")
            .collect();
        let columns: std::collections::BTreeSet<&String> = ours
            .iter()
            .filter_map(|r| r.as_object())
            .flat_map(|r| r.keys())
            .collect();
        let filled = |c: &str| {
            ours.iter()
                .any(|r| !(r[c].is_null() || r[c] == "" || r[c] == "–"))
        };
        let empty: Vec<&&String> = columns
            .iter()
            .filter(|c| !may_be_empty(c) && !filled(c))
            .collect();
        assert!(
            empty.is_empty(),
            "{}: no row of ours has a value in {empty:?}",
            path.display()
        );
        checked.push(path.file_stem().unwrap().to_string_lossy().into_owned());
    }
    for table in [
        "pretraining",
        "lcqmc",
        "chnsenticorp",
        "msra_ner",
        "ablations",
        "targets",
    ] {
        assert!(
            checked.iter().any(|t| t == table),
            "{table} not published: {checked:?}"
        );
    }
}

/// The five tasks of `experiment.yaml`, as its fine-tuning stages name them.
const FIVE_TASKS: [&str; 5] = [
    "chnsenticorp",
    "smp2020_ewect",
    "msra_ner",
    "lcqmc_afqmc",
    "xnli",
];

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
    for task in FIVE_TASKS {
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

/// `benches/recipe/finetune_grid.yaml` (the fine-tuning recipe chosen on a CPU from a model a
/// GPU sitting brought back) plans on the fixtures: the five tasks of experiment.yaml at each
/// of its learning rates, from the model directory `model` names; and says which file and line
/// where that directory holds nothing.
#[test]
fn the_finetune_grid_plans_the_five_tasks_at_each_learning_rate() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let ws = Ws::new(&read(format!("{repo}/benches/recipe/finetune_grid.yaml")));
    let data = format!("data={repo}/datasets/fixtures");
    let model = format!("model={repo}/tests/fixtures/hf_albert/gelu_new");
    let v = ws.json(&["run", "--dry-run", "--set", &data, "--set", &model], 0);
    let names = instances(&v);
    for task in FIVE_TASKS {
        for lr in ["0.0002", "0.0005", "0.001"] {
            let name = format!("finetune_{task}@learning_rate={lr}");
            assert!(has_entry(&v, &name), "{name} not in {names:?}");
        }
    }
    assert_eq!(names.len(), 15, "{names:?}");

    let out = ws.run(&[
        "run",
        "--dry-run",
        "--set",
        &data,
        "--set",
        "model=no_such_dir",
    ]);
    out.expect_code(2).assert_no_panic();
    assert!(
        out.stderr.contains("pipeline.yaml:") && out.stderr.contains("no_such_dir/*"),
        "{}",
        out.describe()
    );
}

/// A YAML file of the repository, parsed.
fn yaml_file(path: &str) -> yaml_rust2::Yaml {
    let text = read(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")));
    yaml_rust2::YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .remove(0)
}

/// `value` with a whole-value `${vars.NAME}` replaced by the file's var (in turn); anything
/// else as it is (`${vars.data}/…` stays text, the same in both files).
fn resolved(doc: &yaml_rust2::Yaml, value: &yaml_rust2::Yaml) -> yaml_rust2::Yaml {
    match value
        .as_str()
        .and_then(|s| s.strip_prefix("${vars.")?.strip_suffix('}'))
    {
        Some(name) => resolved(doc, &doc["vars"][name]),
        None => value.clone(),
    }
}

/// The fine-tuning grid repeats experiment.yaml's protocols (each file runs alone) and the
/// sitting's scale (`benches/gpu_sitting.sh scale_sets`, and its `lr_grid`): all must agree, or
/// the grid would choose a recipe for other data or another scale than the one it is for.
#[test]
fn the_finetune_grid_fine_tunes_as_the_experiment_and_the_sitting_do() {
    let (exp, grid) = (
        yaml_file("experiment.yaml"),
        yaml_file("benches/recipe/finetune_grid.yaml"),
    );
    for var in ["lcqmc_afqmc_train", "xnli_train", "xnli_eval"] {
        assert_eq!(exp["vars"][var], grid["vars"][var], "vars.{var}");
    }
    for task in FIVE_TASKS {
        let stage = format!("finetune_{task}");
        for doc in [&exp, &grid] {
            // A stage missing from a file would compare its absent params equal.
            assert!(
                doc["stages"][stage.as_str()]["params"]["task"]
                    .as_str()
                    .is_some(),
                "{stage}"
            );
        }
        for key in [
            "task",
            "train",
            "dev",
            "test",
            "eval",
            "dev_fraction",
            "max_seq_length",
        ] {
            let (e, g) = (
                &exp["stages"][stage.as_str()]["params"][key],
                &grid["stages"][stage.as_str()]["params"][key],
            );
            assert_eq!(resolved(&exp, e), resolved(&grid, g), "{stage}.{key}");
        }
    }
    // The sitting's scale: `local single=30000 pair=50000 …` in scale_sets.
    let script = read(format!(
        "{}/benches/gpu_sitting.sh",
        env!("CARGO_MANIFEST_DIR")
    ));
    let scale: std::collections::HashMap<&str, &str> = script
        .lines()
        .find(|l| l.trim_start().starts_with("local single="))
        .expect("scale_sets' values")
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    for (shell, var) in [
        ("single", "single_max_train_examples"),
        ("pair", "pair_max_train_examples"),
        ("epochs", "epochs"),
        ("cepochs", "chnsenticorp_epochs"),
        ("fbatch", "batch_size"),
        ("nbatch", "msra_ner_batch_size"),
        ("nepochs", "msra_ner_epochs"),
    ] {
        let value = grid["vars"][var].as_i64().map(|v| v.to_string());
        assert_eq!(value.as_deref(), scale.get(shell).copied(), "vars.{var}");
    }
    let rates: Vec<f64> = grid["vars"]["learning_rates"]
        .as_vec()
        .expect("learning_rates")
        .iter()
        .filter_map(yaml_rust2::Yaml::as_f64)
        .collect();
    let flr: f64 = scale["flr"].parse().expect("flr");
    assert!(rates.contains(&flr), "{flr} not in {rates:?}");
    let sitting = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("echo \"${LR_GRID-"))
        .and_then(|l| l.strip_suffix("}\""))
        .expect("lr_grid's default");
    let sitting: Vec<f64> = sitting.split(' ').filter_map(|r| r.parse().ok()).collect();
    assert_eq!(sitting, rates, "the sitting's LR_GRID");
}

#[test]
#[should_panic(expected = "no row of ours has a value in [\"tokens_seen\"]")]
fn the_column_contract_fails_on_a_column_no_row_fills() {
    let dir = tempfile::tempdir().unwrap();
    let table = serde_json::json!({"rows": [
        {"source": "ours", "run": "pretrain", "tokens_seen": null, "test_sd": null},
        {"source": "published", "run": "albert_zh_base", "tokens_seen": 1}
    ]});
    std::fs::write(dir.path().join("pretraining.json"), table.to_string()).unwrap();
    no_column_of_ours_is_empty(dir.path());
}

#[test]
#[should_panic(expected = "keys docs/metrics.md does not name")]
fn the_docs_check_fails_on_a_key_the_docs_do_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let artifact = dir.path().join("pretrain").join("0123");
    std::fs::create_dir_all(&artifact).unwrap();
    let m = serde_json::json!({"tokens_seen": 1, "a_key_nobody_documented": 2});
    std::fs::write(artifact.join("metrics.json"), m.to_string()).unwrap();
    every_metrics_key_is_documented(dir.path());
}
