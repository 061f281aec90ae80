//! What validating a `.env` produces: the config, the other programs' settings, the ignored
//! keys, and the readable summary `agent-bridge config check` prints.
//!
//! The summary shows effective values only; ignored keys are listed by name, never by value.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::{BridgeConfig, McpAuthMode, RuntimeBinary};

/// Why a key was accepted without being used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoredKind {
    /// A ServerFS setting that agent-bridge does not use.
    ServerFs,
    /// Another program's setting (outside `SERVERFS_*` and `WORKDIR_*`).
    OtherProgram,
}

/// A key accepted and ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredKey {
    /// The key.
    pub key: String,
    /// The 1-based line it was set on.
    pub line: usize,
    /// Why it is ignored.
    pub kind: IgnoredKind,
}

/// Settings of `mcp-front` and the board: validated with the rest, not part of [`BridgeConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherSettings {
    /// `SERVERFS_UID`: the uid the front's container runs as (unset: compose's default).
    pub container_uid: Option<u32>,
    /// `SERVERFS_GID`: the gid the front's container runs as (unset: compose's default).
    pub container_gid: Option<u32>,
    /// `SERVERFS_MCP_FRONT_IMAGE`: the front's container image.
    pub front_image: String,
    /// `SERVERFS_MCP_PUBLISH`: where `compose.publish.yml` publishes the front on the host.
    pub publish: Option<SocketAddr>,
    /// `SERVERFS_AGENT_BRIDGE_SOCKET`: the socket's path as `mcp-front` sees it.
    pub bridge_socket: Option<PathBuf>,
    /// `SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS`: one front-to-bridge RPC.
    pub bridge_timeout_seconds: u64,
    /// `SERVERFS_MCP_LISTEN`: where `mcp-front` listens.
    pub mcp_listen: SocketAddr,
    /// `SERVERFS_BOARD_ADDR`: where the board listens.
    pub board_addr: SocketAddr,
    /// `SERVERFS_BOARD_SOCKET`: the Unix socket the board serves on instead, if set.
    pub board_socket: Option<PathBuf>,
    /// `SERVERFS_MCP_MAX_CONNECTIONS`: the front's connection cap.
    pub mcp_max_connections: u64,
    /// `SERVERFS_MCP_MAX_INFLIGHT_REQUESTS`: the front's cap on requests in flight.
    pub mcp_max_inflight_requests: u64,
    /// `SERVERFS_MCP_ALLOWED_HOSTS`.
    pub allowed_hosts: Vec<String>,
    /// `SERVERFS_MCP_ALLOWED_ORIGINS`.
    pub allowed_origins: Vec<String>,
    /// `SERVERFS_LOG_LEVEL` (also copied into the bridge's config).
    pub log_level: super::LogLevel,
    /// `SERVERFS_MCP_TUNNEL_ALLOW_LOCAL`: tunnel mode on a loopback front is meant.
    pub tunnel_allow_local: bool,
}

/// The outcome of a valid `.env`.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvReport {
    /// The bridge's configuration.
    pub config: BridgeConfig,
    /// The settings other parts of the project read from the same file.
    pub other: OtherSettings,
    /// Keys accepted and ignored, in file order.
    pub ignored: Vec<IgnoredKey>,
    /// The uid the peer check falls back to (the bridge's own).
    pub own_uid: u32,
    /// The gid the peer check falls back to (the bridge's own).
    pub own_gid: u32,
}

