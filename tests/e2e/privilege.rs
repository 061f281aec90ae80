//! Least privilege (issue 29): what a hostile task can no longer do, tried from inside a task
//! as an attacker would, with the controls that show the same act works where it is allowed.

use serde_json::json;

use e2e::{Options, TestBridge, code, error_of};

/// The fake runtime's `exec:` runs a shell command for any operator key, unasked: it is off
/// unless the operator turns it on (the tests do; the quick start does not). Refused before
/// anything is created, for a task and for a plan's step, naming the switch.
#[tokio::test]
async fn the_fake_runtimes_exec_runs_only_when_turned_on() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_FAKE_EXEC=false")).await;
    let before = b.task_count();
    let refused = b.submit_args(json!({ "prompt": "exec:touch planted" })).await;
    let (code_, message) = error_of(&refused);
    assert_eq!(code_, "AGENT_DISABLED", "{message}");
    assert!(message.contains("SERVERFS_AGENT_FAKE_EXEC"), "{message}");
    assert_eq!(b.task_count(), before, "nothing was created");
    assert!(!b.repo.join("planted").exists());
    let plan = json!({ "workdir": "repo", "runtime": "fake", "title": "t",
                       "steps": [{ "title": "one", "prompt": "complete:ok" }, { "title": "two", "prompt": "exec:id" }] });
    let refused = b.call("submit_agent_plan", plan).await;
    assert_eq!(code(&refused), "AGENT_DISABLED");
    assert!(error_of(&refused).1.contains("steps[1].prompt"), "{refused:?}");
    // The other scripts run as ever.
    let id = b.submit("complete:still scripted").await;
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");

    // The control: where the operator turned it on, it runs.
    let on = TestBridge::start().await;
    let id = on.submit("exec:touch planted").await;
    assert_eq!(on.wait_terminal(&id).await["status"], "succeeded");
    assert!(on.repo.join("planted").exists());
}
