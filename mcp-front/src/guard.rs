//! The HTTP checks in front of the MCP service, in order: Host and Origin (403), method
//! (405), content type (415), body size (413), a single well-formed JSON-RPC message (400 with
//! a JSON-RPC error), one narrow client quirk, then the MCP service itself; a credential the
//! bridge refused turns the answer into a 401.
//!
//! `/mcp` and `/mcp-oauth` pass the same checks; the path goes to the bridge with the
//! credential, and a refusal on `/mcp-oauth` carries the OAuth challenge ([`crate::oauth`]).
//!
//! Nothing here decides who may do what: the caller's `Authorization` header goes to the
//! bridge untouched, and the only thing the front learns back is "unauthenticated".

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use serde_json::{Value, json};

use bridge_proto::methods::McpPath;

use crate::bridge::Bridge;
use crate::config::{Config, MAX_BODY_BYTES};
use crate::handler::{AuthOutcome, Front};
use crate::origin::{normalize_origin, parse_authority};

/// The MCP service behind the guard.
pub type McpService = StreamableHttpService<Front, NeverSessionManager>;

/// The guard's state: the host and origin policy and the MCP service.
pub struct Guard {
    /// Accepted Host authorities (`None`: any Host, for a front bound to a public address
    /// with no list configured).
    hosts: Option<Vec<(String, Option<u16>)>>,
    /// Accepted origins, normalized.
    origins: Vec<(String, String, u16)>,
    /// The MCP service.
    service: McpService,
    /// The bridge (for the OAuth metadata of a refusal).
    bridge: Arc<Bridge>,
    /// The handler, for direct tool calls.
    front: Front,
    /// Whether eligible tool calls are answered directly ([`crate::direct`]).
    direct: bool,
}

impl Guard {
    /// The guard for `config` in front of `service`; with `direct`, eligible tool calls are
    /// answered without the service ([`crate::direct`]).
    pub fn new(config: &Config, service: McpService, bridge: Arc<Bridge>, direct: bool) -> Guard {
        let mut hosts: Vec<String> = config.allowed_hosts.clone();
        if config.is_loopback() {
            hosts.extend(["localhost", "127.0.0.1", "::1"].map(str::to_owned));
        }
        let ip = config.listen.ip();
        if !ip.is_unspecified() {
            hosts.push(ip.to_string());
        }
        // Bound to a public or unspecified address with no list: the operator's proxy or tunnel
        // decides what reaches us.
        let enforce = config.is_loopback() || !config.allowed_hosts.is_empty();
        let hosts = enforce.then(|| hosts.iter().filter_map(|h| parse_authority(h)).collect());
        let origins = allowed_origins(config);
        let front = Front::new(Arc::clone(&bridge));
        Guard { hosts, origins, service, bridge, front, direct }
    }

    /// The bridge client.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// Whether the request's Host is one this front answers for.
    pub fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(allowed) = &self.hosts else {
            return true;
        };
        let Some((host, port)) = headers.get(header::HOST).and_then(|v| v.to_str().ok()).and_then(parse_authority)
        else {
            return false;
        };
        allowed.iter().any(|(h, p)| *h == host && p.is_none_or(|p| Some(p) == port))
    }

    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let Some(value) = values.next() else {
            return true;
        };
        if values.next().is_some() {
            return false;
        }
        value.to_str().ok().and_then(normalize_origin).is_some_and(|o| self.origins.contains(&o))
    }
}

/// The origins a browser page may call from: the configured ones and, on loopback, the
/// front's own (`http://localhost:PORT` and the loopback addresses), normalized.
pub fn allowed_origins(config: &Config) -> Vec<(String, String, u16)> {
    let mut origins: Vec<_> = config.allowed_origins.iter().filter_map(|o| normalize_origin(o)).collect();
    if config.is_loopback() {
        let port = config.listen.port();
        for host in ["localhost", "127.0.0.1", "::1"] {
            origins.push(("http".to_owned(), host.to_owned(), port));
        }
    }
    origins
}

