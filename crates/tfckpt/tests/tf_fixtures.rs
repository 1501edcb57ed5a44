//! The reader against checkpoints TensorFlow wrote (tests/fixtures/tf, made by
//! tests/fixtures/make_tf_checkpoints.py) and the real albert_tiny_zh index; and the writer's
//! output read back by TensorFlow when a Python with tensorflow is available.

use std::path::{Path, PathBuf};
use std::process::Command;

use pipeline_tfckpt::{Checkpoint, DType, Tensor, Writer, skip_reason, write_checkpoint_file};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tf")
}

/// Every element as f64, decoded from the raw bytes (exact for every dtype here).
fn values(t: &Tensor) -> Vec<f64> {
    let b = &t.bytes;
    match t.dtype {
        DType::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DType::I64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        _ => t.to_f32().into_iter().map(f64::from).collect(),
    }
}

fn tf_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::Bool => "bool",
    }
}

fn check_against(c: &Checkpoint, expected: &Value) {
    let expected = expected.as_object().unwrap();
    assert_eq!(c.len(), expected.len());
    for (name, want) in expected {
        let t = c.read(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tf_dtype(t.dtype), want["dtype"], "{name}");
        let shape: Vec<usize> = serde_json::from_value(want["shape"].clone()).unwrap();
        assert_eq!(t.shape, shape, "{name}");
        let v: Vec<f64> = serde_json::from_value(want["values"].clone()).unwrap();
        let got = values(&t);
        assert_eq!(got.len(), v.len(), "{name}");
        // JSON text may differ from the f64 in the last bit (serde_json's fast float parsing):
        // compare at the tensor's own precision, f64 to 1e-15 relative.
        for (a, b) in got.iter().zip(&v) {
            let same = match t.dtype {
                DType::F64 | DType::I64 => (a - b).abs() <= 1e-15 * b.abs().max(1.0),
                _ => *a as f32 == *b as f32,
            };
            assert!(same, "{name}: {a} read, {b} from TensorFlow");
        }
    }
}

#[test]
fn every_dtype_in_two_shards_reads_as_tensorflow_reads_it() {
    let dir = fixtures().join("dtypes");
    let c = Checkpoint::open(&dir).unwrap();
    assert_eq!(c.header.num_shards, 2);
    assert_eq!(c.shards().len(), 2);
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.json")).unwrap()).unwrap();
    check_against(&c, &want);
}

#[test]
fn model_checkpoints_list_weights_and_skip_slots() {
    for (name, slots) in [
        ("google", "adam_m"),
        ("albert_zh", "lamb_m"),
        ("albert_zh_preln", ""),
    ] {
        let c = Checkpoint::open(&fixtures().join(name)).unwrap();
        let skipped: Vec<&str> = c.names().filter(|n| skip_reason(n).is_some()).collect();
        assert!(skipped.contains(&"global_step"), "{name}");
        if !slots.is_empty() {
            assert!(skipped.iter().any(|n| n.ends_with(slots)), "{name}");
            assert_eq!(skipped.len(), 1 + 2 * (c.len() - 1) / 3, "{name}");
        }
        for n in c.names().filter(|n| skip_reason(n).is_none()) {
            c.read_f32(n).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn strings_and_partitioned_variables_from_tensorflow_are_refused_by_name() {
    let c = Checkpoint::open(&fixtures().join("bad_string")).unwrap();
    let e = c.read("bert/vocab_words").unwrap_err();
    assert_eq!(e.tensor.as_deref(), Some("bert/vocab_words"));
    assert!(e.message.contains("string"), "{e}");
    assert_eq!(c.read_f32("w").unwrap().1, vec![1.0, 1.0]);

    let c = Checkpoint::open(&fixtures().join("bad_partitioned")).unwrap();
    // The slice entries are hidden; the variable itself is listed and refused.
    assert_eq!(
        c.names().collect::<Vec<_>>(),
        vec!["bert/embeddings/word_embeddings"]
    );
    let e = c.read_f32("bert/embeddings/word_embeddings").unwrap_err();
    assert!(
        e.message
            .contains("partitioned variable (saved in 2 slices)"),
        "{e}"
    );
    assert!(e.to_string().contains("model.ckpt.index"), "{e}");
}

#[test]
fn the_real_albert_tiny_zh_index_is_read() {
    let root = std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets"));
    let dir = root.join("tf_checkpoint_meta");
    if !dir.is_dir() {
        eprintln!("skipped: {} is not there", dir.display());
        return;
    }
    // The weights file is not part of that copy: the index opens alone, the full open says
    // which shard is missing.
    let c = Checkpoint::open_index(&dir).unwrap();
    assert_eq!(c.len(), 31);
    let spec = |n: &str| c.spec(n).unwrap();
    assert_eq!(
        spec("bert/embeddings/word_embeddings"),
        (DType::F32, vec![21128, 128])
    );
    assert_eq!(
        spec("bert/embeddings/word_embeddings_2"),
        (DType::F32, vec![128, 312])
    );
    assert_eq!(
        spec("bert/embeddings/position_embeddings"),
        (DType::F32, vec![512, 312])
    );
    assert_eq!(
        spec("bert/encoder/layer_shared/intermediate/dense/kernel"),
        (DType::F32, vec![312, 1248])
    );
    assert_eq!(
        spec("cls/predictions/transform/dense/kernel"),
        (DType::F32, vec![312, 312])
    );
    assert_eq!(
        spec("cls/seq_relationship/output_weights"),
        (DType::F32, vec![2, 312])
    );
    assert!(c.names().all(|n| skip_reason(n).is_none()));
    let e = Checkpoint::open(&dir).unwrap_err();
    assert!(
        e.file.ends_with("albert_model.ckpt.data-00000-of-00001"),
        "{e}"
    );
}

/// A Python with tensorflow: `$TF_PYTHON`, else /tmp/tfvenv/bin/python, else `python3`.
pub fn tf_python() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = std::env::var_os("TF_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            PathBuf::from("/tmp/tfvenv/bin/python"),
            PathBuf::from("python3"),
        ])
        .collect();
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import tensorflow"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn tensorflow_reads_what_the_writer_writes() {
    let Some(python) = tf_python() else {
        eprintln!(
            "skipped: no Python with tensorflow (set TF_PYTHON, or see tests/fixtures/make_tf_checkpoints.py)"
        );
        return;
    };
    // Copy every tensor of the TF-written fixtures into one new two-shard checkpoint.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("model.ckpt-5");
    let mut w = Writer::create(&prefix, 2).unwrap();
    let src = Checkpoint::open(&fixtures().join("dtypes")).unwrap();
    for (i, n) in src.names().enumerate() {
        let t = src.read(n).unwrap();
        w.add(i % 2, n, t.dtype, &t.shape, &t.bytes).unwrap();
    }
    let g = Checkpoint::open(&fixtures().join("google")).unwrap();
    for n in g.names().filter(|n| skip_reason(n).is_none()) {
        let (shape, v) = g.read_f32(n).unwrap();
        w.add_f32(n, &shape, &v).unwrap();
    }
    w.finish().unwrap();
    write_checkpoint_file(dir.path(), "model.ckpt-5").unwrap();
    let script = fixtures().join("../make_tf_checkpoints.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg("read")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read_by_tf: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_against(&Checkpoint::open(dir.path()).unwrap(), &read_by_tf);
}
