//! Bounded reads of the files stages and model commands take from elsewhere (issue 31, class
//! 4, and the doubled reasons of class 6): a dep's `metrics.json(l)` read by the report, a
//! clean dep's corpus and a vocab dep's `vocab.txt` read by `mask`, a task file given as a
//! FIFO, a model directory's `vocab.txt` linked to `/dev/zero`, and a TensorFlow checkpoint's
//! `.index` and data shard as FIFOs or 100 MB. A dep's file reaches a stage two ways here: a
//! `cmd` stage stands in for the dep and writes what it likes (a 100 MB sparse file), or a
//! hostile hand swaps an empty file of a committed artifact for a FIFO (the engine's size check
//! sees 0 bytes either way, so the artifact is used as it is). Each case asserts the exit code,
//! that the message names the file (and the limit where there is one) once, that the binary
//! ran under the address-space limit (`limited`) within a time bound, and that nothing outside
//! the workspace changed (`Case::finish`, after the swapped file is put back).

use super::*;

/// A refusal reads nothing large; the bound is generous for a debug build on a loaded 2-core
/// machine (each case takes 1 to 3 s alone).
const QUICK: Duration = Duration::from_secs(20);

/// The tiny sequence classifier of the Hugging Face fixtures (V 120, H 32).
const CLASSIFIER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hf_albert/classifier_gelu_new"
);

/// albert_zh's layout: `checkpoint`, `model.ckpt-1000.{index,data-00000-of-00001}`,
/// `albert_config.json`, `vocab.txt`.
const TF_CKPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tf/albert_zh");

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/fixtures");

fn fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo failed");
}

/// Runs `args` under the limits, and asserts the code, `needle`, and the time bound.
fn expect_quick(c: &Case, args: &[&str], code: i32, needle: &str) -> Output {
    let t0 = Instant::now();
    let out = c.expect(args, code, needle);
    assert!(t0.elapsed() < QUICK, "{args:?} took {:?}", t0.elapsed());
    out
}

/// `needle` is in what the run printed exactly once.
fn once(out: &Output, needle: &str) {
    let all = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(all.matches(needle).count(), 1, "{}", out.describe());
}

// ---------------------------------------------------------------------------------------------
// The report's deps.

/// A `cmd` stage named like a pretrain stage (so the report tabulates it) writing its outputs
/// with `cmd`, and a report on it (no plots, nothing published: the README stays in the
/// artifact).
fn report_yaml(cmd: &str) -> String {
    format!(
        "stages:\n  pretrain:\n    cmd: '{cmd}'\n  report:\n    kind: report\n    deps: [pretrain]\n    params: {{publish_dir: \"\", plots: false}}\n"
    )
}

fn readme(out: &Output) -> String {
    let dir = common::artifact(&out.json(), "report");
    std::fs::read_to_string(dir.join("README.md")).unwrap()
}

#[test]
fn records_report_dep_metrics_of_100mb_is_a_note_not_a_read() {
    // Sparse: 100 MB of zeros that the report read whole before finding it not JSON.
    let c = Case::new(&report_yaml("truncate -s 100M $PIPELINE_OUT/metrics.json"));
    let t0 = Instant::now();
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    assert!(t0.elapsed() < TIME, "{:?}", t0.elapsed());
    let readme = readme(&out);
    assert!(
        readme.contains(
            "pretrain: metrics.json: larger than 64 MiB, the limit for a metrics record; left out"
        ),
        "{readme}"
    );
    assert!(
        readme.contains("pretrain: its artifact has no readable metrics.json"),
        "{readme}"
    );
    c.finish();
}

