//! Containment: a task's processes attack the bridge from inside
//! the task, through the fake runtime's `exec:COMMAND`, and fail — they cannot reach the socket,
//! the store, the spool, the config or the user's session sockets; a peer inside a task is
//! refused even when the socket is reachable; nothing a task starts outlives it, whatever it
//! does to its session and environment, also when the bridge is killed — while the very same
//! attempts from the operator's own shell succeed.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use e2e::{Options, TestBridge, poll_until};

/// Whether this machine runs the task sandbox (bwrap installed, user namespaces allowed).
/// Under `CI=true` a missing sandbox fails the test: `.ci/run` installs bubblewrap.
#[allow(clippy::print_stderr)]
pub fn sandbox_available() -> bool {
    let ok = std::process::Command::new("bwrap")
        .args(["--unshare-user", "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and bwrap cannot start a sandbox here");
        eprintln!("\n*** SKIPPED: bwrap cannot start a sandbox on this machine (apt-get install bubblewrap) ***\n");
    }
    ok
}

/// The attacker: connects to the bridge socket as a task's process would and tries the
/// operator's powers, then reads the bridge's files. Prints one JSON object per attempt.
const ATTACK: &str = r#"
import json, os, socket, sys
sock_path, state_dir, config_file, runtime_dir, plan_id, task_id, request_id = sys.argv[1:8]
def call(name, args):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock_path)
        req = {"protocol_version": 1, "request_id": "x", "method": "capabilities.call",
               "params": {"credential": None, "surface": "cli", "client": None, "name": name, "arguments": args}}
        s.sendall((json.dumps(req) + "\n").encode())
        line = s.makefile().readline()
        s.close()
        reply = json.loads(line)
        return "ok" if reply.get("ok") else reply["error"]["code"]
    except OSError as e:
        return "connect failed: " + type(e).__name__
def read(path):
    try:
        with open(path, "rb") as f:
            return "read %d bytes" % len(f.read())
    except OSError as e:
        return "unreadable: " + type(e).__name__
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return "unlistable: " + type(e).__name__
out = {
    "admin_create_api_key": call("admin_create_api_key", {"name": "stolen", "role": "admin"}),
    "admin_approve_plan": call("admin_approve_plan", {"plan_id": plan_id}),
    "respond_agent_approval": call("respond_agent_approval", {"task_id": task_id, "request_id": request_id, "decision": "approve_once"}),
    "store": read(os.path.join(state_dir, "bridge.sqlite3")),
    "state_dir": listing(state_dir),
    "config": read(config_file),
    "runtime_dir": listing(runtime_dir),
}
print(json.dumps(out))
"#;

/// A session-socket directory with something in it, outside /tmp (as /run/user/UID is), for
/// a bridge's `XDG_RUNTIME_DIR`.
pub fn session_dir() -> tempfile::TempDir {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).filter(|h| h.is_dir()).expect("a HOME");
    let dir = tempfile::Builder::new().prefix(".ab-e2e-xdg-").tempdir_in(home).expect("runtime dir");
    std::fs::create_dir_all(dir.path().join("systemd")).expect("runtime dir");
    std::fs::write(dir.path().join("bus"), b"").expect("a stand-in session bus");
    dir
}

/// What the attacker goes after on a running bridge: a remote caller's plan waiting for a
/// human, a task waiting for approval on `docs`, the session directory.
pub struct Stage {
    plan_id: String,
    waiting_task: String,
    request_id: String,
    runtime_dir: std::path::PathBuf,
}

