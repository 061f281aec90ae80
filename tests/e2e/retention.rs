//! Retention GC end to end. Retention is counted in hours, so the test lets the
//! bridge be "down for two hours": with the bridge stopped it moves the completion time of
//! chosen tasks two hours back (the one place the suite writes the store), then restarts it.
//! GC must delete each expired task as a whole unit — row, events, requests, spool file,
//! idempotency key — and nothing else: a young task and a task a guard still names survive,
//! and the guarded one goes at the first GC pass after its guard is cleared.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use e2e::{Options, TestBridge, alive, code, poll_until_async};

fn rows_of(b: &TestBridge, task_id: &str) -> [i64; 3] {
    ["tasks", "events", "interactions"]
        .map(|t| b.db_count(&format!("SELECT COUNT(*) FROM {t} WHERE task_id = '{task_id}'")))
}

#[tokio::test]
async fn gc_deletes_whole_expired_units_and_spares_young_and_guarded_tasks() {
    // The guarded task below is an orphan outliving a crashed bridge: only without the sandbox.
    let options = Options::default().with("SERVERFS_AGENT_TASK_RETENTION_HOURS=1");
    let mut b = TestBridge::start_with(options.with("SERVERFS_AGENT_SANDBOX=off")).await;

    // An expired unit with a spooled result and an idempotency key.
    let spooled = b.submit_ok(json!({ "prompt": "big:300000", "idempotency_key": "k-retained" })).await;
    let t = b.wait_terminal(&spooled).await;
    assert_eq!(t["result"]["storage"], "spool", "{t:#}");
    let spool_file = b.state_dir.join("results").join(format!("{spooled}.txt"));
    assert!(spool_file.exists());
    b.writer_idle().await;
    // An expired unit with a request history.
    let asked = b.submit("approval:make").await;
    let w = b.wait_status(&asked, "waiting_for_approval").await;
    let rid = w["pending_request"]["request_id"].as_str().expect("request").to_owned();
    b.call("respond_agent_approval", json!({ "task_id": asked, "request_id": rid, "decision": "approve_once" }))
        .await
        .expect("approve");
    assert_eq!(b.wait_terminal(&asked).await["status"], "succeeded");
    b.writer_idle().await;
    // A young task.
    let young = b.submit("complete:young").await;
    assert_eq!(b.wait_terminal(&young).await["status"], "succeeded");
    b.writer_idle().await;
    // A terminal task a guard still names: its provider's orphan outlived a crashed bridge.
    let (guarded, orphan) = b.crash_leaving_an_orphan(300).await;
    let _cleanup = scopeguard(orphan);
    b.spawn().await;
    assert_eq!(b.get(&guarded).await["status"], "interrupted");
    assert_eq!(b.guard_count(), 1);
    for id in [&spooled, &asked, &young, &guarded] {
        let [tasks, events, _] = rows_of(&b, id);
        assert_eq!(tasks, 1);
        assert!(events > 0);
    }
    assert_eq!(rows_of(&b, &asked)[2], 1, "the answered request is kept with its task");
    let young_rows = rows_of(&b, &young);
    let guarded_rows = rows_of(&b, &guarded);

    // Two hours pass while the bridge is down; the startup GC runs.
    b.stop().await;
    b.age_terminal_tasks(&[&spooled, &asked, &guarded], 2);
    b.spawn().await;
    for id in [&spooled, &asked] {
        assert_eq!(rows_of(&b, id), [0, 0, 0], "the whole unit of {id} is gone");
        let r = b.call("get_agent_task", json!({ "task_id": id })).await;
        assert_eq!(code(&r), "AGENT_TASK_NOT_FOUND");
    }
    assert!(!spool_file.exists(), "the spool file goes with its task");
    assert_eq!(rows_of(&b, &young), young_rows, "a young task is untouched");
    assert_eq!(rows_of(&b, &guarded), guarded_rows, "a task a guard names survives GC");
    assert_eq!(b.guard_count(), 1);

    // The key is free again: the same key with another request is a new task, no conflict.
    let reused = b
        .submit_args(json!({ "profile": "review", "prompt": "complete:reused", "idempotency_key": "k-retained" }))
        .await
        .expect("a key whose task was collected is reusable");
    assert_eq!(reused["idempotent_replay"], false);
    assert_ne!(reused["task_id"], spooled.as_str());
    let reused = reused["task_id"].as_str().unwrap().to_owned();
    assert_eq!(b.wait_terminal(&reused).await["status"], "succeeded");

    // Once the orphan is gone, the next writer clears the guard; the GC pass at that
    // writer's terminal transition then collects the expired task.
    kill(Pid::from_raw(orphan), Signal::SIGKILL).expect("kill the orphan");
    e2e::poll_until("the orphan is gone", Duration::from_secs(10), || !alive(orphan)).await;
    let next = b.submit("complete:after the orphan").await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    poll_until_async("the formerly guarded task is collected", Duration::from_secs(20), || async {
        b.call("get_agent_task", json!({ "task_id": guarded })).await.is_err()
    })
    .await;
    assert_eq!(rows_of(&b, &guarded), [0, 0, 0]);
    assert_eq!(rows_of(&b, &young), young_rows, "still untouched");
    assert_eq!(b.get(&reused).await["status"], "succeeded");
}

/// Kills the orphan when the test ends, whatever happens.
fn scopeguard(pid: i32) -> impl Drop {
    struct KillOnDrop(i32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
    KillOnDrop(pid)
}
