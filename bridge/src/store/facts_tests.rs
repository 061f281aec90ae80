//! Fact tests on real SQLite files: each change records one typed fact in its own transaction
//! (none for a refused change), holding no prompt; routing replaces a fact by its messages
//! once; an unknown or unreadable fact is an error naming it, kept and skippable.

use super::facts::{Fact, FactKind, StoredFact};
use super::interactions::NewInteraction;
use super::outbox::{MessageKind, NewMessage};
use super::plans::{NewPlan, NewStep};
use super::tasks::TransitionFields;
use super::{Store, StoreError};
use crate::config::notify::NotifyEvent;
use crate::model::{InteractionKind, PlanStatus, TaskStatus};
use crate::store::events::NewEvent;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state")).expect("open");
    (dir, store)
}

fn task(store: &Store, id: &str) {
    let new = super::tests::new_task(id, None);
    store.insert_task(&new, 100, None, &NewEvent::new("task.submitted", serde_json::json!({}))).expect("insert");
    for to in [TaskStatus::Starting, TaskStatus::Running] {
        store.transition(id, to, TransitionFields::default(), 1_000).expect("start");
    }
}

fn pending(store: &Store) -> Vec<StoredFact> {
    store.pending_facts(&[], 100).expect("facts")
}

fn facts(store: &Store) -> Vec<Fact> {
    pending(store).into_iter().map(|f| f.fact.expect("readable")).collect()
}

fn plan(id: &str, approved_by: Option<&str>) -> NewPlan {
    NewPlan::for_test(id, approved_by)
}

#[tokio::test]
async fn a_terminal_transition_records_one_typed_fact_and_a_refused_one_none() {
    let (_dir, store) = open();
    task(&store, "agt_1");
    assert!(pending(&store).is_empty(), "starting and running are no facts");
    let woken = store.outbox_signal().notified();
    let fields = TransitionFields { error_code: Some("AGENT_PROVIDER_FAILED".into()), ..Default::default() };
    store.transition("agt_1", TaskStatus::Failed, fields, 2_000).expect("fail");
    tokio::time::timeout(std::time::Duration::from_secs(5), woken).await.expect("the worker is woken");
    let recorded = pending(&store);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].created_at, 2_000);
    let Ok(Fact::TaskEnded(ended)) = &recorded[0].fact else { panic!("{recorded:?}") };
    assert_eq!(
        (ended.task.status, ended.task.error_code.as_deref()),
        (TaskStatus::Failed, Some("AGENT_PROVIDER_FAILED"))
    );
    assert_eq!((ended.task.workdir.as_str(), ended.task.runtime.as_str()), ("repo", "fake"));
    assert_eq!((ended.task.plan_id.as_deref(), ended.branch.as_ref()), (None, None));
    // A refused transition records nothing: the fact belongs to the committed change only.
    let refused = store.transition("agt_1", TaskStatus::Succeeded, TransitionFields::default(), 3_000);
    assert!(matches!(refused, Err(StoreError::InvalidTransition { .. })));
    assert_eq!(pending(&store).len(), 1);
    let kind: String =
        store.read(|c| Ok(c.query_row("SELECT kind FROM notify_facts", [], |r| r.get(0))?)).expect("kind");
    assert_eq!(kind, "task.ended");
}

#[test]
fn a_request_and_a_plan_awaiting_approval_record_theirs_without_prompts() {
    let (_dir, store) = open();
    task(&store, "agt_1");
    let ask = NewInteraction {
        request_id: "req_1".into(),
        kind: InteractionKind::Question,
        payload_json: r#"{"questions":[{"question":"Which branch?"}]}"#.into(),
        expires_at: 50_000,
    };
    store.open_interaction("agt_1", &ask, 2_000).expect("open");
    let steps: Vec<NewStep> =
        (1..=3).map(|i| NewStep { title: format!("step {i}"), prompt: format!("secret prompt {i}") }).collect();
    store.insert_plan(&plan("pln_1", None), &steps).expect("insert");
    store.insert_plan(&plan("pln_2", Some("operator@local")), &steps).expect("approved at creation");
    let recorded = facts(&store);
    assert_eq!(
        recorded.iter().map(Fact::kind).collect::<Vec<_>>(),
        [FactKind::RequestOpened, FactKind::PlanAwaitsApproval]
    );
    let Fact::RequestOpened(opened) = &recorded[0] else { panic!() };
    assert_eq!(
        (opened.request_id.as_str(), opened.kind, opened.expires_at),
        ("req_1", InteractionKind::Question, 50_000)
    );
    assert_eq!(opened.task.status, TaskStatus::WaitingForQuestion);
    assert_eq!(opened.payload.as_ref().expect("payload")["questions"][0]["question"], "Which branch?");
    let Fact::PlanAwaitsApproval(waiting) = &recorded[1] else { panic!() };
    assert_eq!((waiting.plan_id.as_str(), waiting.steps, waiting.status), ("pln_1", 3, PlanStatus::PendingApproval));
    assert_eq!(waiting.title, "Refactor the parser");
    let stored: String = store
        .read(|c| Ok(c.query_row("SELECT group_concat(data_json) FROM notify_facts", [], |r| r.get(0))?))
        .expect("data");
    assert!(!stored.contains("secret prompt"), "no step prompt is recorded: {stored}");
}

