//! A bridge that dies while it starts a child leaves nothing running, and the next
//! start stops whatever a previous bridge's sandboxes left, when it is provably theirs.
//!
//! The first tests kill the bridge between `fork` and `exec` of each kind of child — the
//! agent, the change-set baseline, the change-set diff, a version probe — held there by the
//! debug build's test hook (`AGENT_BRIDGE_TEST_SPAWN=<kind>:pause=<ms>`: the child sleeps
//! before it arms anything). The others leave a real sandbox behind (`<kind>:untethered`, or
//! bwrap's own hand-over cut short) and restart the bridge.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use e2e::{Options, TestBridge, marker_pids, poll_until};

use crate::containment::sandbox_available;
use crate::doctor::doctor_json;

/// The pause of the test hook: long enough to be found and killed in, shorter than a restart
/// waits for the instance lock that the paused fork still holds (2 s).
pub(crate) const PAUSE_MS: u64 = 1_500;

/// The forks of the bridge that have not executed anything yet: children whose command line
/// is still the bridge's own.
fn unexecuted_forks(bridge: i32) -> Vec<i32> {
    let own = std::fs::read(format!("/proc/{bridge}/cmdline")).unwrap_or_default();
    e2e::child_pids(bridge)
        .into_iter()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !own.is_empty() && c == own))
        .collect()
}

