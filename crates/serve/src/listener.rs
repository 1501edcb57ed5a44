//! A TCP listener that keeps at most `max_connections` connections open. Each connection holds
//! buffers (hyper's read buffer grows to about 400 KiB while a body streams in), so their number
//! is what bounds the server's memory once bodies are bounded; past it, new connections wait in
//! the kernel's accept backlog until one closes, as nginx's `worker_connections` makes them.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The listener: a slot per open connection.
pub(crate) struct Bounded {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    open: Gauge,
}

impl Bounded {
    pub(crate) fn new(inner: TcpListener, max_connections: usize, open: Gauge) -> Bounded {
        Bounded {
            inner,
            slots: Arc::new(Semaphore::new(max_connections)),
            open,
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Counted, SocketAddr) {
        // A slot is taken before the connection is, so that one over the limit stays in the
        // backlog. The semaphore is never closed: `None` cannot happen, and would only lift the
        // limit rather than stop the server.
        let slot = self.slots.clone().acquire_owned().await.ok();
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        self.open.inc();
        let open = self.open.clone();
        (
            Counted {
                io,
                _slot: slot,
                open,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// An accepted connection, holding its slot until it is dropped.
pub(crate) struct Counted {
    io: TcpStream,
    _slot: Option<OwnedSemaphorePermit>,
    open: Gauge,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
