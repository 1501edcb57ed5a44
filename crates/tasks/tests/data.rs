//! The readers and protocols on real files: the project's own fixtures (always), and the shared
//! benchmark data when `PIPELINE_DATA_ROOT` points at it (`../shared/datasets`; skipped with a
//! note otherwise). Row counts and label counts are those in each folder's SOURCE.txt.

use std::path::{Path, PathBuf};

use pipeline_tasks::read::{read_choice_file, read_pair_file};
use pipeline_tasks::{Examples, Protocol, ProtocolSpec, Task, TaskKind};
use serde_json::{Value, json};

/// The workspace root, where `datasets/fixtures` lives.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(root: &Path, params: Value) -> Protocol {
    let spec = ProtocolSpec::from_params(params.as_object().expect("params are a map"))
        .unwrap_or_else(|e| panic!("{e}"));
    spec.load(root).unwrap_or_else(|e| panic!("{e}"))
}

fn lcqmc_params(data: &str) -> Value {
    json!({
        "task": "lcqmc",
        "train": format!("{data}/lcqmc/dev.tsv"),
        "dev_fraction": 0.1,
        "test": format!("{data}/lcqmc/test.tsv"),
    })
}

fn xnli_params(data: &str) -> Value {
    json!({
        "task": "xnli",
        "train": [
            {"path": format!("{data}/nli_extra/cmnli/dev.tsv"), "format": "cmnli"},
            {"path": format!("{data}/nli_extra/ocnli/dev.tsv"), "format": "ocnli"},
            {"path": format!("{data}/nli_extra/cnsd_snli/dev.tsv"), "format": "cnsd_snli"},
            {"path": format!("{data}/nli_extra/cnsd_snli/test.tsv"), "format": "cnsd_snli"},
        ],
        "dev_fraction": 0.05,
        "eval": {
            "xnli_dev": format!("{data}/xnli_zh/dev.tsv"),
            "xnli_test": format!("{data}/xnli_zh/test.tsv"),
        },
    })
}

fn sizes(p: &Protocol) -> Vec<usize> {
    std::iter::once(&p.train)
        .chain(std::iter::once(&p.dev))
        .chain(&p.eval)
        .map(|s| s.len())
        .collect()
}

#[test]
fn fixtures_make_the_default_protocols() {
    let root = workspace();
    let p = load(&root, lcqmc_params("datasets/fixtures"));
    assert_eq!(sizes(&p), [90, 10, 80]);
    assert_eq!(p.bad_rows(), 0);
    assert_eq!(p.files[0].label_counts, [50, 50]);
    assert_eq!(p.eval[0].label_counts, [40, 40]);
    assert_eq!(p.dev.overlap_with_train, Some(0));
    assert_eq!(p.eval[0].overlap_with_train, Some(0));

    let p = load(&root, xnli_params("datasets/fixtures"));
    // 4 files of 60 = 240; 5 % = 12 held out.
    assert_eq!(sizes(&p), [228, 12, 60, 60]);
    assert_eq!(p.bad_rows(), 0);
    for f in &p.files {
        assert_eq!(f.label_counts, [20, 20, 20], "{}", f.path);
    }
    assert_eq!(p.eval[0].name, "xnli_dev");
    assert_eq!(p.eval[1].overlap_with_train, Some(0));

    let p = load(
        &root,
        json!({"task": "choice", "train": "datasets/fixtures/choice/train.jsonl",
               "dev_fraction": 0.1, "test": "datasets/fixtures/choice/test.jsonl"}),
    );
    assert_eq!(sizes(&p), [54, 6, 24]);
    assert_eq!(p.num_choices, Some(4));
    assert_eq!(p.files[0].label_counts, [15, 15, 15, 15]);
    assert_eq!(p.bad_rows(), 0);
}

