//! Routing tests on a real SQLite store: a fact reaches exactly the targets that want its event,
//! with the wording, the board page, the details and one action link per target it had before
//! the store stopped deciding; no target means no message and no fact left; an unreadable fact
//! is kept and skipped.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::config::notify::NotifyKind;
use crate::store::events::NewEvent;
use crate::store::interactions::NewInteraction;
use crate::store::plans::{NewPlan, NewStep};
use crate::store::tasks::{NewGuard, TransitionFields};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state")).expect("open");
    (dir, store)
}

fn target(slot: u8, events: &[NotifyEvent], details: Details) -> NotifyTarget {
    NotifyTarget {
        slot,
        url: format!("https://hooks.example/{slot}"),
        kind: NotifyKind::Webhook,
        events: events.to_vec(),
        secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        details,
    }
}

fn all(slot: u8, details: Details) -> NotifyTarget {
    target(slot, &NotifyEvent::ALL, details)
}

/// A running task; `guarded`: a writer holding the workdir's recovery guard.
fn task_with(store: &Store, id: &str, guarded: bool) {
    let new = crate::store::tests::new_task(id, None);
    let guard = guarded.then(|| NewGuard { workdir_alias: "repo".into(), worktree: None });
    let event = NewEvent::new("task.submitted", serde_json::json!({}));
    store.insert_task(&new, 100, guard.as_ref(), &event).expect("insert");
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition(id, to, TransitionFields::default(), 1_000).expect("start");
    }
}

fn task(store: &Store, id: &str) {
    task_with(store, id, false);
}

/// Routes what is pending to `targets`.
fn route(store: &Store, targets: &[NotifyTarget]) -> usize {
    route_pending(store, targets, &mut BTreeSet::new()).expect("route")
}

