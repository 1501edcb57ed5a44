//! The data stages (`clean`, `vocab`, `mask`) through the binary: the default `pipeline.yaml`
//! on the bundled fixtures (artifacts, metrics, caching, early cutoff), determinism across
//! thread counts, bad input, the real corpora when `PIPELINE_DATA_ROOT` points at them, and the
//! artifacts as Python users open them (Hugging Face `tokenizers`, pyarrow, polars; each
//! skipped with a note when python3 lacks the package).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn fixtures() -> String {
    format!("{}/datasets/fixtures", repo())
}

/// The repository's default `pipeline.yaml`, in a fresh temporary workspace.
fn default_ws() -> Ws {
    Ws::new(&read(format!("{}/pipeline.yaml", repo())))
}

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn metrics(dir: &Path) -> Value {
    json_file(dir.join("metrics.json"))
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn assert_within(what: &str, v: f64, lo: f64, hi: f64) {
    assert!(
        (lo..=hi).contains(&v),
        "{what} = {v}, expected within [{lo}, {hi}]"
    );
}

/// The files of an artifact as its MANIFEST.json lists them: path → (size, blake3).
fn manifest_files(dir: &Path) -> BTreeMap<String, (u64, String)> {
    let m = json_file(dir.join("MANIFEST.json"));
    m["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in the manifest of {}: {m:#}", dir.display()))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    u64_of(&f["size"]),
                    f["blake3"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// The plain files of `dir` (no dot files), sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Asserts the file is an Arrow IPC file (magic at both ends).
fn assert_arrow_file(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        bytes.len() > 12 && bytes.starts_with(b"ARROW1") && bytes.ends_with(b"ARROW1"),
        "{} is not an Arrow IPC file",
        path.display()
    );
}

/// `pipeline run ARGS... --json` with extra environment variables, expecting success.
fn run_ok_env(ws: &Ws, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = ws.command(&["run"]);
    cmd.args(args).arg("--json").stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("starting the pipeline binary");
    let out = Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    out.expect_code(0);
    out.assert_no_panic();
    let v = out.json();
    assert_eq!(v["ok"], true, "run reported ok=false: {v:#}");
    v
}

// ---------------------------------------------------------------------------------------------
// The default pipeline on the fixtures
// ---------------------------------------------------------------------------------------------

#[test]
fn default_pipeline_masks_the_fixtures_caches_and_cuts_off_early() {
    let ws = default_ws();
    let data = format!("data={}", fixtures());
    let set = |extra: &[&str]| {
        let mut a = vec!["mask", "--set", data.as_str()];
        a.extend_from_slice(extra);
        ws.run_ok(&a)
    };

    // First run: everything runs.
    let first = set(&[]);
    assert_eq!(
        first["counts"],
        json!({"ran": 3, "cached": 0, "failed": 0, "skipped": 0}),
        "{first:#}"
    );
    let clean = artifact(&first, "clean");
    let vocab = artifact(&first, "vocab");
    let mask = artifact(&first, "mask");

    // clean: one corpus shard, one sentence a line, blank line between documents; the counts
    // of datasets/README.md (1 exact duplicate, 1 near-duplicate, 1 too-short document).
    assert_eq!(
        listing(&clean),
        ["MANIFEST.json", "corpus-00000.txt", "metrics.json"]
    );
    let cm = metrics(&clean);
    assert_eq!(cm["files"], 3, "{cm:#}");
    assert_eq!(cm["documents_in"], 130, "{cm:#}");
    assert_eq!(cm["documents_out"], 127, "{cm:#}");
    assert_eq!(cm["drops"]["duplicate"], 1, "{cm:#}");
    assert_eq!(cm["drops"]["near_duplicate"], 1, "{cm:#}");
    assert_eq!(cm["drops"]["short_document"], 1, "{cm:#}");
    assert_eq!(cm["invalid_utf8_lines"], 0, "{cm:#}");
    assert_eq!(cm["shards"], 1, "{cm:#}");
    let corpus = read(clean.join("corpus-00000.txt"));
    let docs: Vec<&str> = corpus.split("\n\n").collect();
    assert_eq!(docs.len() as u64, u64_of(&cm["documents_out"]));
    let sentences = corpus.lines().filter(|l| !l.is_empty()).count() as u64;
    assert_eq!(sentences, u64_of(&cm["sentences_out"]), "{cm:#}");
    let chars: usize = corpus.lines().map(|l| l.chars().count()).sum();
    assert_eq!(chars as u64, u64_of(&cm["chars_out"]), "{cm:#}");
    // Normalised: full-width digits, HTML and Traditional characters are gone.
    for bad in [
        "２０２４",
        "<br>",
        "&nbsp;",
        "這個週末",
        "\u{200b}",
        "\u{3000}",
    ] {
        assert!(!corpus.contains(bad), "clean output still holds {bad:?}");
    }
    assert!(
        corpus.contains("2024年5月18日"),
        "full-width digits not folded"
    );
    assert!(corpus.contains("这个周末"), "Traditional not converted");

    // vocab: the fixture vocab.txt adopted as is, a tokenizer.json, coverage statistics.
    assert_eq!(
        listing(&vocab),
        [
            "MANIFEST.json",
            "metrics.json",
            "tokenizer.json",
            "vocab.txt"
        ]
    );
    let fixture_vocab = read(format!("{}/vocab/vocab.txt", fixtures()));
    assert_eq!(read(vocab.join("vocab.txt")), fixture_vocab);
    let tj = json_file(vocab.join("tokenizer.json"));
    assert_eq!(tj["model"]["type"], "WordPiece", "tokenizer.json model");
    assert_eq!(
        tj["model"]["vocab"].as_object().map(|m| m.len()),
        Some(1291),
        "tokenizer.json vocab size"
    );
    let vm = metrics(&vocab);
    assert_eq!(vm["source"], "file");
    assert_eq!(vm["vocab_size"], 1291);
    assert_eq!(vm["special_ids"], json!([0, 1, 2, 3, 4]));
    assert_eq!(
        vm["unk_tokens"], 0,
        "the fixture vocab covers its corpus: {vm:#}"
    );
    assert!(u64_of(&vm["tokens"]) > 9_000, "{vm:#}");

    // mask: one training shard per masking pass (dupe_factor 5), one eval shard, metrics
    // consistent with clean and vocab.
    let train_shards: Vec<String> = (0..5).map(|i| format!("shard-{i:05}.arrow")).collect();
    let mut files = vec!["MANIFEST.json", "eval-00000.arrow", "metrics.json"];
    files.extend(train_shards.iter().map(String::as_str));
    assert_eq!(listing(&mask), files);
    for file in train_shards
        .iter()
        .map(String::as_str)
        .chain(["eval-00000.arrow"])
    {
        assert_arrow_file(&mask.join(file));
    }
    let mm = metrics(&mask);
    assert_eq!(mm["documents"], cm["documents_out"], "{mm:#}");
    assert_eq!(mm["sentences"], cm["sentences_out"], "{mm:#}");
    assert_eq!(mm["corpus_tokens"], vm["tokens"], "{mm:#}");
    assert_eq!(mm["dupe_factor"], 5);
    assert_eq!(mm["max_seq_length"], 128);
    assert_eq!(mm["train"]["shards"], json!(train_shards));
    assert_eq!(mm["eval"]["shards"], json!(["eval-00000.arrow"]));
    let eval_docs = u64_of(&mm["eval_documents"]);
    assert!((1..=10).contains(&eval_docs), "eval_documents {eval_docs}");
    let train = &mm["train"];
    let instances = u64_of(&train["instances"]);
    // Five passes over ~125 documents of ~80 tokens: several hundred instances.
    assert!((400..2_000).contains(&instances), "{mm:#}");
    assert!(u64_of(&mm["eval"]["instances"]) >= 1, "{mm:#}");
    assert_within("train.mask_rate", f64_of(&train["mask_rate"]), 0.13, 0.16);
    assert_within(
        "train.mean_length",
        f64_of(&train["mean_length"]),
        20.0,
        128.0,
    );
    assert_within(
        "train.sop_swapped_fraction",
        f64_of(&train["sop_swapped_fraction"]),
        0.4,
        0.6,
    );
    assert_within(
        "train.replaced_by_mask",
        f64_of(&train["replaced_by_mask"]),
        0.75,
        0.85,
    );
    assert_eq!(
        u64_of(&train["tokens"]),
        (f64_of(&train["mean_length"]) * instances as f64).round() as u64,
        "{mm:#}"
    );
    let h = &train["ngram_histogram"];
    let (n1, n2, n3) = (u64_of(&h["1"]), u64_of(&h["2"]), u64_of(&h["3"]));
    assert!(n1 > n2 && n2 > n3 && n3 > 0, "n-gram histogram {h}");
    // The manifest lists exactly the files of the artifact.
    for dir in [&clean, &vocab, &mask] {
        let mut files: Vec<String> = manifest_files(dir).into_keys().collect();
        files.push("MANIFEST.json".into());
        files.sort();
        assert_eq!(files, listing(dir), "manifest of {}", dir.display());
    }

    // Second run: all cached.
    let v = set(&[]);
    assert_eq!(
        v["counts"],
        json!({"ran": 0, "cached": 3, "failed": 0, "skipped": 0}),
        "{v:#}"
    );

    // A mask param: only mask re-runs, into other shards.
    let v = set(&["--set", "mask.seed=7"]);
    assert_status(&v, "clean", "cached");
    assert_status(&v, "vocab", "cached");
    assert_status(&v, "mask", "ran");
    assert_reason(&v, "mask", "param seed changed 12345 → 7");
    let seeded = artifact(&v, "mask");
    assert_ne!(
        manifest_files(&seeded)["shard-00000.arrow"],
        manifest_files(&mask)["shard-00000.arrow"],
        "another seed gave the same shard"
    );
    assert_eq!(metrics(&seeded)["documents"], mm["documents"]);

    // A clean param that does not change clean's output (the one near-duplicate is still
    // dropped at 0.7): clean re-runs, vocab and mask stay cached (early cutoff).
    let v = set(&["--set", "clean.near_dup_threshold=0.7"]);
    assert_status(&v, "clean", "ran");
    assert_reason(&v, "clean", "param near_dup_threshold changed 0.8 → 0.7");
    assert_status(&v, "vocab", "cached");
    assert_status(&v, "mask", "cached");
    let clean07 = artifact(&v, "clean");
    assert_ne!(clean07, clean, "a new fingerprint, a new artifact");
    assert_eq!(manifest_files(&clean07), manifest_files(&clean));
    assert!(same_path(&artifact(&v, "mask"), &mask));

    // One that does (near-duplicates kept): everything downstream re-runs.
    let v = set(&["--set", "clean.near_dup=false"]);
    assert_status(&v, "clean", "ran");
    assert_reason(&v, "clean", "param near_dup added");
    let cm2 = metrics(&artifact(&v, "clean"));
    assert_eq!(cm2["drops"]["near_duplicate"], 0, "{cm2:#}");
    assert_eq!(cm2["documents_out"], 128, "{cm2:#}");
    assert_status(&v, "vocab", "ran");
    assert_reason(&v, "vocab", "dep clean produced new output");
    assert_status(&v, "mask", "ran");
    assert_reason(&v, "mask", "dep clean produced new output");
    assert_eq!(metrics(&artifact(&v, "mask"))["documents"], 128);
}

// ---------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------

/// A corpus of `docs` documents (one a line) of 2–6 sentences drawn from the fixture corpus
/// with a fixed xorshift generator: more documents than one block of clean (2,000) or mask
/// (2,048), so that several blocks are processed in parallel.
fn synthetic_corpus(docs: usize) -> String {
    let text = read(format!("{}/corpus/lines/docs.txt", fixtures()));
    let pool: Vec<String> = text
        .split(['。', '！', '？', '\n'])
        .map(str::trim)
        .filter(|s| s.chars().count() >= 8 && !s.contains('<') && !s.contains('&'))
        .map(|s| format!("{s}。"))
        .collect();
    assert!(pool.len() > 100, "only {} fixture sentences", pool.len());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = String::new();
    for _ in 0..docs {
        let n = 2 + (next() % 5) as usize;
        for _ in 0..n {
            out.push_str(&pool[(next() % pool.len() as u64) as usize]);
        }
        out.push('\n');
    }
    out
}

const TRAINED_PIPELINE: &str = r#"
stages:
  clean:
    kind: clean
    inputs: ["data/corpus/*/*.txt"]
    params: {format: lines}
  vocab:
    kind: vocab
    deps: [clean]
    params: {source: train, model: wordpiece, size: 3000, min_frequency: 1}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {max_seq_length: 64, dupe_factor: 2, eval_fraction: 0.05, seed: 99}
"#;

#[test]
fn outputs_do_not_depend_on_the_thread_count() {
    let corpus = synthetic_corpus(5_000);
    let mut runs = Vec::new();
    for threads in ["1", "2"] {
        let ws = Ws::new(TRAINED_PIPELINE);
        ws.write("data/corpus/gen/docs.txt", &corpus);
        let v = run_ok_env(&ws, &["mask"], &[("RAYON_NUM_THREADS", threads)]);
        let mut digests = BTreeMap::new();
        for s in ["clean", "vocab", "mask"] {
            assert_status(&v, s, "ran");
            digests.insert(s, manifest_files(&artifact(&v, s)));
        }
        let mm = metrics(&artifact(&v, "mask"));
        assert!(
            u64_of(&mm["documents"]) > 2_048,
            "the corpus should span several mask blocks: {mm:#}"
        );
        assert!(u64_of(&mm["train"]["instances"]) > 5_000, "{mm:#}");
        assert!(
            manifest_files(&artifact(&v, "mask")).len() >= 3,
            "no shards: {mm:#}"
        );
        runs.push((threads, digests, ws));
    }
    let (_, one, _) = &runs[0];
    let (_, two, _) = &runs[1];
    for s in ["clean", "vocab", "mask"] {
        assert_eq!(
            one[s], two[s],
            "`{s}` wrote different files with RAYON_NUM_THREADS=1 and =2"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

/// The default pipeline in a workspace with its own data root `data/` (the fixture corpus'
/// `lines` file and the fixture vocab), to be spoiled by each test.
fn data_ws() -> Ws {
    let ws = default_ws();
    ws.write(
        "data/corpus/a/docs.txt",
        read(format!("{}/corpus/lines/docs.txt", fixtures())),
    );
    ws.write(
        "data/vocab/vocab.txt",
        read(format!("{}/vocab/vocab.txt", fixtures())),
    );
    // The tasks' files, which `clean` reads to keep their dev and test texts out of the corpus.
    for task in TASK_DIRS {
        copy_dir(
            &Path::new(&fixtures()).join(task),
            &ws.path(&format!("data/{task}")),
        );
    }
    ws
}

/// The fixture folders of the tasks the default pipeline decontaminates against.
const TASK_DIRS: [&str; 9] = [
    "lcqmc",
    "afqmc",
    "nli_extra",
    "xnli_zh",
    "chnsenticorp",
    "smp2020_ewect",
    "msra_ner",
    "cmrc2018",
    "c3",
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `pipeline run mask --set data=data EXTRA...`
fn run_data(ws: &Ws, extra: &[&str]) -> Output {
    let mut args = vec!["run", "mask", "--set", "data=data"];
    args.extend_from_slice(extra);
    ws.run(&args)
}

/// Asserts a failed stage: exit code 1, no panic, `stage` reported FAILED with each of
/// `needles` in its error (the run summary, on stdout).
fn assert_stage_failed(out: &Output, stage: &str, needles: &[&str]) {
    out.expect_code(1);
    out.assert_no_panic();
    let summary = &out.stdout;
    assert!(
        summary.contains(&format!("FAILED  {stage}")),
        "`{stage}` not reported as failed\n{}",
        out.describe()
    );
    let error = summary
        .lines()
        .skip_while(|l| !l.contains(&format!("FAILED  {stage}")))
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line under `{stage}`\n{}", out.describe()));
    for n in needles {
        assert!(
            error.contains(n),
            "the error of `{stage}` lacks {n:?}\n{}",
            out.describe()
        );
    }
}

/// Asserts a param error caught before anything runs: exit code 2, no panic, nothing on
/// stdout, each of `needles` on stderr.
fn assert_param_error(out: &Output, needles: &[&str]) {
    out.expect_code(2);
    out.assert_no_panic();
    assert!(out.stdout.trim().is_empty(), "{}", out.describe());
    assert!(out.stderr.starts_with("error: "), "{}", out.describe());
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr lacks {n:?}\n{}",
            out.describe()
        );
    }
}

#[test]
fn the_spoilable_data_root_works_as_given() {
    // The baseline of the bad-input tests: unspoiled, it runs.
    let ws = data_ws();
    let out = run_data(&ws, &[]);
    out.expect_code(0);
    out.assert_no_panic();
}

#[test]
fn vocab_missing_a_special_token_names_the_file_and_the_token() {
    let ws = data_ws();
    let vocab = read(ws.path("data/vocab/vocab.txt"));
    let without: String = vocab
        .lines()
        .filter(|l| *l != "[MASK]")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, vocab);
    ws.write("data/vocab/vocab.txt", without);
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "vocab",
        &[
            &ws.path("data/vocab/vocab.txt").display().to_string(),
            "missing special token(s) [MASK]",
        ],
    );
    assert!(out.stdout.contains("skipped  mask"), "{}", out.describe());
}

#[test]
fn vocab_with_a_duplicate_token_names_the_line() {
    let ws = data_ws();
    let mut vocab = read(ws.path("data/vocab/vocab.txt"));
    let first = vocab
        .lines()
        .position(|l| l == "的")
        .expect("的 in the fixture vocab")
        + 1;
    let total = vocab.lines().count();
    vocab.push_str("的\n");
    ws.write("data/vocab/vocab.txt", vocab);
    let out = run_data(&ws, &[]);
    let at = format!(
        "{}:{}: token \"的\" duplicates line {first}",
        ws.path("data/vocab/vocab.txt").display(),
        total + 1
    );
    assert_stage_failed(&out, "vocab", &[&at]);
}

#[test]
fn empty_corpus_files_are_an_error_that_says_why() {
    let ws = data_ws();
    std::fs::remove_file(ws.path("data/corpus/a/docs.txt")).unwrap();
    ws.write("data/corpus/a/empty.txt", "");
    ws.write("data/corpus/b/blank.txt", "\n  \n\n");
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "clean",
        &["the 2 input file(s) hold no documents (5 bytes read)"],
    );
    assert!(out.stdout.contains("skipped  vocab"), "{}", out.describe());
}

