//! One connection: peer credentials checked before anything is read, then one request per
//! line, answered in order. A malformed line is answered and the connection stays usable; a
//! line over 1 MiB is answered and the connection is closed (its rest cannot be trusted).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use super::PeerPolicy;
use crate::error::ToolError;
use crate::registry::Registry;
use crate::registry::auth::Peer;
use bridge_proto::envelope::{ErrorBody, Request, Response};
use bridge_proto::framing::{Line, read_line};
use bridge_proto::methods::{self, CallParams, HealthParams, ListParams};
use bridge_proto::{MAX_LINE_BYTES, codes};

pub(super) async fn handle(stream: UnixStream, registry: Arc<Registry>, policy: PeerPolicy, stop: CancellationToken) {
    let cred = match stream.peer_cred() {
        Ok(cred) => cred,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot read peer credentials; closing");
            return;
        }
    };
    let mut peer = Peer::outside(cred.uid(), cred.gid());
    let (read, mut write) = stream.into_split();
    if !policy.allows(&peer) {
        tracing::warn!(uid = peer.uid, gid = peer.gid, "refused a peer");
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
    loop {
        let line = tokio::select! {
            line = read_line(&mut reader, &mut buf, MAX_LINE_BYTES) => line,
            _ = stop.cancelled() => return,
        };
        let (response, close) = match line {
            Ok(Line::Complete) => (answer(&registry, &buf, &peer).await, false),
            Ok(Line::TooLong) => (
                Response::Err {
                    request_id: None,
                    error: ErrorBody::new(
                        codes::REQUEST_TOO_LARGE,
                        format!("request lines are limited to {MAX_LINE_BYTES} bytes"),
                    ),
                },
                true,
            ),
            Ok(Line::Eof | Line::Truncated) | Err(_) => return,
        };
        if write.write_all(&response.to_line()).await.is_err() || close {
            return;
        }
    }
}

async fn answer(registry: &Registry, line: &[u8], peer: &Peer) -> Response {
    let request = match Request::parse(line) {
        Ok(r) => r,
        Err(rejected) => return Response::Err { request_id: rejected.request_id, error: rejected.error },
    };
    let id = request.request_id.clone();
    match dispatch(registry, request, peer).await {
        Ok(result) => Response::Ok { request_id: id, result },
        Err(error) => Response::Err { request_id: Some(id), error },
    }
}

fn params<T: serde::de::DeserializeOwned>(method: &str, params: Map<String, Value>) -> Result<T, ErrorBody> {
    serde_json::from_value(Value::Object(params)).map_err(|e| {
        ErrorBody::new(codes::INVALID_REQUEST, format!("{method} parameters do not match the protocol: {e}"))
    })
}

fn tool_error(e: ToolError) -> ErrorBody {
    ErrorBody::new(e.code, e.message)
}

async fn dispatch(registry: &Registry, request: Request, peer: &Peer) -> Result<Value, ErrorBody> {
    match request.method.as_str() {
        methods::BRIDGE_HEALTH => {
            let _: HealthParams = params(methods::BRIDGE_HEALTH, request.params)?;
            let tasks = &registry.services().tasks;
            Ok(json!({
                "status": "ok",
                "version": env!("CARGO_PKG_VERSION"),
                "protocol_version": bridge_proto::PROTOCOL_VERSION,
                "active_tasks": tasks.active_count(),
                "containment": tasks.providers().containment().caller_json(),
            }))
        }
        methods::CAPABILITIES_LIST => {
            let p: ListParams = params(methods::CAPABILITIES_LIST, request.params)?;
            registry.list(&p, peer).map_err(tool_error)
        }
        methods::CAPABILITIES_CALL => {
            let p: CallParams = params(methods::CAPABILITIES_CALL, request.params)?;
            registry.call(p, peer).await.map_err(tool_error)
        }
        other => Err(ErrorBody::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method {:?}", other.chars().take(64).collect::<String>()),
        )),
    }
}
