//! The real CLIs under test: where the pinned `@openai/codex` and `@anthropic-ai/claude-code`
//! are installed (`.ci/install-clis` puts them in `.runtimes/` at the workspace root), and a
//! bridge configured to run them against a scripted model server on 127.0.0.1.
//!
//! In CI (`CI=true`) a missing CLI fails the test; elsewhere the test is skipped, loudly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::model::{ModelServer, messages, responses};
use crate::{Options, TestBridge};

/// The pinned Codex CLI version (`.ci/install-clis` installs it; the previous pin, 0.169.0, is
/// tested too: `.ci/test` runs the real-CLI tests again with `AGENT_BRIDGE_TEST_CODEX_BIN` and
/// `AGENT_BRIDGE_TEST_CODEX_VERSION` naming it).
pub const CODEX_VERSION: &str = "0.171.0";
/// The pinned Claude Code version (the previous pin, 2.1.328, likewise).
pub const CLAUDE_VERSION: &str = "2.1.332";

/// The Codex version under test: the pin, or `AGENT_BRIDGE_TEST_CODEX_VERSION`.
pub fn codex_version() -> String {
    std::env::var("AGENT_BRIDGE_TEST_CODEX_VERSION").unwrap_or_else(|_| CODEX_VERSION.to_owned())
}

/// The Claude Code version under test: the pin, or `AGENT_BRIDGE_TEST_CLAUDE_VERSION`.
pub fn claude_version() -> String {
    std::env::var("AGENT_BRIDGE_TEST_CLAUDE_VERSION").unwrap_or_else(|_| CLAUDE_VERSION.to_owned())
}
/// The variable naming the Codex provider key in the scripted `config.toml`.
pub const CODEX_KEY_VAR: &str = "CODEX_SCRIPTED_API_KEY";

/// A real CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// `@openai/codex`.
    Codex,
    /// `@anthropic-ai/claude-code`.
    Claude,
}

impl Cli {
    /// The runtime's name (and its command's).
    pub fn name(self) -> &'static str {
        match self {
            Cli::Codex => "codex",
            Cli::Claude => "claude",
        }
    }
}

/// Where the CLI is: `AGENT_BRIDGE_TEST_CODEX_BIN` / `AGENT_BRIDGE_TEST_CLAUDE_BIN`, else the
/// workspace's `.runtimes/` install. For Codex this is the npm launcher (`bin/codex.js`): the
/// bridge must find the native binary itself.
pub fn installed(cli: Cli) -> Option<PathBuf> {
    let var = match cli {
        Cli::Codex => "AGENT_BRIDGE_TEST_CODEX_BIN",
        Cli::Claude => "AGENT_BRIDGE_TEST_CLAUDE_BIN",
    };
    if let Some(path) = std::env::var_os(var) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.join(".runtimes/node_modules");
    let path = match cli {
        Cli::Codex => root.join("@openai/codex/bin/codex.js"),
        Cli::Claude => root.join("@anthropic-ai/claude-code/bin/claude.exe"),
    };
    path.is_file().then_some(path)
}

/// The CLI, or `None` after saying loudly why the test is skipped; in CI a missing CLI fails.
#[allow(clippy::print_stderr)]
pub fn require(cli: Cli) -> Option<PathBuf> {
    let found = installed(cli);
    if found.is_none() {
        let why = format!(
            "the {} CLI is not installed: run `.ci/install-clis` (or set AGENT_BRIDGE_TEST_{}_BIN)",
            cli.name(),
            cli.name().to_uppercase()
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED: {why}");
    }
    found
}

/// A fresh directory outside `/tmp` and `$TMPDIR`: under the build's target directory, or
/// under `$HOME` when the checkout itself lies in a temporary directory. Removed on drop.
pub fn outside_tmp(prefix: &str) -> TempDir {
    let temporary: Vec<PathBuf> =
        [Some(PathBuf::from("/tmp")), std::env::var_os("TMPDIR").map(Into::into)].into_iter().flatten().collect();
    // The test binary lives in target/<profile>/deps.
    let target_tmp = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.parent()?.parent()?.join("tmp")));
    let candidates = [target_tmp, std::env::var_os("HOME").map(Into::into)];
    let base = candidates
        .into_iter()
        .flatten()
        .find(|c| !temporary.iter().any(|t| c.starts_with(t)))
        .expect("neither the target directory nor $HOME lies outside /tmp and $TMPDIR");
    std::fs::create_dir_all(&base).expect("create the base directory");
    tempfile::Builder::new().prefix(prefix).tempdir_in(base).expect("a directory outside /tmp")
}

