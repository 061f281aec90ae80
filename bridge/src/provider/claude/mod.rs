//! The `claude` runtime: Claude Code driven as `claude -p` with stream-json on both pipes and
//! the control protocol's permission prompts on stdio, one child per task.
//!
//! Its config dir is the configured one (`CLAUDE_CONFIG_DIR`) or the operator's default
//! `~/.claude`: stable across tasks, so `--resume` finds the session. `--setting-sources ""`
//! keeps the operator's permission rules and hooks out of the bridge's tasks (every tool use
//! that Claude would ask about reaches the caller), and the environment switches off Claude's
//! non-essential network traffic (notes §2).
//!
//! Steering is not offered (`live_steer: false`): a user message written while a turn runs is
//! queued by the CLI as a *next* turn with its own `result` (notes §5.2), which is not steering
//! and would give a task two results.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::sync::mpsc;

use super::env::{BaseEnv, CLAUDE_PREFIXES, CLAUDE_QUIET};
use super::io;
use super::probe::{self, ProbeCache};
use super::process::{SpawnSpec, spawn};
use super::sandbox::Containment;
use super::tether::SpawnKind;
use super::{RuntimeInfo, Session, StartError, StartSpec};
use crate::config::RuntimeName;
use crate::error::code;
use crate::model::Profile;

mod driver;
pub mod map;
#[cfg(test)]
mod map_fuzz;
mod models;

/// The Claude Code runtime.
#[derive(Debug, Clone)]
pub struct ClaudeRuntime {
    bin: probe::Locator,
    home: Option<PathBuf>,
    base_env: BaseEnv,
    probe: Arc<ProbeCache>,
    containment: Containment,
    /// The last catalog `list_models` gave, and when.
    catalog: Arc<tokio::sync::Mutex<Option<(std::time::Instant, Value)>>>,
}

/// How long a listed catalog is reused.
const CATALOG_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// What every `claude` child of the bridge starts with: stream-json on both pipes, none of the
/// operator's settings, and only the MCP servers the bridge names (none): the operator's own
/// never reach a task.
const BASE_ARGS: &[&str] = &[
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--setting-sources",
    "",
    "--strict-mcp-config",
];

/// The command line for a turn.
pub fn args(spec: &StartSpec) -> Vec<OsString> {
    let mut args: Vec<OsString> = BASE_ARGS
        .iter()
        .chain(&["--permission-prompt-tool", "stdio", "--permission-mode", "default"])
        .map(OsString::from)
        .collect();
    if spec.profile == Profile::Review {
        // The model is not even offered the editing tools; anything else that would change
        // something is refused when Claude asks (plan mode is not a block: notes §5.4).
        args.push(OsString::from("--disallowedTools"));
        args.push(OsString::from("Write,Edit,MultiEdit,NotebookEdit"));
    }
    if let Some(session) = &spec.resume_session {
        args.push(OsString::from("--resume"));
        args.push(OsString::from(session));
    }
    if let Some(model) = &spec.model {
        args.push(OsString::from("--model"));
        args.push(OsString::from(model));
    }
    args
}

/// Claude Code's own endpoints, as its environment `env` names them: `ANTHROPIC_BASE_URL`
/// when set, and Anthropic's API and sign-in hosts (an OAuth login refreshes its token there).
pub(super) fn endpoints(env: &[(OsString, OsString)]) -> Vec<crate::egress::Rule> {
    let mut rules: Vec<crate::egress::Rule> =
        ["api.anthropic.com", "console.anthropic.com", "claude.ai", "platform.claude.com"]
            .into_iter()
            .filter_map(|h| crate::egress::Rule::parse(&format!("{h}:443")).ok())
            .collect();
    if let Some((_, url)) = env.iter().find(|(k, _)| k == "ANTHROPIC_BASE_URL") {
        rules.extend(url.to_str().and_then(crate::egress::Rule::for_url));
    }
    rules
}

impl ClaudeRuntime {
    /// From where its executable is and its config dir (`SERVERFS_CLAUDE_CONFIG_DIR`).
    pub fn new(
        bin: probe::Locator,
        home: Option<PathBuf>,
        base_env: BaseEnv,
        containment: Containment,
    ) -> ClaudeRuntime {
        ClaudeRuntime { bin, home, base_env, probe: Arc::default(), containment, catalog: Arc::default() }
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        let mut env = self.base_env.for_child(CLAUDE_PREFIXES);
        let set: Vec<(OsString, OsString)> = CLAUDE_QUIET
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .chain(self.home.iter().map(|h| (OsString::from("CLAUDE_CONFIG_DIR"), h.clone().into_os_string())))
            .collect();
        env.retain(|(k, _)| !set.iter().any(|(s, _)| s == k));
        env.extend(set);
        env
    }

