//! `.env` → [`BridgeConfig`]: strict validation that reports every problem at once.
//!
//! [`from_env_file`] reads and parses the operator's `.env`, [`from_pairs`] validates parsed
//! pairs in an explicit [`Context`] (so tests do not depend on the real home directory), and
//! [`check_rules`] re-checks a config loaded from JSON. Keys outside the catalog in
//! [`super::keys`] are refused when they look like ours (`SERVERFS_*`, `WORKDIR_*`) and listed
//! as ignored otherwise. No message ever shows the value of a secret-looking key.

use std::collections::HashMap;
use std::path::Path;

use bridge_envfile::Entry;

use super::RuntimeBinary;
use super::keys::{self, Owner};
pub use super::refusals::{Refusal, Refusals};
pub use super::report::{EnvReport, IgnoredKey, IgnoredKind, OtherSettings};
pub use super::values::Context;
use super::values::{MAX_HOURS, MAX_SECONDS, Reader, shown};
use super::workdirs::{self, GlobalPolicy};
use super::{
    BridgeConfig, EgressMode, Limits, LogLevel, MAX_SPOOLED_RESULT_BYTES, McpAuth, McpAuthMode, Role, SandboxMode,
    SandboxSettings,
};

/// Reads, parses and validates a `.env` file in the running process's [`Context`].
pub fn from_env_file(path: &Path) -> Result<EnvReport, Refusals> {
    let entries = read_entries(path)?;
    from_pairs(&entries, &Context::current()?)
}

/// Reads, parses and validates a `.env` file in an explicit context.
pub fn from_env_file_with(path: &Path, context: &Context) -> Result<EnvReport, Refusals> {
    from_pairs(&read_entries(path)?, context)
}

/// Reads and parses a `.env` file; every syntax error becomes a refusal.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
fn read_entries(path: &Path) -> Result<Vec<Entry>, Refusals> {
    let bytes =
        std::fs::read(path).map_err(|e| Refusals::single(None, format!("cannot read {}: {e}", path.display())))?;
    bridge_envfile::parse(&bytes).map_err(|errors| {
        let mut refusals = Refusals::default();
        for error in errors {
            refusals.push(error.key.as_deref(), error.to_string());
        }
        refusals
    })
}

/// Validates parsed `.env` pairs in an explicit context.
pub fn from_pairs(entries: &[Entry], context: &Context) -> Result<EnvReport, Refusals> {
    let mut values: HashMap<&str, &str> = HashMap::new();
    let mut first_line: HashMap<&str, usize> = HashMap::new();
    let mut ignored = Vec::new();
    let mut unknown = Refusals::default();
    for entry in entries {
        let key = entry.key.as_str();
        let first = *first_line.entry(key).or_insert(entry.line);
        if first != entry.line {
            let message = format!("set twice (lines {first} and {})", entry.line);
            unknown.push(Some(key), message);
            continue;
        }
        match keys::lookup(key).map(|known| known.spec.owner) {
            Some(Owner::Ours) => {
                values.insert(key, entry.value.as_str());
            }
            Some(Owner::ServerFsIgnored) => {
                ignored.push(IgnoredKey { key: key.to_owned(), line: entry.line, kind: IgnoredKind::ServerFs });
            }
            None if keys::in_our_namespace(key) => unknown.push(Some(key), keys::unknown_key_message(key)),
            None => {
                ignored.push(IgnoredKey { key: key.to_owned(), line: entry.line, kind: IgnoredKind::OtherProgram });
            }
        }
    }

    let mut reader = Reader::new(values, context);
    reader.refusals = unknown;
    let config = read_bridge_config(&mut reader);
    let other = read_other_settings(&mut reader);
    if let (Some(config), Some(other)) = (&config, &other) {
        check_container_identity(&mut reader, config, other, context);
        check_tunnel_exposure(&mut reader, config, other);
    }
    let refusals = std::mem::take(&mut reader.refusals);
    let (config, other) = refusals.into_result((config, other))?;
    let (Some(mut config), Some(other)) = (config, other) else {
        // Every `None` above comes with a refusal, so this is only reached by a bug.
        let message = "the configuration is incomplete although no refusal was recorded";
        return Err(Refusals::single(None, message));
    };
    // The bridge serves the board itself: the address is read once, with the other settings.
    config.board_addr = other.board_addr;
    config.board_socket = other.board_socket.clone();
    config.log_level = other.log_level;
    check_rules(&config)?;
    Ok(EnvReport { config, other, ignored, own_uid: context.uid, own_gid: context.gid })
}