/// A bridge whose workdir `ws` (slot 03, workspace-write) runs a real CLI against a scripted
/// model server.
pub struct RealBridge {
    /// The bridge.
    pub b: TestBridge,
    /// The scripted model server.
    pub server: ModelServer,
    /// The workdir `ws`.
    pub ws: PathBuf,
    /// The CLI's home (`CODEX_HOME` / `CLAUDE_CONFIG_DIR`).
    pub cli_home: PathBuf,
    /// Which CLI.
    pub cli: Cli,
    _dir: TempDir,
}

impl RealBridge {
    /// A bridge running the real `cli`, or `None` when it is not installed (outside CI).
    /// `extra` adds `.env` lines.
    pub async fn start(cli: Cli, extra: &[&str]) -> Option<RealBridge> {
        RealBridge::start_with_vars(cli, extra, &[]).await
    }

    /// [`RealBridge::start`] with more variables in the bridge's environment.
    pub async fn start_with_vars(cli: Cli, extra: &[&str], vars: &[(&str, &str)]) -> Option<RealBridge> {
        let bin = require(cli)?;
        RealBridge::start_inner(cli, Some(&bin), extra, vars).await
    }

    /// [`RealBridge::start`] from `base` options (a benchmark's own bridge executable, its
    /// variables).
    pub async fn start_on(base: Options, cli: Cli, extra: &[&str]) -> Option<RealBridge> {
        let cli_bin = require(cli)?;
        RealBridge::start_from(base, cli, Some(&cli_bin), extra, &[]).await
    }

    /// A bridge configured with no executable for `cli` (neither `SERVERFS_CODEX_BIN` nor
    /// `SERVERFS_CLAUDE_BIN`): it looks for the CLI on its `PATH`, which is `path` (give it a
    /// `PATH` in `vars`). `None` when the CLI is not installed here (outside CI), since a test
    /// of finding it needs it.
    pub async fn start_unconfigured(cli: Cli, extra: &[&str], vars: &[(&str, &str)]) -> Option<RealBridge> {
        require(cli)?;
        RealBridge::start_inner(cli, None, extra, vars).await
    }

    async fn start_inner(cli: Cli, bin: Option<&Path>, extra: &[&str], vars: &[(&str, &str)]) -> Option<RealBridge> {
        RealBridge::start_from(Options::default(), cli, bin, extra, vars).await
    }