    /// Availability, version and login (cached briefly).
    pub async fn info(&self) -> RuntimeInfo {
        let missing = self.bin.missing("npm install -g @anthropic-ai/claude-code", "SERVERFS_CLAUDE_BIN");
        let mut info = RuntimeInfo::unavailable(RuntimeName::Claude, probe::Reason::NotInstalled, &missing);
        info.model_override = true;
        let Some(bin) = self.bin.resolve().await else { return info };
        info.model_discovery = "runtime_catalog";
        let probed = self
            .probe
            .get(&bin, async || {
                probe::version_and_login(&bin, self.env(), probe::parse_claude, async || self.logged_out(&bin).await)
                    .await
            })
            .await;
        info.apply(probed);
        info
    }

    /// Why Claude Code cannot work for want of a login, when `claude auth status` says so (it
    /// reads its credentials and environment; no inference); `None` when it is logged in or
    /// cannot tell (a CLI without the command).
    async fn logged_out(&self, bin: &std::path::Path) -> Option<String> {
        let (out, _) = probe::output(bin, &["auth", "status"], self.env(), std::path::Path::new("/"), 64 * 1024)
            .await
            .map_err(|why| tracing::info!(cause = %why, "claude could not tell whether it is logged in"))
            .ok()?;
        map::why_logged_out(&out)
    }

    /// Spawns `claude -p …` in the task's cwd; the handshake and the prompt go through the
    /// session's driver.
    pub async fn start(&self, spec: StartSpec) -> Result<Session, StartError> {
        let bin = self.bin.resolve().await.ok_or_else(|| StartError::unavailable("claude"))?;
        let env = self.env();
        let env_for_rules = env.clone();
        let home = super::env::runtime_home(&env, "CLAUDE_CONFIG_DIR", ".claude");
        if let Some(home) = &home {
            super::env::ensure_home(home).await;
        }
        let spawned = spawn(SpawnSpec {
            program: bin,
            args: args(&spec),
            cwd: spec.cwd.clone(),
            env,
            task_id: spec.task_id.clone(),
            sandbox: Some(self.containment.clone()),
            workdir: spec.workdir_view(),
            git: spec.git.clone(),
            read: Vec::new(),
            write: home.into_iter().collect(),
            egress: Some(endpoints(&env_for_rules)),
            kind: SpawnKind::Agent,
            hold: spec.hold.clone(),
            beside: false,
        })
        .await
        .map_err(|e| StartError { code: code::AGENT_PROVIDER_ERROR, message: format!("cannot start claude: {e}") })?;
        let (lines_tx, lines) = mpsc::channel(256);
        let (outbox, outbox_rx) = mpsc::unbounded_channel();
        let reader = io::spawn_reader(BufReader::new(spawned.stdout), lines_tx);
        let writer = io::spawn_writer(spawned.stdin, outbox_rx);
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        let (drain, stderr_done) = io::spawn_stderr(spawned.stderr, Arc::clone(&stderr_tail));
        let (event_tx, events) = mpsc::channel(256);
        let (commands, command_rx) = mpsc::channel(16);
        let driver = driver::Driver { lines, outbox, commands: command_rx, events: event_tx, stderr_done, spec };
        let run = super::io::spawn(driver.run());
        Ok(Session {
            events,
            commands,
            process: spawned.process,
            io_tasks: vec![reader, writer, drain, run],
            stderr_tail,
        })
    }

    /// The model catalog through Claude Code's `list_models` control request (no inference;
    /// cached for a minute).
    pub async fn models(&self) -> Value {
        let mut catalog = self.catalog.lock().await;
        if let Some((at, listed)) = catalog.as_ref()
            && at.elapsed() < CATALOG_TTL
        {
            return listed.clone();
        }
        let unavailable = |detail: String| {
            json!({ "runtime": "claude", "status": "unavailable", "scope": "none", "models": [],
                    "detail": io::without_host_paths(&detail) })
        };
        let info = self.info().await;
        if !info.available {
            return unavailable(info.detail.unwrap_or_default());
        }
        let listed = match self.list().await {
            Ok(models) => json!({
                "runtime": "claude", "status": "ok", "scope": "runtime_catalog", "source": "claude_list_models",
                "version": info.version, "models": models,
            }),
            Err(why) => return unavailable(format!("claude could not list its models: {why}")),
        };
        *catalog = Some((std::time::Instant::now(), listed.clone()));
        listed
    }
}
