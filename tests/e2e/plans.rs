//! Plans with a human approval gate, through the real bridge: a plan
//! a session files waits; nothing of it runs before a person approves it on the board or the
//! local CLI; an MCP caller cannot approve it whatever its role; approval starts step 1; the
//! local operator's plans are approved at once; filing is atomic; a rejection keeps its
//! reason; a failed step stops the plan; a busy workdir makes it wait; cancelling it cancels
//! its step; a restart never re-runs a step.

use std::time::Duration;

use bridge_proto::methods::Surface;
use serde_json::{Value, json};

use e2e::{TestBridge, code, error_of, poll_until_async};

fn plan_args(steps: &[(&str, &str)]) -> Value {
    let steps: Vec<Value> = steps.iter().map(|(t, p)| json!({ "title": t, "prompt": p })).collect();
    json!({ "workdir": "repo", "runtime": "fake", "title": "Tidy the repository", "steps": steps })
}

async fn plan_of(b: &TestBridge, id: &str) -> Value {
    b.call("get_agent_plan", json!({ "plan_id": id })).await.expect("get plan")
}

/// Waits (bounded, by re-reading: a plan has no long poll) until `done(plan)` holds.
pub(crate) async fn wait_plan(b: &TestBridge, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let done = &done;
    poll_until_async(&format!("plan {id} reaches the expected state"), Duration::from_secs(30), move || async move {
        done(&plan_of(b, id).await)
    })
    .await;
    plan_of(b, id).await
}

fn plan_rows(b: &TestBridge) -> (i64, i64) {
    (b.count("plans"), b.count("plan_steps"))
}

