//! The environment a provider child gets: decided, not inherited.
//!
//! The bridge captures its own environment once at startup and hands each child only the
//! variables a CLI needs to run as the operator (PATH, HOME, locale, XDG dirs) plus the
//! runtime's own credential variables. Proxy settings and the bridge's, tunnel's and MCP's own
//! variables never reach a child. [`which`] finds a program on such a `PATH`.

use std::ffi::{OsStr, OsString};

/// Variables every child may receive, by exact name.
const BASE: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
];

/// What a Codex child keeps of the bridge's environment beyond the base: its credentials and
/// settings (`OPENAI_*`, `CODEX_*`, Azure OpenAI) and TLS trust settings.
pub const CODEX_PREFIXES: &[&str] = &["OPENAI_", "CODEX_", "AZURE_OPENAI_", "SSL_CERT_", "RUST_LOG"];

/// What a Claude Code child keeps: `ANTHROPIC_*`, `CLAUDE_*` (e.g. `CLAUDE_CODE_USE_BEDROCK`,
/// `CLAUDE_CONFIG_DIR`), the cloud credentials Bedrock and Vertex use, Claude's own `DISABLE_*`
/// switches and TLS trust settings.
pub const CLAUDE_PREFIXES: &[&str] = &[
    "ANTHROPIC_",
    "CLAUDE_",
    "AWS_",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUD_ML_REGION",
    "VERTEX_REGION_",
    "DISABLE_",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_",
];

/// Variables a CLI sets for the commands *it* runs; inherited by a bridge started from inside
/// such a command, they would make a child believe it is nested in another session.
const NESTED_SESSION_VARS: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_PID",
    "CODEX_SANDBOX",
    "CODEX_SANDBOX_NETWORK_DISABLED",
    "CODEX_THREAD_ID",
    "CODEX_CI",
];

/// Variables that turn off Claude Code's non-essential network traffic (update checks,
/// telemetry, error reports, side requests; notes §2).
pub const CLAUDE_QUIET: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
];

/// Prefixes that are never passed on, whatever the runtime.
const SCRUBBED_PREFIXES: &[&str] = &["SERVERFS_", "CONTROL_PLANE_", "TUNNEL_CLIENT_", "MCP_", "AGENT_BRIDGE_"];

/// The bridge's environment as captured at startup.
#[derive(Debug, Clone, Default)]
pub struct BaseEnv {
    vars: Vec<(OsString, OsString)>,
}

impl BaseEnv {
    /// Captures the current process environment (call once, at startup).
    pub fn capture() -> BaseEnv {
        BaseEnv { vars: crate::config::process_environment() }
    }

    /// A base made of exactly these variables (tests).
    pub fn from_vars(vars: Vec<(OsString, OsString)>) -> BaseEnv {
        BaseEnv { vars }
    }

    /// The value of one captured variable.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_os_str())
    }

    /// The environment for a child: the base variables, the `LC_*` locale variables and any
    /// variable whose name starts with one of `runtime_prefixes` (the runtime's credentials),
    /// minus every proxy and scrubbed variable.
    pub fn for_child(&self, runtime_prefixes: &[&str]) -> Vec<(OsString, OsString)> {
        self.vars
            .iter()
            .filter(|(k, _)| {
                let Some(name) = k.to_str() else { return false };
                let wanted = BASE.contains(&name)
                    || name.starts_with("LC_")
                    || runtime_prefixes.iter().any(|p| name.starts_with(p));
                wanted && !is_scrubbed(name) && !NESTED_SESSION_VARS.contains(&name)
            })
            .cloned()
            .collect()
    }
}

/// A runtime's own home as a child's environment `env` names it: `var` (`CODEX_HOME`,
/// `CLAUDE_CONFIG_DIR`) when set, else `$HOME/<default>` (`.codex`, `.claude`). The task
/// sandbox mounts it, and only it, of the runtime's files.
pub fn runtime_home(env: &[(OsString, OsString)], var: &str, default: &str) -> Option<std::path::PathBuf> {
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| std::path::PathBuf::from(v));
    get(var).or_else(|| get("HOME").map(|h| h.join(default))).filter(|p| p.is_absolute())
}

/// Creates a runtime's home when it is missing (0700, as the CLIs make it): the sandbox can
/// only mount what exists, and what the runtime wrote elsewhere would be gone with the task.
pub async fn ensure_home(home: &std::path::Path) {
    let home = home.to_owned();
    let _ = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(home)
    })
    .await;
}

/// Whether a variable must never reach a provider.
pub fn is_scrubbed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_PROXY")
        || upper.ends_with("_PROXY_URL")
        || upper == "NO_PROXY"
        || SCRUBBED_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Finds `name` on `path` (a `PATH` value): the first executable file (blocking: it reads file
/// metadata).
#[expect(
    clippy::disallowed_methods,
    reason = "blocking by design: its callers run at start-up on a blocking thread or in a CLI command"
)]
pub fn which(name: &str, path: Option<&OsStr>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_get_only_decided_variables() {
        let base = BaseEnv::from_vars(
            [
                ("PATH", "/usr/bin"),
                ("HOME", "/home/op"),
                ("LC_ALL", "C.UTF-8"),
                ("HTTPS_PROXY", "http://proxy:3128"),
                ("https_proxy", "http://proxy:3128"),
                ("OPENAI_API_KEY", "sk-x"),
                ("OPENAI_PROXY_URL", "http://p"),
                ("SERVERFS_AGENT_PEER_UID", "1"),
                ("SECRET_THING", "x"),
                ("MCP_TOKEN", "t"),
            ]
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        );
        let names = |env: Vec<(OsString, OsString)>| {
            let mut v: Vec<String> = env.into_iter().map(|(k, _)| k.into_string().unwrap()).collect();
            v.sort();
            v
        };
        assert_eq!(names(base.for_child(&[])), ["HOME", "LC_ALL", "PATH"]);
        assert_eq!(names(base.for_child(&["OPENAI_"])), ["HOME", "LC_ALL", "OPENAI_API_KEY", "PATH"]);
    }

    #[test]
    fn runtimes_keep_their_credentials_but_not_a_parent_session() {
        let base = BaseEnv::from_vars(
            [
                ("PATH", "/usr/bin"),
                ("OPENAI_API_KEY", "sk-x"),
                ("CODEX_HOME", "/home/op/.codex"),
                ("CODEX_SANDBOX", "seccomp"),
                ("ANTHROPIC_API_KEY", "k"),
                ("CLAUDE_CODE_USE_BEDROCK", "1"),
                ("CLAUDE_CODE_SESSION_ID", "abc"),
                ("CLAUDECODE", "1"),
                ("AWS_PROFILE", "p"),
                ("ANTHROPIC_PROXY_URL", "http://p"),
            ]
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        );
        let names = |env: Vec<(OsString, OsString)>| {
            let mut v: Vec<String> = env.into_iter().map(|(k, _)| k.into_string().unwrap()).collect();
            v.sort();
            v
        };
        assert_eq!(names(base.for_child(CODEX_PREFIXES)), ["CODEX_HOME", "OPENAI_API_KEY", "PATH"]);
        assert_eq!(
            names(base.for_child(CLAUDE_PREFIXES)),
            ["ANTHROPIC_API_KEY", "AWS_PROFILE", "CLAUDE_CODE_USE_BEDROCK", "PATH"]
        );
    }
}
