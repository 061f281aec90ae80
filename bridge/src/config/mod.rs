//! The bridge's configuration: one typed value, read once at startup and passed down.
//!
//! Two sources produce the same [`BridgeConfig`]: the operator's `.env` (strictly parsed and
//! validated by [`env`](mod@env)) and the private JSON file that `agent-bridge config render`
//! writes from it ([`load_json`]). Nothing else in the bridge reads environment variables or
//! files for settings.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[cfg(test)]
mod dotenv_fuzz;
pub mod embedded;
pub mod env;
pub mod example;
pub mod keys;
pub mod notify;
pub mod oauth;
pub mod reference;
mod refusals;
pub mod render;
mod report;
mod values;
mod workdirs;

/// Every setting the bridge runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// Where the bridge listens (`<SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR>/bridge.sock`).
    pub socket_path: PathBuf,
    /// SQLite store, result spool, instance lock (`SERVERFS_AGENT_BRIDGE_STATE_DIR`).
    pub state_dir: PathBuf,
    /// Writer-lease lock files, one per workdir (`SERVERFS_AGENT_LOCK_HOST_DIR`).
    pub lock_dir: PathBuf,
    /// The uid allowed to connect to the socket; `None` means the bridge's own uid.
    pub allowed_peer_uid: Option<u32>,
    /// The gid allowed to connect to the socket; `None` means the bridge's own gid.
    pub allowed_peer_gid: Option<u32>,
    /// Let the bridge run as uid 0 (`SERVERFS_AGENT_ALLOW_ROOT`); off by default.
    pub allow_root: bool,
    /// Offer the scripted `fake` runtime (`SERVERFS_AGENT_ENABLE_FAKE_RUNTIME`).
    pub enable_fake_runtime: bool,
    /// Let the fake runtime's `exec:` script run a shell command (`SERVERFS_AGENT_FAKE_EXEC`):
    /// the tests' hostile agent; off unless asked for (the quick start does not).
    #[serde(default)]
    pub fake_exec: bool,
    /// Lifecycle limits, frozen into every task's manifest.
    pub limits: Limits,
    /// How MCP callers are authenticated.
    pub mcp_auth: McpAuth,
    /// How `/mcp-oauth` callers are authenticated (`None`: that path is off). Configs rendered
    /// before it existed load without it.
    #[serde(default)]
    pub oauth: Option<oauth::OAuthConfig>,
    /// Outbound notifications and the board's public URL. Configs rendered before they existed
    /// load with none.
    #[serde(default)]
    pub notify: notify::NotifyConfig,
    /// The Codex CLI.
    pub codex: RuntimeBinary,
    /// The Claude Code CLI.
    pub claude: RuntimeBinary,
    /// The configured work directories, in slot order.
    pub workdirs: Vec<Workdir>,
    /// Where the operator board listens (`SERVERFS_BOARD_ADDR`, 127.0.0.1:7878); loopback
    /// only. Port 0 picks a free port (the tests do); `agent-bridge board token` prints the
    /// address actually bound. Configs rendered before the board existed load with the default.
    #[serde(default = "default_board_addr")]
    pub board_addr: std::net::SocketAddr,
    /// The Unix socket the board serves on instead of `board_addr` (`SERVERFS_BOARD_SOCKET`,
    /// unset: TCP), for an `ssh -L` forward on a shared host. Configs rendered before it
    /// existed load without it.
    #[serde(default)]
    pub board_socket: Option<PathBuf>,
    /// How much the daemon logs (`SERVERFS_LOG_LEVEL`, INFO). `AGENT_BRIDGE_LOG` in the
    /// environment, a full `tracing` filter, overrides it for one run. Configs rendered before
    /// the bridge read it load with INFO.
    #[serde(default)]
    pub log_level: LogLevel,
    /// How provider children are contained (`SERVERFS_AGENT_SANDBOX`,
    /// `SERVERFS_AGENT_SANDBOX_HIDE`). Configs rendered before the sandbox existed load with
    /// `auto` and nothing extra hidden.
    #[serde(default)]
    pub sandbox: SandboxSettings,
    /// `SERVERFS_AGENT_BRANCH_PREFIX`: what a worktree task's branch is named with, before its
    /// short id (`agent/`).
    #[serde(default = "default_branch_prefix")]
    pub branch_prefix: String,
    /// The rendered config file this bridge was started from (`serve --config`), hidden from
    /// tasks like the rest of the bridge's private files; set at start, never serialized.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

/// The branch prefix when none is set.
pub fn default_branch_prefix() -> String {
    "agent/".to_owned()
}

