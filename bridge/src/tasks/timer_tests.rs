//! The runner's three timers on tokio's paused clock, with the fake runtime's real child: the
//! task deadline, the interaction deadline and the event-idle timer each fire at their
//! deadline and not a millisecond before, with the documented ending.
//!
//! The clock is held (see `testing::HeldClock`), so virtual time moves only by
//! `tokio::time::advance`; the child works in real time. "Not before" is shown by a positive
//! event: at one millisecond before the deadline a steering message is relayed and its echo
//! recorded, which the runner's loop only does when no deadline has passed (it checks them
//! before any control).

use std::time::Duration;

use super::testing::{hold_clock, request, service, until};
use crate::clock::Clock;
use crate::error::code;
use crate::model::{Principal, TaskStatus};

const MS: Duration = Duration::from_millis(1);

/// Lets the runner run what the last `advance` woke, before the test acts again.
async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// The task deadline is the stored `deadline_at`, whenever the runner got going: virtual time
/// spent before the task runs counts against it. One millisecond before it the task still
/// runs; at it, the task is `interrupted` with `AGENT_TASK_TIMED_OUT`, persisted at the
/// deadline, and its lease and guard are released.
#[tokio::test(start_paused = true)]
async fn the_task_deadline_fires_at_the_stored_deadline_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path(), Clock::following_tokio(), "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=60\n");
    let _held = hold_clock();
    let submitted = service.submit(&Principal::local_operator(), request("wait:600")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    let deadline_at = service.row(&task_id).deadline_at;
    assert_eq!(deadline_at - service.row(&task_id).created_at, 60_000);
    // 20 s pass before the task runs: 40 s of its life are left, not 60.
    tokio::time::advance(Duration::from_secs(20)).await;
    until("the task to run", || (service.row(&task_id).status == TaskStatus::Running).then_some(())).await;

    tokio::time::advance(Duration::from_secs(40) - MS).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "one millisecond before the deadline").await;
    assert_eq!(service.row(&task_id).status, TaskStatus::Running);

    tokio::time::advance(2 * MS).await;
    let row = until("the deadline", || Some(service.row(&task_id)).filter(|r| r.status.is_terminal())).await;
    assert_eq!(row.status, TaskStatus::Interrupted);
    assert_eq!(row.error_code.as_deref(), Some(code::AGENT_TASK_TIMED_OUT));
    let at = row.completed_at.unwrap();
    assert!((deadline_at..=deadline_at + 2).contains(&at), "persisted at {at}, the deadline is {deadline_at}");
    service.until_runner_done(&task_id).await;
    assert!(service.inner.store.list_guards().unwrap().is_empty(), "the guard goes with the proven stop");
}

/// A pending request expires at its stored `expires_at` (now + the interaction timeout): one
/// millisecond before, the task still waits; at it, `interaction.expired` is recorded, the
/// task is `interrupted` with `AGENT_INTERACTION_TIMED_OUT`, and a late answer is
/// `REQUEST_STALE`.
async fn an_unanswered_request_expires(prompt: &str, waiting: TaskStatus, kind: &str) {
    let dir = tempfile::tempdir().unwrap();
    let env = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=600\nSERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=30\n";
    let service = service(dir.path(), Clock::following_tokio(), env);
    let _held = hold_clock();
    let operator = Principal::local_operator();
    let submitted = service.submit(&operator, request(prompt)).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    let request_id = until("the request", || {
        let row = service.row(&task_id);
        (row.status == waiting).then_some(row.pending_request_id).flatten()
    })
    .await;
    let expires_at = service.inner.store.get_interaction(&request_id).unwrap().unwrap().expires_at;
    assert_eq!(expires_at - service.inner.clock.now_ms(), 30_000);

    tokio::time::advance(Duration::from_secs(30) - MS).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "one millisecond before the expiry").await;
    assert_eq!(service.row(&task_id).status, waiting);

    tokio::time::advance(2 * MS).await;
    let row = until("the expiry", || Some(service.row(&task_id)).filter(|r| r.status.is_terminal())).await;
    assert_eq!(row.status, TaskStatus::Interrupted);
    assert_eq!(row.error_code.as_deref(), Some(code::AGENT_INTERACTION_TIMED_OUT));
    let at = row.completed_at.unwrap();
    assert!((expires_at..=expires_at + 2).contains(&at), "persisted at {at}, the expiry is {expires_at}");
    let events = service.inner.store.read_events(&task_id, 0, 1_000).unwrap();
    let expired: Vec<_> = events.iter().filter(|e| e.event_type == "interaction.expired").collect();
    assert_eq!(expired.len(), 1, "the expiry is recorded once");
    let payload: serde_json::Value = serde_json::from_str(&expired[0].payload_json).unwrap();
    assert_eq!(payload, serde_json::json!({ "request_id": request_id, "kind": kind }));
    let late = match waiting {
        TaskStatus::WaitingForApproval => {
            service.respond_approval(&operator, &task_id, &request_id, "approve_once", None).await
        }
        _ => {
            let answer =
                super::Answer { question_id: "q1".into(), selected_option_ids: vec!["yes".into()], text: None };
            service.answer_question(&operator, &task_id, &request_id, vec![answer]).await
        }
    };
    assert_eq!(late.unwrap_err().code, code::REQUEST_STALE);
    service.until_runner_done(&task_id).await;
    assert!(service.inner.store.list_guards().unwrap().is_empty(), "the guard goes with the proven stop");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_approval_expires_at_its_stored_expiry_and_not_before() {
    an_unanswered_request_expires("approval:run the tests", TaskStatus::WaitingForApproval, "approval").await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_question_expires_at_its_stored_expiry_and_not_before() {
    an_unanswered_request_expires("question:Proceed?", TaskStatus::WaitingForQuestion, "question").await;
}

/// An approval that would outlive the task expires with it: the stored expiry is the task's
/// deadline, and the ending is the task deadline's (`AGENT_TASK_TIMED_OUT`).
#[tokio::test(start_paused = true)]
async fn an_interaction_never_outlives_its_task_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let env = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=20\nSERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=30\n";
    let service = service(dir.path(), Clock::following_tokio(), env);
    let _held = hold_clock();
    let submitted = service.submit(&Principal::local_operator(), request("approval:run the tests")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    let request_id = until("the approval", || service.row(&task_id).pending_request_id).await;
    let deadline_at = service.row(&task_id).deadline_at;
    assert_eq!(service.inner.store.get_interaction(&request_id).unwrap().unwrap().expires_at, deadline_at);

    tokio::time::advance(Duration::from_secs(20) - MS).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "one millisecond before the deadline").await;
    tokio::time::advance(2 * MS).await;
    let row = until("the deadline", || Some(service.row(&task_id)).filter(|r| r.status.is_terminal())).await;
    assert_eq!(row.status, TaskStatus::Interrupted);
    assert_eq!(row.error_code.as_deref(), Some(code::AGENT_TASK_TIMED_OUT), "the task deadline came first");
    let events = service.inner.store.read_events(&task_id, 0, 1_000).unwrap();
    let interrupted: Vec<_> = events.iter().filter(|e| e.event_type == "task.interrupted").collect();
    assert_eq!(interrupted.len(), 1, "one ending");
    assert!(interrupted[0].payload_json.contains(code::AGENT_TASK_TIMED_OUT));
    let late =
        service.respond_approval(&Principal::local_operator(), &task_id, &request_id, "approve_once", None).await;
    assert_eq!(late.unwrap_err().code, code::REQUEST_STALE);
    service.until_runner_done(&task_id).await;
}

