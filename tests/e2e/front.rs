//! `mcp-front` end to end with the real `rmcp` client: a real front process over HTTP in
//! front of a real bridge process, in the legacy (`initialize`) and modern (`server/discover`)
//! eras; viewer and operator lists; a fake task submitted, long-polled, approved and read; a
//! submission whose HTTP response is lost, retried with the same idempotency key.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use e2e::TestBridge;
use e2e::front::TestFront;

pub(crate) type Client = RunningService<RoleClient, ClientConfig>;

/// Which protocol era a client speaks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Era {
    /// `initialize` with 2025-11-25.
    Legacy,
    /// `server/discover` and per-request `_meta`, 2026-07-28.
    Modern,
}

pub(crate) async fn connect(front: &TestFront, key: &str, era: Era) -> Client {
    // The bridge's reqwest (the IdP's keys) brings rustls without a built-in provider, and cargo
    // unifies reqwest's features: rmcp's client here needs the same provider installed (it
    // speaks plain HTTP to the front, but reqwest builds its TLS config anyway).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(front.url.clone()).auth_header(key);
    let transport = StreamableHttpClientTransport::from_config(config);
    let lifecycle = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
    };
    ClientConfig::default()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap_or_else(|e| panic!("{era:?} client could not connect: {e}\n{}", front.log()))
}

pub(crate) async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!("arguments must be an object") };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
    client.call_tool(params).await.unwrap_or_else(|e| panic!("{name} failed at the protocol level: {e}"))
}

/// The structured content of a successful call, checked to be an object mirrored as text.
pub(crate) fn ok(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "expected success, got {result:?}");
    let structured = result.structured_content.clone().expect("structuredContent");
    assert!(structured.is_object(), "structuredContent must be an object: {structured}");
    let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).expect("a text block");
    assert_eq!(serde_json::from_str::<Value>(&text).expect("the text is JSON"), structured);
    structured
}

/// The `{code, message}` of a failed call, checked against its text.
fn tool_error(result: &CallToolResult) -> (String, String) {
    assert_eq!(result.is_error, Some(true), "expected a tool error, got {result:?}");
    let error = &result.structured_content.as_ref().expect("structuredContent")["error"];
    let (code, message) =
        (error["code"].as_str().expect("code").to_owned(), error["message"].as_str().expect("message").to_owned());
    let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).expect("a text block");
    assert_eq!(text, format!("{code}: {message}"));
    (code, message)
}

async fn names(client: &Client) -> Vec<String> {
    client.list_all_tools().await.expect("tools/list").iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test]