/// `/mcp`, every method: API keys (or tunnel mode).
pub async fn mcp(State(guard): State<Arc<Guard>>, request: Request) -> Response {
    handle(&guard, request, McpPath::Keys).await
}

/// `/mcp-oauth`, every method: the identity provider's access tokens.
pub async fn mcp_oauth(State(guard): State<Arc<Guard>>, request: Request) -> Response {
    handle(&guard, request, McpPath::Oauth).await
}

async fn handle(guard: &Guard, request: Request, path: McpPath) -> Response {
    let headers = request.headers();
    if !guard.host_allowed(headers) {
        tracing::warn!(host = ?headers.get(header::HOST), "refused a request for a foreign Host (possible DNS rebinding)");
        return rpc_error(StatusCode::FORBIDDEN, Value::Null, -32600, "Forbidden: the Host header is not allowed");
    }
    if !guard.origin_allowed(headers) {
        tracing::warn!(origin = ?headers.get(header::ORIGIN), "refused a request from an origin that is not allowed");
        return rpc_error(StatusCode::FORBIDDEN, Value::Null, -32600, "Forbidden: the Origin header is not allowed");
    }
    if request.method() != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "Method Not Allowed: this server is stateless and takes POST only\n",
        )
            .into_response();
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json")));
    if !is_json {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Value::Null,
            -32600,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) if is_length_limit(&e) => return too_large(),
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32600,
                &format!("cannot read the request body: {e}"),
            );
        }
    };
    crate::quirks::complete_accept(&mut parts.headers);
    if guard.direct
        && let Some(call) = crate::direct::plain(&parts.headers, &bytes)
    {
        return direct(guard, call, &parts.headers, path).await;
    }
    if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        return unreadable(&bytes, &e);
    }
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned().unwrap_or(Value::Null);
    crate::quirks::apply(&mut parts.headers, &value);
    let outcome = AuthOutcome::default();
    parts.extensions.insert(outcome.clone());
    parts.extensions.insert(path);
    let token_sent = parts.headers.get(header::AUTHORIZATION).is_some_and(|v| !v.as_bytes().trim_ascii().is_empty());
    let response = guard.service.handle(Request::from_parts(parts, Body::from(bytes))).await;
    if let Some(message) = outcome.refusal() {
        return match path {
            McpPath::Keys => unauthorized(id, message),
            McpPath::Oauth => unauthorized_oauth(guard, id, message, token_sent).await,
        };
    }
    let mut response = response.map(Body::new);
    if response.status().is_client_error() {
        response = as_rpc_error(response, id).await;
    }
    // Stateless: never hand out a session (rmcp does not in this mode; keep it that way).
    response.headers_mut().remove("mcp-session-id");
    response
}

/// The refusal of a body that is not a JSON-RPC message this server accepts, with the reason
/// and, when it can be read, the request's id.
fn unreadable(bytes: &[u8], message_error: &serde_json::Error) -> Response {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(e) => {
            return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, &format!("Parse error: {e}"));
        }
    };
    match &value {
        Value::Object(m) => {
            let id = m.get("id").filter(|id| id.is_string() || id.is_number()).cloned().unwrap_or(Value::Null);
            rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                -32600,
                &format!("Invalid Request: not a JSON-RPC 2.0 message this server accepts: {message_error}"),
            )
        }
        Value::Array(_) => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "Invalid Request: batches are not supported; send one JSON-RPC message per POST",
        ),
        _ => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "Invalid Request: the body must be one JSON-RPC message object",
        ),
    }
}

