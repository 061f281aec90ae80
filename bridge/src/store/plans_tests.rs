//! Plan store tests on real SQLite files: atomic creation, the approval gate in the step
//! intents, idempotency, and the upgrade of a database from before plans existed.

use std::os::unix::fs::PermissionsExt;

use rusqlite::Connection;

use super::*;
use crate::store::events::NewEvent;
use crate::store::tasks::{NewTask, TransitionFields};
use crate::store::{DB_FILE, schema};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state")).unwrap();
    (dir, store)
}

fn plan(id: &str, approved_by: Option<&str>, key: Option<&str>) -> NewPlan {
    NewPlan {
        title: "Refactor".into(),
        idempotency_key: key.map(str::to_owned),
        request_fingerprint: key.map(|_| "fp".into()),
        ..NewPlan::for_test(id, approved_by)
    }
}

fn steps(n: usize) -> Vec<NewStep> {
    (1..=n).map(|i| NewStep { title: format!("step {i}"), prompt: format!("complete:{i}") }).collect()
}

fn count(store: &Store, table: &str) -> i64 {
    store.read(|c| Ok(c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?)).unwrap()
}

/// A plan filed by a session waits (`approved_at` NULL); one the local
/// operator files is approved at creation (`approved_at = created_at`).
#[test]
fn a_session_plan_waits_and_an_operator_plan_is_approved_at_creation() {
    let (_dir, store) = open();
    let PlanInserted::Created(p) = store.insert_plan(&plan("pln_1", None, None), &steps(2)).unwrap() else {
        panic!("created")
    };
    assert_eq!((p.status, p.approved_at, p.created_by.as_str()), (PlanStatus::PendingApproval, None, "panel"));
    let PlanInserted::Created(p) = store.insert_plan(&plan("pln_2", Some("operator@local"), None), &steps(1)).unwrap()
    else {
        panic!("created")
    };
    assert_eq!((p.status, p.approved_at), (PlanStatus::Approved, Some(1_000)));
    assert_eq!(store.get_plan_with_steps("pln_1").unwrap().unwrap().1.len(), 2);
}

/// No step of an unapproved plan can even be marked as starting.
#[test]
fn no_step_of_an_unapproved_plan_starts() {
    let (_dir, store) = open();
    store.insert_plan(&plan("pln_1", None, None), &steps(2)).unwrap();
    let err = store.start_step("pln_1", 1, 2_000).unwrap_err();
    assert!(matches!(err, StoreError::InvalidPlanTransition { from: PlanStatus::PendingApproval, .. }), "{err}");
    store.plan_transition("pln_1", PlanStatus::Approved, PlanFields::default(), 3_000).unwrap();
    store.start_step("pln_1", 1, 3_001).unwrap();
    let (p, s) = store.get_plan_with_steps("pln_1").unwrap().unwrap();
    assert_eq!((p.status, p.approved_at, s[0].status), (PlanStatus::Approved, Some(3_000), StepStatus::Starting));
    store.link_step("pln_1", 1, "agt_1", 3_002).unwrap();
    assert_eq!(store.get_plan("pln_1").unwrap().unwrap().status, PlanStatus::Running);
    assert!(matches!(store.start_step("pln_1", 1, 3_003), Err(StoreError::StepState { .. })), "once only");
}

/// A step the schema refuses rolls the whole plan back.
#[test]
fn an_invalid_step_creates_nothing() {
    let (_dir, store) = open();
    let mut bad = steps(3);
    bad[2].prompt = "   ".into();
    assert!(store.insert_plan(&plan("pln_1", None, None), &bad).is_err());
    assert_eq!((count(&store, "plans"), count(&store, "plan_steps")), (0, 0));
}

#[test]
fn a_rejection_keeps_its_reason_and_is_final() {
    let (_dir, store) = open();
    store.insert_plan(&plan("pln_1", None, None), &steps(1)).unwrap();
    let fields = PlanFields {
        rejected_by: Some("operator@board".into()),
        rejection_reason: Some("too broad".into()),
        ..Default::default()
    };
    let p = store.plan_transition("pln_1", PlanStatus::Rejected, fields, 5).unwrap();
    assert_eq!(p.rejection_reason.as_deref(), Some("too broad"));
    assert_eq!((p.rejected_at, p.completed_at, p.approved_at), (Some(5), Some(5), None));
    assert!(store.plan_transition("pln_1", PlanStatus::Approved, PlanFields::default(), 6).is_err());
}

