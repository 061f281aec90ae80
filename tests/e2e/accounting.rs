//! Review and accounting against a real bridge with the fake runtime: each task's title,
//! timing and human-wait time, the admin totals per principal and per workdir over a period,
//! a plan's sum over its steps, and the diff tool's owner rules and refusals.

use serde_json::{Value, json};

use std::time::Duration;

use e2e::{TestBridge, code, error_of, poll_until_async};

fn approval_of(t: &Value) -> String {
    t["pending_request"]["request_id"].as_str().expect("a pending request").to_owned()
}

#[tokio::test]
async fn a_task_shows_its_title_its_time_and_the_time_it_waited_for_a_human() {
    let b = TestBridge::start().await;
    let id = b.submit("approval:make test\nand a second line that is not the title").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    assert_eq!(t["title"], "approval:make test", "{t:#}");
    // While a human is awaited, the wait so far counts.
    let before = b.get(&id).await;
    assert!(before["timing"]["human_wait_ms"].as_i64().unwrap() >= 0, "{before:#}");
    let request = approval_of(&t);
    // Some wall time passes for the human: the socket round trips of these reads.
    let mut waited = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while waited == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the wait for a human never counted");
        waited = b.get(&id).await["timing"]["human_wait_ms"].as_i64().unwrap();
    }
    b.call("respond_agent_approval", json!({ "task_id": id, "request_id": request, "decision": "approve_once" }))
        .await
        .expect("approve");
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let wall = t["timing"]["wall_ms"].as_i64().expect("wall_ms of a finished task");
    let human = t["timing"]["human_wait_ms"].as_i64().unwrap();
    assert!(human >= waited && human <= wall, "waited {human} ms of {wall} ms (at least {waited} seen while pending)");
    // The fake runtime reports no usage: null, never a made-up zero.
    assert_eq!(t["usage"], Value::Null, "{t:#}");
    // Its time does not grow once it is over.
    assert_eq!(b.get(&id).await["timing"], t["timing"]);
}

