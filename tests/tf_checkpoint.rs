//! End-to-end tests of TensorFlow checkpoints through the binary: `pipeline model import`,
//! `export --to tf`, `info` and `forward` on a checkpoint, `init_from:` a checkpoint in a
//! finetune stage, and bad checkpoints (exit code 2, the file and tensor named, nothing written
//! to --out). The fixtures are tests/fixtures/tf/ (made with TensorFlow by
//! tests/fixtures/make_tf_checkpoints.py).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{BIN, Output, Ws, artifact};
use pipeline_tfckpt::proto::{Entry, Header};
use pipeline_tfckpt::{Checkpoint, table};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/tf").join(name)
}

fn pipeline(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("starting the pipeline binary");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn flat(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap()],
    }
}

/// A copy of a fixture checkpoint directory that a test may damage.
fn copy_fixture(name: &str, to: &Path) -> PathBuf {
    let dst = to.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
    }
    dst
}

#[test]
fn import_writes_a_model_directory_and_reports_what_it_read() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("zh");
    let o = pipeline(&[
        "model",
        "import",
        "--from",
        s(&fixture("albert_zh")),
        "--out",
        s(&out),
        "--json",
    ]);
    o.expect_code(0).assert_no_panic();
    let r = o.json();
    assert_eq!(r["layout"], "albert_zh");
    assert_eq!(r["share_type"], "all");
    let skipped: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x[0].as_str().unwrap())
        .collect();
    assert!(skipped.contains(&"global_step"));
    assert!(skipped.iter().any(|n| n.ends_with("/lamb_v")));
    assert_eq!(
        r["tensors_read"].as_u64().unwrap() as usize + skipped.len(),
        94
    );
    for f in [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    // albert_zh's layout is not transformers': config.json and `model info` say so.
    assert!(
        read_json(&out.join("config.json"))["pipeline_note"]
            .as_str()
            .unwrap()
            .contains("albert_zh")
    );
    let info = pipeline(&["model", "info", "--model", s(&out)]);
    info.expect_code(0);
    assert!(
        info.stdout.contains("cannot run it faithfully") && info.stdout.contains("albert_zh"),
        "{}",
        info.describe()
    );

    // The human report of a Google checkpoint.
    let g = tmp.path().join("g");
    let o = pipeline(&[
        "model",
        "import",
        "--from",
        s(&fixture("google/model.ckpt-1000.index")),
        "--out",
        s(&g),
    ]);
    o.expect_code(0);
    assert!(
        o.stdout.contains("layout:   google") && o.stdout.contains("MB/s"),
        "{}",
        o.describe()
    );
    let info = pipeline(&["model", "info", "--model", s(&g)]);
    assert!(
        info.stdout.contains("transformers: loads as is"),
        "{}",
        info.describe()
    );
}

#[test]
fn info_and_forward_take_a_tf_checkpoint_directly() {
    for (name, layout) in [("google", "google"), ("albert_zh_preln", "albert_zh")] {
        let dir = fixture(name);
        let o = pipeline(&["model", "info", "--model", s(&dir), "--json"]);
        o.expect_code(0);
        let v = o.json();
        assert_eq!(v["layout"], layout);
        assert_eq!(v["detected"]["hidden_size"], 32);
        assert_eq!(v["config"]["num_hidden_layers"], 2);

        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out.json");
        let o = pipeline(&[
            "model",
            "forward",
            "--model",
            s(&dir.join("model.ckpt-1000")),
            "--input",
            s(&dir.join("inputs.json")),
            "--output",
            s(&out),
        ]);
        o.expect_code(0).assert_no_panic();
        let ours = read_json(&out);
        let tf = read_json(&dir.join("outputs.json"));
        for k in [
            "prediction_logits",
            "sop_logits",
            "last_hidden_state",
            "pooler_output",
        ] {
            let (a, b) = (flat(&ours[k]), flat(&tf[k]));
            assert_eq!(a.len(), b.len(), "{name} {k}");
            let d = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            assert!(d < 1e-4, "{name}: {k} differs from TensorFlow's by {d}");
        }
    }
}