#[test]
fn records_report_dep_metrics_swapped_for_fifos_are_remade_not_read() {
    let c = Case::new(&report_yaml(
        ": > $PIPELINE_OUT/metrics.json && : > $PIPELINE_OUT/metrics.jsonl",
    ));
    let dep = common::artifact(&c.ws.json(&["run", "pretrain"], 0), "pretrain");
    // A hostile hand in the store: both empty files become FIFOs no one writes. Their size is
    // still 0; the store's check of an artifact's files takes only regular files, so the dep
    // is damaged and made again, and the report never opens a FIFO (its reads once blocked
    // for ever).
    for f in ["metrics.json", "metrics.jsonl"] {
        fifo(&dep.join(f));
    }
    let status = c.ws.json(&["status"], 0);
    let reasons = stage_json(&status, "pretrain")["reasons"].to_string();
    assert!(reasons.contains("artifact missing or corrupt"), "{reasons}");
    let t0 = Instant::now();
    let out = c.run(&["run", "report", "--json"]);
    out.expect_code(0);
    assert!(t0.elapsed() < QUICK, "{:?}", t0.elapsed());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        stage_json(&run, "pretrain")["status"],
        "ran",
        "{}",
        out.describe()
    );
    assert!(!readme(&out).contains("FIFO"), "{}", out.describe());
    for f in ["metrics.json", "metrics.jsonl"] {
        assert!(std::fs::symlink_metadata(dep.join(f)).unwrap().is_file());
    }
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// The mask stage's deps: the clean corpus and the vocabulary.

/// `clean` as a `cmd` writing `corpus-00000.txt` with `clean`, `vocab` either adopting the
/// fixture vocabulary (`vocab: None`) or a `cmd` writing its files with the given command, and
/// `mask` on both.
fn mask_case(clean: &str, vocab: Option<&str>) -> Case {
    let vocab_stage = match vocab {
        None => "    kind: vocab\n    inputs: [vocab.txt]\n    params: {source: file, file: vocab.txt}\n"
            .to_string(),
        Some(cmd) => format!("    cmd: '{cmd}'\n"),
    };
    let c = Case::new(&format!(
        "stages:\n  clean:\n    cmd: '{clean}'\n  vocab:\n{vocab_stage}  mask:\n    kind: mask\n    deps: [clean, vocab]\n    params: {{max_seq_length: 32, dupe_factor: 1, eval_fraction: 0}}\n"
    ));
    std::fs::copy(
        Path::new(FIXTURES).join("vocab/vocab.txt"),
        c.ws.path("vocab.txt"),
    )
    .unwrap();
    c
}

#[test]
fn records_mask_corpus_swapped_for_a_fifo_is_remade_not_read() {
    let c = mask_case(": > $PIPELINE_OUT/corpus-00000.txt", None);
    let clean = common::artifact(&c.ws.json(&["run", "clean", "vocab"], 0), "clean");
    let corpus = clean.join("corpus-00000.txt");
    fifo(&corpus);
    // The FIFO is damage to a committed artifact: `clean` is made again, and `mask` reads the
    // new (empty) corpus at once instead of waiting on the FIFO.
    let status = c.ws.json(&["status"], 0);
    let reasons = stage_json(&status, "clean")["reasons"].to_string();
    assert!(reasons.contains("artifact missing or corrupt"), "{reasons}");
    let out = expect_quick(&c, &["run", "mask"], 1, "no training instances");
    assert!(!out.stderr.contains("FIFO"), "{}", out.describe());
    assert!(std::fs::symlink_metadata(&corpus).unwrap().is_file());
    c.finish();
}

#[test]
fn records_mask_corpus_of_one_endless_line_is_refused_at_the_line_bound() {
    // Sparse: 100 MB of zeros without a line break, once held whole as one document.
    let c = mask_case("truncate -s 100M $PIPELINE_OUT/corpus-00000.txt", None);
    let t0 = Instant::now();
    let out = c.run(&["run"]);
    assert!(t0.elapsed() < TIME, "{:?}", t0.elapsed());
    expect(&out, 1, "corpus-00000.txt:1: a line longer than 64 MiB");
    c.finish();
}

#[test]
fn records_mask_vocab_dep_of_100mb_is_refused_naming_the_limit_once() {
    let c = mask_case(
        "echo 你好。 > $PIPELINE_OUT/corpus-00000.txt",
        Some("truncate -s 100M $PIPELINE_OUT/vocab.txt && echo {} > $PIPELINE_OUT/tokenizer.json"),
    );
    let t0 = Instant::now();
    let out = c.run(&["run"]);
    assert!(t0.elapsed() < TIME, "{:?}", t0.elapsed());
    let needle = "vocab.txt: larger than 64 MiB, the limit for a vocabulary";
    expect(&out, 1, needle);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("cannot read vocabulary"), "{}", out.describe());
    once(&out, "larger than 64 MiB");
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// A task file.

