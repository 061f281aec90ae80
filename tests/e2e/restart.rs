//! A bridge that dies or stops with a task running: the task is never re-run, it is marked
//! `interrupted` with the reason, and the workdir's recovery guard is cleared only on proof
//! that the provider is gone.

use std::time::Duration;

use nix::unistd::Pid;
use serde_json::json;

use e2e::{TestBridge, code, marker_pids, poll_until};

fn task_row(b: &TestBridge, id: &str) -> (String, Option<String>) {
    b.db()
        .query_row("SELECT status, error_code FROM tasks WHERE task_id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("task row")
}

/// Starts a writer `wait:60` task and returns its id and its provider's pid.
async fn running_writer(b: &TestBridge) -> (String, i32) {
    let turns = b.fake_turns();
    let id = b.submit("wait:60").await;
    b.wait_status(&id, "running").await;
    // The fake records its turn once it has read its script, a moment after `running`.
    poll_until("the provider records its turn", Duration::from_secs(10), || b.fake_turns() == turns + 1).await;
    let pids = marker_pids(&id);
    assert_eq!(pids.len(), 1, "one provider process carries the marker: {pids:?}");
    assert_eq!(b.guard_count(), 1);
    (id, pids[0])
}

#[tokio::test]
async fn after_a_crash_the_task_is_interrupted_and_the_guard_clears_once_the_provider_is_gone() {
    let mut b = TestBridge::start().await;
    let (id, _) = running_writer(&b).await;
    b.crash().await;
    // The fake provider reads its stdin from the dead bridge: at EOF it exits by itself.
    poll_until("the orphaned fake provider exits", Duration::from_secs(10), || marker_pids(&id).is_empty()).await;
    b.spawn().await;

    let t = b.get(&id).await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(t["error"]["code"], "BRIDGE_RESTARTED");
    assert_eq!(b.fake_turns(), 1, "an interrupted task is never re-run");
    assert_eq!(b.guard_count(), 0, "the provider is proven gone: the guard is cleared at startup");
    assert!(b.lease_is_free(1));
    let events = b.all_events(&id).await;
    assert!(events.iter().any(|e| e["event_type"] == "task.reconciled"), "{events:#?}");

    let next = b.submit("complete:after the crash").await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    assert_eq!(b.fake_turns(), 2);
}

#[tokio::test]
async fn after_a_crash_a_surviving_provider_keeps_the_workdir_closed_until_it_is_gone() {
    // A provider outlives its bridge only without the task sandbox (whose PID namespace dies
    // with the bridge): the marker proof's own case.
    let mut b = TestBridge::start_with(e2e::Options::default().with("SERVERFS_AGENT_SANDBOX=off")).await;
    let (id, provider) = running_writer(&b).await;
    // Hold a second write end of the provider's stdin pipe, so it does not see its input close
    // when the bridge dies: it outlives the bridge, like a provider that ignores its input.
    // (A SIGSTOP would not do: the kernel sends SIGHUP to a stopped, newly orphaned group.)
    let stdin = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{provider}/fd/0"))
        .expect("open the provider's stdin pipe");
    b.crash().await;
    assert!(nix::sys::signal::kill(Pid::from_raw(provider), None).is_ok(), "the provider survived its bridge");
    b.spawn().await;

    let t = b.get(&id).await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(t["error"]["code"], "BRIDGE_RESTARTED");
    assert_eq!(b.fake_turns(), 1, "never re-run");
    assert_eq!(marker_pids(&id), vec![provider], "the old provider is still there");
    assert_eq!(b.guard_count(), 1, "no proof, no clearing");
    let rows = b.task_count();
    let refused = b.submit_args(json!({ "prompt": "complete:too early" })).await;
    assert_eq!(code(&refused), "WORKDIR_RECOVERY_REQUIRED");
    let message = refused.unwrap_err().to_string();
    assert!(message.contains(&id), "the refusal names the task to recover: {message}");
    assert_eq!(b.task_count(), rows, "a refused submit adds no row");
    // Reading the workdir stays possible: a review task takes no lease and needs no guard.
    let reader = b.submit_ok(json!({ "profile": "review", "prompt": "complete:read" })).await;
    assert_eq!(b.wait_terminal(&reader).await["status"], "succeeded");

    // Let it go: it sees its input closed and exits; then the next writer clears the guard.
    drop(stdin);
    poll_until("the old provider exits", Duration::from_secs(10), || marker_pids(&id).is_empty()).await;
    let next = b.submit_ok(json!({ "prompt": "complete:recovered" })).await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    let old = b.get(&id).await;
    assert_eq!(old["status"], "interrupted");
    assert_eq!(old["error"]["code"], "BRIDGE_RESTARTED", "clearing the guard leaves the old task as it was");
    poll_until("the new writer's guard is cleared", Duration::from_secs(15), || b.guard_count() == 0).await;
}

#[tokio::test]
async fn an_orderly_stop_interrupts_running_tasks_and_frees_the_workdir() {
    let mut b = TestBridge::start().await;
    let (id, _) = running_writer(&b).await;
    let status = b.stop().await;
    assert!(status.success(), "the bridge stops cleanly: {status}\n{}", b.log());
    assert_eq!(
        task_row(&b, &id),
        ("interrupted".to_owned(), Some("BRIDGE_SHUTDOWN".to_owned())),
        "persisted before exit"
    );
    assert!(marker_pids(&id).is_empty(), "the provider was stopped");
    assert_eq!(b.guard_count(), 0, "the stop was proven");
    assert!(b.lease_is_free(1));

    b.spawn().await;
    let t = b.get(&id).await;
    assert_eq!(t["status"], "interrupted");
    assert_eq!(t["error"]["code"], "BRIDGE_SHUTDOWN", "a restart does not rewrite the reason");
    let next = b.submit("complete:after the stop").await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    assert_eq!(b.fake_turns(), 2);
}

#[tokio::test]
async fn an_orderly_stop_marks_tasks_interrupted_even_when_their_runner_ends_first() {
    use tokio::io::AsyncWriteExt;

    let mut b = TestBridge::start().await;
    // A large inline result makes every view of this task bigger than a socket buffer.
    let big = b.submit("big:262144").await;
    assert_eq!(b.wait_terminal(&big).await["result"]["storage"], "inline");
    b.writer_idle().await;
    let (id, _) = running_writer(&b).await;

    // A client that asks and never reads: the bridge's answer blocks in its socket, so the
    // server keeps draining this connection for a while after the signal, while every task
    // runner has already been told to stop.
    let mut stuck = tokio::net::UnixStream::connect(&b.socket).await.expect("connect");
    for n in 0..8 {
        let params = json!({ "surface": "cli", "name": "get_agent_task", "arguments": { "task_id": big } });
        let serde_json::Value::Object(params) = params else { unreachable!() };
        let request = bridge_proto::envelope::Request {
            request_id: format!("stuck-{n}"),
            method: "capabilities.call".into(),
            params,
        };
        stuck.write_all(&request.to_line()).await.expect("send");
    }
    let pid = Pid::from_raw(b.pid().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    // The runner stops its provider and lets the workdir go...
    poll_until("the provider is stopped", Duration::from_secs(15), || marker_pids(&id).is_empty()).await;
    poll_until("the lease is released", Duration::from_secs(15), || b.lease_is_free(1)).await;
    // ...and by then the task must already say why it ended.
    poll_until("the task is interrupted by the shutdown", Duration::from_secs(5), || {
        task_row(&b, &id) == ("interrupted".to_owned(), Some("BRIDGE_SHUTDOWN".to_owned()))
    })
    .await;
    drop(stuck);
    let status = b.stop().await;
    assert!(status.success(), "{status}");
    assert_eq!(task_row(&b, &id), ("interrupted".to_owned(), Some("BRIDGE_SHUTDOWN".to_owned())));
    b.spawn().await;
    assert_eq!(b.get(&id).await["error"]["code"], "BRIDGE_SHUTDOWN");
}
