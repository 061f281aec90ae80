//! Test harness for the end-to-end suite: starts the real `agent-bridge` binary on a
//! temporary socket with a temporary state, waits until it answers, and talks to it over the
//! real socket protocol.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tempfile::TempDir;

use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, ListParams, Surface};

pub mod browser;
pub mod front;
pub mod model;
pub mod real;

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
    static FRESH: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    FRESH.get_or_init(|| assert_fresh(&bin));
    bin
}

/// Fails when a source file of the bridge is newer than the binary next to the tests:
/// `cargo test -p e2e` (or `--test e2e`) does not rebuild `agent-bridge`, and a stale binary
/// would silently test old code.
fn assert_fresh(bin: &Path) {
    assert_fresh_from(bin, &["bridge/src", "proto/src"]);
}

/// Fails when a `.rs` file under one of `dirs` (relative to the workspace) is newer than `bin`.
pub fn assert_fresh_from(bin: &Path, dirs: &[&str]) {
    fn newest(dir: &Path, newest_seen: &mut Option<(std::time::SystemTime, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                newest(&path, newest_seen);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
                && newest_seen.as_ref().is_none_or(|(t, _)| modified > *t)
            {
                *newest_seen = Some((modified, path));
            }
        }
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let mut newest_source = None;
    for dir in dirs {
        newest(&workspace.join(dir), &mut newest_source);
    }
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).expect("the binary's mtime");
    if let Some((modified, source)) = newest_source {
        assert!(
            modified <= built,
            "{} is older than {}: build it first (`cargo build --workspace`, or run `cargo test --workspace`)",
            bin.display(),
            source.display()
        );
    }
}

/// How to configure a test bridge.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra `.env` lines (`KEY=VALUE`).
    pub env: Vec<String>,
    /// The executable to run instead of [`bridge_bin`] (benchmarks pass cargo's own path).
    pub bin: Option<PathBuf>,
    /// Extra process environment for the bridge (what its provider children may inherit).
    pub vars: Vec<(String, String)>,
}

impl Options {
    /// Adds a `.env` line.
    pub fn with(mut self, line: &str) -> Options {
        self.env.push(line.to_owned());
        self
    }

    /// Sets a variable in the bridge process's environment.
    pub fn var(mut self, name: &str, value: &str) -> Options {
        self.vars.push((name.to_owned(), value.to_owned()));
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
    bin: PathBuf,
    vars: Vec<(String, String)>,
    child: Option<Child>,
}

/// The `.env` every test bridge starts from.
pub fn base_env(root: &Path) -> String {
    let mut lines = vec![
        format!("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={}", root.join("run").display()),
        format!("SERVERFS_AGENT_LOCK_HOST_DIR={}", root.join("locks").display()),
        format!("SERVERFS_AGENT_BRIDGE_STATE_DIR={}", root.join("state").display()),
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true".to_owned(),
        // Every test bridge serves its board on a free port of its own.
        "SERVERFS_BOARD_ADDR=127.0.0.1:0".to_owned(),
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
        let mut bridge = TestBridge::prepare(options);
        bridge.spawn().await;
        bridge
    }

    /// Starts a bridge that is not expected to answer `bridge.health` (e.g. one that refuses
    /// this test's uid): waits, bounded, only until its socket file exists.
    pub async fn start_unready(options: Options) -> TestBridge {
        let mut bridge = TestBridge::prepare(options);
        bridge.spawn_child();
        bridge.wait_socket().await;
        bridge
    }

    /// Creates the private temporary directory, the workdirs and the `.env`, without starting
    /// anything (a test may then arrange files and start the bridge itself).
    pub fn prepare(options: Options) -> TestBridge {
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
        TestBridge {
            socket: root.join("run/bridge.sock"),
            state_dir: root.join("state"),
            lock_dir: root.join("locks"),
            repo: root.join("repo"),
            docs: root.join("docs"),
            env_file,
            dir,
            bin: options.bin.clone().unwrap_or_else(bridge_bin),
            vars: options.vars.clone(),
            child: None,
        }
    }

    /// Sets a variable in the bridge process's environment for its next start.
    pub fn set_var(&mut self, name: &str, value: &str) {
        self.vars.push((name.to_owned(), value.to_owned()));
    }

    /// The canonical temporary directory everything lives in (a host path that must never
    /// reach a caller).
    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical temp dir")
    }

    /// Starts the bridge process on the existing directory and waits until it answers.
    pub async fn spawn(&mut self) {
        self.spawn_child();
        self.wait_ready().await;
    }

