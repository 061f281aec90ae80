//! The environment a provider child gets: decided, not inherited.
//!
//! The bridge captures its own environment once at startup and hands each child only the
//! variables a CLI needs to run as the operator (PATH, HOME, locale, XDG dirs) plus the
//! runtime's own credential variables. Proxy settings and the bridge's, tunnel's and MCP's own
//! variables never reach a child (seed 001's scrub rules).

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
        BaseEnv { vars: std::env::vars_os().collect() }
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
                wanted && !is_scrubbed(name)
            })
            .cloned()
            .collect()
    }
}

/// Whether a variable must never reach a provider.
pub fn is_scrubbed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_PROXY")
        || upper.ends_with("_PROXY_URL")
        || upper == "NO_PROXY"
        || SCRUBBED_PREFIXES.iter().any(|p| upper.starts_with(p))
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
}