/// Whether `prefix` followed by a short task id is a branch name git accepts (the rules of
/// `git check-ref-format --branch`, for the characters a prefix can bring), or why not.
pub fn check_branch_prefix(prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}0123456789ab");
    let bad_char = name.chars().find(|c| c.is_control() || " ~^:?*[\\".contains(*c) || *c == '\u{7f}');
    if prefix.is_empty() {
        return Err("is empty: a worktree task's branch needs a prefix, e.g. agent/".to_owned());
    }
    if prefix.len() > 64 {
        return Err("is longer than 64 bytes".to_owned());
    }
    if let Some(c) = bad_char {
        return Err(format!("contains {c:?}, which git refuses in a branch name"));
    }
    if name.starts_with('-')
        || name.starts_with('/')
        || name.contains("//")
        || name.contains("..")
        || name.contains("@{")
    {
        return Err("is not a valid start of a git branch name (no leading - or /, no //, .. or @{)".to_owned());
    }
    if name.split('/').any(|part| part.starts_with('.') || part.ends_with(".lock")) {
        return Err("has a part that starts with . or ends with .lock, which git refuses".to_owned());
    }
    if name == "HEAD" || prefix.starts_with("refs/") {
        return Err("would name a ref git treats specially".to_owned());
    }
    Ok(())
}

/// `SERVERFS_AGENT_SANDBOX`: whether every provider child runs in its own namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// The sandbox where the machine allows it; otherwise uncontained, with a warning.
    #[default]
    Auto,
    /// No task starts without the sandbox (`AGENT_SANDBOX_UNAVAILABLE`).
    Required,
    /// Never the sandbox: the marker and subreaper proof alone (the first wave's behaviour).
    Off,
}

impl SandboxMode {
    /// Parses the `.env` spelling (case-insensitive).
    pub fn parse(text: &str) -> Option<SandboxMode> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Some(SandboxMode::Auto),
            "required" => Some(SandboxMode::Required),
            "off" => Some(SandboxMode::Off),
            _ => None,
        }
    }

    /// The `.env` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Required => "required",
            SandboxMode::Off => "off",
        }
    }
}

/// `SERVERFS_AGENT_EGRESS`: where a sandboxed task's network traffic may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressMode {
    /// A network namespace of its own, whose only way out is the bridge's egress proxy to the
    /// hosts its allowance names.
    #[default]
    Proxy,
    /// The host's network, shared (the first waves' behaviour): an explicit opt-in.
    Host,
    /// No network at all.
    None,
}

impl EgressMode {
    /// Parses the `.env` spelling (case-insensitive).
    pub fn parse(text: &str) -> Option<EgressMode> {
        match text.to_ascii_lowercase().as_str() {
            "proxy" => Some(EgressMode::Proxy),
            "host" => Some(EgressMode::Host),
            "none" => Some(EgressMode::None),
            _ => None,
        }
    }

    /// The `.env` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EgressMode::Proxy => "proxy",
            EgressMode::Host => "host",
            EgressMode::None => "none",
        }
    }
}

/// The task sandbox's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// `SERVERFS_AGENT_SANDBOX` (`auto`).
    #[serde(default)]
    pub mode: SandboxMode,
    /// `SERVERFS_AGENT_SANDBOX_HIDE`: more absolute paths replaced by empty directories.
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    /// `SERVERFS_AGENT_SANDBOX_READ`: paths every task may read.
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// `SERVERFS_AGENT_SANDBOX_WRITE`: paths every task may read and write.
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// `SERVERFS_AGENT_EGRESS` (`proxy`).
    #[serde(default)]
    pub egress: EgressMode,
    /// `SERVERFS_AGENT_EGRESS_ALLOW`: hosts every task may reach, checked rules.
    #[serde(default)]
    pub egress_allow: Vec<String>,
}

/// `SERVERFS_LOG_LEVEL`: the daemon's log level, spelled as ServerFS spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LogLevel {
    /// Everything, including each socket call.
    Trace,
    /// Diagnostics.
    Debug,
    /// Lifecycle events (the default).
    #[default]
    Info,
    /// Problems only (`WARN` is read as well).
    #[serde(alias = "WARN")]
    Warning,
    /// Failures only.
    Error,
}

impl LogLevel {
    /// Reads `TRACE`, `DEBUG`, `INFO`, `WARN`/`WARNING` or `ERROR`, in any case.
    pub fn parse(text: &str) -> Option<LogLevel> {
        match text.to_ascii_uppercase().as_str() {
            "TRACE" => Some(LogLevel::Trace),
            "DEBUG" => Some(LogLevel::Debug),
            "INFO" => Some(LogLevel::Info),
            "WARN" | "WARNING" => Some(LogLevel::Warning),
            "ERROR" => Some(LogLevel::Error),
            _ => None,
        }
    }

