//! JSON-RPC over the `codex app-server` stdio pipes, as Codex speaks it: one JSON object per
//! line, no `"jsonrpc"` field.
//!
//! Two id spaces share the wire: our requests carry our own integer ids (from 1), and the
//! server's requests carry the server's ids (from 0). A message with a `method` is the
//! server's (a request when it also has an `id`, else a notification); a message without one
//! answers one of ours. The server's ids are never looked up in our table, and ours are never
//! handed to the driver as server requests. When stdout ends, every pending request fails at
//! once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::provider::io::Read;

/// Why one of our requests failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    /// The server's output ended before it answered.
    #[error("codex closed its output before answering {0}")]
    Disconnected(String),
    /// The server answered with an error.
    #[error("codex refused {method}: {message} ({code})")]
    Remote {
        /// The method we called.
        method: String,
        /// JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
    },
    /// No answer within the bound.
    #[error("codex did not answer {0} in time")]
    Timeout(String),
}

/// A message from the server that is not an answer to us.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A server request: must be answered.
    Request {
        /// The server's id, kept verbatim (number or string) to echo back.
        id: Value,
        /// Method.
        method: String,
        /// Params (`null` when absent).
        params: Value,
    },
    /// A notification.
    Notification {
        /// Method.
        method: String,
        /// Params (`null` when absent).
        params: Value,
    },
    /// A line that is not a JSON-RPC message.
    Garbage(String),
}

type Waiters = Arc<Mutex<Option<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>>>;

/// Our side of the connection: send requests, notifications and answers.
#[derive(Clone)]
pub struct Rpc {
    outbox: mpsc::UnboundedSender<Value>,
    waiters: Waiters,
    next_id: Arc<AtomicI64>,
}

/// Classifies one parsed line. Pure, for the router and for tests.
pub fn classify(msg: Value) -> Classified {
    let Value::Object(mut map) = msg else { return Classified::Other(Incoming::Garbage("not an object".into())) };
    let params = map.remove("params").unwrap_or(Value::Null);
    match (map.remove("method"), map.remove("id")) {
        (Some(Value::String(method)), Some(id)) if id.is_number() || id.is_string() => {
            Classified::Other(Incoming::Request { id, method, params })
        }
        (Some(Value::String(method)), None) => Classified::Other(Incoming::Notification { method, params }),
        (None, Some(Value::Number(n))) if n.as_i64().is_some() => {
            let id = n.as_i64().unwrap_or_default();
            let outcome = match (map.remove("result"), map.remove("error")) {
                (_, Some(err)) => Err((
                    err.get("code").and_then(Value::as_i64).unwrap_or(0),
                    err.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned(),
                )),
                (Some(result), None) => Ok(result),
                (None, None) => Ok(Value::Null),
            };
            Classified::Response { id, outcome }
        }
        _ => Classified::Other(Incoming::Garbage("a JSON-RPC message without a usable method or id".into())),
    }
}

/// See [`classify`].
#[derive(Debug, Clone, PartialEq)]
pub enum Classified {
    /// An answer to our request `id`.
    Response {
        /// Our id.
        id: i64,
        /// The result, or the error's code and message.
        outcome: Result<Value, (i64, String)>,
    },
    /// Anything else.
    Other(Incoming),
}

impl Rpc {
    /// Starts routing `lines` (from the stdout reader): answers go to their waiters, the rest
    /// to the returned receiver. `outbox` feeds the stdin writer.
    pub fn start(
        mut lines: mpsc::Receiver<Read>,
        outbox: mpsc::UnboundedSender<Value>,
    ) -> (Rpc, mpsc::UnboundedReceiver<Incoming>, JoinHandle<()>) {
        let waiters: Waiters = Arc::new(Mutex::new(Some(HashMap::new())));
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let table = Arc::clone(&waiters);
        let router = crate::provider::io::spawn(async move {
            while let Some(read) = lines.recv().await {
                let other = match read {
                    Read::Json(msg) => match classify(msg) {
                        Classified::Response { id, outcome } => {
                            let waiter = table.lock().ok().and_then(|mut t| t.as_mut().and_then(|t| t.remove(&id)));
                            if let Some(waiter) = waiter {
                                let _ = waiter.send(outcome.map_err(|(code, message)| RpcError::Remote {
                                    method: String::new(),
                                    code,
                                    message,
                                }));
                            }
                            continue;
                        }
                        Classified::Other(other) => other,
                    },
                    Read::Garbage(text) => Incoming::Garbage(text),
                    Read::TooLong => Incoming::Garbage("a line longer than the bridge accepts".into()),
                };
                // Nobody listening (a short-lived model listing): answers still get routed.
                let _ = incoming_tx.send(other);
            }
            // Output ended: every pending request fails now (dropping a waiter's sender is
            // seen as a disconnect), and later requests fail at once.
            if let Ok(mut t) = table.lock() {
                t.take();
            }
        });
        (Rpc { outbox, waiters, next_id: Arc::new(AtomicI64::new(1)) }, incoming, router)
    }