    /// Starts the bridge process without waiting for anything.
    fn spawn_child(&mut self) {
        assert!(self.child.is_none(), "the bridge is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("bridge.log"))
            .expect("log file");
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--env-file")
            .arg(&self.env_file)
            .env("AGENT_BRIDGE_LOG", "debug")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent-bridge");
        self.child = Some(child);
    }

    /// Waits (bounded poll, 20 s) until the socket file exists; panics if the bridge exits first.
    async fn wait_socket(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut pause = Duration::from_millis(5);
        while !self.socket.exists() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("agent-bridge exited before it created its socket ({status}):\n{}", self.log());
            }
            assert!(tokio::time::Instant::now() < deadline, "agent-bridge created no socket in 20 s:\n{}", self.log());
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Runs another `agent-bridge serve` with `env_file` (default: this bridge's) and waits,
    /// at most `within`, for it to exit; returns its output. A process still running at the
    /// deadline is killed and the test fails: a refused start must exit on its own.
    pub async fn serve_until_exit(&self, env_file: Option<&Path>, within: Duration) -> std::process::Output {
        let child = tokio::process::Command::new(&self.bin)
            .arg("serve")
            .arg("--env-file")
            .arg(env_file.unwrap_or(&self.env_file))
            .env("AGENT_BRIDGE_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start agent-bridge");
        match tokio::time::timeout(within, child.wait_with_output()).await {
            Ok(output) => output.expect("wait for agent-bridge"),
            Err(_) => panic!(
                "agent-bridge serve was still running after {} s; it should have refused to start",
                within.as_secs()
            ),
        }
    }

    /// Counts the rows of a store table (`tasks`, `events`, `interactions`, …).
    pub fn count(&self, table: &str) -> i64 {
        assert!(table.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "table name {table:?}");
        self.db().query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).expect("count rows")
    }

    /// Row counts of the task tables, to prove a refused request changed nothing.
    pub fn store_counts(&self) -> [(&'static str, i64); 3] {
        ["tasks", "events", "interactions"].map(|t| (t, self.count(t)))
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
    pub async fn call_on(
        &self,
        surface: Surface,
        credential: Option<&str>,
        name: &str,
        args: Value,
    ) -> Result<Value, CallError> {
        let Value::Object(arguments) = args else { panic!("arguments must be an object") };
        let params = CallParams {
            credential: credential.map(str::to_owned),
            surface,
            client: None,
            name: name.to_owned(),
            arguments,
        };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_CALL, params).await
    }

    /// Lists the capabilities visible with a credential on the MCP surface.
    pub async fn list_mcp(&self, key: Option<&str>) -> Result<Value, CallError> {
        let params = ListParams { credential: key.map(|k| format!("Bearer {k}")), surface: Surface::Mcp, client: None };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_LIST, params).await
    }

    /// Lists the capabilities visible with an exact credential string on any surface.
    pub async fn list_on(&self, surface: Surface, credential: Option<&str>) -> Result<Value, CallError> {
        let params = ListParams { credential: credential.map(str::to_owned), surface, client: None };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_LIST, params).await
    }

    /// Creates an API key restricted to `workdirs` (as the local operator) and returns its secret.
    pub async fn create_key_for(&self, name: &str, role: &str, workdirs: &[&str]) -> String {
        self.create_key_with(json!({ "name": name, "role": role, "workdirs": workdirs })).await
    }

    /// Runs one `SELECT COUNT(*) …` (or any single-integer query) on the store.
    pub fn db_count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Creates an API key (for every workdir) and returns its secret.
    pub async fn create_key(&self, name: &str, role: &str) -> String {
        self.create_key_with(json!({ "name": name, "role": role })).await
    }

    async fn create_key_with(&self, args: Value) -> String {
        let v = self.call("admin_create_api_key", args).await.expect("create key");
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
            let task =
                self.call("get_agent_task", json!({ "task_id": task_id, "wait_seconds": 1 })).await.expect("get task");
            if done(&task) {
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {task_id} did not reach the expected state: {task:#}\n{}",
                self.log()
            );
        }
    }

    /// Waits until the task is terminal.
    pub async fn wait_terminal(&self, task_id: &str) -> Value {
        self.wait_for(task_id, |t| t["terminal"] == true).await
    }