async fn a_viewer_and_an_operator_see_different_tools_and_the_operator_runs_a_task_through_approval() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let viewer_key = bridge.create_key("viewer", "viewer").await;
    let operator_key = bridge.create_key("operator", "operator").await;
    for era in [Era::Legacy, Era::Modern] {
        let viewer = connect(&front, &viewer_key, era).await;
        let operator = connect(&front, &operator_key, era).await;
        let (seen_by_viewer, seen_by_operator) = (names(&viewer).await, names(&operator).await);
        assert!(seen_by_viewer.contains(&"get_agent_task".to_owned()), "{seen_by_viewer:?}");
        assert!(!seen_by_viewer.contains(&"submit_agent_task".to_owned()), "{era:?}: {seen_by_viewer:?}");
        assert!(seen_by_operator.contains(&"submit_agent_task".to_owned()), "{era:?}: {seen_by_operator:?}");
        assert!(seen_by_operator.len() > seen_by_viewer.len());
        // A tool outside the viewer's role answers like a tool that does not exist.
        let hidden = viewer.call_tool(CallToolRequestParams::new("submit_agent_task")).await.unwrap_err().to_string();
        let missing = viewer.call_tool(CallToolRequestParams::new("no_such_tool")).await.unwrap_err().to_string();
        assert!(hidden.contains("-32602") || hidden.contains("nvalid params"), "{hidden}");
        assert_eq!(hidden.replace("submit_agent_task", "X"), missing.replace("no_such_tool", "X"));
        let whoami = ok(&call(&operator, "whoami", json!({})).await);
        assert_eq!(whoami["role"], "operator");
        assert_eq!(whoami["surface"], "mcp");
        let _ = viewer.cancel().await;
        let _ = operator.cancel().await;
    }

    let operator = connect(&front, &operator_key, Era::Legacy).await;
    let submit = json!({ "runtime": "fake", "workdir": "repo", "prompt": "approval:ship it" });
    let submitted = ok(&call(&operator, "submit_agent_task", submit).await);
    let task_id = submitted["task_id"].as_str().expect("task_id").to_owned();
    // Long-poll until the agent waits for approval.
    let mut task = Value::Null;
    for _ in 0..10 {
        task = ok(&call(&operator, "get_agent_task", json!({ "task_id": task_id, "wait_seconds": 5 })).await);
        if task["status"] == "waiting_for_approval" {
            break;
        }
    }
    assert_eq!(task["status"], "waiting_for_approval", "{task:#}");
    let request_id = task["pending_request"]["request_id"].as_str().expect("request_id").to_owned();
    let answer = json!({ "task_id": task_id, "request_id": request_id, "decision": "approve_once" });
    ok(&call(&operator, "respond_agent_approval", answer).await);
    for _ in 0..10 {
        task = ok(&call(&operator, "get_agent_task", json!({ "task_id": task_id, "wait_seconds": 5 })).await);
        if task["terminal"] == true {
            break;
        }
    }
    assert_eq!(task["status"], "succeeded", "{task:#}");
    assert_eq!(task["final_response"], "approval=approve_once", "the fake agent reports the decision it got");
    // An inline result is read from the task; asking for its chunks is a tool error.
    let (code, _) = tool_error(&call(&operator, "read_agent_task_result", json!({ "task_id": task_id })).await);
    assert_eq!(code, "AGENT_RESULT_NOT_RETRIEVABLE");

    // A large result is spooled and read back in chunks through the front.
    let modern = connect(&front, &operator_key, Era::Modern).await;
    let big = ok(&call(
        &modern,
        "submit_agent_task",
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "big:300000" }),
    )
    .await);
    let big_id = big["task_id"].as_str().expect("task_id").to_owned();
    bridge.wait_terminal(&big_id).await;
    let chunk = ok(&call(&modern, "read_agent_task_result", json!({ "task_id": big_id, "max_bytes": 65536 })).await);
    assert_eq!(chunk["size_bytes"], 300000, "{chunk:#}");
    let _ = operator.cancel().await;
    let _ = modern.cancel().await;
}

#[tokio::test]
async fn a_submission_whose_response_is_lost_is_retried_with_its_key_to_the_same_task_and_one_turn() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("retrier", "operator").await;
    let args =
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:once", "idempotency_key": "objective-1" });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "submit_agent_task", "arguments": args } });
    let body = body.to_string();
    // The first attempt: the request goes out, the connection is closed before any byte of the
    // answer is read (as when a proxy or the network drops it).
    let mut stream = tokio::net::TcpStream::connect(front.addr).await.expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer {key}\r\nContent-Length: {}\r\n\r\n",
        front.addr,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send head");
    stream.write_all(body.as_bytes()).await.expect("send body");
    e2e::poll_until("the bridge stored the first submission", Duration::from_secs(20), || bridge.count("tasks") == 1)
        .await;
    drop(stream);

    // The caller does not know whether it worked, so it retries with the same key.
    let client = connect(&front, &key, Era::Legacy).await;
    let retried = ok(&call(&client, "submit_agent_task", args.clone()).await);
    assert_eq!(retried["idempotent_replay"], true, "{retried:#}");
    let task_id = retried["task_id"].as_str().expect("task_id").to_owned();
    let first: String = bridge.db().query_row("SELECT task_id FROM tasks", [], |r| r.get(0)).expect("the one task");
    assert_eq!(task_id, first);
    let task = bridge.wait_terminal(&task_id).await;
    assert_eq!(task["status"], "succeeded", "{task:#}");
    assert_eq!(bridge.count("tasks"), 1);
    assert_eq!(bridge.fake_turns(), 1, "the provider ran exactly one turn");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_bridge_that_is_gone_is_a_tool_error_and_an_unhealthy_front_until_it_is_back() {
    let mut bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("op", "operator").await;
    assert_eq!(front.http("GET", "/healthz", &[], b"").await.status, 200);
    let client = connect(&front, &key, Era::Modern).await;
    bridge.stop().await;
    let (code, _) = tool_error(&call(&client, "whoami", json!({})).await);
    assert_eq!(code, "AGENT_BRIDGE_UNAVAILABLE");
    let health = front.http("GET", "/healthz", &[], b"").await;
    assert_eq!(health.status, 503);
    assert_eq!(health.json()["error"]["code"], "AGENT_BRIDGE_UNAVAILABLE");
    // The bridge comes back on the same socket: the front's kept connections were to the old
    // process; the next call still works, on a fresh connection.
    bridge.spawn().await;
    assert_eq!(ok(&call(&client, "whoami", json!({})).await)["principal"], "op");
    assert_eq!(front.http("GET", "/healthz", &[], b"").await.status, 200);
    // A restart between two calls: the kept connection is dead, the call is not lost.
    bridge.stop().await;
    bridge.spawn().await;
    assert_eq!(ok(&call(&client, "whoami", json!({})).await)["principal"], "op");
    let _ = client.cancel().await;
}