    async fn start_from(
        base: Options,
        cli: Cli,
        bin: Option<&Path>,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Option<RealBridge> {
        // Outside /tmp: Codex's own sandbox (with Debian's bwrap, which CI installs for the
        // bridge's) does not show a CODEX_HOME under /tmp to its helper, and an operator's
        // homes are not there either.
        let dir = outside_tmp("ab-cli-");
        let root = dir.path().canonicalize().expect("canonical");
        let (ws, cli_home, home) = (root.join("ws"), root.join("cli-home"), root.join("home"));
        for d in [&ws, &cli_home, &home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let server = match cli {
            Cli::Codex => responses::start().await,
            Cli::Claude => messages::start().await,
        };
        let mut options = base
            .with("WORKDIR_03_ALIAS=ws")
            .with(&format!("WORKDIR_03_PATH={}", ws.display()))
            .with("WORKDIR_03_READ_ONLY=false")
            .with("WORKDIR_03_AGENT_MODE=workspace-write")
            .with(&format!("WORKDIR_03_AGENT_RUNTIMES={}", cli.name()))
            .var("HOME", &home.display().to_string());
        options = match cli {
            Cli::Codex => {
                std::fs::write(cli_home.join("config.toml"), responses::codex_config(&server, CODEX_KEY_VAR))
                    .expect("config.toml");
                if let Some(bin) = bin {
                    options = options.with(&format!("SERVERFS_CODEX_BIN={}", bin.display()));
                }
                options.with(&format!("SERVERFS_CODEX_HOME={}", cli_home.display())).var(CODEX_KEY_VAR, "scripted-key")
            }
            Cli::Claude => match bin {
                Some(bin) => options.with(&format!("SERVERFS_CLAUDE_BIN={}", bin.display())),
                None => options,
            }
            .with(&format!("SERVERFS_CLAUDE_CONFIG_DIR={}", cli_home.display()))
            .var("ANTHROPIC_BASE_URL", &server.url())
            .var("ANTHROPIC_API_KEY", "scripted-key"),
        };
        for line in extra {
            options = options.with(line);
        }
        for (name, value) in vars {
            options = options.var(name, value);
        }
        let b = TestBridge::start_with(options).await;
        Some(RealBridge { b, server, ws, cli_home, cli, _dir: dir })
    }

    /// Submits a task in `ws` on this CLI; `args` may override anything.
    pub async fn submit_with(&self, args: Value) -> String {
        let mut full = json!({ "runtime": self.cli.name(), "workdir": "ws" });
        let Value::Object(extra) = args else { panic!("arguments must be an object") };
        for (k, v) in extra {
            full[k] = v;
        }
        let v = self.b.call("submit_agent_task", full.clone()).await.unwrap_or_else(|e| panic!("submit {full}: {e:?}"));
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// Submits `prompt`.
    pub async fn submit(&self, prompt: &str) -> String {
        self.submit_with(json!({ "prompt": prompt })).await
    }

    /// Waits until the task waits for a human; returns the request id and payload.
    pub async fn pending(&self, task_id: &str) -> (String, Value) {
        let t = self.b.wait_for(task_id, |t| t["pending_request"].is_object() || t["terminal"] == true).await;
        assert!(t["pending_request"].is_object(), "the task ended instead of asking: {t:#}\n{}", self.b.log());
        let req = &t["pending_request"];
        (req["request_id"].as_str().expect("request_id").to_owned(), req["payload"].clone())
    }

    /// `respond_agent_approval`.
    pub async fn respond(&self, task_id: &str, request_id: &str, decision: &str) -> Value {
        self.b
            .call(
                "respond_agent_approval",
                json!({ "task_id": task_id, "request_id": request_id, "decision": decision }),
            )
            .await
            .unwrap_or_else(|e| panic!("respond {decision}: {e:?}"))
    }

    /// Waits until the task is terminal and its workdir is free again (lease and guard).
    pub async fn finish(&self, task_id: &str) -> Value {
        let t = self.b.wait_terminal(task_id).await;
        self.b.wait_released(task_id, 3).await;
        t
    }

    /// Waits until no process carries the task's marker (bounded).
    pub async fn no_survivors(&self, task_id: &str, within: Duration) {
        crate::poll_until(&format!("no process of {task_id} survives"), within, || {
            crate::marker_pids(task_id).is_empty()
        })
        .await;
    }

    /// The pids carrying the task's marker whose executable is named `name`.
    pub fn marked(&self, task_id: &str, name: &str) -> Vec<i32> {
        crate::marker_pids(task_id)
            .into_iter()
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe"))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .is_some_and(|n| n == name || n.starts_with(&format!("{name} ")))
            })
            .collect()
    }
}
