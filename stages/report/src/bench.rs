//! Table 4: throughput, and the largest training batch. Data preparation instances/s, training tokens/s and inference
//! sentences/s, from the benchmark outputs (`*.jsonl` under the bench folder: `pipeline bench
//! train|infer --json`, `benches/hf_baseline.py train|infer`) and from our pipeline runs
//! themselves; ours beside transformers' where both measured the same shape.
//!
//! Line formats (one JSON object a line; see docs/metrics.md):
//! - `{"bench": "train", model, share_type, device, precision, batch, seq, threads,
//!   tokens_per_s, mfu, model_tflops_per_s, isa?, isa_host?, …}` and `{"bench": "infer", model,
//!   device, batch, seq, threads, sentences_per_s, isa?, isa_host?, …}`: ours (`pipeline
//!   bench`); `isa` (CPU rows) is the vector level our kernels ran with, shown as a column;
//! - `{"bench": "hf_train", config, device, dtype, batch, seq, threads, tokens_per_s,
//!   model_tflops_per_s, mfu?, …}` and `{"bench": "hf_infer", config, device, dtype, batch,
//!   seq, threads, sentences_per_s, …}`: transformers (`benches/hf_baseline.py`);
//! - `{"bench": "maxbatch", …}` (ours, `pipeline bench maxbatch`) and `{"bench":
//!   "hf_maxbatch", …}` (transformers'): the largest batch that fits, memory rather than
//!   throughput, in a table of their own ([`max_batch`](mod@max_batch));
//! - any line with `instances_per_s` is data preparation (`{"bench": "mask", instances_per_s,
//!   threads, …}` ours; `"bench": "albert_zh_mask"` albert_zh's create_pretraining_data.py);
//! - `{"bench": "cpu_compare", what, model, batch, seq, threads, ours, transformers,
//!   ratio_median, rounds, …}`: ours and transformers run alternately by
//!   `benches/cpu_compare.py`, whose per-round lines (they carry `round` and `arm`) are left
//!   out; the ratio shown is the median of the per-round ratios, the only ratio that holds
//!   on a machine whose speed drifts.
//!
//! The work is in three steps: [`lines`] reads the files into [`BenchLine`]s, [`rows`] turns
//! each line (and each of our stage runs) into a row, [`throughput`](mod@throughput) orders
//! the rows into the table.

mod lines;
mod max_batch;
mod rows;
mod throughput;

pub use lines::{BenchLine, list, read};
pub use max_batch::max_batch;
pub use throughput::throughput;
