//! Retry-safe submission against a real bridge process over its socket: a
//! lost response, retries after completion, concurrent retries, conflicts, per-principal keys,
//! keyless submissions and key validation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use bridge_proto::envelope::Request;
use bridge_proto::methods::{self, CallParams, Surface};
use e2e::{Options, TestBridge, code, error_of, poll_until, poll_until_async};

/// How long a condition without an event (a lock released, a row deleted, a child's session
/// file written) may take.
const SETTLE: Duration = Duration::from_secs(20);

fn object(v: Value) -> Map<String, Value> {
    let Value::Object(map) = v else { panic!("expected an object, got {v}") };
    map
}

/// Writes one `capabilities.call submit_agent_task` line on a fresh connection and hangs up
/// without reading the answer: the caller's view of a response lost on the way back.
async fn submit_and_hang_up(bridge: &TestBridge, credential: &str, arguments: Value) {
    let params = CallParams {
        credential: Some(credential.to_owned()),
        surface: Surface::Mcp,
        path: Default::default(),
        client: None,
        name: "submit_agent_task".to_owned(),
        arguments: object(arguments),
    };
    let request = Request {
        request_id: "lost-response-1".to_owned(),
        method: methods::CAPABILITIES_CALL.to_owned(),
        params: object(serde_json::to_value(params).expect("params")),
    };
    let mut stream = UnixStream::connect(&bridge.socket).await.expect("connect to the bridge");
    stream.write_all(&request.to_line()).await.expect("send the request");
    stream.shutdown().await.expect("close our side");
    drop(stream);
}

/// Every task id in the store, as the local operator sees them (newest first).
async fn task_ids(bridge: &TestBridge) -> Vec<String> {
    let v = bridge.call("admin_list_tasks", json!({ "limit": 200 })).await.expect("admin_list_tasks");
    v["tasks"].as_array().expect("tasks").iter().map(|t| t["task_id"].as_str().expect("task_id").to_owned()).collect()
}

fn task_rows(bridge: &TestBridge) -> i64 {
    bridge.db_count("SELECT COUNT(*) FROM tasks")
}

fn guard_rows(bridge: &TestBridge) -> i64 {
    bridge.db_count("SELECT COUNT(*) FROM recovery_guards")
}

/// Waits until the fake runtime has written the session record of a started turn (the child
/// writes it, so no bridge event announces it), then returns the number of turns.
async fn turns_once_started(bridge: &TestBridge) -> usize {
    poll_until("the fake runtime recorded its turn", SETTLE, || bridge.fake_turns() >= 1).await;
    bridge.fake_turns()
}

#[tokio::test]
async fn a_lost_response_is_recovered_by_retrying_with_the_same_key() {
    let bridge = TestBridge::start().await;
    let key = bridge.create_key("caller", "operator").await;
    let args = json!({
        "runtime": "fake",
        "workdir": "repo",
        "prompt": "wait:30",
        "idempotency_key": "objective-7f3a",
    });

    submit_and_hang_up(&bridge, &format!("Bearer {key}"), args.clone()).await;
    // The bridge commits the task although nobody reads its answer.
    let b = &bridge;
    poll_until_async("the unanswered submission is persisted", SETTLE, || async move { !task_ids(b).await.is_empty() })
        .await;
    let ids = task_ids(&bridge).await;
    assert_eq!(ids.len(), 1, "exactly one task after the lost response: {ids:?}");
    let original = ids[0].clone();

    let retry = bridge.call_mcp(Some(&key), "submit_agent_task", args.clone()).await.expect("retry");
    assert_eq!(retry["task_id"], original.as_str(), "{retry:#}");
    assert_eq!(retry["idempotent_replay"], true, "{retry:#}");
    assert_eq!(retry["idempotency_key"], "objective-7f3a");
    assert_eq!(task_ids(&bridge).await, vec![original.clone()]);
    assert_eq!(task_rows(&bridge), 1);

    // One provider turn.
    bridge.wait_for(&original, |t| t["status"] == "running").await;
    assert_eq!(turns_once_started(&bridge).await, 1);

    // One writer lease: slot 01 is held, and a keyless writer is refused.
    assert!(!bridge.lease_is_free(1), "the original task holds the writer lease");
    let keyless = bridge
        .call_mcp(Some(&key), "submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:30" }))
        .await;
    assert_eq!(code(&keyless), "WORKDIR_BUSY");

    // One recovery guard, naming the original.
    assert_eq!(guard_rows(&bridge), 1);
    let guarded: String = bridge
        .db()
        .query_row("SELECT task_id FROM recovery_guards WHERE workdir_alias = 'repo'", [], |r| r.get(0))
        .expect("the guard of repo");
    assert_eq!(guarded, original);

    // A retry once the task runs is still the same task, and still nothing new.
    let again = bridge.call_mcp(Some(&key), "submit_agent_task", args.clone()).await.expect("second retry");
    assert_eq!(again["task_id"], original.as_str());
    assert_eq!(again["idempotent_replay"], true);
    assert_eq!(again["status"], "running");
    assert_eq!((task_rows(&bridge), guard_rows(&bridge), bridge.fake_turns()), (1, 1, 1));

    let cancelled =
        bridge.call_mcp(Some(&key), "cancel_agent_task", json!({ "task_id": original })).await.expect("cancel");
    assert_eq!(cancelled["status"], "cancelled");
    poll_until("the writer lease is released after cancel", SETTLE, || bridge.lease_is_free(1)).await;
    poll_until("the recovery guard is cleared after cancel", SETTLE, || guard_rows(&bridge) == 0).await;
    assert_eq!(bridge.fake_turns(), 1);

    // The key still names the (now cancelled) task.
    let after = bridge.call_mcp(Some(&key), "submit_agent_task", args).await.expect("retry after cancel");
    assert_eq!(after["task_id"], original.as_str());
    assert_eq!(after["status"], "cancelled");
    assert_eq!(task_rows(&bridge), 1);
}