#[test]
fn a_corpus_whose_documents_are_all_dropped_says_what_dropped_them() {
    let ws = data_ws();
    let out = run_data(&ws, &["--set", "clean.min_doc_chars=100000"]);
    assert_stage_failed(
        &out,
        "clean",
        &[
            "all 114 documents were dropped",
            "too short (min_doc_chars = 100000",
        ],
    );
}

#[test]
fn max_seq_length_too_small_is_a_param_error() {
    let ws = data_ws();
    let out = run_data(&ws, &["--set", "mask.max_seq_length=4"]);
    assert_param_error(
        &out,
        &[
            "stage `mask`",
            "max_seq_length = 4 is too small",
            "[CLS] A [SEP] B [SEP]",
        ],
    );
    // 5 is the smallest that fits, and runs.
    let out = run_data(&ws, &["--set", "mask.max_seq_length=5"]);
    out.expect_code(0);
    out.assert_no_panic();
}

#[test]
fn masked_lm_prob_outside_the_open_unit_interval_is_a_param_error() {
    let ws = data_ws();
    for p in ["0", "1", "1.5", "-0.1"] {
        let out = run_data(&ws, &["--set", &format!("mask.masked_lm_prob={p}")]);
        assert_param_error(
            &out,
            &[
                "stage `mask`",
                &format!("masked_lm_prob = {p} must be in (0, 1)"),
            ],
        );
    }
    // Nothing ran: no artifact was made.
    assert!(!ws.path(".pipeline/artifacts/mask").exists());
}