#[test]
fn the_real_albert_tiny_zh_index_is_described_without_its_weights() {
    let dir = repo().join("../shared/datasets/tf_checkpoint_meta");
    if !dir.is_dir() {
        eprintln!("skipped: {} is not there", dir.display());
        return;
    }
    let o = pipeline(&["model", "info", "--model", s(&dir), "--json"]);
    o.expect_code(0);
    let v = o.json();
    assert_eq!(v["layout"], "albert_zh");
    assert_eq!(v["share_type"], "all");
    assert_eq!(v["detected"]["vocab_size"], 21128);
    assert_eq!(v["detected"]["embedding_size"], 128);
    assert_eq!(v["detected"]["hidden_size"], 312);
    assert_eq!(v["config"]["num_hidden_layers"], 4);
    assert_eq!(v["missing_shards"].as_array().unwrap().len(), 1);
    // Importing it needs the weights: exit 2 naming the missing data file.
    let tmp = tempfile::tempdir().unwrap();
    let o = pipeline(&[
        "model",
        "import",
        "--from",
        s(&dir),
        "--out",
        s(&tmp.path().join("m")),
    ]);
    o.expect_code(2).assert_no_panic();
    assert!(
        o.stderr.contains("albert_model.ckpt.data-00000-of-00001"),
        "{}",
        o.describe()
    );
}

#[test]
fn export_writes_a_checkpoint_that_imports_again() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["google", "albert_zh"] {
        let m = tmp.path().join(format!("{name}-model"));
        pipeline(&[
            "model",
            "import",
            "--from",
            s(&fixture(name)),
            "--out",
            s(&m),
        ])
        .expect_code(0);
        let t = tmp.path().join(format!("{name}-tf"));
        let o = pipeline(&[
            "model",
            "export",
            "--to",
            "tf",
            "--model",
            s(&m),
            "--out",
            s(&t),
        ]);
        o.expect_code(0).assert_no_panic();
        for f in [
            "checkpoint",
            "model.ckpt.index",
            "model.ckpt.data-00000-of-00001",
            "albert_config.json",
            "vocab.txt",
        ] {
            assert!(t.join(f).is_file(), "{name}: {f}");
        }
        let orig = Checkpoint::open(&fixture(name)).unwrap();
        let back = Checkpoint::open(&t).unwrap();
        for n in back.names() {
            assert_eq!(
                back.read_f32(n).unwrap(),
                orig.read_f32(n).unwrap(),
                "{name}: {n}"
            );
        }
        let again = tmp.path().join(format!("{name}-again"));
        let o = pipeline(&[
            "model",
            "import",
            "--from",
            s(&t),
            "--out",
            s(&again),
            "--json",
        ]);
        o.expect_code(0);
        assert_eq!(o.json()["layout"], name);
        // --out must be new.
        let o = pipeline(&[
            "model",
            "export",
            "--to",
            "tf",
            "--model",
            s(&m),
            "--out",
            s(&t),
        ]);
        o.expect_code(2);
        assert!(o.stderr.contains("not empty"), "{}", o.describe());
    }
}

/// Rewrites one index entry (or the header) of the checkpoint in `dir`.
fn rewrite_index(dir: &Path, f: &dyn Fn(&[u8], &mut Vec<u8>)) {
    let index = dir.join("model.ckpt-1000.index");
    let mut kv = table::read_table(&std::fs::read(&index).unwrap()).unwrap();
    for (k, v) in kv.iter_mut() {
        f(k, v);
    }
    std::fs::write(&index, table::write_table(&kv)).unwrap();
}

fn entry_patch(name: &'static str, patch: fn(&mut Entry)) -> impl Fn(&[u8], &mut Vec<u8>) {
    move |k, v| {
        if k == name.as_bytes() {
            let mut e = Entry::decode(v).unwrap();
            patch(&mut e);
            *v = e.encode();
        }
    }
}

