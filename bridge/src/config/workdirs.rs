//! The `WORKDIR_NN_*` slots and the agent policy they inherit: validation from `.env` and
//! the same rules re-checked on a loaded config.
//!
//! A slot is in use when its ALIAS or PATH is set. Its effective agent mode and runtimes are
//! its own values, or else the global `SERVERFS_AGENT_MODE` / `SERVERFS_AGENT_RUNTIMES`. A
//! disabled workdir ends up with no runtimes; an enabled one needs at least one, and
//! `workspace-write` needs `READ_ONLY=false`.

use std::io::ErrorKind;
use std::path::Path;

use super::keys::{SLOT_COUNT, slot_key};
use super::refusals::Refusals;
use super::values::{Reader, shown};
use super::{AgentMode, BridgeConfig, RuntimeName, Workdir};
use crate::model::Isolation;

/// The global agent policy, as read; `None` marks a value that was refused.
pub(super) struct GlobalPolicy {
    mode: Option<AgentMode>,
    runtimes: Option<Vec<RuntimeName>>,
    fake_enabled: Option<bool>,
}

impl GlobalPolicy {
    /// Reads `SERVERFS_AGENT_MODE` and `SERVERFS_AGENT_RUNTIMES`.
    pub(super) fn read(reader: &mut Reader<'_>, fake_enabled: Option<bool>) -> GlobalPolicy {
        let key = "SERVERFS_AGENT_MODE";
        let text = reader.effective(key).unwrap_or("disabled");
        let mode = read_mode(reader, key, text);
        let key = "SERVERFS_AGENT_RUNTIMES";
        let runtimes = read_runtimes(reader, key, fake_enabled);
        GlobalPolicy { mode, runtimes, fake_enabled }
    }
}

/// Reads every slot in use, in slot order; refused slots are left out.
pub(super) fn read_workdirs(reader: &mut Reader<'_>, policy: &GlobalPolicy) -> Vec<Workdir> {
    let mut aliases: Vec<(String, u8)> = Vec::new();
    (1..=SLOT_COUNT).filter_map(|slot| read_slot(reader, policy, slot, &mut aliases)).collect()
}

/// The names of one slot's keys.
struct SlotKeys {
    alias: String,
    path: String,
    description: String,
    read_only: String,
    mode: String,
    runtimes: String,
    sandbox_read: String,
    sandbox_write: String,
    egress_allow: String,
    isolation: String,
}

impl SlotKeys {
    fn new(slot: u8) -> SlotKeys {
        SlotKeys {
            alias: slot_key(slot, "ALIAS"),
            path: slot_key(slot, "PATH"),
            description: slot_key(slot, "DESCRIPTION"),
            read_only: slot_key(slot, "READ_ONLY"),
            mode: slot_key(slot, "AGENT_MODE"),
            runtimes: slot_key(slot, "AGENT_RUNTIMES"),
            sandbox_read: slot_key(slot, "SANDBOX_READ"),
            sandbox_write: slot_key(slot, "SANDBOX_WRITE"),
            egress_allow: slot_key(slot, "EGRESS_ALLOW"),
            isolation: slot_key(slot, "AGENT_ISOLATION"),
        }
    }
}

/// Reads one slot; `aliases` holds the lower-cased aliases of the slots before it.
fn read_slot(
    reader: &mut Reader<'_>,
    policy: &GlobalPolicy,
    slot: u8,
    aliases: &mut Vec<(String, u8)>,
) -> Option<Workdir> {
    let keys = SlotKeys::new(slot);
    let alias = reader.raw(&keys.alias);
    let read_only = reader.boolean(&keys.read_only);
    if alias.is_empty() && reader.raw(&keys.path).is_empty() {
        check_unused_slot(reader, slot, read_only);
        return None;
    }
    let alias_ok = check_alias(reader, &keys, slot, aliases);
    let path = read_dir_path(reader, &keys.path, &keys.alias);
    let description = reader.raw(&keys.description);
    let description_ok = !description.chars().any(char::is_control);
    if !description_ok {
        let message = "contains a line break or control character (one line only)";
        reader.refuse(&keys.description, message);
    }
    let sandbox_read = reader.path_list(&keys.sandbox_read, "would show tasks the whole filesystem");
    let sandbox_write = reader.path_list(&keys.sandbox_write, "would let tasks write the whole filesystem");
    let egress_allow = reader.rule_list(&keys.egress_allow);
    let isolation = read_isolation(reader, &keys.isolation);
    let (agent_mode, runtimes) = effective_policy(reader, &keys, policy, read_only?)?;
    (alias_ok && description_ok).then_some(Workdir {
        slot,
        alias: alias.to_owned(),
        path: path?,
        description: description.to_owned(),
        read_only: read_only?,
        agent_mode,
        runtimes,
        sandbox_read: sandbox_read?,
        sandbox_write: sandbox_write?,
        egress_allow: egress_allow?,
        isolation: isolation?,
    })
}

