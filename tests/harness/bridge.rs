//! The bridge process under test: its private temporary directory and `.env` ([`Options`],
//! [`base_env`]), starting it and waiting until it answers, stopping or crashing it, and
//! running its CLI against it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::bridge_bin;

/// How to configure a test bridge.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra `.env` lines (`KEY=VALUE`); one naming a key of [`base_env`] replaces it.
    pub env: Vec<String>,
    /// The executable to run instead of [`bridge_bin`] (benchmarks pass cargo's own path).
    pub bin: Option<PathBuf>,
    /// Extra process environment for the bridge (what its provider children may inherit).
    pub vars: Vec<(String, String)>,
    /// Start the bridge as an operator's shell would: a session leader whose controlling
    /// terminal is a pty the test holds the other end of ([`TestBridge::terminal`]).
    pub terminal: bool,
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

    /// Starts the bridge with a controlling terminal ([`Options::terminal`]).
    pub fn in_terminal(mut self) -> Options {
        self.terminal = true;
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
    pub(crate) bin: PathBuf,
    pub(crate) vars: Vec<(String, String)>,
    pub(crate) child: Option<Child>,
    /// The master side of the bridge's controlling terminal, when it has one.
    pub terminal: Option<std::os::fd::OwnedFd>,
    wants_terminal: bool,
}

/// The `.env` every test bridge starts from.
pub fn base_env(root: &Path) -> String {
    let mut lines = vec![
        format!("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={}", root.join("run").display()),
        format!("SERVERFS_AGENT_LOCK_HOST_DIR={}", root.join("locks").display()),
        format!("SERVERFS_AGENT_BRIDGE_STATE_DIR={}", root.join("state").display()),
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true".to_owned(),
        // The tests' hostile agent: `exec:` runs a shell command inside the task.
        "SERVERFS_AGENT_FAKE_EXEC=true".to_owned(),
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
        // An extra line naming a key of the base replaces it (the `.env` refuses a key twice).
        let key = |line: &str| line.split_once('=').map(|(k, _)| k.trim().to_owned());
        let extra: Vec<Option<String>> = options.env.iter().map(|l| key(l)).collect();
        let mut env: String =
            base_env(&root).lines().filter(|l| !extra.contains(&key(l))).map(|l| format!("{l}\n")).collect();
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
            terminal: None,
            wants_terminal: options.terminal,
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
        // With a terminal: util-linux's `setsid --ctty` makes the bridge (the same process: it
        // execs) a session leader whose controlling terminal is its stdin, the pty's slave.
        let (mut command, stdin) = if self.wants_terminal {
            let pty = nix::pty::openpty(None, None).expect("a pty");
            self.terminal = Some(pty.master);
            let mut command = Command::new("setsid");
            command.arg("--ctty").arg(&self.bin);
            (command, Stdio::from(pty.slave))
        } else {
            (Command::new(&self.bin), Stdio::null())
        };
        let child = command
            .arg("serve")
            .arg("--env-file")
            .arg(&self.env_file)
            .env("AGENT_BRIDGE_LOG", "debug")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(stdin)
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

    /// The bridge's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bridge.log")).unwrap_or_default()
    }

    /// The bridge process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the bridge process of this harness is running (not crashed or stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Runs the CLI against this bridge.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin).args(args).arg("--socket").arg(&self.socket).output().expect("run the CLI")
    }

    /// Runs the CLI with this bridge's `.env` (`--env-file`) instead of `--socket`: for the
    /// commands that need the configuration itself (`doctor`), or that must find the socket
    /// through it.
    pub fn cli_env(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin).args(args).arg("--env-file").arg(&self.env_file).output().expect("run the CLI")
    }

    /// Stops the bridge with SIGTERM and waits for it; then no sandbox of it may be left
    /// (see [`TestBridge::sandboxes_left`]).
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the bridge is running");
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let status =
            tokio::task::spawn_blocking(move || child.wait().expect("wait for the bridge")).await.expect("join");
        let left = tokio::task::spawn_blocking({
            let root = self.root();
            move || sandboxes_left(&root)
        })
        .await
        .expect("join");
        assert!(left.is_empty(), "sandboxes of this bridge outlived its orderly stop (now killed): {left:#?}");
        status
    }

    /// The bwrap processes of this bridge's sandboxes that are still there once they had a
    /// moment (5 s) to go; those found are killed, so that no test leaves one to the next.
    pub fn sandboxes_left(&self) -> Vec<(i32, String)> {
        sandboxes_left(&self.root())
    }

    /// Kills the bridge with SIGKILL (a crash) and waits for it.
    pub async fn crash(&mut self) {
        let mut child = self.child.take().expect("the bridge is running");
        let _ = child.kill();
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    }
}

impl Drop for TestBridge {
    /// Stops the bridge in order (SIGTERM, then SIGKILL after 30 s), then fails the test when
    /// a sandbox of it is left (each one lived until the machine rebooted).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let Ok(root) = self.dir.path().canonicalize() else { return };
        let left = sandboxes_left(&root);
        if !left.is_empty() && !std::thread::panicking() {
            panic!("sandboxes of this test bridge outlived it (now killed): {left:#?}\n{}", self.log());
        }
    }
}

/// The bwrap processes of the bridge living under `root` still there after up to 5 s; those
/// found are killed.
fn sandboxes_left(root: &Path) -> Vec<(i32, String)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut left = crate::procs::sandboxes_under(root);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left = crate::procs::sandboxes_under(root);
    }
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    left
}
