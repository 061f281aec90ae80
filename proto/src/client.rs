//! A small client for the bridge socket: one connection, sequential calls.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::envelope::{Request, Response};
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
    format!("c{}-{}", std::process::id(), NEXT_ID.fetch_add(1, Ordering::Relaxed))
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
        let request = Request { request_id: next_request_id(), method: method.to_owned(), params };
        if let Err(e) = self.writer.write_all(&request.to_line()).await {
            // The bridge may have refused this connection before reading anything (a peer it
            // does not allow) and closed it: its one refusal line is still there to read, and
            // it says more than the broken pipe does.
            return match self.read_response(&request.request_id).await {
                Err(refusal @ CallError::Remote { .. }) => Err(refusal),
                _ => Err(CallError::Unavailable(format!("cannot send to the bridge: {e}"))),
            };
        }
        self.read_response(&request.request_id).await
    }

    /// Reads the response to the request `request_id`.
    async fn read_response(&mut self, request_id: &str) -> Result<Value, CallError> {
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
        match Response::parse(&self.buf).map_err(CallError::Protocol)? {
            Response::Ok { request_id: id, result } if id == request_id => Ok(result),
            Response::Err { request_id: id, error } if id.is_none() || id.as_deref() == Some(request_id) => {
                Err(CallError::Remote { code: error.code, message: error.message })
            }
            _ => Err(CallError::Protocol("response request_id does not match the request".into())),
        }
    }
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
        let work = async {
            let mut conn = Connection::connect(&self.socket).await?;
            conn.call(method, params).await
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Unavailable(format!(
                "no answer from the bridge within {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

#[cfg(test)]
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
}
