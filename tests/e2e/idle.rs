//! The provider event-idle timeout (`SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS`): its wiring,
//! provider silence fails a task and stops its provider. The timer itself (at the limit, not
//! before; counted from the last event; never while a human is asked) is tested in process on
//! a paused clock (`bridge/src/tasks/timer_tests.rs`).

use e2e::{Options, TestBridge};

fn idle_bridge() -> Options {
    Options::default().with("SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=1")
}

#[tokio::test]
async fn a_silent_provider_fails_the_task_and_is_stopped() {
    let b = TestBridge::start_with(idle_bridge()).await;
    let id = b.submit("wait:30").await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_PROVIDER_DISCONNECTED");
    assert!(t["error"]["message"].as_str().unwrap().contains("SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS"));
    b.writer_idle().await;
    assert!(e2e::marker_pids(&id).is_empty(), "the silent provider was stopped");
}
