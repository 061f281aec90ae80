//! `mcp-front` on the wire: exact statuses, headers and bodies for both eras and for every
//! refusal (405, 403, 401, 413, 415, parse error, batch), the one tolerated client quirk, and
//! arbitrary bodies and headers that must never bring the front down.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use e2e::TestBridge;
use e2e::front::{HttpReply, TestFront};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

fn modern_meta(client: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": client, "version": "1" },
    })
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn legacy(front: &TestFront, key: &str, method: &str, params: Value) -> HttpReply {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    front.post(&[("Authorization", &bearer(key)), ("MCP-Protocol-Version", LEGACY)], &body).await
}

async fn modern(front: &TestFront, key: &str, method: &str, name: Option<&str>, mut params: Value) -> HttpReply {
    params["_meta"] = modern_meta("e2e");
    let body = json!({ "jsonrpc": "2.0", "id": 8, "method": method, "params": params });
    let auth = bearer(key);
    let mut headers = vec![("Authorization", auth.as_str()), ("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)];
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    front.post(&headers, &body).await
}

/// Checks a successful tool result on the wire and returns its structured content.
fn structured(reply: &HttpReply) -> Value {
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.header("mcp-session-id"), None, "a stateless front never issues a session");
    let result = &reply.json()["result"];
    assert_eq!(result["isError"], false, "{result:#}");
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().expect("text")).expect("JSON text");
    assert!(result["structuredContent"].is_object());
    assert_eq!(text, result["structuredContent"]);
    result["structuredContent"].clone()
}

#[tokio::test]
async fn both_eras_answer_tools_list_and_tools_call_with_the_shapes_of_their_revision() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("op", "operator").await;

    for version in ["2025-03-26", "2025-06-18", LEGACY] {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "e2e", "version": "1" } } });
        let init = front.post(&[("Authorization", &bearer(&key))], &body).await;
        assert_eq!(init.json()["result"]["protocolVersion"], version, "{}", String::from_utf8_lossy(&init.body));
        assert_eq!(init.header("mcp-session-id"), None);
    }
    let list = legacy(&front, &key, "tools/list", json!({})).await.json();
    let tools = list["result"]["tools"].as_array().expect("tools");
    let submit = tools.iter().find(|t| t["name"] == "submit_agent_task").expect("submit_agent_task");
    assert_eq!(submit["inputSchema"]["type"], "object");
    assert_eq!(submit["inputSchema"]["additionalProperties"], false);
    assert_eq!(submit["annotations"]["readOnlyHint"], false);
    assert!(
        list["result"].get("ttlMs").is_none() && list["result"].get("resultType").is_none(),
        "legacy shape: {list:#}"
    );
    let whoami = structured(&legacy(&front, &key, "tools/call", json!({ "name": "whoami", "arguments": {} })).await);
    assert_eq!(whoami["principal"], "op");

    let discover = modern(&front, &key, "server/discover", None, json!({})).await.json();
    assert!(
        discover["result"]["supportedVersions"].as_array().expect("versions").contains(&json!(MODERN)),
        "{discover:#}"
    );
    let list = modern(&front, &key, "tools/list", None, json!({})).await.json();
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["cacheScope"], "private", "the list depends on the caller's key");
    assert!(list["result"]["ttlMs"].is_number());
    let reply = modern(&front, &key, "tools/call", Some("whoami"), json!({ "name": "whoami", "arguments": {} })).await;
    assert_eq!(structured(&reply)["role"], "operator");
    assert_eq!(reply.json()["result"]["resultType"], "complete");

    // Tool errors are results; a tool that does not exist is a JSON-RPC error.
    let failed = legacy(
        &front,
        &key,
        "tools/call",
        json!({ "name": "get_agent_task", "arguments": { "task_id": "agt_00000000000000000000000000000000" } }),
    )
    .await
    .json();
    assert_eq!(failed["result"]["isError"], true);
    assert_eq!(failed["result"]["structuredContent"]["error"]["code"], "AGENT_TASK_NOT_FOUND");
    assert!(failed["result"]["content"][0]["text"].as_str().expect("text").starts_with("AGENT_TASK_NOT_FOUND: "));
    let invalid = legacy(
        &front,
        &key,
        "tools/call",
        json!({ "name": "get_agent_task", "arguments": { "task_id": "x", "bogus": 1 } }),
    )
    .await
    .json();
    assert_eq!(invalid["result"]["structuredContent"]["error"]["code"], "INVALID_ARGUMENT", "{invalid:#}");
    let unknown = legacy(&front, &key, "tools/call", json!({ "name": "no_such_tool", "arguments": {} })).await.json();
    assert_eq!(unknown["error"]["code"], -32602, "{unknown:#}");
    let unknown =
        modern(&front, &key, "tools/call", Some("no_such_tool"), json!({ "name": "no_such_tool", "arguments": {} }))
            .await
            .json();
    assert_eq!(unknown["error"]["code"], -32602, "{unknown:#}");
}