/// Reads every key that ends up in [`BridgeConfig`].
fn read_bridge_config(reader: &mut Reader<'_>) -> Option<BridgeConfig> {
    let socket_dir = reader.path("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR").flatten();
    let lock_dir = reader.path("SERVERFS_AGENT_LOCK_HOST_DIR").flatten();
    let state_dir = reader.path("SERVERFS_AGENT_BRIDGE_STATE_DIR").flatten();
    let allowed_peer_uid = reader.id("SERVERFS_AGENT_PEER_UID");
    let allowed_peer_gid = reader.id("SERVERFS_AGENT_PEER_GID");
    let allow_root = reader.boolean("SERVERFS_AGENT_ALLOW_ROOT");
    let enable_fake_runtime = reader.boolean("SERVERFS_AGENT_ENABLE_FAKE_RUNTIME");
    let fake_exec = reader.boolean("SERVERFS_AGENT_FAKE_EXEC");
    let limits = read_limits(reader);
    let mcp_auth = read_mcp_auth(reader);
    let oauth = super::oauth::read(reader);
    let notify = super::notify::read(reader);
    let codex = RuntimeBinary {
        bin: reader.path("SERVERFS_CODEX_BIN").flatten(),
        home: reader.path("SERVERFS_CODEX_HOME").flatten(),
    };
    let claude = RuntimeBinary {
        bin: reader.path("SERVERFS_CLAUDE_BIN").flatten(),
        home: reader.path("SERVERFS_CLAUDE_CONFIG_DIR").flatten(),
    };
    let policy = GlobalPolicy::read(reader, enable_fake_runtime);
    let workdirs = workdirs::read_workdirs(reader, &policy);
    let sandbox = read_sandbox(reader);
    let key = "SERVERFS_AGENT_BRANCH_PREFIX";
    let branch_prefix = reader.effective(key).unwrap_or("agent/").to_owned();
    let prefix_ok = match super::check_branch_prefix(&branch_prefix) {
        Ok(()) => true,
        Err(why) => {
            reader.refuse(key, format!("{} {why}", shown(key, &branch_prefix)));
            false
        }
    };
    Some(BridgeConfig {
        socket_path: socket_dir?.join("bridge.sock"),
        state_dir: state_dir?,
        lock_dir: lock_dir?,
        allowed_peer_uid: allowed_peer_uid?,
        allowed_peer_gid: allowed_peer_gid?,
        allow_root: allow_root?,
        enable_fake_runtime: enable_fake_runtime?,
        fake_exec: fake_exec?,
        limits: limits?,
        mcp_auth: mcp_auth?,
        oauth: oauth?,
        notify: notify?,
        codex,
        claude,
        workdirs,
        board_addr: super::default_board_addr(),
        board_socket: None,
        log_level: LogLevel::default(),
        sandbox: sandbox?,
        branch_prefix: prefix_ok.then_some(branch_prefix)?,
        config_file: None,
    })
}

