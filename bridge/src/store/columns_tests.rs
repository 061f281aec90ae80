//! The stored vocabularies on real SQLite files: every value round-trips as the text the
//! columns always held, and a value this build does not know is an error naming it, without a
//! panic and without losing the other rows.

use std::fmt::Debug;

use rusqlite::types::{FromSql, ToSql};

use super::super::audit::{AuditFilter, AuditRow};
use super::super::events::NewEvent;
use super::super::interactions::NewInteraction;
use super::super::keys::KeyRow;
use super::super::plans::{NewPlan, NewStep};
use super::super::tasks::{NewTask, ResultFields, TaskFilter, TransitionFields};
use super::super::{Store, StoreError};
use super::*;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state")).unwrap();
    (dir, store)
}

fn raw(store: &Store, sql: &str) -> usize {
    store.write(|tx| Ok(tx.execute(sql, [])?)).unwrap()
}

fn text(store: &Store, sql: &str) -> String {
    store.read(|c| Ok(c.query_row(sql, [], |r| r.get(0))?)).unwrap()
}

/// Writes each value into a column of the real file and reads it back, checking the text stored.
fn round_trip<T: ToSql + FromSql + PartialEq + Debug + Copy>(store: &Store, values: &[T], name: fn(T) -> &'static str) {
    for &value in values {
        let (stored, back): (String, T) = store
            .write(|tx| {
                tx.execute("CREATE TABLE IF NOT EXISTS scratch (v TEXT)", [])?;
                tx.execute("DELETE FROM scratch", [])?;
                tx.execute("INSERT INTO scratch (v) VALUES (?1)", [value])?;
                Ok(tx.query_row("SELECT v, v FROM scratch", [], |r| Ok((r.get(0)?, r.get(1)?)))?)
            })
            .unwrap();
        assert_eq!((stored.as_str(), back), (name(value), value));
    }
}

#[test]
fn every_value_round_trips_as_its_wire_name() {
    let (_dir, store) = open();
    round_trip(&store, &TaskStatus::ALL, TaskStatus::as_str);
    round_trip(&store, &PlanStatus::ALL, PlanStatus::as_str);
    round_trip(&store, &StepStatus::ALL, StepStatus::as_str);
    round_trip(&store, &InteractionKind::ALL, InteractionKind::as_str);
    round_trip(&store, &InteractionStatus::ALL, InteractionStatus::as_str);
    round_trip(&store, &ResultStorage::ALL, ResultStorage::as_str);
    round_trip(&store, &AuditOutcome::ALL, AuditOutcome::as_str);
    round_trip(&store, &[Role::Viewer, Role::Operator, Role::Admin], Role::as_str);
    // NULL stays `None`.
    let none: Option<ResultStorage> = store.read(|c| Ok(c.query_row("SELECT NULL", [], |r| r.get(0))?)).unwrap();
    assert_eq!(none, None);
}

fn task(id: &str) -> NewTask {
    NewTask {
        task_id: id.into(),
        principal: "alice".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "review".into(),
        requested_model: None,
        created_at: 1_000,
        deadline_at: 10_000,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: None,
        manifest_json: "{}".into(),
        manifest_sha256: "x".into(),
        title: None,
    }
}

fn succeeded(store: &Store, id: &str, storage: ResultStorage) {
    store.insert_task(&task(id), 9, None, &NewEvent::new("task.submitted", serde_json::json!({}))).unwrap();
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition(id, to, TransitionFields::default(), 1_500).unwrap();
    }
    let result = ResultFields { final_response: "done".into(), storage, size_bytes: 4, sha256: "s".into() };
    let fields = TransitionFields { result: Some(result), ..Default::default() };
    store.transition(id, TaskStatus::Succeeded, fields, 2_000).unwrap();
}

fn key(id: &str, name: &str, role: Role) -> KeyRow {
    // A distinct hash per id (the column is unique).
    let mut key_sha256 = [0; 32];
    key_sha256[..id.len()].copy_from_slice(id.as_bytes());
    KeyRow {
        key_id: id.into(),
        name: name.into(),
        role,
        key_sha256,
        workdirs: None,
        created_at: 1,
        last_used_at: None,
        revoked_at: None,
    }
}