/// Waits until the bridge has a fork held by the hook (one still unexecuted 200 ms later: the
/// children started before it without a hook are unexecuted only for an instant), kills the
/// bridge (SIGKILL) and waits until that fork is gone; returns its pid.
pub(crate) async fn kill_between_spawn_and_exec(b: &mut TestBridge) -> i32 {
    let bridge = b.pid().expect("running") as i32;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let fork = loop {
        let seen = unexecuted_forks(bridge);
        if !seen.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Some(held) = unexecuted_forks(bridge).into_iter().find(|p| seen.contains(p)) {
                break held;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no child of the bridge was held before exec:\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    b.crash().await;
    poll_until("the held child exits once it finds its bridge gone", Duration::from_secs(10), || !e2e::alive(fork))
        .await;
    fork
}

/// The private snapshot directory of a task (what its git run writes).
fn snapshot_file(b: &TestBridge, task_id: &str, name: &str) -> bool {
    b.state_dir.join("changes").join(task_id).join(name).exists()
}

fn options(kind: &str) -> Options {
    Options::default().var("AGENT_BRIDGE_TEST_SPAWN", &format!("{kind}:pause={PAUSE_MS}"))
}

/// After the kill: the restart interrupts the task, finds the workdir open at once, and the
/// next writer runs.
async fn restart_and_write(b: &mut TestBridge, id: &str) {
    b.set_var("AGENT_BRIDGE_TEST_SPAWN", "agent:pause=0");
    b.spawn().await;
    let t = b.get(id).await;
    assert_eq!((t["status"].as_str(), t["error"]["code"].as_str()), (Some("interrupted"), Some("BRIDGE_RESTARTED")));
    assert_eq!(b.guard_count(), 0, "nothing of the task is left: its guard is cleared at start:\n{}", b.log());
    let next = b.submit_ok(json!({ "prompt": "complete:after the kill" })).await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    assert!(b.sandboxes_left().is_empty(), "a sandbox outlived the kill");
}

#[tokio::test]
async fn a_bridge_killed_before_the_agent_executes_starts_no_agent() {
    let mut b = TestBridge::start_with(options("agent")).await;
    let turns = b.fake_turns();
    // The submit answers at once (queued); the runner's spawn comes a moment later.
    let id = b.submit("complete:x").await;
    kill_between_spawn_and_exec(&mut b).await;
    assert_eq!(b.fake_turns(), turns, "the agent never ran");
    assert!(marker_pids(&id).is_empty());
    assert!(b.sandboxes_left().is_empty(), "no sandbox was started for it");
    restart_and_write(&mut b, &id).await;
}

#[tokio::test]
async fn a_bridge_killed_before_the_baseline_executes_runs_no_git() {
    if !git_available() {
        return;
    }
    let mut b = TestBridge::start_with(options("snapshot-baseline")).await;
    // The submit answers at once (queued); the runner's spawn comes a moment later.
    let id = b.submit("complete:x").await;
    kill_between_spawn_and_exec(&mut b).await;
    assert!(!snapshot_file(&b, &id, "base"), "the baseline's git never ran");
    assert!(marker_pids(&id).is_empty());
    assert_eq!(b.fake_turns(), 0, "nor did the agent");
    assert!(b.sandboxes_left().is_empty());
    restart_and_write(&mut b, &id).await;
}

#[tokio::test]
async fn a_bridge_killed_before_the_diff_executes_runs_no_git_and_the_workdir_reopens() {
    if !git_available() {
        return;
    }
    let mut b = TestBridge::start_with(options("snapshot-end")).await;
    std::fs::write(b.repo.join("README"), "before\n").expect("a file");
    // The agent writes a file, ends, and then the diff is held before it executes.
    let id = b.submit("exec:echo hello > notes.txt").await;
    kill_between_spawn_and_exec(&mut b).await;
    assert!(snapshot_file(&b, &id, "base"), "the baseline was taken");
    assert!(!snapshot_file(&b, &id, "end"), "the diff's git never ran");
    assert!(marker_pids(&id).is_empty());
    assert!(b.sandboxes_left().is_empty());
    // The guard recorded the agent's sandbox (namespace, and cgroup where delegated); it is
    // gone, and the restart proves it.
    restart_and_write(&mut b, &id).await;
    let events = b.all_events(&id).await;
    assert!(!events.iter().any(|e| e["event_type"] == "changes.recorded"), "no change set from a diff never run");
}

#[tokio::test]
async fn a_bridge_killed_before_a_probe_executes_runs_no_probe() {
    let dir = tempfile::Builder::new().prefix("ab-probe-").tempdir().expect("dir");
    let ran = dir.path().join("ran");
    let codex = dir.path().join("codex");
    std::fs::write(&codex, format!("#!/bin/sh\ntouch '{}'\necho 'codex-cli 0.171.0'\n", ran.display()))
        .expect("script");
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let mut b = TestBridge::start_with(
        options("probe")
            .with(&format!("SERVERFS_CODEX_BIN={}", codex.display()))
            .with("WORKDIR_03_ALIAS=agents")
            .with(&format!("WORKDIR_03_PATH={}", dir.path().display()))
            .with("WORKDIR_03_AGENT_MODE=review")
            .with("WORKDIR_03_AGENT_RUNTIMES=codex"),
    )
    .await;
    // The listing waits for the probe: it runs beside the kill, on a connection of its own.
    let client = b.client();
    let listing = tokio::spawn(async move {
        let params = json!({ "surface": "cli", "name": "list_agent_runtimes", "arguments": {} });
        let Value::Object(params) = params else { unreachable!() };
        client.call(bridge_proto::methods::CAPABILITIES_CALL, params).await
    });
    let fork = kill_between_spawn_and_exec(&mut b).await;
    assert!(listing.await.expect("join").is_err(), "the bridge died under the call");
    assert!(!ran.exists(), "the probe {fork} never executed the runtime");
    b.spawn().await;
    let listed = b.call("list_agent_runtimes", json!({})).await.expect("list");
    assert!(ran.exists(), "a probe of a live bridge runs: {listed}");
}

/// A sandbox that outlived its bridge (untethered by the test hook, as one caught in bwrap's
/// own hand-over would be): `doctor` names it while the bridge is down; the start stops it,
/// says so on the task, in the audit log and in `doctor`, and the workdir is open at once.
#[tokio::test]
async fn the_start_stops_a_sandbox_that_outlived_its_bridge_and_reopens_the_workdir() {
    if !sandbox_available() {
        return;
    }
    let mut b = TestBridge::start_with(Options::default().var("AGENT_BRIDGE_TEST_SPAWN", "agent:untethered")).await;
    let id = b.submit("wait:120").await;
    b.wait_status(&id, "running").await;
    poll_until("the agent records its turn", Duration::from_secs(10), || b.fake_turns() == 1).await;
    let agent = marker_pids(&id);
    assert_eq!(agent.len(), 1, "{agent:?}");
    let variable = format!("AGENT_BRIDGE_SANDBOX={id}");
    assert!(!e2e::environ_has(agent[0], &variable), "bwrap keeps its own variable from the agent");
    // A second write end of the agent's stdin: it does not see its input close with the
    // bridge, like an agent that ignores its input.
    let stdin = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{}/fd/0", agent[0]))
        .expect("open the agent's stdin pipe");
    b.crash().await;
    assert!(e2e::alive(agent[0]), "the untethered sandbox outlived its bridge");
    let sandbox = e2e::procs::sandboxes_under(&b.root());
    assert!(!sandbox.is_empty(), "its bwrap processes are there");

    // Down: doctor names the leftover by task, and says what will happen.
    let (_, report) = doctor_json(&b);
    let left = &report["sandboxes"]["leftovers"];
    let mine = left.as_array().and_then(|l| l.iter().find(|l| l["task_id"] == id.as_str())).cloned();
    let mine = mine.unwrap_or_else(|| panic!("doctor names no leftover of {id}: {report:#}"));
    assert!(mine["found_by"].as_array().is_some_and(|w| w.contains(&json!("pid_namespace"))), "{mine}");
    let text = String::from_utf8_lossy(&b.cli_env(&["doctor"]).stdout).into_owned();
    assert!(text.contains(&id) && text.contains("the next start of the bridge stops them"), "{text}");

    // Up: stopped at start, proven, the guard cleared, the workdir open.
    b.spawn().await;
    assert!(marker_pids(&id).is_empty(), "the agent was stopped at start");
    assert!(e2e::procs::sandboxes_under(&b.root()).is_empty(), "and its sandbox");
    assert_eq!(b.guard_count(), 0, "its guard was cleared on proof:\n{}", b.log());
    let t = b.get(&id).await;
    assert_eq!((t["status"].as_str(), t["error"]["code"].as_str()), (Some("interrupted"), Some("BRIDGE_RESTARTED")));
    let events = b.all_events(&id).await;
    let stop = events.iter().find(|e| e["event_type"] == "sandbox.reconciled").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(stop["payload"]["stopped"], true, "{stop}");
    assert_eq!(stop["payload"]["when"], "start", "{stop}");
    assert!(stop["payload"]["processes"].as_u64().is_some_and(|n| n >= 2), "bwrap's init and the agent: {stop}");
    let audit = b.call("admin_read_audit_log", json!({ "capability": "reconcile_sandbox" })).await.expect("audit");
    let rows = audit["rows"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().any(|r| r["task_id"] == id.as_str() && r["outcome"] == "ok" && r["surface"] == "bridge"),
        "{audit:#}"
    );
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    let done = report["sandboxes"]["reconciled"]["sandboxes"].as_array().cloned().unwrap_or_default();
    assert!(done.iter().any(|s| s["task_id"] == id.as_str() && s["stopped"] == true), "{report:#}");
    let text = String::from_utf8_lossy(&b.cli_env(&["doctor"]).stdout).into_owned();
    assert!(text.contains("the bridge stopped") && text.contains(&id), "{text}");
    let next = b.submit_ok(json!({ "prompt": "complete:the workdir is open" })).await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    drop(stdin);
}

/// bwrap's hand-over cut short: its outer process dies after it cloned the sandbox's init and
/// before it released it (here: its information pipe has no reader, as when the bridge died
/// just then). The init waits for good, before it runs anything, with no recorded proof naming
/// it: only the sandbox variable does, and the next start stops it.
#[tokio::test]
async fn the_start_stops_a_sandbox_init_that_bwrap_never_released() {
    if !sandbox_available() {
        return;
    }
    let mut b = TestBridge::start().await;
    let id = b.submit("complete:a task of this bridge").await;
    b.wait_terminal(&id).await;
    b.writer_idle().await;
    let _ = b.stop().await;
    let init = stuck_sandbox_init(&b.root(), &id);
    assert!(e2e::alive(init), "bwrap's init waits for a release that never comes");
    // Another bridge's (a task this store does not know): never touched.
    let foreign = stuck_sandbox_init(&b.root(), "agt_0123456789abcdef0123456789abcdef");

    b.spawn().await;
    poll_until("the stuck init is stopped", Duration::from_secs(5), || !e2e::alive(init)).await;
    assert!(e2e::alive(foreign), "a sandbox of a task this bridge does not know is not its own");
    let events = b.all_events(&id).await;
    let stop = events.iter().find(|e| e["event_type"] == "sandbox.reconciled").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(stop["payload"]["found_by"], json!(["sandbox_variable"]), "{stop}");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(foreign), nix::sys::signal::Signal::SIGKILL);
}

/// Starts bwrap as the bridge does for `task_id`, with an information pipe whose reader is
/// already gone: bwrap's outer process dies writing to it, after it cloned the sandbox's init
/// and before it released it. Returns that init's pid. The command line names a path under
/// `root` (the harness's check then finds it, were it left).
fn stuck_sandbox_init(root: &Path, task_id: &str) -> i32 {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let private = root.join(format!("stuck-tmp-{task_id}"));
    std::fs::create_dir_all(&private).expect("dir");
    // The shell hands bwrap the reader-less pipe as its descriptor 3, then becomes bwrap.
    let mut outer = std::process::Command::new("sh")
        .args(["-c", "exec bwrap \"$@\" 3>&1", "sh"])
        .args(["--unshare-user", "--unshare-pid", "--die-with-parent", "--dev-bind", "/", "/", "--proc", "/proc"])
        .arg("--bind")
        .arg(&private)
        .arg("/tmp")
        .args(["--unsetenv", "AGENT_BRIDGE_SANDBOX", "--info-fd", "3", "--", "true"])
        .env("AGENT_BRIDGE_SANDBOX", task_id)
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start bwrap");
    let status = outer.wait().expect("bwrap's outer process ends");
    assert!(!status.success(), "bwrap's outer process fails on its information pipe: {status}");
    let mut init = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while init.is_none() && std::time::Instant::now() < deadline {
        init = e2e::procs::sandboxes_under(root)
            .into_iter()
            .map(|(pid, _)| pid)
            .find(|pid| e2e::environ_has(*pid, &format!("AGENT_BRIDGE_SANDBOX={task_id}")));
        std::thread::sleep(Duration::from_millis(10));
    }
    init.expect("bwrap left its sandbox's init waiting")
}

/// Whether git runs here (the change sets need it); under `CI=true` it must.
#[allow(clippy::print_stderr, reason = "a skipped test says so loudly")]
fn git_available() -> bool {
    let ok = std::process::Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and git is missing");
        eprintln!("\n*** SKIPPED: git is not installed ***\n");
    }
    ok
}