    /// Calls `method` and waits for its answer, at most `within`.
    pub async fn call(&self, method: &str, params: Value, within: Duration) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut table = self.waiters.lock().map_err(|_| RpcError::Disconnected(method.to_owned()))?;
            let Some(table) = table.as_mut() else { return Err(RpcError::Disconnected(method.to_owned())) };
            table.insert(id, tx);
        }
        if self.outbox.send(json!({ "method": method, "id": id, "params": params })).is_err() {
            self.forget(id);
            return Err(RpcError::Disconnected(method.to_owned()));
        }
        match tokio::time::timeout(within, rx).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(RpcError::Remote { code, message, .. }))) => {
                Err(RpcError::Remote { method: method.to_owned(), code, message })
            }
            Ok(Ok(Err(other))) => Err(other),
            Ok(Err(_)) => Err(RpcError::Disconnected(method.to_owned())),
            Err(_) => {
                self.forget(id);
                Err(RpcError::Timeout(method.to_owned()))
            }
        }
    }

    fn forget(&self, id: i64) {
        if let Ok(mut t) = self.waiters.lock()
            && let Some(t) = t.as_mut()
        {
            t.remove(&id);
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Option<Value>) {
        let msg = match params {
            Some(params) => json!({ "method": method, "params": params }),
            None => json!({ "method": method }),
        };
        let _ = self.outbox.send(msg);
    }

    /// Answers a server request.
    pub fn respond(&self, id: &Value, result: Value) {
        let _ = self.outbox.send(json!({ "id": id, "result": result }));
    }

    /// Refuses a server request.
    pub fn respond_error(&self, id: &Value, code: i64, message: &str) {
        let _ = self.outbox.send(json!({ "id": id, "error": { "code": code, "message": message } }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_requests_and_our_responses_never_mix() {
        // The server's request id 1 and our response id 1 are different things.
        let req = classify(json!({"method": "item/tool/requestUserInput", "id": 1, "params": {}}));
        assert!(matches!(req, Classified::Other(Incoming::Request { ref id, .. }) if id == &json!(1)));
        let resp = classify(json!({"id": 1, "result": {"ok": true}}));
        assert_eq!(resp, Classified::Response { id: 1, outcome: Ok(json!({"ok": true})) });
        let err = classify(json!({"id": 2, "error": {"code": -32600, "message": "Not initialized"}}));
        assert_eq!(err, Classified::Response { id: 2, outcome: Err((-32600, "Not initialized".into())) });
        let string_id = classify(json!({"method": "x", "id": "abc"}));
        assert!(matches!(string_id, Classified::Other(Incoming::Request { .. })));
        assert!(matches!(classify(json!({"id": "abc", "result": 1})), Classified::Other(Incoming::Garbage(_))));
        assert!(matches!(classify(json!([1])), Classified::Other(Incoming::Garbage(_))));
    }

    #[tokio::test]
    async fn end_of_output_fails_every_pending_request_at_once() {
        let (lines_tx, lines) = mpsc::channel(8);
        let (outbox, mut sent) = mpsc::unbounded_channel();
        let (rpc, _incoming, router) = Rpc::start(lines, outbox);
        let a = tokio::spawn({
            let rpc = rpc.clone();
            async move { rpc.call("initialize", json!({}), Duration::from_secs(60)).await }
        });
        let b = tokio::spawn({
            let rpc = rpc.clone();
            async move { rpc.call("thread/start", json!({}), Duration::from_secs(60)).await }
        });
        // Both requests are on the wire, then the output ends.
        let _ = sent.recv().await;
        let _ = sent.recv().await;
        drop(lines_tx);
        router.await.unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(a.await.unwrap(), Err(RpcError::Disconnected(_))));
        assert!(matches!(b.await.unwrap(), Err(RpcError::Disconnected(_))));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(matches!(rpc.call("late", json!({}), Duration::from_secs(60)).await, Err(RpcError::Disconnected(_))));
    }

    #[tokio::test]
    async fn answers_reach_their_caller_and_requests_go_to_the_driver() {
        let (lines_tx, lines) = mpsc::channel(8);
        let (outbox, mut sent) = mpsc::unbounded_channel();
        let (rpc, mut incoming, _router) = Rpc::start(lines, outbox);
        let call = tokio::spawn({
            let rpc = rpc.clone();
            async move { rpc.call("model/list", json!({}), Duration::from_secs(5)).await }
        });
        let out = sent.recv().await.unwrap();
        assert!(out.get("jsonrpc").is_none());
        let id = out["id"].as_i64().unwrap();
        lines_tx.send(Read::Json(json!({"method": "x/y", "id": id, "params": {"a": 1}}))).await.unwrap();
        lines_tx.send(Read::Json(json!({"id": id, "result": {"data": []}}))).await.unwrap();
        assert_eq!(call.await.unwrap(), Ok(json!({"data": []})));
        let Some(Incoming::Request { id: server_id, method, .. }) = incoming.recv().await else { panic!() };
        assert_eq!((server_id, method.as_str()), (json!(id), "x/y"));
    }
}
