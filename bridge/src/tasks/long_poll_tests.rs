//! The `get_agent_task` long-poll on tokio's paused clock, with the fake runtime's real child:
//! a wait outlives `queued → starting → running` and steering events, ends when the task
//! ends or a request appears or is answered, and otherwise ends at its deadline and not a
//! millisecond before.
//!
//! The clock is held (see `testing::HeldClock`), so a wait's deadline passes only when a test
//! advances the clock: a wait that ends without an `advance` was ended by the task.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use super::testing::{hold_clock, request, service, until};
use crate::clock::Clock;
use crate::model::{Principal, TaskStatus};

const MS: Duration = Duration::from_millis(1);
const ENV: &str = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=600\nSERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=600\n";

fn parse(view: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(view.get()).unwrap()
}

/// Sleeps in real time (the held paused clock stands still), on a blocking thread.
async fn real_sleep(ms: u64) {
    tokio::task::spawn_blocking(move || std::thread::sleep(Duration::from_millis(ms))).await.unwrap();
}

/// Drives `wait` while `meanwhile` runs, failing the test if the wait ends first.
async fn still_waiting<W: Future + Unpin, T>(wait: &mut W, what: &str, meanwhile: impl Future<Output = T>) -> T {
    tokio::select! {
        biased;
        _ = wait => panic!("the wait ended during {what}"),
        out = meanwhile => out,
    }
}

/// Lets the runner and the wait run what the last `advance` woke.
async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    real_sleep(50).await;
}

/// A wait on a task that was just submitted ends with the task's end, not when it starts
/// running: the clock never moves, so only the task can end it.
#[tokio::test(start_paused = true)]
async fn a_wait_on_a_new_task_ends_when_the_task_ends_not_when_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path(), Clock::following_tokio(), ENV);
    let _held = hold_clock();
    let operator = Principal::local_operator();
    let submitted = service.submit(&operator, request("wait:0.5")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    assert_eq!(submitted["status"], "queued");
    let view = parse(service.get(&operator, &task_id, 10, false).await.unwrap().as_ref());
    assert_eq!(view["status"], "succeeded", "{view:#}");
    assert_eq!(view["final_response"], "waited 0.5 s");

    // Ended: answered at once, however long the wait asked for.
    let again = service.get(&operator, &task_id, 25, false);
    let again = tokio::select! {
        v = again => parse(&v.unwrap()),
        _ = real_sleep(10_000) => panic!("a wait on an ended task did not answer at once"),
    };
    assert_eq!(again["status"], "succeeded");
    service.until_runner_done(&task_id).await;
}

/// A wait ends when the task starts waiting for an approval, with the request in the answer;
/// a wait that begins on that request ends when it is answered, not before.
#[tokio::test(start_paused = true)]
async fn a_wait_ends_when_a_request_appears_and_when_it_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path(), Clock::following_tokio(), ENV);
    let _held = hold_clock();
    let operator = Principal::local_operator();
    let submitted = service.submit(&operator, request("approval:make")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();
    let view = parse(service.get(&operator, &task_id, 10, false).await.unwrap().as_ref());
    assert_eq!(view["status"], "waiting_for_approval", "{view:#}");
    let request_id = view["pending_request"]["request_id"].as_str().expect("the pending request").to_owned();
    assert_eq!(service.row(&task_id).pending_request_id.as_deref(), Some(request_id.as_str()));

    let mut wait = Box::pin(service.get(&operator, &task_id, 10, false));
    still_waiting(&mut wait, "a wait on the unanswered request", real_sleep(300)).await;
    let answer = service.respond_approval(&operator, &task_id, &request_id, "approve_once", None);
    still_waiting(&mut wait, "the answer", answer).await.unwrap();
    let view = parse(wait.await.unwrap().as_ref());
    assert_ne!(view["status"], "waiting_for_approval", "{view:#}");
    assert!(view["pending_request"].is_null(), "{view:#}");
    service.until_runner_done(&task_id).await;
}

/// With nothing a caller waits for, a wait that began before the task ran outlives
/// `queued → starting → running` and a steering message's events, and ends at its deadline
/// (one second) with the task running: at one millisecond before, it still waits.
#[tokio::test(start_paused = true)]
async fn a_wait_ends_at_its_deadline_when_nothing_awaited_happens() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path(), Clock::following_tokio(), ENV);
    let _held = hold_clock();
    let operator = Principal::local_operator();
    let submitted = service.submit(&operator, request("wait:600")).await.unwrap();
    let task_id = submitted["task_id"].as_str().unwrap().to_owned();

    let mut wait = Box::pin(service.get(&operator, &task_id, 1, false));
    let running = until("the task to run", || (service.row(&task_id).status == TaskStatus::Running).then_some(()));
    still_waiting(&mut wait, "queued → starting → running", running).await;
    still_waiting(&mut wait, "steering", service.steer_and_wait_echo(&task_id, "still there?")).await;

    tokio::time::advance(Duration::from_secs(1) - MS).await;
    still_waiting(&mut wait, "the last millisecond", settle()).await;
    tokio::time::advance(2 * MS).await;
    let view = parse(wait.await.unwrap().as_ref());
    assert_eq!(view["status"], "running", "{view:#}");
    assert!(view["pending_request"].is_null(), "{view:#}");

    service.cancel(&operator, &task_id).await.unwrap();
    service.until_runner_done(&task_id).await;
}