impl fmt::Display for EnvReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let l = &c.limits;
        let o = &self.other;
        writeln!(f, "bridge")?;
        writeln!(f, "  socket:              {}", c.socket_path.display())?;
        writeln!(f, "  state dir:           {}", c.state_dir.display())?;
        writeln!(f, "  lock dir:            {}", c.lock_dir.display())?;
        let uid = id_text(c.allowed_peer_uid, self.own_uid);
        let gid = id_text(c.allowed_peer_gid, self.own_gid);
        writeln!(f, "  allowed peer:        uid {uid}, gid {gid}")?;
        writeln!(f, "  may run as root:     {}", yes_no(c.allow_root))?;
        writeln!(f, "  fake runtime:        {}", if c.enable_fake_runtime { "offered" } else { "off" })?;
        if c.enable_fake_runtime {
            writeln!(
                f,
                "  fake exec:           {}",
                if c.fake_exec { "on (runs shell commands unasked)" } else { "off" }
            )?;
        }
        writeln!(f, "limits")?;
        writeln!(f, "  task timeout:        {} s", l.task_timeout_seconds)?;
        writeln!(f, "  interaction timeout: {} s", l.interaction_timeout_seconds)?;
        writeln!(f, "  max active tasks:    {}", l.max_active_tasks)?;
        writeln!(f, "  events per task:     {} kept", l.max_events_per_task)?;
        writeln!(f, "  retention:           {} h", l.retention_hours)?;
        writeln!(f, "  audit retention:     {} days", l.audit_retention_days)?;
        writeln!(f, "  spool results over:  {} bytes", l.result_spool_threshold_bytes)?;
        match l.event_idle_timeout_seconds {
            Some(seconds) => writeln!(f, "  event-idle timeout:  {seconds} s")?,
            None => writeln!(f, "  event-idle timeout:  off")?,
        }
        writeln!(f, "  provider retrying:   {} s at most", l.provider_retry_timeout_seconds)?;
        writeln!(f, "mcp-front")?;
        writeln!(f, "  listen:              {}", o.mcp_listen)?;
        writeln!(f, "  max connections:     {}", o.mcp_max_connections)?;
        writeln!(f, "  max in flight:       {} requests", o.mcp_max_inflight_requests)?;
        writeln!(f, "  allowed hosts:       {}", list_text(&o.allowed_hosts))?;
        writeln!(f, "  allowed origins:     {}", list_text(&o.allowed_origins))?;
        match &o.bridge_socket {
            Some(path) => writeln!(f, "  bridge socket:       {}", path.display())?,
            None => writeln!(f, "  bridge socket:       (not set)")?,
        }
        writeln!(f, "  bridge RPC timeout:  {} s", o.bridge_timeout_seconds)?;
        match c.mcp_auth.mode {
            McpAuthMode::Bearer => writeln!(f, "  auth:                bearer (API keys)")?,
            McpAuthMode::None => writeln!(
                f,
                "  auth:                none (tunnel mode: every caller is {:?}, role {})",
                c.mcp_auth.tunnel_principal,
                c.mcp_auth.tunnel_role.as_str()
            )?,
        }
        match &c.oauth {
            None => writeln!(f, "  /mcp-oauth:          off")?,
            Some(oauth) => {
                writeln!(f, "  /mcp-oauth:          tokens of {} for {}", oauth.issuer, oauth.resource)?;
                let claim = oauth.role_claim.as_deref().map(|c| format!(", claim {c}")).unwrap_or_default();
                writeln!(
                    f,
                    "  OAuth roles:         scopes {}viewer|operator|admin{claim}; {} admin(s), {} operator(s), {} viewer(s) by subject",
                    oauth.role_prefix,
                    oauth.admins.len(),
                    oauth.operators.len(),
                    oauth.viewers.len()
                )?;
                if oauth.introspection.is_some() {
                    writeln!(f, "  OAuth introspection: on (opaque tokens)")?;
                }
            }
        }
        writeln!(f, "compose (the front's container)")?;
        writeln!(f, "  image:               {}", o.front_image)?;
        match (o.container_uid, o.container_gid) {
            (None, None) => writeln!(f, "  runs as:             (not set: 10001:10001 with compose.yml alone)")?,
            (uid, gid) => writeln!(
                f,
                "  runs as:             uid {}, gid {}",
                uid.map_or("(not set)".to_owned(), |u| u.to_string()),
                gid.map_or("(not set)".to_owned(), |g| g.to_string())
            )?,
        }
        match o.publish {
            Some(addr) => writeln!(f, "  published on:        {addr} (with compose.publish.yml)")?,
            None => writeln!(f, "  published on:        (not published)")?,
        }
        writeln!(f, "board")?;
        match &o.board_socket {
            Some(path) => writeln!(f, "  listen:              unix socket {} (not TCP)", path.display())?,
            None => writeln!(f, "  listen:              {}", o.board_addr)?,
        }
        let public = c.notify.board_public_url.as_deref().unwrap_or("(none: links point at the local board)");
        writeln!(f, "  public URL:          {public}")?;
        writeln!(f, "notifications")?;
        if c.notify.targets.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for t in &c.notify.targets {
            let events: Vec<&str> = t.events.iter().map(|e| e.as_str()).collect();
            let details = if t.details == super::notify::Details::Full { "full" } else { "summary" };
            let url = super::notify::redacted_url(&t.url);
            writeln!(f, "  {:02} {} to {url}: {} ({details})", t.slot, t.kind.as_str(), events.join(", "))?;
        }
        if !c.notify.targets.is_empty() {
            writeln!(f, "  first retry after:   {} ms, doubling up to 1 h, for 24 h", c.notify.retry_base_ms)?;
        }
        writeln!(f, "runtimes")?;
        write_runtime(f, "codex", &c.codex)?;
        write_runtime(f, "claude", &c.claude)?;
        writeln!(f, "log level:             {}", o.log_level.as_str())?;
        writeln!(f, "workdirs")?;
        if c.workdirs.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for w in &c.workdirs {
            let runtimes: Vec<&str> = w.runtimes.iter().map(|r| r.as_str()).collect();
            writeln!(
                f,
                "  {:02} {}: {} ({}, agent mode {}, runtimes {})",
                w.slot,
                w.alias,
                w.path.display(),
                if w.read_only { "read-only" } else { "writable" },
                w.agent_mode.as_str(),
                if runtimes.is_empty() { "none".to_owned() } else { runtimes.join(", ") },
            )?;
            if !w.description.is_empty() {
                writeln!(f, "     {}", w.description)?;
            }
        }
        write_ignored(f, &self.ignored)?;
        Ok(())
    }
}