    /// The name as the `.env` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "TRACE",
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warning => "WARNING",
            LogLevel::Error => "ERROR",
        }
    }

    /// The `tracing` filter directive.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// The board's default address.
pub fn default_board_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 7878))
}

/// Lifecycle limits and the result spool threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// `SERVERFS_AGENT_TASK_TIMEOUT_SECONDS` (7200): a task's whole lifetime.
    pub task_timeout_seconds: u64,
    /// `SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS` (1800): one unanswered approval/question.
    pub interaction_timeout_seconds: u64,
    /// `SERVERFS_AGENT_MAX_ACTIVE_TASKS` (4): non-terminal tasks at once, all callers together.
    pub max_active_tasks: u32,
    /// `SERVERFS_AGENT_MAX_EVENTS_PER_TASK` (10000): provider events kept per task; more are
    /// dropped and counted (a config rendered before this key existed loads with the default).
    #[serde(default = "default_max_events_per_task")]
    pub max_events_per_task: u32,
    /// `SERVERFS_AGENT_TASK_RETENTION_HOURS` (168): how long a terminal task is kept.
    pub retention_hours: u64,
    /// `SERVERFS_AGENT_AUDIT_RETENTION_DAYS` (90): how long an audit row is kept (a config
    /// rendered before this key existed loads with the default).
    #[serde(default = "default_audit_retention_days")]
    pub audit_retention_days: u64,
    /// `SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES` (262144): larger results are spooled.
    pub result_spool_threshold_bytes: u64,
    /// `SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS` (unset = off): longest provider silence,
    /// not counting time spent waiting for a human.
    pub event_idle_timeout_seconds: Option<u64>,
    /// `SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS` (120): how long a provider may keep
    /// retrying its model service (no network, the service down) with nothing else happening
    /// before the task fails with `AGENT_RUNTIME_UNAVAILABLE` (a config rendered before this key
    /// existed loads with the default).
    #[serde(default = "default_provider_retry_timeout_seconds")]
    pub provider_retry_timeout_seconds: u64,
}

fn default_max_events_per_task() -> u32 {
    10_000
}

fn default_provider_retry_timeout_seconds() -> u64 {
    120
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            task_timeout_seconds: 7200,
            interaction_timeout_seconds: 1800,
            max_active_tasks: 4,
            max_events_per_task: default_max_events_per_task(),
            retention_hours: 168,
            audit_retention_days: default_audit_retention_days(),
            result_spool_threshold_bytes: 262_144,
            event_idle_timeout_seconds: None,
            provider_retry_timeout_seconds: default_provider_retry_timeout_seconds(),
        }
    }
}

/// The default of [`Limits::audit_retention_days`].
pub fn default_audit_retention_days() -> u64 {
    90
}

/// The largest result the bridge keeps (spooled); a larger one fails the task.
pub const MAX_SPOOLED_RESULT_BYTES: u64 = 8 * 1024 * 1024;

/// How callers on the `mcp` surface are identified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpAuth {
    /// `SERVERFS_MCP_AUTH`: `bearer` (API keys, the default) or `none` (tunnel mode).
    pub mode: McpAuthMode,
    /// `SERVERFS_MCP_TUNNEL_PRINCIPAL`: the principal every caller becomes in tunnel mode.
    pub tunnel_principal: String,
    /// `SERVERFS_MCP_TUNNEL_ROLE`: that principal's role.
    pub tunnel_role: Role,
}

impl Default for McpAuth {
    fn default() -> McpAuth {
        McpAuth { mode: McpAuthMode::Bearer, tunnel_principal: "tunnel".into(), tunnel_role: Role::Operator }
    }
}

/// See [`McpAuth::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpAuthMode {
    /// Every call needs `Authorization: Bearer <key>`.
    Bearer,
    /// Tunnel mode: no credential; every caller is the configured principal.
    None,
}

/// Caller roles, ordered: `viewer < operator < admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads tasks, events and results.
    Viewer,
    /// Also submits, answers, steers and cancels tasks.
    Operator,
    /// Also sees every principal's tasks and the audit log.
    Admin,
}