/// Reads a slot's isolation (`in_place` when unset).
fn read_isolation(reader: &mut Reader<'_>, key: &str) -> Option<Isolation> {
    let text = reader.raw(key);
    if text.is_empty() {
        return Some(Isolation::InPlace);
    }
    let isolation = Isolation::parse(&text.to_ascii_lowercase());
    if isolation.is_none() {
        reader.refuse(key, format!("{} is not an isolation (use in_place or worktree)", shown(key, text)));
    }
    isolation
}

/// Checks a slot's alias: present, well formed, not used by an earlier slot.
fn check_alias(reader: &mut Reader<'_>, keys: &SlotKeys, slot: u8, aliases: &mut Vec<(String, u8)>) -> bool {
    let alias = reader.raw(&keys.alias);
    let lower = alias.to_ascii_lowercase();
    let problem = if alias.is_empty() {
        format!("{} is set but the alias is empty: set both or neither", keys.path)
    } else if !is_valid_alias(alias) {
        format!("{alias:?} is not a valid alias ({ALIAS_RULE})")
    } else if let Some((_, first)) = aliases.iter().find(|(a, _)| *a == lower) {
        format!(
            "alias {alias:?} is already used by slot {first:02} \
             (aliases are compared case-insensitively)"
        )
    } else {
        aliases.push((lower, slot));
        return true;
    };
    reader.refuse(&keys.alias, problem);
    false
}

/// A slot's effective agent mode and runtimes, checked against each other and `read_only`.
fn effective_policy(
    reader: &mut Reader<'_>,
    keys: &SlotKeys,
    policy: &GlobalPolicy,
    read_only: bool,
) -> Option<(AgentMode, Vec<RuntimeName>)> {
    let explicit_mode = !reader.raw(&keys.mode).is_empty();
    let mode = if explicit_mode {
        let text = reader.raw(&keys.mode);
        read_mode(reader, &keys.mode, text)
    } else {
        policy.mode
    };
    let explicit_runtimes = !reader.raw(&keys.runtimes).is_empty();
    let runtimes = if explicit_runtimes {
        read_runtimes(reader, &keys.runtimes, policy.fake_enabled)
    } else {
        policy.runtimes.clone()
    };
    let (mode, mut runtimes) = (mode?, runtimes?);

    let mut consistent = true;
    if mode == AgentMode::Disabled {
        if explicit_runtimes && !runtimes.is_empty() {
            let message = format!(
                "runtimes are listed but the agent mode is disabled: set {} (or \
                 SERVERFS_AGENT_MODE) to review or workspace-write, or clear this list",
                keys.mode
            );
            reader.refuse(&keys.runtimes, message);
            consistent = false;
        }
        // An inherited global list does not apply to a disabled workdir.
        runtimes.clear();
    } else if runtimes.is_empty() {
        let message = format!(
            "agent mode {} needs at least one runtime: list them here or in \
             SERVERFS_AGENT_RUNTIMES",
            mode.as_str()
        );
        reader.refuse(&keys.runtimes, message);
        consistent = false;
    }
    if mode == AgentMode::WorkspaceWrite && read_only {
        let culprit = if explicit_mode { &keys.mode } else { &keys.read_only };
        let message = format!("a writable mode on a read-only workdir: workspace-write needs {}=false", keys.read_only);
        reader.refuse(culprit, message);
        consistent = false;
    }
    consistent.then_some((mode, runtimes))
}

/// Refuses agent settings on a slot that has neither ALIAS nor PATH, where they would do nothing.
fn check_unused_slot(reader: &mut Reader<'_>, slot: u8, read_only: Option<bool>) {
    let unused = format!("slot {slot:02} has no ALIAS or PATH, so this setting has no effect");
    for suffix in ["AGENT_MODE", "AGENT_RUNTIMES", "SANDBOX_READ", "SANDBOX_WRITE", "EGRESS_ALLOW", "AGENT_ISOLATION"] {
        let key = slot_key(slot, suffix);
        let value = reader.raw(&key);
        // The default isolation, as the example writes it, changes nothing.
        let default = suffix == "AGENT_ISOLATION" && value.eq_ignore_ascii_case("in_place");
        if !value.is_empty() && !default {
            reader.refuse(&key, format!("{unused}: set the slot's ALIAS and PATH, or clear it"));
        }
    }
    if read_only == Some(false) {
        let message = format!("{unused}: set the slot's ALIAS and PATH, or set it back to true");
        reader.refuse(&slot_key(slot, "READ_ONLY"), message);
    }
}

/// Reads a workdir path: absolute or `~/`, existing, a directory; returns it canonicalized.
fn read_dir_path(reader: &mut Reader<'_>, path_key: &str, alias_key: &str) -> Option<std::path::PathBuf> {
    if reader.raw(path_key).is_empty() {
        reader.refuse(path_key, format!("{alias_key} is set but the path is empty: set both or neither"));
        return None;
    }
    let path = reader.path(path_key).flatten()?;
    match canonical_dir(&path) {
        Ok(canonical) => Some(canonical),
        Err(problem) => {
            reader.refuse(path_key, format!("{} {problem}", path.display()));
            None
        }
    }
}

