//! Serving the accepted connections: hyper's HTTP/1 with a deadline on every request head, and
//! a graceful shutdown that answers what was received.
//!
//! Why not `axum::serve`: it gives hyper no timer, so hyper's `header_read_timeout` never runs,
//! and a client that opens a connection and sends half a request line (or keeps a connection
//! idle) holds one of the `max_connections` slots for ever; `max_connections` such clients
//! and nobody else is served. This loop is axum's own, less what the server does not use
//! (HTTP/2, upgrades, connect info), plus that timer.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tower::Service;

use crate::listener::Bounded;

/// Serves `app` on every connection `listener` accepts until `shutdown` completes; then stops
/// accepting, lets each connection finish the request it is on (closing idle ones at once) and
/// returns when all are closed.
pub(crate) async fn serve(
    mut listener: Bounded,
    app: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    // The deadline runs from when hyper starts waiting for a request head (the first one, or
    // the next on a kept-alive connection) until the head is read.
    http.timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _addr) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            // A router is always ready: `call` without `poll_ready`, as axum's own loop does.
            app.clone().call(request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection closed: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
