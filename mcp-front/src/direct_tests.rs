//! The direct path against rmcp's: the same requests through the router with and without
//! direct tool calls, against a stand-in bridge on a real Unix socket; the answers must be the
//! same (status, content type, challenge, body — byte for byte where the bridge's result is
//! canonical JSON, as the bridge writes it). And what is eligible, and what is not.
#![allow(clippy::disallowed_methods, clippy::disallowed_types, reason = "a test: a socket in a temporary directory")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{HeaderMap, Request, header};
use proptest::prelude::*;
use rmcp::model::GetMeta;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tower::ServiceExt;

use bridge_proto::envelope::{ErrorBody, Request as BridgeRequest, Response as BridgeResponse};
use bridge_proto::framing::{Line, read_line};

use super::{accepts_json_and_sse, plain};
use crate::config::{Config, HttpLimits};

/// A task view with what a real one holds: nesting, nulls, unicode, escapes, a float, big
/// integers, a string that is itself JSON.
fn view(task_id: &str) -> Value {
    json!({
        "task_id": task_id, "status": "succeeded", "terminal": true, "runtime": "fake", "workdir": "repo",
        "path": "", "owner": "bench", "model": null, "created_at": "2026-12-05T10:00:00.000Z",
        "final_response": "done \"quoted\" é 😀 \\ back\nslash\t<tag>&\u{1}",
        "manifest": { "limits": { "task_timeout_seconds": 7200 }, "policy": [1, 2.5, -3, 9007199254740993i64] },
        "usage": { "cost_usd": 0.0123, "input_tokens": 12345678901u64 },
        "changes": { "files": [], "status": "read_only" },
        "error": null, "pending_request": null, "text_json": "{\"a\":[1,2]}",
    })
}

/// A bridge that answers by the tool's name and the credential (canonical JSON, as the
/// bridge's own serializer writes it).
async fn stand_in_bridge(path: PathBuf) {
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            while let Ok(Line::Complete) = read_line(&mut reader, &mut buf, bridge_proto::MAX_LINE_BYTES).await {
                let request = BridgeRequest::parse(&buf).expect("a request");
                let p = &request.params;
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                let good = p.get("credential").and_then(Value::as_str) == Some("Bearer good");
                let id = request.request_id.clone();
                let err = |code: &str, message: &str| BridgeResponse::Err {
                    request_id: Some(id.clone()),
                    error: ErrorBody::new(code, message),
                };
                let answer = if !good {
                    err("UNAUTHENTICATED", "the API key is not valid")
                } else if request.method == "capabilities.list" {
                    BridgeResponse::Ok { request_id: id.clone(), result: json!({ "tools": [] }) }
                } else {
                    match name {
                        "get_agent_task" => {
                            let task = p["arguments"]["task_id"].as_str().unwrap_or("agt_x");
                            BridgeResponse::Ok { request_id: id.clone(), result: view(task) }
                        }
                        "scalar" => BridgeResponse::Ok { request_id: id.clone(), result: json!(42) },
                        "missing" => err("AGENT_TASK_NOT_FOUND", "no such task <é>"),
                        _ => err("UNKNOWN_TOOL", &format!("unknown tool: {name}")),
                    }
                };
                if reader.get_mut().write_all(&answer.to_line()).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn config(socket: &Path) -> Config {
    Config {
        listen: "127.0.0.1:8765".parse().expect("addr"),
        bridge_socket: socket.to_owned(),
        bridge_timeout: Duration::from_secs(10),
        allowed_hosts: Vec::new(),
        allowed_origins: Vec::new(),
        tunnel_mode: false,
        require_bridge_dir: false,
        log_level: "info",
        http: HttpLimits::FRONT,
    }
}

struct Answer {
    status: u16,
    content_type: Option<String>,
    challenge: Option<String>,
    body: Vec<u8>,
}

async fn post(app: &Router, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut request = Request::builder().method("POST").uri("/mcp").header("host", "127.0.0.1:8765");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(body.to_string())).expect("request");
    let response = app.clone().oneshot(request).await.expect("answer");
    let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, content_type, challenge) =
        (response.status().as_u16(), header(header::CONTENT_TYPE), header(header::WWW_AUTHENTICATE));
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body").to_vec();
    Answer { status, content_type, challenge, body }
}

fn call(id: Value, name: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } })
}

/// Request headers, as pairs.
type Headers<'a> = Vec<(&'a str, &'a str)>;

const JSON_AND_SSE: (&str, &str) = ("accept", "application/json, text/event-stream");