/// Reads the task sandbox's mode and the extra paths it hides.
fn read_sandbox(reader: &mut Reader<'_>) -> Option<SandboxSettings> {
    let key = "SERVERFS_AGENT_SANDBOX";
    let text = reader.effective(key).unwrap_or("auto");
    let mode = SandboxMode::parse(text);
    if mode.is_none() {
        reader.refuse(key, format!("{} is not a sandbox mode (use auto, required or off)", shown(key, text)));
    }
    let hide = reader.path_list("SERVERFS_AGENT_SANDBOX_HIDE", "would hide the whole filesystem");
    let read = reader.path_list("SERVERFS_AGENT_SANDBOX_READ", "would show tasks the whole filesystem");
    let write = reader.path_list("SERVERFS_AGENT_SANDBOX_WRITE", "would let tasks write the whole filesystem");
    let key = "SERVERFS_AGENT_EGRESS";
    let text = reader.effective(key).unwrap_or("proxy");
    let egress = EgressMode::parse(text);
    if egress.is_none() {
        reader.refuse(key, format!("{} is not an egress mode (use proxy, host or none)", shown(key, text)));
    }
    let egress_allow = reader.rule_list("SERVERFS_AGENT_EGRESS_ALLOW");
    Some(SandboxSettings {
        mode: mode?,
        hide: hide?,
        read: read?,
        write: write?,
        egress: egress?,
        egress_allow: egress_allow?,
    })
}

/// The most provider events a task may be configured to keep.
const MAX_EVENTS_PER_TASK: u64 = 10_000_000;

/// Reads the lifecycle limits and the result spool threshold.
fn read_limits(reader: &mut Reader<'_>) -> Option<Limits> {
    let task_timeout = reader.positive("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", MAX_SECONDS);
    let interaction = reader.positive("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", MAX_SECONDS);
    let max_active = reader.positive("SERVERFS_AGENT_MAX_ACTIVE_TASKS", u64::from(u32::MAX));
    let max_events = reader.positive("SERVERFS_AGENT_MAX_EVENTS_PER_TASK", MAX_EVENTS_PER_TASK);
    let retention = reader.positive("SERVERFS_AGENT_TASK_RETENTION_HOURS", MAX_HOURS);
    let audit_retention = reader.positive("SERVERFS_AGENT_AUDIT_RETENTION_DAYS", MAX_HOURS / 24);
    let threshold = reader.positive("SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES", MAX_SPOOLED_RESULT_BYTES);
    let idle_key = "SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS";
    let idle = if reader.effective(idle_key).is_some() { Some(reader.positive(idle_key, MAX_SECONDS)?) } else { None };
    let retry = reader.positive("SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS", MAX_SECONDS);
    Some(Limits {
        task_timeout_seconds: task_timeout?,
        interaction_timeout_seconds: interaction?,
        max_active_tasks: u32::try_from(max_active?).ok()?,
        max_events_per_task: u32::try_from(max_events?).ok()?,
        retention_hours: retention?,
        audit_retention_days: audit_retention?,
        result_spool_threshold_bytes: threshold?,
        event_idle_timeout_seconds: idle,
        provider_retry_timeout_seconds: retry?,
    })
}

/// Reads how MCP callers are authenticated.
fn read_mcp_auth(reader: &mut Reader<'_>) -> Option<McpAuth> {
    let key = "SERVERFS_MCP_AUTH";
    let text = reader.effective(key).unwrap_or("bearer");
    let mode = match text.to_ascii_lowercase().as_str() {
        "bearer" => Some(McpAuthMode::Bearer),
        "none" => Some(McpAuthMode::None),
        _ => {
            reader.refuse(key, format!("{} is not an auth mode (use bearer or none)", shown(key, text)));
            None
        }
    };
    let key = "SERVERFS_MCP_TUNNEL_PRINCIPAL";
    let text = reader.effective(key).unwrap_or("tunnel");
    let principal = if is_valid_principal(text) {
        Some(text.to_owned())
    } else {
        let message = format!("{} is not a principal name (1 to 64 letters, digits, @, ., _ or -)", shown(key, text));
        reader.refuse(key, message);
        None
    };
    let key = "SERVERFS_MCP_TUNNEL_ROLE";
    let text = reader.effective(key).unwrap_or("operator");
    let mut role = Role::parse(text);
    match role {
        None => reader.refuse(key, format!("{} is not a role (use viewer or operator)", shown(key, text))),
        Some(Role::Admin) => {
            let message = format!(
                "{} is refused: every caller that reaches the tunnel would be an administrator; \
                 the tunnel principal is at most operator (give admins their own API keys)",
                shown(key, text)
            );
            reader.refuse(key, message);
            role = None;
        }
        Some(_) => {}
    }
    Some(McpAuth { mode: mode?, tunnel_principal: principal?, tunnel_role: role? })
}

