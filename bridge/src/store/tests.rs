//! Store tests on real SQLite files in temporary directories.

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Barrier};

use rusqlite::{Connection, params};

use super::events::NewEvent;
use super::interactions::NewInteraction;
use super::tasks::{Inserted, NewGuard, NewTask, TransitionFields};
use super::{DB_FILE, Store, StoreError, schema};
use crate::model::{AuditOutcome, InteractionKind, InteractionStatus, TaskStatus};

/// A task row of `alice`'s in `repo` (created at 1 000, deadline 10 000), for store tests.
pub(crate) fn new_task(id: &str, key: Option<&str>) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        principal: "alice".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: String::new(),
        profile: "workspace-write".into(),
        requested_model: None,
        created_at: 1_000,
        deadline_at: 10_000,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: key.map(str::to_owned),
        request_fingerprint: key.map(|_| "fp".to_owned()),
        manifest_json: "{}".into(),
        manifest_sha256: "x".into(),
        title: None,
    }
}

/// Gives `task_id`'s notification facts a kind no build knows (for the notifier's tests, which
/// hold no SQL).
pub(crate) fn corrupt_fact_kind(store: &Store, task_id: &str) {
    let sql = "UPDATE notify_facts SET kind = 'task.exploded' WHERE task_id = ?1";
    store.write(|tx| Ok(tx.execute(sql, [task_id])?)).expect("corrupt the fact");
}

fn submitted() -> NewEvent {
    NewEvent::new("task.submitted", serde_json::json!({}))
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state")).unwrap();
    (dir, store)
}

#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn files_are_private() {
    let (dir, store) = open();
    store.insert_task(&new_task("agt_1", None), 4, None, &submitted()).unwrap();
    let state = dir.path().join("state");
    assert_eq!(mode(&state), 0o700);
    for file in [DB_FILE.to_owned(), format!("{DB_FILE}-wal"), format!("{DB_FILE}-shm")] {
        let path = state.join(&file);
        assert!(path.exists(), "{file} exists");
        assert_eq!(mode(&path), 0o600, "{file}");
    }
}

#[test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn a_broad_state_dir_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    let err = Store::open(&state).unwrap_err().to_string();
    assert!(err.contains("0750"), "{err}");
    assert_eq!(mode(&state), 0o750);
    assert!(!state.join(DB_FILE).exists());
}

#[test]
fn transitions_follow_the_matrix_and_terminal_is_final() {
    let (_dir, store) = open();
    store.insert_task(&new_task("agt_1", None), 4, None, &submitted()).unwrap();
    let err = store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 2).unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { from: TaskStatus::Queued, to: TaskStatus::Succeeded }));
    for to in [TaskStatus::Starting, TaskStatus::Running, TaskStatus::Succeeded] {
        store.transition("agt_1", to, TransitionFields::default(), 3).unwrap();
    }
    for to in TaskStatus::ALL {
        assert!(store.transition("agt_1", to, TransitionFields::default(), 4).is_err(), "succeeded -> {to:?}");
    }
    let row = store.get_task("agt_1").unwrap().unwrap();
    assert_eq!(row.status, TaskStatus::Succeeded);
    assert_eq!(row.completed_at, Some(3));
    assert_eq!(row.started_at, Some(3));
}

#[test]
fn the_active_cap_is_counted_inside_the_insert_transaction() {
    let (_dir, store) = open();
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                store.insert_task(&new_task(&format!("agt_{i}"), None), 3, None, &submitted())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let created = results.iter().filter(|r| matches!(r, Ok(Inserted::Created(_)))).count();
    let refused = results.iter().filter(|r| matches!(r, Err(StoreError::TaskLimitReached { limit: 3 }))).count();
    assert_eq!((created, refused), (3, 5));
}