fn audit(at: i64, outcome: AuditOutcome) -> AuditRow {
    AuditRow {
        audit_id: 0,
        at,
        surface: "cli".into(),
        principal: Some("operator@local".into()),
        role: Some(Role::Admin),
        capability: "whoami".into(),
        scope: Some("read".into()),
        outcome,
        error_code: None,
        duration_us: 1,
        task_id: None,
        plan_id: None,
        client_name: None,
        count: 1,
    }
}

/// The columns hold exactly the strings they held when the rows were strings.
#[test]
fn the_store_writes_the_same_text_as_before() {
    let (_dir, store) = open();
    succeeded(&store, "agt_1", ResultStorage::Spool);
    assert_eq!(text(&store, "SELECT status || '/' || result_storage FROM tasks"), "succeeded/spool");
    store.insert_key(&key("key_1", "ci", Role::Operator)).unwrap();
    assert_eq!(text(&store, "SELECT role FROM api_keys"), "operator");
    store.insert_audit(&[audit(1, AuditOutcome::Invalid)]).unwrap();
    assert_eq!(text(&store, "SELECT outcome || '/' || role FROM audit_log"), "invalid/admin");
    let filter = AuditFilter { outcome: Some(AuditOutcome::Invalid), ..Default::default() };
    assert_eq!(store.read_audit(&filter, None, 10).unwrap().len(), 1);
    let filter = AuditFilter { outcome: Some(AuditOutcome::Ok), ..Default::default() };
    assert_eq!(store.read_audit(&filter, None, 10).unwrap().len(), 0);

    store.insert_task(&task("agt_2"), 9, None, &NewEvent::new("task.submitted", serde_json::json!({}))).unwrap();
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition("agt_2", to, TransitionFields::default(), 1_500).unwrap();
    }
    let ask = NewInteraction {
        request_id: "req_1".into(),
        kind: InteractionKind::Question,
        payload_json: "{}".into(),
        expires_at: 9_000,
    };
    store.open_interaction("agt_2", &ask, 2_000).unwrap();
    assert_eq!(text(&store, "SELECT kind || '/' || status FROM interactions"), "question/pending");
    assert_eq!(text(&store, "SELECT status FROM tasks WHERE task_id = 'agt_2'"), "waiting_for_question");

    let plan = NewPlan {
        plan_id: "pln_1".into(),
        principal: "operator@local".into(),
        created_by: "operator@local".into(),
        created_surface: "cli".into(),
        title: "t".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "review".into(),
        created_at: 1,
        approved_by: Some("operator@local".into()),
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: None,
        isolation: None,
    };
    store.insert_plan(&plan, &[NewStep { title: "s".into(), prompt: "p".into() }]).unwrap();
    store.start_step("pln_1", 1, 2).unwrap();
    store.link_step("pln_1", 1, "agt_1", 3).unwrap();
    store.finish_step("pln_1", 1, StepStatus::Interrupted, 4).unwrap();
    assert_eq!(
        text(&store, "SELECT p.status || '/' || s.status FROM plans p JOIN plan_steps s USING (plan_id)"),
        "running/interrupted"
    );
}

/// The error's text names what the value should have been and the value.
fn assert_names(err: StoreError, what: &str, value: &str) {
    let message = err.to_string();
    assert!(matches!(err, StoreError::Sqlite(rusqlite::Error::FromSqlConversionFailure(..))), "{message}");
    assert!(message.contains(&format!("unknown {what} \"{value}\"")), "{message}");
}

