//! Bounded reads of untrusted files (issue 31, class 4, and the `predict` echo of class 6):
//! `predict`'s `--input` (a device, a FIFO, standard input without end, a 10 MB field), a
//! model directory's `config.json` (a device, a FIFO, 20 MB, absurd sizes) for `model info` and
//! `predict`, `model forward`'s input, and a pretrain artifact's snapshot record read by
//! `finetune` (100 MB, a FIFO). Each case asserts the exit code, that the message names the file
//! and the limit, that the binary ran under the address-space limit (`limited`) within a time
//! bound, and that nothing outside the workspace changed (`Case::finish`).

use super::*;

/// The tiny sequence classifier of the Hugging Face fixtures (V 120, H 32, 3 shared layers).
const CLASSIFIER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hf_albert/classifier_gelu_new"
);

/// A refusal of a file that is not read takes well under this (a debug build loads no model
/// for it); the generous bound is for a loaded 2-core machine.
const QUICK: Duration = Duration::from_secs(20);

/// Writes a fine-tuned pair classifier into `ws/rel`: the fixture's config and weights, and a
/// 120-token vocabulary with the BERT WordPiece `tokenizer.json` the vocab stage writes for it.
fn classifier(c: &Case, rel: &str) -> PathBuf {
    let dir = c.ws.path(rel);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(CLASSIFIER).join(f), dir.join(f)).unwrap();
    }
    let specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
    let tokens: Vec<String> = specials
        .iter()
        .map(|s| s.to_string())
        .chain((0..115).map(|i| char::from_u32(0x4e00 + i).unwrap().to_string()))
        .collect();
    std::fs::write(dir.join("vocab.txt"), tokens.join("\n") + "\n").unwrap();
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::json!(i)))
        .collect();
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                               "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
                       "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    dir
}

/// The classifier's config.json with `edit` applied.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo failed");
}

/// Runs `args` and asserts the code and `needle`, within `bound`.
fn expect_within(c: &Case, args: &[&str], code: i32, needle: &str, bound: Duration) -> Output {
    let t0 = Instant::now();
    let out = c.expect(args, code, needle);
    assert!(t0.elapsed() < bound, "{args:?} took {:?}", t0.elapsed());
    out
}

#[test]
fn reads_predict_works_on_a_tsv_and_on_standard_input() {
    // The baseline the refusals below are measured against: the same model predicts.
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    c.ws.write("in.tsv", "一\t丁\tentailment\n丁\t七\tneutral\n");
    let out = c.expect(
        &["predict", "--model", "m", "--input", "in.tsv"],
        0,
        "p_neutral",
    );
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.describe());
    let args = ["predict", "--model", "m", "--input", "-"];
    let out = run_bounded(limited_stdin(c.ws.root(), "in.tsv", &args), TIME);
    expect(&out, 0, "p_neutral");
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.describe());
    c.finish();
}

/// `pipeline ARGS` in `dir` under the address-space limit, as `limited()` runs it, with its
/// standard input from `file` (relative to `dir`).
fn limited_stdin(dir: &Path, file: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {MEM_KIB} && exec \"$0\" \"$@\" < {file}"
        ))
        .arg(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0");
    cmd
}

#[test]
fn reads_predict_input_dev_zero_is_refused_unread() {
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    let args = ["predict", "--model", "m", "--input", "/dev/zero"];
    let out = expect_within(&c, &args, 1, "/dev/zero: not a regular file", QUICK);
    assert!(
        out.stderr.contains("character device"),
        "{}",
        out.describe()
    );
    // Through a symlink in the workspace, likewise.
    std::os::unix::fs::symlink("/dev/zero", c.ws.path("in.tsv")).unwrap();
    let args = ["predict", "--model", "m", "--input", "in.tsv"];
    expect_within(&c, &args, 1, "in.tsv: not a regular file", QUICK);
    c.finish();
}

#[test]
fn reads_predict_input_fifo_is_refused_without_blocking() {
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    mkfifo(&c.ws.path("pipe.tsv"));
    let args = ["predict", "--model", "m", "--input", "pipe.tsv"];
    expect_within(
        &c,
        &args,
        1,
        "pipe.tsv: not a regular file (it is a FIFO)",
        QUICK,
    );
    c.finish();
}