#[test]
fn a_kept_guard_is_recorded_only_while_the_guard_names_the_task() {
    let (_dir, store) = open();
    task(&store, "agt_1");
    store.record_guard_kept("repo", "agt_1", 2_000).expect("no guard: nothing");
    assert!(pending(&store).is_empty(), "no guard names the task");
    store
        .write(|tx| {
            Ok(tx.execute(
                "INSERT INTO recovery_guards (workdir_alias, task_id, runtime, created_at, updated_at) \
                 VALUES ('repo', 'agt_1', 'fake', 1, 1)",
                [],
            )?)
        })
        .expect("guard");
    store.record_guard_kept("repo", "agt_1", 2_000).expect("kept");
    store.record_guard_kept("repo", "agt_2", 2_000).expect("another task: nothing");
    let recorded = facts(&store);
    assert_eq!(recorded.len(), 1);
    let Fact::GuardKept(kept) = &recorded[0] else { panic!() };
    assert_eq!((kept.workdir.as_str(), kept.task_id.as_str()), ("repo", "agt_1"));
    assert_eq!(kept.task.as_ref().map(|t| t.status), Some(TaskStatus::Running));
}

fn finish(target: u8, task: &str, at: i64) -> NewMessage {
    NewMessage {
        message_id: format!("msg_{target}_{task}"),
        target,
        kind: MessageKind::Event(NotifyEvent::TaskFinished),
        dedupe_key: format!("task.finished:{task}:{target}"),
        order_key: task.into(),
        task_id: Some(task.into()),
        plan_id: None,
        request_id: None,
        facts_json: "{}".into(),
        link: None,
        created_at: at,
        give_up_at: at + 1_000,
    }
}

#[test]
fn routing_replaces_a_fact_by_its_messages_once() {
    let (_dir, store) = open();
    for id in ["agt_1", "agt_2"] {
        task(&store, id);
        store.transition(id, TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    }
    let ids: Vec<i64> = pending(&store).iter().map(|f| f.fact_id).collect();
    let routed = vec![(ids[0], vec![finish(1, "agt_1", 2_000), finish(2, "agt_1", 2_000)]), (ids[1], Vec::new())];
    assert_eq!(store.route_facts(&routed).expect("route"), 2);
    assert!(pending(&store).is_empty(), "a fact routed to no message is gone too");
    assert_eq!(store.route_facts(&routed).expect("again"), 0, "a fact is routed once");
    assert_eq!(store.recent_notifications(10).expect("rows").len(), 2);
}

#[test]
fn an_unknown_or_unreadable_fact_is_an_error_naming_it_and_stays() {
    let (_dir, store) = open();
    for id in ["agt_1", "agt_2", "agt_3"] {
        task(&store, id);
        store.transition(id, TaskStatus::Succeeded, TransitionFields::default(), 2_000).expect("succeed");
    }
    let raw = |sql: &str| store.write(|tx| Ok(tx.execute(sql, [])?)).expect("raw");
    raw("UPDATE notify_facts SET kind = 'task.exploded' WHERE task_id = 'agt_1'");
    raw("UPDATE notify_facts SET data_json = '{\"task\":{\"status\":\"paused\"}}' WHERE task_id = 'agt_2'");
    let recorded = pending(&store);
    assert_eq!(recorded.len(), 3, "every row is still there");
    let message = |f: &StoredFact| f.fact.as_ref().expect_err("unreadable").to_string();
    assert!(
        message(&recorded[0]).contains("unknown notification fact kind \"task.exploded\""),
        "{}",
        message(&recorded[0])
    );
    assert!(message(&recorded[1]).contains("unreadable task.ended fact"), "{}", message(&recorded[1]));
    assert!(recorded[2].fact.is_ok(), "the others read");
    let skip = [recorded[0].fact_id, recorded[1].fact_id];
    let rest = store.pending_facts(&skip, 10).expect("facts");
    assert_eq!(rest.iter().map(|f| f.fact_id).collect::<Vec<_>>(), [recorded[2].fact_id]);
}