impl Stage {
    /// Sets the stage on `b` (whose `XDG_RUNTIME_DIR` is `runtime_dir`) and writes the attack
    /// script into `workdir`.
    pub async fn set_up(b: &TestBridge, runtime_dir: &Path, workdir: &Path) -> Stage {
        std::fs::write(workdir.join("attack.py"), ATTACK).expect("write the attack script");
        // A remote caller's plan waits for a human (the operator's own is approved at once).
        let caller = b.create_key("caller", "operator").await;
        let plan = b
            .call_mcp(
                Some(&caller),
                "submit_agent_plan",
                json!({ "workdir": "repo", "runtime": "fake", "title": "Held plan", "steps": [{ "title": "one", "prompt": "complete:planned" }] }),
            )
            .await
            .expect("submit a plan");
        let plan_id = plan["plan_id"].as_str().expect("plan_id").to_owned();
        let waiting = b
            .submit_args(json!({ "workdir": "docs", "profile": "review", "prompt": "approval:may I?" }))
            .await
            .expect("submit the waiting task");
        let waiting_task = waiting["task_id"].as_str().expect("task_id").to_owned();
        let task = b.wait_for(&waiting_task, |t| t["status"] == "waiting_for_approval").await;
        let request_id = task["pending_request"]["request_id"].as_str().expect("request_id").to_owned();
        let runtime_dir = runtime_dir.canonicalize().expect("canonical");
        Stage { plan_id, waiting_task, request_id, runtime_dir }
    }

    /// The attack, as a shell command run in the workdir.
    pub fn attack_command(&self, b: &TestBridge) -> String {
        format!(
            "python3 attack.py {} {} {} {} {} {} {}",
            b.socket.display(),
            b.state_dir.display(),
            b.env_file.display(),
            self.runtime_dir.display(),
            self.plan_id,
            self.waiting_task,
            self.request_id
        )
    }

    /// The same script from the operator's own shell (this test process).
    pub fn attack_from_the_operator(&self, b: &TestBridge, workdir: &Path) -> Value {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(self.attack_command(b))
            .current_dir(workdir)
            .output()
            .expect("run python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("the operator's report")
    }

    /// The human gates are untouched: the plan still waits, the approval still pends.
    pub async fn gates_hold(&self, b: &TestBridge) {
        let plan = b.call("get_agent_plan", json!({ "plan_id": self.plan_id })).await.expect("plan");
        assert_eq!(plan["status"], "pending_approval", "{plan:#}");
        let task = b.get(&self.waiting_task).await;
        assert_eq!(task["status"], "waiting_for_approval", "{task:#}");
        let keys = b.call("admin_list_api_keys", json!({})).await.expect("keys");
        assert!(!keys.to_string().contains("stolen"), "no key was minted: {keys:#}");
    }

    /// What a sandboxed attacker must see: no socket, no store, an emptied (or absent) state
    /// directory, no config, no session sockets.
    pub fn assert_contained(report: &Value) {
        for call in ["admin_create_api_key", "admin_approve_plan", "respond_agent_approval"] {
            assert!(
                report[call].as_str().is_some_and(|r| r.starts_with("connect failed")),
                "{call} from inside the sandbox: {report:#}"
            );
        }
        assert!(report["store"].as_str().is_some_and(|r| r.starts_with("unreadable")), "{report:#}");
        // Empty (or, under the task's private /tmp, not there at all), but for the fake
        // runtime's own session store in a fake task (bound back because the fake needs it).
        let state = &report["state_dir"];
        assert!(
            *state == json!([])
                || *state == json!(["runtimes"])
                || state.as_str().is_some_and(|s| s.starts_with("unlistable")),
            "the state directory is emptied: {report:#}"
        );
        assert!(
            report["config"] == "read 0 bytes"
                || report["config"].as_str().is_some_and(|r| r.starts_with("unreadable")),
            "the config reads as nothing: {report:#}"
        );
        // The operator's session sockets are not there: the task's own (empty, private)
        // runtime directory, where a runtime may have made its own, or none at all.
        let runtime_dir = &report["runtime_dir"];
        let shows_the_operators =
            runtime_dir.as_array().is_some_and(|l| l.iter().any(|e| e == "bus" || e == "systemd"));
        assert!(
            !shows_the_operators
                && (runtime_dir.is_array() || runtime_dir.as_str().is_some_and(|s| s.starts_with("unlistable"))),
            "XDG_RUNTIME_DIR shows none of the operator's session sockets: {report:#}"
        );
    }

    /// What the operator's own shell gets: everything.
    pub async fn assert_operator_succeeds(&self, b: &TestBridge, workdir: &Path) {
        let report = self.attack_from_the_operator(b, workdir);
        assert_eq!(report["admin_create_api_key"], "ok", "{report:#}");
        assert_eq!(report["admin_approve_plan"], "ok", "{report:#}");
        assert_eq!(report["respond_agent_approval"], "ok", "{report:#}");
        assert!(report["store"].as_str().is_some_and(|r| r.starts_with("read ") && r != "read 0 bytes"), "{report:#}");
        assert!(report["state_dir"].as_array().is_some_and(|l| l.iter().any(|f| f == "bridge.sqlite3")), "{report:#}");
        assert!(report["runtime_dir"].as_array().is_some_and(|l| l.len() == 2), "{report:#}");
        let task = b.wait_terminal(&self.waiting_task).await;
        assert_eq!(task["status"], "succeeded", "the operator's approval went through: {task:#}");
    }
}

/// Runs the attack inside a fake task (prefixed by `prefix`, e.g. a `setsid`) and returns the
/// task and what the attack reported.
async fn attack_from_a_fake_task(b: &TestBridge, stage: &Stage, prefix: &str) -> (String, Value) {
    let prompt = format!("exec:{prefix}{}", stage.attack_command(b));
    let id = b.submit(&prompt).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}\n{}", b.log());
    let text = end["final_response"].as_str().expect("final_response");
    let line = text.lines().last().unwrap_or_default();
    let report = serde_json::from_str(line).unwrap_or_else(|e| panic!("the attack printed no report ({e}): {text}"));
    assert!(text.starts_with("exit=0"), "{text}");
    (id, report)
}

