//! The HTTP side: the routes, `/predict`'s reading, checking and queueing of a request, and the
//! error responses (`{"error": "..."}` with the status that says whose fault it was).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::Value;
use tower::limit::ConcurrencyLimitLayer;

use crate::batcher::Queue;
use crate::metrics::{Metrics, endpoint};
use crate::{Model, ServeConfig};

/// What every handler shares.
struct AppState<M: Model> {
    model: Arc<M>,
    queue: Queue<M::Input, M::Output>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
}

type Shared<M> = Arc<AppState<M>>;

/// The routes, with the request log and metrics around all of them and the concurrency limit
/// around `/predict` (only: `/health` and `/metrics` must answer while it is saturated).
pub(crate) fn router<M: Model>(
    model: Arc<M>,
    queue: Queue<M::Input, M::Output>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
) -> Router {
    let limit = ConcurrencyLimitLayer::new(config.max_concurrency);
    let state = Arc::new(AppState {
        model,
        queue,
        metrics,
        config,
    });
    Router::new()
        .route("/predict", post(predict::<M>).layer(limit))
        .route("/health", get(health))
        .route("/info", get(info::<M>))
        .route("/metrics", get(metrics_text::<M>))
        .layer(middleware::from_fn_with_state(state.clone(), observe::<M>))
        .with_state(state)
}

/// How many inputs a `/predict` response answered, for the request's log line.
#[derive(Debug, Clone, Copy)]
struct Answered(usize);

/// A debug line and the metrics for every request.
async fn observe<M: Model>(State(state): State<Shared<M>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state.metrics.request(endpoint(&path), status, elapsed);
    let inputs = response.extensions().get::<Answered>().map(|a| a.0);
    tracing::debug!(
        %method,
        path = %path,
        status,
        inputs,
        ms = format_args!("{:.1}", elapsed.as_secs_f64() * 1e3),
        "request"
    );
    response
}

/// A refused or failed request.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            json_response(self.status, &serde_json::json!({ "error": self.message }));
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // The queue drains in milliseconds to seconds: a second is a fair first retry.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// `value` as a JSON response.
fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("could not serialise the response: {e}"),
        )
            .into_response(),
    }
}

async fn health() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({ "status": "ok" }))
}

async fn info<M: Model>(State(state): State<Shared<M>>) -> Response {
    let body = serde_json::json!({
        "model": state.model.info(),
        "limits": state.config.limits(),
    });
    json_response(StatusCode::OK, &body)
}

async fn metrics_text<M: Model>(State(state): State<Shared<M>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        state.metrics.encode(),
    )
        .into_response()
}

/// `POST /predict`: read, parse, check, queue, wait, answer.
async fn predict<M: Model>(
    State(state): State<Shared<M>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match answer(&state, &headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn answer<M: Model>(
    state: &AppState<M>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A batch being collected waits for this request while it is read and checked.
    let arrival = state.queue.arrival();
    let limit = state.config.max_body_bytes;
    let bytes = tokio::time::timeout(state.config.read_timeout, read_body(headers, body, limit))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {:?}: send it whole, at once",
                    state.config.read_timeout
                ),
            )
        })??;
    let (checked, one) = prepare(state, bytes).await?;
    let count = checked.len();
    let submitted = state.queue.submit(checked);
    drop(arrival);
    let receivers = submitted.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the queue is full ({} of {} inputs waiting); retry later",
                state.queue.depth(),
                state.config.max_queue
            ),
        )
    })?;
    let mut outputs = Vec::with_capacity(count);
    for rx in receivers {
        match rx.await {
            Ok(Ok(output)) => outputs.push(output),
            Ok(Err(message)) => {
                return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message));
            }
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the batch worker stopped before answering",
                ));
            }
        }
    }
    let mut response = match (one, outputs.as_slice()) {
        (true, [output]) => json_response(StatusCode::OK, output),
        _ => json_response(StatusCode::OK, &outputs),
    };
    response.extensions_mut().insert(Answered(count));
    Ok(response)
}

/// The body's inputs with their costs, and whether it was one object. Parsed and checked on the
/// blocking pool: the model's check tokenizes every text, and a large request must not hold up
/// the connections this runtime thread serves.
async fn prepare<M: Model>(
    state: &AppState<M>,
    bytes: Vec<u8>,
) -> Result<(Vec<(M::Input, usize)>, bool), ApiError> {
    let model = state.model.clone();
    let max_inputs = state.config.max_inputs;
    let prepared = tokio::task::spawn_blocking(move || {
        let (inputs, one) = parse::<M::Input>(&bytes, max_inputs)?;
        drop(bytes);
        Ok((check(model.as_ref(), inputs, one)?, one))
    })
    .await;
    prepared.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("checking the request failed: {e}"),
        ))
    })
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is larger than this server takes ({limit} bytes)"),
    )
}

