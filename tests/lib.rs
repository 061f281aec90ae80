//! Test harness for the end-to-end suite: starts the real `agent-bridge` binary on a
//! temporary socket with a temporary state, waits until it answers, and talks to it over the
//! real socket protocol.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tempfile::TempDir;

use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, ListParams, Surface};

/// The `agent-bridge` executable under test: `AGENT_BRIDGE_BIN`, or the one cargo built next
/// to this test binary.
pub fn bridge_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("AGENT_BRIDGE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary has a path");
    let dir = exe.parent().and_then(Path::parent).expect("the test binary lives in target/<profile>/deps");
    let bin = dir.join("agent-bridge");
    assert!(
        bin.exists(),
        "{} is missing: run the suite with `cargo test --workspace` (which builds it) or set AGENT_BRIDGE_BIN",
        bin.display()
    );
    bin
}

/// How to configure a test bridge.
#[derive(Debug, Clone)]
pub struct Options {
    /// Extra `.env` lines (`KEY=VALUE`).
    pub env: Vec<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options { env: Vec::new() }
    }
}

impl Options {
    /// Adds a `.env` line.
    pub fn with(mut self, line: &str) -> Options {
        self.env.push(line.to_owned());
        self
    }
}

/// A running bridge in a private temporary directory, killed on drop.
pub struct TestBridge {
    /// The temporary directory (0700) holding everything.
    pub dir: TempDir,
    /// The socket.
    pub socket: PathBuf,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The lock directory.
    pub lock_dir: PathBuf,
    /// The writable workdir `repo` (slot 01, workspace-write, fake).
    pub repo: PathBuf,
    /// The read-only workdir `docs` (slot 02, review, fake).
    pub docs: PathBuf,
    /// The `.env` the bridge was started with.
    pub env_file: PathBuf,
    child: Option<Child>,
}

/// The `.env` every test bridge starts from.
pub fn base_env(root: &Path) -> String {
    let mut lines = vec![
        format!("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={}", root.join("run").display()),
        format!("SERVERFS_AGENT_LOCK_HOST_DIR={}", root.join("locks").display()),
        format!("SERVERFS_AGENT_BRIDGE_STATE_DIR={}", root.join("state").display()),
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true".to_owned(),
        "WORKDIR_01_ALIAS=repo".to_owned(),
        format!("WORKDIR_01_PATH={}", root.join("repo").display()),
        "WORKDIR_01_DESCRIPTION=A writable test repository".to_owned(),
        "WORKDIR_01_READ_ONLY=false".to_owned(),
        "WORKDIR_01_AGENT_MODE=workspace-write".to_owned(),
        "WORKDIR_01_AGENT_RUNTIMES=fake".to_owned(),
        "WORKDIR_02_ALIAS=docs".to_owned(),
        format!("WORKDIR_02_PATH={}", root.join("docs").display()),
        "WORKDIR_02_READ_ONLY=true".to_owned(),
        "WORKDIR_02_AGENT_MODE=review".to_owned(),
        "WORKDIR_02_AGENT_RUNTIMES=fake".to_owned(),
    ];
    // CI runs as root; the bridge refuses root unless told this is deliberate.
    if nix::unistd::geteuid().is_root() {
        lines.push("SERVERFS_AGENT_ALLOW_ROOT=true".to_owned());
    }
    lines.join("\n") + "\n"
}

impl TestBridge {
    /// Starts a bridge with the default configuration.
    pub async fn start() -> TestBridge {
        TestBridge::start_with(Options::default()).await
    }

    /// Starts a bridge with extra `.env` lines.
    pub async fn start_with(options: Options) -> TestBridge {
        let dir = tempfile::Builder::new().prefix("ab-e2e-").tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        std::fs::create_dir_all(root.join("repo/src")).expect("repo");
        std::fs::create_dir_all(root.join("docs")).expect("docs");
        let mut env = base_env(&root);
        for line in &options.env {
            env.push_str(line);
            env.push('\n');
        }
        let env_file = root.join("bridge.env");
        std::fs::write(&env_file, env).expect("write .env");
        let mut bridge = TestBridge {
            socket: root.join("run/bridge.sock"),
            state_dir: root.join("state"),
            lock_dir: root.join("locks"),
            repo: root.join("repo"),
            docs: root.join("docs"),
            env_file,
            dir,
            child: None,
        };
        bridge.spawn().await;
        bridge
    }

