//! Outbox tests on real SQLite files: rows are written with the state change or not at all,
//! routed per target, ordered per task, retried and given up by stored deadlines, and their
//! action links bound to one request.

use rusqlite::Connection;
use serde_json::Value;

use super::interactions::NewInteraction;
use super::outbox::{Attempt, Route, Routes, token_digest};
use super::tasks::TransitionFields;
use super::{DB_FILE, Store, StoreError};
use crate::config::notify::NotifyEvent;
use crate::model::{InteractionKind, TaskStatus};
use crate::store::events::NewEvent;

fn open(routes: Vec<Route>) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state")).expect("open");
    store.set_routes(Routes { targets: routes });
    (dir, store)
}

fn all(slot: u8, full: bool) -> Route {
    Route { slot, events: NotifyEvent::ALL.to_vec(), full }
}

fn task(store: &Store, id: &str) {
    let new = super::tests::new_task(id, None);
    store.insert_task(&new, 100, None, &NewEvent::new("task.submitted", serde_json::json!({}))).expect("insert");
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition(id, to, TransitionFields::default(), 1_000).expect("start");
    }
}

fn rows(dir: &tempfile::TempDir) -> Vec<(i64, String, String, Option<String>)> {
    let conn = Connection::open(dir.path().join("state").join(DB_FILE)).expect("open");
    let mut stmt = conn
        .prepare("SELECT target, event_type, facts_json, action_url FROM notify_outbox ORDER BY outbox_id")
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

fn approval(id: &str) -> NewInteraction {
    NewInteraction {
        request_id: id.into(),
        kind: InteractionKind::Approval,
        payload_json: r#"{"title":"Run rm -rf build","command":"rm -rf build"}"#.into(),
        expires_at: 50_000,
    }
}

#[test]
fn a_terminal_transition_writes_its_notification_only_for_targets_that_want_it() {
    let failed_only = Route { slot: 2, events: vec![NotifyEvent::TaskFailed], full: false };
    let (dir, store) = open(vec![all(1, false), failed_only]);
    task(&store, "agt_1");
    store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    let written = rows(&dir);
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!((written[0].0, written[0].1.as_str()), (1, "task.finished"));
    let facts: Value = serde_json::from_str(&written[0].2).expect("json");
    assert_eq!(facts["status"], "succeeded");
    assert_eq!(facts["links"]["board"], "/tasks/agt_1");
    // A refused transition writes nothing: the row belongs to the committed change only.
    let refused = store.transition("agt_1", TaskStatus::Failed, TransitionFields::default(), 3_000);
    assert!(matches!(refused, Err(StoreError::InvalidTransition { .. })));
    assert_eq!(rows(&dir).len(), 1);
    task(&store, "agt_2");
    let fields = TransitionFields { error_code: Some("AGENT_PROVIDER_FAILED".into()), ..Default::default() };
    store.transition("agt_2", TaskStatus::Failed, fields, 3_000).expect("fail");
    let events: Vec<(i64, String)> = rows(&dir).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(events[1..], [(1, "task.failed".to_owned()), (2, "task.failed".to_owned())]);
}

#[test]
fn no_targets_means_no_rows() {
    let (dir, store) = open(Vec::new());
    task(&store, "agt_1");
    store.open_interaction("agt_1", &approval("req_1"), 2_000).expect("open");
    store.transition("agt_1", TaskStatus::Cancelled, TransitionFields::default(), 3_000).expect("cancel");
    assert!(rows(&dir).is_empty());
}

#[tokio::test]
async fn an_interaction_writes_a_request_with_a_link_bound_to_it_and_wakes_the_worker() {
    let (dir, store) = open(vec![all(1, false), all(2, true)]);
    task(&store, "agt_1");
    let woken = store.outbox_signal().notified();
    store.open_interaction("agt_1", &approval("req_1"), 2_000).expect("open");
    tokio::time::timeout(std::time::Duration::from_secs(5), woken).await.expect("the worker is woken");
    let written = rows(&dir);
    assert_eq!(written.len(), 2);
    let summary: Value = serde_json::from_str(&written[0].2).expect("json");
    let full: Value = serde_json::from_str(&written[1].2).expect("json");
    assert_eq!(summary["request_id"], "req_1");
    assert!(summary.get("details").is_none(), "summary targets get no command: {summary}");
    assert!(!written[0].2.contains("rm -rf"), "{}", written[0].2);
    assert_eq!(full["details"]["command"], "rm -rf build");
    // One link per target, each bound to the request, stored only as a digest.
    let (a, b) = (written[0].3.clone().expect("link"), written[1].3.clone().expect("link"));
    assert_ne!(a, b);
    let token = a.strip_prefix("/a/").expect("path");
    let link = store.find_action_link(token).expect("read").expect("found");
    assert_eq!((link.task_id.as_str(), link.request_id.as_str(), link.expires_at), ("agt_1", "req_1", 50_000));
    let conn = Connection::open(dir.path().join("state").join(DB_FILE)).expect("open");
    let stored: String = conn
        .query_row("SELECT token_sha256 FROM action_links WHERE link_id = ?1", [&link.link_id], |r| r.get(0))
        .expect("row");
    assert_eq!(stored, token_digest(token));
    assert!(store.find_action_link("abl_forged").expect("read").is_none());
    assert!(store.use_action_link(&link.link_id, 3_000).expect("use"));
    assert!(!store.use_action_link(&link.link_id, 3_001).expect("use"), "a link is used once");
}

#[test]
fn a_tasks_rows_go_out_in_order_and_are_retried_by_their_stored_deadline() {
    let (_dir, store) = open(vec![all(1, false)]);
    task(&store, "agt_1");
    task(&store, "agt_2");
    store.open_interaction("agt_1", &approval("req_1"), 2_000).expect("open");
    store.transition("agt_1", TaskStatus::Cancelled, TransitionFields::default(), 2_100).expect("cancel");
    store.transition("agt_2", TaskStatus::Succeeded, TransitionFields::default(), 2_200).expect("succeed");
    let due = store.due_notifications(10_000, 10, &[], &[]).expect("due");
    let heads: Vec<(&str, &str)> =
        due.iter().map(|r| (r.task_id.as_deref().unwrap_or(""), r.event_type.as_str())).collect();
    assert_eq!(heads, [("agt_1", "approval.requested"), ("agt_2", "task.finished")], "one head per task");
    let first = due[0].clone();
    assert!(
        store
            .due_notifications(10_000, 10, &[first.outbox_id], &[])
            .expect("due")
            .iter()
            .all(|r| r.outbox_id != first.outbox_id)
    );
    // A failure with a retry time: still the head, due again only then.
    let failed = Attempt { at: 10_000, http_status: Some(500), latency_ms: 3, error: Some("HTTP 500".into()) };
    store.record_attempt(first.outbox_id, &failed, Some(20_000)).expect("record");
    assert_eq!(store.due_notifications(15_000, 10, &[], &[]).expect("due").len(), 1, "agt_1 waits for its head");
    assert_eq!(store.next_notification_due().expect("next"), Some(2_200));
    let again = store.due_notifications(20_000, 10, &[], &[]).expect("due");
    let retried = again.iter().find(|r| r.outbox_id == first.outbox_id).expect("due again");
    assert_eq!((retried.message_id.as_str(), retried.attempts), (first.message_id.as_str(), 1));
    let ok = Attempt { at: 20_000, http_status: Some(200), latency_ms: 2, error: None };
    store.record_attempt(first.outbox_id, &ok, None).expect("record");
    let delivered = store.get_notification(&first.message_id).expect("read").expect("row");
    assert_eq!((delivered.state.as_str(), delivered.attempts, delivered.action_url), ("delivered", 2, None));
    let next = store.due_notifications(20_000, 10, &[], &[]).expect("due");
    assert!(next.iter().any(|r| r.task_id.as_deref() == Some("agt_1") && r.event_type == "task.finished"));
    // Given up: no retry time.
    let last = next.iter().find(|r| r.task_id.as_deref() == Some("agt_2")).expect("row").clone();
    store.record_attempt(last.outbox_id, &failed, None).expect("record");
    assert_eq!(store.get_notification(&last.message_id).expect("read").expect("row").state, "given_up");
    let stats = store.notification_stats().expect("stats");
    assert_eq!((stats[0].delivered, stats[0].pending, stats[0].given_up), (1, 1, 1));
    assert_eq!(stats[0].last_ok_at, Some(20_000));
    assert_eq!(stats[0].failing_since, None, "no failure after the last delivery");
    // Old finished rows go; pending ones stay whatever their age.
    assert_eq!(store.delete_old_notifications(i64::MAX, 100).expect("delete"), 2);
    assert_eq!(store.recent_notifications(10).expect("recent").len(), 1);
}

#[test]
fn a_fact_is_written_once_and_a_kept_guard_once() {
    let (dir, store) = open(vec![all(1, false)]);
    task(&store, "agt_1");
    store.notify_guard_kept("repo", "agt_1", 2_000).expect("no guard: nothing");
    assert!(rows(&dir).is_empty(), "no guard names the task");
    let conn = Connection::open(dir.path().join("state").join(DB_FILE)).expect("open");
    conn.execute(
        "INSERT INTO recovery_guards (workdir_alias, task_id, runtime, created_at, updated_at) VALUES ('repo', 'agt_1', 'fake', 1, 1)",
        [],
    )
    .expect("guard");
    store.notify_guard_kept("repo", "agt_1", 2_000).expect("kept");
    store.notify_guard_kept("repo", "agt_1", 3_000).expect("kept again");
    let written = rows(&dir);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].1, "workdir.recovery_required");
}

