//! The shortest path through the product: start, submit, finish.

use e2e::TestBridge;

#[tokio::test]
async fn a_fake_task_runs_to_completion() {
    let bridge = TestBridge::start().await;
    let id = bridge.submit("complete:hello").await;
    let task = bridge.wait_terminal(&id).await;
    assert_eq!(task["status"], "succeeded", "{task:#}");
    assert_eq!(task["final_response"], "hello");
}