#[test]
fn records_task_file_fifo_is_refused_at_once() {
    let c = Case::new(
        "stages:\n  b:\n    kind: baseline\n    params:\n      task: chnsenticorp\n      train: d/train.tsv\n      dev: d/dev.tsv\n      test: d/test.tsv\n      methods: [majority]\n",
    );
    for f in ["dev.tsv", "test.tsv"] {
        let from = Path::new(FIXTURES).join("chnsenticorp").join(f);
        c.ws.write(&format!("d/{f}"), std::fs::read(from).unwrap());
    }
    fifo(&c.ws.path("d/train.tsv"));
    let out = expect_quick(
        &c,
        &["run"],
        1,
        "d/train.tsv: cannot read: not a regular file (it is a FIFO)",
    );
    once(&out, "not a regular file");
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Model directories and TensorFlow checkpoints.

const ONE_STAGE: &str = "stages:\n  a:\n    cmd: 'true'\n";

#[test]
fn records_model_vocab_txt_linked_to_dev_zero_says_its_reason_once() {
    let c = Case::new(ONE_STAGE);
    let m = c.ws.path("m");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(CLASSIFIER).join(f), m.join(f)).unwrap();
    }
    std::fs::write(m.join("tokenizer.json"), "{}").unwrap();
    std::os::unix::fs::symlink("/dev/zero", m.join("vocab.txt")).unwrap();
    let out = expect_quick(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        "cannot read vocabulary m/vocab.txt: not a regular file (it is a character device)",
    );
    once(&out, "not a regular file");
    c.finish();
}

/// albert_zh's checkpoint fixture copied into `ck/`.
fn tf_case() -> Case {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path("ck")).unwrap();
    for e in std::fs::read_dir(TF_CKPT).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), c.ws.path("ck").join(e.file_name())).unwrap();
    }
    c
}

/// `model import --from ck --out m` fails with exit 2 and `needle`, quickly, writing no `m`.
fn import_refused(c: &Case, needle: &str) -> Output {
    let out = expect_quick(
        c,
        &["model", "import", "--from", "ck", "--out", "m"],
        2,
        needle,
    );
    assert!(!c.ws.path("m").exists(), "{}", out.describe());
    out
}

#[test]
fn records_tf_vocab_linked_to_dev_zero_says_its_reason_once() {
    let c = tf_case();
    std::fs::remove_file(c.ws.path("ck/vocab.txt")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", c.ws.path("ck/vocab.txt")).unwrap();
    let out = import_refused(
        &c,
        "cannot read vocabulary ck/vocab.txt: not a regular file (it is a character device)",
    );
    once(&out, "not a regular file");
    c.finish();
}

#[test]
fn records_tf_index_fifo_is_refused_at_once() {
    // The import once blocked for ever opening it.
    let c = tf_case();
    fifo(&c.ws.path("ck/model.ckpt-1000.index"));
    let out = import_refused(
        &c,
        "model.ckpt-1000.index: cannot read the checkpoint index: not a regular file (it is a FIFO)",
    );
    once(&out, "not a regular file");
    c.finish();
}

#[test]
fn records_tf_index_of_100mb_is_refused_naming_the_limit() {
    // Sparse: read whole, then parsed as a table, before this bound.
    let c = tf_case();
    let index = c.ws.path("ck/model.ckpt-1000.index");
    std::fs::File::create(&index)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    import_refused(
        &c,
        "model.ckpt-1000.index: cannot read the checkpoint index: larger than 64 MiB, the limit \
         for a checkpoint index",
    );
    c.finish();
}

#[test]
fn records_tf_data_shard_fifo_is_refused_at_once() {
    let c = tf_case();
    fifo(&c.ws.path("ck/model.ckpt-1000.data-00000-of-00001"));
    let out = import_refused(&c, "not a regular file (it is a FIFO)");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("model.ckpt-1000.data-00000-of-00001"),
        "{}",
        out.describe()
    );
    once(&out, "not a regular file");
    c.finish();
}