async fn fake_scene(env: &[&str]) -> (TestBridge, Stage, tempfile::TempDir) {
    let mut options = Options::default();
    for line in env {
        options = options.with(line);
    }
    let session = session_dir();
    let b = TestBridge::start_with(options.var("XDG_RUNTIME_DIR", &session.path().display().to_string())).await;
    let stage = Stage::set_up(&b, session.path(), &b.repo).await;
    (b, stage, session)
}

#[tokio::test]
async fn a_sandboxed_task_reaches_neither_the_socket_nor_the_bridge_files_and_the_operator_does() {
    if !sandbox_available() {
        return;
    }
    let (b, stage, _session) = fake_scene(&[]).await;
    let (_, report) = attack_from_a_fake_task(&b, &stage, "").await;
    Stage::assert_contained(&report);
    stage.gates_hold(&b).await;
    stage.assert_operator_succeeds(&b, &b.repo).await;
}

#[tokio::test]
async fn a_task_process_on_a_reachable_socket_is_refused_and_audited_under_its_task() {
    // Without the sandbox the socket is reachable: the peer check alone must hold, also for a
    // process that dropped the marker and left the task's session.
    let (b, stage, _session) = fake_scene(&["SERVERFS_AGENT_SANDBOX=off"]).await;
    for prefix in ["", "env -u AGENT_BRIDGE_TASK setsid "] {
        let (id, report) = attack_from_a_fake_task(&b, &stage, prefix).await;
        for call in ["admin_create_api_key", "admin_approve_plan", "respond_agent_approval"] {
            assert_eq!(report[call], "PEER_NOT_AUTHORIZED", "{call} with prefix {prefix:?}: {report:#}");
        }
        stage.gates_hold(&b).await;
        let log = b.call("admin_read_audit_log", json!({ "task_id": id })).await.expect("audit");
        let refused: Vec<&Value> =
            log["rows"].as_array().expect("rows").iter().filter(|r| r["error_code"] == "PEER_NOT_AUTHORIZED").collect();
        assert_eq!(refused.len(), 3, "each attempt is audited under task {id}: {log:#}");
        assert!(refused.iter().all(|r| r["surface"] == "cli" && r["principal"].is_null()), "{refused:#?}");
    }
    stage.assert_operator_succeeds(&b, &b.repo).await;
}

