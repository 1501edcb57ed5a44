//! An HTTP/JSON server for any batch predictor: dynamic batching, bounded queues, Prometheus
//! metrics, graceful shutdown.
//!
//! The crate knows nothing about models: a caller implements [`Model`] (what an input and an
//! output are, what an input costs, how a batch is predicted) and hands it to [`serve`] with a
//! bound listener. The server then answers:
//!
//! - `POST /predict`: one JSON object (one input, one output object) or an array of them (an
//!   array of outputs, in order). Every input is checked ([`Model::check`]) before anything is
//!   queued, so a request is answered whole or refused whole.
//! - `GET /health`, `GET /info` (the model's [`Model::info`] and the server's limits) and
//!   `GET /metrics` (Prometheus/OpenMetrics text).
//!
//! Inputs from concurrent requests are merged into batches (the `batcher` module): a worker
//! takes what is queued, up to [`ServeConfig::max_batch_tokens`], waits for requests still
//! arriving up to [`ServeConfig::max_wait`] (a lone request does not wait), and runs
//! [`Model::predict`] on a blocking thread. Every resource is bounded: the body's size (413),
//! the inputs of one request (413), the inputs queued (503 with `Retry-After`), the requests
//! handled at once (the rest wait for a slot before their body is read, so bodies held stay
//! within `max_concurrency × max_body_bytes`), the connections open (the rest wait in the
//! kernel's backlog) and the time a client takes to send a request (`read_timeout`: a request's
//! head, or the wait for the next one on a kept-alive connection, closes the connection past
//! it; a body past it gets a 408), so that slow or idle clients cannot hold every slot.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;

mod batcher;
mod connections;
mod http;
mod listener;
mod metrics;

/// What the server serves: a predictor of batches of `Input`s.
pub trait Model: Send + Sync + 'static {
    /// One input, as a request's JSON object deserialises.
    type Input: DeserializeOwned + Send + 'static;
    /// One output, serialised as the response's JSON object.
    type Output: Serialize + Send + 'static;

    /// What `/info` shows about the model.
    fn info(&self) -> serde_json::Value;

    /// Whether the model can take `input`: its cost in tokens (what a batch's budget counts), or
    /// why not, a message naming the field (the client gets it in a 400).
    fn check(&self, input: &Self::Input) -> Result<usize, String>;

    /// The outputs for `batch`, one per input and in order. Blocking: it runs on a thread of
    /// its own, never on the server's.
    fn predict(&self, batch: &[Self::Input]) -> anyhow::Result<Vec<Self::Output>>;
}

/// The server's limits and batching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// A batch takes inputs until their tokens (as [`Model::check`] counts them) would pass this.
    /// An input that costs more than this alone is predicted in a batch of its own.
    pub max_batch_tokens: usize,
    /// How long a batch waits, after its first input was queued, for the inputs of requests
    /// still arriving (being read or checked). With none arriving it is predicted at once, so a
    /// lone request never waits for this.
    pub max_wait: Duration,
    /// Inputs queued and not yet taken into a batch; a request that would pass this gets a 503.
    pub max_queue: usize,
    /// The largest request body, in bytes; a larger one gets a 413 (by its `Content-Length`
    /// before a byte of it is read, or as soon as a streamed body passes it).
    pub max_body_bytes: usize,
    /// The most inputs in one request (an array); more gets a 413.
    pub max_inputs: usize,
    /// `/predict` requests handled at once; the rest wait for a slot before their body is read.
    pub max_concurrency: usize,
    /// Connections open at once; more wait in the kernel's backlog until one closes. Each holds
    /// read and write buffers, so this and the limits above bound the server's memory.
    pub max_connections: usize,
    /// Batches predicted at once (each on a blocking thread of its own).
    pub workers: usize,
    /// How long a client may take to send a request's head (and, on a kept-alive connection,
    /// to start the next one) before its connection is closed, and to send the body before the
    /// request gets a 408. Without it a client that never finishes a request would hold a
    /// connection (and, once its head is read, a `max_concurrency` slot) for ever.
    pub read_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_batch_tokens: 8192,
            max_wait: Duration::from_millis(5),
            max_queue: 1024,
            max_body_bytes: 1 << 20,
            max_inputs: 128,
            max_concurrency: 256,
            max_connections: 1024,
            workers: 1,
            read_timeout: Duration::from_secs(30),
        }
    }
}

