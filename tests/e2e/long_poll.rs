//! `get_agent_task {wait_seconds}` as an MCP caller sees it, with the real `rmcp` client
//! through the real front: a wait that begins right after the submission ends when the task
//! ends or starts waiting for an approval, not when it starts running, and otherwise at its
//! deadline.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::front::{Client, Era, call, connect, ok};
use e2e::TestBridge;
use e2e::front::TestFront;

/// Submits `prompt` on the fake runtime and returns the task id.
async fn submit(client: &Client, prompt: &str) -> String {
    let submitted =
        ok(&call(client, "submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt })).await);
    submitted["task_id"].as_str().expect("task_id").to_owned()
}

/// One `get_agent_task` with `wait_seconds`, and how long it took.
async fn wait(client: &Client, task_id: &str, seconds: u64) -> (Value, Duration) {
    let started = Instant::now();
    let task = ok(&call(client, "get_agent_task", json!({ "task_id": task_id, "wait_seconds": seconds })).await);
    (task, started.elapsed())
}

#[tokio::test]
async fn a_wait_right_after_submitting_ends_with_the_tasks_end_not_its_start() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("caller", "operator").await;
    let client = connect(&front, &key, Era::Legacy).await;

    // A quick task: the one wait ends with its result.
    let quick = submit(&client, "complete:done").await;
    let (task, _) = wait(&client, &quick, 10).await;
    assert_eq!(task["status"], "succeeded", "{task:#}");
    assert_eq!(task["final_response"], "done");

    // A task that runs for a second: the wait outlives `running` and ends with the result.
    let slow = submit(&client, "wait:1").await;
    let (task, took) = wait(&client, &slow, 10).await;
    assert_eq!(task["status"], "succeeded", "the wait ended before the task did: {task:#}");
    assert_eq!(task["final_response"], "waited 1 s");
    assert!(took >= Duration::from_millis(900), "the task runs for a second, the wait took {took:?}");
    assert!(took < Duration::from_secs(9), "the wait did not end with the task: {took:?}");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_wait_right_after_submitting_ends_when_the_task_asks_for_approval() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("caller", "operator").await;
    let client = connect(&front, &key, Era::Legacy).await;

    // The wait ends with the request in the answer; a wait on it ends when it is answered.
    let asking = submit(&client, "approval:ship it").await;
    let (task, took) = wait(&client, &asking, 10).await;
    assert_eq!(task["status"], "waiting_for_approval", "{task:#}");
    assert_eq!(task["pending_request"]["kind"], "approval", "{task:#}");
    let request_id = task["pending_request"]["request_id"].as_str().expect("the pending request's id").to_owned();
    assert!(took < Duration::from_secs(9), "the wait did not end with the approval: {took:?}");
    let answer = json!({ "task_id": asking, "request_id": request_id, "decision": "approve_once" });
    ok(&call(&client, "respond_agent_approval", answer).await);
    let (task, _) = wait(&client, &asking, 10).await;
    assert!(task["pending_request"].is_null(), "{task:#}");
    assert_ne!(task["status"], "waiting_for_approval", "{task:#}");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_wait_with_nothing_awaited_ends_at_its_deadline_with_the_task_running() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let key = bridge.create_key("caller", "operator").await;
    let client = connect(&front, &key, Era::Legacy).await;
    let task_id = submit(&client, "wait:30").await;

    // Begun before the task runs: starting to run does not end it.
    let (task, took) = wait(&client, &task_id, 1).await;
    assert!(took >= Duration::from_millis(900), "the wait ended early, at {took:?}: {task:#}");
    assert!(took < Duration::from_secs(10), "a 1 s wait took {took:?}");
    assert_eq!(task["terminal"], false, "{task:#}");
    assert!(task["pending_request"].is_null(), "{task:#}");

    // Running: a 1 s wait answers `running` after about a second.
    bridge.wait_status(&task_id, "running").await;
    let (task, took) = wait(&client, &task_id, 1).await;
    assert_eq!(task["status"], "running", "{task:#}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(10), "a 1 s wait took {took:?}");

    ok(&call(&client, "cancel_agent_task", json!({ "task_id": task_id })).await);
    let _ = client.cancel().await;
}
