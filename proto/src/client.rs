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
        self.writer
            .write_all(&request.to_line())
            .await
            .map_err(|e| CallError::Unavailable(format!("cannot send to the bridge: {e}")))?;
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
            Response::Ok { request_id, result } if request_id == request.request_id => Ok(result),
            Response::Err { request_id, error }
                if request_id.is_none() || request_id.as_deref() == Some(&request.request_id) =>
            {
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