/// Pids of live processes whose command line is exactly `words`.
fn processes_running(words: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let want: Vec<u8> = words.iter().flat_map(|w| w.bytes().chain([0])).collect();
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| e2e::state_and_parent(*pid).is_some_and(|(state, _)| state != "Z"))
        .collect()
}

/// A task script that leaves `sleep SECONDS` behind, detached the way an agent's stray
/// background command escapes: without the marker, in a session of its own. The task ends
/// only once the sleeper runs (it writes `detached` in the workdir first), so a test that then
/// finds no sleeper shows it was ended, not that it never started.
fn detach_a_sleeper(seconds: &str) -> String {
    format!(
        "exec:rm -f detached; env -u AGENT_BRIDGE_TASK setsid sh -c 'echo up > detached; exec sleep {seconds}' & \
         while [ ! -s detached ]; do sleep 0.02; done; echo left"
    )
}

fn unique_seconds() -> String {
    format!("600.{}{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos() % 100_000).unwrap_or(7)
}

#[tokio::test]
async fn a_detached_sleeper_without_the_marker_dies_with_its_task() {
    if !sandbox_available() {
        return;
    }
    let b = TestBridge::start().await;
    let seconds = unique_seconds();
    let id = b.submit(&detach_a_sleeper(&seconds)).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    // A terminal task is persisted after its stop was proven: the sleeper is already gone.
    assert_eq!(processes_running(&["sleep", &seconds]), Vec::<i32>::new(), "the sleeper is gone with its task");
    b.wait_released(&id, 1).await;
    assert!(b.lease_is_free(1));
    assert_eq!(b.guard_count(), 0);
    // The kernel's proof: the PID namespace, or the task's cgroup where cgroup v2 is delegated
    // (as root; `.ci/containment-test` runs this as a user without it).
    let log = b.log();
    assert!(
        log.contains("proof=\"pid_namespace\"") || log.contains("proof=\"cgroup\""),
        "a kernel proof applied:\n{log}"
    );
    let manifest =
        b.db().query_row("SELECT manifest_json FROM tasks WHERE task_id = ?1", [&id], |r| r.get::<_, String>(0));
    assert!(manifest.expect("manifest").contains("\"containment\":\"bubblewrap\""));
}

#[tokio::test]
async fn without_the_sandbox_a_detached_sleeper_outlives_its_task_as_documented() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_SANDBOX=off")).await;
    let seconds = unique_seconds();
    let id = b.submit(&detach_a_sleeper(&seconds)).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    b.wait_released(&id, 1).await;
    let left = processes_running(&["sleep", &seconds]);
    for pid in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(left.len(), 1, "the marker proof cannot see a process that dropped the marker");
    assert!(b.log().contains("proof=\"marker\""), "the marker proof applied:\n{}", b.log());
    let manifest =
        b.db().query_row("SELECT manifest_json FROM tasks WHERE task_id = ?1", [&id], |r| r.get::<_, String>(0));
    assert!(manifest.expect("manifest").contains("\"containment\":\"none\""));
}