#[test]
fn fixture_texts_are_clean() {
    // Every fixture text is non-empty, has no stray whitespace, and no text pair repeats.
    let root = workspace().join("datasets/fixtures");
    for (file, format) in [
        ("lcqmc/dev.tsv", "lcqmc"),
        ("lcqmc/test.tsv", "lcqmc"),
        ("xnli_zh/dev.tsv", "xnli"),
        ("xnli_zh/test.tsv", "xnli"),
        ("nli_extra/cmnli/dev.tsv", "cmnli"),
        ("nli_extra/ocnli/dev.tsv", "ocnli"),
        ("nli_extra/cnsd_snli/dev.tsv", "cnsd_snli"),
        ("nli_extra/cnsd_snli/test.tsv", "cnsd_snli"),
    ] {
        let Some(Task::Pair(f)) = Task::builtin(format) else {
            panic!("{format}")
        };
        let r = read_pair_file(&root.join(file), file, &f, &f.labels).unwrap();
        assert_eq!(r.report.bad.total, 0, "{file}");
        assert_eq!(r.report.blank_lines, 0, "{file}");
        let mut pairs: Vec<_> = r.examples.iter().map(|e| (&e.text_a, &e.text_b)).collect();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), r.examples.len(), "{file} repeats a pair");
    }
    let Some(Task::Choice(c)) = Task::builtin("choice") else {
        panic!()
    };
    let r = read_choice_file(&root.join("choice/train.jsonl"), "train.jsonl", &c).unwrap();
    assert_eq!(r.num_choices, 4);
    assert!(
        r.examples
            .iter()
            .all(|e| e.choices.iter().all(|c| !c.is_empty()))
    );
}

/// The shared data root, or `None` (with a note) when it is not configured or not there.
fn data_root() -> Option<PathBuf> {
    let Some(root) = std::env::var_os("PIPELINE_DATA_ROOT") else {
        eprintln!(
            "note: PIPELINE_DATA_ROOT is unset; skipping the tests on the shared data \
             (PIPELINE_DATA_ROOT=../shared/datasets cargo test -p pipeline-tasks)"
        );
        return None;
    };
    // Relative to the workspace root, as the pipeline sees it (tests run in the crate's folder).
    let root = PathBuf::from(root);
    let root = if root.is_absolute() {
        root
    } else {
        workspace().join(root)
    };
    if !root.join("lcqmc").is_dir() {
        eprintln!(
            "note: PIPELINE_DATA_ROOT={} has no lcqmc/; skipping the tests on the shared data",
            root.display()
        );
        return None;
    }
    Some(root)
}

#[test]
fn shared_files_have_the_rows_source_txt_says() {
    let Some(root) = data_root() else { return };
    // (file, format, rows, examples per class id) from each SOURCE.txt; no bad rows.
    let files: &[(&str, &str, usize, &[usize])] = &[
        ("lcqmc/dev.tsv", "lcqmc", 8802, &[4400, 4402]),
        ("lcqmc/test.tsv", "lcqmc", 12500, &[6250, 6250]),
        ("afqmc/train.tsv", "afqmc", 34334, &[23761, 10573]),
        ("afqmc/dev.tsv", "afqmc", 4316, &[2978, 1338]),
        ("xnli_zh/dev.tsv", "xnli", 2490, &[830, 830, 830]),
        ("xnli_zh/test.tsv", "xnli", 5010, &[1670, 1670, 1670]),
        (
            "nli_extra/cmnli/dev.tsv",
            "cmnli",
            12241,
            &[4038, 4277, 3926],
        ),
        ("nli_extra/ocnli/dev.tsv", "ocnli", 2950, &[900, 947, 1103]),
        (
            "nli_extra/cnsd_snli/dev.tsv",
            "cnsd_snli",
            9314,
            &[3099, 3162, 3053],
        ),
        (
            "nli_extra/cnsd_snli/test.tsv",
            "cnsd_snli",
            9176,
            &[3030, 3146, 3000],
        ),
    ];
    for &(file, format, rows, counts) in files {
        let Some(Task::Pair(f)) = Task::builtin(format) else {
            panic!("{format}")
        };
        let r =
            read_pair_file(&root.join(file), file, &f, &f.labels).unwrap_or_else(|e| panic!("{e}"));
        let rep = &r.report;
        eprintln!(
            "{file}: {} rows, {} examples, bad: {}, per class {:?}",
            rep.rows,
            rep.examples,
            rep.bad.counts_line(),
            rep.label_counts
        );
        assert_eq!(rep.rows, rows, "{file}");
        assert_eq!(rep.bad.total, 0, "{file}: {:?}", rep.bad.samples);
        assert_eq!(rep.label_counts, counts, "{file}");
        assert_eq!(rep.header, format == "xnli", "{file}");
    }
    // The XNLI file read as a header-less NLI file is caught.
    let Some(Task::Pair(f)) = Task::builtin("cnsd_snli") else {
        panic!()
    };
    let e = read_pair_file(
        &root.join("xnli_zh/dev.tsv"),
        "xnli_zh/dev.tsv",
        &f,
        &f.labels,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("xnli_zh/dev.tsv:1: looks like a header"),
        "{e}"
    );
    // CMNLI read with XNLI's format (forgot `format: cmnli`): no header where one is expected.
    let Some(Task::Pair(f)) = Task::builtin("xnli") else {
        panic!()
    };
    let e = read_pair_file(
        &root.join("nli_extra/cmnli/dev.tsv"),
        "nli_extra/cmnli/dev.tsv",
        &f,
        &f.labels,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("nli_extra/cmnli/dev.tsv:1: header: true, but this line looks like data"),
        "{e}"
    );
    // LCQMC read with XNLI's format: the header lacks the columns.
    let e = read_pair_file(&root.join("lcqmc/dev.tsv"), "lcqmc/dev.tsv", &f, &f.labels)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lcqmc/dev.tsv:1: no column `text_a` in the header"),
        "{e}"
    );
}

