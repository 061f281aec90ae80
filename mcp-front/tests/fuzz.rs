//! The front's HTTP layer in memory, fed arbitrary methods, headers and bodies: it must answer
//! every one (never panic, never a 5xx of its own making) without a bridge behind it.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use http::Request;
use mcp_front::config::Config;
use proptest::prelude::*;
use tower::ServiceExt;

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

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_request_gets_an_answer(
        method in prop_oneof![Just("POST"), Just("GET"), Just("DELETE"), Just("PUT"), Just("OPTIONS")],
        path in prop_oneof![Just("/mcp".to_owned()), Just("/healthz".to_owned()), Just("/".to_owned()), "/[a-z]{0,8}"],
        headers in proptest::collection::vec(header(), 0..7),
        body in body(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let status = runtime.block_on(async {
            let app = mcp_front::server::router(&config(), &tokio_util::sync::CancellationToken::new());
            let mut request = Request::builder().method(method).uri(path.as_str());
            for (name, value) in &headers {
                if let Ok(value) = http::HeaderValue::from_bytes(value) {
                    request = request.header(name.as_str(), value);
                }
            }
            let request = request.body(Body::from(body.clone())).expect("request");
            let response = app.oneshot(request).await.expect("infallible");
            let status = response.status();
            let _ = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("a readable body");
            status
        });
        // /healthz is 503 without a bridge; nothing else may be a server error.
        prop_assert!(status.as_u16() < 500 || (path == "/healthz" && status.as_u16() == 503), "{method} {path}: {status}");
    }
}
