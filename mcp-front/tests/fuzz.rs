//! Fuzz targets of the front (`fuzz/corpus/front/`: requests of the e2e tests and of real
//! clients): its HTTP layer in memory, fed mutated raw requests (method, path, headers, body)
//! and arbitrary generated ones, and its `.env` reading.
//!
//! Properties: nothing panics and every request gets an answer; no 5xx of the front's own
//! making (only `/healthz` says 503, without a bridge); on `/mcp` every 4xx but the 405 is a
//! JSON-RPC error object (`jsonrpc: "2.0"`, an integer `error.code`, a string
//! `error.message`) and every JSON answer is a JSON-RPC response; the `.env` reader and the
//! settings either give a usable config or a clear error.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test: it reads its corpus and writes its regressions"
)]

#[path = "../../fuzz/mutate.rs"]
mod mutate;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode, header};
use mcp_front::config::{Args, Config};
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;

use mutate::Corpus;

fn config() -> Config {
    Config {
        listen: "127.0.0.1:8765".parse().expect("addr"),
        bridge_socket: PathBuf::from("/nonexistent/agent-bridge-fuzz.sock"),
        bridge_timeout: Duration::from_secs(1),
        allowed_hosts: vec!["front.example".into()],
        allowed_origins: vec!["https://chatgpt.com".into()],
        tunnel_mode: false,
        require_bridge_dir: false,
        log_level: "info",
        http: mcp_front::config::HttpLimits::FRONT,
    }
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        Just("content-type".to_owned()),
        Just("accept".to_owned()),
        Just("host".to_owned()),
        Just("origin".to_owned()),
        Just("mcp-protocol-version".to_owned()),
        Just("mcp-method".to_owned()),
        Just("mcp-name".to_owned()),
        Just("authorization".to_owned()),
        Just("content-length".to_owned()),
        "[a-z-]{1,10}",
    ];
    let value = prop_oneof![
        Just(b"application/json".to_vec()),
        Just(b"2026-07-28".to_vec()),
        Just(b"2025-11-25".to_vec()),
        Just(b"localhost:8765".to_vec()),
        Just(b"tools/call".to_vec()),
        proptest::collection::vec(32u8..127, 0..30),
        proptest::collection::vec(any::<u8>(), 0..30),
    ];
    (name, value)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "[\\[\\]{}\",:0-9a-z/_ ]{0,120}".prop_map(String::into_bytes),
        ("(initialize|tools/list|tools/call|server/discover|ping|notifications/initialized|x)", any::<bool>()).prop_map(
            |(method, meta)| {
                let meta = if meta {
                    r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#
                } else {
                    ""
                };
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"whoami","arguments":{{}}{meta}}}}}"#)
                    .into_bytes()
            }
        ),
    ]
}

/// A raw request split as HTTP/1.1 would: the request line, headers up to a blank line, the
/// rest as the body. Parts http cannot represent are dropped (hyper refuses them before the
/// router ever sees them).
fn request_from_raw(raw: &[u8]) -> Request<Body> {
    let (head, body) = match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&raw[..i], &raw[i + 4..]),
        None => (raw, &b""[..]),
    };
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(|&b| b == b' ');
    let method = http::Method::from_bytes(words.next().unwrap_or_default()).unwrap_or(http::Method::POST);
    let uri = words
        .next()
        .and_then(|u| http::Uri::try_from(u).ok())
        .filter(|u| u.path().starts_with('/'))
        .unwrap_or_else(|| http::Uri::from_static("/mcp"));
    let mut request = Request::builder().method(method).uri(uri);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        request = request.header(name, value);
    }
    request.body(Body::from(body.to_vec())).unwrap_or_else(|_| Request::new(Body::empty()))
}

/// A JSON-RPC error object: `{jsonrpc: "2.0", id, error: {code: integer, message: string}}`.
fn check_rpc_error(value: &Value, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(value.get("jsonrpc"), Some(&Value::from("2.0")), "{}: {}", what, value);
    prop_assert!(value.get("id").is_some_and(|id| id.is_null() || id.is_number() || id.is_string()), "{what}: {value}");
    let error = value.get("error").ok_or_else(|| TestCaseError::fail(format!("{what}: no error: {value}")))?;
    prop_assert!(error.get("code").is_some_and(|c| c.is_i64() || c.is_u64()), "{what}: {value}");
    prop_assert!(error.get("message").is_some_and(Value::is_string), "{what}: {value}");
    prop_assert!(value.get("result").is_none(), "{what}: an error with a result: {value}");
    Ok(())
}