/// The body, refused by its `Content-Length` before a byte of it is read, or as soon as a
/// streamed (chunked) body passes `limit`: at most `limit` bytes are ever held.
async fn read_body(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("could not read the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(too_large(limit));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// The inputs of a body, and whether it was one object (answered by one object) rather than an
/// array. A field of the wrong type or an unknown one is a 400 that names it (`[2].text_a`).
fn parse<I: serde::de::DeserializeOwned>(
    bytes: &[u8],
    max_inputs: usize,
) -> Result<(Vec<I>, bool), ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the body is empty: send a JSON object (one input) or an array of them",
        ));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    let (items, one) = match value {
        Value::Object(_) => (vec![value], true),
        Value::Array(items) => (items, false),
        other => {
            return Err(ApiError::bad_request(format!(
                "the body is a JSON {}: send an object (one input) or an array of them",
                kind(&other)
            )));
        }
    };
    if items.is_empty() {
        return Err(ApiError::bad_request(
            "the body is an empty array: send at least one input",
        ));
    }
    if items.len() > max_inputs {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} inputs in one request; this server takes at most {max_inputs}",
                items.len()
            ),
        ));
    }
    let inputs = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            serde_path_to_error::deserialize(item).map_err(|e| {
                let path = e.path().to_string();
                let at = located(one, i, if path == "." { None } else { Some(path) });
                ApiError::bad_request(format!("{at}{}", e.inner()))
            })
        })
        .collect::<Result<Vec<I>, _>>()?;
    Ok((inputs, one))
}

/// Where in the body an error is: `[i].field: `, `field: `, `[i]: ` or nothing.
fn located(one: bool, index: usize, field: Option<String>) -> String {
    match (one, field) {
        (true, None) => String::new(),
        (true, Some(field)) => format!("{field}: "),
        (false, None) => format!("[{index}]: "),
        (false, Some(field)) => format!("[{index}].{field}: "),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Each input's cost, or the first that the model refuses (a 400 with the model's message).
fn check<M: Model>(
    model: &M,
    inputs: Vec<M::Input>,
    one: bool,
) -> Result<Vec<(M::Input, usize)>, ApiError> {
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| match model.check(&input) {
            // A zero cost would let a batch grow without bound.
            Ok(tokens) => Ok((input, tokens.max(1))),
            Err(message) => Err(ApiError::bad_request(format!(
                "{}{message}",
                located(one, i, None)
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        text_a: String,
        text_b: String,
    }

    fn message(result: Result<(Vec<Pair>, bool), ApiError>) -> (StatusCode, String) {
        let e = result.unwrap_err();
        (e.status, e.message)
    }

    #[test]
    fn one_object_or_an_array_of_them() {
        let (one, single) = parse::<Pair>(br#"{"text_a":"a","text_b":"b"}"#, 4).unwrap();
        assert!(single);
        assert_eq!(one.len(), 1);
        let (many, single) = parse::<Pair>(
            br#"[{"text_a":"a","text_b":"b"},{"text_a":"c","text_b":"d"}]"#,
            4,
        )
        .unwrap();
        assert!(!single);
        assert_eq!(many[1].text_b, "d");
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_with_its_index() {
        let (status, msg) = message(parse(
            br#"[{"text_a":"a","text_b":"b"},{"text_a":3,"text_b":"b"}]"#,
            4,
        ));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            msg.starts_with("[1].text_a: invalid type: integer `3`"),
            "{msg}"
        );
        let (_, msg) = message(parse(br#"{"text_a":"a"}"#, 4));
        assert!(msg.contains("missing field `text_b`"), "{msg}");
        let (_, msg) = message(parse(br#"{"text_a":"a","text_b":"b","txt":"c"}"#, 4));
        assert!(msg.contains("unknown field `txt`"), "{msg}");
    }

    #[test]
    fn malformed_empty_and_scalar_bodies_are_400s() {
        let (status, msg) = message(parse(br#"{"text_a":"#, 4));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(msg.starts_with("the body is not valid JSON: EOF"), "{msg}");
        let (_, msg) = message(parse(b"  \n", 4));
        assert!(msg.starts_with("the body is empty"), "{msg}");
        let (_, msg) = message(parse(b"\"hello\"", 4));
        assert!(msg.starts_with("the body is a JSON string"), "{msg}");
        let (_, msg) = message(parse(b"[]", 4));
        assert!(msg.contains("empty array"), "{msg}");
    }

    #[test]
    fn too_many_inputs_is_a_413() {
        let body = br#"[{"text_a":"a","text_b":"b"},{"text_a":"a","text_b":"b"},{"text_a":"a","text_b":"b"}]"#;
        let (status, msg) = message(parse(body, 2));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(msg.starts_with("3 inputs in one request"), "{msg}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_by_its_declared_length_or_as_it_streams() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("11"));
        let e = read_body(&headers, Body::from("hello world"), 10)
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        let e = read_body(&HeaderMap::new(), Body::from("hello world"), 10)
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        let ok = read_body(&HeaderMap::new(), Body::from("hello"), 10)
            .await
            .unwrap();
        assert_eq!(ok, b"hello");
    }
}
