//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::commands::dag::DagFormat;
use crate::global::Global;
use crate::model::ModelSource;

const EXAMPLES: &str = "\
Examples:
  pipeline run                      run every stage that is not up to date
  pipeline run mask --dry-run       what would run for `mask`, and why
  pipeline run --set data=../shared/datasets
  pipeline run train --set train.lr=2e-4 --force
  pipeline status                   fresh or stale, and why, for each stage
  pipeline show train --json        params, inputs, outputs, metrics of the latest run
  pipeline metrics                  every stage's metrics.json across runs
  pipeline exp show pretrain        the pretrain instances side by side: params that differ, metrics
  pipeline diff pretrain~1 pretrain what changed between pretrain's last two artifacts
  pipeline plot pretrain --metric eval_mlm_accuracy   the curves overlaid in eval_mlm_accuracy.svg

State lives in .pipeline/ beside pipeline.yaml; `pipeline gc` trims it.";

/// A declarative, cached experiment pipeline (built for ALBERT pretraining and fine-tuning).
///
/// `pipeline.yaml` declares stages, their deps, inputs and params. `pipeline run` executes
/// only the stages whose kind, code, params, inputs or deps' outputs changed since they last
/// ran; everything else is served from the artifact cache in `.pipeline/`.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, after_help = EXAMPLES, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the targets (stage or instance names) and what they need; all stages if none.
    Run(crate::commands::run::RunArgs),
    /// Say for each stage whether it is fresh, and if not, why. Works during a run.
    Status {
        /// Only these stages and what they need.
        targets: Vec<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: crate::remote::StatusRemote,
    },
    /// Print the DAG of stage instances.
    Dag {
        #[arg(long, value_enum, default_value_t = DagFormat::Text)]
        format: DagFormat,
        #[arg(long)]
        json: bool,
    },
    /// Params, inputs, outputs, metrics, timings and log path of an instance's latest run.
    Show {
        /// A stage name (if it has one instance) or an instance name (`train@lr=0.1`).
        stage: String,
        #[arg(long)]
        json: bool,
    },
    /// The history of `pipeline run`, newest first.
    Runs {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// A table of each stage instance's metrics.json across runs.
    Metrics {
        /// Only these stages (or instances).
        stages: Vec<String>,
        /// Only the artifact each instance produced last.
        #[arg(long)]
        latest: bool,
        #[arg(long)]
        json: bool,
    },
    /// Compare experiments: `exp show`, a table of instances (or runs) with the params that
    /// differ and their metrics.
    #[command(subcommand)]
    Exp(crate::exp::ExpCommand),
    /// What differs between two artifacts (two instances, or one at two runs): params, inputs,
    /// code version, deps, outputs, and metrics with their deltas.
    Diff(crate::diff::DiffArgs),
    /// Overlay one metric's curves (from metrics.jsonl) of several instances in one SVG.
    Plot(crate::plot::PlotArgs),
    /// Remove artifacts that nothing references (old fingerprints, removed stages); with
    /// --remote, trim the remote store instead.
    Gc {
        /// List what would be removed without removing it.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: crate::remote::GcRemote,
    },
    /// Upload the targets' artifacts (all in the local store if none) to a remote store.
    Push(crate::remote::TransferArgs),
    /// Bring the targets' artifacts at the current fingerprints from a remote store.
    Pull(crate::remote::TransferArgs),
    /// Re-hash every artifact; move corrupt ones to .pipeline/quarantine (exit 1 if any).
    Verify {
        #[arg(long)]
        json: bool,
    },
    /// Look at a model directory (a pretrain or finetune artifact, or a Hugging Face ALBERT
    /// checkpoint): its outputs on given ids, or its config and size.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Predict with a fine-tuned model (a `finetune` stage's artifact): classify a pair or a
    /// text, tag a text, answer a question from a context (span extraction), or pick a choice
    /// (C3); one example on the command line or a file of them.
    Predict(PredictArgs),
    /// Serve a fine-tuned model over HTTP/JSON: the inputs and outputs of `predict --json`,
    /// requests batched together, every queue and size bounded, Prometheus metrics.
    Serve(crate::serve::ServeArgs),
    /// Measure training or inference throughput on synthetic batches of a fixed shape
    /// (compare with `benches/hf_baseline.py`).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run one stage instance from the spec `pipeline run` wrote (what a cluster job runs);
    /// exit 0 when it succeeded. Not meant to be typed.
    #[command(name = "run-instance", hide = true)]
    RunInstance {
        #[arg(value_name = "SPEC.json")]
        spec: PathBuf,
    },
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pipeline predict --stage finetune_lcqmc \"我喜欢妈妈做的汤\" \"妈妈做的汤我很喜欢喝\"
  pipeline predict --model DIR --input pairs.tsv --output predictions.tsv
  pipeline predict --stage 'finetune_xnli@init=pretrained,share_type=all' --input test.tsv --header --json
  pipeline predict --stage finetune_cmrc2018 --question \"周杰毕业于哪所大学？\" --context \"2005年，周杰毕业于浙江大学。\"
  pipeline predict --stage finetune_cmrc2018 --input cmrc2018/dev.json --json
  pipeline predict --stage finetune_c3 --context \"男：你去哪儿？女：去医院。\" --question \"女的去哪儿？\" --choice 医院 --choice 车站")]