#[test]
fn a_plan_awaiting_approval_is_reported_and_one_approved_at_creation_is_not() {
    use super::plans::{NewPlan, NewStep};
    let (dir, store) = open(vec![all(1, false), all(2, true)]);
    let plan = |id: &str, approved_by: Option<&str>| NewPlan {
        plan_id: id.into(),
        principal: "panel".into(),
        created_by: "panel".into(),
        created_surface: "mcp".into(),
        title: "Refactor the parser".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "workspace-write".into(),
        created_at: 1_000,
        approved_by: approved_by.map(str::to_owned),
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: None,
        isolation: None,
    };
    let steps: Vec<NewStep> =
        (1..=3).map(|i| NewStep { title: format!("step {i}"), prompt: format!("secret prompt {i}") }).collect();
    store.insert_plan(&plan("pln_1", None), &steps).expect("insert");
    store.insert_plan(&plan("pln_2", Some("operator@local")), &steps).expect("insert");
    let written = rows(&dir);
    assert_eq!(written.len(), 2, "one per target, for the plan that waits: {written:?}");
    assert!(written.iter().all(|r| r.1 == "plan.pending_approval" && r.2.contains("pln_1")));
    assert!(written.iter().all(|r| !r.2.contains("secret prompt")), "no step prompt is sent");
    let full: Value = serde_json::from_str(&written[1].2).expect("json");
    assert_eq!(full["details"]["plan_title"], "Refactor the parser");
    assert_eq!(full["steps"], 3);
    assert_eq!(full["links"]["board"], "/plans/pln_1");
}

