//! Tests of the writer, `read_shard` and the batch reader together (they share fixtures).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;

use crate::schema::{FORMAT_KEY, VERSION_KEY, shard_schema};
use crate::*;

/// A valid instance whose second token is `id` (so rows can be told apart), `len` tokens long
/// (at least 3) with up to `masks` masked positions.
pub(crate) fn inst(id: u32, len: usize, masks: usize) -> Instance {
    let len = len.max(3);
    let mut input_ids: Vec<u32> = (0..len as u32).map(|i| 1000 + i).collect();
    input_ids[0] = 2; // [CLS]
    input_ids[1] = id;
    input_ids[len - 1] = 3; // [SEP]
    let split = len / 2;
    let token_type_ids = (0..len).map(|i| u8::from(i > split)).collect();
    let masked_positions: Vec<u32> = (2..len as u32 - 1).step_by(2).take(masks).collect();
    let masked_ids = masked_positions.iter().map(|&p| 5000 + p).collect();
    Instance {
        input_ids,
        token_type_ids,
        masked_positions,
        masked_ids,
        sentence_order_label: (id % 2) as u8,
    }
}

fn meta() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("vocab_size".into(), "21128".into());
    m.insert("max_seq_length".into(), "64".into());
    m
}

pub(crate) fn write(
    dir: &Path,
    prefix: &str,
    per_shard: usize,
    insts: &[Instance],
) -> Vec<ShardInfo> {
    let mut w = ShardWriter::create(dir, prefix, per_shard, meta()).unwrap();
    for i in insts {
        w.write(i).unwrap();
    }
    w.finish().unwrap()
}

/// `n` instances with ids 0..n and varied lengths (3..=40) and mask counts (0..=6).
fn corpus(n: u32) -> Vec<Instance> {
    (0..n)
        .map(|i| inst(i, 3 + (i as usize * 7) % 38, (i as usize * 5) % 7))
        .collect()
}

pub(crate) fn paths(dir: &Path, infos: &[ShardInfo]) -> Vec<PathBuf> {
    infos.iter().map(|s| dir.join(&s.file)).collect()
}

/// The ids (second token) of a batch's rows.
pub(crate) fn row_ids(b: &Batch) -> Vec<u32> {
    (0..b.batch_size)
        .map(|r| b.input_ids[r * b.seq_len + 1] as u32)
        .collect()
}

pub(crate) fn cfg(batch_size: usize) -> BatchReaderConfig {
    BatchReaderConfig {
        seed: 7,
        ..BatchReaderConfig::new(batch_size, 64, 8)
    }
}

