//! One connection: peer credentials checked before anything is read, then one request per
//! line, answered in order. A malformed line is answered and the connection stays usable; a
//! line over 1 MiB, or one not whole within the line bound of its first byte, is answered and
//! the connection is closed (its rest cannot be trusted), and so is one that leaves an answer
//! unread past the write bound. An idle connection closes silently after the idle bound or
//! when a newcomer displaces it (a pooled client reconnects); one displaced mid-line is
//! answered `BRIDGE_BUSY`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::slots::{Slot, State};
use super::{PeerPolicy, SocketLimits};
use crate::error::ToolError;
use crate::registry::auth::Peer;
use crate::registry::{Registry, Reply};
use bridge_proto::envelope::{ErrorBody, IncomingRequest, Response};
use bridge_proto::framing::{Line, LineBounds, Timed, read_line_timed};
use bridge_proto::methods::{self, CallParams, HealthParams, ListParams};
use bridge_proto::{MAX_LINE_BYTES, codes};

/// Connections accepted since the bridge started (the span's `n`).
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

pub(super) async fn handle(
    stream: UnixStream,
    registry: Arc<Registry>,
    policy: PeerPolicy,
    stop: CancellationToken,
    slot: Slot,
    limits: SocketLimits,
) {
    // Every log line of the connection carries its number and (once read) its peer (the span
    // is at error level so that it is on whatever the log level lets through).
    let span = tracing::error_span!(
        "conn",
        n = CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1,
        pid = tracing::field::Empty,
        uid = tracing::field::Empty
    );
    serve(stream, &registry, policy, &stop, &slot, limits).instrument(span).await;
    // The place in the table is freed only once the connection's descriptor is closed.
    drop(slot);
}

async fn serve(
    stream: UnixStream,
    registry: &Arc<Registry>,
    policy: PeerPolicy,
    stop: &CancellationToken,
    slot: &Slot,
    limits: SocketLimits,
) {
    let cred = match stream.peer_cred() {
        Ok(cred) => cred,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot read peer credentials; closing");
            return;
        }
    };
    let span = tracing::Span::current();
    span.record("uid", cred.uid());
    if let Some(pid) = cred.pid() {
        span.record("pid", pid);
    }
    let mut peer = Peer::outside(cred.uid(), cred.gid());
    let (read, mut write) = stream.into_split();
    if !policy.allows(&peer) {
        tracing::warn!(gid = peer.gid, "refused a peer");
        let refusal = Response::Err {
            request_id: None,
            error: ErrorBody::new(codes::PEER_NOT_AUTHORIZED, "this user may not talk to the bridge"),
        };
        let _ = write.write_all(&refusal.to_line()).await;
        return;
    }
    // Decided once per connection: a task's own process never speaks for anyone here. Tasks
    // run as the bridge's own user; an allowed peer of another user (a container) is none.
    let own_uid = nix::unistd::geteuid().as_raw();
    let (pid, bridge) = (cred.pid().filter(|_| cred.uid() == own_uid), std::process::id() as i32);
    let cgroups = registry.services().tasks.providers().containment().cgroups().cloned();
    peer.in_task =
        tokio::task::spawn_blocking(move || crate::provider::peers::task_origin(pid, bridge, cgroups.as_ref()))
            .await
            .unwrap_or(Some(crate::provider::peers::TaskOrigin { task_id: None, evidence: "unknown_pid" }));
    if let Some(origin) = &peer.in_task {
        tracing::warn!(
            task_id = origin.task_id,
            evidence = origin.evidence,
            "a task's process connected to the socket; every call it makes is refused"
        );
    }
    let mut reader = BufReader::new(read);
    let mut buf = Vec::new();
    let bounds = LineBounds { idle: limits.idle, line: limits.line };
    loop {
        if !slot.set(State::Idle) {
            return;
        }
        let read = read_line_timed(&mut reader, &mut buf, MAX_LINE_BYTES, bounds, || {
            slot.set(State::Reading);
        });
        let line = tokio::select! {
            line = read => line,
            _ = slot.evicted() => {
                if slot.state() == State::Reading {
                    let _ = tokio::time::timeout(limits.write, write.write_all(&displaced().to_line())).await;
                }
                return;
            }
            _ = stop.cancelled() => return,
        };
        let (response, close) = match line {
            Ok(Timed::Line(Line::Complete)) if slot.set(State::Busy) => (answer(registry, &buf, &peer).await, false),
            Ok(Timed::Line(Line::Complete)) => (displaced().to_line(), true),
            Ok(Timed::Line(Line::TooLong)) => (
                refusal(codes::REQUEST_TOO_LARGE, format!("request lines are limited to {MAX_LINE_BYTES} bytes"))
                    .to_line(),
                true,
            ),
            Ok(Timed::Slow) => (
                refusal(
                    codes::REQUEST_TIMED_OUT,
                    format!(
                        "a request line must arrive whole within {} s of its first byte",
                        limits.line.as_secs_f64()
                    ),
                )
                .to_line(),
                true,
            ),
            Ok(Timed::Idle) => {
                tracing::debug!(idle_seconds = limits.idle.as_secs(), "closing an idle connection");
                return;
            }
            Ok(Timed::Line(Line::Eof | Line::Truncated)) | Err(_) => return,
        };
        // A client that leaves its answer unread holds the connection no longer than the bound.
        let sent = tokio::time::timeout(limits.write, write.write_all(&response)).await;
        if !matches!(sent, Ok(Ok(()))) || close {
            return;
        }
    }
}

