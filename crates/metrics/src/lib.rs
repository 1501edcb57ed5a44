//! A stage's metrics, split so that its artifact is a function of its inputs, params, code and
//! seed: the digested `metrics.json` / `metrics.jsonl` hold the record without timings and host
//! facts ([`TIMING_KEYS`], at any depth), and the full record, timings included, goes to the
//! artifact's log directory ([`LOG_DIR`], which the output digest leaves out). Readers (`pipeline metrics`, `show`, the report) read the full record when it is
//! there and the digested one otherwise (an artifact pulled from a remote without its logs), so
//! they see what a stage wrote; two runs of the same instance write the same digested bytes, and
//! the cache can cut off below a re-run stage.
//!
//! A crate of its own rather than a module of the engine: the stages that write with it count
//! it in their code version (the engine is left out of it), so a change to what is digested
//! re-runs them.

#![warn(missing_docs)]

pub mod records;

pub use records::{
    BaselineEntry, BaselineRecord, FinetuneRecord, MaskRecord, MaskSplitRecord, PretrainRecord,
    PretrainingPoint, SopTrend,
};

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// An artifact's log directory: the stage's logs and its full metrics. The engine keeps it out
/// of the output digest.
pub const LOG_DIR: &str = ".log";

/// The digested metrics file of an artifact.
pub const METRICS: &str = "metrics.json";
/// The digested per-step or per-epoch lines of an artifact.
pub const METRICS_JSONL: &str = "metrics.jsonl";

/// Keys that record how long something took or what host ran it, not what was computed: the
/// wall-clock seconds and rates of pretrain, finetune and baseline, the lines' `elapsed_s`, the
/// thread count and whether the run resumed. Dropped from the digested files wherever they
/// occur (objects nested in objects and lists included).
pub const TIMING_KEYS: &[&str] = &[
    "seconds",
    "wall_seconds",
    "train_seconds",
    "eval_seconds",
    "checkpoint_seconds",
    "time_split",
    "elapsed_s",
    "tokens_per_s",
    "padded_tokens_per_s",
    "model_tflops_per_s",
    "train_examples_per_s",
    "train_tokens_per_s",
    "eval_sentences_per_s",
    "threads",
    "resumed_from_step",
];

/// `v` without the [`TIMING_KEYS`], at any depth.
pub fn without_timings(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !TIMING_KEYS.contains(&k.as_str()))
                .map(|(k, x)| (k.clone(), without_timings(x)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_timings).collect()),
        other => other.clone(),
    }
}

/// Writes `metrics` as `out_dir/metrics.json` without its timings and whole as
/// `log_dir/metrics.json` (pretty-printed, one trailing newline, as every stage wrote it).
pub fn write_metrics(out_dir: &Path, log_dir: &Path, metrics: &Value) -> std::io::Result<()> {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).map(|s| s + "\n");
    std::fs::write(out_dir.join(METRICS), pretty(&without_timings(metrics))?)?;
    std::fs::create_dir_all(log_dir)?;
    std::fs::write(log_dir.join(METRICS), pretty(metrics)?)
}

/// Writes `lines` as `out_dir/metrics.jsonl` without their timings and whole as
/// `log_dir/metrics.jsonl`, one JSON object per line.
pub fn write_metrics_jsonl(out_dir: &Path, log_dir: &Path, lines: &[Value]) -> std::io::Result<()> {
    let digested: String = lines
        .iter()
        .map(|l| format!("{}\n", without_timings(l)))
        .collect();
    let full: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(out_dir.join(METRICS_JSONL), digested)?;
    std::fs::create_dir_all(log_dir)?;
    std::fs::write(log_dir.join(METRICS_JSONL), full)
}

/// The file to read an artifact's `name` (`metrics.json` or `metrics.jsonl`) from: the full
/// record in its log directory when there, else the digested file.
pub fn full_record(artifact: &Path, name: &str) -> PathBuf {
    let full = artifact.join(LOG_DIR).join(name);
    if full.is_file() {
        full
    } else {
        artifact.join(name)
    }
}

/// The largest `metrics.json` (or snapshot record) read. A finetune record with its history
/// and evaluation of every set is tens of KB, the largest (the report's, with every table) a
/// few MB; 64 MiB leaves room for that many times more while keeping a planted or still-growing
/// file from being read without end.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// The largest `metrics.jsonl` read: one line per logged step or epoch, about 300 bytes, so a
/// million-step pretraining logged at every step is about 300 MB.
pub const MAX_LINES_BYTES: u64 = 512 << 20;

