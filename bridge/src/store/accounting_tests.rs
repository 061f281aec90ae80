//! Accounting store tests on a real SQLite file: usage replaced by the latest report, a change
//! set stored once with its event, human-wait time from the interactions, totals per group
//! and per plan, and change sets deleted with their task.

use super::accounting::{NewChanges, TotalsBy};
use super::events::NewEvent;
use super::interactions::NewInteraction;
use super::tasks::{NewTask, TaskFilter, TransitionFields};
use super::tests::new_task;
use super::{Store, StoreError};
use crate::model::{InteractionKind, ResultStorage, TaskStatus, Usage};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state")).unwrap();
    (dir, store)
}

fn insert(store: &Store, t: NewTask) {
    store.insert_task(&t, 99, None, &NewEvent::new("task.submitted", serde_json::json!({}))).unwrap();
}

fn run(store: &Store, id: &str, start: i64) {
    store.transition(id, TaskStatus::Starting, TransitionFields::default(), start).unwrap();
    store.transition(id, TaskStatus::Running, TransitionFields::default(), start).unwrap();
}

fn usage(input: u64, output: u64, cost: Option<f64>) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: 4,
        cache_write_input_tokens: 1,
        output_tokens: output,
        reasoning_tokens: Some(2),
        cost_usd: cost,
        model: Some("m-1".into()),
    }
}

#[test]
fn the_latest_usage_report_replaces_the_previous_one() -> Result<(), StoreError> {
    let (_dir, store) = open();
    insert(&store, new_task("agt_1", None));
    assert_eq!(store.get_task("agt_1")?.unwrap().usage, None, "nothing reported is not a zero");
    store.set_usage("agt_1", &usage(10, 5, None), 2)?;
    store.set_usage("agt_1", &usage(30, 9, Some(0.25)), 3)?;
    let u = store.get_task("agt_1")?.unwrap().usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens), (30, 9, 4, Some(2)));
    assert_eq!(u.cost_usd, Some(0.25));
    // A later report without a model keeps the one known.
    store.set_usage("agt_1", &Usage { model: None, ..usage(31, 9, Some(f64::NAN)) }, 4)?;
    let u = store.get_task("agt_1")?.unwrap().usage.unwrap();
    assert_eq!(u.model.as_deref(), Some("m-1"));
    assert_eq!(u.cost_usd, None, "a cost that is not a number is not stored");
    Ok(())
}