/// The answer to a connection displaced mid-line by a newcomer at the cap.
fn displaced() -> Response {
    refusal(codes::BRIDGE_BUSY, "the bridge needed this connection for another client; try again")
}

/// An error line that answers no particular request.
fn refusal(code: &str, message: impl Into<String>) -> Response {
    Response::Err { request_id: None, error: ErrorBody::new(code, message) }
}

/// The answer line to one request line.
async fn answer(registry: &Registry, line: &[u8], peer: &Peer) -> Vec<u8> {
    let request = match IncomingRequest::parse(line) {
        Ok(r) => r,
        Err(rejected) => return Response::Err { request_id: rejected.request_id, error: rejected.error }.to_line(),
    };
    let id = request.request_id.clone();
    match dispatch(registry, request, peer).await {
        Ok(result) => Response::ok_line(&id, &result),
        Err(error) => Response::Err { request_id: Some(id), error }.to_line(),
    }
}

fn params<T: serde::de::DeserializeOwned>(method: &str, params: &RawValue) -> Result<T, ErrorBody> {
    serde_json::from_str(params.get()).map_err(|e| {
        ErrorBody::new(codes::INVALID_REQUEST, format!("{method} parameters do not match the protocol: {e}"))
    })
}

fn tool_error(e: ToolError) -> ErrorBody {
    ErrorBody::new(e.code, e.message)
}

async fn dispatch(registry: &Registry, request: IncomingRequest, peer: &Peer) -> Result<Reply, ErrorBody> {
    match request.method.as_str() {
        methods::BRIDGE_HEALTH => {
            let _: HealthParams = params(methods::BRIDGE_HEALTH, &request.params)?;
            let tasks = &registry.services().tasks;
            Ok(Reply::Tree(json!({
                "status": "ok",
                "version": env!("CARGO_PKG_VERSION"),
                "protocol_version": bridge_proto::PROTOCOL_VERSION,
                "active_tasks": tasks.active_count(),
                "watched_tasks": tasks.watched(),
                "containment": tasks.providers().containment().caller_json(),
            })))
        }
        methods::OAUTH_METADATA => {
            let _: methods::OauthMetadataParams = params(methods::OAUTH_METADATA, &request.params)?;
            let Some(verifier) = registry.services().auth.oauth() else {
                return Err(ErrorBody::new(
                    codes::OAUTH_NOT_CONFIGURED,
                    "this bridge takes no OAuth tokens (SERVERFS_MCP_OAUTH_ISSUER is unset)",
                ));
            };
            let config = verifier.config();
            let metadata = methods::OauthMetadata {
                resource: config.resource.clone(),
                resource_metadata: config.metadata_url(),
                scope: config.scopes.join(" "),
                document: verifier.metadata_document(),
            };
            serde_json::to_value(metadata)
                .map(Reply::Tree)
                .map_err(|e| ErrorBody::new(codes::BRIDGE_PROTOCOL_ERROR, format!("cannot encode the metadata: {e}")))
        }
        methods::CAPABILITIES_LIST => {
            let p: ListParams = params(methods::CAPABILITIES_LIST, &request.params)?;
            registry.list(&p, peer).await.map(Reply::Tree).map_err(tool_error)
        }
        methods::CAPABILITIES_CALL => {
            let p: CallParams = params(methods::CAPABILITIES_CALL, &request.params)?;
            registry.call(p, peer).await.map_err(tool_error)
        }
        other => Err(ErrorBody::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method {:?}", other.chars().take(64).collect::<String>()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncWriteExt, BufReader};

    use super::*;

    const BOUNDS: LineBounds = LineBounds { idle: Duration::from_secs(600), line: Duration::from_secs(10) };

    /// Writes `parts`, each after its pause, on one end of a pipe; reads one line on the other.
    async fn read_after(parts: &'static [(u64, &'static [u8])]) -> (Timed, Vec<u8>, bool) {
        let (client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            let mut client = client;
            for (pause, bytes) in parts {
                tokio::time::sleep(Duration::from_secs(*pause)).await;
                client.write_all(bytes).await.unwrap();
            }
            // Held open: the reader's bounds, not an end of stream, decide.
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        let (mut reader, mut buf, mut started) = (BufReader::new(server), Vec::new(), false);
        let line = read_line_timed(&mut reader, &mut buf, 1024, BOUNDS, || started = true).await.unwrap();
        writer.abort();
        (line, buf, started)
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_wait_below_the_bound_then_a_prompt_line_is_read() {
        let (line, buf, started) = read_after(&[(599, b"{\"a\":"), (9, b"1}\n")]).await;
        assert_eq!((line, buf.as_slice(), started), (Timed::Line(Line::Complete), &b"{\"a\":1}"[..], true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_that_stalls_past_the_bound_is_slow() {
        let (line, buf, started) = read_after(&[(5, b"{\"a\":"), (11, b"1}\n")]).await;
        assert_eq!((line, buf.as_slice(), started), (Timed::Slow, &b"{\"a\":"[..], true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_silent_past_the_idle_bound_is_idle() {
        let before = tokio::time::Instant::now();
        let (line, _, started) = read_after(&[(601, b"late\n")]).await;
        assert_eq!((line, started), (Timed::Idle, false));
        assert_eq!(before.elapsed(), Duration::from_secs(600));
    }
}
