//! An HTTP/JSON server for any batch predictor: dynamic batching, bounded queues, Prometheus metrics, graceful shutdown.