/// A direct tool call ([`crate::direct`]): the same credential handling as rmcp's path.
async fn direct(guard: &Guard, call: crate::direct::DirectCall, headers: &HeaderMap, path: McpPath) -> Response {
    let credential = headers.get(header::AUTHORIZATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let token_sent = headers.get(header::AUTHORIZATION).is_some_and(|v| !v.as_bytes().trim_ascii().is_empty());
    let id = call.id_value();
    match crate::direct::answer(&guard.front, call, credential, path).await {
        crate::direct::Outcome::Answer(response) => response,
        crate::direct::Outcome::Unauthenticated(message) => match path {
            McpPath::Keys => unauthorized(id, &message),
            McpPath::Oauth => unauthorized_oauth(guard, id, &message, token_sent).await,
        },
    }
}

/// The longest refusal body of the MCP service that is read to rewrite it.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// The MCP service's own refusals (406 for a missing `Accept`, 400 for a bad
/// `MCP-Protocol-Version`, …) come as plain text or as JSON-RPC errors without an `id`: every
/// 4xx of `/mcp` leaves as a JSON-RPC error carrying the request's id, the service's code and
/// message kept where it gave them (a message is clipped and loses control characters).
async fn as_rpc_error(response: Response, id: Value) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_REFUSAL_BYTES).await.unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    let complete = parsed.as_ref().is_some_and(|v| {
        v["error"]["code"].is_i64() && v["error"]["message"].is_string() && v.get("id").is_some_and(|i| !i.is_null())
    });
    if complete {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let (code, message) = match parsed.as_ref().and_then(|v| v.get("error")) {
        Some(error) => (
            error["code"].as_i64().unwrap_or(-32600),
            error["message"].as_str().unwrap_or("Invalid Request").to_owned(),
        ),
        None => (-32600, String::from_utf8_lossy(&bytes).trim().to_owned()),
    };
    let message: String = message.chars().filter(|c| !c.is_control()).take(300).collect();
    let message =
        if message.is_empty() { parts.status.canonical_reason().unwrap_or("Bad Request").to_owned() } else { message };
    let mut rewritten = rpc_error(parts.status, id, code, &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rewritten
}

/// The 401 every missing, malformed, unknown or revoked credential gets: a bearer challenge
/// with a realm and nothing that points a client to OAuth.
fn unauthorized(id: Value, message: &str) -> Response {
    let mut response = rpc_error(
        StatusCode::UNAUTHORIZED,
        id,
        -32600,
        &format!("{}: {message}", bridge_proto::codes::UNAUTHENTICATED),
    );
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"agent-bridge\""));
    response
}

/// The 401 of `/mcp-oauth`: the bearer challenge that leads a client to the metadata and its
/// identity provider; 404 when the bridge takes no OAuth (the path does not exist).
async fn unauthorized_oauth(guard: &Guard, id: Value, message: &str, token_sent: bool) -> Response {
    let metadata = match crate::oauth::metadata(guard).await {
        Ok(metadata) => metadata,
        Err(crate::oauth::Unavailable::NotConfigured) => return crate::oauth::not_found(),
        Err(crate::oauth::Unavailable::Bridge(why)) => {
            tracing::warn!(cause = %why, "the bridge did not give the OAuth metadata for a challenge");
            return unauthorized(id, message);
        }
    };
    let mut response = rpc_error(
        StatusCode::UNAUTHORIZED,
        id,
        -32600,
        &format!("{}: {message}", bridge_proto::codes::UNAUTHENTICATED),
    );
    response.headers_mut().insert(header::WWW_AUTHENTICATE, crate::oauth::challenge(&metadata, token_sent, message));
    response
}

fn too_large() -> Response {
    let message = format!("Payload Too Large: the request body exceeds {MAX_BODY_BYTES} bytes");
    rpc_error(StatusCode::PAYLOAD_TOO_LARGE, Value::Null, -32600, &message)
}

/// Whether reading the body failed because it passed the limit given to `to_bytes` (whose
/// error wraps http-body-util's `LengthLimitError`), not for another reason.
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// A JSON-RPC error response with an HTTP status.
pub fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    let mut response = (status, Bytes::from(body.to_string())).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_body_limit_error_is_a_length_limit() {
        let over = axum::body::to_bytes(Body::from(vec![b'x'; 10]), 4).await.expect_err("over the limit");
        assert!(is_length_limit(&over), "{over}");
        assert!(axum::body::to_bytes(Body::from(vec![b'x'; 4]), 4).await.is_ok());
        // Another failure that merely says so is not one.
        let other = axum::Error::new(std::io::Error::other("length limit exceeded"));
        assert!(!is_length_limit(&other), "{other}");
    }
}
