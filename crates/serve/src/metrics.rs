//! The server's Prometheus metrics, kept with the Prometheus project's `prometheus-client` and
//! exposed by `GET /metrics` in the OpenMetrics text format:
//!
//! - `pipeline_serve_requests_total{endpoint, status}`: every request answered;
//! - `pipeline_serve_request_duration_seconds`: `/predict`'s latency, headers read to response;
//! - `pipeline_serve_batch_inputs`, `pipeline_serve_batch_tokens`: each batch's size;
//! - `pipeline_serve_predict_duration_seconds`: the model's time per batch;
//! - `pipeline_serve_connections`: connections open;
//! - `pipeline_serve_queue_depth`: inputs received and waiting for the model (queued, or in a
//!   batch still being collected).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The endpoint label of a request to `path`: anything but the four routes is `other`, so that
/// a client cannot grow the label set with made-up paths.
pub(crate) fn endpoint(path: &str) -> &'static str {
    match path {
        "/predict" => PREDICT,
        "/health" => "health",
        "/info" => "info",
        "/metrics" => "metrics",
        _ => "other",
    }
}

const PREDICT: &str = "predict";

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: u16,
}

/// Every metric, registered once.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Histogram,
    batch_inputs: Histogram,
    batch_tokens: Histogram,
    predict_seconds: Histogram,
    pub(crate) queue_depth: Gauge,
    pub(crate) connections: Gauge,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("pipeline_serve");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by endpoint and HTTP status",
            requests.clone(),
        );
        // 1 ms to 16 s: a tiny model answers in milliseconds, a queue under load in seconds.
        let latency = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "request_duration_seconds",
            "Latency of /predict requests, from its headers read to its response written",
            latency.clone(),
        );
        let batch_inputs = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        registry.register(
            "batch_inputs",
            "Inputs per batch predicted",
            batch_inputs.clone(),
        );
        let batch_tokens = Histogram::new(exponential_buckets(16.0, 2.0, 12));
        registry.register(
            "batch_tokens",
            "Tokens per batch predicted, as the model counts an input's cost",
            batch_tokens.clone(),
        );
        let predict_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "predict_duration_seconds",
            "The model's time per batch",
            predict_seconds.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "queue_depth",
            "Inputs received and waiting for the model: queued, or in a batch still being collected",
            queue_depth.clone(),
        );
        let connections = Gauge::default();
        registry.register("connections", "Connections open", connections.clone());
        Metrics {
            registry,
            requests,
            latency,
            batch_inputs,
            batch_tokens,
            predict_seconds,
            queue_depth,
            connections,
        }
    }

    /// One request answered.
    pub(crate) fn request(&self, endpoint: &'static str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels { endpoint, status })
            .inc();
        if endpoint == PREDICT {
            self.latency.observe(elapsed.as_secs_f64());
        }
    }

    /// One batch taken from the queue.
    pub(crate) fn batch(&self, inputs: usize, tokens: usize) {
        self.batch_inputs.observe(inputs as f64);
        self.batch_tokens.observe(tokens as f64);
    }

    /// One batch predicted (or failed).
    pub(crate) fn predicted(&self, elapsed: Duration) {
        self.predict_seconds.observe(elapsed.as_secs_f64());
    }

    /// The exposition text.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail; the encoder's error type is fmt::Error.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!("could not encode the metrics: {e}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_every_metric_with_its_labels() {
        let metrics = Metrics::new();
        metrics.request(endpoint("/predict"), 200, Duration::from_millis(3));
        metrics.request(endpoint("/nope"), 404, Duration::from_millis(1));
        metrics.batch(3, 40);
        metrics.predicted(Duration::from_millis(2));
        metrics.queue_depth.set(5);
        let text = metrics.encode();
        for line in [
            "pipeline_serve_requests_total{endpoint=\"predict\",status=\"200\"} 1",
            "pipeline_serve_requests_total{endpoint=\"other\",status=\"404\"} 1",
            "pipeline_serve_request_duration_seconds_count 1",
            "pipeline_serve_batch_inputs_sum 3.0",
            "pipeline_serve_batch_tokens_sum 40.0",
            "pipeline_serve_predict_duration_seconds_count 1",
            "pipeline_serve_queue_depth 5",
            "# EOF",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }
}