#[tokio::test]
async fn admin_totals_are_per_principal_and_per_workdir_over_a_period() {
    let b = TestBridge::start().await;
    let alice = b.create_key("alice", "operator").await;
    let mut ids = Vec::new();
    for (key, workdir, profile) in
        [(Some(&alice), "repo", "workspace-write"), (None, "docs", "review"), (Some(&alice), "docs", "review")]
    {
        let args = json!({ "runtime": "fake", "workdir": workdir, "profile": profile, "prompt": "complete:done" });
        let v = match key {
            Some(key) => b.call_mcp(Some(key), "submit_agent_task", args).await,
            None => b.call("submit_agent_task", args).await,
        }
        .expect("submit");
        let id = v["task_id"].as_str().unwrap().to_owned();
        b.wait_terminal(&id).await;
        ids.push(id);
    }
    let v = b.call("admin_list_tasks", json!({})).await.expect("list");
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3);
    assert!(tasks.iter().all(|t| t["title"] == "complete:done" && t["duration_ms"].is_i64()), "{tasks:#?}");
    let totals = &v["totals"];
    assert_eq!(totals["overall"]["tasks"], 3, "{totals:#}");
    assert_eq!(totals["overall"]["tasks_with_usage"], 0);
    assert_eq!(totals["overall"]["cost_usd"], Value::Null);
    let per = |list: &str, key: &str| -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = totals[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g[key].as_str().unwrap().to_owned(), g["tasks"].as_i64().unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(per("by_principal", "principal"), vec![("alice".into(), 2), ("operator@local".into(), 1)]);
    assert_eq!(per("by_workdir", "workdir"), vec![("docs".into(), 2), ("repo".into(), 1)]);
    let wall: i64 = tasks.iter().map(|t| t["duration_ms"].as_i64().unwrap()).sum();
    assert_eq!(totals["overall"]["wall_ms"], wall, "the totals add up the tasks' own durations");

    // A period: the totals cover only it, whatever the page holds.
    let future = b.call("admin_list_tasks", json!({ "since": "2999-01-01T00:00:00Z" })).await.expect("list");
    assert_eq!(future["tasks"], json!([]));
    assert_eq!(future["totals"]["overall"]["tasks"], 0);
    let page = b.call("admin_list_tasks", json!({ "limit": 1, "until": "2999-01-01T00:00:00Z" })).await.expect("list");
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(page["totals"]["overall"]["tasks"], 3, "totals cover the filter, not the page");
    let (c, message) = error_of(&b.call("admin_list_tasks", json!({ "since": "yesterday" })).await);
    assert_eq!(c, "INVALID_ARGUMENT");
    assert!(message.contains("'since'") && message.contains("RFC 3339"), "{message}");

    // The CLI shows the same totals when asked (they read every task the filter matches).
    let out = b.cli(&["tasks", "list", "--totals", "--limit", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TITLE") && text.contains("total: 3 tasks"), "{text}");
    let out = b.cli(&["tasks", "list"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TITLE") && !text.contains("total:"), "{text}");
    let out = b.cli(&["tasks", "list", "--json"]);
    let listed: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(listed.get("totals").is_none() && listed["tasks"].as_array().is_some_and(|t| t.len() == 3), "{listed}");
}

#[tokio::test]
async fn a_plan_shows_the_sum_of_its_steps() {
    let b = TestBridge::start().await;
    // The fake runtime reports usage as a real one does (`usage:IN/OUT/COST`).
    let steps =
        json!([{ "title": "one", "prompt": "usage:1200/34/0.25" }, { "title": "two", "prompt": "usage:800/16/0.125" }]);
    let args = json!({ "workdir": "repo", "runtime": "fake", "title": "Two steps", "steps": steps });
    let v = b.call("submit_agent_plan", args).await.expect("plan");
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let (b, plan_id) = (&b, id.as_str());
    let read = move || async move { b.call("get_agent_plan", json!({ "plan_id": plan_id })).await.expect("plan") };
    poll_until_async("the plan ends", Duration::from_secs(30), || async { read().await["terminal"] == true }).await;
    let plan = read().await;
    assert_eq!(plan["status"], "succeeded", "{plan:#}");
    let usage = &plan["usage"];
    assert_eq!(usage["tasks"], 2, "{usage:#}");
    assert_eq!(usage["tasks_with_usage"], 2, "{usage:#}");
    assert_eq!((usage["input_tokens"].as_i64(), usage["output_tokens"].as_i64()), (Some(2000), Some(50)), "{usage:#}");
    assert_eq!(usage["cost_usd"].as_f64(), Some(0.375), "{usage:#}");
    let first = b.get(plan["steps"][0]["task_id"].as_str().unwrap()).await;
    assert_eq!(first["usage"]["input_tokens"], 1200, "{first:#}");
    assert_eq!(first["usage"]["cost_usd"], 0.25);
    assert_eq!(first["usage"]["model"], "fake-scripted");
    // The admin totals hold the same sums, per principal too.
    let totals = b.call("admin_list_tasks", json!({})).await.expect("list")["totals"].clone();
    assert_eq!(totals["overall"]["cost_usd"].as_f64(), Some(0.375), "{totals:#}");
    assert_eq!(totals["by_principal"][0]["input_tokens"], 2000, "{totals:#}");
    let mut wall = 0;
    for step in plan["steps"].as_array().unwrap() {
        wall += b.get(step["task_id"].as_str().unwrap()).await["timing"]["wall_ms"].as_i64().unwrap();
    }
    assert_eq!(usage["wall_ms"], wall, "{usage:#}");
}

#[tokio::test]
async fn the_diff_follows_the_owner_rules_and_says_why_there_is_none() {
    let b = TestBridge::start().await;
    let alice = b.create_key("alice", "operator").await;
    let viewer = b.create_key("eve", "viewer").await;
    let running = b.submit("wait:30").await;
    b.wait_status(&running, "running").await;
    let r = b.call("read_agent_task_diff", json!({ "task_id": running })).await;
    let (c, message) = error_of(&r);
    assert_eq!(c, "AGENT_DIFF_NOT_AVAILABLE");
    assert!(message.contains("when the task ends"), "{message}");
    // Another principal's task answers like a missing one, for a viewer and an operator alike.
    for key in [&alice, &viewer] {
        let r = b.call_mcp(Some(key), "read_agent_task_diff", json!({ "task_id": running })).await;
        assert_eq!(code(&r), "AGENT_TASK_NOT_FOUND");
    }
    let r = b.call("read_agent_task_diff", json!({ "task_id": running, "max_bytes": 65_537 })).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT");
    let r = b.call("read_agent_task_diff", json!({ "task_id": "agt_nope" })).await;
    assert_eq!(code(&r), "AGENT_TASK_NOT_FOUND");
    b.call("cancel_agent_task", json!({ "task_id": running })).await.expect("cancel");
    b.wait_terminal(&running).await;
}

/// A request the runtime resolves itself (Codex's `serverRequest/resolved` when its Remote
/// Control answered first: that service cannot run here, so the fake runtime resolves it the
/// same way) goes stale with its reason; the caller's late answer is refused saying why.
#[tokio::test]
async fn a_request_answered_elsewhere_goes_stale_with_its_reason() {
    let b = TestBridge::start().await;
    let id = b.submit("answered-elsewhere:1.5").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let request = approval_of(&t);
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["final_response"], "approved elsewhere");
    let late = b
        .call("respond_agent_approval", json!({ "task_id": id, "request_id": request, "decision": "approve_once" }))
        .await;
    let (c, message) = error_of(&late);
    assert_eq!(c, "REQUEST_STALE");
    assert!(message.contains("answered elsewhere"), "{message}");
    let events = b.all_events(&id).await;
    let stale =
        events.iter().find(|e| e["payload"]["reason"].as_str().is_some_and(|r| r.contains("answered elsewhere")));
    assert!(stale.is_some(), "no event gives the reason: {events:#?}");
    assert_eq!(t["timing"]["human_wait_ms"].as_i64().map(|w| w > 0), Some(true), "{t:#}");
}
