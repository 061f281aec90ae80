//! `.env.example`, rendered from the key catalog: every key the project reads, grouped, each
//! with its default and one line of meaning.
//!
//! [`render`] is the only author of the repository's `.env.example` (`agent-bridge config
//! example > .env.example`); a test fails when the file and the catalog in [`super::keys`]
//! disagree, and another when a compose file reads a key the catalog does not know. The
//! markdown form of the same catalog is [`super::reference`].

use std::fmt::Write as _;

use super::keys::{self, Group, KEYS, KeySpec, Owner};

/// The compose files at the repository root that read `.env` keys.
pub const COMPOSE_FILES: [&str; 4] = ["compose.yml", "compose.agent.yml", "compose.publish.yml", "compose.tls.yml"];

/// The one key of `.env.example` outside the catalog: docker compose's own list of files,
/// set so that every compose command includes the agent overlay.
pub const COMPOSE_FILE_LINE: &str = "COMPOSE_FILE=compose.yml:compose.agent.yml";

/// The catalog's groups in the order their first key appears (the order of both renderings).
pub(super) fn groups() -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for spec in KEYS {
        if !groups.contains(&spec.group) {
            groups.push(spec.group);
        }
    }
    groups
}

/// The title and the lines of explanation that open a group.
pub(super) fn heading(group: Group) -> (&'static str, &'static [&'static str]) {
    match group {
        Group::Paths => (
            "Paths: where the bridge keeps its socket, locks and state",
            &[
                "The bridge creates missing directories owner-only (0700) and refuses broader ones.",
                "compose.agent.yml mounts the socket directory read-only into the front's container.",
            ],
        ),
        Group::Identity => ("Identity: who may connect to the bridge socket, and root", &[]),
        Group::Lifecycle => ("Lifecycle: task limits, frozen into each task's manifest at submit", &[]),
        Group::Policy => ("Policy: the agent settings workdirs inherit", &[]),
        Group::Front => (
            "mcp-front: where it listens and how it reaches the bridge",
            &["In compose the front listens on 0.0.0.0:8765 in its network; compose.agent.yml sets its socket."],
        ),
        Group::Auth => ("Auth: how MCP callers are identified (decided by the bridge)", &[]),
        Group::OAuth => (
            "OAuth: /mcp-oauth for claude.ai and ChatGPT connectors, tokens from your identity provider",
            &[
                "The bridge validates the IdP's JWT access tokens (signature from its JWKS, iss, aud = the",
                "resource, exp); a subject with no role is refused. /mcp keeps API keys; see docs/connectors.md.",
            ],
        ),
        Group::Compose => (
            "Compose: the front's container (compose.yml, compose.agent.yml, compose.publish.yml, compose.tls.yml)",
            &[
                "The container must run as the bridge user (SERVERFS_UID/GID = id -u / id -g), or the",
                "bridge refuses its calls (PEER_NOT_AUTHORIZED); `config check` compares them.",
            ],
        ),
        Group::Board => ("Board: the local web board", &[]),
        Group::Notify => (
            "Notifications: SERVERFS_NOTIFY_NN_* for NN = 01 to 08, sent when an agent needs you or ends",
            &[
                "Events: approval.requested, question.requested, task.finished (succeeded or cancelled),",
                "task.failed (failed or interrupted), plan.pending_approval, workdir.recovery_required.",
                "A target is in use when its URL is set. Deliveries are stored first and retried for 24 h;",
                "webhooks are signed per Standard Webhooks. Never a host path, a key or a prompt is sent.",
            ],
        ),
        Group::Runtimes => ("Runtimes: where the agent CLIs live", &[]),
        Group::Logging => ("Logging", &[]),
        Group::Workdir => (
            "Workdirs: WORKDIR_NN_* for NN = 01 to 16",
            &[
                "A slot with an ALIAS and a PATH is a workdir; callers see the alias, never the path.",
                "Slot 01 is left empty here (no workdir): set its ALIAS and PATH to add one, and copy",
                "the block as WORKDIR_02_*, … for more. A workdir is never created for you.",
            ],
        ),
        Group::ServerFs => ("ServerFS settings agent-bridge accepts and ignores", &[]),
    }
}

/// The five timeouts, told apart, for the lifecycle group (and the reference page's opening).
pub(super) const TIMEOUTS: [(&str, &str, &str); 5] = [
    ("front-to-bridge RPC timeout", "SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS", "one call from mcp-front to the bridge"),
    ("task timeout", "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", "a task's whole life"),
    ("interaction timeout", "SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", "one unanswered approval or question"),
    ("terminal retention", "SERVERFS_AGENT_TASK_RETENTION_HOURS", "how long a finished task is kept"),
    ("provider event-idle timeout", "SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS", "the longest provider silence"),
];

/// The whole `.env.example`.
pub fn render() -> String {
    let mut out = String::new();
    let w = &mut out;
    for line in [
        "# agent-bridge: one .env for the bridge, mcp-front and compose. Copy it to .env and edit.",
        "#",
        "# Generated from the key catalog (bridge/src/config/keys.rs) by `agent-bridge config example`;",
        "# a test keeps the two identical. An empty value means the default. Check a file with",
        "#   agent-bridge config check --env-file .env",
        "# Syntax: KEY=value; '…' is literal, \"…\" takes \\\" \\\\ \\n; a # after a space starts a comment;",
        "# no `export`, no ${VAR} expansion, no key twice.",
        "",
        "# docker compose's own setting: every compose command (up, recreate, restart) includes the agent",
        "# overlay, which mounts the bridge socket. compose.yml alone starts a front that refuses to run",
        "# (its socket directory is missing). Append :compose.publish.yml to publish the front on the host,",
        "# or :compose.tls.yml for public HTTPS through Caddy (never both).",
        COMPOSE_FILE_LINE,
    ] {
        let _ = writeln!(w, "{line}");
    }
    for group in groups() {
        let (title, about) = heading(group);
        let _ = writeln!(w, "\n# {}\n# {title}", "=".repeat(96));
        for line in about {
            let _ = writeln!(w, "# {line}");
        }
        if group == Group::Lifecycle {
            write_timeouts(w);
        }
        let _ = writeln!(w, "# {}", "=".repeat(96));
        let specs = KEYS.iter().filter(|spec| spec.group == group);
        if group == Group::ServerFs {
            write_ignored(w, specs);
            continue;
        }
        for spec in specs {
            write_key(w, spec);
        }
    }
    out
}

/// A timeout key's default with its unit (`h` for `_HOURS` keys, else `s`), or `off`.
pub(super) fn timeout_default(key: &str) -> String {
    let default = keys::lookup(key).and_then(|k| k.spec.default);
    let unit = if key.ends_with("_HOURS") { "h" } else { "s" };
    default.map_or("off".to_owned(), |d| format!("{d} {unit}"))
}

fn write_timeouts(w: &mut String) {
    let _ = writeln!(w, "# Five different timeouts (the first one is in the mcp-front section):");
    for (name, key, what) in TIMEOUTS {
        let default = timeout_default(key);
        let _ = writeln!(w, "#   {name}: {what}\n#     {key}, default {default}");
    }
}

fn write_key(w: &mut String, spec: &KeySpec) {
    let name = if spec.is_per_slot() { spec.name_for_slot(1) } else { spec.name.to_owned() };
    let default = spec.default.unwrap_or("");
    let shown = if default.is_empty() { "(empty)" } else { default };
    let _ = writeln!(w, "\n# {}\n# Default: {shown}", spec.meaning);
    let _ = writeln!(w, "{name}={default}");
}

fn write_ignored<'a>(w: &mut String, specs: impl Iterator<Item = &'a KeySpec>) {
    let _ = writeln!(w, "# So that a ServerFS .env carries over, these keys are accepted, listed as ignored by");
    let _ = writeln!(w, "# `config check`, and otherwise not used (WORKDIR_NN_ ones in every slot):");
    let mut line = String::from("#  ");
    for spec in specs {
        debug_assert_eq!(spec.owner, Owner::ServerFsIgnored);
        if line.len() + 1 + spec.name.len() > 98 {
            let _ = writeln!(w, "{line}");
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(spec.name);
    }
    let _ = writeln!(w, "{line}");
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::config::env::{Context, from_pairs};

    fn repository_file(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
    }

    /// Fails, naming the first differing line and the command that regenerates it, when the
    /// repository's `name` is not `rendered` (`agent-bridge config <command>`'s output).
    #[expect(clippy::disallowed_methods, reason = "a test reads the committed file directly")]
    pub(in crate::config) fn assert_committed(name: &str, rendered: &str, command: &str) {
        let path = repository_file(name);
        let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if file != rendered {
            let line = file
                .lines()
                .zip(rendered.lines())
                .position(|(a, b)| a != b)
                .map_or_else(|| file.lines().count().min(rendered.lines().count()) + 1, |index| index + 1);
            panic!(
                "{name} differs from the key catalog from line {line} on: regenerate it with\n  \
                 cargo run -q -p agent-bridge -- config {command} > {name}\nfile:     {:?}\ncatalog:  {:?}",
                file.lines().nth(line - 1).unwrap_or(""),
                rendered.lines().nth(line - 1).unwrap_or("")
            );
        }
    }

    #[test]
    fn the_repository_env_example_is_the_rendered_catalog() {
        assert_committed(".env.example", &render(), "example");
    }

    #[test]
    fn every_key_of_ours_is_assigned_once_with_its_default_and_meaning() {
        let text = render();
        let entries = bridge_envfile::parse(text.as_bytes()).expect("the example parses");
        let assigned: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
        for spec in KEYS {
            let name = if spec.is_per_slot() { spec.name_for_slot(1) } else { spec.name.to_owned() };
            let count = assigned.iter().filter(|k| **k == name).count();
            match spec.owner {
                Owner::Ours => {
                    assert_eq!(count, 1, "{name} is assigned {count} times");
                    let block = format!("# {}\n# Default: ", spec.meaning);
                    assert!(text.contains(&block), "{name}: its meaning and default are not above it");
                    let value = entries.iter().find(|e| e.key == name).map(|e| e.value.as_str());
                    assert_eq!(value, Some(spec.default.unwrap_or("")), "{name} is not set to its default");
                }
                Owner::ServerFsIgnored => {
                    assert_eq!(count, 0, "{name} is ignored and must not be assigned");
                    assert!(text.contains(spec.name), "{name} is not listed");
                }
            }
        }
        let outside: Vec<&str> = assigned.iter().copied().filter(|k| keys::lookup(k).is_none()).collect();
        assert_eq!(outside, ["COMPOSE_FILE"], "only compose's own key is outside the catalog");
        for (name, key, _) in TIMEOUTS {
            assert!(text.contains(name) && keys::lookup(key).is_some(), "{name}: {key}");
        }
    }

    #[test]
    fn the_example_is_a_valid_configuration_as_it_stands() {
        let entries = bridge_envfile::parse(render().as_bytes()).expect("the example parses");
        let home = tempfile::tempdir().expect("home");
        let context = Context { home: home.path().to_owned(), uid: 1000, gid: 1000 };
        let report = from_pairs(&entries, &context).unwrap_or_else(|r| panic!("the example is refused:\n{r}"));
        assert!(report.config.workdirs.is_empty(), "slot 01 is left empty for the operator");
        assert_eq!(report.config.socket_path, home.path().join(".local/share/agent-bridge/runtime/socket/bridge.sock"));
        let ignored: Vec<&str> = report.ignored.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(ignored, ["COMPOSE_FILE"]);
    }

    /// Every `${KEY…}` a compose file interpolates is a catalog key (compose reads the same
    /// `.env`), and compose's own `COMPOSE_*` settings are not used as variables.
    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn compose_files_read_only_catalog_keys() {
        for name in COMPOSE_FILES {
            let path = repository_file(name);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut rest = text.as_str();
            let mut found = 0;
            while let Some(start) = rest.find("${") {
                let after = &rest[start + 2..];
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                let key = &after[..end];
                let known = keys::lookup(key).is_some_and(|k| k.spec.owner == Owner::Ours);
                assert!(known, "{name} reads {key:?}, which is not a key of the catalog");
                found += 1;
                rest = &after[end..];
            }
            assert!(found > 0, "{name} reads no key: is it the right file?");
        }
    }
}