/// Time spent waiting for a human is never provider silence: with a request pending, ten idle
/// limits pass and the task still waits; answered, it runs to its end.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_human_is_not_provider_silence() {
    let dir = tempfile::tempdir().unwrap();
    let env = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=3600\nSERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=1800\n\
               SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=30\n";
    let service = service(dir.path(), Clock::following_tokio(), env);
    let _held = hold_clock();
    let operator = Principal::local_operator();
    let submitted = service.submit(&operator, request("approval:make")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    let request_id = until("the approval", || service.row(&task_id).pending_request_id).await;

    tokio::time::advance(Duration::from_secs(300)).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "ten idle limits later").await;
    assert_eq!(service.row(&task_id).status, TaskStatus::WaitingForApproval);

    service.respond_approval(&operator, &task_id, &request_id, "approve_once", None).await.unwrap();
    let row = until("the end", || Some(service.row(&task_id)).filter(|r| r.status.is_terminal())).await;
    assert_eq!(row.status, TaskStatus::Succeeded, "{:?}", row.error_message);
    service.until_runner_done(&task_id).await;
}

/// Provider silence ends the task at the event-idle limit: one millisecond before it the task
/// still runs, and the count restarts at the last provider event (here the echo of a relayed
/// message); the limit after that fails the task with `AGENT_PROVIDER_DISCONNECTED`, and not
/// earlier.
#[tokio::test(start_paused = true)]
async fn the_event_idle_timer_fires_after_the_limit_of_silence_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let env = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=600\nSERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=30\n";
    let service = service(dir.path(), Clock::following_tokio(), env);
    let _held = hold_clock();
    let submitted = service.submit(&Principal::local_operator(), request("wait:600")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    until("the task to run", || (service.row(&task_id).status == TaskStatus::Running).then_some(())).await;

    tokio::time::advance(Duration::from_secs(30) - MS).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "one millisecond before the limit").await;
    let steered_at = service.inner.clock.now_ms();

    // The count restarted at the echo: 30 s - 1 ms of silence since is not enough.
    tokio::time::advance(Duration::from_secs(30) - MS).await;
    settle().await;
    service.steer_and_wait_echo(&task_id, "again one millisecond before the limit").await;
    assert_eq!(service.row(&task_id).status, TaskStatus::Running);
    let silent_since = service.inner.clock.now_ms();
    assert_eq!(silent_since - steered_at, 30_000 - 1);

    tokio::time::advance(Duration::from_secs(30) + MS).await;
    let row = until("the idle limit", || Some(service.row(&task_id)).filter(|r| r.status.is_terminal())).await;
    assert_eq!(row.status, TaskStatus::Failed);
    assert_eq!(row.error_code.as_deref(), Some(code::AGENT_PROVIDER_DISCONNECTED));
    assert!(row.error_message.as_deref().unwrap_or("").contains("SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS"));
    service.until_runner_done(&task_id).await;
}