#[test]
fn reads_predict_standard_input_without_end_is_cut_at_the_line_limit() {
    // `--input -` reads standard input; /dev/zero there is one endless line, cut at 16 MiB.
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    let args = ["predict", "--model", "m", "--input", "-"];
    let t0 = Instant::now();
    let out = run_bounded(limited_stdin(c.ws.root(), "/dev/zero", &args), TIME);
    expect(
        &out,
        1,
        "standard input:1: a line longer than 16 MiB, the limit for a line of a predict input",
    );
    assert!(t0.elapsed() < QUICK, "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn reads_predict_input_of_too_many_lines_is_refused_naming_the_bound() {
    // Two million and one empty lines (2 MB): each would be held as a row once encoded.
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    c.ws.write("in.tsv", "\n".repeat(2_000_001));
    let args = ["predict", "--model", "m", "--input", "in.tsv"];
    let needle = "in.tsv: more than 2000000 lines, the most one `predict --input` reads";
    expect_within(&c, &args, 1, needle, QUICK);
    c.finish();
}

#[test]
fn reads_predict_10mb_field_is_not_echoed_whole() {
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    let field = "x".repeat(10_000_000);
    c.ws.write("in.tsv", format!("一\t丁\t{field}\n"));
    let args = ["predict", "--model", "m", "--input", "in.tsv"];
    let out = expect_within(&c, &args, 1, "in.tsv:1: the label", QUICK);
    assert!(out.stderr.len() < 1024, "{} bytes", out.stderr.len());
    assert!(
        out.stderr.contains("… (9999800 more characters)"),
        "{}",
        out.describe()
    );
    // A text rather than the label: the column count is said, the text not quoted.
    c.ws.write("in.tsv", format!("{field}\n"));
    let out = expect_within(&c, &args, 1, "in.tsv:1: 1 tab-separated columns", QUICK);
    assert!(out.stderr.len() < 1024, "{} bytes", out.stderr.len());
    c.finish();
}

#[test]
fn reads_config_json_symlinked_to_dev_zero_is_refused_by_info_and_predict() {
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("config.json")).unwrap();
    let needle = "m/config.json: not a regular file (it is a character device)";
    expect_within(&c, &["model", "info", "--model", "m"], 1, needle, QUICK);
    let out = expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    assert!(!out.stderr.contains("out of memory"), "{}", out.describe());
    c.finish();
}

#[test]
fn reads_config_json_fifo_is_refused_without_blocking() {
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    mkfifo(&dir.join("config.json"));
    let needle = "m/config.json: not a regular file (it is a FIFO)";
    expect_within(&c, &["model", "info", "--model", "m"], 1, needle, QUICK);
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    c.finish();
}

#[test]
fn reads_config_json_of_20mb_is_refused_naming_the_limit() {
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    edit_config(&dir, |v| v["padding"] = Value::String("x".repeat(20 << 20)));
    let needle = "m/config.json: larger than 16 MiB, the limit for a model's config.json";
    expect_within(&c, &["model", "info", "--model", "m"], 1, needle, QUICK);
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    c.finish();
}

#[test]
fn reads_config_with_a_million_layers_is_refused_by_info_and_predict() {
    // With share_type all, 10^6 layers share the fixture's one block: the weights check
    // passes, and predict applied the block 10^6 times (issue 31).
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    edit_config(&dir, |v| v["num_hidden_layers"] = 1_000_000.into());
    let needle = "m/config.json: num_hidden_layers = 1000000 is more than 1024";
    let info = expect_within(&c, &["model", "info", "--model", "m"], 1, needle, QUICK);
    assert!(!info.stdout.contains("loads as is"), "{}", info.describe());
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    c.ws.write("in.tsv", "一\t丁\n");
    let args = ["predict", "--model", "m", "--input", "in.tsv"];
    expect_within(&c, &args, 1, needle, QUICK);
    c.finish();
}

#[test]
fn reads_config_absurd_num_labels_is_checked_against_the_weights() {
    // No id2label and `num_labels: 10^12`: a 4 TB classifier was allocated (and aborted).
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    edit_config(&dir, |v| {
        let o = v.as_object_mut().unwrap();
        o.remove("id2label");
        o.remove("label2id");
        o.insert("num_labels".into(), 1_000_000_000_000u64.into());
    });
    let needle = "m/config.json: 1000000000000 labels need a 1000000000000 × 32 classifier";
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    // As many labels in id2label (5·10^5, 10 MB of config): the same check, before loading.
    edit_config(&dir, |v| {
        let labels: serde_json::Map<String, Value> = (0..500_000)
            .map(|i| (i.to_string(), Value::String(format!("l{i}"))))
            .collect();
        v["id2label"] = Value::Object(labels);
    });
    let needle = "m/config.json: 500000 labels need a 500000 × 32 classifier";
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        needle,
        QUICK,
    );
    c.finish();
}

#[test]
fn reads_predict_prints_label_names_from_config_escaped() {
    // id2label is the model's, not the user's: an OSC sequence in a label name (which would
    // retitle the terminal) prints escaped, and a 100 KB name is cut.
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    let long = "長".repeat(100_000);
    edit_config(&dir, |v| {
        v["id2label"] = serde_json::json!({"0": "\u{1b}]0;pwned\u{7}", "1": long, "2": "n"});
    });
    let out = c.expect(
        &["predict", "--model", "m", "一", "丁"],
        0,
        "probabilities:",
    );
    assert!(!out.stdout.contains('\u{1b}'), "{}", out.describe());
    assert!(out.stdout.contains("\\u{1b}]0;pwned"), "{}", out.describe());
    assert!(out.stdout.len() < 4096, "{} bytes", out.stdout.len());
    c.finish();
}