#[test]
fn idempotency_keys_are_unique_per_principal() {
    let (_dir, store) = open();
    assert!(matches!(
        store.insert_task(&new_task("agt_1", Some("k")), 9, None, &submitted()).unwrap(),
        Inserted::Created(_)
    ));
    match store.insert_task(&new_task("agt_2", Some("k")), 9, None, &submitted()).unwrap() {
        Inserted::Existing(row) => assert_eq!(row.task_id, "agt_1"),
        other => panic!("expected the existing task, got {other:?}"),
    }
    let mut other = new_task("agt_3", Some("k"));
    other.principal = "bob".into();
    assert!(matches!(store.insert_task(&other, 9, None, &submitted()).unwrap(), Inserted::Created(_)));
    // The partial unique index is the last guard even for a writer that skips the lookup.
    let err = store
        .write(|tx| {
            tx.execute(
                "INSERT INTO tasks (task_id, principal, runtime, workdir_alias, relative_cwd, profile, status, \
                 created_at, updated_at, deadline_at, manifest_json, manifest_sha256, idempotency_key) \
                 VALUES ('agt_4', 'alice', 'fake', 'repo', '', 'review', 'queued', 1, 1, 2, '{}', 'x', 'k')",
                [],
            )?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(ref e) if super::is_unique_violation(e)), "{err}");
    // Tasks without a key never collide.
    store.insert_task(&new_task("agt_5", None), 9, None, &submitted()).unwrap();
    store.insert_task(&new_task("agt_6", None), 9, None, &submitted()).unwrap();
}

#[test]
fn a_guard_blocks_a_second_writer_until_cleared() {
    let (_dir, store) = open();
    let guard = NewGuard { workdir_alias: "repo".into(), worktree: None };
    store.insert_task(&new_task("agt_1", None), 9, Some(&guard), &submitted()).unwrap();
    let err = store.insert_task(&new_task("agt_2", None), 9, Some(&guard), &submitted()).unwrap_err();
    assert!(matches!(err, StoreError::GuardPresent { ref task_id } if task_id == "agt_1"));
    assert!(!store.clear_guard("repo", "agt_2").unwrap(), "only the named task clears it");
    assert!(store.clear_guard("repo", "agt_1").unwrap());
    store.insert_task(&new_task("agt_2", None), 9, Some(&guard), &submitted()).unwrap();
}

fn running(store: &Store, id: &str) {
    store.insert_task(&new_task(id, None), 9, None, &submitted()).unwrap();
    store.transition(id, TaskStatus::Starting, TransitionFields::default(), 2).unwrap();
    store.transition(id, TaskStatus::Running, TransitionFields::default(), 2).unwrap();
}

fn approval(id: &str) -> NewInteraction {
    NewInteraction {
        request_id: id.into(),
        kind: InteractionKind::Approval,
        payload_json: "{}".into(),
        expires_at: 5_000,
    }
}

#[test]
fn interactions_resolve_once_under_contention() {
    let (_dir, store) = open();
    running(&store, "agt_1");
    let task = store.open_interaction("agt_1", &approval("req_1"), 10).unwrap();
    assert_eq!(task.status, TaskStatus::WaitingForApproval);
    assert!(matches!(store.open_interaction("agt_1", &approval("req_2"), 10), Err(StoreError::RequestPending)));
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let event = NewEvent::new("approval.resolved", serde_json::json!({}));
                store.resolve_interaction("agt_1", "req_1", InteractionKind::Approval, "{}", &event, 20)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, StoreError::RequestAlreadyResolved)));
    assert_eq!(store.get_task("agt_1").unwrap().unwrap().status, TaskStatus::Running);
}

#[test]
fn a_terminal_transition_stales_the_pending_request() {
    let (_dir, store) = open();
    running(&store, "agt_1");
    store.open_interaction("agt_1", &approval("req_1"), 10).unwrap();
    store.transition("agt_1", TaskStatus::Cancelled, TransitionFields::default(), 11).unwrap();
    assert_eq!(store.get_interaction("req_1").unwrap().unwrap().status, InteractionStatus::Stale);
    let task = store.get_task("agt_1").unwrap().unwrap();
    assert_eq!(task.pending_request_id, None);
    let event = NewEvent::new("approval.resolved", serde_json::json!({}));
    let late = store.resolve_interaction("agt_1", "req_1", InteractionKind::Approval, "{}", &event, 12);
    assert!(matches!(late, Err(StoreError::RequestStale)));
}

#[test]
fn expired_and_abandoned_requests_are_stale() {
    let (_dir, store) = open();
    running(&store, "agt_1");
    store.open_interaction("agt_1", &approval("req_1"), 10).unwrap();
    let event = NewEvent::new("approval.resolved", serde_json::json!({}));
    let late = store.resolve_interaction("agt_1", "req_1", InteractionKind::Approval, "{}", &event, 5_000);
    assert!(matches!(late, Err(StoreError::RequestStale)), "at expires_at the request is stale");
    assert!(store.abandon_interaction("agt_1", "req_1", "withdrawn", 20).unwrap());
    assert!(!store.abandon_interaction("agt_1", "req_1", "withdrawn", 21).unwrap());
    assert_eq!(store.get_task("agt_1").unwrap().unwrap().status, TaskStatus::Running);
}

