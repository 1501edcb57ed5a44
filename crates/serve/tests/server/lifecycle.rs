//! The queue's bound, batching across requests and graceful shutdown, each made deterministic
//! by a [`Gate`] that holds the model's batches.

use std::time::{Duration, Instant};

use pipeline_serve::ServeConfig;
use reqwest::StatusCode;
use serde_json::json;

use crate::api::metrics;
use crate::fake::{Fake, Gate, Server, client, sample};

/// Waits (up to 10 s) until `/metrics` shows `depth` inputs queued.
async fn queued(server: &Server, depth: usize) {
    let start = Instant::now();
    loop {
        let text = metrics(server).await;
        if sample(&text, "pipeline_serve_queue_depth") == Some(depth as f64) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never {depth} queued:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts a request of `texts` in the background.
fn request(
    server: &Server,
    texts: &[&str],
) -> tokio::task::JoinHandle<(StatusCode, serde_json::Value)> {
    let url = server.url("/predict");
    let body: Vec<_> = texts.iter().map(|t| json!({ "text": t })).collect();
    let body = serde_json::to_string(&body).unwrap();
    tokio::spawn(async move {
        let response = client().post(url).body(body).send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_a_503_with_retry_after_and_the_rest_is_answered() {
    let gate = Gate::closed();
    let config = ServeConfig {
        max_queue: 3,
        max_inputs: 3,
        ..ServeConfig::default()
    };
    let server = Server::start(
        Fake {
            gate: Some(gate.clone()),
        },
        config,
    )
    .await;
    let held = request(&server, &["a"]);
    gate.entered(1).await;
    let queued_up = request(&server, &["b", "c", "d"]);
    queued(&server, 3).await;

    let response = client()
        .post(server.url("/predict"))
        .body(r#"{"text": "e"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    let error: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        error["error"],
        "the queue is full (3 of 3 inputs waiting); retry later"
    );

    gate.open();
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    let (status, outputs) = queued_up.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(outputs[2], json!({"text": "d", "length": 1}));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_merged_into_one_batch() {
    let gate = Gate::closed();
    let server = Server::start(
        Fake {
            gate: Some(gate.clone()),
        },
        ServeConfig::default(),
    )
    .await;
    let first = request(&server, &["first"]);
    gate.entered(1).await;
    // Twelve clients, each with one input, while the worker is busy with the first batch.
    let texts: Vec<String> = (0..12).map(|i| "x".repeat(i + 1)).collect();
    let waiting: Vec<_> = texts.iter().map(|t| request(&server, &[t])).collect();
    queued(&server, 12).await;
    gate.open();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    for (i, handle) in waiting.into_iter().enumerate() {
        let (status, outputs) = handle.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(outputs[0]["length"], i + 1);
    }
    let text = metrics(&server).await;
    assert_eq!(
        sample(&text, "pipeline_serve_batch_inputs_count"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pipeline_serve_batch_inputs_sum"),
        Some(13.0),
        "{text}"
    );
    // 5 + (1 + 2 + ... + 12) characters.
    assert_eq!(
        sample(&text, "pipeline_serve_batch_tokens_sum"),
        Some(83.0),
        "{text}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_connections_and_answers_what_is_in_flight_and_queued() {
    let gate = Gate::closed();
    let server = Server::start(
        Fake {
            gate: Some(gate.clone()),
        },
        ServeConfig::default(),
    )
    .await;
    let mut server = server;
    let in_flight = request(&server, &["in flight"]);
    gate.entered(1).await;
    let queued_up = [
        request(&server, &["queued", "too"]),
        request(&server, &["also"]),
    ];
    queued(&server, 3).await;

    server.shutdown();
    // The accept loop stops at once: a new connection is refused while the old ones wait.
    let start = Instant::now();
    while tokio::net::TcpStream::connect(server.addr).await.is_ok() {
        assert!(start.elapsed() < Duration::from_secs(5), "still accepting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!in_flight.is_finished());

    gate.open();
    let (status, output) = in_flight.await.unwrap();
    assert_eq!(
        (status, output[0]["length"].as_u64()),
        (StatusCode::OK, Some(9))
    );
    for handle in queued_up {
        let (status, outputs) = handle.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{outputs}");
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_until_one_closes() {
    let config = ServeConfig {
        max_connections: 2,
        ..ServeConfig::default()
    };
    let server = Server::start(Fake { gate: None }, config).await;
    let idle = [
        tokio::net::TcpStream::connect(server.addr).await.unwrap(),
        tokio::net::TcpStream::connect(server.addr).await.unwrap(),
    ];
    let waiting = request(&server, &["third"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a third connection was served");
    drop(idle);
    let (status, outputs) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    assert_eq!(
        (status, outputs[0]["length"].as_u64()),
        (StatusCode::OK, Some(5))
    );
    let text = metrics(&server).await;
    // The scrape's own connection, at least, is open.
    assert!(
        sample(&text, "pipeline_serve_connections").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_request_does_not_wait_for_company() {
    let config = ServeConfig {
        max_wait: Duration::from_secs(5),
        ..ServeConfig::default()
    };
    let server = Server::start(Fake { gate: None }, config).await;
    let started = Instant::now();
    let (status, _) = request(&server, &["alone"]).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    // Nothing else was arriving: the batch did not wait its 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    server.stop().await.unwrap();
}
