//! Clients that never finish a request: a half-sent head, an idle connection, a body that stops
//! coming. Each is cut off after `read_timeout`, so a handful of them cannot hold every slot.

use std::time::{Duration, Instant};

use pipeline_serve::ServeConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fake::{Fake, Server, client};

const TIMEOUT: Duration = Duration::from_millis(300);

fn quick(max_connections: usize) -> ServeConfig {
    ServeConfig {
        read_timeout: TIMEOUT,
        max_connections,
        ..ServeConfig::default()
    }
}

/// Reads until the server closes `stream` (or 10 s pass): what it sent, and how long it took.
async fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the server kept the connection open for 10 s");
    (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_head_is_cut_off() {
    let server = Server::start(Fake { gate: None }, quick(16)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, waited) = until_closed(&mut stream).await;
    assert!(
        waited >= TIMEOUT / 2,
        "closed before the timeout: {waited:?}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_hold_the_only_slot() {
    let server = Server::start(Fake { gate: None }, quick(1)).await;
    let _idle = TcpStream::connect(server.addr).await.unwrap();
    // The idle connection holds the one slot until its deadline; then this one is served.
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        client()
            .post(server.url("/predict"))
            .body(r#"{"text": "late"}"#)
            .send(),
    )
    .await
    .expect("an idle connection held the only slot for 10 s")
    .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_coming_gets_a_408() {
    let server = Server::start(Fake { gate: None }, quick(16)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"text\": ")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    server.stop().await.unwrap();
}
