//! The `agent-bridge` command line as an operator runs it: the real executable, temporary
//! `.env` files and directories, exit codes and what lands on stdout and stderr.
//!
//! This is the bridge crate's one integration-test binary. Because it exists, `cargo test`
//! builds `target/<profile>/agent-bridge`, which the workspace's end-to-end suite runs.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the CLI's tests run the binary and write its files: the daemon's rules do not apply to them"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

mod config;
mod example;
mod render;
mod serve;
mod usage;

/// The executable under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_agent-bridge")
}

/// A private temporary directory with two workdirs and a valid `.env` to start from.
pub struct Fixture {
    _dir: TempDir,
    /// The canonical temporary directory.
    pub root: PathBuf,
}

impl Fixture {
    /// A fresh fixture.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Fixture {
        let dir = tempfile::Builder::new().prefix("ab-cli-").tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        std::fs::create_dir_all(root.join("repo")).expect("repo");
        std::fs::create_dir_all(root.join("docs")).expect("docs");
        Fixture { _dir: dir, root }
    }

    /// Where the good `.env` puts the socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("run/bridge.sock")
    }

    /// Where the good `.env` puts the state.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }

    /// The valid `.env` as `(key, value)` pairs.
    pub fn good_pairs(&self) -> Vec<(String, String)> {
        let root = self.root.display();
        let mut pairs: Vec<(String, String)> = [
            ("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR", format!("{root}/run")),
            ("SERVERFS_AGENT_LOCK_HOST_DIR", format!("{root}/locks")),
            ("SERVERFS_AGENT_BRIDGE_STATE_DIR", format!("{root}/state")),
            ("SERVERFS_AGENT_ENABLE_FAKE_RUNTIME", "true".into()),
            ("SERVERFS_AGENT_MAX_ACTIVE_TASKS", "3".into()),
            ("WORKDIR_01_ALIAS", "repo".into()),
            ("WORKDIR_01_PATH", format!("{root}/repo")),
            ("WORKDIR_01_DESCRIPTION", "A writable test repository".into()),
            ("WORKDIR_01_READ_ONLY", "false".into()),
            ("WORKDIR_01_AGENT_MODE", "workspace-write".into()),
            ("WORKDIR_01_AGENT_RUNTIMES", "fake".into()),
            ("WORKDIR_02_ALIAS", "docs".into()),
            ("WORKDIR_02_PATH", format!("{root}/docs")),
            ("WORKDIR_02_READ_ONLY", "true".into()),
            ("WORKDIR_02_AGENT_MODE", "review".into()),
            ("WORKDIR_02_AGENT_RUNTIMES", "fake".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        // Tests may run as root (CI containers); the bridge refuses root unless told.
        if nix::unistd::geteuid().is_root() {
            pairs.push(("SERVERFS_AGENT_ALLOW_ROOT".into(), "true".into()));
        }
        pairs
    }

    /// The valid `.env` with some keys set to other values (or added), as text.
    pub fn env_with(&self, changes: &[(&str, &str)]) -> String {
        let mut pairs = self.good_pairs();
        for (key, value) in changes {
            match pairs.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1 = (*value).to_owned(),
                None => pairs.push(((*key).to_owned(), (*value).to_owned())),
            }
        }
        pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// Writes `text` to `name` in the temporary directory.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root.join(name);
        std::fs::write(&path, text).expect("write a file");
        path
    }

    /// The command, with `HOME` inside the temporary directory so that no default path
    /// reaches the real home.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args).env("HOME", &self.root).env_remove("AGENT_BRIDGE_LOG").stdin(Stdio::null());
        cmd
    }

    /// Runs the command to its end (bounded: 60 s).
    pub fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.command(args), Duration::from_secs(60))
    }
}

/// Runs `cmd` and returns its output; kills it and fails the test if it has not exited
/// `within` (a command that should end must not hang the suite).
pub fn run_bounded(mut cmd: Command, within: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start agent-bridge");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(output) => output.expect("wait for agent-bridge"),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("{cmd:?} did not exit within {} s", within.as_secs());
        }
    }
}

/// Stdout and stderr as text.
pub fn texts(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts the exit code, with both streams in the failure message.
pub fn assert_exit(out: &Output, code: i32) {
    let (stdout, stderr) = texts(out);
    assert_eq!(out.status.code(), Some(code), "exit status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
}

/// Polls (bounded) until `done()` holds.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {} s", within.as_secs());
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// The mode bits of a path.
pub fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").permissions().mode() & 0o777
}