/// The retry-safety scenarios through the published MCP surface: an uncertain submission retried with
/// its key is one task and one provider run; an unanswered approval expires into
/// `AGENT_INTERACTION_TIMED_OUT`, a late answer is `REQUEST_STALE`, and the writer lease is free
/// for the next task; a provider whose stop cannot be proven keeps the workdir closed.
#[tokio::test]
async fn phase_e_lifecycle_through_the_mcp_surface() {
    // The orphan that outlives a crashed bridge below exists only without the task sandbox.
    let options = e2e::Options::default().with("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=2");
    let mut bridge = TestBridge::start_with(options.with("SERVERFS_AGENT_SANDBOX=off")).await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("chatgpt", "operator").await;
    let client = connect(&front, &key, Era::Legacy).await;

    let submit =
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "approval:make", "idempotency_key": "phase-e" });
    let first = ok(&call(&client, "submit_agent_task", submit.clone()).await);
    let again = ok(&call(&client, "submit_agent_task", submit).await);
    assert_eq!(first["task_id"], again["task_id"]);
    assert_eq!(again["idempotent_replay"], true);
    let task_id = first["task_id"].as_str().unwrap().to_owned();

    // The approval is asked and nobody answers it.
    let waiting = bridge.wait_status(&task_id, "waiting_for_approval").await;
    let request = waiting["pending_request"]["request_id"].as_str().unwrap().to_owned();
    let mut task = Value::Null;
    for _ in 0..10 {
        task = ok(&call(&client, "get_agent_task", json!({ "task_id": task_id, "wait_seconds": 5 })).await);
        if task["terminal"] == true {
            break;
        }
    }
    assert_eq!(task["status"], "interrupted", "{task:#}");
    assert_eq!(task["error"]["code"], "AGENT_INTERACTION_TIMED_OUT");
    let late = call(
        &client,
        "respond_agent_approval",
        json!({ "task_id": task_id, "request_id": request, "decision": "approve_once" }),
    )
    .await;
    assert_eq!(tool_error(&late).0, "REQUEST_STALE");
    assert_eq!(bridge.fake_turns(), 1, "one provider run for the two submissions");

    // The writer lease is available to the next task once the cleanup is over.
    bridge.writer_idle().await;
    let next = ok(&call(
        &client,
        "submit_agent_task",
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:next" }),
    )
    .await);
    let next = bridge.wait_terminal(next["task_id"].as_str().unwrap()).await;
    assert_eq!(next["status"], "succeeded");
    bridge.writer_idle().await;

    // A provider whose processes outlive a crash of the bridge: the restarted bridge cannot
    // prove the stop, so a writer is refused through MCP until the orphan is gone.
    let (guarded, orphan) = bridge.crash_leaving_an_orphan(120).await;
    struct KillOnDrop(i32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let orphan_guard = KillOnDrop(orphan);
    bridge.spawn().await;
    let refused =
        call(&client, "submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:x" }))
            .await;
    let (code, message) = tool_error(&refused);
    assert_eq!(code, "WORKDIR_RECOVERY_REQUIRED", "{message}");
    assert!(message.contains(&guarded));
    drop(orphan_guard);
    e2e::poll_until("the orphan is gone", Duration::from_secs(10), || !e2e::alive(orphan)).await;
    let after = ok(&call(
        &client,
        "submit_agent_task",
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:after" }),
    )
    .await);
    assert_eq!(bridge.wait_terminal(after["task_id"].as_str().unwrap()).await["status"], "succeeded");
    let _ = client.cancel().await;
}