/// Resolves an existing directory, or says what is wrong with it.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
fn canonical_dir(path: &Path) -> Result<std::path::PathBuf, String> {
    let canonical = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => "does not exist (a workdir is never created for you)".to_owned(),
        _ => format!("cannot be resolved: {e}"),
    })?;
    if canonical.is_dir() { Ok(canonical) } else { Err("is not a directory".to_owned()) }
}

/// How an alias must look, for messages.
const ALIAS_RULE: &str = "a letter, then up to 31 letters, digits, _ or -";

/// Whether an alias matches `^[A-Za-z][A-Za-z0-9_-]{0,31}$`.
pub(super) fn is_valid_alias(alias: &str) -> bool {
    let mut bytes = alias.bytes();
    alias.len() <= 32
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses an agent mode (case-insensitive), refusing anything else against `key`.
fn read_mode(reader: &mut Reader<'_>, key: &str, text: &str) -> Option<AgentMode> {
    let mode = match text.to_ascii_lowercase().as_str() {
        "disabled" => Some(AgentMode::Disabled),
        "review" => Some(AgentMode::Review),
        "workspace-write" => Some(AgentMode::WorkspaceWrite),
        _ => None,
    };
    if mode.is_none() {
        let message = format!("{} is not an agent mode (use disabled, review or workspace-write)", shown(key, text));
        reader.refuse(key, message);
    }
    mode
}

/// Parses the runtime list of `key`, refusing unknown, unsupported, repeated and disallowed ones.
fn read_runtimes(reader: &mut Reader<'_>, key: &str, fake_enabled: Option<bool>) -> Option<Vec<RuntimeName>> {
    let mut runtimes = Vec::new();
    let mut problems = Vec::new();
    for item in reader.list(key) {
        let lower = item.to_ascii_lowercase();
        match RuntimeName::parse(&lower) {
            Some(name) if runtimes.contains(&name) => {
                problems.push(format!("{} is listed twice", name.as_str()));
            }
            Some(name) => runtimes.push(name),
            None if lower == "qoder" => problems.push("qoder is not supported by agent-bridge".to_owned()),
            None => problems.push(format!("unknown runtime {item:?} (use codex, claude or fake)")),
        }
    }
    if runtimes.contains(&RuntimeName::Fake) && fake_enabled == Some(false) {
        problems.push("fake needs SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true".to_owned());
    }
    if problems.is_empty() {
        Some(runtimes)
    } else {
        reader.refuse(key, problems.join("; "));
        None
    }
}

/// Re-checks every workdir of a loaded config; refusals name fields such as `workdirs[2].alias`.
pub(super) fn check_workdir_rules(config: &BridgeConfig, refusals: &mut Refusals) {
    let mut slots: Vec<u8> = Vec::new();
    let mut aliases: Vec<String> = Vec::new();
    for (index, workdir) in config.workdirs.iter().enumerate() {
        let field = |name: &str| format!("workdirs[{index}].{name}");
        if !(1..=99).contains(&workdir.slot) || slots.contains(&workdir.slot) {
            refusals.push(Some(&field("slot")), format!("{} is not a free slot number between 1 and 99", workdir.slot));
        }
        slots.push(workdir.slot);
        if !is_valid_alias(&workdir.alias) {
            refusals.push(Some(&field("alias")), format!("{:?} is not a valid alias ({ALIAS_RULE})", workdir.alias));
        } else if aliases.contains(&workdir.alias.to_ascii_lowercase()) {
            refusals
                .push(Some(&field("alias")), format!("alias {:?} is used twice (case-insensitively)", workdir.alias));
        }
        aliases.push(workdir.alias.to_ascii_lowercase());
        if !workdir.path.is_absolute() {
            refusals.push(Some(&field("path")), format!("{} is not an absolute path", workdir.path.display()));
        } else if let Err(problem) = canonical_dir(&workdir.path) {
            refusals.push(Some(&field("path")), format!("{} {problem}", workdir.path.display()));
        }
        if workdir.description.chars().any(char::is_control) {
            refusals.push(Some(&field("description")), "contains a line break or control character");
        }
        check_policy(config, workdir, &field("runtimes"), refusals);
    }
}

/// Checks one workdir's mode, read-only flag and runtimes against each other.
fn check_policy(config: &BridgeConfig, workdir: &Workdir, field: &str, refusals: &mut Refusals) {
    let runtimes = &workdir.runtimes;
    if runtimes.iter().enumerate().any(|(i, r)| runtimes[..i].contains(r)) {
        refusals.push(Some(field), "lists a runtime twice");
    }
    match workdir.agent_mode {
        AgentMode::Disabled if !runtimes.is_empty() => {
            refusals.push(Some(field), "must be empty when the agent mode is disabled");
        }
        AgentMode::Review | AgentMode::WorkspaceWrite if runtimes.is_empty() => {
            refusals.push(Some(field), "an enabled agent mode needs at least one runtime");
        }
        _ => {}
    }
    if workdir.agent_mode == AgentMode::WorkspaceWrite && workdir.read_only {
        refusals.push(Some(field), "a writable mode on a read-only workdir: workspace-write needs read_only false");
    }
    if runtimes.contains(&RuntimeName::Fake) && !config.enable_fake_runtime {
        refusals.push(Some(field), "fake needs enable_fake_runtime");
    }
}
