//! `pipeline serve`: a fine-tuned model behind an HTTP/JSON endpoint. The model is loaded once
//! (a [`Predictor`]) and handed to the `pipeline-serve` library, which batches the inputs of
//! concurrent requests, bounds every queue and size, and keeps Prometheus metrics. A request
//! and its answer are the objects `pipeline predict --json` reads and prints, so a client can
//! move between the two without changing a field.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use pipeline_serve::{Model, ServeConfig};
use stage_finetune::api::{Input, Prediction, Predictor};

use crate::global::Global;
use crate::model_source::{ModelSource, model_dir};

/// `pipeline serve`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = "The first line on stdout is the address it listens on \
(`listening on http://127.0.0.1:8080`). SIGTERM or Ctrl-C stops it: no new connections, and \
every request received is answered first. RUST_LOG=pipeline_serve=debug logs each request.

Endpoints: POST /predict (one input object, or an array of them), GET /health, GET /info,
GET /metrics (Prometheus).

Examples:
  pipeline serve --stage finetune_lcqmc
  curl -s localhost:8080/predict -d '{\"text_a\": \"我想买手机\", \"text_b\": \"我要买个手机\"}'
  curl -s localhost:8080/predict -d '[{\"text_a\":\"天晴\",\"text_b\":\"下雨\"},{\"text_a\":\"好\",\"text_b\":\"不错\"}]'
  pipeline serve --stage finetune_chnsenticorp --port 0 --max-batch-tokens 4096 --max-wait-ms 2")]
pub struct ServeArgs {
    #[command(flatten)]
    pub source: ModelSource,
    /// The address to listen on (0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// The port (0: any free one; the first line on stdout says which).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// auto, cpu, flex, tch-cpu or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tokens per row (default 128; 256 for span extraction), as `pipeline predict` takes it.
    #[arg(long)]
    pub max_seq_length: Option<usize>,
    /// A batch takes queued inputs until their tokens would pass this.
    #[arg(long, default_value_t = 8192)]
    pub max_batch_tokens: usize,
    /// How long a batch waits for requests still arriving (being read) after its first input
    /// was queued, in milliseconds; with none arriving it starts at once.
    #[arg(long, default_value_t = 5)]
    pub max_wait_ms: u64,
    /// Inputs queued at most; a request that would pass it gets a 503 with Retry-After.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// The largest request body in bytes; a larger one gets a 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// The most inputs in one request (an array); more gets a 413.
    #[arg(long, default_value_t = 128)]
    pub max_inputs: usize,
    /// Requests handled at once; more wait for a slot before their body is read.
    #[arg(long, default_value_t = 256)]
    pub max_concurrency: usize,
    /// Connections open at once; more wait in the kernel's backlog until one closes.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Batches predicted at once [default: one per core on a CPU, each batch whole on its
    /// core; 1 on a GPU]. With 1 on a CPU, each batch is split across the cores instead.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Seconds a client may take to send a request's head (or to start the next one on a
    /// kept-alive connection) before the connection is closed, and to send its body before it
    /// gets a 408.
    #[arg(long, default_value_t = 30.0)]
    pub read_timeout_s: f64,
}

impl ServeArgs {
    /// The server's settings, with `default_workers` where `--workers` is not given.
    fn config(&self, default_workers: usize) -> ServeConfig {
        ServeConfig {
            max_batch_tokens: self.max_batch_tokens,
            max_wait: Duration::from_millis(self.max_wait_ms),
            max_queue: self.max_queue,
            max_body_bytes: self.max_body_bytes,
            max_inputs: self.max_inputs,
            max_concurrency: self.max_concurrency,
            max_connections: self.max_connections,
            workers: self.workers.unwrap_or(default_workers),
            read_timeout: Duration::try_from_secs_f64(self.read_timeout_s)
                .unwrap_or(Duration::ZERO),
        }
    }
}

/// The fine-tuned model as the server sees it.
struct Served {
    predictor: Predictor,
    /// The cores not running a batch, when batches run whole, one per core (see
    /// [`Served::new`]); `None` when each batch is split across every core.
    idle_cores: Option<IdleCores>,
}

impl Served {
    /// With `workers` batches in flight and as many cores or more, each batch runs whole on a
    /// core of its own. Why: at 16 concurrent clients a single worker's batches are small and
    /// uneven (9 inputs on average, 8 % of them a single input, `/metrics`), and a batch split
    /// across 2 cores leaves one idle for as long as the halves differ (the whole batch, for a
    /// single input) and starts two threads per batch. Measured at `tiny` on 2 cores in
    /// results/bench/serve.md.
    fn new(predictor: Predictor, workers: usize) -> Served {
        let cores = predictor.worker_count();
        let idle_cores = (workers >= 2 && cores >= 2).then(|| IdleCores::new(cores));
        Served {
            predictor,
            idle_cores,
        }
    }
}

/// The worker cores no batch is running on.
struct IdleCores(Mutex<Vec<usize>>);

impl IdleCores {
    /// Cores `0..n`, all idle.
    fn new(n: usize) -> IdleCores {
        IdleCores(Mutex::new((0..n).rev().collect()))
    }