#[tokio::test]
async fn a_killed_bridge_takes_its_sandboxes_along_and_the_next_one_proves_the_stop() {
    if !sandbox_available() {
        return;
    }
    let mut b = TestBridge::start().await;
    let seconds = unique_seconds();
    let id = b.submit(&format!("exec:sleep {seconds}")).await;
    b.wait_for(&id, |t| t["status"] == "running").await;
    poll_until("the long command runs", Duration::from_secs(20), || processes_running(&["sleep", &seconds]).len() == 1)
        .await;
    assert_eq!(b.guard_count(), 1);
    b.crash().await;
    let killed = std::time::Instant::now();
    poll_until("the command dies with the bridge", Duration::from_secs(10), || {
        processes_running(&["sleep", &seconds]).is_empty()
    })
    .await;
    e2e::measured(format_args!("the sandboxed command was gone {:?} after kill -9 of the bridge", killed.elapsed()));
    b.spawn().await;
    let task = b.get(&id).await;
    assert_eq!(
        (task["status"].as_str(), task["error"]["code"].as_str()),
        (Some("interrupted"), Some("BRIDGE_RESTARTED"))
    );
    let guards = b.call("admin_workdir_status", json!({})).await.expect("status");
    assert_eq!(
        b.guard_count(),
        0,
        "the next bridge proved the stop from the namespace and cleared the guard: {guards:#}\n{}",
        b.log()
    );
    assert!(b.lease_is_free(1));
}

#[tokio::test]
async fn required_without_bwrap_refuses_tasks_and_auto_runs_them_uncontained() {
    let tools = path_without_bwrap();
    let path = tools.path().display().to_string();
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_SANDBOX=required").var("PATH", &path)).await;
    let refused = b.submit_args(json!({ "prompt": "complete:x" })).await;
    let (code, message) = e2e::error_of(&refused);
    assert_eq!(code, "AGENT_SANDBOX_UNAVAILABLE", "{message}");
    assert!(message.contains("bwrap") && message.contains("apt-get install bubblewrap"), "names the fix: {message}");
    assert_eq!(b.task_count(), 0, "nothing was created");
    let doctor = doctor_json(&b);
    assert_eq!(doctor["containment"]["contained"], false);
    assert!(sandbox_check(&doctor).starts_with("fail"), "{doctor:#}");

    let b = TestBridge::start_with(Options::default().var("PATH", &path)).await;
    let id = b.submit("complete:uncontained").await;
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");
    let doctor = doctor_json(&b);
    let check = sandbox_check(&doctor);
    assert!(check.starts_with("warn") && check.contains("not contained"), "{check}");
    let runtimes = b.call("list_agent_runtimes", json!({})).await.expect("runtimes");
    assert_eq!(runtimes["containment"]["kind"], "none", "{runtimes:#}");
    assert!(!runtimes.to_string().contains(&path), "no host path reaches a caller: {runtimes:#}");
}

