//! The client side of the bridge socket, shared by the bridge's CLI, `mcp-front` and the tests:
//! a [`Connection`] (connect, one request line, a bounded read of the answer, the envelope
//! parsed), a [`Client`] that opens one connection per call, and a [`Pool`] that keeps
//! connections open between calls. Every call of the last two is bounded by one timeout,
//! connecting included.
//!
//! Reusing connections is transport, not state: a connection carries no session, credential
//! or context (every request carries its own), and the bridge serves requests on one
//! connection in order.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::envelope::{RawResponse, Request, Response};
use crate::framing::{Line, read_line};
use crate::{MAX_LINE_BYTES, codes};

/// Why a call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The socket could not be reached, or the bridge did not answer in time
    /// (`AGENT_BRIDGE_UNAVAILABLE`).
    #[error("the agent bridge is unavailable: {0}")]
    Unavailable(String),
    /// The bridge answered with something that is not a valid response
    /// (`AGENT_BRIDGE_PROTOCOL_ERROR`).
    #[error("the agent bridge answered with an invalid response: {0}")]
    Protocol(String),
    /// The bridge refused the call with a code and a message.
    #[error("{code}: {message}")]
    Remote {
        /// The bridge's error code.
        code: String,
        /// The bridge's message.
        message: String,
    },
}

impl CallError {
    /// The error code this failure carries on the wire.
    pub fn code(&self) -> &str {
        match self {
            CallError::Unavailable(_) => codes::AGENT_BRIDGE_UNAVAILABLE,
            CallError::Protocol(_) => codes::AGENT_BRIDGE_PROTOCOL_ERROR,
            CallError::Remote { code, .. } => code,
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_request_id() -> String {
    // The process id is read once (a system call each time otherwise).
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    format!("c{}-{}", PID.get_or_init(std::process::id), NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// One open connection to the bridge; calls on it are sequential.
pub struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    buf: Vec<u8>,
}

impl Connection {
    /// Connects to the socket at `path`.
    pub async fn connect(path: &Path) -> Result<Connection, CallError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| CallError::Unavailable(format!("cannot connect to the bridge socket: {e}")))?;
        let (read, writer) = stream.into_split();
        Ok(Connection { reader: BufReader::new(read), writer, buf: Vec::new() })
    }

    /// Sends one request and waits for its response.
    pub async fn call(&mut self, method: &str, params: Map<String, Value>) -> Result<Value, CallError> {
        let raw = self.call_raw(method, &params).await?;
        parse_result(&raw)
    }

    /// Sends one request of `method` with `params` (anything that serializes as an object)
    /// and returns its result as JSON text, unparsed.
    pub async fn call_raw(&mut self, method: &str, params: &impl Serialize) -> Result<Box<RawValue>, CallError> {
        let request_id = next_request_id();
        self.send(&request_id, &Request::line(&request_id, method, params)).await
    }

    /// Sends the request line `line` (whose id is `request_id`) and reads its response.
    async fn send(&mut self, request_id: &str, line: &[u8]) -> Result<Box<RawValue>, CallError> {
        if let Err(e) = self.writer.write_all(line).await {
            // The bridge may have refused this connection before reading anything (a peer it
            // does not allow) and closed it: its one refusal line is still there to read, and
            // it says more than the broken pipe does.
            return match self.read_response(request_id).await {
                Err(refusal @ CallError::Remote { .. }) => Err(refusal),
                _ => Err(CallError::Unavailable(format!("cannot send to the bridge: {e}"))),
            };
        }
        self.read_response(request_id).await
    }

    /// Reads the response to the request `request_id`.
    async fn read_response(&mut self, request_id: &str) -> Result<Box<RawValue>, CallError> {
        let line = read_line(&mut self.reader, &mut self.buf, MAX_LINE_BYTES)
            .await
            .map_err(|e| CallError::Unavailable(format!("cannot read from the bridge: {e}")))?;
        match line {
            Line::Complete => {}
            Line::Eof | Line::Truncated => {
                return Err(CallError::Unavailable("the bridge closed the connection".into()));
            }
            Line::TooLong => return Err(CallError::Protocol("response line is too long".into())),
        }
        match Response::parse_raw(&self.buf).map_err(CallError::Protocol)? {
            RawResponse::Ok { request_id: id, result } if id == request_id => Ok(result),
            RawResponse::Err { request_id: id, error } if id.is_none() || id.as_deref() == Some(request_id) => {
                Err(CallError::Remote { code: error.code, message: error.message })
            }
            _ => Err(CallError::Protocol("response request_id does not match the request".into())),
        }
    }
}

/// A result's JSON text as a value.
fn parse_result(raw: &RawValue) -> Result<Value, CallError> {
    serde_json::from_str(raw.get()).map_err(|e| CallError::Protocol(format!("the result is not valid JSON: {e}")))
}

/// A client that opens one connection per call, each bounded by a timeout.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client for the socket at `socket`; each call (connect included) must finish within
    /// `timeout`.
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Client {
        Client { socket: socket.into(), timeout }
    }

    /// The socket path this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Calls `method` with `params` on a fresh connection.
    pub async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, CallError> {
        within(self.timeout, async {
            let mut conn = Connection::connect(&self.socket).await?;
            conn.call(method, params).await
        })
        .await
    }
}

/// Runs one call, connecting included, within `timeout`; past it the bridge is unavailable.
async fn within<T>(timeout: Duration, work: impl Future<Output = Result<T, CallError>>) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(CallError::Unavailable(format!("no answer from the bridge within {} s", timeout.as_secs_f64()))),
    }
}