fn instance_strategy() -> impl Strategy<Value = Instance> {
    (1usize..50, any::<u8>(), 0u32..=i32::MAX as u32).prop_flat_map(|(len, label, seed)| {
        (
            proptest::collection::vec(0u32..=i32::MAX as u32, len),
            proptest::collection::vec(0u8..=1, len),
            proptest::collection::btree_set(0u32..len as u32, 0..len.min(10)),
            Just(label % 2),
            Just(seed),
        )
            .prop_map(|(input_ids, token_type_ids, pos, label, seed)| {
                let masked_positions: Vec<u32> = pos.into_iter().collect();
                let masked_ids = masked_positions
                    .iter()
                    .map(|p| p.wrapping_mul(2_654_435_761) ^ seed)
                    .map(|x| x % (i32::MAX as u32))
                    .collect();
                Instance {
                    input_ids,
                    token_type_ids,
                    masked_positions,
                    masked_ids,
                    sentence_order_label: label,
                }
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn round_trip(insts in proptest::collection::vec(instance_strategy(), 0..40), per in 1usize..9) {
        let dir = tempfile::tempdir().unwrap();
        let infos = write(dir.path(), "train", per, &insts);
        prop_assert_eq!(infos.len(), insts.len().div_ceil(per));
        let mut back = Vec::new();
        for (k, info) in infos.iter().enumerate() {
            prop_assert_eq!(&info.file, &format!("train-{k:05}.arrow"));
            let (rows, m) = read_shard(dir.path().join(&info.file)).unwrap();
            prop_assert_eq!(m.get(FORMAT_KEY).map(String::as_str), Some("albert-pretraining-instances"));
            prop_assert_eq!(m.get(VERSION_KEY).map(String::as_str), Some("1"));
            prop_assert_eq!(m.get("vocab_size").map(String::as_str), Some("21128"));
            prop_assert_eq!(info.instances, rows.len() as u64);
            prop_assert_eq!(info.tokens, rows.iter().map(|r| r.input_ids.len() as u64).sum::<u64>());
            prop_assert_eq!(shard_instances(&dir.path().join(&info.file)).unwrap(), info.instances);
            back.extend(rows);
        }
        prop_assert_eq!(back, insts);
    }
}

#[test]
fn shard_rollover_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let infos = write(dir.path(), "dev", 4, &corpus(10));
    let counts: Vec<u64> = infos.iter().map(|s| s.instances).collect();
    assert_eq!(counts, [4, 4, 2]);
    let names: Vec<&str> = infos.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        ["dev-00000.arrow", "dev-00001.arrow", "dev-00002.arrow"]
    );
    write(dir.path(), "dev-extra", 4, &corpus(1));
    std::fs::write(dir.path().join("dev-notes.arrow"), "").unwrap();
    assert_eq!(
        list_shards(dir.path(), "dev").unwrap(),
        paths(dir.path(), &infos)
    );

    // An exact multiple closes the last shard without opening an empty one.
    let dir = tempfile::tempdir().unwrap();
    let infos = write(dir.path(), "t", 5, &corpus(10));
    assert_eq!(infos.len(), 2);
    assert_eq!(list_shards(dir.path(), "t").unwrap().len(), 2);

    // No instance, no file.
    let dir = tempfile::tempdir().unwrap();
    assert!(write(dir.path(), "t", 5, &[]).is_empty());
    assert!(list_shards(dir.path(), "t").unwrap().is_empty());
}

#[test]
fn interleaved_writers_number_their_files_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut writers: Vec<ShardWriter> = (0..3)
        .map(|i| {
            ShardWriter::create(dir.path(), "t", 2, meta())
                .unwrap()
                .interleaved(i, 3)
        })
        .collect();
    // Writer 0 fills two shards and a part, writer 1 one shard, writer 2 nothing.
    let corpus = corpus(8);
    for inst in &corpus[..5] {
        writers[0].write(inst).unwrap();
    }
    for inst in &corpus[5..7] {
        writers[1].write(inst).unwrap();
    }
    let names: Vec<Vec<String>> = writers
        .into_iter()
        .map(|w| w.finish().unwrap().into_iter().map(|s| s.file).collect())
        .collect();
    assert_eq!(
        names,
        [
            vec!["t-00000.arrow", "t-00003.arrow", "t-00006.arrow"],
            vec!["t-00001.arrow"],
            vec![],
        ]
    );
    // The reader lists them in number order, whatever wrote them.
    let listed: Vec<String> = list_shards(dir.path(), "t")
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed,
        [
            "t-00000.arrow",
            "t-00001.arrow",
            "t-00003.arrow",
            "t-00006.arrow"
        ]
    );
}
#[test]
fn record_batches_hold_1024_rows() {
    let dir = tempfile::tempdir().unwrap();
    let infos = write(dir.path(), "t", 2500, &corpus(2600));
    assert_eq!(infos.len(), 2);
    let f = File::open(dir.path().join(&infos[0].file)).unwrap();
    let r = FileReader::try_new(f, None).unwrap();
    assert_eq!(r.num_batches(), 3);
    let sizes: Vec<usize> = r.map(|b| b.unwrap().num_rows()).collect();
    assert_eq!(sizes, [1024, 1024, 452]);
}

#[test]
fn writer_rejects_bad_instances_and_params() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ShardWriter::create(dir.path(), "t", 10, meta()).unwrap();
    w.write(&inst(1, 10, 2)).unwrap();
    let mut bad = inst(2, 10, 2);
    bad.masked_positions.reverse();
    let e = format!("{:#}", w.write(&bad).unwrap_err());
    assert!(e.contains("instance 1") && e.contains("ascending"), "{e}");
    let mut bad = inst(2, 10, 2);
    bad.token_type_ids.pop();
    assert!(format!("{:#}", w.write(&bad).unwrap_err()).contains("token_type_ids"));
    let mut bad = inst(2, 10, 2);
    bad.masked_positions = vec![10];
    bad.masked_ids = vec![1];
    assert!(format!("{:#}", w.write(&bad).unwrap_err()).contains("outside"));
    let mut bad = inst(2, 10, 0);
    bad.input_ids[2] = u32::MAX;
    assert!(format!("{:#}", w.write(&bad).unwrap_err()).contains("Int32"));
    let mut bad = inst(2, 10, 0);
    bad.sentence_order_label = 2;
    assert!(format!("{:#}", w.write(&bad).unwrap_err()).contains("sentence_order_label"));
    assert_eq!(w.finish().unwrap()[0].instances, 1);

    assert!(ShardWriter::create(dir.path(), "t", 0, meta()).is_err());
    assert!(ShardWriter::create(dir.path(), "a/b", 1, meta()).is_err());
    let mut m = meta();
    m.insert("format".into(), "x".into());
    assert!(ShardWriter::create(dir.path(), "t", 1, m).is_err());
}