fn doctor_json(b: &TestBridge) -> Value {
    let out = b.cli_env(&["doctor", "--json"]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `level: detail` of the doctor's sandbox check.
fn sandbox_check(doctor: &Value) -> String {
    let checks = doctor["checks"].as_array().expect("checks");
    let c = checks.iter().find(|c| c["check"] == "sandbox").unwrap_or_else(|| panic!("no sandbox check: {doctor:#}"));
    format!("{}: {}", c["level"].as_str().unwrap_or("?"), c["detail"].as_str().unwrap_or("?"))
}

#[tokio::test]
async fn list_agent_runtimes_and_doctor_say_the_tasks_are_contained() {
    if !sandbox_available() {
        return;
    }
    let b = TestBridge::start().await;
    let runtimes = b.call("list_agent_runtimes", json!({})).await.expect("runtimes");
    assert_eq!(runtimes["containment"]["kind"], "bubblewrap", "{runtimes:#}");
    assert_eq!(runtimes["runtimes"][0]["containment"]["contained"], true, "{runtimes:#}");
    let doctor = doctor_json(&b);
    assert!(sandbox_check(&doctor).starts_with("ok: contained"), "{doctor:#}");
    // Inside, /tmp is the task's own: the fake's own output file, and the test's directory
    // with only the workdirs (and the fake runtime's session store) bound back in it; the
    // workdir is where it was.
    std::fs::write(b.repo.join("marker.txt"), b"here").expect("write");
    let root = b.root();
    let id = b.submit(&format!("exec:ls -A /tmp; echo --; ls -A {}; echo --; cat marker.txt", root.display())).await;
    let end = b.wait_terminal(&id).await;
    let text = end["final_response"].as_str().unwrap_or_default();
    let parts: Vec<Vec<&str>> = text.split("--\n").map(|p| p.lines().collect()).collect();
    let name = root.file_name().and_then(|n| n.to_str()).expect("name");
    assert_eq!(parts.len(), 3, "{text}");
    assert_eq!(parts[0][0], "exit=0", "{text}");
    // Other tests' directories never show; only this bridge's (and, when they live under
    // /tmp, the directories of HOME and of the program, mounted as well).
    let tests: Vec<&str> = parts[0].iter().copied().filter(|l| l.starts_with("ab-e2e-")).collect();
    assert_eq!(tests, [name], "{text}");
    assert!(parts[0].iter().any(|l| l.starts_with("fake-agent-exec-")), "{text}");
    // Its workdir, and `state` for the path to the fake runtime's session store; the other
    // workdir (`docs`) is not in this task's view at all.
    assert_eq!(parts[1], ["repo", "state"], "{text}");
    assert_eq!(parts[2], ["here"], "{text}");
    let private = b.state_dir.join("tmp").join(&id);
    b.wait_released(&id, 1).await;
    assert!(!private.exists(), "the private /tmp is removed with the task's cleanup");
}

/// Whether the bridge `b` gives each task its own cgroup; where it cannot (no delegated cgroup
/// v2: an ordinary user without systemd's `Delegate=yes`), says so loudly. Under `CI=true` as
/// root, on a machine with cgroup v2, it must.
#[allow(clippy::print_stderr)]
async fn cgroups_delegated(b: &TestBridge) -> bool {
    let health = b.health().await.expect("health");
    let delegated = health["containment"]["cgroup"] == true;
    if !delegated {
        let cgroup2 = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(" - cgroup2 "));
        let must = std::env::var("CI").as_deref() == Ok("true") && nix::unistd::geteuid().is_root() && cgroup2;
        assert!(!must, "CI=true, root and cgroup v2: the bridge should have a cgroup per task: {health:#}");
        eprintln!("\n*** SKIPPED: no delegated cgroup v2 for this user: tasks get no cgroup of their own ***\n");
    }
    delegated
}

#[tokio::test]
async fn where_cgroup_v2_is_delegated_each_task_runs_in_its_own_cgroup_which_contains_it_without_bwrap() {
    // No bwrap on the bridge's PATH: only the cgroup contains the task.
    let tools = path_without_bwrap();
    let b = TestBridge::start_with(Options::default().var("PATH", &tools.path().display().to_string())).await;
    if !cgroups_delegated(&b).await {
        return;
    }
    let health = b.health().await.expect("health");
    assert_eq!(health["containment"]["contained"], false, "no sandbox without bwrap: {health:#}");
    let seconds = unique_seconds();
    let id = b.submit(&format!("{}; sleep 1", detach_a_sleeper(&seconds))).await;
    poll_until("the sleeper runs", Duration::from_secs(20), || processes_running(&["sleep", &seconds]).len() == 1)
        .await;
    let sleeper = processes_running(&["sleep", &seconds])[0];
    let cgroup = std::fs::read_to_string(format!("/proc/{sleeper}/cgroup")).unwrap_or_default();
    assert!(
        cgroup.contains("/agent-bridge-tasks/") && cgroup.trim_end().ends_with(&format!("/{id}")),
        "the detached sleeper is in its task's cgroup: {cgroup}"
    );
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    b.wait_released(&id, 1).await;
    assert_eq!(processes_running(&["sleep", &seconds]), Vec::<i32>::new(), "cgroup.kill ended the sleeper");
    assert!(b.log().contains("proof=\"cgroup\""), "the cgroup proof applied:\n{}", b.log());
    let mount = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let root = mount
        .lines()
        .find_map(|l| l.split_once(" - cgroup2 ").and_then(|(left, _)| left.split_whitespace().nth(4)))
        .expect("cgroup2 mount")
        .to_owned();
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim().to_owned();
    let group = std::path::Path::new(&root).join(own.trim_start_matches('/'));
    assert!(!group.exists(), "the task's cgroup {} is removed with the task", group.display());
}

/// A `PATH` directory with the shell tools the tests' tasks use, and no `bwrap`.
fn path_without_bwrap() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a PATH directory");
    for tool in ["sh", "env", "setsid", "sleep", "echo", "ls", "cat", "rm"] {
        let found = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists());
        let found = found.unwrap_or_else(|| panic!("no {tool} in /usr/bin or /bin"));
        std::os::unix::fs::symlink(found, dir.path().join(tool)).expect("link a tool");
    }
    dir
}