#[test]
fn unreadable_inputs_are_errors_naming_the_file() {
    // A directory where the vocab file is expected (works as root too).
    let ws = data_ws();
    std::fs::remove_file(ws.path("data/vocab/vocab.txt")).unwrap();
    std::fs::create_dir(ws.path("data/vocab/vocab.txt")).unwrap();
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "vocab",
        &["param `file`: data/vocab/vocab.txt", "is a directory"],
    );

    // A corpus file without read permission (root reads it anyway: then skipped).
    let ws = data_ws();
    let file = ws.path("data/corpus/a/docs.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&file).is_ok() {
        println!(
            "note: running as root (or with CAP_DAC_OVERRIDE): chmod 000 does not stop reads, \
             skipping the unreadable-file case"
        );
        return;
    }
    let out = run_data(&ws, &[]);
    assert_ne!(out.code, 0, "{}", out.describe());
    out.assert_no_panic();
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("data/corpus/a/docs.txt") && all.to_lowercase().contains("permission denied"),
        "the error does not name the unreadable file\n{}",
        out.describe()
    );
}

#[test]
fn invalid_utf8_lines_are_skipped_counted_and_located() {
    let ws = data_ws();
    let mut bad: Vec<u8> = Vec::new();
    bad.extend("今天天气很好，我们一起去公园散步，看到了很多盛开的花。\n".as_bytes());
    bad.extend(b"\xff\xfe broken bytes \xc3\x28\n");
    bad.extend("这家餐厅的菜很好吃，服务也很周到，下次我们还会再来。\n".as_bytes());
    bad.extend("半个字符".as_bytes());
    bad.extend(b"\xe4\xbd\n");
    ws.write("data/corpus/b/bad.txt", bad);
    let v = ws.json(&["run", "mask", "--set", "data=data"], 0);
    assert_eq!(v["ok"], true, "{v:#}");
    let clean = artifact(&v, "clean");
    let cm = metrics(&clean);
    assert_eq!(cm["invalid_utf8_lines"], 2, "{cm:#}");
    assert_eq!(cm["files"], 2, "{cm:#}");
    // docs.txt's 114 documents and bad.txt's two valid lines.
    assert_eq!(cm["documents_in"], 116, "{cm:#}");
    assert_eq!(cm["documents_out"], 113, "{cm:#}");
    let corpus = read(clean.join("corpus-00000.txt"));
    assert!(
        corpus.contains("这家餐厅的菜很好吃"),
        "the valid lines are kept"
    );
    assert!(
        !corpus.contains("broken bytes"),
        "the invalid line is dropped"
    );
    assert!(!corpus.contains('\u{fffd}'), "no replacement characters");
    let log = read(clean.join(".log/clean.log"));
    for line in [2, 4] {
        let at = format!("data/corpus/b/bad.txt:{line}: invalid UTF-8, line skipped");
        assert!(log.contains(&at), "clean.log lacks {at:?}:\n{log}");
    }

    // The warning on stderr names the first bad line and no temporary folder.
    let out = ws.run(&["run", "clean", "--set", "data=data", "--force"]);
    out.expect_code(0);
    out.assert_no_panic();
    assert!(
        out.stderr.contains(
            "2 lines of invalid UTF-8 skipped in 1 file(s), the first at data/corpus/b/bad.txt:2"
        ),
        "{}",
        out.describe()
    );
    assert!(!out.stderr.contains(".pipeline/tmp/"), "{}", out.describe());
}