#[test]
fn provider_events_over_the_cap_are_dropped_and_counted() {
    let (_dir, store) = open();
    running(&store, "agt_1");
    let base = store.get_task("agt_1").unwrap().unwrap().event_count;
    let cap = base as u32 + 3;
    let event = NewEvent::new("agent.message", serde_json::json!({"text": "x"}));
    let kept: Vec<_> = (0..5).map(|_| store.append_event("agt_1", &event, Some(cap), 5).unwrap()).collect();
    assert_eq!(kept.iter().filter(|k| k.is_some()).count(), 3);
    store.append_event("agt_1", &NewEvent::new("task.completed", serde_json::json!({})), None, 6).unwrap();
    let task = store.get_task("agt_1").unwrap().unwrap();
    assert_eq!(task.events_dropped, 2);
    assert_eq!(task.event_count, base + 4);
    let events = store.read_events("agt_1", 0, 500).unwrap();
    assert_eq!(events.len() as i64, task.event_count);
    assert!(events.windows(2).all(|w| w[0].event_id < w[1].event_id));
    // 2 = FULL: a provider event's relaxed commit leaves the next writes durable.
    let synchronous: i64 = store.write(|tx| Ok(tx.query_row("PRAGMA synchronous", [], |r| r.get(0))?)).unwrap();
    assert_eq!(synchronous, 2);
}

#[test]
fn provider_events_stored_together_keep_their_order_and_the_cap() {
    let (_dir, store) = open();
    running(&store, "agt_1");
    let base = store.get_task("agt_1").unwrap().unwrap().event_count;
    let events: Vec<NewEvent> =
        (0..5).map(|i| NewEvent::new("agent.message", serde_json::json!({ "text": format!("e{i}") }))).collect();
    assert_eq!(store.append_provider_events("agt_1", &events, base as u32 + 3, 5).unwrap(), 3);
    let task = store.get_task("agt_1").unwrap().unwrap();
    assert_eq!((task.event_count, task.events_dropped), (base + 3, 2));
    let texts: Vec<String> =
        store.read_events("agt_1", 0, 500).unwrap().into_iter().skip(base as usize).map(|e| e.payload_json).collect();
    assert_eq!(texts, [r#"{"text":"e0"}"#, r#"{"text":"e1"}"#, r#"{"text":"e2"}"#]);
}

#[test]
fn retention_spares_active_and_guarded_tasks() {
    let (_dir, store) = open();
    let guard = NewGuard { workdir_alias: "repo".into(), worktree: None };
    for id in ["agt_old", "agt_guarded", "agt_active", "agt_new"] {
        let g = (id == "agt_guarded").then_some(&guard);
        store.insert_task(&new_task(id, Some(id)), 9, g, &submitted()).unwrap();
    }
    // Created at 1,000 (`new_task`), ended later.
    for (id, at) in [("agt_old", 1_100), ("agt_guarded", 1_100), ("agt_new", 1_900)] {
        store.transition(id, TaskStatus::Cancelled, TransitionFields::default(), at).unwrap();
    }
    let deleted: Vec<String> = store.delete_expired(1_500).unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(deleted, ["agt_old"]);
    assert!(store.get_task("agt_old").unwrap().is_none());
    assert!(store.read_events("agt_old", 0, 10).unwrap().is_empty(), "events go with the task");
    assert!(store.find_by_idempotency_key("alice", "agt_old").unwrap().is_none(), "the key is free again");
    for id in ["agt_guarded", "agt_active", "agt_new"] {
        assert!(store.get_task(id).unwrap().is_some(), "{id} kept");
    }
}

/// A database made by the first schema upgrades in place: old rows keep NULL for the new
/// fields (nothing fabricated), and the new index and columns work.
#[test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn a_first_schema_database_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    crate::files::ensure_private_dir(&state).unwrap();
    let path = state.join(DB_FILE);
    {
        std::fs::OpenOptions::new().write(true).create_new(true).open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut conn = Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, 1).unwrap();
        for id in ["agt_legacy1", "agt_legacy2"] {
            conn.execute(
                "INSERT INTO tasks (task_id, principal, runtime, workdir_alias, relative_cwd, profile, status, \
                 created_at, updated_at, completed_at, deadline_at, manifest_json, manifest_sha256) \
                 VALUES (?1, 'alice', 'fake', 'repo', '', 'review', 'succeeded', 1, 2, 2, 3, '{}', 'x')",
                params![id],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO recovery_guards (workdir_alias, task_id, runtime, created_at, updated_at) VALUES ('repo', 'agt_legacy1', 'fake', 1, 1)",
            [],
        )
        .unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 1);
    }
    let store = Store::open(&state).unwrap();
    let v: i64 = store.read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)).unwrap();
    assert_eq!(v, schema::MIGRATIONS.len() as i64);
    for id in ["agt_legacy1", "agt_legacy2"] {
        let row = store.get_task(id).unwrap().unwrap();
        assert_eq!(row.idempotency_key, None, "no fabricated key");
        assert_eq!(row.request_fingerprint, None, "no fabricated fingerprint");
        assert_eq!(row.status, TaskStatus::Succeeded);
    }
    assert_eq!(store.get_guard("repo").unwrap().unwrap().proof_json, None);
    store.insert_task(&new_task("agt_new", Some("k")), 9, None, &submitted()).unwrap();
    assert!(matches!(
        store.insert_task(&new_task("agt_dup", Some("k")), 9, None, &submitted()).unwrap(),
        Inserted::Existing(_)
    ));
    drop(store);
    // Opening again applies nothing twice.
    let store = Store::open(&state).unwrap();
    assert!(store.get_task("agt_new").unwrap().is_some());
}