/// A plan filed through MCP waits for a human, nothing of it is
/// served before, and the local operator's approval starts step 1 — whose task the plan's
/// owner follows and answers like any task.
#[tokio::test]
async fn a_session_plan_waits_for_a_human_and_approval_starts_step_one() {
    let b = TestBridge::start().await;
    let key = b.create_key("panel", "operator").await;
    let args = plan_args(&[("Ask first", "approval:deploy"), ("Then finish", "complete:done")]);
    let v = b.call_mcp(Some(&key), "submit_agent_plan", args).await.expect("submit plan");
    let id = v["plan_id"].as_str().expect("plan_id").to_owned();
    assert_eq!(v["status"], "pending_approval");
    assert_eq!(v["awaiting_human"], true);
    assert_eq!(v["approved_at"], Value::Null);
    assert_eq!((v["created_by"].as_str(), v["created_surface"].as_str()), (Some("panel"), Some("mcp")));
    assert!(v["message"].as_str().unwrap_or("").contains("awaits a human"), "{v:#}");
    assert_eq!(v["needs_human"], true, "a plan awaiting approval needs a human too");
    assert_eq!(plan_rows(&b), (1, 2));

    // Not served before approval: other work comes and goes, the plan's steps never start.
    let other = b.submit("complete:unrelated").await;
    b.wait_terminal(&other).await;
    b.writer_idle().await;
    let still = plan_of(&b, &id).await;
    assert_eq!(still["status"], "pending_approval");
    assert!(still["steps"].as_array().unwrap().iter().all(|s| s["status"] == "pending" && s["task_id"].is_null()));
    assert_eq!(b.task_count(), 1, "only the unrelated task exists");
    assert_eq!(b.fake_turns(), 1);

    // The plan's owner sees it; another key does not.
    let other_key = b.create_key("mobile", "operator").await;
    let hidden = b.call_mcp(Some(&other_key), "get_agent_plan", json!({ "plan_id": id })).await;
    assert_eq!(code(&hidden), "AGENT_PLAN_NOT_FOUND");

    // The human approves on the local CLI.
    let out = b.cli(&["plans", "approve", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = wait_plan(&b, &id, |p| p["steps"][0]["task_id"].is_string()).await;
    assert_eq!(p["approved_by"], "operator@local");
    let step1 = p["steps"][0]["task_id"].as_str().unwrap().to_owned();
    // Step 1's task belongs to the plan's owner: it follows and answers it through MCP.
    let t = b.wait_for(&step1, |t| t["status"] == "waiting_for_approval").await;
    assert_eq!(t["plan"], json!({ "plan_id": id, "step": 1 }));
    // The plan says a human must act: its state stays `running` (clients parse it), the step
    // carries `attention: needs_you`, the plan `needs_human`, and so does `plans show`.
    let p = plan_of(&b, &id).await;
    assert_eq!((p["status"].as_str(), p["needs_human"].as_bool()), (Some("running"), Some(true)), "{p:#}");
    assert_eq!(
        (p["steps"][0]["status"].as_str(), p["steps"][0]["attention"].as_str()),
        (Some("running"), Some("needs_you"))
    );
    assert_eq!(p["steps"][0]["task_status"], "waiting_for_approval");
    assert_eq!(p["steps"][1]["attention"], Value::Null);
    assert!(p["message"].as_str().unwrap_or("").contains("Step 1 waits for a human"), "{p:#}");
    let out = b.cli(&["plans", "show", &id]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && shown.contains("running, NEEDS YOU"), "{shown}");
    assert!(shown.contains(&format!("agent-bridge tasks show {step1}")), "{shown}");
    let out = b.cli(&["plans", "list"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.lines().any(|l| l.contains(&id) && l.contains("running, NEEDS YOU")), "{listed}");
    let owner = b.call_mcp(Some(&key), "get_agent_plan", json!({ "plan_id": id })).await.expect("owner sees it");
    assert_eq!(owner["steps"][0]["attention"], "needs_you", "the calling model sees it too");
    let t = b.call_mcp(Some(&key), "get_agent_task", json!({ "task_id": step1 })).await.expect("owner sees step 1");
    let request = t["pending_request"]["request_id"].as_str().unwrap().to_owned();
    b.call_mcp(
        Some(&key),
        "respond_agent_approval",
        json!({ "task_id": step1, "request_id": request, "decision": "approve_once" }),
    )
    .await
    .expect("owner answers");
    let p = wait_plan(&b, &id, |p| p["terminal"] == true).await;
    assert_eq!(p["status"], "succeeded", "{p:#}");
    assert_eq!(p["needs_human"], false);
    assert!(p["steps"].as_array().unwrap().iter().all(|s| s["attention"].is_null()), "{p:#}");
    let step2 = p["steps"][1]["task_id"].as_str().unwrap().to_owned();
    let t2 = b.get(&step2).await;
    assert_eq!(t2["continue_from_task_id"], step1.as_str(), "step 2 continues step 1's session");
    assert_eq!(t2["owner"], "panel");
}

/// A plan the local operator files is approved at creation and runs.
#[tokio::test]
async fn the_local_operators_plan_is_approved_at_once() {
    let b = TestBridge::start().await;
    let v = b.call("submit_agent_plan", plan_args(&[("Only", "complete:ok")])).await.expect("submit");
    assert_eq!(v["status"], "approved");
    assert_eq!(v["awaiting_human"], false);
    assert_eq!(v["approved_at"], v["created_at"]);
    let id = v["plan_id"].as_str().unwrap();
    let p = wait_plan(&b, id, |p| p["terminal"] == true).await;
    assert_eq!(p["status"], "succeeded");
    // An API key on the CLI surface is no person at this machine: its plan waits.
    let admin = b.create_key("root-key", "admin").await;
    let cred = format!("Bearer {admin}");
    let v = b.call_on(Surface::Cli, Some(&cred), "submit_agent_plan", plan_args(&[("x", "complete:x")])).await;
    assert_eq!(v.expect("submit")["status"], "pending_approval");
}

/// One invalid step and nothing is created, whichever step it is.
#[tokio::test]
async fn an_invalid_step_creates_nothing() {
    let b = TestBridge::start().await;
    let key = b.create_key("panel", "operator").await;
    let bad = plan_args(&[("one", "complete:1"), ("two", "complete:2"), ("three", "   ")]);
    let (c, message) = error_of(&b.call_mcp(Some(&key), "submit_agent_plan", bad).await);
    assert_eq!(c, "INVALID_ARGUMENT");
    assert!(message.contains("steps[2].prompt"), "{message}");
    let untitled = json!({ "workdir": "repo", "runtime": "fake", "title": "t", "steps": [{ "title": "a", "prompt": "complete:a" }, { "prompt": "x" }] });
    assert_eq!(code(&b.call_mcp(Some(&key), "submit_agent_plan", untitled).await), "INVALID_ARGUMENT");
    let too_many: Vec<(&str, &str)> = (0..21).map(|_| ("s", "complete:s")).collect();
    assert_eq!(code(&b.call_mcp(Some(&key), "submit_agent_plan", plan_args(&too_many)).await), "INVALID_ARGUMENT");
    let review_only = json!({ "workdir": "docs", "runtime": "fake", "title": "t", "profile": "workspace-write", "steps": [{ "title": "a", "prompt": "complete:a" }] });
    assert_eq!(code(&b.call_mcp(Some(&key), "submit_agent_plan", review_only).await), "AGENT_PROFILE_NOT_ALLOWED");
    assert_eq!(plan_rows(&b), (0, 0));
    assert_eq!(b.task_count(), 0);
    // Retry-safe: the same key and request give the same plan; another request conflicts.
    let mut keyed = plan_args(&[("one", "complete:1")]);
    keyed["idempotency_key"] = json!("plan-1");
    let first = b.call_mcp(Some(&key), "submit_agent_plan", keyed.clone()).await.expect("first");
    let again = b.call_mcp(Some(&key), "submit_agent_plan", keyed.clone()).await.expect("replay");
    assert_eq!((first["plan_id"].clone(), again["idempotent_replay"].clone()), (again["plan_id"].clone(), json!(true)));
    keyed["title"] = json!("Something else");
    assert_eq!(code(&b.call_mcp(Some(&key), "submit_agent_plan", keyed).await), "AGENT_IDEMPOTENCY_CONFLICT");
    assert_eq!(plan_rows(&b), (1, 1));
}

/// An MCP caller with the admin role cannot approve a plan by any tool; neither can an API
/// key that claims the board or the CLI surface.
#[tokio::test]
async fn an_mcp_admin_cannot_approve_by_any_tool() {
    let b = TestBridge::start().await;
    let admin = b.create_key("boss", "admin").await;
    let v = b.call_mcp(Some(&admin), "submit_agent_plan", plan_args(&[("one", "complete:1")])).await.unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let tools = b.list_mcp(Some(&admin)).await.expect("list");
    let names: Vec<String> =
        tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    for hidden in ["admin_approve_plan", "admin_reject_plan", "admin_list_plans", "admin_create_board_token"] {
        assert!(!names.iter().any(|n| n == hidden), "{hidden} is listed on MCP: {names:?}");
        let r = b.call_mcp(Some(&admin), hidden, json!({ "plan_id": id })).await;
        assert_eq!(code(&r), "UNKNOWN_TOOL", "{hidden}");
    }
    // Every tool the admin sees, called with the plan's id: none approves it.
    for name in names.iter().filter(|n| !n.starts_with("cancel_")) {
        let _ = b.call_mcp(Some(&admin), name, json!({ "plan_id": id })).await;
        let _ =
            b.call_mcp(Some(&admin), name, json!({ "plan_id": id, "decision": "approve_once", "task_id": id })).await;
    }
    let cred = format!("Bearer {admin}");
    let board = b.call_on(Surface::Board, Some(&cred), "admin_approve_plan", json!({ "plan_id": id })).await;
    assert_eq!(code(&board), "UNAUTHENTICATED", "no socket client is the board");
    let cli = b.call_on(Surface::Cli, Some(&cred), "admin_approve_plan", json!({ "plan_id": id })).await;
    assert_eq!(code(&cli), "PLAN_APPROVAL_NOT_ALLOWED", "a key is no person at this machine");
    let p = plan_of(&b, &id).await;
    assert_eq!((p["status"].as_str(), p["approved_at"].is_null()), (Some("pending_approval"), true));
    assert_eq!(b.task_count(), 0);
    assert_eq!(b.fake_turns(), 0);
    // Reading the log flushes the audit writer first.
    let log = b.call("admin_read_audit_log", json!({ "capability": "admin_approve_plan" })).await.unwrap();
    let surfaces: Vec<&str> = log["rows"].as_array().unwrap().iter().map(|r| r["surface"].as_str().unwrap()).collect();
    assert_eq!(surfaces.len(), 3, "each attempt is audited: {log:#}");
    assert!(log["rows"].as_array().unwrap().iter().all(|r| r["outcome"] != "ok"));
}

/// A rejection keeps its reason (and is final); the owner reads it.
#[tokio::test]
async fn a_rejection_keeps_its_reason() {
    let b = TestBridge::start().await;
    let key = b.create_key("panel", "operator").await;
    let v = b.call_mcp(Some(&key), "submit_agent_plan", plan_args(&[("one", "complete:1")])).await.unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let out = b.cli(&["plans", "reject", &id, "--reason", "too broad: split it"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = b.call_mcp(Some(&key), "get_agent_plan", json!({ "plan_id": id })).await.unwrap();
    assert_eq!(p["status"], "rejected");
    assert_eq!(p["rejection"]["reason"], "too broad: split it");
    assert_eq!(p["rejection"]["by"], "operator@local");
    assert!(p["message"].as_str().unwrap().contains("too broad"), "{p:#}");
    assert_eq!(code(&b.call("admin_approve_plan", json!({ "plan_id": id })).await), "PLAN_NOT_PENDING");
    assert_eq!(b.task_count(), 0);
}

/// A step that fails stops the plan with its reason; later steps never run.
#[tokio::test]
async fn a_failed_step_stops_the_plan() {
    let b = TestBridge::start().await;
    let args = plan_args(&[("one", "complete:1"), ("two", "fail:the tests are red"), ("three", "complete:3")]);
    let v = b.call("submit_agent_plan", args).await.unwrap();
    let id = v["plan_id"].as_str().unwrap();
    let p = wait_plan(&b, id, |p| p["terminal"] == true).await;
    assert_eq!(p["status"], "failed", "{p:#}");
    let statuses: Vec<&str> = p["steps"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "failed", "not_run"]);
    assert!(p["error"]["message"].as_str().unwrap().contains("step 2"), "{p:#}");
    assert_eq!(b.task_count(), 2, "step 3 never ran");
}

/// A busy workdir makes the plan wait (and say so), then it runs when the writer is done;
/// cancelling a plan cancels the step it runs.
#[tokio::test]
async fn a_busy_workdir_makes_the_plan_wait_and_cancel_stops_its_step() {
    let mut b = TestBridge::start().await;
    let writer = b.submit("wait:2").await;
    b.wait_status(&writer, "running").await;
    let v = b.call("submit_agent_plan", plan_args(&[("one", "complete:1")])).await.unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let p = wait_plan(&b, &id, |p| p["status"] == "waiting").await;
    assert_eq!(p["waiting_for"], "WORKDIR_BUSY");
    assert!(p["message"].as_str().unwrap().contains("waits for its workdir"), "{p:#}");
    let p = wait_plan(&b, &id, |p| p["terminal"] == true).await;
    assert_eq!(p["status"], "succeeded", "it ran once the writer was done: {p:#}");

    let v = b.call("submit_agent_plan", plan_args(&[("long", "wait:60"), ("after", "complete:2")])).await.unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let p = wait_plan(&b, &id, |p| p["steps"][0]["task_id"].is_string()).await;
    let step = p["steps"][0]["task_id"].as_str().unwrap().to_owned();
    b.wait_status(&step, "running").await;
    let cancelled = b.call("cancel_agent_plan", json!({ "plan_id": id })).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(b.get(&step).await["status"], "cancelled", "its step was cancelled before the call returned");
    let again = b.call("cancel_agent_plan", json!({ "plan_id": id })).await.unwrap();
    assert_eq!(again["status"], "cancelled", "repeat-safe");
    // The bridge stops in order, which waits for its plan runners: a runner about to start
    // step 2 would have linked its task by then.
    assert!(b.stop().await.success(), "{}", b.log());
    let linked = format!("SELECT COUNT(*) FROM plan_steps WHERE plan_id = '{id}' AND task_id IS NOT NULL");
    assert_eq!(b.db_count(&linked), 1, "step 2 never starts");
}

/// A bridge killed mid-plan: at restart the plan is `interrupted` with its step, and no step
/// runs again (the fake runtime counts its turns).
#[tokio::test]
async fn a_restart_mid_plan_never_reruns_a_step() {
    let mut b = TestBridge::start().await;
    let v = b.call("submit_agent_plan", plan_args(&[("long", "wait:60"), ("after", "complete:2")])).await.unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let p = wait_plan(&b, &id, |p| p["steps"][0]["task_id"].is_string()).await;
    let step = p["steps"][0]["task_id"].as_str().unwrap().to_owned();
    b.wait_status(&step, "running").await;
    e2e::poll_until("the provider records its turn", Duration::from_secs(10), || b.fake_turns() == 1).await;
    b.crash().await;
    e2e::poll_until("the orphaned provider exits", Duration::from_secs(10), || e2e::marker_pids(&step).is_empty())
        .await;
    b.spawn().await;
    let p = wait_plan(&b, &id, |p| p["terminal"] == true).await;
    assert_eq!(p["status"], "interrupted", "{p:#}");
    assert_eq!(p["error"]["code"], "BRIDGE_RESTARTED");
    assert_eq!(p["steps"][0]["status"], "interrupted");
    assert_eq!(p["steps"][1]["status"], "not_run");
    assert_eq!(b.get(&step).await["status"], "interrupted");
    // The bridge stops in order, which waits for its plan runners: a runner about to run a
    // step again would have filed its task by then.
    assert!(b.stop().await.success(), "{}", b.log());
    assert_eq!(b.fake_turns(), 1, "no step ran again");
    assert_eq!(b.task_count(), 1);
}