/// The stored messages, oldest first: (target, event type, facts, action URL).
fn rows(store: &Store) -> Vec<(u8, String, Value, Option<String>)> {
    let mut rows = store.recent_notifications(100).expect("rows");
    rows.reverse();
    rows.into_iter()
        .map(|r| (r.target, r.kind.to_string(), serde_json::from_str(&r.facts_json).expect("json"), r.action_url))
        .collect()
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
fn a_terminal_transition_is_sent_only_to_targets_that_want_it_in_the_words_it_had() {
    let (_dir, store) = open();
    let targets = [all(1, Details::Summary), target(2, &[NotifyEvent::TaskFailed], Details::Summary)];
    task(&store, "agt_1");
    store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    assert_eq!(route(&store, &targets), 1);
    let written = rows(&store);
    assert_eq!((written[0].0, written[0].1.as_str()), (1, "task.finished"));
    let facts = &written[0].2;
    assert_eq!(facts["title"], "fake task in repo succeeded");
    assert_eq!((&facts["status"], &facts["event"]), (&Value::from("succeeded"), &Value::from("task.finished")));
    assert_eq!(facts["links"]["board"], "/tasks/agt_1");
    assert_eq!(facts["workdir"], "repo");
    assert!(facts.get("details").is_none());
    task(&store, "agt_2");
    let fields = TransitionFields { error_code: Some("AGENT_PROVIDER_FAILED".into()), ..Default::default() };
    store.transition("agt_2", TaskStatus::Failed, fields, 3_000).expect("fail");
    task(&store, "agt_3");
    store.transition("agt_3", TaskStatus::Cancelled, TransitionFields::default(), 3_100).expect("cancel");
    route(&store, &targets);
    let written = rows(&store);
    let events: Vec<(u8, &str)> = written.iter().map(|r| (r.0, r.1.as_str())).collect();
    assert_eq!(events[1..], [(1, "task.failed"), (2, "task.failed"), (1, "task.finished")]);
    assert_eq!(written[1].2["title"], "fake task in repo failed (AGENT_PROVIDER_FAILED)");
    assert_eq!(written[3].2["title"], "fake task in repo was cancelled");
    assert!(store.pending_facts(&[], 10).expect("facts").is_empty(), "every fact routed");
}

#[test]
fn no_targets_means_no_rows_and_no_fact_left() {
    let (_dir, store) = open();
    task(&store, "agt_1");
    store.open_interaction("agt_1", &approval("req_1"), 2_000).expect("open");
    store.transition("agt_1", TaskStatus::Cancelled, TransitionFields::default(), 3_000).expect("cancel");
    assert_eq!(store.pending_facts(&[], 10).expect("facts").len(), 2);
    assert_eq!(route(&store, &[]), 0);
    assert!(rows(&store).is_empty());
    assert!(store.pending_facts(&[], 10).expect("facts").is_empty());
}

#[test]
fn a_request_gets_one_link_per_target_bound_to_it_and_details_only_for_full_targets() {
    let (_dir, store) = open();
    task(&store, "agt_1");
    store.open_interaction("agt_1", &approval("req_1"), 2_000).expect("open");
    route(&store, &[all(1, Details::Summary), all(2, Details::Full)]);
    let written = rows(&store);
    assert_eq!(written.len(), 2);
    let (summary, full) = (&written[0].2, &written[1].2);
    assert_eq!(summary["title"], "fake task in repo needs an approval");
    assert_eq!((&summary["request_id"], &summary["request_kind"]), (&Value::from("req_1"), &Value::from("approval")));
    assert_eq!(summary["expires_at"], crate::clock::rfc3339(50_000));
    assert!(summary.get("details").is_none(), "summary targets get no command: {summary}");
    assert!(!summary.to_string().contains("rm -rf"), "{summary}");
    assert_eq!(full["details"]["command"], "rm -rf build");
    // One link per target, each bound to the request, stored only as a digest.
    let (a, b) = (written[0].3.clone().expect("link"), written[1].3.clone().expect("link"));
    assert_ne!(a, b);
    let token = a.strip_prefix("/a/").expect("path");
    let link = store.find_action_link(&links::token_digest(token)).expect("read").expect("found");
    assert_eq!((link.task_id.as_str(), link.request_id.as_str(), link.expires_at), ("agt_1", "req_1", 50_000));
    assert!(store.find_action_link(token).expect("read").is_none(), "the token itself is not what is stored");
    assert!(store.find_action_link(&links::token_digest("abl_forged")).expect("read").is_none());
}

#[test]
fn a_question_and_a_kept_guard_are_worded_and_a_fact_is_sent_once() {
    let (_dir, store) = open();
    let targets = [all(1, Details::Summary)];
    task_with(&store, "agt_1", true);
    let ask = NewInteraction {
        request_id: "req_q".into(),
        kind: InteractionKind::Question,
        payload_json: "{}".into(),
        expires_at: 9_000,
    };
    store.open_interaction("agt_1", &ask, 2_000).expect("open");
    store.record_guard_kept("repo", "agt_1", 2_000).expect("kept");
    route(&store, &targets);
    // Kept again (a restart): the fact is recorded, but its message exists.
    store.record_guard_kept("repo", "agt_1", 3_000).expect("kept again");
    assert_eq!(route(&store, &targets), 0);
    let written = rows(&store);
    assert_eq!(
        written.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
        ["question.requested", "workdir.recovery_required"]
    );
    assert_eq!(written[0].2["title"], "fake task in repo asks a question");
    let guard = &written[1].2;
    assert_eq!(guard["title"], "Workdir repo stays closed: its last writer's stop is not proven");
    assert_eq!((&guard["links"]["board"], &guard["task_id"]), (&Value::from("/workdirs"), &Value::from("agt_1")));
    let row = store.recent_notifications(1).expect("rows").remove(0);
    assert_eq!((row.task_id.as_deref(), row.plan_id), (Some("agt_1"), None));
}

#[test]
fn a_plan_awaiting_approval_is_reported_and_one_approved_at_creation_is_not() {
    let (_dir, store) = open();
    let plan = NewPlan::for_test;

    let steps: Vec<NewStep> =
        (1..=3).map(|i| NewStep { title: format!("step {i}"), prompt: format!("secret prompt {i}") }).collect();
    store.insert_plan(&plan("pln_1", None), &steps).expect("insert");
    store.insert_plan(&plan("pln_2", Some("operator@local")), &steps).expect("insert");
    route(&store, &[all(1, Details::Summary), all(2, Details::Full)]);
    let written = rows(&store);
    assert_eq!(written.len(), 2, "one per target, for the plan that waits: {written:?}");
    assert!(written.iter().all(|r| r.1 == "plan.pending_approval" && r.2["plan_id"] == "pln_1"));
    assert!(written.iter().all(|r| !r.2.to_string().contains("secret prompt")), "no step prompt is sent");
    let full = &written[1].2;
    assert_eq!(full["title"], "A plan of 3 steps for fake in repo waits for approval");
    assert_eq!(full["details"]["plan_title"], "Refactor the parser");
    assert_eq!(full["steps"], 3);
    assert_eq!(full["links"]["board"], "/plans/pln_1");
    assert!(written[0].2.get("details").is_none());
}

#[test]
fn an_unreadable_fact_is_kept_and_skipped_while_the_others_are_routed() {
    let (_dir, store) = open();
    for id in ["agt_1", "agt_2"] {
        task(&store, id);
        store.transition(id, TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    }
    crate::store::tests::corrupt_fact_kind(&store, "agt_1");
    let mut unreadable = BTreeSet::new();
    let targets = [all(1, Details::Summary)];
    assert_eq!(route_pending(&store, &targets, &mut unreadable).expect("route"), 1);
    assert_eq!(unreadable.len(), 1);
    assert_eq!(rows(&store).iter().map(|r| r.2["task_id"].clone()).collect::<Vec<_>>(), ["agt_2"]);
    assert_eq!(route_pending(&store, &targets, &mut unreadable).expect("again"), 0);
    assert_eq!(store.pending_facts(&[], 10).expect("facts").len(), 1, "the unreadable fact stays");
}

#[test]
fn a_worktree_tasks_open_branch_is_named_and_linked() {
    use crate::model::WorktreeState;
    use crate::store::facts::{Branch, TaskEnded, TaskFacts};
    let task = TaskFacts {
        task_id: "agt_1".into(),
        plan_id: None,
        plan_step: None,
        workdir: "repo".into(),
        runtime: "codex".into(),
        profile: "workspace-write".into(),
        status: TaskStatus::Succeeded,
        error_code: None,
    };
    let ended = |state| {
        Fact::TaskEnded(TaskEnded { task: task.clone(), branch: Some(Branch { name: "agent/agt_1".into(), state }) })
    };
    let open = ended(WorktreeState::Open);
    assert_eq!(
        format::title(&open),
        "codex task in repo succeeded; branch agent/agt_1 waits to be merged or discarded"
    );
    assert_eq!(links::board_page(&open), "/tasks/agt_1#branch");
    let empty = ended(WorktreeState::Empty);
    assert_eq!(format::title(&empty), "codex task in repo succeeded");
    assert_eq!(links::board_page(&empty), "/tasks/agt_1");
    let message = messages(&open, 5, &[all(3, Details::Summary)]).remove(0);
    let facts: Value = serde_json::from_str(&message.facts_json).expect("json");
    assert_eq!(facts["branch"], serde_json::json!({ "name": "agent/agt_1", "state": "open" }));
    assert_eq!((message.created_at, message.give_up_at), (5, 5 + RETRY_FOR_MS));
    assert_eq!(message.dedupe_key, "task.finished:agt_1:3");
}
