//! A real CLI starts while its change-set baseline is still recorded: the baseline's git runs
//! beside the agent in the task's sandbox, and the task's egress gate holds the agent's first
//! model request until the baseline is on record, so nothing the model asks for can land
//! before it. The debug build's test hook (`snapshot-baseline:delay=<ms>`) starts the
//! baseline's git that much later, long after the agent has started.

use std::time::Duration;

use e2e::real::{Cli, RealBridge};
use e2e::{marker_pids, poll_until};

/// How long the hook delays the baseline's git: far longer than a CLI takes to start, so the
/// agent is up and asking well before the baseline can be on record.
const DELAY_MS: u64 = 8_000;

fn held_baseline() -> String {
    format!("snapshot-baseline:delay={DELAY_MS}")
}

/// The task's change-set baseline is on record (its private store has the `base` file).
fn baseline_recorded(r: &RealBridge, task_id: &str) -> bool {
    r.b.state_dir.join("changes").join(task_id).join("base").exists()
}

/// The agent (its executable `exe`) runs before its baseline is on record, and its model is
/// asked only once it is (the `base` file is written before the gate lets anything through:
/// seen from here in that order whenever the hold works).
async fn started_beside_and_held(r: &RealBridge, id: &str, exe: &str) {
    poll_until("the agent runs", Duration::from_secs(60), || !r.marked(id, exe).is_empty()).await;
    assert!(!baseline_recorded(r, id), "the agent started only after its baseline:\n{}", r.b.log());
    poll_until("the model is asked", Duration::from_secs(60), || !r.server.requests().is_empty()).await;
    assert!(baseline_recorded(r, id), "the model was asked before the baseline was on record:\n{}", r.b.log());
}

/// Codex starts beside its held baseline: its process runs before the baseline is recorded,
/// its first model request reaches the model only after, and its change set is exactly what
/// the model had it write — the command runs on the model's first answer, which a start
/// without the hold would have let through seconds before the baseline.
#[tokio::test]
async fn codex_starts_beside_its_baseline_and_asks_its_model_only_after_it() {
    let Some(r) = RealBridge::start_with_vars(Cli::Codex, &[], &[("AGENT_BRIDGE_TEST_SPAWN", &held_baseline())]).await
    else {
        return;
    };
    let copy = r.b.root().join("beside-baseline");
    crate::changes::repository_with_state(&r.ws, &copy);
    let id = r.submit(crate::codex::ADD_AND_EDIT).await;
    started_beside_and_held(&r, &id, "codex").await;
    let t = r.finish(&id).await;
    crate::codex::added_and_edited(&r, &id, &t, &copy).await;
}

/// The same for Claude Code: its change set holds what its model had it run.
#[tokio::test]
async fn claude_asks_its_model_only_after_its_baseline() {
    let Some(r) = RealBridge::start_with_vars(Cli::Claude, &[], &[("AGENT_BRIDGE_TEST_SPAWN", &held_baseline())]).await
    else {
        return;
    };
    crate::changes::repository_with_state(&r.ws, &r.b.root().join("claude-beside-copy"));
    let id = r.submit("RUN_BASH: printf 'new\\n' > added.txt").await;
    started_beside_and_held(&r, &id, "claude.exe").await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    let files = crate::changes::files(&t["changes"]);
    // Claude Code may leave files of its own; the agent's is there exactly.
    assert!(files.contains(&("added.txt".into(), "added".into(), 1, 0)), "{:#}", t["changes"]);
}

/// A bridge killed while the agent runs beside its held baseline leaves nothing: the agent
/// and the baseline's sandbox both die with it, and the restart proves it, interrupts the
/// task and lets the next writer in.
#[tokio::test]
async fn a_bridge_killed_while_the_agent_starts_beside_its_baseline_leaves_nothing() {
    let Some(mut r) =
        RealBridge::start_with_vars(Cli::Codex, &[], &[("AGENT_BRIDGE_TEST_SPAWN", &held_baseline())]).await
    else {
        return;
    };
    let id = r.submit("RUN_SHELL: printf 'new\\n' > added.txt").await;
    poll_until("codex runs", Duration::from_secs(60), || !r.marked(&id, "codex").is_empty()).await;
    assert!(!baseline_recorded(&r, &id));
    r.b.crash().await;
    poll_until("the task's processes die with the bridge", Duration::from_secs(20), || marker_pids(&id).is_empty())
        .await;
    r.b.set_var("AGENT_BRIDGE_TEST_SPAWN", "agent:pause=0");
    r.b.spawn().await;
    let t = r.b.get(&id).await;
    assert_eq!((t["status"].as_str(), t["error"]["code"].as_str()), (Some("interrupted"), Some("BRIDGE_RESTARTED")));
    assert_eq!(r.b.guard_count(), 0, "nothing of the task is left: its guard is cleared at start:\n{}", r.b.log());
    assert!(r.b.sandboxes_left().is_empty(), "a sandbox outlived the kill");
    assert!(!r.ws.join("added.txt").exists(), "the model's command ran before the baseline");
    let next = r.submit("RUN_SHELL: printf 'after\\n' > after.txt").await;
    let t = r.finish(&next).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    assert_eq!(crate::changes::files(&t["changes"]), [("after.txt".into(), "added".into(), 1, 0)]);
}