#[test]
fn plan_keys_are_per_principal() {
    let (_dir, store) = open();
    store.insert_plan(&plan("pln_1", None, Some("k")), &steps(1)).unwrap();
    match store.insert_plan(&plan("pln_2", None, Some("k")), &steps(1)).unwrap() {
        PlanInserted::Existing(p) => assert_eq!(p.plan_id, "pln_1"),
        other => panic!("expected the existing plan, got {other:?}"),
    }
    let mut other = plan("pln_3", None, Some("k"));
    other.principal = "bob".into();
    assert!(matches!(store.insert_plan(&other, &steps(1)).unwrap(), PlanInserted::Created(_)));
    assert_eq!(count(&store, "plan_steps"), 2);
}

/// A database from before this migration (schema 3, with tasks, events, a guard, a key and
/// audit rows) upgrades in place: every old row is intact, and plans work at once.
#[test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn a_database_from_before_plans_upgrades_with_its_data_intact() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    crate::files::ensure_private_dir(&state).unwrap();
    let path = state.join(DB_FILE);
    {
        std::fs::OpenOptions::new().write(true).create_new(true).open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut conn = Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, 3).unwrap();
        conn.execute(
            "INSERT INTO tasks (task_id, principal, runtime, workdir_alias, relative_cwd, profile, status, \
             created_at, updated_at, completed_at, deadline_at, manifest_json, manifest_sha256, idempotency_key, \
             request_fingerprint, final_response) \
             VALUES ('agt_old', 'alice', 'fake', 'repo', '', 'review', 'succeeded', 1, 2, 2, 3, '{}', 'x', 'k', 'fp', 'done')",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (task_id, event_type, payload_json, created_at) VALUES ('agt_old', 'task.submitted', '{}', 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO recovery_guards (workdir_alias, task_id, runtime, created_at, updated_at, proof_json) \
             VALUES ('repo', 'agt_old', 'fake', 1, 1, '{\"pid\":1}')",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO api_keys (key_id, name, role, key_sha256, created_at) VALUES ('key_1', 'alice', 'operator', zeroblob(32), 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO audit_log (at, surface, capability, outcome, duration_us, task_id) \
             VALUES (1, 'mcp', 'submit_agent_task', 'ok', 5, 'agt_old')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&state).unwrap();
    let v: i64 = store.read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)).unwrap();
    assert_eq!(v, schema::MIGRATIONS.len() as i64);
    let task = store.get_task("agt_old").unwrap().unwrap();
    assert_eq!(
        (task.final_response.as_deref(), task.idempotency_key.as_deref(), task.request_fingerprint.as_deref()),
        (Some("done"), Some("k"), Some("fp"))
    );
    assert_eq!(store.read_events("agt_old", 0, 10).unwrap().len(), 1);
    assert_eq!(store.get_guard("repo").unwrap().unwrap().proof_json.as_deref(), Some("{\"pid\":1}"));
    assert_eq!(store.list_keys().unwrap()[0].name, "alice");
    assert_eq!(store.read_audit(&Default::default(), None, 10).unwrap()[0].task_id.as_deref(), Some("agt_old"));
    assert_eq!(store.plan_of_task("agt_old").unwrap(), None, "an old task belongs to no plan");
    store.insert_plan(&plan("pln_1", None, None), &steps(1)).unwrap();
    assert_eq!(store.count_pending_plans().unwrap(), 1);
    drop(store);
    let store = Store::open(&state).unwrap();
    assert!(store.get_plan("pln_1").unwrap().is_some(), "opening again applies nothing twice");
}

/// The task of a finished step survives retention while its plan still runs.
#[test]
fn retention_spares_the_steps_of_a_running_plan() {
    let (_dir, store) = open();
    store.insert_plan(&plan("pln_1", Some("operator@local"), None), &steps(2)).unwrap();
    let task = NewTask {
        task_id: "agt_1".into(),
        principal: "panel".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "review".into(),
        requested_model: None,
        created_at: 10,
        deadline_at: 1_000,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: None,
        manifest_json: "{}".into(),
        manifest_sha256: "x".into(),
        title: None,
    };
    store.insert_task(&task, 9, None, &NewEvent::new("task.submitted", serde_json::json!({}))).unwrap();
    store.start_step("pln_1", 1, 10).unwrap();
    store.link_step("pln_1", 1, "agt_1", 10).unwrap();
    store.transition("agt_1", crate::model::TaskStatus::Cancelled, TransitionFields::default(), 20).unwrap();
    store.finish_step("pln_1", 1, StepStatus::Cancelled, 20).unwrap();
    assert!(store.delete_expired(100).unwrap().is_empty(), "the plan still runs");
    store.plan_transition("pln_1", PlanStatus::Cancelled, PlanFields::default(), 30).unwrap();
    assert_eq!(store.delete_expired(100).unwrap().len(), 1);
    assert_eq!(store.delete_expired_plans(100).unwrap(), 1);
    assert_eq!(count(&store, "plan_steps"), 0);
}