#[test]
fn a_target_fails_for_an_hour_only_while_retrying_or_after_failures_spanning_it() {
    const HOUR: i64 = 3_600_000;
    let (_dir, store) = open(vec![all(1, false)]);
    let failed = |at| Attempt { at, http_status: None, latency_ms: 5, error: Some("connection failed".into()) };
    // One failed test notification (never retried), long ago: not a failing target.
    let id = store.enqueue_test_notification(1, 1_000).expect("test");
    let test_row = store.get_notification(&id).expect("read").expect("row");
    store.record_attempt(test_row.outbox_id, &failed(1_000), None).expect("record");
    let stats = store.notification_stats().expect("stats");
    assert_eq!((stats[0].failing_since, stats[0].last_failure_at), (Some(1_000), Some(1_000)));
    assert!(!stats[0].failing_for(HOUR, 10 * HOUR), "one failure is not an hour of failing");
    // A row retried since then: failing for an hour once the first failure is an hour old.
    task(&store, "agt_1");
    store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    let row = store.due_notifications(3_000, 10, &[], &[]).expect("due").remove(0);
    store.record_attempt(row.outbox_id, &failed(3_000), Some(4_000)).expect("record");
    let stats = store.notification_stats().expect("stats");
    assert!(!stats[0].failing_for(HOUR, 1_000 + HOUR - 1));
    assert!(stats[0].failing_for(HOUR, 1_000 + HOUR));
    // Given up after failures spanning more than an hour: still failing, until a delivery.
    store.record_attempt(row.outbox_id, &failed(2 * HOUR), None).expect("give up");
    let stats = store.notification_stats().expect("stats");
    assert_eq!(stats[0].pending, 0);
    assert!(stats[0].failing_for(HOUR, 5 * HOUR));
    task(&store, "agt_2");
    store.transition("agt_2", TaskStatus::Succeeded, TransitionFields::default(), 5 * HOUR).expect("succeed");
    let row = store.due_notifications(5 * HOUR, 10, &[], &[]).expect("due").remove(0);
    let ok = Attempt { at: 5 * HOUR, http_status: Some(200), latency_ms: 2, error: None };
    store.record_attempt(row.outbox_id, &ok, None).expect("deliver");
    let stats = store.notification_stats().expect("stats");
    assert!(!stats[0].failing_for(HOUR, 9 * HOUR), "a delivery ends the failing spell");
}
