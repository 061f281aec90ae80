//! Direct tool calls: the common request — a `tools/call` of a legacy protocol revision
//! (2025-03-26 … 2025-11-25) with no `_meta` — is answered here rather than by rmcp's
//! stateless transport, which builds a service with its channels and tasks for every POST and
//! re-encodes the bridge's result twice (as `structuredContent`, and as the text content).
//!
//! The request is rmcp's own parsed message; the bridge call is the handler's; only the answer
//! is written here: the bridge's result goes into it as the JSON text it came as, once as
//! `structuredContent` and once, escaped, as the text content — the bytes rmcp's path writes
//! for the same result (`tests::direct` in this crate's tests compares the two paths on every
//! kind of answer). A request is direct only where rmcp's checks are known to pass and its
//! answer is one JSON message: anything else (another method or revision, `_meta`, an
//! `Origin`, an unusual `Accept`) goes to rmcp, which answers or refuses it as before.
//!
//! What it saves, measured by the calls benchmark (`bench/README.md`, custom machinery; release,
//! 16 connections, front and bridge on one CPU, 2026-12-06): with rmcp answering every call
//! instead, 39 % fewer calls/s (9,794 against 16,132) and 65 % more CPU per call (101 against
//! 61 µs; the front's own share 2.1×).

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use std::borrow::Cow;

use rmcp::model::{
    CallToolResult, ErrorData, JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerResult,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use bridge_proto::methods::{CallParams, McpPath, Surface};

use crate::handler::{Failure, Front, tool_error};

/// The protocol revisions a direct call may name in `MCP-Protocol-Version` (none means
/// 2025-03-26): the ones whose requests carry no per-request metadata.
const LEGACY: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// An eligible call: the request's id, the tool and its arguments.
#[derive(Debug)]
pub struct DirectCall {
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
}

/// How a direct call ended.
pub enum Outcome {
    /// The answer to send.
    Answer(Response),
    /// The bridge refused the credential (the guard answers 401).
    Unauthenticated(String),
}

/// The call in `body` when it is a plain legacy `tools/call` that rmcp would answer with one
/// JSON message: headers of a legacy revision (and nothing that makes rmcp look closer), and a
/// body of exactly `{jsonrpc: "2.0", id, method: "tools/call", params: {name, arguments?}}` —
/// read in one typed pass, which accepts nothing rmcp's reading would not take as that very
/// call (the tests check it on generated bodies). Otherwise rmcp reads the request itself.
pub fn plain(headers: &HeaderMap, body: &[u8]) -> Option<DirectCall> {
    if !legacy_version(headers) || headers.contains_key(header::ORIGIN) || !accepts_json_and_sse(headers) {
        return None;
    }
    let call: PlainCall<'_> = serde_json::from_slice(body).ok()?;
    (call.method == "tools/call").then(|| DirectCall {
        id: call.id,
        name: call.params.name.into_owned(),
        arguments: call.params.arguments.unwrap_or_default(),
    })
}

/// The one body shape answered directly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall<'a> {
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: PlainParams<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
}

impl DirectCall {
    /// The request's id as JSON (for the guard's refusals).
    pub fn id_value(&self) -> Value {
        serde_json::to_value(&self.id).unwrap_or(Value::Null)
    }
}

/// At most one `MCP-Protocol-Version`, and a legacy one (or none).
fn legacy_version(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all("mcp-protocol-version").iter();
    match (values.next(), values.next()) {
        (None, _) => true,
        (Some(v), None) => v.to_str().is_ok_and(|v| LEGACY.contains(&v)),
        _ => false,
    }
}

/// Whether `Accept` plainly lists both JSON and SSE, as rmcp requires (after the guard's
/// quirks completed it): entries without quotes or quality parameters. Anything less plain is
/// left to rmcp's own reading.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { return false };
        if value.contains('"') {
            return false;
        }
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or("").trim();
            if parts.any(|p| p.split_once('=').is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("q"))) {
                return false;
            }
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// Makes the bridge call for `call` with the caller's `credential` on `path`, and writes the
/// answer rmcp would.
pub async fn answer(front: &Front, call: DirectCall, credential: Option<String>, path: McpPath) -> Outcome {
    let DirectCall { id, name, arguments } = call;
    let params = CallParams { credential, surface: Surface::Mcp, path, client: None, name, arguments };
    match front.call_raw(&params).await {
        Ok(result) if result.get().starts_with('{') => Outcome::Answer(spliced(&id, &result)),
        Ok(other) => {
            // Not an object (no tool answers so today): rmcp's shape, built by rmcp's types.
            let value = serde_json::from_str(other.get()).unwrap_or(Value::Null);
            Outcome::Answer(tool_result(id, CallToolResult::structured(json!({ "result": value }))))
        }
        Err(Failure::Unauthenticated(message)) => Outcome::Unauthenticated(message),
        Err(Failure::UnknownTool(message)) => Outcome::Answer(message_response(&ServerJsonRpcMessage::error(
            ErrorData::invalid_params(message, None),
            Some(id),
        ))),
        Err(Failure::Error { code, message }) => Outcome::Answer(tool_result(id, tool_error(&code, &message))),
    }
}

/// A tool result as rmcp answers a legacy peer (no `resultType`, object output only).
fn tool_result(id: RequestId, result: CallToolResult) -> Response {
    let mut result = ServerResult::CallToolResult(result);
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    message_response(&ServerJsonRpcMessage::Response(JsonRpcResponse { jsonrpc: JsonRpcVersion2_0, id, result }))
}

/// The success of a tool whose result is the JSON object `result`, written around its text.
fn spliced(id: &RequestId, result: &RawValue) -> Response {
    #[derive(Serialize)]
    struct Envelope<'a> {
        jsonrpc: &'static str,
        id: &'a RequestId,
        result: ToolBody<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ToolBody<'a> {
        content: [Text<'a>; 1],
        structured_content: &'a RawValue,
        is_error: bool,
    }
    #[derive(Serialize)]
    struct Text<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        result: ToolBody {
            content: [Text { kind: "text", text: result.get() }],
            structured_content: result,
            is_error: false,
        },
    };
    // The result twice (once as text, escaped) and the envelope: written without regrowing.
    let mut bytes = Vec::with_capacity(2 * result.get().len() + 160);
    match serde_json::to_writer(&mut bytes, &envelope) {
        Ok(()) => json_response(bytes),
        Err(e) => json_response(
            serde_json::to_vec(&ServerJsonRpcMessage::error(
                ErrorData::internal_error(e.to_string(), None),
                Some(id.clone()),
            ))
            .unwrap_or_default(),
        ),
    }
}

fn message_response(message: &ServerJsonRpcMessage) -> Response {
    match serde_json::to_vec(message) {
        Ok(bytes) => json_response(bytes),
        Err(e) => {
            tracing::error!(cause = %e, "cannot encode an answer");
            let mut response = Response::new(Body::from("cannot encode the answer"));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

fn json_response(bytes: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(bytes));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;
