//! What the report reads from its deps' artifacts: `metrics.json`, `metrics.jsonl` and the
//! run record in `MANIFEST.json`, and what kind of stage each dep is. A dep that cannot be read
//! is a note in the report, never an error: a report of half an experiment is still useful.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use pipeline_engine::DepArtifact;
use pipeline_metrics::{
    BaselineRecord, FinetuneRecord, MAX_LINES_BYTES, MAX_RECORD_BYTES, METRICS, METRICS_JSONL,
    MaskRecord, PretrainRecord, full_record, records,
};
use serde_json::Value;

/// What a dep artifact is: its stage kind as the engine passes it ([`DepArtifact::kind`]), so
/// that a user may name stages as they like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepKind {
    /// The `pretrain` stage (a model and its run).
    Pretrain,
    /// The `finetune` stage (one task, one init, one seed).
    Finetune,
    /// The `baseline` stage (majority, threshold rules, n-gram logistic regressions).
    Baseline,
    /// The `mask` stage (pretraining data).
    Mask,
    /// The `clean` stage (the pretraining corpus): which files it read.
    Clean,
    /// Anything else (a `vocab`, a `cmd` stage): read, never tabulated.
    Other,
}

/// A dep's `metrics.json` parsed once into the record type its stage kind writes.
#[derive(Debug, Clone)]
pub enum Record {
    /// A pretrain dep's record.
    Pretrain(PretrainRecord),
    /// A finetune dep's record.
    Finetune(FinetuneRecord),
    /// A baseline dep's record.
    Baseline(BaselineRecord),
    /// A mask dep's record.
    Mask(MaskRecord),
    /// A clean dep's record.
    Clean(stage_clean::Metrics),
    /// Any other kind: no record the report reads.
    Other,
}

impl Record {
    /// The record of a `kind` dep from its metrics; one that is missing (`Null`) or of a shape
    /// this version cannot read has every field `None` (empty), so that it reads as "not
    /// known", as a missing key does.
    pub fn parse(kind: DepKind, metrics: &Value) -> Record {
        fn read<T: Default + for<'de> serde::Deserialize<'de>>(metrics: &Value) -> T {
            records::read(metrics).unwrap_or_default()
        }
        match kind {
            DepKind::Pretrain => Record::Pretrain(read(metrics)),
            DepKind::Finetune => Record::Finetune(read(metrics)),
            DepKind::Baseline => Record::Baseline(read(metrics)),
            DepKind::Mask => Record::Mask(read(metrics)),
            DepKind::Clean => Record::Clean(read(metrics)),
            DepKind::Other => Record::Other,
        }
    }
}

/// One dep artifact of the report, read once: who it is, where, and what it wrote.
#[derive(Debug, Clone)]
pub struct Dep {
    /// The instance name (`finetune_lcqmc@init=random,seed=2`).
    pub instance: String,
    /// The stage the instance belongs to (`finetune_lcqmc`).
    pub stage: String,
    /// The matrix coordinates that name the instance (`init`, `seed`, …).
    pub coords: BTreeMap<String, Value>,
    /// The artifact directory in the store.
    pub dir: PathBuf,
    /// What the artifact is (see [`DepKind`]).
    pub kind: DepKind,
    /// `metrics.json` as JSON (the figures read its `history`), `Null` when it is missing or
    /// unreadable.
    pub metrics: Value,
    /// `metrics.json` as its stage's record, parsed once from [`Self::metrics`].
    pub record: Record,
    /// `metrics.jsonl`, the lines that parse.
    pub lines: Vec<Value>,
    /// `record.finished` from `MANIFEST.json` (RFC 3339), when there is one.
    pub finished: Option<String>,
}

/// The records a dep of another kind reads as: every field `None`.
static EMPTY: LazyLock<Empty> = LazyLock::new(Empty::default);

#[derive(Default)]
struct Empty {
    pretrain: PretrainRecord,
    finetune: FinetuneRecord,
    baseline: BaselineRecord,
    mask: MaskRecord,
    clean: stage_clean::Metrics,
}

/// `Dep::$name()`: the dep's record when it is of that kind, the empty one otherwise.
macro_rules! record_of {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $ty:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> &$ty {
            match &self.record {
                Record::$variant(r) => r,
                _ => &EMPTY.$name,
            }
        }
    };
}