#[test]
fn reads_config_absurd_sizes_are_refused_naming_the_field_and_the_bound() {
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    let original = std::fs::read_to_string(dir.join("config.json")).unwrap();
    for (field, bound) in [
        ("hidden_size", "65536"),
        ("intermediate_size", "262144"),
        ("num_attention_heads", "1024"),
        ("max_position_embeddings", "131072"),
        ("vocab_size", "4194304"),
        ("embedding_size", "65536"),
        ("type_vocab_size", "1024"),
    ] {
        std::fs::write(dir.join("config.json"), &original).unwrap();
        edit_config(&dir, |v| v[field] = (1u64 << 40).into());
        let needle = format!("{field} = 1099511627776 is more than {bound}");
        expect_within(&c, &["model", "info", "--model", "m"], 1, &needle, QUICK);
    }
    // predict refuses at the same point (one field suffices: the check is the same call).
    expect_within(
        &c,
        &["predict", "--model", "m", "一", "丁"],
        1,
        "type_vocab_size = 1099511627776 is more than 1024",
        QUICK,
    );
    c.finish();
}

#[test]
fn reads_tokenizer_json_of_a_model_dir_is_read_bounded() {
    let c = Case::new(ONE_STAGE);
    let dir = classifier(&c, "m");
    let json = dir.join("tokenizer.json");
    std::fs::remove_file(&json).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &json).unwrap();
    let args = ["predict", "--model", "m", "一", "丁"];
    let out = expect_within(
        &c,
        &args,
        1,
        "m/tokenizer.json: not a regular file (it is a character device)",
        QUICK,
    );
    assert!(!out.stderr.contains("out of memory"), "{}", out.describe());
    // Sparse, 4 GiB: read whole it would not fit under the address-space limit.
    std::fs::remove_file(&json).unwrap();
    std::fs::File::create(&json)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let needle = "m/tokenizer.json: larger than 64 MiB, the limit for a tokenizer.json";
    expect_within(&c, &args, 1, needle, QUICK);
    c.finish();
}

#[test]
fn reads_model_forward_input_dev_zero_is_refused_unread() {
    let c = Case::new(ONE_STAGE);
    classifier(&c, "m");
    let args = [
        "model",
        "forward",
        "--model",
        "m",
        "--input",
        "/dev/zero",
        "--output",
        "out.json",
    ];
    expect_within(&c, &args, 1, "/dev/zero: not a regular file", QUICK);
    assert!(!c.ws.path("out.json").exists());
    c.finish();
}

/// A `cmd` stage standing in for a pretrain artifact with a saved step 1 whose snapshot record
/// is `record` (a shell command writing `$R`), and a finetune stage that starts from that step.
fn snapshot_yaml(record: &str) -> String {
    format!(
        r#"vars:
  data: {repo}/datasets/fixtures
stages:
  pretrain:
    cmd: 'mkdir -p $PIPELINE_OUT/steps/1 && R=$PIPELINE_OUT/steps/1/snapshot.json && {record}'
  ft:
    kind: finetune
    deps: [pretrain]
    inputs: ["${{vars.data}}/lcqmc/*.tsv"]
    params:
      task: lcqmc
      train: ${{vars.data}}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${{vars.data}}/lcqmc/test.tsv
      epochs: 1
      batch_size: 16
      max_seq_length: 32
      pretrain_step: 1
"#,
        repo = env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn reads_snapshot_record_of_100mb_is_refused_naming_the_limit() {
    // Sparse: 100 MB of zeros that would be read whole before being found not to be JSON.
    let c = Case::new(&snapshot_yaml("truncate -s 100M $R"));
    let t0 = Instant::now();
    let out = c.run(&["run", "ft"]);
    expect(
        &out,
        1,
        "larger than 64 MiB, the limit for a metrics record",
    );
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("steps/1/snapshot.json"), "{}", out.describe());
    assert!(t0.elapsed() < TIME, "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn reads_snapshot_record_replaced_by_a_fifo_is_never_opened() {
    let c = Case::new(&snapshot_yaml("echo {} > $R"));
    let v = c.ws.json(&["run", "pretrain"], 0);
    let snapshot = common::artifact(&v, "pretrain").join("steps/1/snapshot.json");
    // A hostile hand in the store: the record swapped for a FIFO no one writes. The engine
    // finds the artifact changed and makes it again before finetune reads it; the record read
    // is then the real one, and finetune goes on to find the stand-in holds no model.
    std::fs::remove_file(&snapshot).unwrap();
    mkfifo(&snapshot);
    let out = expect_within(&c, &["run", "ft"], 1, "artifact missing or corrupt", TIME);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("steps/1 has no config.json"),
        "{}",
        out.describe()
    );
    c.finish();
}

#[test]
fn reads_pretrain_metrics_of_100mb_is_left_unread() {
    // `init: pretrained` reads the dep's metrics.json for the pretraining point; one past the
    // 64 MiB record limit (sparse, 100 MB of zeros) is "not known", and the stage goes on to
    // load the backbone, which the stand-in lacks.
    let yaml = snapshot_yaml("echo {} > $R && truncate -s 100M $PIPELINE_OUT/metrics.json")
        .replace("      pretrain_step: 1\n", "");
    let c = Case::new(&yaml);
    let out = expect_within(&c, &["run", "ft"], 1, "has no config.json", TIME);
    assert!(!out.stdout.contains("steps/1"), "{}", out.describe());
    c.finish();
}
