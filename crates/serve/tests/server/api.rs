//! `/predict`'s shapes and statuses, `/health`, `/info` and `/metrics`.

use pipeline_serve::ServeConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::fake::{Fake, Server, client, sample};

/// Small limits, so that a test can pass each of them cheaply.
fn small() -> ServeConfig {
    ServeConfig {
        max_body_bytes: 4096,
        max_inputs: 4,
        max_queue: 16,
        ..ServeConfig::default()
    }
}

/// POSTs `body` to `/predict`: the status and the JSON answer.
pub async fn post(server: &Server, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
    let response = client()
        .post(server.url("/predict"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let value = response.json().await.unwrap();
    (status, value)
}

/// The `error` message of a refused request, checking its status.
async fn refused(server: &Server, body: impl Into<reqwest::Body>, status: StatusCode) -> String {
    let (got, value) = post(server, body).await;
    assert_eq!(got, status, "{value}");
    value["error"].as_str().unwrap().to_owned()
}

pub async fn metrics(server: &Server) -> String {
    let response = client().get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_object_gives_one_object_and_an_array_an_array_in_order() {
    let server = Server::start(Fake { gate: None }, small()).await;
    let (status, one) = post(&server, r#"{"text": "你好"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one, json!({"text": "你好", "length": 2}));
    let body = json!([{"text": "a"}, {"text": "abc"}, {"text": "ab"}]).to_string();
    let (status, many) = post(&server, body).await;
    assert_eq!(status, StatusCode::OK);
    let lengths: Vec<u64> = many
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["length"].as_u64().unwrap())
        .collect();
    assert_eq!(lengths, [1, 3, 2]);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_names_what_is_wrong() {
    let server = Server::start(Fake { gate: None }, small()).await;
    let bad = StatusCode::BAD_REQUEST;
    let msg = refused(&server, r#"{"text": "#, bad).await;
    assert!(msg.starts_with("the body is not valid JSON: EOF"), "{msg}");
    let msg = refused(&server, r#"[{"text": "a"}, {"text": 5}]"#, bad).await;
    assert_eq!(
        msg,
        "[1].text: invalid type: integer `5`, expected a string"
    );
    let msg = refused(&server, r#"{"text": "a", "txt": "b"}"#, bad).await;
    assert_eq!(msg, "txt: unknown field `txt`, expected `text`");
    let msg = refused(&server, r#"[{"text": "ok"}, {"text": " "}]"#, bad).await;
    assert_eq!(msg, "[1]: field `text` is empty");
    let long = json!({"text": "长".repeat(101)}).to_string();
    let msg = refused(&server, long, bad).await;
    assert!(
        msg.starts_with("field `text` is 101 characters long"),
        "{msg}"
    );

    let large = StatusCode::PAYLOAD_TOO_LARGE;
    let five = json!([{"text": "a"}, {"text": "a"}, {"text": "a"}, {"text": "a"}, {"text": "a"}]);
    let msg = refused(&server, five.to_string(), large).await;
    assert_eq!(msg, "5 inputs in one request; this server takes at most 4");
    let big = json!({"text": "x".repeat(5000)}).to_string();
    let msg = refused(&server, big, large).await;
    assert_eq!(
        msg,
        "the body is larger than this server takes (4096 bytes)"
    );

    let get = client().get(server.url("/predict")).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
    let nowhere = client().get(server.url("/nope")).send().await.unwrap();
    assert_eq!(nowhere.status(), StatusCode::NOT_FOUND);

    let text = metrics(&server).await;
    let count = |labels: &str| sample(&text, &format!("pipeline_serve_requests_total{{{labels}}}"));
    assert_eq!(
        count(r#"endpoint="predict",status="400""#),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        count(r#"endpoint="predict",status="413""#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        count(r#"endpoint="predict",status="405""#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count(r#"endpoint="other",status="404""#),
        Some(1.0),
        "{text}"
    );
    // Nothing refused reached the model.
    assert_eq!(
        sample(&text, "pipeline_serve_batch_inputs_count"),
        Some(0.0)
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_panicking_batch_is_a_500_and_the_server_keeps_serving() {
    let server = Server::start(Fake { gate: None }, small()).await;
    let error = StatusCode::INTERNAL_SERVER_ERROR;
    let msg = refused(&server, r#"{"text": "fail"}"#, error).await;
    assert_eq!(msg, "the fake model fails on purpose");
    let msg = refused(&server, r#"[{"text": "ok"}, {"text": "panic"}]"#, error).await;
    assert!(msg.starts_with("the model failed: "), "{msg}");
    let msg = refused(&server, r#"{"text": "panic in check"}"#, error).await;
    assert!(msg.starts_with("checking the request failed: "), "{msg}");
    let (status, value) = post(&server, r#"{"text": "still here"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(value["length"], 10);
    let text = metrics(&server).await;
    let ok = r#"pipeline_serve_requests_total{endpoint="predict",status="200"}"#;
    assert_eq!(sample(&text, ok), Some(1.0), "{text}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_info_and_metrics_answer() {
    let server = Server::start(Fake { gate: None }, small()).await;
    let health: Value = client()
        .get(server.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    let info: Value = client()
        .get(server.url("/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["model"], json!({"task": "length", "max_chars": 100}));
    assert_eq!(info["limits"]["max_inputs"], 4);
    assert_eq!(info["limits"]["max_body_bytes"], 4096);
    assert_eq!(info["limits"]["max_wait_ms"], 5.0);
    assert_eq!(info["limits"]["max_connections"], 1024);

    post(&server, r#"[{"text": "abc"}, {"text": "de"}]"#).await;
    let response = client().get(server.url("/metrics")).send().await.unwrap();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert_eq!(
        sample(&text, "pipeline_serve_batch_inputs_sum"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pipeline_serve_batch_tokens_sum"),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pipeline_serve_queue_depth"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pipeline_serve_request_duration_seconds_count"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "pipeline_serve_predict_duration_seconds_count"),
        Some(1.0)
    );
    server.stop().await.unwrap();
}