pub struct PredictArgs {
    #[command(flatten)]
    pub source: ModelSource,
    /// text_a and text_b of one pair (one text for a single-text classifier or a tagger).
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// Span extraction and C3: the question.
    #[arg(long, value_name = "Q")]
    pub question: Option<String>,
    /// Span extraction and C3: the context (the passage, or the dialogue's lines joined).
    #[arg(long, value_name = "C")]
    pub context: Option<String>,
    /// C3: one choice (repeat for each, 2 to 4, in order).
    #[arg(long = "choice", value_name = "TEXT")]
    pub choices: Vec<String>,
    /// A file of examples: a TSV of pairs (text_a, text_b, optionally a gold label; accuracy
    /// is then printed), of texts, or of texts to tag; SQuAD v1 JSON for a span model (EM and
    /// F1 printed where it has answers); C3 JSON for a C3 model. `-` reads a TSV or text file
    /// from standard input. At most 1 GiB, 16 MiB a line, 2,000,000 lines.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Where to write the predictions for --input (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The input's first line is a header.
    #[arg(long)]
    pub header: bool,
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Tokens per row (default 128; 256 for span extraction, the window's length, with the
    /// question cut to a quarter of it and windows overlapping by up to 64 tokens).
    #[arg(long)]
    pub max_seq_length: Option<usize>,
    /// auto, cpu, flex, tch-cpu or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// JSON output (one object; one per line for --input).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Run AlbertForPreTraining on token ids: IN.json has `input_ids` (and optionally
    /// `token_type_ids`, `attention_mask`) as lists of lists of ints; OUT.json gets
    /// `prediction_logits` (batch × seq × vocab), `sop_logits` (batch × 2),
    /// `last_hidden_state` and `pooler_output`, as transformers names them.
    Forward {
        #[command(flatten)]
        source: ModelSource,
        #[arg(long, value_name = "IN.json")]
        input: PathBuf,
        #[arg(long, value_name = "OUT.json")]
        output: PathBuf,
        /// auto, cpu, flex, tch-cpu or cuda:N.
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// The config, parameter count and size of a model.
    Info {
        #[command(flatten)]
        source: ModelSource,
        #[arg(long)]
        json: bool,
    },
    /// Import a TensorFlow 1 checkpoint (google-research/albert's or brightmart/albert_zh's,
    /// with albert_config*.json and vocab.txt beside it, as they ship) into a model directory:
    /// config.json, model.safetensors, vocab.txt, tokenizer.json. No TensorFlow needed.
    #[command(after_help = "Examples:
  pipeline model import --from albert_tiny_zh/ --out models/albert_tiny_zh
  pipeline model import --from ckpt/model.ckpt-125000 --config albert_config.json --out models/mine")]
    Import {
        /// The checkpoint: a directory with a `checkpoint` file, a prefix
        /// (…/model.ckpt-125000) or its .index file.
        #[arg(long, value_name = "CKPT")]
        from: PathBuf,
        /// The new model directory (must not exist, or be empty).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The model config (default: albert_config*.json beside the checkpoint).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The vocabulary (default: vocab.txt beside the checkpoint).
        #[arg(long, value_name = "FILE")]
        vocab: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write a model directory in another format: a TensorFlow 1 checkpoint (`--to tf`) or an
    /// ONNX graph that onnxruntime runs (`--to onnx`).
    Export(crate::export::ExportArgs),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Training steps (forward, backward, LAMB) of AlbertForPreTraining: tokens/s, model
    /// FLOP/s (MFU on a GPU), peak RSS.
    Train(BenchArgs),
    /// AlbertModel forward passes: sentences/s, peak RSS.
    Infer(BenchArgs),
    /// Fine-tuning steps (AdamW) of the span-extraction head (AlbertForQuestionAnswering)
    /// beside the sequence-classification head at the same shapes, alternately: tokens/s of
    /// each and the median of the per-round ratios (--masked is not used).
    Finetune(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// An albert_zh size (tiny, small, base, large, xlarge, xxlarge) or a config JSON.
    #[arg(long, default_value = "tiny")]
    pub model: String,
    /// Override the config's share_type (all, attention, ffn, none).
    #[arg(long)]
    pub share_type: Option<String>,
    /// Override the config's vocab_size.
    #[arg(long)]
    pub vocab_size: Option<usize>,
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    /// Masked positions per row (train only).
    #[arg(long, default_value_t = 20)]
    pub masked: usize,
    /// Steps (or batches) timed per run.
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Timed runs; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// auto, cpu, flex, tch-cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// fp32, or bf16 mixed precision (libtorch devices: cuda:N, tch-cpu).
    #[arg(long, default_value = "fp32")]
    pub precision: String,
    /// The GPU's dense peak in TFLOP/s for MFU (H100/H200 bf16: 989).
    #[arg(long, default_value_t = 989.0)]
    pub peak_tflops: f64,
    /// Infer only: run the batch as one chunk per core in parallel (what `pipeline predict`
    /// does on a CPU).
    #[arg(long)]
    pub split: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}