/// Whether a tunnel principal matches `[A-Za-z0-9@._-]{1,64}`.
fn is_valid_principal(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'@' | b'.' | b'_' | b'-'))
}

/// The most connections or requests in flight a front setting may name (mcp-front's own limit).
const MAX_HTTP_CAP: u64 = 1_000_000;

/// Why a board address must be a loopback one.
const BOARD_LOOPBACK_ONLY: &str =
    "the board serves only on 127.0.0.0/8 or ::1 (reach it from elsewhere through an SSH tunnel)";

/// Reads the settings of `mcp-front` and the board, which [`BridgeConfig`] does not hold.
fn read_other_settings(reader: &mut Reader<'_>) -> Option<OtherSettings> {
    let bridge_socket = reader.path("SERVERFS_AGENT_BRIDGE_SOCKET");
    let bridge_timeout = reader.positive("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS", MAX_SECONDS);
    let mcp_listen = reader.socket_addr("SERVERFS_MCP_LISTEN");
    let board_addr = reader.socket_addr("SERVERFS_BOARD_ADDR");
    if let Some(addr) = board_addr.filter(|a| !a.ip().is_loopback()) {
        reader.refuse("SERVERFS_BOARD_ADDR", format!("{addr} is not a loopback address: {BOARD_LOOPBACK_ONLY}"));
    }
    let board_socket = reader.path("SERVERFS_BOARD_SOCKET");
    let mcp_max_connections = reader.positive("SERVERFS_MCP_MAX_CONNECTIONS", MAX_HTTP_CAP);
    let mcp_max_inflight = reader.positive("SERVERFS_MCP_MAX_INFLIGHT_REQUESTS", MAX_HTTP_CAP);
    let allowed_hosts = reader.list("SERVERFS_MCP_ALLOWED_HOSTS");
    for host in &allowed_hosts {
        if host.contains(char::is_whitespace) || host.contains('/') {
            let message = format!("{host:?} is not a host name (no spaces, no scheme, no path)");
            reader.refuse("SERVERFS_MCP_ALLOWED_HOSTS", message);
        }
    }
    let allowed_origins = reader.list("SERVERFS_MCP_ALLOWED_ORIGINS");
    for origin in &allowed_origins {
        let has_scheme = origin.starts_with("http://") || origin.starts_with("https://");
        if !has_scheme || origin.contains(char::is_whitespace) {
            let message = format!("{origin:?} is not an origin such as https://chatgpt.com");
            reader.refuse("SERVERFS_MCP_ALLOWED_ORIGINS", message);
        }
    }
    let key = "SERVERFS_LOG_LEVEL";
    let text = reader.effective(key).unwrap_or("INFO");
    let log_level = LogLevel::parse(text);
    if log_level.is_none() {
        let message = format!("{} is not a log level (use TRACE, DEBUG, INFO, WARNING or ERROR)", shown(key, text));
        reader.refuse(key, message);
    }
    let tunnel_allow_local = reader.boolean("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL");
    let container_uid = reader.id("SERVERFS_UID");
    let container_gid = reader.id("SERVERFS_GID");
    let key = "SERVERFS_MCP_FRONT_IMAGE";
    let text = reader.effective(key).unwrap_or_default();
    let front_image = if text.is_empty() || text.contains(char::is_whitespace) || text.chars().any(char::is_control) {
        reader.refuse(
            key,
            format!("{} is not an image reference such as agent-bridge/mcp-front:local", shown(key, text)),
        );
        None
    } else {
        Some(text.to_owned())
    };
    let publish = match reader.effective("SERVERFS_MCP_PUBLISH") {
        Some(_) => reader.socket_addr("SERVERFS_MCP_PUBLISH").map(Some),
        None => Some(None),
    };
    Some(OtherSettings {
        container_uid: container_uid?,
        container_gid: container_gid?,
        front_image: front_image?,
        publish: publish?,
        bridge_socket: bridge_socket?,
        bridge_timeout_seconds: bridge_timeout?,
        mcp_listen: mcp_listen?,
        board_addr: board_addr?,
        board_socket: board_socket?,
        mcp_max_connections: mcp_max_connections?,
        mcp_max_inflight_requests: mcp_max_inflight?,
        allowed_hosts,
        allowed_origins,
        log_level: log_level?,
        tunnel_allow_local: tunnel_allow_local?,
    })
}