#[test]
fn an_unknown_value_is_an_error_naming_it_and_the_other_rows_stay() {
    let (_dir, store) = open();
    succeeded(&store, "agt_1", ResultStorage::Inline);
    succeeded(&store, "agt_2", ResultStorage::Spool);

    raw(&store, "UPDATE tasks SET status = 'paused' WHERE task_id = 'agt_1'");
    assert_names(store.get_task("agt_1").unwrap_err(), "task status", "paused");
    assert_eq!(store.get_task("agt_2").unwrap().unwrap().result_storage, Some(ResultStorage::Spool));
    assert_names(store.list_tasks(&TaskFilter::default(), 10).unwrap_err(), "task status", "paused");
    raw(&store, "UPDATE tasks SET status = 'succeeded', result_storage = 'cloud' WHERE task_id = 'agt_1'");
    assert_names(store.get_task("agt_1").unwrap_err(), "result storage", "cloud");
    // Retention reads the storage inside its transaction: it fails whole and deletes nothing.
    assert_names(store.delete_expired(i64::MAX).unwrap_err(), "result storage", "cloud");
    assert_eq!(text(&store, "SELECT COUNT(*) || '' FROM tasks"), "2");
    // A value of the wrong type is an error too, not a panic.
    raw(&store, "UPDATE tasks SET result_storage = x'07' WHERE task_id = 'agt_1'");
    let err = store.get_task("agt_1").unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(rusqlite::Error::InvalidColumnType(..))), "{err}");
    // Repaired, every row reads again.
    raw(&store, "UPDATE tasks SET result_storage = 'inline' WHERE task_id = 'agt_1'");
    assert_eq!(store.list_tasks(&TaskFilter::default(), 10).unwrap().len(), 2);

    store.insert_key(&key("key_1", "ci", Role::Viewer)).unwrap();
    store.insert_key(&key("key_2", "bot", Role::Admin)).unwrap();
    raw(&store, "UPDATE api_keys SET role = 'superuser' WHERE key_id = 'key_1'");
    assert_names(store.list_keys().unwrap_err(), "role", "superuser");
    assert_eq!(store.revoke_key("key_2", 5).unwrap().map(|k| k.role), Some(Role::Admin));

    store.insert_audit(&[audit(1, AuditOutcome::Ok), audit(2, AuditOutcome::Denied)]).unwrap();
    raw(&store, "UPDATE audit_log SET outcome = 'maybe' WHERE at = 2");
    assert_names(store.read_audit(&AuditFilter::default(), None, 10).unwrap_err(), "audit outcome", "maybe");
    let older = store.read_audit(&AuditFilter::default(), Some(2), 10).unwrap();
    assert_eq!(older.iter().map(|r| r.outcome).collect::<Vec<_>>(), [AuditOutcome::Ok]);
}

#[test]
fn unknown_interaction_and_step_values_are_errors_too() {
    let (_dir, store) = open();
    store.insert_task(&task("agt_1"), 9, None, &NewEvent::new("task.submitted", serde_json::json!({}))).unwrap();
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition("agt_1", to, TransitionFields::default(), 1_500).unwrap();
    }
    let ask = NewInteraction {
        request_id: "req_1".into(),
        kind: InteractionKind::Approval,
        payload_json: "{}".into(),
        expires_at: 9_000,
    };
    store.open_interaction("agt_1", &ask, 2_000).unwrap();
    raw(&store, "UPDATE interactions SET kind = 'poll'");
    assert_names(store.get_interaction("req_1").unwrap_err(), "interaction kind", "poll");
    raw(&store, "UPDATE interactions SET kind = 'approval', status = 'snoozed'");
    assert_names(store.get_interaction("req_1").unwrap_err(), "interaction status", "snoozed");
    // The task itself still reads.
    assert_eq!(store.get_task("agt_1").unwrap().unwrap().status, TaskStatus::WaitingForApproval);

    let plan = NewPlan {
        plan_id: "pln_1".into(),
        principal: "alice".into(),
        created_by: "alice".into(),
        created_surface: "mcp".into(),
        title: "t".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "review".into(),
        created_at: 1,
        approved_by: None,
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: None,
        isolation: None,
    };
    store.insert_plan(&plan, &[NewStep { title: "s".into(), prompt: "p".into() }]).unwrap();
    raw(&store, "UPDATE plan_steps SET status = 'skipped'");
    assert_names(store.get_plan_with_steps("pln_1").unwrap_err(), "plan step status", "skipped");
    raw(&store, "UPDATE plans SET status = 'paused'");
    assert_names(store.get_plan("pln_1").unwrap_err(), "plan status", "paused");
}
