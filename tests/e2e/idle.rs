//! The provider event-idle timeout (`SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS`): provider
//! silence fails a task, but time spent waiting for a human never counts.

use serde_json::json;

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

#[tokio::test]
async fn waiting_for_a_human_is_not_provider_silence() {
    let b = TestBridge::start_with(idle_bridge()).await;
    let id = b.submit("approval:make").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let request = t["pending_request"]["request_id"].as_str().unwrap().to_owned();
    // Three idle limits pass while the human thinks; the task must still be waiting.
    let unchanged = b.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 3 })).await.unwrap();
    assert_eq!(unchanged["status"], "waiting_for_approval", "{unchanged:#}");
    b.call("respond_agent_approval", json!({ "task_id": id, "request_id": request, "decision": "approve_once" }))
        .await
        .unwrap();
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
}