/// Lists the ignored keys compactly: per-slot ServerFS keys once, with the slots they were in.
fn write_ignored(f: &mut fmt::Formatter<'_>, ignored: &[IgnoredKey]) -> fmt::Result {
    let mut global = Vec::new();
    let mut suffixes: Vec<&str> = Vec::new();
    let mut slots: Vec<u8> = Vec::new();
    let mut others = Vec::new();
    for key in ignored {
        match (key.kind, split_slot(&key.key)) {
            (IgnoredKind::ServerFs, Some((slot, suffix))) => {
                if !suffixes.contains(&suffix) {
                    suffixes.push(suffix);
                }
                if !slots.contains(&slot) {
                    slots.push(slot);
                }
            }
            (IgnoredKind::ServerFs, None) => global.push(key.key.clone()),
            (IgnoredKind::OtherProgram, _) => others.push(key.key.clone()),
        }
    }
    if !global.is_empty() || !suffixes.is_empty() {
        writeln!(f, "ignored ServerFS keys (agent-bridge does not use them)")?;
        write_wrapped(f, &global)?;
        if !suffixes.is_empty() {
            slots.sort_unstable();
            let names: Vec<String> = suffixes.iter().map(|s| format!("WORKDIR_NN_{s}")).collect();
            write_wrapped(f, &names)?;
            writeln!(f, "    (in slots {})", slot_ranges(&slots))?;
        }
    }
    if !others.is_empty() {
        writeln!(f, "ignored keys of other programs")?;
        write_wrapped(f, &others)?;
    }
    Ok(())
}

/// Splits `WORKDIR_07_MAX_READ_BYTES` into `(7, "MAX_READ_BYTES")`.
fn split_slot(key: &str) -> Option<(u8, &str)> {
    let rest = key.strip_prefix("WORKDIR_")?;
    let (digits, suffix) = rest.split_at_checked(2)?;
    Some((digits.parse().ok()?, suffix.strip_prefix('_')?))
}

/// Writes comma-separated names, indented, wrapped before 96 columns.
fn write_wrapped(f: &mut fmt::Formatter<'_>, names: &[String]) -> fmt::Result {
    let mut line = String::new();
    for (index, name) in names.iter().enumerate() {
        let piece = if index + 1 < names.len() { format!("{name},") } else { name.clone() };
        if !line.is_empty() && line.len() + 1 + piece.len() > 94 {
            writeln!(f, "  {line}")?;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&piece);
    }
    if line.is_empty() { Ok(()) } else { writeln!(f, "  {line}") }
}

/// Shows sorted slot numbers as ranges: `01-03, 07`.
fn slot_ranges(slots: &[u8]) -> String {
    let mut ranges: Vec<(u8, u8)> = Vec::new();
    for &slot in slots {
        match ranges.last_mut() {
            Some((_, end)) if u16::from(*end) + 1 == u16::from(slot) => *end = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    let parts: Vec<String> = ranges
        .iter()
        .map(|&(start, end)| if start == end { format!("{start:02}") } else { format!("{start:02}-{end:02}") })
        .collect();
    parts.join(", ")
}

fn write_runtime(f: &mut fmt::Formatter<'_>, name: &str, runtime: &RuntimeBinary) -> fmt::Result {
    let bin = runtime.bin.as_ref().map_or("found on PATH".to_owned(), |p| p.display().to_string());
    let home = runtime.home.as_ref().map_or("its default".to_owned(), |p| p.display().to_string());
    writeln!(f, "  {name:<7} bin {bin}; home {home}")
}

fn id_text(id: Option<u32>, own: u32) -> String {
    match id {
        Some(id) => id.to_string(),
        None => format!("{own} (the bridge's own)"),
    }
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

fn list_text(items: &[String]) -> String {
    if items.is_empty() { "(none)".to_owned() } else { items.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_are_compact() {
        assert_eq!(slot_ranges(&[1, 2, 3, 7, 9, 10]), "01-03, 07, 09-10");
        assert_eq!(slot_ranges(&[]), "");
    }
}