fn audit_row(at: i64, capability: &str) -> super::audit::AuditRow {
    super::audit::AuditRow {
        audit_id: 0,
        at,
        surface: "mcp".into(),
        principal: None,
        role: None,
        capability: capability.into(),
        scope: None,
        outcome: AuditOutcome::Denied,
        error_code: Some("UNAUTHENTICATED".into()),
        duration_us: 7,
        task_id: None,
        plan_id: None,
        client_name: None,
        count: 1,
    }
}

/// A database from before the audit counts (schema 4, with audit rows) upgrades in place:
/// every old row is kept, and each counts as one call.
#[test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn a_database_from_before_audit_counts_keeps_its_rows_at_count_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    crate::files::ensure_private_dir(&state).unwrap();
    let path = state.join(DB_FILE);
    {
        std::fs::OpenOptions::new().write(true).create_new(true).open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut conn = Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, 4).unwrap();
        for (at, capability) in [(1, "whoami"), (2, "submit_agent_task"), (3, "whoami")] {
            conn.execute(
                "INSERT INTO audit_log (at, surface, principal, capability, outcome, duration_us, client_name) \
                 VALUES (?1, 'mcp', 'alice', ?2, 'ok', 5, 'old-client')",
                params![at, capability],
            )
            .unwrap();
        }
    }
    let store = Store::open(&state).unwrap();
    let v: i64 = store.read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)).unwrap();
    assert_eq!(v, schema::MIGRATIONS.len() as i64);
    let rows = store.read_audit(&Default::default(), None, 10).unwrap();
    let seen: Vec<(i64, &str, Option<&str>, i64)> =
        rows.iter().map(|r| (r.at, r.capability.as_str(), r.client_name.as_deref(), r.count)).collect();
    assert_eq!(
        seen,
        [
            (3, "whoami", Some("old-client"), 1),
            (2, "submit_agent_task", Some("old-client"), 1),
            (1, "whoami", Some("old-client"), 1)
        ]
    );
    // Coalescing works on the upgraded table at once.
    store.write_audit(&[(Some("k".into()), audit_row(4, "whoami"))], &[]).unwrap();
    drop(store);
    let store = Store::open(&state).unwrap();
    assert_eq!(
        store.read_audit(&Default::default(), None, 10).unwrap().len(),
        4,
        "opening again applies nothing twice"
    );
}

/// Coalesced rows with one key are one row whose count is the sum; other keys and plain
/// rows stay apart.
#[test]
fn coalesced_audit_rows_add_up_under_their_key() {
    let (_dir, store) = open();
    let mut long = audit_row(10, "whoami");
    long.duration_us = 99;
    let mut three = audit_row(11, "whoami");
    three.count = 3;
    let key = |k: &str| Some(k.to_owned());
    store.write_audit(&[(None, audit_row(5, "plain")), (key("m1|whoami"), audit_row(10, "whoami"))], &[]).unwrap();
    store.write_audit(&[(key("m1|whoami"), three), (key("m1|*"), audit_row(12, "*"))], &[]).unwrap();
    store.write_audit(&[(key("m1|whoami"), long), (None, audit_row(13, "plain"))], &[]).unwrap();
    let rows = store.read_audit(&Default::default(), None, 10).unwrap();
    let seen: Vec<(&str, i64, i64, i64)> =
        rows.iter().map(|r| (r.capability.as_str(), r.at, r.count, r.duration_us)).collect();
    assert_eq!(seen, [("plain", 13, 1, 7), ("*", 12, 1, 7), ("whoami", 10, 5, 99), ("plain", 5, 1, 7)]);
}

