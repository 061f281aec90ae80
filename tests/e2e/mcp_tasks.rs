//! The MCP Tasks extension (SEP-2663) on the wire, through the real front and bridge: a client
//! that declares it gets a task handle for `submit_agent_task`, follows it with `tasks/get`,
//! answers an approval with `tasks/update`, cancels with `tasks/cancel`; a client that does not
//! declare it keeps the synchronous results and cannot call `tasks/*`; and rmcp's own client, which
//! speaks the extension, through the same steps.

use std::time::Duration;

use serde_json::{Value, json};

use e2e::TestBridge;
use e2e::front::{HttpReply, TestFront};

const MODERN: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A modern request; `tasks` says whether the client declares the extension on it.
async fn call(
    front: &TestFront,
    key: &str,
    tasks: bool,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> HttpReply {
    let capabilities = if tasks { json!({ "extensions": { TASKS: {} } }) } else { json!({}) };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": { "name": "tasks-e2e", "version": "1" },
    });
    let body = json!({ "jsonrpc": "2.0", "id": 11, "method": method, "params": params });
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str()), ("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)];
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    front.post(&headers, &body).await
}

fn result(reply: &HttpReply) -> Value {
    let v = reply.json();
    assert!(v.get("error").is_none(), "{v:#}");
    v["result"].clone()
}

fn error_code(reply: &HttpReply) -> i64 {
    reply.json()["error"]["code"].as_i64().unwrap_or_else(|| panic!("no error: {:#}", reply.json()))
}

async fn submit(front: &TestFront, key: &str, prompt: &str, idem: Option<&str>) -> Value {
    let mut args = json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt });
    if let Some(k) = idem {
        args["idempotency_key"] = json!(k);
    }
    let params = json!({ "name": "submit_agent_task", "arguments": args });
    result(&call(front, key, true, "tools/call", Some("submit_agent_task"), params).await)
}

async fn get(front: &TestFront, key: &str, id: &str) -> Value {
    result(&call(front, key, true, "tasks/get", Some(id), json!({ "taskId": id })).await)
}

async fn until(front: &TestFront, key: &str, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let task = get(front, key, id).await;
        if task["status"] == status {
            return task;
        }
        assert!(tokio::time::Instant::now() < deadline, "task {id} never became {status}: {task:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_declaring_client_drives_a_task_through_an_approval_to_its_result() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("tasks-op", "operator").await;
    let discover = result(&call(&front, &key, true, "server/discover", None, json!({})).await);
    assert!(discover["capabilities"]["extensions"][TASKS].is_object(), "{discover:#}");
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "legacy", "version": "1" } } });
    let init = front.post(&[("Authorization", &format!("Bearer {key}"))], &init).await.json();
    assert!(init["result"]["capabilities"]["extensions"][TASKS].is_object(), "legacy initialize: {init:#}");

    let created = submit(&front, &key, "approval:make test", Some("k-1")).await;
    assert_eq!(created["resultType"], "task", "{created:#}");
    let id = created["taskId"].as_str().expect("taskId").to_owned();
    assert!(id.starts_with("agt_"));
    assert_eq!(created["status"], "working");
    assert_eq!(created["ttlMs"], 168u64 * 3_600_000, "the retention: {created:#}");
    assert!(
        created["pollIntervalMs"].is_u64() && created["createdAt"].is_string() && created["lastUpdatedAt"].is_string()
    );
    assert!(created.get("requestState").is_none());
    // Durable before the answer, and retry-safe: the same key is the same task.
    assert_eq!(submit(&front, &key, "approval:make test", Some("k-1")).await["taskId"], id.as_str());

    let waiting = until(&front, &key, &id, "input_required").await;
    assert_eq!(waiting["resultType"], "complete", "{waiting:#}");
    let requests = waiting["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{waiting:#}");
    let (request_key, request) = requests.iter().next().unwrap();
    assert!(request_key.starts_with("approval:req_"), "{request_key}");
    assert_eq!(request["method"], "elicitation/create");
    assert!(request["params"]["message"].as_str().unwrap().contains("make test"), "{request:#}");

    let update = json!({ "taskId": id, "inputResponses": { request_key.as_str(): { "action": "accept", "content": { "decision": "approve_once" } } } });
    let ack = result(&call(&front, &key, true, "tasks/update", Some(&id), update.clone()).await);
    assert!(
        ack.as_object().is_some_and(|a| a.keys().all(|k| k == "_meta" || k == "resultType")),
        "an empty ack: {ack:#}"
    );
    let done = until(&front, &key, &id, "completed").await;
    let tool = &done["result"];
    assert_eq!(tool["structuredContent"]["final_response"], "approval=approve_once", "{done:#}");
    assert_ne!(tool["isError"], true);
    // The same answer again is ignored (eventually consistent), not an error.
    result(&call(&front, &key, true, "tasks/update", Some(&id), update).await);
    // The answer went through the registry: audited like the tool.
    let audit =
        bridge.call("admin_read_audit_log", json!({ "capability": "respond_agent_approval" })).await.expect("audit");
    let rows = audit["rows"].as_array().expect("rows");
    assert!(
        rows.iter().any(|r| r["principal"] == "tasks-op" && r["surface"] == "mcp" && r["task_id"] == id.as_str()),
        "{audit:#}"
    );
}