    /// An idle core, held until the guard drops (a batch that panics gives its core back
    /// too); `None` when every core is busy.
    fn take(&self) -> Option<HeldCore<'_>> {
        let core = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        Some(HeldCore { idle: self, core })
    }
}

/// A core taken from [`IdleCores`], given back on drop.
struct HeldCore<'a> {
    idle: &'a IdleCores,
    core: usize,
}

impl Drop for HeldCore<'_> {
    fn drop(&mut self) {
        let mut idle = self.idle.0.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(self.core);
    }
}

impl Model for Served {
    type Input = Input;
    type Output = Prediction;

    fn info(&self) -> serde_json::Value {
        serde_json::to_value(self.predictor.info()).unwrap_or_else(
            |e| serde_json::json!({ "error": format!("could not describe the model: {e}") }),
        )
    }

    fn check(&self, input: &Input) -> Result<usize, String> {
        self.predictor.check(input).map_err(|e| e.to_string())
    }

    fn predict(&self, batch: &[Input]) -> Result<Vec<Prediction>> {
        // More workers than cores: the extra batches split across the cores, as with one.
        let Some(core) = self.idle_cores.as_ref().and_then(IdleCores::take) else {
            return self.predictor.predict(batch);
        };
        self.predictor.predict_on_worker(core.core, batch)
    }
}

/// Serves until SIGTERM or SIGINT; exits 0 once every request received has been answered.
pub fn serve(global: &Global, args: &ServeArgs) -> Result<ExitCode> {
    // Refused before the model is loaded: a bad limit should not cost a load.
    // A mistake on the command line: exit 2, as every other.
    args.config(1).validate().map_err(|e| {
        pipeline_engine::UserError::new(format!(
            "{e}: check the --max-*, --workers and --read-timeout-s flags"
        ))
    })?;
    let dir = model_dir(global, &args.source)?;
    let predictor = Predictor::load(&dir, &args.device, args.max_seq_length)
        .with_context(|| format!("loading the model in {}", dir.display()))?;
    let config = args.config(predictor.worker_count());
    let info = predictor.info();
    let quiet = global.quiet;
    let addr = SocketAddr::new(args.host, args.port);
    let served = Served::new(predictor, config.workers);
    let signal = pipeline_serve::run(served, addr, config, |bound| {
        // A test or a script reads the port from this line, so it is flushed at once.
        println!("listening on http://{bound}");
        let _ = std::io::stdout().flush();
        if !quiet {
            eprintln!(
                "serving {} ({} model, {}) on http://{bound}: POST /predict, GET /health /info /metrics",
                info.model.display(),
                info.task,
                info.device
            );
        }
    })?;
    if !quiet {
        eprintln!("stopped ({signal:?}): every request received was answered");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    #[test]
    fn the_flags_default_to_the_librarys_limits() {
        let cli = Cli::parse_from(["serve", "--model", "m"]);
        assert_eq!(cli.args.config(1), ServeConfig::default());
        // Unless given, one worker per core of the loaded model's device.
        assert_eq!(cli.args.config(2).workers, 2);
        let given = Cli::parse_from(["serve", "--model", "m", "--workers", "3"]);
        assert_eq!(given.args.config(2).workers, 3);
        assert_eq!(cli.args.host.to_string(), "127.0.0.1");
        assert_eq!(cli.args.port, 8080);
    }

    #[test]
    fn a_flag_reaches_the_server_config() {
        let cli = Cli::parse_from([
            "serve",
            "--stage",
            "s",
            "--max-wait-ms",
            "2",
            "--max-inputs",
            "8",
        ]);
        let config = cli.args.config(1);
        assert_eq!(config.max_wait, Duration::from_millis(2));
        assert_eq!(config.max_inputs, 8);
    }

    #[test]
    fn each_core_is_held_by_one_batch_at_a_time_and_given_back_even_on_a_panic() {
        let idle = IdleCores::new(2);
        let (a, b) = (idle.take().unwrap(), idle.take().unwrap());
        assert_eq!((a.core, b.core), (0, 1));
        assert!(idle.take().is_none(), "both cores are busy");
        drop(a);
        assert_eq!(idle.take().map(|c| c.core), Some(0));
        drop(b);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = idle.take().unwrap();
            panic!("a batch failed");
        }));
        assert!(panicked.is_err());
        let mut cores: Vec<usize> = [idle.take(), idle.take()]
            .iter()
            .flatten()
            .map(|c| c.core)
            .collect();
        cores.sort();
        assert_eq!(cores, [0, 1], "the panicking batch's core came back");
    }

    #[test]
    fn the_read_timeout_is_in_seconds_and_a_negative_one_is_refused() {
        let parse =
            |v: &str| Cli::parse_from(["serve", "--model", "m", &format!("--read-timeout-s={v}")]);
        assert_eq!(
            parse("2.5").args.config(1).read_timeout,
            Duration::from_millis(2500)
        );
        let error = parse("-1").args.config(1).validate().unwrap_err();
        assert!(error.to_string().contains("read_timeout"), "{error}");
    }
}