// ---------------------------------------------------------------------------------------------
// The real corpora
// ---------------------------------------------------------------------------------------------

/// The data root of the shared datasets, from `PIPELINE_DATA_ROOT`; `None` (with a note) when
/// unset or not a directory.
fn real_data_root() -> Option<PathBuf> {
    match std::env::var_os("PIPELINE_DATA_ROOT") {
        Some(p) if Path::new(&p).is_dir() => Some(PathBuf::from(p)),
        Some(p) => {
            println!(
                "note: PIPELINE_DATA_ROOT={} is not a directory: skipping the real-data test",
                Path::new(&p).display()
            );
            None
        }
        None => {
            println!(
                "note: PIPELINE_DATA_ROOT is not set (e.g. ../shared/datasets): skipping the real-data test"
            );
            None
        }
    }
}

#[test]
fn the_real_corpora_mask_with_sane_statistics() {
    let Some(root) = real_data_root() else {
        return;
    };
    let root = root.canonicalize().unwrap();
    // What the default inputs glob selects: corpus/*/*.txt but SOURCE.txt, and but the
    // ChnSentiCorp reviews (every ChnSentiCorp test text: pipeline.yaml leaves them out).
    let mut expected_files = 0;
    for source in std::fs::read_dir(root.join("corpus")).unwrap() {
        let source = source.unwrap().path();
        if !source.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&source).unwrap() {
            let f = f.unwrap().path();
            if f.is_file()
                && f.extension().is_some_and(|e| e == "txt")
                && !f.ends_with("SOURCE.txt")
                && !f.ends_with("misc/chnsenticorp_reviews.txt")
            {
                expected_files += 1;
            }
        }
    }
    let vocab_lines: Vec<String> = read(root.join("vocab/vocab.txt"))
        .lines()
        .map(String::from)
        .collect();
    let id = |t: &str| vocab_lines.iter().position(|l| l == t).unwrap();

    let ws = default_ws();
    let data = format!("data={}", root.display());
    let v = ws.run_ok(&["mask", "--set", &data, "--set", "mask.dupe_factor=1"]);
    for s in ["clean", "vocab", "mask"] {
        assert_status(&v, s, "ran");
    }
    let cm = metrics(&artifact(&v, "clean"));
    let vm = metrics(&artifact(&v, "vocab"));
    let mm = metrics(&artifact(&v, "mask"));
    println!("clean: {cm}\nvocab: {vm}\nmask: {mm}");

    assert_eq!(u64_of(&cm["files"]), expected_files, "{cm:#}");
    let docs = u64_of(&cm["documents_out"]);
    assert!(docs > 1_000, "{cm:#}");
    assert!(
        u64_of(&cm["chars_out"]) > u64_of(&cm["chars_in"]) / 2,
        "clean dropped more than half the text: {cm:#}"
    );

    assert_eq!(vm["vocab_size"], vocab_lines.len(), "{vm:#}");
    assert_eq!(
        vm["special_ids"],
        json!([
            id("[PAD]"),
            id("[UNK]"),
            id("[CLS]"),
            id("[SEP]"),
            id("[MASK]")
        ])
    );
    assert!(f64_of(&vm["unk_rate"]) < 0.05, "{vm:#}");

    assert_eq!(mm["documents"], docs, "{mm:#}");
    assert_eq!(mm["sentences"], cm["sentences_out"], "{mm:#}");
    assert_eq!(mm["dupe_factor"], 1);
    assert!(f64_of(&mm["unk_rate"]) < 0.05, "{mm:#}");
    // pipeline.yaml holds out eval_fraction 0.05 of the documents.
    assert_within(
        "eval_documents share",
        u64_of(&mm["eval_documents"]) as f64 / docs as f64,
        0.04,
        0.06,
    );
    let train = &mm["train"];
    let instances = u64_of(&train["instances"]);
    assert!(instances > docs, "{mm:#}");
    assert_within("train.mask_rate", f64_of(&train["mask_rate"]), 0.14, 0.16);
    assert_within(
        "train.sop_swapped_fraction",
        f64_of(&train["sop_swapped_fraction"]),
        0.48,
        0.52,
    );
    assert_within(
        "train.replaced_by_mask",
        f64_of(&train["replaced_by_mask"]),
        0.78,
        0.82,
    );
    assert_within(
        "train.replaced_by_random",
        f64_of(&train["replaced_by_random"]),
        0.08,
        0.12,
    );
    assert_within("train.kept", f64_of(&train["kept"]), 0.08, 0.12);
    assert_within(
        "train.mean_length",
        f64_of(&train["mean_length"]),
        64.0,
        128.0,
    );
    let h = &train["ngram_histogram"];
    let (n1, n2, n3) = (u64_of(&h["1"]), u64_of(&h["2"]), u64_of(&h["3"]));
    assert!(n1 > n2 && n2 > n3 && n3 > 0, "n-gram histogram {h}");
    // Every shard listed exists, and nothing else.
    let mask = artifact(&v, "mask");
    let mut shards: Vec<String> = train["shards"]
        .as_array()
        .unwrap()
        .iter()
        .chain(mm["eval"]["shards"].as_array().unwrap())
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    shards.sort();
    let on_disk: Vec<String> = listing(&mask)
        .into_iter()
        .filter(|n| n.ends_with(".arrow"))
        .collect();
    assert_eq!(shards, on_disk);
    for s in &on_disk {
        assert_arrow_file(&mask.join(s));
    }
}

