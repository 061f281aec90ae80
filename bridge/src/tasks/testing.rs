//! The task service's in-process test harness: a real temp SQLite store, the real
//! `TaskService` and the fake runtime whose child is this test binary re-entered as the fake
//! agent, plus the helpers that drive tokio's paused clock by hand.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_methods,
    reason = "the in-process test harness sets up files and the fake agent's child"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Control, TaskService};
use crate::clock::Clock;
use crate::lease::Leases;
use crate::provider::Providers;
use crate::provider::env::BaseEnv;
use crate::store::Store;
use crate::store::tasks::TaskRow;

/// The extra filter that tells [`fake_agent_child`] it runs as a task's child.
const CHILD_SENTINEL: &str = "agent-bridge-unit-test-fake-agent";

/// A task service on a fresh state directory under `root`, with the fake runtime enabled on
/// the writable workdir `repo` and the `extra_env` lines added to its `.env`.
///
/// The fake runtime runs `PROGRAM fake-agent` in the task's cwd. A unit test has no
/// `agent-bridge` binary, so `PROGRAM` is `/bin/sh` and `fake-agent` a script in the workdir
/// that re-enters this test binary at [`fake_agent_child`] (a script read by `sh`, not an
/// executable written by a test, so a parallel test's fork never makes it "text file busy").
/// A workspace-write submission of `prompt` to the fake runtime in `repo`.
pub(super) fn request(prompt: &str) -> super::SubmitRequest {
    super::SubmitRequest {
        runtime: crate::config::RuntimeName::Fake,
        workdir: "repo".into(),
        prompt: prompt.into(),
        path: String::new(),
        profile: crate::model::Profile::WorkspaceWrite,
        model: None,
        isolation: None,
        base_ref: None,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: None,
    }
}

pub(super) fn service(root: &Path, clock: Clock, extra_env: &str) -> TaskService {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let test_binary = std::env::current_exe().unwrap();
    // The agent's stdout (the line protocol) is fd 3; libtest's own output goes to stderr.
    let script = format!(
        "exec '{}' --ignored --exact tasks::testing::fake_agent_child {CHILD_SENTINEL} --nocapture --test-threads=1 3>&1 1>&2\n",
        test_binary.display()
    );
    std::fs::write(repo.join("fake-agent"), script).unwrap();
    let config = config(root, "fake", &format!("SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true\n{extra_env}"));
    let store = Arc::new(Store::open(&config.state_dir).unwrap());
    let leases = Leases::open(&config.lock_dir).unwrap();
    let providers = Providers::new(
        &config,
        "/bin/sh".into(),
        BaseEnv::from_vars(Vec::new()),
        crate::provider::sandbox::Containment::none(crate::config::SandboxMode::Off, "a unit test"),
    );
    TaskService::new(Arc::new(config), store, clock, providers, leases, CancellationToken::new(), None)
}

/// A validated config on a fresh state directory under `root`: one writable workdir `repo`
/// (created) running `runtimes`, and the `extra_env` lines added to its `.env`.
pub(crate) fn config(root: &Path, runtimes: &str, extra_env: &str) -> crate::config::BridgeConfig {
    std::fs::create_dir_all(root.join("repo")).unwrap();
    let mut env = format!(
        "SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={root}/run\nSERVERFS_AGENT_LOCK_HOST_DIR={root}/locks\n\
         SERVERFS_AGENT_BRIDGE_STATE_DIR={root}/state\n\
         WORKDIR_01_ALIAS=repo\nWORKDIR_01_PATH={root}/repo\nWORKDIR_01_READ_ONLY=false\n\
         WORKDIR_01_AGENT_MODE=workspace-write\nWORKDIR_01_AGENT_RUNTIMES={runtimes}\n{extra_env}",
        root = root.display()
    );
    if nix::unistd::geteuid().is_root() {
        env.push_str("SERVERFS_AGENT_ALLOW_ROOT=true\n");
    }
    std::fs::write(root.join("bridge.env"), env).unwrap();
    crate::config::env::from_env_file(&root.join("bridge.env")).unwrap().config
}

/// Not a test: the fake agent's entry when the harness's script re-enters this binary (run
/// otherwise, e.g. with `--include-ignored`, it returns at once). It moves the agent's stdout
/// to the pipe on fd 3.
#[test]
#[ignore = "the fake agent's child entry: the task harness runs it as a task's process"]
fn fake_agent_child() {
    if !std::env::args().any(|a| a == CHILD_SENTINEL) {
        return;
    }
    let pipe = std::fs::OpenOptions::new().write(true).open("/proc/self/fd/3").expect("fd 3 is the bridge's pipe");
    nix::unistd::dup2_stdout(&pipe).expect("stdout onto the pipe");
    drop(pipe);
    std::process::exit(crate::provider::fake_agent::run());
}

/// While it lives, tokio's paused clock moves only by `tokio::time::advance`: a running
/// blocking task keeps the runtime from auto-advancing when it idles (which it would do while
/// the runner waits for the child's output, firing every timer early).
pub(super) struct HeldClock(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

/// Holds tokio's paused clock (see [`HeldClock`]).
pub(super) fn hold_clock() -> HeldClock {
    let (held, released) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = released.recv();
    });
    HeldClock(held)
}

/// Polls (in real time: the child works in real time, the paused clock stands still) until
/// `probe` finds what it looks for; fails the test after 30 real seconds.
pub(super) async fn until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5))).await.unwrap();
    }
}

impl TaskService {
    /// The task's row, read now.
    pub(super) fn row(&self, task_id: &str) -> TaskRow {
        self.inner.store.get_task(task_id).unwrap().expect("the task exists")
    }

    /// Steers the task directly through its runner's channel, then waits until the fake agent's
    /// echo of `text` is recorded: proof that the runner took a control at the current instant
    /// (its loop checks the task and interaction deadlines before any control).
    pub(super) async fn steer_and_wait_echo(&self, task_id: &str, text: &str) {
        let control = {
            let active = self.inner.active.lock().unwrap();
            active.get(task_id).expect("the task has a runner").control.clone()
        };
        control.send(Control::Steer(text.to_owned())).await.unwrap();
        let echo = format!("steered: {text}");
        until(&format!("the echo of {text:?}"), || {
            let events = self.inner.store.read_events(task_id, 0, 1_000).unwrap();
            events.iter().any(|e| e.event_type == "agent.message" && e.payload_json.contains(&echo)).then_some(())
        })
        .await;
    }

    /// Waits until the task's runner has let go of it (lease released, ending persisted).
    pub(super) async fn until_runner_done(&self, task_id: &str) {
        until("the runner to finish", || (!self.inner.active.lock().unwrap().contains_key(task_id)).then_some(()))
            .await;
    }
}