/// Why a metrics record was not read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read: missing, not a regular file (a FIFO, a device), larger than
    /// the limit, or not UTF-8. The message names the file (and the limit).
    #[error(transparent)]
    Read(#[from] pipeline_bounded::ReadError),
    /// The file is not JSON of the record's type.
    #[error("{}:{}:{}: {error}", path.display(), error.line(), error.column())]
    Json {
        /// The file.
        path: PathBuf,
        /// serde's reason, with its line and column.
        error: serde_json::Error,
    },
}

impl RecordError {
    /// Whether the file was not there (an artifact without this record), not an error.
    pub fn is_not_found(&self) -> bool {
        matches!(self, RecordError::Read(e) if e.is_not_found())
    }
}

/// The text of the record `path` (a `metrics.json` or a snapshot's record), read with the
/// shared bounded reader: regular files only, at most [`MAX_RECORD_BYTES`].
pub fn read_record_text(path: &Path) -> Result<String, RecordError> {
    Ok(pipeline_bounded::read_to_string(
        path,
        MAX_RECORD_BYTES,
        "a metrics record",
    )?)
}

/// The text of the `metrics.jsonl` `path`, read with the shared bounded reader: regular files
/// only, at most [`MAX_LINES_BYTES`].
pub fn read_lines_text(path: &Path) -> Result<String, RecordError> {
    Ok(pipeline_bounded::read_to_string(
        path,
        MAX_LINES_BYTES,
        "a metrics.jsonl",
    )?)
}

/// The record `path` parsed as `T` (a [`serde_json::Value`], or one of [`records`]' types),
/// read as [`read_record_text`] reads it.
pub fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, RecordError> {
    let text = read_record_text(path)?;
    serde_json::from_str(&text).map_err(|error| RecordError::Json {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timings_leave_the_digested_file_at_any_depth_and_stay_in_the_full_one() {
        let m = json!({"task": "lcqmc", "wall_seconds": 3.5, "threads": 2,
                       "history": [{"epoch": 1, "seconds": 1.0, "train_loss": 0.5}],
                       "time_split": {"train": 0.9}, "eval": {"test": {"accuracy": 0.7}}});
        assert_eq!(
            without_timings(&m),
            json!({"task": "lcqmc", "history": [{"epoch": 1, "train_loss": 0.5}],
                   "eval": {"test": {"accuracy": 0.7}}})
        );
        let dir = tempfile::tempdir().unwrap();
        let (out, log) = (dir.path().join("out"), dir.path().join("out").join(LOG_DIR));
        std::fs::create_dir_all(&out).unwrap();
        write_metrics(&out, &log, &m).unwrap();
        let read = |p: &Path| -> Value {
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        assert_eq!(read(&full_record(&out, METRICS)), m);
        assert_eq!(read(&out.join(METRICS)), without_timings(&m));
        let lines = [json!({"step": 1, "loss": 2.0, "elapsed_s": 0.4, "tokens_per_s": 9.0})];
        write_metrics_jsonl(&out, &log, &lines).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join(METRICS_JSONL)).unwrap(),
            "{\"loss\":2.0,\"step\":1}\n"
        );
        assert_eq!(read(&full_record(&out, METRICS_JSONL)), lines[0]);
        // Without the log directory (an artifact pulled without its logs): the digested file.
        std::fs::remove_dir_all(&log).unwrap();
        assert_eq!(full_record(&out, METRICS), out.join(METRICS));
    }

    #[test]
    fn records_are_read_bounded_and_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(METRICS);
        std::fs::write(&path, "{\"steps\": 3}").unwrap();
        let v: Value = read_record(&path).unwrap();
        assert_eq!(v["steps"], 3);
        // Sparse: a 100 MB record is refused after reading one byte past the limit.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(100 << 20)
            .unwrap();
        let e = read_record::<Value>(&path).unwrap_err().to_string();
        assert!(
            e.contains("metrics.json") && e.contains("larger than 64 MiB"),
            "{e}"
        );
        std::fs::write(&path, "{nope").unwrap();
        let e = read_record::<Value>(&path).unwrap_err().to_string();
        assert!(e.contains("metrics.json:1:2"), "{e}");
        let missing = read_record::<Value>(&dir.path().join("none.json")).unwrap_err();
        assert!(missing.is_not_found());
        let e = read_lines_text(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