/// Tunnel mode with the front reachable on a loopback address makes every local user (and
/// every local page a browser opens) the tunnel principal: refused unless the operator says
/// so with `SERVERFS_MCP_TUNNEL_ALLOW_LOCAL=true` (a tunnel daemon on this host connecting to
/// the loopback port is the usual reason). The front refuses the same on its own bind address.
fn check_tunnel_exposure(reader: &mut Reader<'_>, config: &BridgeConfig, other: &OtherSettings) {
    if config.mcp_auth.mode != McpAuthMode::None || other.tunnel_allow_local {
        return;
    }
    let listen_set = !reader.raw("SERVERFS_MCP_LISTEN").is_empty();
    let exposed =
        [Some(("SERVERFS_MCP_LISTEN", other.mcp_listen)), other.publish.map(|addr| ("SERVERFS_MCP_PUBLISH", addr))];
    for (key, addr) in exposed.into_iter().flatten() {
        if addr.ip().is_loopback() && (key != "SERVERFS_MCP_LISTEN" || listen_set) {
            let message = format!(
                "tunnel mode (no credential) with the front on the loopback address {addr} lets every local \
                 user act as the tunnel principal; set SERVERFS_MCP_TUNNEL_ALLOW_LOCAL=true if that is meant \
                 (a tunnel daemon on this host), or use API keys (SERVERFS_MCP_AUTH=bearer)"
            );
            reader.refuse("SERVERFS_MCP_AUTH", message);
            return;
        }
    }
}

/// `compose.agent.yml` runs the front's container as `SERVERFS_UID:SERVERFS_GID`, and the
/// bridge admits only its allowed peer (`SERVERFS_AGENT_PEER_UID/GID`, or its own ids): when
/// both are set they must agree, or every call of the containerized front would be refused
/// with `PEER_NOT_AUTHORIZED`. (ServerFS's rule: `SERVERFS_UID == PEER_UID == the bridge
/// user`.)
fn check_container_identity(reader: &mut Reader<'_>, config: &BridgeConfig, other: &OtherSettings, context: &Context) {
    for (key, kind, container, allowed, own, peer_key) in [
        ("SERVERFS_UID", "uid", other.container_uid, config.allowed_peer_uid, context.uid, "SERVERFS_AGENT_PEER_UID"),
        ("SERVERFS_GID", "gid", other.container_gid, config.allowed_peer_gid, context.gid, "SERVERFS_AGENT_PEER_GID"),
    ] {
        let Some(container) = container else { continue };
        if kind == "uid" && container == 0 && !config.allow_root {
            let message = "0 would run the front's container as root: use the bridge user's uid \
                           (SERVERFS_AGENT_ALLOW_ROOT=true allows it in a throwaway container)";
            reader.refuse(key, message);
            continue;
        }
        let admitted = allowed.unwrap_or(own);
        if container == admitted {
            continue;
        }
        let whose = match allowed {
            Some(_) => peer_key.to_owned(),
            None => format!("the bridge's own; set {peer_key} to admit another"),
        };
        reader.refuse(
            key,
            format!(
                "the front's container would run as {kind} {container}, but the bridge admits only {kind} \
                 {admitted} ({whose}): set {key}={admitted}, or leave it empty when the front runs \
                 outside a container"
            ),
        );
    }
}