impl Dep {
    /// A dep named `instance` (`stage@coords`, its coordinates parsed from the name) of `kind`
    /// with these metrics, nowhere on disk: the tests' deps.
    pub fn new(instance: &str, kind: DepKind, metrics: Value) -> Dep {
        let (stage, tail) = instance.split_once('@').unwrap_or((instance, ""));
        let coords = tail
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| {
                let v = serde_json::from_str(v).unwrap_or_else(|_| Value::from(v));
                (k.to_string(), v)
            })
            .collect();
        Dep {
            instance: instance.into(),
            stage: stage.into(),
            coords,
            dir: PathBuf::new(),
            kind,
            record: Record::parse(kind, &metrics),
            metrics,
            lines: Vec::new(),
            finished: None,
        }
    }

    /// Parses [`Self::record`] again after [`Self::metrics`] was edited (tests).
    pub fn reparse(mut self) -> Dep {
        self.record = Record::parse(self.kind, &self.metrics);
        self
    }

    record_of!(
        /// The record of a pretrain dep (every field `None` for a dep of another kind, or a
        /// record this version cannot read).
        pretrain, Pretrain, PretrainRecord
    );
    record_of!(
        /// The record of a finetune dep (every field `None` for another kind).
        finetune, Finetune, FinetuneRecord
    );
    record_of!(
        /// The record of a baseline dep (every field `None` for another kind).
        baseline, Baseline, BaselineRecord
    );
    record_of!(
        /// The record of a mask dep (every field `None` for another kind).
        mask, Mask, MaskRecord
    );
    record_of!(
        /// The record of a clean dep (empty for another kind; see [`stage_clean::Metrics`]).
        clean, Clean, stage_clean::Metrics
    );

    /// The stage's wall time as its metrics.json records it: `wall_seconds` (pretrain,
    /// finetune) or `seconds` (baseline).
    pub fn wall_seconds(&self) -> Option<f64> {
        match &self.record {
            Record::Pretrain(r) => r.wall_seconds,
            Record::Finetune(r) => r.wall_seconds,
            Record::Baseline(r) => r.seconds,
            _ => None,
        }
    }

    /// The device a pretrain or finetune dep ran on.
    pub fn device(&self) -> Option<String> {
        match &self.record {
            Record::Pretrain(r) => r.device.clone(),
            Record::Finetune(r) => r.device.clone(),
            _ => None,
        }
    }

    /// The host's available parallelism where a pretrain, finetune or baseline dep ran.
    pub fn threads(&self) -> Option<u64> {
        match &self.record {
            Record::Pretrain(r) => r.threads,
            Record::Finetune(r) => r.threads,
            Record::Baseline(r) => r.threads,
            _ => None,
        }
    }

    /// The task of a finetune or baseline dep (`lcqmc`, `xnli`, …), lower case.
    pub fn task(&self) -> Option<String> {
        let task = match &self.record {
            Record::Finetune(r) => r.task.as_deref(),
            Record::Baseline(r) => r.task.as_deref(),
            _ => None,
        };
        task.map(str::to_lowercase)
    }

    /// The protocol of a finetune or baseline dep (which files each split read).
    pub fn protocol(&self) -> Option<Value> {
        match &self.record {
            Record::Finetune(r) => r.protocol.as_ref(),
            Record::Baseline(r) => r.protocol.as_ref(),
            _ => None,
        }
        .filter(|p| !p.is_null())
        .cloned()
    }
}

/// `v[a][b]…`, `None` where a key is missing or the value is null.
pub fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    (!cur.is_null()).then_some(cur)
}

impl DepKind {
    /// The kind of a dep from its stage kind (`pretrain`, `finetune`, …). A `cmd` stage (a
    /// user's own script, albert_zh's TensorFlow pretraining say) is what its metrics.json says
    /// it is, by the keys each stage kind's record has, or else what its stage's name begins
    /// with: so that a script writing a pretrain or finetune record is tabulated as one.
    pub fn of(stage_kind: &str, stage: &str, metrics: &Value) -> DepKind {
        match stage_kind {
            "pretrain" => DepKind::Pretrain,
            "finetune" => DepKind::Finetune,
            "baseline" => DepKind::Baseline,
            "mask" => DepKind::Mask,
            "clean" => DepKind::Clean,
            "cmd" => DepKind::of_record(stage, metrics),
            _ => DepKind::Other,
        }
    }

    /// A `cmd` stage's kind, by its record's keys, then by its stage's name.
    fn of_record(stage: &str, metrics: &Value) -> DepKind {
        let has = |key: &str| metrics.get(key).is_some();
        let by_keys = [
            (has("task") && has("baselines"), DepKind::Baseline),
            (has("task") && has("history"), DepKind::Finetune),
            (has("tokens_seen") && has("parameters"), DepKind::Pretrain),
            (has("masked_lm_prob") && has("train"), DepKind::Mask),
            (has("documents_in") && has("formats"), DepKind::Clean),
        ];
        let by_name = [
            ("pretrain", DepKind::Pretrain),
            ("finetune", DepKind::Finetune),
            ("baseline", DepKind::Baseline),
            ("mask", DepKind::Mask),
        ];
        by_keys
            .iter()
            .find(|(yes, _)| *yes)
            .map(|(_, k)| *k)
            .or_else(|| {
                by_name
                    .iter()
                    .find(|(prefix, _)| stage.starts_with(prefix))
                    .map(|(_, k)| *k)
            })
            .unwrap_or(DepKind::Other)
    }
}

