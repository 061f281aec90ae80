//! The front's client for the bridge socket: one request per call, each bounded by the
//! front→bridge timeout, on connections kept open between calls.
//!
//! Reusing connections is transport, not state: a connection carries no session, credential
//! or context (every request carries its own), and the bridge serves requests on one
//! connection in order. Opening a Unix connection per call cost the front about a quarter of
//! its throughput in the load benchmark. A connection that failed or timed out is dropped,
//! never reused; one that the bridge closed while idle (a restart) is detected on use and the
//! call goes once more on a fresh connection.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bridge_proto::client::{CallError, Connection};
use serde_json::{Map, Value};

/// Idle connections kept at most (more concurrent calls open more, then close the surplus).
const MAX_IDLE: usize = 64;

/// A pooled bridge client.
pub struct Bridge {
    socket: PathBuf,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl Bridge {
    /// A client for the socket at `socket`; a call (connecting included) must finish within
    /// `timeout`.
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Bridge {
        Bridge { socket: socket.into(), timeout, idle: Mutex::new(Vec::new()) }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Calls `method` with `params`.
    pub async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, CallError> {
        let work = async {
            if let Some(conn) = self.take_idle() {
                match self.call_on(conn, method, params.clone()).await {
                    // The bridge closed this idle connection (it restarted or stopped): the
                    // request was never read, so it goes once more on a fresh connection.
                    Err(CallError::Unavailable(_)) => {}
                    other => return other,
                }
            }
            let conn = Connection::connect(&self.socket).await?;
            self.call_on(conn, method, params).await
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Unavailable(format!(
                "no answer from the bridge within {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }

    async fn call_on(
        &self,
        mut conn: Connection,
        method: &str,
        params: Map<String, Value>,
    ) -> Result<Value, CallError> {
        let result = conn.call(method, params).await;
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
