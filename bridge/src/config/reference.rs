//! `docs/configuration.md`, rendered from the key catalog: the same keys, groups and defaults
//! as `.env.example`, as a markdown page for a reader.
//!
//! [`render`] is the only author of the page (`agent-bridge config reference >
//! docs/configuration.md`); a test fails when the committed page and the catalog in
//! [`super::keys`] disagree.

use std::fmt::Write as _;

use super::example::{TIMEOUTS, groups, heading, timeout_default};
use super::keys::{FAMILIES, Group, KEYS, KeySpec, Owner};

/// Where the page lives in the repository, and the command that writes it.
pub const PAGE: &str = "docs/configuration.md";

/// The opening of the page, before the groups.
const OPENING: &[&str] = &[
    "# Configuration reference",
    "",
    "<!-- Generated from the key catalog (bridge/src/config/keys.rs) by",
    "     `agent-bridge config reference > docs/configuration.md`; a test fails when it is stale. -->",
    "",
    "One `.env` drives everything: the bridge, `mcp-front` and compose.",
    "[`.env.example`](../.env.example) lists the same keys with their defaults, ready to copy",
    "(`agent-bridge config example` prints it). Validate a file, then run the bridge from it or from",
    "the private JSON it renders:",
    "",
    "```sh",
    "agent-bridge config check  --env-file .env             # the effective config, or every refusal",
    "agent-bridge config render --env-file .env --output ~/.config/agent-bridge/config.json",
    "agent-bridge serve --config ~/.config/agent-bridge/config.json   # or: serve --env-file .env",
    "```",
    "",
    "A refused configuration exits with code 2 and names each offending key. Validation is strict:",
    "a `SERVERFS_*` or `WORKDIR_NN_*` key that is not known is a typo and is refused (with a",
    "suggestion); the ServerFS keys this bridge does not use are accepted and listed as ignored (last",
    "section); other programs' keys (`TZ`, `CONTROL_PLANE_*`, …) are ignored. The syntax is",
    "`KEY=value`; `'…'` is literal, `\"…\"` takes `\\\"`, `\\\\` and `\\n`; a `#` after a space starts a",
    "comment; there is no `export`, no `${VAR}` expansion, and no key may appear twice. An empty",
    "value means the default.",
    "",
    "Both daemons log on stderr at `SERVERFS_LOG_LEVEL`; `AGENT_BRIDGE_LOG` (the bridge) and",
    "`MCP_FRONT_LOG` (the front), `tracing` filters such as `debug`, override it for one run.",
];

/// The whole page.
pub fn render() -> String {
    let mut out = String::new();
    let w = &mut out;
    for line in OPENING {
        let _ = writeln!(w, "{line}");
    }
    let families: Vec<String> =
        FAMILIES.iter().map(|f| format!("`{}*` for NN = 01 to {:02}", f.placeholder, f.count)).collect();
    let _ = writeln!(w, "\nKeys written with `NN` exist once per slot: {}.", families.join(", "));
    for group in groups() {
        let (title, about) = heading(group);
        let _ = writeln!(w, "\n## {}\n", escape(title));
        if !about.is_empty() {
            let _ = writeln!(w, "{}\n", escape(&about.join(" ")));
        }
        if group == Group::Lifecycle {
            write_timeouts(w);
        }
        let specs = KEYS.iter().filter(|spec| spec.group == group);
        if group == Group::ServerFs {
            write_ignored(w, specs);
        } else {
            let _ = writeln!(w, "| key | default | meaning |\n|---|---|---|");
            for spec in specs {
                write_key(w, spec);
            }
        }
    }
    out
}

fn write_timeouts(w: &mut String) {
    let _ = writeln!(w, "Five different timeouts (the first one is in the mcp-front section):\n");
    for (name, key, what) in TIMEOUTS {
        let default = timeout_default(key);
        let _ = writeln!(w, "- {name}: {what} (`{key}`, default {default})");
    }
    let _ = writeln!(w);
}

fn write_key(w: &mut String, spec: &KeySpec) {
    let default = match spec.default {
        Some(d) if !d.is_empty() => format!("`{d}`"),
        _ => "—".to_owned(),
    };
    let _ = writeln!(w, "| `{}` | {default} | {} |", spec.name, escape(spec.meaning));
}

fn write_ignored<'a>(w: &mut String, specs: impl Iterator<Item = &'a KeySpec>) {
    let _ = writeln!(
        w,
        "So that a ServerFS `.env` carries over, these keys are accepted, listed as ignored by `config \
         check`, and otherwise not used (the `WORKDIR_NN_` ones in every slot).\n"
    );
    let _ = writeln!(w, "| key | what it is in ServerFS |\n|---|---|");
    for spec in specs {
        debug_assert_eq!(spec.owner, Owner::ServerFsIgnored);
        let _ = writeln!(w, "| `{}` | {} |", spec.name, escape(spec.meaning));
    }
}

/// Text made safe for a markdown table cell: no table separator, no HTML tag, no emphasis.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '*' => out.push_str("\\*"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_committed_configuration_page_is_the_rendered_catalog() {
        crate::config::example::tests::assert_committed(PAGE, &render(), "reference");
    }

    #[test]
    fn every_key_has_one_row_with_its_default() {
        let page = render();
        for spec in KEYS {
            let row = format!("| `{}` |", spec.name);
            assert_eq!(page.matches(&row).count(), 1, "{}: one row", spec.name);
            if let Some(default) = spec.default.filter(|d| !d.is_empty()) {
                assert!(page.contains(&format!("{row} `{default}` |")), "{}: its default", spec.name);
            }
        }
        for (name, key, _) in TIMEOUTS {
            assert!(page.contains(&format!("- {name}: ")) && page.contains(key), "{name}");
        }
    }

    #[test]
    fn cells_cannot_break_the_table_or_turn_into_markup() {
        assert_eq!(escape("a | b"), "a \\| b");
        assert_eq!(escape("<prefix>viewer, *.domain"), "&lt;prefix&gt;viewer, \\*.domain");
    }
}