/// A workdir that contains the bridge's state directory (an operator whose workdir is their
/// whole home): a task pointed at the state directory itself is refused, never uncovered.
#[tokio::test]
async fn a_task_directory_inside_the_bridges_private_files_is_refused() {
    if !sandbox_available() {
        return;
    }
    let mut b = TestBridge::prepare(Options::default());
    let root = b.root();
    let env = std::fs::read_to_string(&b.env_file).expect("env");
    let extra = format!(
        "WORKDIR_03_ALIAS=everything\nWORKDIR_03_PATH={}\nWORKDIR_03_READ_ONLY=true\nWORKDIR_03_AGENT_MODE=review\nWORKDIR_03_AGENT_RUNTIMES=fake\n",
        root.display()
    );
    std::fs::write(&b.env_file, env + &extra).expect("env");
    b.spawn().await;
    let id = b
        .submit_ok(json!({ "workdir": "everything", "profile": "review", "path": "state", "prompt": "exec:ls -A" }))
        .await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "failed", "{end:#}");
    let message = end["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("private paths"), "{end:#}");
    // The same workdir elsewhere works, and the state directory inside it reads as empty but
    // for the fake runtime's own session store.
    let id = b.submit_ok(json!({ "workdir": "everything", "profile": "review", "prompt": "exec:ls -A state" })).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    assert_eq!(end["final_response"], "exit=0\nruntimes", "the state directory is emptied inside: {end:#}");
}

/// `SERVERFS_AGENT_SANDBOX_HIDE` naming a directory that holds a workdir would leave every task
/// of that workdir in an empty directory: the bridge refuses to start and says which.
#[tokio::test]
async fn hiding_a_workdir_is_refused_at_start() {
    let b = TestBridge::prepare(Options::default());
    let env = std::fs::read_to_string(&b.env_file).expect("env");
    let hide = format!("SERVERFS_AGENT_SANDBOX_HIDE={}\n", b.repo.display());
    let file = b.root().join("hiding.env");
    std::fs::write(&file, env + &hide).expect("env");
    let out = b.serve_until_exit(Some(&file), Duration::from_secs(30)).await;
    assert!(!out.status.success(), "the bridge started with a hidden workdir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("would hide workdir repo"), "names the workdir: {stderr}");
    let sloppy = b.root().join("sloppy.env");
    let env = std::fs::read_to_string(&b.env_file).expect("env");
    std::fs::write(&sloppy, env + "SERVERFS_AGENT_SANDBOX=sometimes\nSERVERFS_AGENT_SANDBOX_HIDE=relative/path\n")
        .expect("env");
    let out = b.serve_until_exit(Some(&sloppy), Duration::from_secs(30)).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SERVERFS_AGENT_SANDBOX") && stderr.contains("auto, required or off"), "{stderr}");
    assert!(stderr.contains("SERVERFS_AGENT_SANDBOX_HIDE") && stderr.contains("relative/path"), "{stderr}");
}