// ---------------------------------------------------------------------------------------------
// The artifacts in Python
// ---------------------------------------------------------------------------------------------

/// Whether `python3` can import every one of `modules`; prints a skip note when not.
fn python_has(modules: &[&str], test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!(
            "note: python3 cannot import {}: skipping {test}",
            modules.join(", ")
        );
    }
    ok
}

/// Runs `python3 -c SCRIPT ARGS...`, asserts success and parses the last stdout line as JSON.
fn python_json(script: &str, args: &[&Path]) -> Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("starting python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python check failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("python printed no JSON ({e}):\n{stdout}\n{stderr}"))
}

const SHARD_SCRIPT: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.ipc as ipc

path = sys.argv[1]
reader = ipc.open_file(path)
schema = reader.schema
fields = [[f.name, str(f.type)] for f in schema]
assert schema.field("input_ids").type == pa.list_(pa.int32())
assert schema.field("token_type_ids").type == pa.list_(pa.int8())
meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
t = reader.read_all()
ids = t.column("input_ids").to_pylist()
types = t.column("token_type_ids").to_pylist()
lengths = t.column("length").to_pylist()
pos = t.column("masked_positions").to_pylist()
mids = t.column("masked_ids").to_pylist()
labels = t.column("sentence_order_label").to_pylist()
assert t.column("input_ids").null_count == 0
bad = []
for i in range(t.num_rows):
    if lengths[i] != len(ids[i]) or len(types[i]) != len(ids[i]):
        bad.append((i, "length"))
    if pos[i] != sorted(set(pos[i])) or any(p <= 0 or p >= lengths[i] for p in pos[i]):
        bad.append((i, "positions"))
    if len(mids[i]) != len(pos[i]):
        bad.append((i, "masked_ids"))
    if labels[i] not in (0, 1):
        bad.append((i, "label"))