/// Sends `request` through the router and checks the answer.
async fn check(app: &Router, request: Request<Body>) -> Result<(), TestCaseError> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let response = app.clone().oneshot(request).await.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .map_err(|e| TestCaseError::fail(format!("{method} {path}: an unreadable body: {e}")))?;
    let what = format!("{method} {path}: {status}");
    if path == "/healthz" {
        prop_assert!(
            matches!(status, StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE | StatusCode::METHOD_NOT_ALLOWED),
            "{what}"
        );
        return Ok(());
    }
    prop_assert!(status.as_u16() < 500, "{what}: a server error");
    if path != "/mcp" {
        return Ok(());
    }
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    if status.is_client_error() && status != StatusCode::METHOD_NOT_ALLOWED {
        prop_assert!(json, "{what}: a refusal that is not JSON: {:?}", String::from_utf8_lossy(&body));
        let value = parsed.ok_or_else(|| TestCaseError::fail(format!("{what}: a refusal that does not parse")))?;
        check_rpc_error(&value, &what)?;
    } else if json && !body.is_empty() {
        let value = parsed.ok_or_else(|| TestCaseError::fail(format!("{what}: JSON that does not parse")))?;
        prop_assert_eq!(value.get("jsonrpc"), Some(&Value::from("2.0")), "{}: {}", what, value);
        match (value.get("result"), value.get("error")) {
            (Some(_), None) => {}
            (None, Some(_)) => check_rpc_error(&value, &what)?,
            _ => return Err(TestCaseError::fail(format!("{what}: neither a result nor an error: {value}"))),
        }
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

#[test]
fn fuzz_front_raw_requests() {
    let corpus = Corpus::load(
        "front",
        &["POST", "GET", "/mcp", "/healthz", "Host: ", "Origin: ", "Content-Type: ", "Content-Length: ", "\r\n"],
    );
    let runtime = runtime();
    let app = mcp_front::server::router(&config(), &tokio_util::sync::CancellationToken::new());
    mutate::run("front_raw", mutate::bytes(&corpus), |raw| runtime.block_on(check(&app, request_from_raw(&raw))));
}

#[test]
fn fuzz_front_generated_requests() {
    let runtime = runtime();
    let app = mcp_front::server::router(&config(), &tokio_util::sync::CancellationToken::new());
    let strategy = (
        prop_oneof![Just("POST"), Just("GET"), Just("DELETE"), Just("PUT"), Just("OPTIONS")],
        prop_oneof![Just("/mcp".to_owned()), Just("/healthz".to_owned()), Just("/".to_owned()), "/[a-z]{0,8}"],
        proptest::collection::vec(header(), 0..7),
        body(),
    );
    mutate::run("front_generated", strategy, |(method, path, headers, body)| {
        let mut request = Request::builder().method(method).uri(path.as_str());
        for (name, value) in &headers {
            if let Ok(value) = http::HeaderValue::from_bytes(value) {
                request = request.header(name.as_str(), value);
            }
        }
        let request = request.body(Body::from(body)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime.block_on(check(&app, request))
    });
}

#[test]
fn fuzz_front_dotenv() {
    let corpus = Corpus::load("dotenv", &["SERVERFS_MCP_LISTEN=", "SERVERFS_AGENT_BRIDGE_SOCKET=", "=[::1]:0"]);
    let environment = HashMap::from([("HOME".to_owned(), "/nonexistent-fuzz-home".to_owned())]);
    mutate::run("front_dotenv", mutate::bytes(&corpus), |input| {
        let file = match mcp_front::dotenv::parse(&input) {
            Ok(file) => file,
            Err(e) => {
                prop_assert!(e.line >= 1 && !e.message.is_empty(), "{e}");
                return Ok(());
            }
        };
        match Config::resolve(Args::default(), &environment, &file) {
            Ok(config) => {
                let seconds = config.bridge_timeout.as_secs();
                prop_assert!((1..=3600).contains(&seconds), "a bridge timeout of {seconds} s");
                prop_assert!(config.bridge_socket.is_absolute() || config.bridge_socket != PathBuf::new());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
}
