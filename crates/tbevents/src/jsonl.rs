//! The bridge from `metrics.jsonl` (one JSON object per logged step or epoch) to events: each
//! line becomes one event at its step, with a scalar per numeric field, tagged with the
//! field's name, so that a curve in TensorBoard and a curve from `pipeline plot` name the same
//! thing.

use std::path::Path;

use serde_json::Value;

use crate::{Error, EventWriter};

/// The largest `metrics.jsonl` turned into events: `pipeline_metrics::MAX_LINES_BYTES`, the
/// bound of every reader of one (about 300 bytes a logged step, so a million steps is 300 MB).
pub const MAX_LINES_BYTES: u64 = 512 << 20;

/// The step (the integer field `step_key`) and scalars (every other finite numeric field, in
/// the line's key order) of one `metrics.jsonl` line; `None` for a line without the step.
pub fn scalars_of_line(line: &Value, step_key: &str) -> Option<(i64, Vec<(String, f32)>)> {
    let obj = line.as_object()?;
    let step = obj.get(step_key)?.as_i64()?;
    let values = obj
        .iter()
        .filter(|(k, _)| k.as_str() != step_key)
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()? as f32)))
        .filter(|(_, v)| v.is_finite())
        .collect();
    Some((step, values))
}

/// Writes the event file `out` from the `metrics.jsonl` at `jsonl`: the artifact's copy. Its
/// bytes are a function of the lines alone: `wall_time` is the line's `elapsed_s` (seconds
/// since the run started; the last one seen for a line without it, 0 before any), not the
/// clock, so the file is as reproducible as `metrics.jsonl` is. TensorBoard's "relative" axis
/// then shows the run's own seconds. Returns the number of events written after the first.
pub fn write_from_jsonl(jsonl: &Path, out: &Path, step_key: &str) -> Result<usize, Error> {
    // Bounded like every metrics.jsonl read (a resumed run's lines came from an earlier
    // process, a `cmd` could have written this one): regular files only, MAX_LINES_BYTES.
    let text = pipeline_bounded::read_to_string(jsonl, MAX_LINES_BYTES, "a metrics.jsonl")
        .map_err(|e| Error::Read(Box::new(e)))?;
    let mut w = EventWriter::create(out, 0.0)?;
    let (mut wall, mut n) = (0.0, 0);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some((step, values)) = scalars_of_line(&v, step_key) else {
            continue;
        };
        if let Some(t) = v.get("elapsed_s").and_then(Value::as_f64) {
            wall = t;
        }
        w.scalars(step, wall, &values)?;
        n += 1;
    }
    Ok(n)
}
