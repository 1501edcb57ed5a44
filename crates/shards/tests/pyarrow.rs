//! The schema contract as Python users see it: a shard written here opens with
//! `pyarrow.ipc.open_file` with the documented field names, types, values and metadata (and with
//! polars when it is installed). Skips, passing with a note, when pyarrow cannot be had.

use std::collections::BTreeMap;
use std::process::Command;

use pipeline_shards::{Instance, ShardWriter};

fn has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// pyarrow, installed once with pip if missing.
fn pyarrow_available() -> bool {
    if has("pyarrow") {
        return true;
    }
    let installed = Command::new("python3")
        .args(["-m", "pip", "install", "--user", "--quiet", "pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    installed && has("pyarrow")
}

const SCRIPT: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.ipc as ipc

path, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
reader = ipc.open_file(path)
schema = reader.schema
want = [
    ("input_ids", "list<item: int32>"),
    ("token_type_ids", "list<item: int8>"),
    ("length", "int32"),
    ("masked_positions", "list<item: int32>"),
    ("masked_ids", "list<item: int32>"),
    ("sentence_order_label", "int8"),
]
got = [(f.name, str(f.type)) for f in schema]
assert got == want, got
assert schema.field("input_ids").type == pa.list_(pa.int32())
assert schema.field("token_type_ids").type == pa.list_(pa.int8())
meta = {k.decode(): v.decode() for k, v in schema.metadata.items()}
assert meta["format"] == "albert-pretraining-instances", meta
assert meta["version"] == "1", meta
assert meta["max_seq_length"] == "64", meta
assert reader.num_record_batches == 2, reader.num_record_batches
table = reader.read_all()
assert table.num_rows == len(expected), table.num_rows
for col in ["input_ids", "token_type_ids", "masked_positions", "masked_ids", "sentence_order_label"]:
    assert table.column(col).to_pylist() == [e[col] for e in expected], col
assert table.column("length").to_pylist() == [len(e["input_ids"]) for e in expected]

try:
    import polars as pl
except ImportError:
    print("polars not installed: skipped the polars check")
else:
    df = pl.read_ipc(path)
    assert df.columns == [n for n, _ in want], df.columns
    dtypes = [pl.List(pl.Int32), pl.List(pl.Int8), pl.Int32, pl.List(pl.Int32), pl.List(pl.Int32), pl.Int8]
    assert df.dtypes == dtypes, df.dtypes
    assert df["input_ids"].to_list() == [e["input_ids"] for e in expected]
    assert df["sentence_order_label"].to_list() == [e["sentence_order_label"] for e in expected]
    print("polars ok")
print("pyarrow ok")
"#;

#[test]
fn pyarrow_reads_the_documented_schema() {
    if !pyarrow_available() {
        println!("note: pyarrow is not available (pip install failed): skipping the Python check");
        return;
    }
    // 1,100 rows: two record batches, varied lengths and mask counts.
    let instances: Vec<Instance> = (0..1100u32)
        .map(|i| {
            let n = 3 + (i as usize % 60);
            let masked_positions: Vec<u32> =
                (1..n as u32 - 1).step_by(3).take(i as usize % 5).collect();
            Instance {
                input_ids: (0..n as u32).map(|t| (t * 7919 + i) % 21128).collect(),
                token_type_ids: (0..n).map(|t| u8::from(t > n / 2)).collect(),
                masked_ids: masked_positions.iter().map(|&p| p + 100).collect(),
                masked_positions,
                sentence_order_label: (i % 2) as u8,
            }
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut meta = BTreeMap::new();
    meta.insert("max_seq_length".to_string(), "64".to_string());
    let mut w = ShardWriter::create(dir.path(), "train", 5000, meta).expect("writer");
    for inst in &instances {
        w.write(inst).expect("write");
    }
    let infos = w.finish().expect("finish");
    assert_eq!(infos.len(), 1);
    let shard = dir.path().join(&infos[0].file);
    let expected = dir.path().join("expected.json");
    std::fs::write(&expected, serde_json::to_string(&instances).expect("json"))
        .expect("write json");
    let script = dir.path().join("check.py");
    std::fs::write(&script, SCRIPT).expect("write script");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&shard)
        .arg(&expected)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "python check failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("pyarrow ok"));
}