out = {
    "fields": fields,
    "meta": meta,
    "rows": t.num_rows,
    "batches": reader.num_record_batches,
    "tokens": sum(lengths),
    "max_length": max(lengths),
    "masked": sum(len(p) for p in pos),
    "max_masked": max(len(p) for p in pos),
    "swapped": sum(labels),
    "first_ids": sorted(set(r[0] for r in ids)),
    "last_ids": sorted(set(r[-1] for r in ids)),
    "bad": bad[:10],
}
try:
    import polars as pl
except ImportError:
    out["polars"] = None
else:
    df = pl.read_ipc(path)
    out["polars"] = {
        "height": df.height,
        "columns": df.columns,
        "dtypes": [str(d) for d in df.dtypes],
        "tokens": int(df["length"].sum()),
        "swapped": int(df["sentence_order_label"].cast(pl.Int64).sum()),
    }
print(json.dumps(out))
"#;

#[test]
fn mask_shards_open_in_pyarrow_with_the_documented_schema() {
    if !python_has(&["pyarrow"], "the pyarrow check of the mask shards") {
        return;
    }
    let ws = default_ws();
    let v = ws.run_ok(&["mask", "--set", &format!("data={}", fixtures())]);
    let mask = artifact(&v, "mask");
    let mm = metrics(&mask);
    for split in ["train", "eval"] {
        let m = &mm[split];
        let files: Vec<&str> = m["shards"]
            .as_array()
            .expect("the split's shards")
            .iter()
            .map(|f| f.as_str().expect("a file name"))
            .collect();
        // rows, tokens, masked positions, swapped pairs over the split's shards (training: one
        // a masking pass), against the split's metrics.
        let mut totals = [0u64; 4];
        for file in &files {
            let py = python_json(SHARD_SCRIPT, &[&mask.join(file)]);
            check_shard(file, split, &py);
            for (total, key) in totals
                .iter_mut()
                .zip(["rows", "tokens", "masked", "swapped"])
            {
                *total += u64_of(&py[key]);
            }
        }
        let [rows, tokens, masked, swapped] = totals;
        assert_eq!(json!(rows), m["instances"], "{split}");
        assert_eq!(json!(tokens), m["tokens"], "{split}");
        assert_eq!(json!(masked), m["masked_tokens"], "{split}");
        let swapped = swapped as f64 / rows as f64;
        assert!(
            (swapped - f64_of(&m["sop_swapped_fraction"])).abs() < 1e-4,
            "{split}: {swapped} swapped, metrics say {}",
            m["sop_swapped_fraction"]
        );
    }
}