impl ServeConfig {
    /// Refuses limits the server cannot keep: a zero, or more inputs per request than the queue
    /// holds (such a request could never be queued).
    pub fn validate(&self) -> Result<(), ServeError> {
        let zero = [
            ("max_batch_tokens", self.max_batch_tokens),
            ("max_queue", self.max_queue),
            ("max_body_bytes", self.max_body_bytes),
            ("max_inputs", self.max_inputs),
            ("max_concurrency", self.max_concurrency),
            ("max_connections", self.max_connections),
            ("workers", self.workers),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        if let Some((name, _)) = zero {
            return Err(ServeError::Config(format!("{name} must be at least 1")));
        }
        if self.read_timeout.is_zero() {
            return Err(ServeError::Config(
                "read_timeout must be more than zero".into(),
            ));
        }
        if self.max_inputs > self.max_queue {
            return Err(ServeError::Config(format!(
                "max_inputs ({}) is more than max_queue ({}): such a request could never be queued",
                self.max_inputs, self.max_queue
            )));
        }
        Ok(())
    }

    /// The limits as `/info` shows them.
    pub fn limits(&self) -> serde_json::Value {
        serde_json::json!({
            "max_batch_tokens": self.max_batch_tokens,
            "max_wait_ms": self.max_wait.as_secs_f64() * 1e3,
            "max_queue": self.max_queue,
            "max_body_bytes": self.max_body_bytes,
            "max_inputs": self.max_inputs,
            "max_concurrency": self.max_concurrency,
            "max_connections": self.max_connections,
            "workers": self.workers,
            "read_timeout_s": self.read_timeout.as_secs_f64(),
        })
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A limit it cannot keep.
    #[error("invalid server limits: {0}")]
    Config(String),
    /// The address could not be listened on (in use, not this host's, a privileged port).
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why not.
        source: std::io::Error,
    },
    /// Starting the runtime, installing the signal handlers or accepting connections failed.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    /// A batch worker died (a panic outside the model's `predict`, which is caught).
    #[error("a batch worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// Serves `model` on `listener` until `shutdown` completes; then stops accepting connections,
/// answers every request already received (their queued inputs are predicted) and returns.
/// Must run inside a tokio runtime with its IO and time drivers.
pub async fn serve<M: Model>(
    model: M,
    listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    config.validate()?;
    let metrics = Arc::new(metrics::Metrics::new());
    let model = Arc::new(model);
    let (queue, workers) = batcher::start(model.clone(), &config, metrics.clone());
    let listener = listener::Bounded::new(
        listener,
        config.max_connections,
        metrics.connections.clone(),
    );
    let read_timeout = config.read_timeout;
    let app = http::router(model, queue, metrics, config);
    // The router owns the only senders of the queue: once the server has answered its last
    // request and drops it, the workers see the queue closed and stop.
    connections::serve(listener, app, read_timeout, shutdown).await;
    for worker in workers {
        worker.await?;
    }
    Ok(())
}

/// Serves `model` on `addr` until SIGTERM or SIGINT, on a tokio runtime of its own (for a caller
/// that has none): binds, installs the signal handlers, then tells `bound` the address it
/// listens on (the port chosen when `addr`'s is 0) before the first connection is accepted.
/// Returns the signal that stopped it, once every request received has been answered.
pub fn run<M: Model>(
    model: M,
    addr: SocketAddr,
    config: ServeConfig,
    bound: impl FnOnce(SocketAddr),
) -> Result<Signal, ServeError> {
    config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("serve")
        .build()?;
    runtime.block_on(async move {
        let signal = shutdown_signal()?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        bound(listener.local_addr()?);
        let (tell, told) = tokio::sync::oneshot::channel();
        let stop = async move {
            let signal = signal.await;
            tracing::info!("{signal:?}: no new connections; answering what was received");
            let _ = tell.send(signal);
        };
        serve(model, listener, config, stop).await?;
        // `serve` only returns once the shutdown future has completed.
        Ok(told.await.unwrap_or(Signal::Terminate))
    })
}

/// Which signal asked the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM (what `kill`, systemd and Kubernetes send).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

/// A future that completes on the first SIGTERM or SIGINT. The handlers are installed when this
/// is called, not when the future is first polled, so a signal that comes right after the
/// server says it is listening is not lost. Must be called inside a tokio runtime.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = Signal> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => Signal::Terminate,
            _ = interrupt.recv() => Signal::Interrupt,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_valid() {
        ServeConfig::default().validate().unwrap();
    }

    #[test]
    fn a_zero_limit_is_refused_by_name() {
        let config = ServeConfig {
            workers: 0,
            ..ServeConfig::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("workers must be at least 1"), "{err}");
    }

    #[test]
    fn more_inputs_per_request_than_the_queue_holds_is_refused() {
        let config = ServeConfig {
            max_inputs: 10,
            max_queue: 5,
            ..ServeConfig::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("could never be queued"), "{err}");
    }
}