/// The text of a dep's file, read bounded (a dep may be a `cmd` stage, whose outputs are
/// anything a shell can write): regular files only (a FIFO would block the open for ever), at
/// most `limit` bytes. A file that is not there is `None` without a note (an artifact without
/// it); one that cannot be read is `None` with a note naming it and why (the limit too).
fn read_text(
    path: &Path,
    limit: u64,
    what: &'static str,
    notes: &mut Vec<String>,
    instance: &str,
) -> Option<String> {
    match pipeline_bounded::read_to_string(path, limit, what) {
        Ok(text) => Some(text),
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            notes.push(format!(
                "{instance}: {}: {}; left out",
                file_name(path),
                e.reason()
            ));
            None
        }
    }
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("?")
}

/// A dep's JSON file (`metrics.json`, `MANIFEST.json`), `Null` when it is missing or cannot be
/// read or parsed (with a note, see [`read_text`]).
fn read_json(
    path: &Path,
    limit: u64,
    what: &'static str,
    notes: &mut Vec<String>,
    instance: &str,
) -> Value {
    let Some(text) = read_text(path, limit, what, notes, instance) else {
        return Value::Null;
    };
    match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!(
                "{instance}: {} is not valid JSON ({e}); left out",
                file_name(path)
            ));
            Value::Null
        }
    }
}

/// A dep's `metrics.jsonl`: the lines that are JSON objects, with a note counting the others.
fn read_lines(d: &DepArtifact, notes: &mut Vec<String>) -> Vec<Value> {
    let path = full_record(&d.dir, METRICS_JSONL);
    let Some(text) = read_text(
        &path,
        MAX_LINES_BYTES,
        "a metrics.jsonl",
        notes,
        &d.instance,
    ) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => lines.push(v),
            _ => bad += 1,
        }
    }
    if bad > 0 {
        notes.push(format!(
            "{}: {bad} line(s) of metrics.jsonl are not JSON objects; skipped",
            d.instance
        ));
    }
    lines
}

/// Reads every dep, sorted by instance name (the engine's order is not part of the contract),
/// its metrics' paths made relative to the workspace `root` ([`crate::portable`]) before its
/// record is parsed.
pub fn load(deps: &[DepArtifact], root: &Path, notes: &mut Vec<String>) -> Vec<Dep> {
    let mut sorted: Vec<&DepArtifact> = deps.iter().collect();
    sorted.sort_by(|a, b| a.instance.cmp(&b.instance));
    let mut out = Vec::new();
    for d in sorted {
        // The full records (timings included) where the artifact has them: the tables' wall
        // times and rates come from there.
        let mut metrics = read_json(
            &full_record(&d.dir, METRICS),
            MAX_RECORD_BYTES,
            "a metrics record",
            notes,
            &d.instance,
        );
        crate::portable::relativize(&mut metrics, root);
        let kind = DepKind::of(&d.kind, &d.stage, &metrics);
        if metrics.is_null()
            && matches!(
                kind,
                DepKind::Pretrain | DepKind::Finetune | DepKind::Baseline
            )
        {
            notes.push(format!(
                "{}: its artifact has no readable metrics.json; left out of the tables",
                d.instance
            ));
        }
        let lines = read_lines(d, notes);
        let manifest = read_json(
            &d.dir.join(pipeline_engine::manifest::MANIFEST),
            pipeline_engine::manifest::MANIFEST_LIMIT,
            "an artifact manifest",
            notes,
            &d.instance,
        );
        let finished = get(&manifest, &["record", "finished"])
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        out.push(Dep {
            instance: d.instance.clone(),
            stage: d.stage.clone(),
            coords: d.coords.clone(),
            dir: d.dir.clone(),
            kind,
            record: Record::parse(kind, &metrics),
            metrics,
            lines,
            finished,
        });
    }
    out
}

/// The span of the deps' finish dates, `2026-11-20` or `2026-11-20 to 2026-11-22`.
pub fn date_span(deps: &[Dep]) -> Option<String> {
    let mut dates: Vec<&str> = deps
        .iter()
        .filter_map(|d| d.finished.as_deref())
        .filter_map(|s| s.get(..10))
        .collect();
    dates.sort_unstable();
    match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a == b => Some(a.to_string()),
        (Some(a), Some(b)) => Some(format!("{a} to {b}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stage_kind_is_its_own_and_a_cmd_stage_is_what_it_wrote() {
        let none = Value::Null;
        assert_eq!(DepKind::of("pretrain", "mine", &none), DepKind::Pretrain);
        assert_eq!(DepKind::of("vocab", "pretrain_x", &none), DepKind::Other);
        let finetune = json!({"task": "lcqmc", "history": []});
        assert_eq!(DepKind::of("cmd", "tf_run", &finetune), DepKind::Finetune);
        assert_eq!(DepKind::of("cmd", "pretrain_tf", &none), DepKind::Pretrain);
        assert_eq!(DepKind::of("cmd", "download", &none), DepKind::Other);
    }
}