#[tokio::test]
async fn refusals_have_their_statuses_and_bodies() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("op", "operator").await;
    let auth = bearer(&key);
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });

    for method in ["GET", "DELETE", "PUT"] {
        let reply = front.http(method, "/mcp", &[("Accept", "text/event-stream")], b"").await;
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.header("allow"), Some("POST"), "{method}");
    }
    let reply = front.post(&[("Authorization", &auth), ("Origin", "https://evil.example")], &ping).await;
    assert_eq!(reply.status, 403);
    let own_origin = format!("http://localhost:{}", front.addr.port());
    let reply = front.post(&[("Authorization", &auth), ("Origin", &own_origin)], &ping).await;
    assert_eq!(reply.status, 200, "the front's own origin is allowed");
    let reply = front.post(&[("Authorization", &auth), ("Host", "evil.example")], &ping).await;
    assert_eq!(reply.status, 403, "a foreign Host is refused on loopback");
    let reply =
        front.post(&[("Authorization", &auth), ("Host", &format!("localhost:{}", front.addr.port()))], &ping).await;
    assert_eq!(reply.status, 200);

    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    for credential in [None, Some("Bearer abk_not_a_key"), Some("Basic dXNlcjpwYXNz"), Some("garbage")] {
        let headers: Vec<(&str, &str)> = credential.iter().map(|c| ("Authorization", *c)).collect();
        let reply = front.post(&headers, &list).await;
        assert_eq!(reply.status, 401, "{credential:?}");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer realm=\"agent-bridge\""));
        assert!(!String::from_utf8_lossy(&reply.body).contains("resource_metadata"));
    }
    let init = json!({ "jsonrpc": "2.0", "id": 3, "method": "initialize", "params": { "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": { "name": "e2e", "version": "1" } } });
    assert_eq!(
        front.post(&[("Authorization", "Bearer nope")], &init).await.status,
        401,
        "a bad key is refused at connection time"
    );
    assert_eq!(front.http("GET", "/.well-known/oauth-protected-resource/mcp", &[], b"").await.status, 404);

    let big = vec![b' '; 2 << 20];
    let reply =
        front.http("POST", "/mcp", &[("Content-Type", "application/json"), ("Authorization", &auth)], &big).await;
    assert_eq!(reply.status, 413);
    let reply = front.http("POST", "/mcp", &[("Content-Type", "text/plain"), ("Authorization", &auth)], b"{}").await;
    assert_eq!(reply.status, 415);
    let json_headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth.as_str()),
    ];
    let reply = front.http("POST", "/mcp", &json_headers, b"{\"jsonrpc\": \"2.0\", \"id\": 1, ").await;
    assert_eq!((reply.status, reply.json()["error"]["code"].clone()), (400, json!(-32700)));
    assert_eq!(reply.json()["id"], Value::Null);
    let batch = json!([ping, list]).to_string();
    let reply = front.http("POST", "/mcp", &json_headers, batch.as_bytes()).await;
    assert_eq!((reply.status, reply.json()["error"]["code"].clone()), (400, json!(-32600)));
    let reply = front.http("POST", "/mcp", &json_headers, b"{\"id\": 4, \"method\": 5}").await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone(), reply.json()["id"].clone()),
        (400, json!(-32600), json!(4))
    );
    // A client that accepts JSON but does not list SSE (or sends no Accept) is answered in
    // JSON; one that accepts neither gets 406.
    let ping_bytes = ping.to_string();
    for accept in [None, Some("*/*"), Some("application/json")] {
        let mut headers = vec![("Content-Type", "application/json"), ("Authorization", auth.as_str())];
        headers.extend(accept.map(|a| ("Accept", a)));
        let reply = front.http("POST", "/mcp", &headers, ping_bytes.as_bytes()).await;
        assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/json")), "{accept:?}");
    }
    let headers = [("Content-Type", "application/json"), ("Authorization", auth.as_str()), ("Accept", "text/html")];
    assert_eq!(front.http("POST", "/mcp", &headers, ping_bytes.as_bytes()).await.status, 406);
    let notification = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(
        front.post(&[("Authorization", &auth), ("MCP-Protocol-Version", LEGACY)], &notification).await.status,
        202
    );
}