/// One shard as pyarrow (and polars, where installed) read it: the documented schema and
/// metadata, no row breaking it, `[CLS]` first and `[SEP]` last in every row, the limits kept.
fn check_shard(file: &str, split: &str, py: &Value) {
    assert_eq!(
        py["fields"],
        json!([
            ["input_ids", "list<item: int32>"],
            ["token_type_ids", "list<item: int8>"],
            ["length", "int32"],
            ["masked_positions", "list<item: int32>"],
            ["masked_ids", "list<item: int32>"],
            ["sentence_order_label", "int8"]
        ]),
        "{file}"
    );
    let meta = &py["meta"];
    assert_eq!(meta["format"], "albert-pretraining-instances", "{meta}");
    assert_eq!(meta["version"], "1", "{meta}");
    assert_eq!(meta["max_seq_length"], "128", "{meta}");
    assert_eq!(meta["max_predictions_per_seq"], "20", "{meta}");
    assert_eq!(meta["vocab_size"], "1291", "{meta}");
    assert_eq!(meta["seed"], "12345", "{meta}");
    assert_eq!(py["bad"], json!([]), "{file}: rows breaking the schema");
    assert!(u64_of(&py["max_length"]) <= 128, "{file}: {py}");
    assert!(u64_of(&py["max_masked"]) <= 20, "{file}: {py}");
    assert_eq!(
        py["first_ids"],
        json!([2]),
        "{file}: every row starts with [CLS]"
    );
    assert_eq!(
        py["last_ids"],
        json!([3]),
        "{file}: every row ends with [SEP]"
    );
    if split == "train" {
        // 1,024-row record batches.
        let rows = u64_of(&py["rows"]);
        assert_eq!(u64_of(&py["batches"]), rows.div_ceil(1024), "{file}");
    }
    match &py["polars"] {
        Value::Null => println!("note: polars is not installed: skipped the polars check"),
        pl => {
            assert_eq!(pl["height"], py["rows"], "{file}: polars");
            assert_eq!(pl["tokens"], py["tokens"], "{file}: polars");
            assert_eq!(pl["swapped"], py["swapped"], "{file}: polars");
            assert_eq!(
                pl["dtypes"],
                json!([
                    "List(Int32)",
                    "List(Int8)",
                    "Int32",
                    "List(Int32)",
                    "List(Int32)",
                    "Int8"
                ]),
                "{file}: polars"
            );
        }
    }
}

/// Sentences the tokenizer must handle: full-width forms, English words (whole and as `##`
/// pieces), digits, emoji, characters outside the vocabulary, accents, a literal [MASK].
/// Documents are separated by blank lines; each has one or two sentences.
const TOKENIZER_DOCS: &[&[&str]] = &[
    &["我爱北京天安门。", "今天天气很好，我们去公园散步吧？"],
    &["ＡＬＢＥＲＴ模型在２０１９年发布，效果很好！"],
    &[
        "Hello World! 这是一个 mixed 句子，包含 English words 和数字 12345。",
        "unaffable 和 tokenization 会被切成 ## 片段。",
    ],
    &[
        "表情符号😀很常见👍，也会出现在语料里。",
        "生僻字龘、靐、齉多半是未知字符。",
    ],
    &[
        "Café naïve résumé，全角标点：“你好”！（括号）【方括号】",
        "价格￥９９.５元，电话１３８００１３８０００。",
    ],
    &[
        "WiFi 密码是 abc-123_XYZ，内存 2048 兆，流量 12mb，请勿外传。",
        "这句话里有一个 [MASK] 标记和一个 ＷｉＦｉ。",
    ],
    &[
        "日本語のテキストも少し混ざっている。",
        "한국어 문장도 있습니다。",
    ],
];

const TOKENIZER_SCRIPT: &str = r#"
import json, sys
import pyarrow.ipc as ipc
from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
corpus = open(sys.argv[2], encoding="utf-8").read()
docs = [d.split("\n") for d in corpus.strip("\n").split("\n\n")]
encoded = [[tok.encode(s, add_special_tokens=False).ids for s in d] for d in docs]
framed = tok.encode(docs[0][0]).ids
t = ipc.open_file(sys.argv[3]).read_all()
rows = [
    {k: t.column(k)[i].as_py() for k in ["input_ids", "token_type_ids", "masked_positions", "masked_ids", "sentence_order_label"]}
    for i in range(t.num_rows)
]
print(json.dumps({"docs": encoded, "framed": framed, "rows": rows}))
"#;