    /// Opens the store read-only (the tests inspect rows, never write them).
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(
            self.state_dir.join("bridge.sqlite3"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open the store read-only")
    }

    /// Runs the CLI against this bridge.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin).args(args).arg("--socket").arg(&self.socket).output().expect("run the CLI")
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

    /// Waits (bounded polling: no event announces it) until a finished writer task has let go
    /// of its workdir: the lease of `slot` is free and no recovery guard names `task_id`. The
    /// bridge persists a terminal state before its runner releases the lease and clears the
    /// guard, so a second writer submitted the moment the first reads terminal may still get
    /// `WORKDIR_BUSY`.
    pub async fn wait_released(&self, task_id: &str, slot: u8) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let guards: i64 = self
                .db()
                .query_row("SELECT COUNT(*) FROM recovery_guards WHERE task_id = ?1", [task_id], |r| r.get(0))
                .expect("count guards");
            if guards == 0 && self.lease_is_free(slot) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {task_id} still holds slot {slot:02} (guards: {guards}) after 20 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
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
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !(self.lease_is_free(1) && self.guard_count() == 0) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer lease and guard of `repo` are not released after 20 s (lease free: {}, guards: {}):\n{}",
                self.lease_is_free(1),
                self.guard_count(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Number of recovery guards in the store.
    pub fn guard_count(&self) -> i64 {
        self.db_count("SELECT COUNT(*) FROM recovery_guards")
    }

    /// Number of task rows in the store.
    pub fn task_count(&self) -> i64 {
        self.db_count("SELECT COUNT(*) FROM tasks")
    }
}

/// Bounded polling, for conditions no event announces (a lock file released, a row deleted,
/// a file written by a child): checks `check` every 20 ms until it holds; panics with `what`
/// after `limit`.
pub async fn poll_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: still not true after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Bounded polling of an asynchronous condition (see [`poll_until`]).
pub async fn poll_until_async<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The code and message of a call the bridge refused.
pub fn error_of(result: &Result<Value, CallError>) -> (String, String) {
    match result {
        Ok(v) => panic!("expected an error, got {v:#}"),
        Err(CallError::Remote { code, message }) => (code.clone(), message.clone()),
        Err(e) => panic!("expected a refusal from the bridge, got {e}"),
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
        let Some(environ) = read_environ(pid) else { continue };
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

/// Helpers for the lifecycle-reliability suites (deadlines, cancellation, orphans, crashes,
/// retention).
impl TestBridge {
    /// Runs the CLI with this bridge's `.env` (`--env-file`) instead of `--socket`: for the
    /// commands that need the configuration itself (`doctor`), or that must find the socket
    /// through it.
    pub fn cli_env(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin).args(args).arg("--env-file").arg(&self.env_file).output().expect("run the CLI")
    }

    /// Whether the bridge's instance lock (`bridge.lock` in the state directory) is free,
    /// that is whether a new bridge could start on this state directory now.
    ///
    /// Right after a crash it may not be: a provider the bridge was spawning at the moment
    /// of the kill is a fork of the bridge until it execs, and holds copies of the bridge's
    /// descriptors (this lock, a writer lease) until then.
    pub fn instance_lock_is_free(&self) -> bool {
        use fs2::FileExt;
        match std::fs::OpenOptions::new().read(true).write(true).open(self.state_dir.join("bridge.lock")) {
            Ok(f) => f.try_lock_exclusive().is_ok(),
            Err(_) => true,
        }
    }

    /// Whether the bridge process of this harness is running (not crashed or stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Moves the completion time of terminal tasks `hours` into the past, as if the bridge had
    /// been down that long since they ended. Only while the bridge is stopped: this is the one
    /// place the tests write the store, to let retention see old tasks without waiting hours.
    pub fn age_terminal_tasks(&self, task_ids: &[&str], hours: i64) {
        assert!(self.child.is_none(), "age tasks only while the bridge is down");
        let db = rusqlite::Connection::open(self.state_dir.join("bridge.sqlite3")).expect("open the store");
        for id in task_ids {
            let n = db
                .execute(
                    "UPDATE tasks SET completed_at = completed_at - ?2 WHERE task_id = ?1 AND completed_at IS NOT NULL",
                    rusqlite::params![id, hours * 3_600_000],
                )
                .expect("age a task");
            assert_eq!(n, 1, "task {id} is not terminal");
        }
    }

    /// Submits `orphan:SECONDS` as a writer and kills the bridge (SIGKILL) once the provider
    /// has started and before the runner's cleanup could sweep its marker: the provider leaves
    /// its `setsid sleep` orphan behind, and that orphan outlives the bridge. Returns the task
    /// id and the orphan's pid, with the bridge down. Only on a bridge started with
    /// `SERVERFS_AGENT_SANDBOX=off`: in the sandbox no orphan outlives its bridge (the
    /// `containment` suite shows it).
    ///
    /// The kill must land between the provider's start (its start line is written right
    /// after the spawn) and the sweep that follows its result (a few milliseconds later):
    /// the bridge's children are watched directly, and an attempt that lands outside the
    /// window (no orphan survives) is retried on a fresh task.
    pub async fn crash_leaving_an_orphan(&mut self, seconds: u32) -> (String, i32) {
        for attempt in 1..=20 {
            let bridge = self.pid().expect("the bridge is running") as i32;
            let id = self.submit_ok(json!({ "prompt": format!("orphan:{seconds}") })).await;
            let marker = format!("AGENT_BRIDGE_TASK={id}");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            // Tight loop on purpose: the window is a few milliseconds wide.
            let started = loop {
                if child_pids(bridge).iter().any(|&pid| environ_has(pid, &marker)) {
                    break true;
                }
                if std::time::Instant::now() > deadline {
                    break false;
                }
                std::thread::yield_now();
            };
            self.crash().await;
            assert!(started, "the provider of {id} never started:\n{}", self.log());
            // The provider runs on without its bridge: it leaves the orphan and exits.
            // "Nothing carries the marker" must hold for several scans in a row before the
            // attempt counts as missed: a process caught in the middle of an exec reads as
            // having no environment for a moment.
            let limit = std::time::Instant::now() + Duration::from_secs(10);
            let mut empty_scans = 0;
            let orphan = loop {
                let pids = marker_pids(&id);
                let sleepers: Vec<i32> =
                    pids.iter().copied().filter(|&p| comm(p).as_deref() == Some("sleep")).collect();
                if pids.len() == 1 && sleepers.len() == 1 {
                    break Some(sleepers[0]);
                }
                empty_scans = if pids.is_empty() { empty_scans + 1 } else { 0 };
                if empty_scans >= 5 || std::time::Instant::now() > limit {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            if let Some(pid) = orphan {
                // Pins the orphan's identity (see `alive`) while it is certainly the orphan.
                assert!(alive(pid), "the orphan {pid} of {id} is alive");
                measured(format_args!("the orphan of {id} outlived its bridge (attempt {attempt})"));
                return (id, pid);
            }
            // Too early (no start line yet) or too late (already swept): start over. Whatever
            // of the missed attempt still runs is ended, so its guard can clear.
            self.spawn().await;
            for pid in marker_pids(&id) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            self.writer_idle().await;
        }
        panic!("could not crash the bridge between a provider's start and its cleanup in 20 attempts");
    }
}

/// The child pids of `pid` (all its threads), from `/proc/<pid>/task/*/children`.
pub fn child_pids(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// Whether the environment of `pid` holds exactly `var` (`KEY=VALUE`).
pub fn environ_has(pid: i32, var: &str) -> bool {
    read_environ(pid).is_some_and(|environ| environ.split(|&b| b == 0).any(|v| v == var.as_bytes()))
}

/// The environment of `pid`, or `None` if it cannot be read. A process in the middle of
/// `execve` reads as having neither environment nor command line for a moment, so such a read
/// of a live user process is retried briefly (as the bridge's own sweep does).
pub fn read_environ(pid: i32) -> Option<Vec<u8>> {
    for attempt in 1..=5 {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let mid_exec = || {
            let no_cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty());
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let rest: Vec<&str> = stat[stat.rfind(')').map_or(stat.len(), |i| i + 1)..].split_whitespace().collect();
            let kernel_thread = rest.get(6).and_then(|f| f.parse::<u64>().ok()).is_some_and(|f| f & 0x0020_0000 != 0);
            no_cmdline && !kernel_thread && rest.first().is_some_and(|&state| state != "Z")
        };
        if !environ.is_empty() || attempt == 5 || !mid_exec() {
            return Some(environ);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// The command name of `pid` (`/proc/<pid>/comm`).
pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_owned())
}

/// The state letter and parent pid of `pid` (`/proc/<pid>/stat` fields 3 and 4).
pub fn state_and_parent(pid: i32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.to_owned();
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` is a live process (it exists and is not a zombie). A pid is identified with
/// the start time it had the first time this was asked, so a pid the kernel reuses for another
/// process (this machine wraps at 32768, and the suite spawns thousands) never looks alive.
pub fn alive(pid: i32) -> bool {
    static FIRST_SEEN: std::sync::Mutex<BTreeMap<i32, u64>> = std::sync::Mutex::new(BTreeMap::new());
    let Some(start) = start_ticks(pid) else { return false };
    let mut seen = FIRST_SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let first = *seen.entry(pid).or_insert(start);
    first == start && state_and_parent(pid).is_some_and(|(state, _)| state != "Z")
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.parse().ok()
}

/// Zombie children of `parent`: processes in state `Z` whose parent is `parent`.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| state_and_parent(pid).is_some_and(|(state, ppid)| state == "Z" && ppid == parent))
        .collect()
}

/// Prints a measurement a test makes (a duration, a count) on stderr: shown with
/// `--nocapture` (or when the test fails), for the figures a reviewer asks about.
#[allow(clippy::print_stderr)]
pub fn measured(what: std::fmt::Arguments<'_>) {
    eprintln!("measured: {what}");
}