#[tokio::test]
async fn cancel_unknown_ids_and_clients_without_the_extension() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("tasks-a", "operator").await;
    let other = bridge.create_key("tasks-b", "operator").await;

    let id = submit(&front, &key, "wait:30", None).await["taskId"].as_str().unwrap().to_owned();
    until(&front, &key, &id, "working").await;
    // Another principal's task and an unknown one answer alike: -32602.
    assert_eq!(error_code(&call(&front, &other, true, "tasks/get", Some(&id), json!({ "taskId": id })).await), -32602);
    let nope = "agt_00000000000000000000000000000000";
    assert_eq!(error_code(&call(&front, &key, true, "tasks/get", Some(nope), json!({ "taskId": nope })).await), -32602);
    assert_eq!(
        error_code(&call(&front, &other, true, "tasks/cancel", Some(&id), json!({ "taskId": id })).await),
        -32602
    );
    // Cancel: an empty ack, the task ends cancelled; again on the ended task, the same ack.
    result(&call(&front, &key, true, "tasks/cancel", Some(&id), json!({ "taskId": id })).await);
    until(&front, &key, &id, "cancelled").await;
    result(&call(&front, &key, true, "tasks/cancel", Some(&id), json!({ "taskId": id })).await);
    // The routing header names the task: a mismatch is refused (SEP-2243's -32020).
    let reply = call(&front, &key, true, "tasks/get", Some("agt_someone_else"), json!({ "taskId": id })).await;
    assert_eq!(error_code(&reply), -32020, "{:#}", reply.json());
    // The removed methods do not exist.
    for method in ["tasks/result", "tasks/list"] {
        let reply = call(&front, &key, true, method, Some(&id), json!({ "taskId": id })).await;
        assert_eq!(error_code(&reply), -32601, "{method}: {:#}", reply.json());
    }

    // A client that does not declare the extension: today's synchronous answer, and no tasks/*.
    let params = json!({ "name": "submit_agent_task", "arguments": { "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": "complete:sync" } });
    let sync = result(&call(&front, &key, false, "tools/call", Some("submit_agent_task"), params).await);
    assert_eq!(sync["resultType"], "complete", "{sync:#}");
    assert!(sync["structuredContent"]["task_id"].is_string(), "{sync:#}");
    let reply = call(&front, &key, false, "tasks/get", Some(&id), json!({ "taskId": id })).await;
    assert_eq!(error_code(&reply), -32021, "{:#}", reply.json());
}

/// The same through rmcp's own client, which speaks the extension: it declares it, gets a task
/// for `submit_agent_task`, sees `input_required`, answers with `tasks/update`, reaches
/// `completed` with the result; cancels another; and the same client without the extension
/// gets today's synchronous result.
#[tokio::test]
async fn rmcps_client_speaks_the_extension_end_to_end() {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
        Implementation, ProtocolVersion, TaskStatus, UpdateTaskParams,
    };
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt};

    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("rmcp-tasks", "operator").await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let connect = |tasks: bool| {
        let config = StreamableHttpClientTransportConfig::with_uri(front.url.clone()).auth_header(key.clone());
        let transport = StreamableHttpClientTransport::from_config(config);
        let capabilities =
            if tasks { ClientCapabilities::builder().enable_tasks().build() } else { ClientCapabilities::default() };
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        ClientConfig::new(capabilities, Implementation::new("rmcp-tasks-e2e", "1"))
            .serve_with_lifecycle(transport, lifecycle)
    };
    let client = connect(true).await.unwrap_or_else(|e| panic!("connect: {e}\n{}", front.log()));
    let submit = |prompt: &str| {
        let args = json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt });
        let Value::Object(args) = args else { unreachable!() };
        CallToolRequestParams::new("submit_agent_task").with_arguments(args)
    };
    let CallToolResponse::Task(created) = client.call_tool_once(submit("approval:ship it")).await.expect("call") else {
        panic!("a declaring client gets a task handle");
    };
    let id = created.task.task_id.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let task = loop {
        let got = client.get_task(GetTaskParams::new(id.clone())).await.expect("tasks/get");
        if got.task.status() == TaskStatus::InputRequired {
            break serde_json::to_value(&got.task).unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "never input_required: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let request_key = task["inputRequests"].as_object().and_then(|m| m.keys().next().cloned()).expect("a request");
    let responses =
        [(request_key, json!({ "action": "accept", "content": { "decision": "approve_once" } }))].into_iter().collect();
    client.update_task(UpdateTaskParams::new(id.clone(), responses)).await.expect("tasks/update");
    let done = loop {
        let got = client.get_task(GetTaskParams::new(id.clone())).await.expect("tasks/get");
        if got.task.status().is_terminal() {
            break serde_json::to_value(&got.task).unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["structuredContent"]["final_response"], "approval=approve_once", "{done:#}");

    let CallToolResponse::Task(other) = client.call_tool_once(submit("wait:30")).await.expect("call") else {
        panic!("a task handle");
    };
    client.cancel_task(CancelTaskParams::new(other.task.task_id.clone())).await.expect("tasks/cancel");
    let cancelled = loop {
        let got = client.get_task(GetTaskParams::new(other.task.task_id.clone())).await.expect("tasks/get");
        if got.task.status().is_terminal() {
            break got.task.status();
        }
        assert!(tokio::time::Instant::now() < deadline, "never cancelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(cancelled, TaskStatus::Cancelled);

    // Without the extension: the synchronous tool result, as before.
    let plain = connect(false).await.expect("connect");
    let args = json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": "complete:plain" });
    let Value::Object(args) = args else { unreachable!() };
    let result =
        plain.call_tool(CallToolRequestParams::new("submit_agent_task").with_arguments(args)).await.expect("call");
    assert!(result.structured_content.as_ref().is_some_and(|s| s["task_id"].is_string()), "{result:?}");
}