/// Writes a file with the shard schema changed by `edit` (one row of plain data).
fn write_odd(
    path: &Path,
    edit: impl Fn(&mut Vec<Field>, &mut Vec<ArrayRef>, &mut BTreeMap<String, String>),
) {
    let good = Arc::new(shard_schema(&BTreeMap::new()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let infos = write(dir.path(), "t", 10, &[inst(1, 5, 1)]);
    let f = File::open(dir.path().join(&infos[0].file)).unwrap();
    let batch = FileReader::try_new(f, None)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let mut fields: Vec<Field> = good.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    let mut m: BTreeMap<String, String> = good.metadata().clone().into_iter().collect();
    edit(&mut fields, &mut cols, &mut m);
    let schema = Arc::new(Schema::new_with_metadata(fields, m.into_iter().collect()));
    let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let mut w = FileWriter::try_new(File::create(path).unwrap(), &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
}

#[test]
fn schema_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.arrow");
    write_odd(&missing, |f, c, _| {
        f.remove(4);
        c.remove(4);
    });
    let e = format!("{:#}", read_shard(&missing).unwrap_err());
    assert!(
        e.contains("missing.arrow") && e.contains("missing column `masked_ids`"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        BatchReader::open(&[&missing], cfg(2)).err().unwrap()
    );
    assert!(
        e.contains("missing.arrow") && e.contains("masked_ids"),
        "{e}"
    );

    let version = dir.path().join("v2.arrow");
    write_odd(&version, |_, _, m| {
        m.insert("version".into(), "2".into());
    });
    let e = format!("{:#}", read_shard(&version).unwrap_err());
    assert!(e.contains("v2.arrow") && e.contains("version \"2\""), "{e}");

    let foreign = dir.path().join("foreign.arrow");
    write_odd(&foreign, |_, _, m| {
        m.remove("format");
    });
    let e = format!("{:#}", read_shard(&foreign).unwrap_err());
    assert!(e.contains("foreign.arrow") && e.contains("format"), "{e}");

    let length = dir.path().join("length.arrow");
    write_odd(&length, |_, c, _| {
        c[2] = Arc::new(Int32Array::from(vec![4]));
    });
    let e = format!("{:#}", read_shard(&length).unwrap_err());
    assert!(
        e.contains("length.arrow") && e.contains("row 0") && e.contains("`length` is 4"),
        "{e}"
    );

    let typed = dir.path().join("typed.arrow");
    write_odd(&typed, |f, c, _| {
        f[5] = Field::new("sentence_order_label", DataType::Int32, false);
        c[5] = Arc::new(Int32Array::from(vec![0]));
    });
    let e = format!("{:#}", read_shard(&typed).unwrap_err());
    assert!(
        e.contains("typed.arrow") && e.contains("`sentence_order_label` has type Int32"),
        "{e}"
    );

    let truncated = dir.path().join("truncated.arrow");
    std::fs::write(&truncated, b"ARROW1\0\0garbage").unwrap();
    let e = format!("{:#}", read_shard(&truncated).unwrap_err());
    assert!(e.contains("truncated.arrow"), "{e}");
}

#[test]
fn a_fifo_or_device_shard_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("shard-00000.arrow");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let e = shard_metadata(&fifo).unwrap_err().to_string();
    assert!(
        e.contains("cannot open shard") && e.contains("shard-00000.arrow: not a regular file"),
        "{e}"
    );
    let e = shard_instances(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a character device"), "{e}");
}

/// Three shards of uneven sizes (7, 7, 3 rows).
pub(crate) fn three_shards(dir: &Path) -> Vec<PathBuf> {
    paths(dir, &write(dir, "t", 7, &corpus(17)))
}

mod batches;