    /// Starts the bridge process on the existing directory and waits until it answers.
    pub async fn spawn(&mut self) {
        assert!(self.child.is_none(), "the bridge is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("bridge.log"))
            .expect("log file");
        let child = Command::new(bridge_bin())
            .arg("serve")
            .arg("--env-file")
            .arg(&self.env_file)
            .env("AGENT_BRIDGE_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent-bridge");
        self.child = Some(child);
        self.wait_ready().await;
    }

    async fn wait_ready(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut pause = Duration::from_millis(5);
        loop {
            if let Ok(v) = self.health().await {
                assert_eq!(v["status"], "ok");
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("agent-bridge exited before it was ready ({status}):\n{}", self.log());
            }
            assert!(tokio::time::Instant::now() < deadline, "agent-bridge was not ready in 20 s:\n{}", self.log());
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// The bridge's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bridge.log")).unwrap_or_default()
    }

    /// The bridge process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A client with a generous timeout.
    pub fn client(&self) -> Client {
        Client::new(&self.socket, Duration::from_secs(60))
    }

    /// `bridge.health`.
    pub async fn health(&self) -> Result<Value, CallError> {
        Client::new(&self.socket, Duration::from_secs(5)).call(methods::BRIDGE_HEALTH, Map::new()).await
    }

    /// Calls a capability as the local operator (surface `cli`, no credential).
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, CallError> {
        self.call_on(Surface::Cli, None, name, args).await
    }

    /// Calls a capability on the MCP surface with a credential (`Bearer …`).
    pub async fn call_mcp(&self, key: Option<&str>, name: &str, args: Value) -> Result<Value, CallError> {
        let credential = key.map(|k| format!("Bearer {k}"));
        self.call_on(Surface::Mcp, credential.as_deref(), name, args).await
    }

    /// Calls a capability with an exact credential string on any surface.
    pub async fn call_on(&self, surface: Surface, credential: Option<&str>, name: &str, args: Value) -> Result<Value, CallError> {
        let Value::Object(arguments) = args else { panic!("arguments must be an object") };
        let params = CallParams { credential: credential.map(str::to_owned), surface, client: None, name: name.to_owned(), arguments };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_CALL, params).await
    }

    /// Lists the capabilities visible with a credential on the MCP surface.
    pub async fn list_mcp(&self, key: Option<&str>) -> Result<Value, CallError> {
        let params = ListParams { credential: key.map(|k| format!("Bearer {k}")), surface: Surface::Mcp, client: None };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_LIST, params).await
    }

    /// Creates an API key and returns its secret.
    pub async fn create_key(&self, name: &str, role: &str) -> String {
        let v = self.call("admin_create_api_key", json!({ "name": name, "role": role })).await.expect("create key");
        v["secret"].as_str().expect("secret").to_owned()
    }

    /// Submits a fake task as the local operator and returns its id.
    pub async fn submit(&self, prompt: &str) -> String {
        let v = self
            .call("submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt }))
            .await
            .expect("submit");
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// Waits (by long-polling, never sleeping) until `done(task)` holds; panics after 30 s.
    ///
    /// A long poll returns when the task differs from what it was *when the poll began*, so
    /// each round first reads without waiting: a state reached just before a poll would
    /// otherwise only be seen when that poll times out.
    pub async fn wait_for(&self, task_id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let task = self.call("get_agent_task", json!({ "task_id": task_id })).await.expect("get task");
            if done(&task) {
                return task;
            }
            let task = self.call("get_agent_task", json!({ "task_id": task_id, "wait_seconds": 1 })).await.expect("get task");
            if done(&task) {
                return task;
            }
            assert!(tokio::time::Instant::now() < deadline, "task {task_id} did not reach the expected state: {task:#}\n{}", self.log());
        }
    }

    /// Waits until the task is terminal.
    pub async fn wait_terminal(&self, task_id: &str) -> Value {
        self.wait_for(task_id, |t| t["terminal"] == true).await
    }

    /// Opens the store read-only (the tests inspect rows, never write them).
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(self.state_dir.join("bridge.sqlite3"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open the store read-only")
    }

    /// Runs the CLI against this bridge.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bridge_bin()).args(args).arg("--socket").arg(&self.socket).output().expect("run the CLI")
    }

    /// Whether the writer lease of `slot` is free (tries the same `flock`).
    pub fn lease_is_free(&self, slot: u8) -> bool {
        use fs2::FileExt;
        let path = self.lock_dir.join(format!("{slot:02}.lock"));
        match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f.try_lock_exclusive().is_ok(),
            Err(_) => true,
        }
    }

