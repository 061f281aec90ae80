//! Outbox tests on real SQLite files: messages ordered per task and target, retried and given
//! up by stored deadlines, written once per dedupe key, their action links stored as digests and
//! used once, their state and kind typed (an unknown stored value is an error naming it, and the
//! other rows stay), and pending messages of a database from before the facts surviving its
//! upgrade as they were.

use rusqlite::Connection;

use super::outbox::{Attempt, DeliveryState, MessageKind, NewActionLink, NewMessage};
use super::{DB_FILE, Store, StoreError};
use crate::config::notify::NotifyEvent;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state")).expect("open");
    (dir, store)
}

/// A message of `task`'s `event` to `target`, written at `at`.
fn message(target: u8, event: NotifyEvent, task: &str, at: i64) -> NewMessage {
    NewMessage {
        message_id: format!("msg_{target}_{}_{task}", event.as_str()),
        target,
        kind: MessageKind::Event(event),
        dedupe_key: format!("{}:{task}:{target}", event.as_str()),
        order_key: task.into(),
        task_id: Some(task.into()),
        plan_id: None,
        request_id: None,
        facts_json: format!(r#"{{"task_id":"{task}","title":"t"}}"#),
        link: None,
        created_at: at,
        give_up_at: at + 86_400_000,
    }
}

fn write(store: &Store, message: &NewMessage) {
    assert!(store.insert_message(message).expect("insert"), "written");
}

fn raw(store: &Store, sql: &str) -> usize {
    store.write(|tx| Ok(tx.execute(sql, [])?)).expect("raw")
}

#[test]
fn a_tasks_rows_go_out_in_order_and_are_retried_by_their_stored_deadline() {
    let (_dir, store) = open();
    write(&store, &message(1, NotifyEvent::ApprovalRequested, "agt_1", 2_000));
    write(&store, &message(1, NotifyEvent::TaskFinished, "agt_1", 2_100));
    write(&store, &message(1, NotifyEvent::TaskFinished, "agt_2", 2_200));
    let due = store.due_notifications(10_000, 10, &[], &[]).expect("due");
    let heads: Vec<(&str, MessageKind)> = due.iter().map(|r| (r.task_id.as_deref().unwrap_or(""), r.kind)).collect();
    assert_eq!(
        heads,
        [
            ("agt_1", MessageKind::Event(NotifyEvent::ApprovalRequested)),
            ("agt_2", MessageKind::Event(NotifyEvent::TaskFinished))
        ],
        "one head per task"
    );
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
    assert_eq!((delivered.state, delivered.attempts, delivered.action_url), (DeliveryState::Delivered, 2, None));
    let next = store.due_notifications(20_000, 10, &[], &[]).expect("due");
    assert!(
        next.iter()
            .any(|r| r.task_id.as_deref() == Some("agt_1") && r.kind == MessageKind::Event(NotifyEvent::TaskFinished))
    );
    // Given up: no retry time.
    let last = next.iter().find(|r| r.task_id.as_deref() == Some("agt_2")).expect("row").clone();
    store.record_attempt(last.outbox_id, &failed, None).expect("record");
    assert_eq!(store.get_notification(&last.message_id).expect("read").expect("row").state, DeliveryState::GivenUp);
    let stats = store.notification_stats().expect("stats");
    assert_eq!((stats[0].delivered, stats[0].pending, stats[0].given_up), (1, 1, 1));
    assert_eq!(stats[0].last_ok_at, Some(20_000));
    assert_eq!(stats[0].failing_since, None, "no failure after the last delivery");
    // Old finished rows go; pending ones stay whatever their age.
    assert_eq!(store.delete_old_notifications(i64::MAX, 100).expect("delete"), 2);
    assert_eq!(store.recent_notifications(10).expect("recent").len(), 1);
}

#[tokio::test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
async fn a_message_is_written_once_with_its_link_stored_as_a_digest_and_wakes_the_worker() {
    let (dir, store) = open();
    let mut ask = message(1, NotifyEvent::ApprovalRequested, "agt_1", 2_000);
    ask.request_id = Some("req_1".into());
    ask.link = Some(NewActionLink {
        link_id: "lnk_1".into(),
        token_sha256: "d1gest".into(),
        task_id: "agt_1".into(),
        request_id: "req_1".into(),
        expires_at: 50_000,
        path: "/a/abl_secret".into(),
    });
    let woken = store.outbox_signal().notified();
    write(&store, &ask);
    tokio::time::timeout(std::time::Duration::from_secs(5), woken).await.expect("the worker is woken");
    // The same dedupe key again (another message id, another link): nothing is written.
    let mut again = ask.clone();
    again.message_id = "msg_other".into();
    again.link.as_mut().expect("link").link_id = "lnk_2".into();
    assert!(!store.insert_message(&again).expect("insert"), "a duplicate is skipped");
    assert!(store.find_action_link("d1gest").expect("read").is_some_and(|l| l.link_id == "lnk_1"));
    let conn = Connection::open(dir.path().join("state").join(DB_FILE)).expect("open");
    let links: i64 = conn.query_row("SELECT COUNT(*) FROM action_links", [], |r| r.get(0)).expect("count");
    assert_eq!(links, 1, "the skipped message's link is not stored either");
    let token_kept: i64 = conn
        .query_row("SELECT COUNT(*) FROM action_links WHERE token_sha256 LIKE '%secret%'", [], |r| r.get(0))
        .expect("count");
    assert_eq!(token_kept, 0);
    let row = store.get_notification(&ask.message_id).expect("read").expect("row");
    assert_eq!(row.action_url.as_deref(), Some("/a/abl_secret"), "the link rides on its message until delivered");
    let link = store.find_action_link("d1gest").expect("read").expect("found");
    assert_eq!((link.task_id.as_str(), link.request_id.as_str(), link.expires_at), ("agt_1", "req_1", 50_000));
    assert!(store.find_action_link("abl_secret").expect("read").is_none(), "looked up by digest only");
    assert!(store.use_action_link(&link.link_id, 3_000).expect("use"));
    assert!(!store.use_action_link(&link.link_id, 3_001).expect("use"), "a link is used once");
    let given_up = store.give_up_target(1, 4_000, "the target is no longer configured").expect("give up");
    assert_eq!(given_up, 1);
    let row = store.get_notification(&ask.message_id).expect("read").expect("row");
    assert_eq!((row.state, row.action_url), (DeliveryState::GivenUp, None), "the link leaves with the retries");
}

#[test]
fn a_target_fails_for_an_hour_only_while_retrying_or_after_failures_spanning_it() {
    const HOUR: i64 = 3_600_000;
    let (_dir, store) = open();
    let failed = |at| Attempt { at, http_status: None, latency_ms: 5, error: Some("connection failed".into()) };
    // One failed test notification (never retried), long ago: not a failing target.
    let mut test = message(1, NotifyEvent::TaskFinished, "test-1", 1_000);
    (test.kind, test.task_id, test.give_up_at) = (MessageKind::Test, None, 1_000);
    write(&store, &test);
    let test_row = store.get_notification(&test.message_id).expect("read").expect("row");
    assert_eq!(test_row.kind, MessageKind::Test);
    store.record_attempt(test_row.outbox_id, &failed(1_000), None).expect("record");
    let stats = store.notification_stats().expect("stats");
    assert_eq!((stats[0].failing_since, stats[0].last_failure_at), (Some(1_000), Some(1_000)));
    assert!(!stats[0].failing_for(HOUR, 10 * HOUR), "one failure is not an hour of failing");
    // A row retried since then: failing for an hour once the first failure is an hour old.
    write(&store, &message(1, NotifyEvent::TaskFinished, "agt_1", 2_000));
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
    write(&store, &message(1, NotifyEvent::TaskFinished, "agt_2", 5 * HOUR));
    let row = store.due_notifications(5 * HOUR, 10, &[], &[]).expect("due").remove(0);
    let ok = Attempt { at: 5 * HOUR, http_status: Some(200), latency_ms: 2, error: None };
    store.record_attempt(row.outbox_id, &ok, None).expect("deliver");
    let stats = store.notification_stats().expect("stats");
    assert!(!stats[0].failing_for(HOUR, 9 * HOUR), "a delivery ends the failing spell");
}

/// The error's text names what the value should have been and the value.
fn assert_names(err: StoreError, what: &str, value: &str) {
    let message = err.to_string();
    assert!(matches!(err, StoreError::Sqlite(rusqlite::Error::FromSqlConversionFailure(..))), "{message}");
    assert!(message.contains(&format!("unknown {what} \"{value}\"")), "{message}");
}

#[test]
fn the_state_and_kind_are_stored_as_their_wire_names_and_an_unknown_one_is_an_error_naming_it() {
    let (_dir, store) = open();
    write(&store, &message(1, NotifyEvent::WorkdirRecoveryRequired, "agt_1", 1_000));
    write(&store, &message(2, NotifyEvent::PlanPendingApproval, "agt_2", 1_000));
    let text = |sql: &str| -> String { store.read(|c| Ok(c.query_row(sql, [], |r| r.get(0))?)).expect("read") };
    assert_eq!(
        text("SELECT event_type || '/' || state FROM notify_outbox WHERE target = 1"),
        "workdir.recovery_required/pending"
    );
    raw(&store, "UPDATE notify_outbox SET state = 'bounced' WHERE target = 1");
    assert_names(store.recent_notifications(10).unwrap_err(), "notification state", "bounced");
    assert_names(
        store.get_notification("msg_1_workdir.recovery_required_agt_1").unwrap_err(),
        "notification state",
        "bounced",
    );
    // The other row still reads and is still sent; the unknown one is neither lost nor sent.
    let due = store.due_notifications(2_000, 10, &[], &[]).expect("due");
    assert_eq!(due.iter().map(|r| r.target).collect::<Vec<_>>(), [2]);
    raw(&store, "UPDATE notify_outbox SET state = 'pending', event_type = 'task.exploded' WHERE target = 1");
    assert_names(store.due_notifications(2_000, 10, &[], &[]).unwrap_err(), "notification kind", "task.exploded");
    assert_eq!(
        store.notification_stats().expect("stats").iter().map(|s| s.pending).sum::<i64>(),
        2,
        "both rows are kept"
    );
    // Repaired, every row reads again.
    raw(&store, "UPDATE notify_outbox SET event_type = 'workdir.recovery_required' WHERE target = 1");
    assert_eq!(store.due_notifications(2_000, 10, &[], &[]).expect("due").len(), 2);
}

#[test]
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn an_old_database_with_pending_messages_upgrades_without_losing_or_changing_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    // The database as the bridge before the facts left it: schema 8, a pending approval with its
    // action link, a delivered finish, a pending finish behind the approval.
    drop(Store::open(&state).expect("create the files"));
    let path = state.join(DB_FILE);
    std::fs::remove_file(&path).expect("remove");
    let mut conn = Connection::open(&path).expect("open");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("0600");
    super::schema::migrate_to(&mut conn, 8).expect("schema 8");
    let facts = r#"{"event":"approval.requested","links":{"board":"/tasks/agt_1"},"request_id":"req_1","runtime":"fake","status":"waiting_for_approval","task_id":"agt_1","title":"fake task in repo needs an approval","workdir":"repo"}"#;
    conn.execute_batch(&format!(
        "INSERT INTO notify_outbox (message_id, dedupe_key, target, event_type, order_key, task_id, request_id, \
         facts_json, action_url, state, created_at, next_attempt_at, give_up_at) VALUES \
         ('msg_a', 'approval.requested:req_1:1', 1, 'approval.requested', 'agt_1', 'agt_1', 'req_1', '{facts}', \
          '/a/abl_old', 'pending', 1000, 5000, 86401000), \
         ('msg_b', 'task.finished:agt_0:1', 1, 'task.finished', 'agt_0', 'agt_0', NULL, '{{}}', NULL, 'delivered', \
          500, 600, 86400500), \
         ('msg_c', 'task.finished:agt_1:1', 1, 'task.finished', 'agt_1', 'agt_1', NULL, '{{}}', NULL, 'pending', \
          2000, 2000, 86402000); \
         INSERT INTO action_links (link_id, token_sha256, task_id, request_id, target, created_at, expires_at) \
         VALUES ('lnk_old', 'old_digest', 'agt_1', 'req_1', 1, 1000, 90000);"
    ))
    .expect("old rows");
    drop(conn);

    let store = Store::open(&state).expect("upgrade");
    let version: i64 = store.read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)).expect("version");
    assert_eq!(version, super::schema::MIGRATIONS.len() as i64);
    assert!(store.pending_facts(&[], 10).expect("facts").is_empty(), "old messages are not turned into facts");
    let all = store.recent_notifications(10).expect("every row reads");
    assert_eq!(all.len(), 3);
    let a = store.get_notification("msg_a").expect("read").expect("kept");
    assert_eq!((a.kind, a.state), (MessageKind::Event(NotifyEvent::ApprovalRequested), DeliveryState::Pending));
    assert_eq!((a.facts_json.as_str(), a.action_url.as_deref()), (facts, Some("/a/abl_old")), "unchanged");
    assert_eq!(store.get_notification("msg_b").expect("read").expect("kept").state, DeliveryState::Delivered);
    // Due as before: the task's head first, its finish behind it.
    let due = store.due_notifications(5_000, 10, &[], &[]).expect("due");
    assert_eq!(due.iter().map(|r| r.message_id.as_str()).collect::<Vec<_>>(), ["msg_a"]);
    assert!(store.find_action_link("old_digest").expect("read").is_some_and(|l| l.request_id == "req_1"));
    // A message the upgraded bridge routes with the same key is not written twice.
    let mut same = message(1, NotifyEvent::ApprovalRequested, "agt_1", 3_000);
    same.dedupe_key = "approval.requested:req_1:1".into();
    assert!(!store.insert_message(&same).expect("insert"));
}
