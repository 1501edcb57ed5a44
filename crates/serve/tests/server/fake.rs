//! A fake model and a server on 127.0.0.1, port 0.
//!
//! The model "predicts" a text's length in characters. A text `fail` makes its batch fail, a
//! text `panic` makes `predict` panic (`panic in check` makes `check` panic), and a [`Gate`]
//! can hold every batch until the test opens it, so that a test knows what is in flight and
//! what is queued.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pipeline_serve::{Model, ServeConfig, ServeError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What the fake model takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Text {
    pub text: String,
}

/// What it gives.
#[derive(Debug, Serialize)]
pub struct Length {
    pub text: String,
    pub length: usize,
}

/// Holds batches in `predict` until opened; counts the batches that entered.
#[derive(Default)]
pub struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    pub entered: AtomicUsize,
}

impl Gate {
    pub fn closed() -> Arc<Gate> {
        Arc::new(Gate::default())
    }

    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    /// Waits (up to 10 s) until `n` batches have entered `predict`.
    pub async fn entered(&self, n: usize) {
        let start = Instant::now();
        while self.entered.load(Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no batch entered predict"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The fake model.
pub struct Fake {
    pub gate: Option<Arc<Gate>>,
}

impl Model for Fake {
    type Input = Text;
    type Output = Length;

    fn info(&self) -> serde_json::Value {
        serde_json::json!({ "task": "length", "max_chars": 100 })
    }

    fn check(&self, input: &Text) -> Result<usize, String> {
        let chars = input.text.chars().count();
        if input.text == "panic in check" {
            panic!("the fake model's check panics on purpose");
        }
        if input.text.trim().is_empty() {
            return Err("field `text` is empty".into());
        }
        if chars > 100 {
            return Err(format!(
                "field `text` is {chars} characters long; this model takes at most 100"
            ));
        }
        Ok(chars)
    }

    fn predict(&self, batch: &[Text]) -> anyhow::Result<Vec<Length>> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        if batch.iter().any(|t| t.text == "panic") {
            panic!("the fake model panics on purpose");
        }
        if batch.iter().any(|t| t.text == "fail") {
            anyhow::bail!("the fake model fails on purpose");
        }
        Ok(batch
            .iter()
            .map(|t| Length {
                text: t.text.clone(),
                length: t.text.chars().count(),
            })
            .collect())
    }
}

/// A server running on the test's runtime.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Server {
    pub async fn start(model: Fake, config: ServeConfig) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(pipeline_serve::serve(model, listener, config, shutdown));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Asks the server to stop (as a signal would).
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Stops it and waits (up to 10 s) for `serve` to return.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.shutdown();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the server did not stop")
            .expect("the server task panicked")
    }
}

/// An HTTP client that never goes through a proxy.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The value of the sample `name` (with its labels, as the text shows them) in `/metrics`.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