impl Role {
    /// The role's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Parses a role name, case-insensitively.
    pub fn parse(s: &str) -> Option<Role> {
        match s.to_ascii_lowercase().as_str() {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// Where a runtime's CLI lives and the home it keeps its sessions in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeBinary {
    /// Absolute path of the executable (`SERVERFS_CODEX_BIN` / `SERVERFS_CLAUDE_BIN`).
    pub bin: Option<PathBuf>,
    /// The runtime's home (`SERVERFS_CODEX_HOME` / `SERVERFS_CLAUDE_CONFIG_DIR`), stable across
    /// tasks so continuations resume.
    pub home: Option<PathBuf>,
}

/// A workdir's agent mode (`WORKDIR_NN_AGENT_MODE`, default `SERVERFS_AGENT_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentMode {
    /// No agent may run here.
    Disabled,
    /// Agents may run with the `review` profile only.
    Review,
    /// Agents may also run with the `workspace-write` profile.
    WorkspaceWrite,
}

impl AgentMode {
    /// The mode's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Disabled => "disabled",
            AgentMode::Review => "review",
            AgentMode::WorkspaceWrite => "workspace-write",
        }
    }
}

/// A runtime the bridge knows how to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeName {
    /// OpenAI Codex CLI (`codex app-server`).
    Codex,
    /// Claude Code (`claude -p` stream-json).
    Claude,
    /// The scripted test runtime.
    Fake,
}

impl RuntimeName {
    /// All runtimes, in name order.
    pub const ALL: [RuntimeName; 3] = [RuntimeName::Claude, RuntimeName::Codex, RuntimeName::Fake];

    /// The runtime's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeName::Codex => "codex",
            RuntimeName::Claude => "claude",
            RuntimeName::Fake => "fake",
        }
    }

    /// Parses a runtime name (exact, lower case).
    pub fn parse(s: &str) -> Option<RuntimeName> {
        match s {
            "codex" => Some(RuntimeName::Codex),
            "claude" => Some(RuntimeName::Claude),
            "fake" => Some(RuntimeName::Fake),
            _ => None,
        }
    }
}

/// One configured work directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workdir {
    /// The `NN` of `WORKDIR_NN_*` (1–99); names the lock file.
    pub slot: u8,
    /// The name callers use; never the host path.
    pub alias: String,
    /// The canonical absolute host path (never shown to callers).
    pub path: PathBuf,
    /// One line for callers.
    pub description: String,
    /// Whether the workdir is read-only (`WORKDIR_NN_READ_ONLY`, default true).
    pub read_only: bool,
    /// The effective agent mode.
    pub agent_mode: AgentMode,
    /// The runtimes allowed here (empty when the mode is `disabled`).
    pub runtimes: Vec<RuntimeName>,
    /// `WORKDIR_NN_SANDBOX_READ`: more paths this workdir's tasks may read.
    #[serde(default)]
    pub sandbox_read: Vec<PathBuf>,
    /// `WORKDIR_NN_SANDBOX_WRITE`: more paths this workdir's tasks may read and write.
    #[serde(default)]
    pub sandbox_write: Vec<PathBuf>,
    /// `WORKDIR_NN_EGRESS_ALLOW`: more hosts this workdir's tasks may reach.
    #[serde(default)]
    pub egress_allow: Vec<String>,
    /// `WORKDIR_NN_AGENT_ISOLATION`: where this workdir's writer tasks work by default.
    #[serde(default)]
    pub isolation: crate::model::Isolation,
}

/// Why a JSON config file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("the config file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Loads a config rendered by `agent-bridge config render` and re-checks its rules.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
pub fn load_json(path: &Path) -> Result<BridgeConfig, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: path.to_owned(), source })?;
    let config: BridgeConfig = serde_json::from_str(&text)
        .map_err(|e| LoadError::Invalid { path: path.to_owned(), message: e.to_string() })?;
    env::check_rules(&config)
        .map_err(|refusals| LoadError::Invalid { path: path.to_owned(), message: refusals.to_string() })?;
    Ok(config)
}

/// The socket path an empty `.env` gives (the CLI's default target).
pub fn default_socket_path() -> Result<PathBuf, env::Refusals> {
    let context = env::Context::current()?;
    env::from_pairs(&[], &context).map(|report| report.config.socket_path)
}

/// The spawn test hook, `AGENT_BRIDGE_TEST_SPAWN` (debug builds only; see
/// `provider::tether`): `None` when unset, else the hook or why it is refused.
#[cfg(debug_assertions)]
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
pub fn test_spawn_hook()
-> Option<Result<(crate::provider::tether::SpawnKind, crate::provider::tether::TestHook), String>> {
    let text = std::env::var_os("AGENT_BRIDGE_TEST_SPAWN")?;
    Some(text.to_str().ok_or_else(|| "not UTF-8".to_owned()).and_then(crate::provider::tether::parse_test_hook))
}

/// The bridge's own environment, captured once at start: a child's environment is decided
/// from it (`provider::env`), and nothing else reads the environment outside this module.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
pub fn process_environment() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().collect()
}