#[test]
fn a_change_set_is_stored_once_with_its_event_and_goes_with_its_task() -> Result<(), StoreError> {
    let (_dir, store) = open();
    insert(&store, new_task("agt_1", None));
    let set = NewChanges {
        status: "recorded",
        method: Some("git".into()),
        files_changed: 2,
        added: 3,
        removed: 1,
        summary_json: Some(r#"{"files":[]}"#.into()),
        index_json: Some("[]".into()),
        diff_storage: Some(ResultStorage::Inline),
        diff_text: Some("diff --git a/x b/x\n".into()),
        diff_size_bytes: 19,
        ..Default::default()
    };
    let event = NewEvent::new("changes.recorded", serde_json::json!({}));
    assert!(store.put_changes("agt_1", &set, &event, 5)?);
    assert!(!store.put_changes("agt_1", &set, &event, 6)?, "a second change set is ignored");
    assert!(!store.put_changes("agt_nope", &set, &event, 6)?, "no row for a task that does not exist");
    let brief = store.get_task("agt_1")?.unwrap().changes.unwrap();
    assert_eq!((brief.status.as_str(), brief.files_changed, brief.added, brief.removed), ("recorded", 2, 3, 1));
    let row = store.get_changes("agt_1")?.unwrap();
    assert_eq!(row.diff_text.as_deref(), Some("diff --git a/x b/x\n"));
    let events = store.read_events("agt_1", 0, 100)?;
    assert_eq!(events.iter().filter(|e| e.event_type == "changes.recorded").count(), 1);
    store.transition("agt_1", TaskStatus::Cancelled, TransitionFields::default(), 7)?;
    assert_eq!(store.delete_expired(1_000_000)?.len(), 1);
    assert_eq!(store.get_changes("agt_1")?, None, "deleted with its task");
    Ok(())
}

#[test]
fn human_wait_counts_answered_and_abandoned_requests_up_to_their_expiry() -> Result<(), StoreError> {
    let (_dir, store) = open();
    insert(&store, new_task("agt_1", None));
    run(&store, "agt_1", 1_000);
    let ask = |id: &str, expires_at: i64| NewInteraction {
        request_id: id.into(),
        kind: InteractionKind::Approval,
        payload_json: "{}".into(),
        expires_at,
    };
    store.open_interaction("agt_1", &ask("req_1", 9_000), 1_100)?;
    let event = NewEvent::new("approval.resolved", serde_json::json!({}));
    store.resolve_interaction("agt_1", "req_1", InteractionKind::Approval, "{}", &event, 1_400)?;
    assert_eq!(store.get_task("agt_1")?.unwrap().human_wait_ms, 300);
    store.open_interaction("agt_1", &ask("req_2", 2_000), 1_500)?;
    assert_eq!(store.get_task("agt_1")?.unwrap().human_wait_ms, 300, "a pending request is the view's to add");
    // The task ends long after the request expired: only up to its expiry counts.
    store.transition("agt_1", TaskStatus::Interrupted, TransitionFields::default(), 8_000)?;
    assert_eq!(store.get_task("agt_1")?.unwrap().human_wait_ms, 300 + 500);
    Ok(())
}

#[test]
fn totals_group_by_principal_and_workdir_over_a_period_and_per_plan() -> Result<(), StoreError> {
    let (_dir, store) = open();
    for (id, who, workdir, created) in
        [("agt_1", "alice", "repo", 1_000), ("agt_2", "bob", "repo", 2_000), ("agt_3", "alice", "docs", 3_000)]
    {
        let mut t = new_task(id, None);
        t.principal = who.into();
        t.workdir_alias = workdir.into();
        t.created_at = created;
        insert(&store, t);
        run(&store, id, created);
    }
    store.set_usage("agt_1", &usage(10, 5, Some(0.1)), 1_100)?;
    store.set_usage("agt_2", &usage(20, 6, None), 2_100)?;
    store.set_usage("agt_3", &usage(30, 7, Some(0.2)), 3_100)?;
    store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 1_500)?;
    let all = store.usage_totals(&TaskFilter::default(), TotalsBy::All, 4_000)?;
    assert_eq!(all.len(), 1);
    let t = &all[0].1;
    assert_eq!((t.tasks, t.reported, t.input_tokens, t.output_tokens, t.reasoning_tokens), (3, 3, 60, 18, 6));
    assert!((t.cost_usd.unwrap() - 0.3).abs() < 1e-12, "{:?}", t.cost_usd);
    // Wall time: 500 for the finished task, up to `now` for the two still running.
    assert_eq!(t.wall_ms, 500 + 2_000 + 1_000);
    let by_principal = store.usage_totals(&TaskFilter::default(), TotalsBy::Principal, 4_000)?;
    let names: Vec<(&str, i64, i64)> =
        by_principal.iter().map(|(n, t)| (n.as_str(), t.tasks, t.input_tokens)).collect();
    assert_eq!(names, vec![("alice", 2, 40), ("bob", 1, 20)]);
    let period = TaskFilter { created_since: Some(2_000), created_until: Some(3_000), ..Default::default() };
    let by_workdir = store.usage_totals(&period, TotalsBy::Workdir, 4_000)?;
    assert_eq!(by_workdir.len(), 1);
    assert_eq!((by_workdir[0].0.as_str(), by_workdir[0].1.input_tokens), ("repo", 20));
    assert_eq!(by_workdir[0].1.cost_usd, None, "no task of the period reported a cost");
    let none = store.plan_usage("pln_missing", 4_000)?;
    assert_eq!((none.tasks, none.input_tokens, none.cost_usd), (0, 0, None));
    Ok(())
}
