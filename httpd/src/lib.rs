//! The one bounded HTTP/1.1 server of the project, used by `mcp-front` and by the bridge's
//! board: an axum [`Router`] served over a TCP or a Unix listener on hyper, with every
//! resource a client can hold bounded.
//!
//! - **Connections**: at most [`Limits::max_connections`] at once. The next one is accepted
//!   and refused: a short `503` with `Retry-After` and `Connection: close`, then closed (at
//!   most [`MAX_REFUSING`] refusals in progress; past that an excess connection is closed
//!   without a word).
//! - **Requests in flight**: at most [`Limits::max_inflight`] across all connections, from
//!   the request's head to the end of its answer (a long poll holds one while it waits). The
//!   next request is answered `503` with `Retry-After` on its own connection, which stays open.
//! - **Time**: a connection must deliver a whole request head within
//!   [`Limits::header_timeout`] of its first byte (a new connection: of being accepted), or it
//!   is closed; a request body must arrive within [`Limits::body_timeout`] of its head, or the
//!   answer is `408` and the connection closes; a connection with no request in flight is
//!   closed after [`Limits::idle_timeout`] of silence; an answer the client does not read for
//!   [`Limits::body_timeout`] closes the connection.
//! - **Shutdown**: when the token is cancelled the listener closes, idle connections close,
//!   requests in flight finish; after [`Limits::drain_timeout`] whatever remains is dropped.
//!   Every connection task is tracked and awaited before [`serve`] returns.
//!
//! hyper's own `header_read_timeout` is not used: in hyper 1.x its timer restarts as soon as a
//! keep-alive connection goes idle (`proto/h1/conn.rs`, `State::idle` sets `notify_read`), so
//! it would make the idle allowance equal to the header allowance. The connection watchdog
//! (`conn.rs`) keeps the two apart.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod body;
mod conn;
mod nofile;
mod refuse;

pub use nofile::{NofileLimit, connection_cap, raise_nofile_limit};

/// How many busy refusals may be written at once; past that an excess connection is closed
/// at once (a refusal holds a descriptor for at most [`REFUSAL_TIME`]).
pub const MAX_REFUSING: usize = 64;

/// The largest request head, and the most a connection's read buffer ever holds: hyper
/// answers a head that does not fit `431` and closes. hyper's buffer grows (8 KiB at first,
/// doubled after a read that fills it) and never shrinks while hyper has the connection, so
/// this is what a connection may keep while a request is on it (Node.js's default head limit
/// is the same); an idle connection keeps none (`conn.rs`).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The longest a refused connection is kept to deliver its `503`.
pub const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// The bounds of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Requests in flight at once, over all connections.
    pub max_inflight: usize,
    /// From a request's first byte (a new connection: from its accept) to its whole head.
    pub header_timeout: Duration,
    /// From a request's head to the end of its body; also the longest an answer may wait
    /// for the client to read it.
    pub body_timeout: Duration,
    /// The longest a connection with no request in flight stays open in silence.
    pub idle_timeout: Duration,
    /// How long a shutdown waits for requests in flight.
    pub drain_timeout: Duration,
    /// The `Retry-After` of a busy answer, in seconds.
    pub retry_after_seconds: u32,
}

impl Limits {
    /// The front's defaults: room for many MCP clients, 64 long polls of `get_agent_task`
    /// (`wait_seconds` ≤ 25 s) and their normal traffic.
    pub const FRONT: Limits = Limits {
        max_connections: 4096,
        max_inflight: 512,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(10),
        retry_after_seconds: 1,
    };

    /// The board's defaults: one person's browser tabs, each with a `/live` long poll.
    pub const BOARD: Limits = Limits {
        max_connections: 128,
        max_inflight: 64,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(5),
        retry_after_seconds: 1,
    };
}

/// How the server's own answers (busy, timeout) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A JSON-RPC error object with `id: null` (the MCP front).
    JsonRpc,
    /// Plain text (the board).
    Text,
}

impl Style {
    /// The content type and body of an answer saying `message`.
    pub fn body(self, message: &str) -> (&'static str, String) {
        match self {
            Style::JsonRpc => {
                let message = message.replace('\\', "\\\\").replace('"', "\\\"");
                let body = format!(r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32000,"message":"{message}"}}}}"#);
                ("application/json", body)
            }
            Style::Text => ("text/plain; charset=utf-8", format!("{message}\n")),
        }
    }
}

/// What to serve and how.
#[derive(Debug, Clone, Copy)]
pub struct Server {
    /// The server's name in logs (`mcp-front`, `board`).
    pub name: &'static str,
    /// Its bounds.
    pub limits: Limits,
    /// How its own answers are written.
    pub style: Style,
}

/// A listening socket [`serve`] accepts from: a TCP or a Unix listener.
pub trait Listener: Send + 'static {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn accept_one(&mut self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept_one(&mut self) -> io::Result<tokio::net::TcpStream> {
        let (stream, _) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept_one(&mut self) -> io::Result<tokio::net::UnixStream> {
        Ok(self.accept().await?.0)
    }
}

/// What every connection of one server shares.
struct Shared {
    server: Server,
    app: Router,
    inflight: Arc<Semaphore>,
}

/// Serves `app` on `listener` within `server.limits` until `shutdown` is cancelled, then
/// drains (bounded by [`Limits::drain_timeout`]) and returns once every connection task ended.
pub async fn serve<L: Listener>(mut listener: L, app: Router, server: Server, shutdown: CancellationToken) {
    let limits = server.limits;
    let shared = Arc::new(Shared { server, app, inflight: Arc::new(Semaphore::new(limits.max_inflight.max(1))) });
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let tracker = TaskTracker::new();
    let force = CancellationToken::new();
    let mut refused_since_log = 0u64;
    let mut last_refusal_log: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept_one() => accepted,
        };
        let io = match accepted {
            Ok(io) => io,
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                // Out of descriptors (or another listener fault): wait a moment, a closing
                // connection frees one.
                tracing::warn!(server = server.name, cause = %e, "cannot accept a connection");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        match Arc::clone(&connections).try_acquire_owned() {
            Ok(permit) => {
                let (shared, shutdown, force) = (Arc::clone(&shared), shutdown.clone(), force.clone());
                tracker.spawn(async move {
                    conn::run(io, shared, shutdown, force).await;
                    drop(permit);
                });
            }
            Err(_) => {
                refused_since_log += 1;
                let now = tokio::time::Instant::now();
                if last_refusal_log.is_none_or(|at| now - at >= Duration::from_secs(10)) {
                    tracing::warn!(
                        server = server.name,
                        max_connections = limits.max_connections,
                        refused = refused_since_log,
                        "too many connections: refusing the excess with 503"
                    );
                    refused_since_log = 0;
                    last_refusal_log = Some(now);
                }
                if let Ok(permit) = Arc::clone(&refusing).try_acquire_owned() {
                    let (content_type, body) = server.style.body("too many connections: retry later");
                    let retry = limits.retry_after_seconds;
                    tracker.spawn(async move {
                        refuse::busy(io, content_type, body, retry).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(limits.drain_timeout, tracker.wait()).await.is_err() {
        tracing::warn!(
            server = server.name,
            left = tracker.len(),
            "connections still open after the drain time: closing them"
        );
        force.cancel();
        tracker.wait().await;
    }
}

/// Accept errors that concern one connection only (the listener is fine).
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}