/// Re-checks the rules a loaded JSON config must satisfy; field paths name the culprits.
pub fn check_rules(config: &BridgeConfig) -> Result<(), Refusals> {
    let mut refusals = Refusals::default();
    for (field, path) in [
        ("socket_path", Some(&config.socket_path)),
        ("state_dir", Some(&config.state_dir)),
        ("lock_dir", Some(&config.lock_dir)),
        ("codex.bin", config.codex.bin.as_ref()),
        ("codex.home", config.codex.home.as_ref()),
        ("claude.bin", config.claude.bin.as_ref()),
        ("claude.home", config.claude.home.as_ref()),
    ] {
        if let Some(path) = path
            && !path.is_absolute()
        {
            refusals.push(Some(field), format!("{} is not an absolute path", path.display()));
        }
    }
    if let Err(why) = super::check_branch_prefix(&config.branch_prefix) {
        refusals.push(Some("branch_prefix"), format!("{:?} {why}", config.branch_prefix));
    }
    let limits = &config.limits;
    for (field, value, max) in [
        ("limits.task_timeout_seconds", limits.task_timeout_seconds, MAX_SECONDS),
        ("limits.interaction_timeout_seconds", limits.interaction_timeout_seconds, MAX_SECONDS),
        ("limits.max_active_tasks", u64::from(limits.max_active_tasks), u64::MAX),
        ("limits.max_events_per_task", u64::from(limits.max_events_per_task), MAX_EVENTS_PER_TASK),
        ("limits.retention_hours", limits.retention_hours, MAX_HOURS),
        ("limits.audit_retention_days", limits.audit_retention_days, MAX_HOURS / 24),
        ("limits.result_spool_threshold_bytes", limits.result_spool_threshold_bytes, MAX_SPOOLED_RESULT_BYTES),
        ("limits.event_idle_timeout_seconds", limits.event_idle_timeout_seconds.unwrap_or(1), MAX_SECONDS),
        ("limits.provider_retry_timeout_seconds", limits.provider_retry_timeout_seconds, MAX_SECONDS),
    ] {
        if value == 0 {
            refusals.push(Some(field), "must be at least 1");
        } else if value > max {
            refusals.push(Some(field), format!("{value} is too large: the value must be at most {max}"));
        }
    }
    if !is_valid_principal(&config.mcp_auth.tunnel_principal) {
        refusals
            .push(Some("mcp_auth.tunnel_principal"), "is not a principal name (1 to 64 letters, digits, @, ., _ or -)");
    }
    if !config.board_addr.ip().is_loopback() {
        refusals.push(
            Some("board_addr"),
            format!("{} is not a loopback address: {BOARD_LOOPBACK_ONLY}", config.board_addr),
        );
    }
    if let Some(path) = &config.board_socket {
        if !path.is_absolute() {
            refusals.push(Some("board_socket"), "must be an absolute path");
        } else if *path == config.socket_path {
            refusals.push(Some("board_socket"), "is the bridge's own socket: give the board a socket of its own");
        }
    }
    workdirs::check_workdir_rules(config, &mut refusals);
    super::oauth::check_rules(config, &mut refusals);
    super::notify::check_rules(config, &mut refusals);
    refusals.into_result(())
}

#[cfg(test)]
mod tests;