#[tokio::test]
async fn the_direct_path_answers_exactly_as_rmcp_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("bridge.sock");
    let bridge = tokio::spawn(stand_in_bridge(socket.clone()));
    while !socket.exists() {
        tokio::task::yield_now().await;
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let direct = crate::server::router_with(&config(&socket), &shutdown, true);
    let rmcp = crate::server::router_with(&config(&socket), &shutdown, false);
    let good = ("authorization", "Bearer good");
    let json = ("content-type", "application/json");
    let cases: Vec<(&str, Headers, Value)> = vec![
        ("a result", vec![good, json, JSON_AND_SSE], call(json!(7), "get_agent_task", json!({ "task_id": "agt_1" }))),
        ("a string id", vec![good, json, JSON_AND_SSE], call(json!("req-é"), "get_agent_task", json!({}))),
        ("a large id", vec![good, json, JSON_AND_SSE], call(json!(9007199254740993i64), "get_agent_task", json!({}))),
        (
            "2025-03-26",
            vec![good, json, JSON_AND_SSE, ("mcp-protocol-version", "2025-03-26")],
            call(json!(1), "get_agent_task", json!({})),
        ),
        (
            "2025-11-25",
            vec![good, json, JSON_AND_SSE, ("mcp-protocol-version", "2025-11-25")],
            call(json!(1), "get_agent_task", json!({})),
        ),
        (
            "no arguments",
            vec![good, json, JSON_AND_SSE],
            json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": "get_agent_task" } }),
        ),
        ("a completed Accept", vec![good, json], call(json!(4), "get_agent_task", json!({}))),
        ("a tool error", vec![good, json, JSON_AND_SSE], call(json!(5), "missing", json!({}))),
        ("an unknown tool", vec![good, json, JSON_AND_SSE], call(json!(6), "nope", json!({}))),
        ("a non-object result", vec![good, json, JSON_AND_SSE], call(json!(8), "scalar", json!({}))),
        (
            "a bad key",
            vec![("authorization", "Bearer bad"), json, JSON_AND_SSE],
            call(json!(9), "get_agent_task", json!({})),
        ),
        ("no key", vec![json, JSON_AND_SSE], call(json!(10), "get_agent_task", json!({}))),
    ];
    for (what, headers, body) in cases {
        let a = post(&direct, &headers, &body).await;
        let b = post(&rmcp, &headers, &body).await;
        let text = |x: &Answer| String::from_utf8_lossy(&x.body).into_owned();
        assert_eq!((a.status, &a.content_type, &a.challenge), (b.status, &b.content_type, &b.challenge), "{what}");
        let (x, y): (Value, Value) =
            (serde_json::from_slice(&a.body).expect("JSON"), serde_json::from_slice(&b.body).expect("JSON"));
        assert_eq!(x, y, "{what}: direct {} / rmcp {}", text(&a), text(&b));
        assert_eq!(text(&a), text(&b), "{what}: the same bytes");
    }
    // No bridge at all: the same tool error from both paths.
    let gone = dir.path().join("gone.sock");
    let direct = crate::server::router_with(&config(&gone), &shutdown, true);
    let rmcp = crate::server::router_with(&config(&gone), &shutdown, false);
    let body = call(json!(11), "get_agent_task", json!({}));
    let (a, b) = (
        post(&direct, &[good, json, JSON_AND_SSE], &body).await,
        post(&rmcp, &[good, json, JSON_AND_SSE], &body).await,
    );
    assert_eq!((a.status, &a.body), (b.status, &b.body), "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("AGENT_BRIDGE_UNAVAILABLE"));
    bridge.abort();
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(http::HeaderName::from_bytes(name.as_bytes()).expect("name"), value.parse().expect("value"));
    }
    map
}

fn eligible(headers: &HeaderMap, body: Value) -> bool {
    plain(headers, body.to_string().as_bytes()).is_some()
}

#[test]
fn only_plain_legacy_tool_calls_are_direct() {
    let plain_call = || call(json!(1), "get_agent_task", json!({}));
    assert!(eligible(&headers(&[JSON_AND_SSE]), plain_call()));
    assert!(eligible(&headers(&[JSON_AND_SSE, ("mcp-protocol-version", "2025-06-18")]), plain_call()));
    // rmcp decides: a modern revision, two versions, an Origin, a quality value, no SSE.
    for refused in [
        headers(&[JSON_AND_SSE, ("mcp-protocol-version", "2026-07-28")]),
        headers(&[JSON_AND_SSE, ("mcp-protocol-version", "2025-11-25"), ("mcp-protocol-version", "2025-11-25")]),
        headers(&[JSON_AND_SSE, ("mcp-protocol-version", "1999-01-01")]),
        headers(&[JSON_AND_SSE, ("origin", "http://localhost:8765")]),
        headers(&[("accept", "application/json;q=0, text/event-stream")]),
        headers(&[("accept", "application/json")]),
        headers(&[("accept", "\"application/json\", text/event-stream")]),
    ] {
        assert!(!eligible(&refused, plain_call()), "{refused:?}");
    }
    // Per-request metadata (in the params, as rmcp reads it), another method, a notification,
    // a field rmcp would read more into.
    let ok = headers(&[JSON_AND_SSE]);
    for body in [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "x",
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } } }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "x", "inputResponses": {} } }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "x", "requestState": "s" } }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!({ "jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": { "name": "x" } }),
        json!({ "jsonrpc": "2.0", "id": null, "method": "tools/call", "params": { "name": "x" } }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "x", "arguments": [] } }),
    ] {
        assert!(!eligible(&ok, body.clone()), "{body}");
    }
}