/// Idle connections a [`Pool`] keeps at most (more concurrent calls open more, then close the
/// surplus).
const MAX_IDLE: usize = 64;

/// A client that keeps connections open between calls (the front: opening a Unix connection
/// per call cost it about a quarter of its throughput in the load benchmark).
///
/// A connection that failed or timed out is dropped, never reused; one that the bridge closed
/// while idle (a restart) is detected on use and the call goes once more on a fresh connection.
pub struct Pool {
    socket: PathBuf,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl Pool {
    /// A pool for the socket at `socket`; a call (connecting included) must finish within
    /// `timeout`.
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Pool {
        Pool { socket: socket.into(), timeout, idle: Mutex::new(Vec::new()) }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Calls `method` with `params`.
    pub async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, CallError> {
        let raw = self.call_raw(method, &params).await?;
        parse_result(&raw)
    }

    /// Calls `method` with `params` (anything that serializes as an object); the result is
    /// returned as JSON text, unparsed. The request line is encoded once, also for a retry.
    pub async fn call_raw(&self, method: &str, params: &impl Serialize) -> Result<Box<RawValue>, CallError> {
        let request_id = next_request_id();
        let line = Request::line(&request_id, method, params);
        within(self.timeout, async {
            if let Some(conn) = self.take_idle() {
                match self.send_on(conn, &request_id, &line).await {
                    // The bridge closed this idle connection (it restarted or stopped): the
                    // request was never read, so it goes once more on a fresh connection.
                    Err(CallError::Unavailable(_)) => {}
                    other => return other,
                }
            }
            let conn = Connection::connect(&self.socket).await?;
            self.send_on(conn, &request_id, &line).await
        })
        .await
    }

    async fn send_on(&self, mut conn: Connection, request_id: &str, line: &[u8]) -> Result<Box<RawValue>, CallError> {
        let result = conn.send(request_id, line).await;
        // An answer (a result or the bridge's own refusal) leaves the connection in step.
        if matches!(result, Ok(_) | Err(CallError::Remote { .. })) {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        result
    }

    fn take_idle(&self) -> Option<Connection> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;
    use crate::envelope::ErrorBody;

    #[tokio::test]
    async fn a_refusal_sent_before_the_request_is_reported_even_when_the_send_fails() {
        let path = std::env::temp_dir().join(format!("bridge-proto-client-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // A bridge that refuses the peer: one line, then close, without reading anything.
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let refusal = Response::Err { request_id: None, error: ErrorBody::new(codes::PEER_NOT_AUTHORIZED, "no") };
            stream.write_all(&refusal.to_line()).await.unwrap();
        });
        let mut conn = Connection::connect(&path).await.unwrap();
        server.await.unwrap();
        // The bridge has closed: the send fails with a broken pipe, the refusal is still read.
        let err = conn.call("bridge.health", Map::new()).await.unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(err.code(), codes::PEER_NOT_AUTHORIZED, "{err}");
    }

    /// A bridge that answers `answers_per_connection` requests on each connection, then closes
    /// it; returns how many connections it accepted.
    async fn answering_bridge(path: &Path, connections: usize, answers_per_connection: usize) -> usize {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        for _ in 0..connections {
            let (stream, _) = listener.accept().await.unwrap();
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            for _ in 0..answers_per_connection {
                if read_line(&mut reader, &mut buf, MAX_LINE_BYTES).await.unwrap() != Line::Complete {
                    break;
                }
                let request = Request::parse(&buf).unwrap();
                let answer = Response::Ok { request_id: request.request_id, result: Value::from(request.method) };
                reader.get_mut().write_all(&answer.to_line()).await.unwrap();
            }
        }
        connections
    }

    #[tokio::test]
    async fn a_pool_reuses_its_connection_and_retries_once_when_the_bridge_closed_it() {
        let path = std::env::temp_dir().join(format!("bridge-proto-pool-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // Two connections: the first answers twice and is then closed by the bridge (a restart).
        let server = tokio::spawn({
            let path = path.clone();
            async move { answering_bridge(&path, 2, 2).await }
        });
        while !path.exists() {
            tokio::task::yield_now().await;
        }
        let pool = Pool::new(&path, Duration::from_secs(10));
        assert_eq!(pool.call("one", Map::new()).await.unwrap(), "one");
        assert_eq!(pool.call("two", Map::new()).await.unwrap(), "two", "the same connection, kept open");
        // The idle connection is closed now: the call goes once more on a fresh one.
        assert_eq!(pool.call("three", Map::new()).await.unwrap(), "three");
        assert_eq!(pool.call("four", Map::new()).await.unwrap(), "four");
        // Four calls on two connections: the bridge accepted no third one.
        assert_eq!(server.await.unwrap(), 2);
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn a_call_past_its_timeout_is_unavailable() {
        let path = std::env::temp_dir().join(format!("bridge-proto-silent-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // A bridge that accepts and never answers.
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(stream);
        });
        for result in [
            Client::new(&path, Duration::from_millis(50)).call("bridge.health", Map::new()).await,
            Pool::new(&path, Duration::from_millis(50)).call("bridge.health", Map::new()).await,
        ] {
            match result {
                Err(CallError::Unavailable(message)) => {
                    assert_eq!(message, "no answer from the bridge within 0.05 s")
                }
                other => panic!("expected a timeout, got {other:?}"),
            }
        }
        server.abort();
        let _ = std::fs::remove_file(&path);
    }
}