/// Undoes the masking of a shard row and returns its two segments in document order.
fn unmasked_segments(row: &Value, cls: u64, sep: u64) -> (Vec<u64>, Vec<u64>) {
    let ids = |k: &str| -> Vec<u64> {
        row[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let mut input = ids("input_ids");
    for (p, id) in ids("masked_positions").into_iter().zip(ids("masked_ids")) {
        input[p as usize] = id;
    }
    let types = ids("token_type_ids");
    let a_len = types.iter().filter(|&&t| t == 0).count() - 2;
    assert_eq!(input[0], cls, "row does not start with [CLS]: {row}");
    assert_eq!(
        input[a_len + 1],
        sep,
        "segment A does not end with [SEP]: {row}"
    );
    assert_eq!(
        *input.last().unwrap(),
        sep,
        "row does not end with [SEP]: {row}"
    );
    let a = input[1..=a_len].to_vec();
    let b = input[a_len + 2..input.len() - 1].to_vec();
    if row["sentence_order_label"] == 1 {
        (b, a)
    } else {
        (a, b)
    }
}

#[test]
fn tokenizer_json_artifact_encodes_in_python_as_the_mask_stage_did() {
    if !python_has(
        &["tokenizers", "pyarrow"],
        "the Hugging Face tokenizers check of tokenizer.json",
    ) {
        return;
    }
    // A `cmd` stage named clean hands the sentences to mask untouched (no normalisation), so
    // that the Rust tokenizer sees the full-width forms, emoji and accents themselves.
    let yaml = r#"
stages:
  clean:
    cmd: cp text/docs.txt $PIPELINE_OUT/corpus-00000.txt
    inputs: [text/docs.txt]
  vocab:
    kind: vocab
    deps: [clean]
    inputs: [vocab.txt]
    params: {source: file, file: vocab.txt, lowercase: true}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {max_seq_length: 256, dupe_factor: 1, eval_fraction: 0, short_seq_prob: 0}
"#;
    let ws = Ws::new(yaml);
    let corpus: String = TOKENIZER_DOCS
        .iter()
        .map(|d| d.join("\n") + "\n")
        .collect::<Vec<_>>()
        .join("\n");
    ws.write("text/docs.txt", &corpus);

    let mut vocabs = vec![PathBuf::from(format!("{}/vocab/vocab.txt", fixtures()))];
    match real_data_root() {
        Some(root) if root.join("vocab/vocab.txt").is_file() => {
            vocabs.push(root.join("vocab/vocab.txt"))
        }
        _ => println!("note: checking the fixture vocabulary only"),
    }
    for vocab_file in &vocabs {
        let vocab_text = read(vocab_file);
        ws.write("vocab.txt", &vocab_text);
        let tokens: Vec<&str> = vocab_text.lines().collect();
        let id = |t: &str| tokens.iter().position(|l| *l == t).unwrap() as u64;
        let (cls, sep, unk) = (id("[CLS]"), id("[SEP]"), id("[UNK]"));
        for lowercase in ["true", "false"] {
            let what = format!("{} lowercase={lowercase}", vocab_file.display());
            let v = ws.run_ok(&["mask", "--set", &format!("vocab.lowercase={lowercase}")]);
            let vocab = artifact(&v, "vocab");
            let mask = artifact(&v, "mask");
            let py = python_json(
                TOKENIZER_SCRIPT,
                &[
                    &vocab.join("tokenizer.json"),
                    &ws.path("text/docs.txt"),
                    &mask.join("shard-00000.arrow"),
                ],
            );
            let docs: Vec<Vec<Vec<u64>>> = serde_json::from_value(py["docs"].clone()).unwrap();
            assert_eq!(docs.len(), TOKENIZER_DOCS.len(), "{what}");
            let rows = py["rows"].as_array().unwrap();
            assert_eq!(rows.len(), docs.len(), "{what}: one instance per document");
            for ((row, sentences), text) in rows.iter().zip(&docs).zip(TOKENIZER_DOCS) {
                let (a, b) = unmasked_segments(row, cls, sep);
                let theirs: Vec<u64> = sentences.concat();
                let ours: Vec<u64> = [a.clone(), b.clone()].concat();
                assert_eq!(ours, theirs, "{what}: {text:?}");
                if let [s1, s2] = &sentences[..] {
                    assert_eq!((&a, &b), (s1, s2), "{what}: segments of {text:?}");
                }
            }
            // [CLS] … [SEP] from the tokenizer.json's post-processor.
            let framed: Vec<u64> = serde_json::from_value(py["framed"].clone()).unwrap();
            assert_eq!(framed, [vec![cls], docs[0][0].clone(), vec![sep]].concat());
            // The cases are exercised: out-of-vocabulary characters, and `##` pieces.
            let all: Vec<u64> = docs.concat().concat();
            assert!(all.contains(&unk), "{what}: no [UNK] at all");
            let pieces = all
                .iter()
                .filter(|&&i| tokens[i as usize].starts_with("##"))
                .count();
            assert!(pieces > 0, "{what}: no ## pieces");
        }
    }
}