#[tokio::test]
async fn the_claude_connector_header_mismatch_is_tolerated_for_claude_only() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("op", "operator").await;
    let auth = bearer(&key);
    let call = |client: &str| json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": { "name": "whoami", "arguments": {}, "_meta": modern_meta(client) } });
    let headers = [
        ("Authorization", auth.as_str()),
        ("MCP-Protocol-Version", LEGACY),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "whoami"),
    ];
    let reply = front.post(&headers, &call("claude-ai")).await;
    assert_eq!(structured(&reply)["principal"], "op");
    let reply = front.post(&headers, &call("some-other-client")).await;
    assert_eq!(reply.status, 400, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["error"]["code"], -32020, "any other client still gets the header mismatch");
    let modern_header = [
        ("Authorization", auth.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "whoami"),
    ];
    assert_eq!(
        front.post(&modern_header, &call("claude-ai")).await.status,
        400,
        "only the exact pair Claude sends is tolerated"
    );
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Content-Type".to_owned()),
        Just("Accept".to_owned()),
        Just("MCP-Protocol-Version".to_owned()),
        Just("Mcp-Method".to_owned()),
        Just("Mcp-Name".to_owned()),
        Just("Origin".to_owned()),
        Just("Authorization".to_owned()),
        Just("Mcp-Session-Id".to_owned()),
        "[A-Za-z-]{1,12}",
    ]
}

fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("application/json".to_owned()),
        Just("application/json, text/event-stream".to_owned()),
        Just(LEGACY.to_owned()),
        Just(MODERN.to_owned()),
        Just("tools/call".to_owned()),
        Just("=?base64?dG9vbHMvY2FsbA==?=".to_owned()),
        "[ -~]{0,40}",
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("initialize"),
        Just("tools/list"),
        Just("tools/call"),
        Just("server/discover"),
        Just("ping"),
        Just("notifications/initialized"),
        Just("resources/list"),
        Just("x/y"),
    ];
    let json_value = prop_oneof![
        Just(json!(null)),
        Just(json!({})),
        Just(json!([])),
        Just(json!("s")),
        Just(json!(1)),
        Just(json!({"name": "whoami", "arguments": {}}))
    ];
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        (method, json_value.clone(), json_value).prop_map(|(m, params, id)| {
            json!({ "jsonrpc": "2.0", "id": id, "method": m, "params": params }).to_string().into_bytes()
        }),
        "[\\[\\]{}\",:0-9a-z ]{0,80}".prop_map(String::into_bytes),
    ]
}

#[tokio::test]
async fn arbitrary_bodies_and_headers_never_bring_the_front_down() {
    let bridge = TestBridge::start().await;
    let mut front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("op", "operator").await;
    let cases = (proptest::collection::vec((header_name(), header_value()), 0..6), body(), any::<bool>());
    let mut runner = TestRunner::new(Config { cases: 200, ..Config::default() });
    let mut inputs = Vec::new();
    for _ in 0..200 {
        inputs.push(cases.new_tree(&mut runner).expect("a case").current());
    }
    for (headers, body, with_key) in inputs {
        let auth = bearer(&key);
        let mut all: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        if with_key {
            all.push(("Authorization", &auth));
        }
        let reply = front.http("POST", "/mcp", &all, &body).await;
        assert!(reply.status < 500, "status {} for {all:?} {:?}", reply.status, String::from_utf8_lossy(&body));
    }
    assert!(front.is_running(), "the front died:\n{}", front.log());
    assert_eq!(front.http("GET", "/healthz", &[], b"").await.status, 200);
    assert!(!front.log().contains("panicked"), "{}", front.log());
}