/// Audit retention deletes rows older than the cutoff, in batches of the given size, and
/// keeps younger ones.
#[test]
fn audit_retention_deletes_old_rows_in_batches() {
    let (_dir, store) = open();
    let rows: Vec<_> = (0..25).map(|at| audit_row(at, "whoami")).collect();
    store.insert_audit(&rows).unwrap();
    assert_eq!(store.delete_audit_before(20, 8).unwrap(), 8, "one bounded batch");
    assert_eq!(store.delete_audit_before(20, 8).unwrap(), 8);
    assert_eq!(store.delete_audit_before(20, 8).unwrap(), 4, "the rest of the old rows");
    assert_eq!(store.delete_audit_before(20, 8).unwrap(), 0, "nothing left to do");
    let kept: Vec<i64> = store.read_audit(&Default::default(), None, 100).unwrap().iter().map(|r| r.at).collect();
    assert_eq!(kept, [24, 23, 22, 21, 20]);
}

/// The audit batch marks each key used once, at its latest call, in the batch's own
/// transaction; that transaction is relaxed, and every later write is durable again.
#[test]
fn an_audit_batch_touches_each_key_once_and_leaves_later_writes_durable() {
    let (_dir, store) = open();
    let key = super::keys::KeyRow {
        key_id: "key_1".into(),
        name: "alice".into(),
        role: crate::config::Role::Operator,
        key_sha256: [7; 32],
        workdirs: None,
        created_at: 1,
        last_used_at: None,
        revoked_at: None,
    };
    store.insert_key(&key).unwrap();
    let used = [("key_1".to_owned(), 30), ("key_1".to_owned(), 50), ("key_1".to_owned(), 40), ("key_x".to_owned(), 9)];
    store.write_audit(&[(None, audit_row(50, "whoami"))], &used).unwrap();
    let keys = store.list_keys().unwrap();
    assert_eq!(keys[0].last_used_at, Some(50));
    assert_eq!(store.read_audit(&Default::default(), None, 10).unwrap().len(), 1);
    // 2 = FULL: the relaxed setting ended with its batch.
    let synchronous: i64 = store.write(|tx| Ok(tx.query_row("PRAGMA synchronous", [], |r| r.get(0))?)).unwrap();
    assert_eq!(synchronous, 2);
}

/// The task view's statement runs as prepared, call after call: a statement whose plan
/// depends on a bound value (as a LEFT JOIN on the bound key made it) is prepared again on
/// every use, which tripled the cost of a view.
#[test]
fn the_task_views_statement_is_prepared_once() {
    let (_dir, store) = open();
    for id in ["agt_1", "agt_2"] {
        store.insert_task(&new_task(id, None), 100, None, &submitted()).unwrap();
    }
    for id in ["agt_1", "agt_2", "agt_1", "agt_2", "agt_3"] {
        store.task_parts(id).unwrap();
    }
    let reprepared = store
        .read(|c| Ok(c.prepare_cached(super::tasks::get_task_sql())?.get_status(rusqlite::StatementStatus::RePrepare)))
        .unwrap();
    assert_eq!(reprepared, 0);
}

/// A retention pass that finds nothing due (most of them: one runs at every submit, end and
/// cancel) walks the index of creation times over the tasks older than its cutoff, never the
/// whole table: with a year of history a full scan was most of a submit's time.
#[test]
fn the_retention_check_reads_an_index_not_the_table() {
    let (_dir, store) = open();
    let plan: Vec<String> = store
        .read(|c| {
            let sql = format!("EXPLAIN QUERY PLAN SELECT COUNT(*) FROM tasks WHERE {}", super::tasks::EXPIRED);
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map([0], |r| r.get::<_, String>(3))?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .unwrap();
    assert_eq!(plan, ["SEARCH tasks USING INDEX tasks_by_created (created_at<?)"]);
}