    /// How many provider turns the fake runtime started (one session record per turn).
    pub fn fake_turns(&self) -> usize {
        let dir = self.state_dir.join("runtimes/fake/sessions");
        std::fs::read_dir(dir)
            .map(|entries| {
                entries.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().lines().count()).sum()
            })
            .unwrap_or(0)
    }

    /// Stops the bridge with SIGTERM and waits for it.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the bridge is running");
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        tokio::task::spawn_blocking(move || child.wait().expect("wait for the bridge")).await.expect("join")
    }

    /// Kills the bridge with SIGKILL (a crash) and waits for it.
    pub async fn crash(&mut self) {
        let mut child = self.child.take().expect("the bridge is running");
        let _ = child.kill();
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    }
}

impl Drop for TestBridge {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// More helpers for the lifecycle suites.
impl TestBridge {
    /// The canonical temporary directory: every host path of this bridge starts with it.
    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical temp dir")
    }

    /// `submit_agent_task` with `runtime: fake, workdir: repo` unless `args` says otherwise.
    pub async fn submit_args(&self, args: Value) -> Result<Value, CallError> {
        let mut full = json!({ "runtime": "fake", "workdir": "repo" });
        let Value::Object(extra) = args else { panic!("submit arguments must be an object") };
        for (k, v) in extra {
            full[k] = v;
        }
        self.call("submit_agent_task", full).await
    }

    /// Submits and returns the new task id, panicking on refusal.
    pub async fn submit_ok(&self, args: Value) -> String {
        let v = self.submit_args(args.clone()).await.unwrap_or_else(|e| panic!("submit {args} failed: {e:?}"));
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// `get_agent_task` without waiting.
    pub async fn get(&self, task_id: &str) -> Value {
        self.call("get_agent_task", json!({ "task_id": task_id })).await.expect("get task")
    }

    /// Waits until the task has `status`.
    pub async fn wait_status(&self, task_id: &str, status: &str) -> Value {
        self.wait_for(task_id, |t| t["status"] == status).await
    }

    /// Every event of a task, read page by page (500 a page).
    pub async fn all_events(&self, task_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = 0u64;
        loop {
            let page = self
                .call("read_agent_task_events", json!({ "task_id": task_id, "after_event_id": after, "limit": 500 }))
                .await
                .expect("read events");
            let events = page["events"].as_array().expect("events").clone();
            if events.is_empty() {
                return out;
            }
            after = page["next_after_event_id"].as_u64().expect("cursor");
            out.extend(events);
        }
    }

    /// Waits until no writer holds `repo` (slot 01): its lease is free and its guard cleared.
    /// A terminal task may still hold both for a moment: they are released only after the
    /// provider's cleanup (seed 001 §14.1), so a writer submitted right away may get
    /// `WORKDIR_BUSY`.
    pub async fn writer_idle(&self) {
        eventually("the writer lease and guard of `repo` are released", Duration::from_secs(20), || {
            self.lease_is_free(1) && self.guard_count() == 0
        })
        .await;
    }

    /// Number of recovery guards in the store.
    pub fn guard_count(&self) -> i64 {
        self.db().query_row("SELECT COUNT(*) FROM recovery_guards", [], |r| r.get(0)).expect("count guards")
    }

    /// Number of task rows in the store.
    pub fn task_count(&self) -> i64 {
        self.db().query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0)).expect("count tasks")
    }
}

/// Polls `check` (a cheap, local condition such as a lock or a row count) every 20 ms until
/// it holds; panics with `what` after `limit`. For conditions the bridge cannot long-poll.
pub async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: still not true after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pids of live (not zombie) processes carrying the bridge's task marker
/// `AGENT_BRIDGE_TASK=<task_id>`, read from `/proc` like the bridge does.
pub fn marker_pids(task_id: &str) -> Vec<i32> {
    let needle = format!("AGENT_BRIDGE_TASK={task_id}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if !environ.split(|&b| b == 0).any(|var| var == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next().map(str::to_owned));
        if state.is_some_and(|s| s != "Z") {
            pids.push(pid);
        }
    }
    pids
}

/// The event types of a list of envelopes, in order.
pub fn event_types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["event_type"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The code of a failed call.
pub fn code(result: &Result<Value, CallError>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:#}"),
        Err(e) => e.code().to_owned(),
    }
}