#[tokio::test]
async fn a_retry_after_completion_returns_the_finished_task() {
    let bridge = TestBridge::start().await;
    let args =
        json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:x", "idempotency_key": "finish-once" });
    let first = bridge.call("submit_agent_task", args.clone()).await.expect("submit");
    assert_eq!(first["idempotent_replay"], false);
    let id = first["task_id"].as_str().expect("task_id").to_owned();
    let done = bridge.wait_terminal(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    assert_eq!(bridge.fake_turns(), 1);
    bridge.wait_released(&id, 1).await;

    let retry = bridge.call("submit_agent_task", args).await.expect("retry");
    assert_eq!(retry["task_id"], id.as_str());
    assert_eq!(retry["idempotent_replay"], true);
    assert_eq!(retry["status"], "succeeded");
    assert_eq!(task_rows(&bridge), 1);
    assert_eq!(bridge.fake_turns(), 1, "a replay never starts a provider turn");
    assert!(bridge.lease_is_free(1), "a replay takes no writer lease");
    assert_eq!(guard_rows(&bridge), 0, "a replay publishes no recovery guard");
}

#[tokio::test]
async fn concurrent_submissions_with_one_key_converge_on_one_task() {
    const CALLERS: usize = 64;
    let bridge = Arc::new(TestBridge::start().await);
    let key = Arc::new(bridge.create_key("racer", "operator").await);
    let args = json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:30", "idempotency_key": "one-objective" });
    let start = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let (bridge, key, args, start) = (Arc::clone(&bridge), Arc::clone(&key), args.clone(), Arc::clone(&start));
        callers.push(tokio::spawn(async move {
            start.wait().await;
            bridge.call_mcp(Some(&key), "submit_agent_task", args).await
        }));
    }
    let mut answers = Vec::new();
    for caller in callers {
        answers.push(caller.await.expect("join").expect("every concurrent submission succeeds"));
    }
    let id = answers[0]["task_id"].as_str().expect("task_id").to_owned();
    for a in &answers {
        assert_eq!(a["task_id"], id.as_str(), "{a:#}");
    }
    let created = answers.iter().filter(|a| a["idempotent_replay"] == false).count();
    assert_eq!(created, 1, "exactly one call created the task, the others replayed it");
    assert_eq!(task_ids(&bridge).await, vec![id.clone()]);
    assert_eq!(task_rows(&bridge), 1);

    bridge.wait_for(&id, |t| t["status"] == "running").await;
    assert_eq!(turns_once_started(&bridge).await, 1);
    assert_eq!(guard_rows(&bridge), 1);
    bridge.call_mcp(Some(&key), "cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    poll_until("the writer lease is released", SETTLE, || bridge.lease_is_free(1)).await;
    assert_eq!(bridge.fake_turns(), 1);
}

#[tokio::test]
async fn reusing_a_key_with_any_changed_field_is_a_conflict() {
    // A third workdir that also allows `codex`, so that the runtime can differ while
    // everything else stays the same. (codex is not installed: a new codex task would be
    // AGENT_RUNTIME_UNAVAILABLE, which the key lookup must precede.)
    let extra = tempfile::Builder::new().prefix("ab-e2e-multi-").tempdir().expect("temp dir");
    let multi = extra.path().canonicalize().expect("canonical");
    let bridge = TestBridge::start_with(
        Options::default()
            .with("WORKDIR_03_ALIAS=multi")
            .with(&format!("WORKDIR_03_PATH={}", multi.display()))
            .with("WORKDIR_03_READ_ONLY=false")
            .with("WORKDIR_03_AGENT_MODE=workspace-write")
            .with("WORKDIR_03_AGENT_RUNTIMES=fake,codex"),
    )
    .await;

    // A finished task to name as a continuation source.
    let finished = bridge.submit("complete:earlier").await;
    assert_eq!(bridge.wait_terminal(&finished).await["status"], "succeeded");
    bridge.wait_released(&finished, 1).await;

    let base = json!({
        "runtime": "fake",
        "workdir": "repo",
        "prompt": "wait:30",
        "path": "",
        "profile": "workspace-write",
        "correlation_id": "corr-1",
        "model": "model-a",
        "idempotency_key": "k-base",
    });
    let original = bridge.call("submit_agent_task", base.clone()).await.expect("original");
    assert_eq!(original["idempotent_replay"], false);

    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mut vary = |what: &'static str, field: &str, value: Value| {
        let mut v = base.clone();
        v[field] = value;
        cases.push((what, v));
    };
    vary("prompt", "prompt", json!("wait:31"));
    vary("path", "path", json!("src"));
    vary("profile", "profile", json!("review"));
    vary("continue_from_task_id", "continue_from_task_id", json!(finished));
    vary("correlation_id", "correlation_id", json!("corr-2"));
    vary("correlation_id removed", "correlation_id", Value::Null);
    vary("model", "model", json!("model-b"));
    vary("model removed", "model", Value::Null);

    // Workdir: both calls use `review` (the only profile `docs` allows), so only the workdir differs.
    let review = json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:30", "profile": "review", "idempotency_key": "k-workdir" });
    bridge.call("submit_agent_task", review.clone()).await.expect("original for the workdir case");
    let mut other_workdir = review.clone();
    other_workdir["workdir"] = json!("docs");
    cases.push(("workdir", other_workdir));

    // Runtime: on `multi`, where fake and codex are both allowed.
    let on_multi = json!({ "runtime": "fake", "workdir": "multi", "prompt": "wait:30", "profile": "review", "idempotency_key": "k-runtime" });
    bridge.call("submit_agent_task", on_multi.clone()).await.expect("original for the runtime case");
    let mut other_runtime = on_multi.clone();
    other_runtime["runtime"] = json!("codex");
    cases.push(("runtime", other_runtime.clone()));

    let rows = task_rows(&bridge);
    assert_eq!(rows, 4);
    for (what, args) in cases {
        let refused = bridge.call("submit_agent_task", args.clone()).await;
        assert_eq!(code(&refused), "AGENT_IDEMPOTENCY_CONFLICT", "changed {what}: {args}");
        assert_eq!(task_rows(&bridge), rows, "a conflict ({what}) created a task");
    }
    assert_eq!(guard_rows(&bridge), 1);

    // The runtime variant, without the key, is refused for another reason: the conflict came
    // from the key lookup, before the runtime was probed.
    let mut fresh = other_runtime;
    fresh.as_object_mut().expect("object").remove("idempotency_key");
    assert_eq!(code(&bridge.call("submit_agent_task", fresh).await), "AGENT_RUNTIME_UNAVAILABLE");

    // The exact original request still replays the original task.
    let replay = bridge.call("submit_agent_task", base).await.expect("replay");
    assert_eq!(replay["task_id"], original["task_id"]);
    assert_eq!(replay["idempotent_replay"], true);
    assert_eq!(task_rows(&bridge), rows);
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_principal() {
    let bridge = TestBridge::start().await;
    let alice = bridge.create_key("alice", "operator").await;
    let bob = bridge.create_key("bob", "operator").await;
    let args = json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:x", "profile": "review", "idempotency_key": "same-key" });

    let a = bridge.call_mcp(Some(&alice), "submit_agent_task", args.clone()).await.expect("alice");
    let b = bridge.call_mcp(Some(&bob), "submit_agent_task", args.clone()).await.expect("bob");
    assert_eq!(a["idempotent_replay"], false);
    assert_eq!(b["idempotent_replay"], false, "bob's key must not find alice's task");
    assert_ne!(a["task_id"], b["task_id"]);
    assert_eq!(task_rows(&bridge), 2);

    // Each principal's retry finds its own task.
    let a2 = bridge.call_mcp(Some(&alice), "submit_agent_task", args.clone()).await.expect("alice retry");
    let b2 = bridge.call_mcp(Some(&bob), "submit_agent_task", args).await.expect("bob retry");
    assert_eq!((a2["task_id"].clone(), a2["idempotent_replay"].clone()), (a["task_id"].clone(), json!(true)));
    assert_eq!((b2["task_id"].clone(), b2["idempotent_replay"].clone()), (b["task_id"].clone(), json!(true)));
    let handle = &bridge;
    let owner = |id: &Value| {
        let id = id.as_str().expect("id").to_owned();
        async move { handle.wait_terminal(&id).await["owner"].clone() }
    };
    assert_eq!(owner(&a["task_id"]).await, "alice");
    assert_eq!(owner(&b["task_id"]).await, "bob");
    assert_eq!(task_rows(&bridge), 2);
    assert_eq!(bridge.fake_turns(), 2);
}

#[tokio::test]
async fn without_a_key_every_call_is_a_new_task() {
    let bridge = TestBridge::start().await;
    let args = json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:same" });
    let first = bridge.call("submit_agent_task", args.clone()).await.expect("first");
    let first_id = first["task_id"].as_str().expect("task_id").to_owned();
    assert_eq!(first["idempotent_replay"], false);
    assert_eq!(first["idempotency_key"], Value::Null);
    // Workspace-write: the second writer may start once the first released the lease.
    assert_eq!(bridge.wait_terminal(&first_id).await["status"], "succeeded");
    bridge.wait_released(&first_id, 1).await;

    let second = bridge.call("submit_agent_task", args).await.expect("second");
    let second_id = second["task_id"].as_str().expect("task_id").to_owned();
    assert_eq!(second["idempotent_replay"], false);
    assert_ne!(first_id, second_id);
    assert_eq!(bridge.wait_terminal(&second_id).await["status"], "succeeded");
    assert_eq!(task_rows(&bridge), 2);
    assert_eq!(bridge.fake_turns(), 2);
}

#[tokio::test]
async fn malformed_keys_are_refused_before_anything_is_stored() {
    let bridge = TestBridge::start().await;
    let b = &bridge;
    let submit = |key: String| {
        let args = json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:30", "idempotency_key": key });
        async move { b.call("submit_agent_task", args).await }
    };
    let too_long = "é".repeat(129); // 129 characters, 258 bytes
    assert!(too_long.chars().count() < 256 && too_long.len() > 256);
    let cases = [
        ("multibyte, over 256 bytes", too_long),
        ("ASCII, over 256 bytes", "k".repeat(257)),
        ("BEL", "key\u{7}bell".to_owned()),
        ("line feed", "two\nlines".to_owned()),
        ("DEL", "del\u{7f}ete".to_owned()),
    ];
    for (what, key) in cases {
        let (code, message) = error_of(&submit(key).await);
        assert_eq!(code, "INVALID_ARGUMENT", "{what}: {message}");
        assert!(message.contains("idempotency_key"), "{what}: the message must name the parameter: {message}");
    }
    assert_eq!(task_rows(&bridge), 0);
    assert!(task_ids(&bridge).await.is_empty());
    assert_eq!(guard_rows(&bridge), 0);
    assert!(bridge.lease_is_free(1));
    assert_eq!(bridge.fake_turns(), 0);

    // Exactly 256 bytes of multibyte characters is a valid key.
    let limit = "é".repeat(128);
    let accepted = submit(limit.clone()).await.expect("a 256-byte key");
    assert_eq!(accepted["idempotency_key"], limit.as_str());
    let replay = submit(limit).await.expect("its replay");
    assert_eq!(replay["task_id"], accepted["task_id"]);
    assert_eq!(task_rows(&bridge), 1);
}