/// A body of JSON-RPC-ish pieces: most are plain calls, many are near misses.
fn near_calls() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        Just(json!(1)),
        Just(json!("a\"b")),
        Just(json!(-7)),
        Just(json!(1.5)),
        Just(json!(18446744073709551615u64)),
        Just(json!(null)),
        Just(json!({})),
    ];
    let method = prop_oneof![Just("tools/call"), Just("tools/list"), Just("tools/cal"), Just("initialize")];
    let name = prop_oneof![Just(json!("get_agent_task")), Just(json!("")), Just(json!("é\u{1}")), Just(json!(3))];
    let arguments = prop_oneof![
        Just(None),
        Just(Some(json!(null))),
        Just(Some(json!({ "task_id": "agt_1", "n": [1, { "x": null }] }))),
        Just(Some(json!([1]))),
        Just(Some(json!("x"))),
    ];
    let extra = prop_oneof![
        Just(None),
        Just(Some(("_meta", json!({})))),
        Just(Some(("_meta", json!({ "progressToken": 1 })))),
        Just(Some(("task", json!({ "ttl": 1 })))),
        Just(Some(("inputResponses", json!({})))),
        Just(Some(("requestState", json!("x")))),
        Just(Some(("unknown", json!(1)))),
    ];
    let version = prop_oneof![Just(json!("2.0")), Just(json!("2.1")), Just(json!(2))];
    let top_extra = prop_oneof![
        Just(None),
        Just(Some(("result", json!(1)))),
        Just(Some(("error", json!({})))),
        Just(Some(("x", json!(1))))
    ];
    (version, id, method, name, arguments, extra, top_extra).prop_map(
        |(version, id, method, name, arguments, extra, top)| {
            let mut params = serde_json::Map::new();
            params.insert("name".into(), name);
            if let Some(a) = arguments {
                params.insert("arguments".into(), a);
            }
            if let Some((k, v)) = extra {
                params.insert(k.into(), v);
            }
            let mut body = json!({ "jsonrpc": version, "id": id, "method": method, "params": params });
            if let Some((k, v)) = top {
                body[k] = v;
            }
            body.to_string().into_bytes()
        },
    )
}

proptest::proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// What the direct path accepts, rmcp reads as that very call: a `tools/call` request with
    /// the same id, name and arguments, and no metadata or retry state.
    #[test]
    fn a_body_taken_directly_is_the_call_rmcp_reads(body in near_calls()) {
        let ok = headers(&[JSON_AND_SSE]);
        if let Some(direct) = plain(&ok, &body) {
            let message: rmcp::model::ClientJsonRpcMessage =
                serde_json::from_slice(&body).map_err(|e| TestCaseError::fail(format!("rmcp refuses it: {e}")))?;
            let rmcp::model::ClientJsonRpcMessage::Request(request) = message else {
                return Err(TestCaseError::fail("not a request for rmcp"));
            };
            prop_assert!(request.request.get_meta().is_empty());
            let rmcp::model::ClientRequest::CallToolRequest(call) = request.request else {
                return Err(TestCaseError::fail("not a tools/call for rmcp"));
            };
            prop_assert_eq!(&request.id, &direct.id);
            prop_assert_eq!(call.params.name.as_ref(), direct.name.as_str());
            prop_assert_eq!(call.params.arguments.unwrap_or_default(), direct.arguments);
            prop_assert!(call.params.meta.is_none() && call.params.input_responses.is_none() && call.params.request_state.is_none());
        }
    }
}

#[test]
fn accept_must_plainly_list_both() {
    assert!(accepts_json_and_sse(&headers(&[("accept", "text/event-stream ,APPLICATION/JSON")])));
    assert!(accepts_json_and_sse(&headers(&[("accept", "application/json"), ("accept", "text/event-stream")])));
    assert!(!accepts_json_and_sse(&headers(&[])));
    assert!(!accepts_json_and_sse(&headers(&[("accept", "*/*")])));
}
