//! Lifecycle reliability: interaction and task deadlines, cancellation
//! that is visible at once while the workdir stays closed until cleanup ends, bounded
//! interrupts, the stop ladder, and the per-task event cap. Limits are shortened through the
//! `.env` instead of waiting; every wait is a long poll or a bounded poll.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use bridge_proto::client::CallError;
use e2e::{Options, TestBridge, alive, code, event_types, marker_pids, poll_until, state_and_parent};

async fn respond(b: &TestBridge, task_id: &str, request_id: &str, decision: &str) -> Result<Value, CallError> {
    b.call("respond_agent_approval", json!({ "task_id": task_id, "request_id": request_id, "decision": decision }))
        .await
}

async fn answer(b: &TestBridge, task_id: &str, request_id: &str) -> Result<Value, CallError> {
    let answers = json!([{ "question_id": "q1", "selected_option_ids": ["yes"] }]);
    b.call("answer_agent_question", json!({ "task_id": task_id, "request_id": request_id, "answers": answers })).await
}

fn request_id(task: &Value) -> String {
    task["pending_request"]["request_id"].as_str().unwrap_or_else(|| panic!("no pending request: {task:#}")).to_owned()
}

/// `(status, created_at, expires_at)` of an interaction row.
fn interaction(b: &TestBridge, request_id: &str) -> (String, i64, i64) {
    b.db()
        .query_row("SELECT status, created_at, expires_at FROM interactions WHERE request_id = ?1", [request_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("interaction row")
}

/// `(created_at, completed_at, deadline_at)` of a task row.
fn times(b: &TestBridge, task_id: &str) -> (i64, Option<i64>, i64) {
    b.db()
        .query_row("SELECT created_at, completed_at, deadline_at FROM tasks WHERE task_id = ?1", [task_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("task row")
}

/// The one provider process of a running task (the fake has started and reads its script).
async fn provider_of(task_id: &str) -> i32 {
    poll_until("the provider runs", Duration::from_secs(10), || marker_pids(task_id).len() == 1).await;
    marker_pids(task_id)[0]
}

/// A writer submit that the busy workdir must refuse, adding no row.
async fn assert_writer_refused(b: &TestBridge, expected: &str) {
    let rows = b.task_count();
    let r = b.submit_args(json!({ "prompt": "complete:too early" })).await;
    assert_eq!(code(&r), expected);
    assert_eq!(b.task_count(), rows, "a refused submit adds no row");
}

/// The next writer gets the workdir and finishes.
async fn assert_next_writer_runs(b: &TestBridge) {
    let next = b.submit_ok(json!({ "prompt": "complete:next writer" })).await;
    let t = b.wait_terminal(&next).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
}

/// Polls until the guard is cleared, checking at every round that a guard never disappears
/// while `provider` still runs; returns how long it took.
async fn guard_kept_until_provider_gone(b: &TestBridge, task_id: &str, provider: i32, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        // Read the guard first: the bridge deletes it only after the stop is proven, so a
        // live provider seen *after* a missing guard would be a guard cleared too early.
        let guards = b.guard_count();
        let running = alive(provider) || !marker_pids(task_id).is_empty();
        if guards == 0 {
            assert!(!running, "the guard was cleared while the provider ({provider}) still runs:\n{}", b.log());
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "the guard of {task_id} is still there after {limit:?}:\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Step by step, a request left unanswered: the interaction deadline's wiring
/// through the socket, the provider's stop and the workdir's release. The timer itself (at its
/// stored expiry, not before; both kinds; capped by the task deadline) is tested in process on
/// a paused clock (`bridge/src/tasks/timer_tests.rs`).
async fn unanswered_request_expires(prompt: &str, waiting: &str, kind: &str) {
    // 3 s rather than 1: `wait_status` may see the request up to a second late (a long poll
    // that began just after the change), and the provider must still be there to be found.
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=3")).await;
    let id = b.submit(prompt).await;
    let t = b.wait_status(&id, waiting).await;
    let rid = request_id(&t);
    let provider = provider_of(&id).await;
    let (status, created, expires) = interaction(&b, &rid);
    assert_eq!(status, "pending");
    assert_eq!(expires - created, 3_000, "expires_at = now + the interaction timeout (the task has 2 h left)");
    assert!(t["pending_request"]["expires_at"].as_str() < t["deadline_at"].as_str(), "{t:#}");

    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "interrupted", "{end:#}");
    assert_eq!(end["error"]["code"], "AGENT_INTERACTION_TIMED_OUT", "{end:#}");
    assert!(end["pending_request"].is_null(), "{end:#}");
    assert!(end["final_response"].is_null(), "an expiry is no decision: {end:#}");
    let (_, completed, _) = times(&b, &id);
    assert!(completed.expect("completed_at") >= expires, "interrupted before the request expired");

    // 1. the request is stale, and a late answer says so.
    assert_eq!(interaction(&b, &rid).0, "stale");
    let late =
        if kind == "approval" { respond(&b, &id, &rid, "approve_once").await } else { answer(&b, &id, &rid).await };
    assert_eq!(code(&late), "REQUEST_STALE");
    assert_eq!(b.get(&id).await["status"], "interrupted", "a late answer changes nothing");

    // 6. the evidence: the expiry, then the interruption, once each.
    let events = b.all_events(&id).await;
    let types = event_types(&events);
    let once = |t: &str| {
        assert_eq!(types.iter().filter(|x| *x == t).count(), 1, "{t} once: {types:?}");
        types.iter().position(|x| x == t).unwrap()
    };
    assert!(once("interaction.expired") < once("task.interrupted"), "{types:?}");
    let expired = events.iter().find(|e| e["event_type"] == "interaction.expired").unwrap();
    assert_eq!(expired["payload"]["request_id"], rid.as_str());
    assert_eq!(expired["payload"]["kind"], kind);
    let interrupted = events.iter().find(|e| e["event_type"] == "task.interrupted").unwrap();
    assert_eq!(interrupted["payload"]["error_code"], "AGENT_INTERACTION_TIMED_OUT");
    for never in ["approval.resolved", "question.answered", "command.started", "task.completed"] {
        assert!(!types.iter().any(|t| t == never), "{never} after an expiry: {types:?}");
    }

    // 2–3, 7–8: the provider turn is stopped, the lease released, the guard cleared on proof.
    poll_until("the provider is gone", Duration::from_secs(15), || marker_pids(&id).is_empty()).await;
    assert!(!alive(provider));
    b.writer_idle().await;
    assert_next_writer_runs(&b).await;
    assert_eq!(b.get(&id).await["error"]["code"], "AGENT_INTERACTION_TIMED_OUT", "the old task keeps its reason");
}

#[tokio::test]
async fn an_unanswered_approval_expires_the_task_and_frees_the_workdir() {
    unanswered_request_expires("approval:deploy", "waiting_for_approval", "approval").await;
}

/// The task deadline's wiring: the stored deadline interrupts the task and its provider is
/// stopped. The timer itself (at the stored deadline, not before) is tested in process on a
/// paused clock (`bridge/src/tasks/timer_tests.rs`).
#[tokio::test]
async fn a_task_past_its_deadline_is_interrupted_and_its_provider_stopped() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=2")).await;
    let id = b.submit("wait:30").await;
    b.wait_status(&id, "running").await;
    let provider = provider_of(&id).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "interrupted", "{end:#}");
    assert_eq!(end["error"]["code"], "AGENT_TASK_TIMED_OUT", "{end:#}");
    assert!(end["final_response"].is_null());
    let (created, completed, deadline) = times(&b, &id);
    assert_eq!(deadline - created, 2_000, "the deadline is frozen at submit");
    let completed = completed.expect("completed_at");
    assert!(completed >= deadline, "interrupted {} ms before the deadline", deadline - completed);
    assert!(completed < deadline + 5_000, "interrupted {} ms after the deadline", completed - deadline);
    let types = event_types(&b.all_events(&id).await);
    assert!(types.last().is_some_and(|t| t == "task.interrupted"), "{types:?}");

    poll_until("the provider is stopped", Duration::from_secs(15), || !alive(provider)).await;
    assert!(marker_pids(&id).is_empty());
    b.writer_idle().await;
    assert!(b.lease_is_free(1));
    assert_next_writer_runs(&b).await;
}

#[tokio::test]
async fn a_deadline_with_a_deaf_provider_bounds_the_interrupt_and_keeps_the_guard_until_the_stop() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=2")).await;
    let id = b.submit("ignore-interrupt:60").await;
    b.wait_status(&id, "running").await;
    let provider = provider_of(&id).await;

    let end = b.wait_terminal(&id).await;
    let seen = Instant::now();
    assert_eq!(end["status"], "interrupted", "{end:#}");
    assert_eq!(end["error"]["code"], "AGENT_TASK_TIMED_OUT");
    let (_, completed, deadline) = times(&b, &id);
    assert!((deadline..deadline + 5_000).contains(&completed.expect("completed_at")), "interrupted at the deadline");

    // The provider ignores the interrupt: it still runs, and the workdir stays closed.
    assert!(alive(provider), "the provider is given its bounded chance to stop");
    assert_eq!(b.guard_count(), 1);
    assert!(!b.lease_is_free(1));
    assert_writer_refused(&b, "WORKDIR_BUSY").await;

    let released = guard_kept_until_provider_gone(&b, &id, provider, Duration::from_secs(40)).await;
    // Unbounded, the provider would run its 60 s and finish; the bound is 10 s, then the stop.
    assert!(released < Duration::from_secs(25), "the interrupt was not bounded: {released:?}");
    e2e::measured(format_args!(
        "deadline with a deaf provider: workdir released {released:?} after the task read interrupted"
    ));
    assert!(marker_pids(&id).is_empty());
    poll_until("the lease is released", Duration::from_secs(5), || b.lease_is_free(1)).await;
    let after = b.get(&id).await;
    assert_eq!(after["status"], "interrupted");
    assert!(after["final_response"].is_null(), "{after:#}");
    assert_next_writer_runs(&b).await;
    assert!(seen.elapsed() < Duration::from_secs(40));
}

/// The cancel RPC and the task read agree at once, while the lease stays
/// taken (`WORKDIR_BUSY`) until a deliberately delayed cleanup finishes.
#[tokio::test]
async fn a_cancelled_task_reads_cancelled_at_once_while_the_workdir_stays_busy_until_cleanup() {
    let b = TestBridge::start().await;
    // The provider ignores the interrupt and ends its turn on its own after 4 s: that is the
    // delayed cleanup.
    let id = b.submit("ignore-interrupt:4").await;
    b.wait_status(&id, "running").await;
    let provider = provider_of(&id).await;

    let started = Instant::now();
    let c = b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    let took = started.elapsed();
    assert_eq!(c["status"], "cancelled", "{c:#}");
    let now = b.get(&id).await;
    assert_eq!(now["status"], "cancelled", "persisted before the RPC returned: {now:#}");
    assert_eq!(now["terminal"], true);
    let (_, completed, _) = times(&b, &id);
    assert!(completed.is_some(), "the row is terminal too");
    e2e::measured(format_args!("cancel with a delayed cleanup returned in {took:?}"));

    // Both at once: the task is cancelled, and the workdir is still busy.
    assert!(alive(provider), "the cleanup is still running");
    assert_writer_refused(&b, "WORKDIR_BUSY").await;

    let mut refusals = 1;
    let accepted = loop {
        match b.submit_args(json!({ "prompt": "complete:after the cleanup" })).await {
            Ok(v) => break v["task_id"].as_str().expect("task_id").to_owned(),
            Err(e) => {
                assert_eq!(e.code(), "WORKDIR_BUSY", "{e}");
                refusals += 1;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the workdir never became free:\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let waited = started.elapsed();
    assert!(!alive(provider) && marker_pids(&id).is_empty(), "the workdir was free before the provider was gone");
    assert!(waited >= Duration::from_secs(2), "the workdir was free {waited:?} after the cancel, before the cleanup");
    e2e::measured(format_args!(
        "§14.1: {refusals} writer submits refused WORKDIR_BUSY; the workdir was free {waited:?} after cancel"
    ));
    let next = b.wait_terminal(&accepted).await;
    assert_eq!(next["status"], "succeeded", "{next:#}");
    let old = b.get(&id).await;
    assert_eq!(old["status"], "cancelled", "the late result is discarded: {old:#}");
    assert!(old["final_response"].is_null(), "{old:#}");
    let types = event_types(&b.all_events(&id).await);
    assert_eq!(types.iter().filter(|t| *t == "task.cancelled").count(), 1, "{types:?}");
    assert!(!types.iter().any(|t| t == "task.completed"), "{types:?}");
}

/// A provider whose interrupt never returns. The cancel still returns at
/// once; the guard stays until the stop ladder has ended the provider. The test holds the
/// provider's stdin open, so closing its input (the ladder's first step) does not end it
/// either: only the ladder's signal does.
#[tokio::test]
async fn cancel_returns_at_once_when_the_interrupt_never_returns_and_the_guard_waits_for_the_stop() {
    let b = TestBridge::start().await;
    let id = b.submit("ignore-interrupt:60").await;
    b.wait_status(&id, "running").await;
    let provider = provider_of(&id).await;
    let stdin = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{provider}/fd/0"))
        .expect("open the provider's stdin pipe");

    let started = Instant::now();
    let c = b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    let took = started.elapsed();
    assert_eq!(c["status"], "cancelled");
    assert!(took < Duration::from_secs(5), "cancel waited for the provider (bounded at 10 s): {took:?}");
    e2e::measured(format_args!("§14.3: cancel returned in {took:?}"));
    assert_eq!(b.get(&id).await["status"], "cancelled");
    assert!(alive(provider));
    assert_eq!(b.guard_count(), 1, "no proof of stop yet");
    assert_writer_refused(&b, "WORKDIR_BUSY").await;

    let released = guard_kept_until_provider_gone(&b, &id, provider, Duration::from_secs(40)).await;
    e2e::measured(format_args!("§14.3: the provider was stopped and the guard cleared {released:?} after the cancel"));
    assert!(released < Duration::from_secs(30), "{released:?}");
    assert!(marker_pids(&id).is_empty());
    poll_until("the lease is released", Duration::from_secs(5), || b.lease_is_free(1)).await;
    drop(stdin);
    assert_eq!(b.get(&id).await["status"], "cancelled");
    assert_next_writer_runs(&b).await;
}

/// `respond_agent_approval(decision=cancel_task)` takes the same path. Here
/// the provider is frozen (SIGSTOP) while it waits for the answer: it reads neither the
/// decision nor the interrupt nor its closed input, and ignores SIGTERM while stopped, so
/// only the last step of the ladder (SIGKILL) ends it.
#[tokio::test]
async fn approval_cancel_task_cancels_at_once_and_a_frozen_provider_is_killed_before_the_guard_clears() {
    let b = TestBridge::start().await;
    let id = b.submit("approval:deploy").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let rid = request_id(&t);
    let provider = provider_of(&id).await;
    kill(Pid::from_raw(provider), Signal::SIGSTOP).expect("SIGSTOP the provider");
    poll_until("the provider is stopped", Duration::from_secs(5), || {
        state_and_parent(provider).is_some_and(|(s, _)| s == "T")
    })
    .await;

    let started = Instant::now();
    let r = respond(&b, &id, &rid, "cancel_task").await.expect("cancel_task");
    let took = started.elapsed();
    assert_eq!(r["status"], "cancelled", "{r:#}");
    assert!(took < Duration::from_secs(5), "the approval RPC waited for the provider (bounded at 10 s): {took:?}");
    e2e::measured(format_args!("§14.4: respond_agent_approval(cancel_task) returned in {took:?}"));
    let now = b.get(&id).await;
    assert_eq!(now["status"], "cancelled", "{now:#}");
    assert!(now["pending_request"].is_null());
    let again = code(&respond(&b, &id, &rid, "approve_once").await);
    assert!(again == "REQUEST_ALREADY_RESOLVED" || again == "REQUEST_STALE", "{again}");
    assert_eq!(b.guard_count(), 1);
    assert_writer_refused(&b, "WORKDIR_BUSY").await;

    let released = guard_kept_until_provider_gone(&b, &id, provider, Duration::from_secs(45)).await;
    e2e::measured(format_args!(
        "§14.4: the frozen provider was killed and the guard cleared {released:?} after the decision"
    ));
    assert!(marker_pids(&id).is_empty());
    poll_until("the lease is released", Duration::from_secs(5), || b.lease_is_free(1)).await;
    let types = event_types(&b.all_events(&id).await);
    assert_eq!(types.iter().filter(|t| *t == "task.cancelled").count(), 1, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "approval.resolved").count(), 1, "{types:?}");
    assert!(!types.iter().any(|t| t == "command.started"), "{types:?}");
    assert_eq!(b.get(&id).await["status"], "cancelled");
    assert_next_writer_runs(&b).await;
}

/// A task that emits more events than the per-task cap keeps running and succeeds; the
/// surplus is dropped, counted, and announced by one marker event.
#[tokio::test]
async fn a_task_over_the_event_cap_succeeds_and_counts_what_it_dropped() {
    const EMITTED: u64 = 10_100;
    const CAP: u64 = 10_000;
    let b = TestBridge::start().await;
    let id = b.submit_ok(json!({ "profile": "review", "prompt": format!("events:{EMITTED}") })).await;
    let started = Instant::now();
    let end = loop {
        let t = b.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 5 })).await.expect("get task");
        if t["terminal"] == true {
            break t;
        }
        assert!(started.elapsed() < Duration::from_secs(180), "not finished after 180 s: {t:#}");
    };
    e2e::measured(format_args!("events:{EMITTED} finished in {:?}", started.elapsed()));
    assert_eq!(end["status"], "succeeded", "never failed for the cap: {end:#}");
    assert_eq!(end["final_response"], format!("emitted {EMITTED} events"));
    let dropped = end["events_dropped"].as_u64().expect("events_dropped");
    assert!(dropped > 0, "{end:#}");

    let events = b.all_events(&id).await;
    let types = event_types(&events);
    let kept: Vec<&Value> = events.iter().filter(|e| e["event_type"] == "agent.message").collect();
    let kept_count = kept.len() as u64;
    assert_eq!(kept_count + dropped, EMITTED, "every provider event is either kept or counted");
    assert!(kept_count <= CAP, "{kept_count} provider events stored");
    for (i, e) in kept.iter().enumerate() {
        assert_eq!(e["payload"]["text"], format!("event {} of {EMITTED}", i + 1), "the first events are kept in order");
    }
    let own: Vec<&String> = types.iter().filter(|t| *t != "agent.message").collect();
    for t in &own {
        assert!(
            ["task.submitted", "task.started", "events.dropped", "task.completed"].contains(&t.as_str()),
            "unexpected event {t}"
        );
    }
    assert!(events.len() as u64 <= CAP + own.len() as u64);
    let markers: Vec<&Value> = events.iter().filter(|e| e["event_type"] == "events.dropped").collect();
    assert_eq!(markers.len(), 1, "{own:?}");
    assert_eq!(markers[0]["payload"]["count"], dropped);
    assert_eq!(types.last().map(String::as_str), Some("task.completed"), "the terminal event comes last: {own:?}");
    assert_eq!(b.db_count(&format!("SELECT COUNT(*) FROM events WHERE task_id = '{id}'")), events.len() as i64);
    assert_eq!(b.db_count(&format!("SELECT event_count FROM tasks WHERE task_id = '{id}'")), events.len() as i64);
}
