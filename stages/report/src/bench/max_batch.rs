//! The largest training batch a GPU holds, per config, sequence length and precision: ours
//! (`pipeline bench maxbatch`) beside transformers' (`benches/hf_baseline.py maxbatch`), as
//! albert_zh's "max batch size" table has it. Both search the same way (doubling, then
//! halving the gap to a granularity) with two training steps a size, so the optimiser's
//! moments are held.
//!
//! Lines: `{"bench": "maxbatch", model, seq, device, precision, max_batch, first_oom,
//! capped_at, granularity, call?}` (ours) and `{"bench": "hf_maxbatch", config, seq, device,
//! dtype, max_batch, first_oom, capped_at, granularity, attn, call?}` (transformers').

use serde_json::Value;

use super::lines::BenchLine;
use super::rows::{device_class, s, u};
use crate::sizes::round;
use crate::table::{Table, cells};

/// One line of either side.
#[derive(Debug)]
struct Found<'a> {
    ours: bool,
    model: Option<String>,
    seq: Option<u64>,
    device: Option<String>,
    precision: String,
    max_batch: Option<u64>,
    /// `None` where the search reached its cap before running out of memory.
    first_oom: Option<u64>,
    capped_at: Option<u64>,
    granularity: Option<u64>,
    call: Option<u64>,
    source: &'a str,
}

impl Found<'_> {
    /// What must be equal for ours and transformers' to be compared.
    fn key(&self) -> Option<(String, u64, &'static str, String)> {
        Some((
            self.model.clone()?,
            self.seq?,
            device_class(self.device.as_deref()?),
            self.precision.clone(),
        ))
    }
}

/// The table (empty where no line is a max-batch search).
pub fn max_batch(lines: &[BenchLine]) -> Table {
    let mut t = Table::new(
        "max_batch",
        "Largest training batch",
        crate::data::columns("max_batch"),
    );
    let found: Vec<Found> = lines.iter().filter_map(parse).collect();
    let mut order: Vec<&Found> = found.iter().collect();
    order.sort_by_key(|r| (r.key(), !r.ours, r.call));
    for r in order {
        let cap = r
            .first_oom
            .is_none()
            .then_some(r.capped_at)
            .flatten()
            .map(|c| format!("none up to the cap of {c}"));
        t.push(cells! {
            implementation: if r.ours { "ours (pipeline bench maxbatch)" } else { "transformers" },
            model: r.model.clone(),
            device: r.device.clone(),
            precision: r.precision.as_str(),
            seq: r.seq,
            max_batch: r.max_batch,
            first_oom: cap.or(r.first_oom.map(|b| b.to_string())),
            granularity: r.granularity,
            vs_transformers: ratio(r, &found),
            source: r.source,
        });
    }
    if !t.rows.is_empty() {
        t.notes.push(crate::data::text("max_batch.note").into());
    }
    t
}

/// A max-batch line of either side, or `None` for any other line.
fn parse(line: &BenchLine) -> Option<Found<'_>> {
    let v: &Value = &line.value;
    // A line of gpu.sh saying a search failed holds no figure; the log says why.
    if v.get("error").is_some() {
        return None;
    }
    let ours = match s(v, "bench").as_deref() {
        Some("maxbatch") => true,
        Some("hf_maxbatch") => false,
        _ => return None,
    };
    let (model, precision) = if ours {
        (s(v, "model"), s(v, "precision"))
    } else {
        (s(v, "config"), s(v, "dtype"))
    };
    Some(Found {
        ours,
        model,
        seq: u(v, "seq"),
        device: s(v, "device"),
        precision: precision.unwrap_or_else(|| "fp32".into()),
        max_batch: u(v, "max_batch"),
        first_oom: u(v, "first_oom"),
        capped_at: u(v, "capped_at"),
        granularity: u(v, "granularity"),
        call: u(v, "call"),
        source: &line.source,
    })
}

/// Ours ÷ transformers' largest batch for the same model, length, device class and
/// precision (in the same call of `benches/gpu.sh` where the lines say which); none where
/// either side reached its cap, since the cap then bounds the ratio, not the memory.
fn ratio(r: &Found, all: &[Found]) -> Option<f64> {
    if !r.ours || r.first_oom.is_none() {
        return None;
    }
    let key = r.key()?;
    let theirs = all.iter().find(|o| {
        !o.ours && o.key().as_ref() == Some(&key) && (r.call.is_none() || o.call == r.call)
    })?;
    theirs.first_oom?;
    let (ours, theirs) = (r.max_batch? as f64, theirs.max_batch? as f64);
    (theirs > 0.0).then(|| round(ours / theirs, 2))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(v: Value) -> BenchLine {
        BenchLine {
            source: "results/bench/gpu.jsonl:1".into(),
            value: v,
        }
    }

    #[test]
    fn ours_is_set_beside_transformers_for_the_same_model_length_and_precision() {
        let lines = vec![
            line(
                json!({"bench": "maxbatch", "model": "base", "seq": 512, "device": "cuda:0",
                "precision": "bf16", "max_batch": 300, "first_oom": 512, "capped_at": null,
                "granularity": 8, "call": 1}),
            ),
            line(
                json!({"bench": "hf_maxbatch", "config": "base", "seq": 512, "device": "cuda",
                "dtype": "bf16", "max_batch": 200, "first_oom": 256, "capped_at": null,
                "granularity": 8, "call": 1}),
            ),
            // Another precision: not compared with the bf16 rows.
            line(
                json!({"bench": "hf_maxbatch", "config": "base", "seq": 512, "device": "cuda",
                "dtype": "fp32", "max_batch": 100, "first_oom": 128, "granularity": 8,
                "call": 1}),
            ),
            // Capped: the cap, not the memory, bounds it.
            line(
                json!({"bench": "maxbatch", "model": "tiny", "seq": 32, "device": "tch-cpu",
                "precision": "fp32", "max_batch": 8, "first_oom": null, "capped_at": 8,
                "granularity": 1}),
            ),
            line(json!({"bench": "train", "model": "base", "tokens_per_s": 1.0})),
            line(json!({"bench": "hf_maxbatch", "model": "base", "seq": 128,
                "error": "failed, see the log", "call": 0})),
        ];
        let t = max_batch(&lines);
        let j = t.json(serde_json::Map::new()).unwrap();
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4, "{j}");
        let ours_base = rows
            .iter()
            .find(|r| r["model"] == "base" && r["implementation"] != "transformers")
            .unwrap();
        assert_eq!(ours_base["vs_transformers"], json!(1.5));
        let tiny = rows.iter().find(|r| r["model"] == "tiny").unwrap();
        assert_eq!(tiny["vs_transformers"], Value::Null);
        assert_eq!(tiny["first_oom"], "none up to the cap of 8");
        assert_eq!(t.notes.len(), 1);
        assert!(max_batch(&lines[4..]).rows.is_empty());
    }
}