#[test]
fn shared_default_protocols() {
    let Some(root) = data_root() else { return };
    let data = root.to_string_lossy().into_owned();
    let p = load(&root, lcqmc_params(&data));
    eprintln!(
        "LCQMC: train {} dev {} test {}; dropped from train as test pairs: {}",
        p.train.len(),
        p.dev.len(),
        p.eval[0].len(),
        p.train.dropped_eval_overlap,
    );
    // One test pair (移动有什么软件可以赚流量 / 什么软件可以送流量？移动卡！) is also an LCQMC
    // dev pair; it leaves the train pool, 8,801 are left, 880 (10 %) held out.
    assert_eq!(p.train.dropped_eval_overlap, 1);
    assert_eq!(sizes(&p), [7921, 880, 12500]);
    assert_eq!(p.dev.label_counts, [440, 440]);
    assert_eq!(p.eval[0].overlap_with_train, Some(0));
    assert_eq!(p.bad_rows(), 0);

    let p = load(&root, xnli_params(&data));
    let dropped: Vec<(&str, usize)> = p
        .files
        .iter()
        .map(|f| {
            (
                f.path.rsplit_once("datasets/").map_or(&*f.path, |x| x.1),
                f.dropped_eval_overlap,
            )
        })
        .collect();
    eprintln!(
        "XNLI: train {} dev {} xnli_dev {} xnli_test {}; dropped from train as eval pairs: \
         {dropped:?}",
        p.train.len(),
        p.dev.len(),
        p.eval[0].len(),
        p.eval[1].len(),
    );
    // CMNLI's dev set (CLUE) contains every XNLI dev pair: without dropping them, xnli_dev
    // would measure memorisation.
    assert_eq!(p.files[0].dropped_eval_overlap, 2490);
    assert_eq!(p.train.dropped_eval_overlap, 2490);
    // 12,241 + 2,950 + 9,314 + 9,176 = 33,681, less 2,490 = 31,191; 5 % = 1,560.
    assert_eq!(p.train.available, 31191);
    assert_eq!(sizes(&p), [29631, 1560, 2490, 5010]);
    assert_eq!(p.eval[0].overlap_with_train, Some(0));
    assert_eq!(p.eval[1].overlap_with_train, Some(0));
    assert_eq!(p.bad_rows(), 0);
    assert_eq!(p.spec.task.kind(), TaskKind::Pair);
    let Examples::Pair(train) = &p.train.examples else {
        panic!()
    };
    // Every train file contributes.
    for id in 0..4 {
        assert!(train.iter().any(|e| e.file == id));
    }
    // metrics.json gets sizes and files as given.
    let j = p.to_json();
    assert_eq!(j["train"]["files"].as_array().map(Vec::len), Some(4));
    assert_eq!(j["train"]["dropped_eval_overlap"], 2490);
    assert_eq!(j["eval"][1]["files"][0]["rows"], 5010);

    // With drop_eval_overlap: false the leak is there to see.
    let mut params = xnli_params(&data);
    params["drop_eval_overlap"] = json!(false);
    let p = load(&root, params);
    eprintln!(
        "XNLI without dropping: xnli_dev pairs also in train: {:?}",
        p.eval[0].overlap_with_train
    );
    assert_eq!(sizes(&p)[..2], [31997, 1684]);
    assert!(p.eval[0].overlap_with_train.unwrap_or(0) > 2000);
}