#[test]
fn bad_checkpoints_exit_2_naming_the_file_and_write_nothing() {
    let data = "model.ckpt-1000.data-00000-of-00001";
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage, Vec<&str>)> = vec![
        (
            "truncated data file",
            Box::new(move |d: &Path| {
                let p = d.join(data);
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..b.len() / 2]).unwrap();
            }),
            vec![data, "truncated"],
        ),
        (
            "flipped byte",
            Box::new(move |d: &Path| {
                let c = Checkpoint::open(d).unwrap();
                let e = c.raw_entry("bert/pooler/dense/kernel").unwrap().clone();
                let p = d.join(data);
                let mut b = std::fs::read(&p).unwrap();
                b[e.offset as usize + 17] ^= 0x10;
                std::fs::write(&p, &b).unwrap();
            }),
            vec![data, "bert/pooler/dense/kernel", "checksum"],
        ),
        (
            "missing shard",
            Box::new(move |d: &Path| std::fs::remove_file(d.join(data)).unwrap()),
            vec![data],
        ),
        (
            "big-endian header",
            Box::new(|d: &Path| {
                rewrite_index(d, &|k, v| {
                    if k.is_empty() {
                        let mut h = Header::decode(v).unwrap();
                        h.big_endian = true;
                        *v = h.encode();
                    }
                })
            }),
            vec!["model.ckpt-1000.index", "big-endian"],
        ),
        (
            "string tensor",
            Box::new(|d: &Path| {
                rewrite_index(
                    d,
                    &entry_patch("bert/embeddings/token_type_embeddings", |e| e.dtype = 7),
                )
            }),
            vec![
                "model.ckpt-1000.index",
                "bert/embeddings/token_type_embeddings",
                "string",
            ],
        ),
        (
            "partitioned variable",
            Box::new(|d: &Path| {
                rewrite_index(d, &entry_patch("bert/pooler/dense/bias", |e| e.slices = 2))
            }),
            vec![
                "model.ckpt-1000.index",
                "bert/pooler/dense/bias",
                "partitioned",
            ],
        ),
        (
            "config disagreeing with the tensors",
            Box::new(|d: &Path| {
                let p = d.join("albert_config.json");
                let t = std::fs::read_to_string(&p)
                    .unwrap()
                    .replace("\"intermediate_size\": 64", "\"intermediate_size\": 48");
                std::fs::write(&p, t).unwrap();
            }),
            vec![
                "albert_config.json",
                "intermediate/dense/kernel",
                "not this checkpoint's",
            ],
        ),
        (
            "vocab.txt of another size",
            Box::new(|d: &Path| {
                let p = d.join("vocab.txt");
                let t = std::fs::read_to_string(&p).unwrap();
                std::fs::write(&p, t.lines().take(90).collect::<Vec<_>>().join("\n") + "\n")
                    .unwrap();
            }),
            vec!["vocab.txt", "90 tokens"],
        ),
    ];
    for (what, damage, expect) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_fixture("albert_zh", tmp.path());
        damage(&dir);
        let out = tmp.path().join("out").join("model");
        let o = pipeline(&["model", "import", "--from", s(&dir), "--out", s(&out)]);
        o.expect_code(2).assert_no_panic();
        for e in &expect {
            assert!(
                o.stderr.contains(e),
                "{what}: expected {e:?} in the error\n{}",
                o.describe()
            );
        }
        assert!(!out.exists(), "{what}: {} was written", out.display());
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("out"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(leftovers.is_empty(), "{what}: left {leftovers:?}");
        // `model forward` on the damaged checkpoint fails the same way.
        let o = pipeline(&[
            "model",
            "forward",
            "--model",
            s(&dir),
            "--input",
            s(&fixture("albert_zh/inputs.json")),
            "--output",
            s(&tmp.path().join("o.json")),
        ]);
        o.expect_code(2).assert_no_panic();
        assert!(
            o.stderr.contains(expect[0]),
            "{what}: forward\n{}",
            o.describe()
        );
    }
}

#[test]
fn finetune_starts_from_a_tf_checkpoint() {
    let ws = Ws::new(&format!(
        r#"vars:
  data: {repo}/datasets/fixtures
stages:
  ft:
    kind: finetune
    params:
      init_from: {dir}
      task: lcqmc
      train: ${{vars.data}}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${{vars.data}}/lcqmc/test.tsv
      epochs: 1
      max_seq_length: 24
"#,
        repo = repo().display(),
        dir = fixture("albert_zh").display()
    ));
    let v = ws.run_ok(&[]);
    let dir = artifact(&v, "ft");
    let m = read_json(&dir.join("metrics.json"));
    assert_eq!(m["init"], "checkpoint");
    // The fine-tuned model keeps albert_zh's layout.
    assert_eq!(read_json(&dir.join("config.json"))["layout"], "albert_zh");
}
