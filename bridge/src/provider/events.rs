//! The normalized provider events: one vocabulary for every runtime.
//!
//! A provider driver turns what its CLI says into these events; the runner records them (after
//! host-path redaction and the size bound) and callers read them with
//! `read_agent_task_events`. Payloads never carry provider-native ids (threads, turns,
//! sessions, items, tool-use ids): where events belong together they share `item`, a small
//! number the driver assigns per task.
//!
//! | event type | payload |
//! |---|---|
//! | `turn.started` | `{}` — the agent began working on the prompt |
//! | `agent.message` | `{text, phase?}` — text the agent wrote (`phase`: Codex's `commentary` / `final_answer`) |
//! | `command.started` | `{item, command, cwd?}` — a shell command is about to run (`cwd` relative to the workdir) |
//! | `command.output` | `{item, output}` — the running command's latest output (last ≤ 2000 bytes), at most every 2 s |
//! | `command.finished` | `{item, command, status, exit_code?, duration_ms?, output?}` — `status` ∈ `completed`, `failed`, `declined`, `interrupted`; `output` is the last ≤ 2000 bytes |
//! | `file_change.started` | `{item, tool?, changes: [{path, kind}]}` — `kind` ∈ `add`, `update`, `delete` |
//! | `file_change.finished` | `{item, status, changes}` — same statuses as commands |
//! | `tool.started` | `{item, tool, input}` — any other tool (MCP, web search, …); `input` bounded |
//! | `tool.finished` | `{item, tool, status, error?}` |
//! | `plan.updated` | `{explanation?, steps: [{step, status}]}` — the agent's plan (Codex) |
//! | `provider.warning` | `{message}` — something the operator should know; the turn goes on |
//! | `provider.error` | `{message, will_retry}` — the provider hit an error (it may retry) |
//!
//! Statuses are lower snake case whatever the CLI says (`inProgress` → `in_progress`).

use std::collections::HashMap;

use serde_json::Value;

use super::io::clip;

/// See the module table.
pub const TURN_STARTED: &str = "turn.started";
/// See the module table.
pub const AGENT_MESSAGE: &str = "agent.message";
/// See the module table.
pub const COMMAND_STARTED: &str = "command.started";
/// See the module table.
pub const COMMAND_OUTPUT: &str = "command.output";
/// See the module table.
pub const COMMAND_FINISHED: &str = "command.finished";
/// See the module table.
pub const FILE_CHANGE_STARTED: &str = "file_change.started";
/// See the module table.
pub const FILE_CHANGE_FINISHED: &str = "file_change.finished";
/// See the module table.
pub const TOOL_STARTED: &str = "tool.started";
/// See the module table.
pub const TOOL_FINISHED: &str = "tool.finished";
/// See the module table.
pub const PLAN_UPDATED: &str = "plan.updated";
/// See the module table.
pub const PROVIDER_WARNING: &str = "provider.warning";
/// See the module table.
pub const PROVIDER_ERROR: &str = "provider.error";

/// The largest tool input kept in an event, in bytes of JSON.
pub const MAX_INPUT_BYTES: usize = 4000;

/// The most of a clipped request's whole text an approval keeps for its approver: with the
/// clipped display beside it, the payload stays well under the interaction limit (64 KiB).
pub const MAX_FULL_TEXT_BYTES: usize = 32 * 1024;

/// Marks an approval payload whose display clipped something: `clipped: true`, and the whole
/// text under `full_text` (shown on request: the board's page, `get_agent_task` with
/// `full_request`, `tasks show --full-request`). When even that is longer than
/// [`MAX_FULL_TEXT_BYTES`], `full_text_complete: false`: no one can read the whole request, so
/// the bridge does not offer `approve_session` for it.
pub fn keep_full_text(p: &mut serde_json::Map<String, Value>, full: &str) {
    p.insert("clipped".into(), Value::Bool(true));
    p.insert("full_text".into(), Value::String(clip(full, MAX_FULL_TEXT_BYTES)));
    p.insert("full_text_complete".into(), Value::Bool(full.len() <= MAX_FULL_TEXT_BYTES));
}

/// Whether [`bounded_value`] would clip `v`.
pub fn is_clipped(v: &Value) -> bool {
    v.to_string().len() > MAX_INPUT_BYTES
}

/// A CLI status word in the bridge's spelling.
pub fn status(native: &str) -> &'static str {
    match native {
        "completed" | "success" => "completed",
        "failed" | "error" => "failed",
        "declined" | "rejected" | "denied" => "declined",
        "interrupted" | "cancelled" | "aborted" => "interrupted",
        "inProgress" | "in_progress" | "running" => "in_progress",
        _ => "unknown",
    }
}

/// `v` if its JSON is at most [`MAX_INPUT_BYTES`], else a clipped string of it.
pub fn bounded_value(v: &Value) -> Value {
    let text = v.to_string();
    if text.len() <= MAX_INPUT_BYTES { v.clone() } else { Value::String(clip(&text, MAX_INPUT_BYTES)) }
}

/// How often a running command's output is reported.
pub const OUTPUT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Running commands' output, reported at most every [`OUTPUT_EVERY`] per command (progress for
/// callers, and liveness for the event-idle timeout) without an event per chunk.
#[derive(Debug, Default)]
pub struct Output {
    tails: HashMap<u64, (String, Option<std::time::Instant>)>,
}

impl Output {
    /// Adds a chunk of item `n`'s output; returns the `command.output` payload when one is due.
    pub fn push(&mut self, n: u64, chunk: &str, now: std::time::Instant) -> Option<Value> {
        let (tail, last) = self.tails.entry(n).or_default();
        tail.push_str(chunk);
        if tail.len() > 4000 {
            *tail = super::io::clip_tail(tail, 2000);
        }
        if last.is_some_and(|at| now.duration_since(at) < OUTPUT_EVERY) {
            return None;
        }
        *last = Some(now);
        Some(serde_json::json!({ "item": n, "output": super::io::clip_tail(tail, 2000) }))
    }

    /// Forgets a finished item.
    pub fn done(&mut self, n: u64) {
        self.tails.remove(&n);
    }
}

/// What an open item is.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A shell command (its display form).
    Command(String),
    /// File changes (`[{path, kind}]`).
    FileChange(Vec<Value>),
    /// Another tool (its name).
    Tool(String),
}

/// The items of a task: native item id → (bridge number, what it is). Numbers start at 1.
#[derive(Debug, Default)]
pub struct Items {
    next: u64,
    open: HashMap<String, (u64, Item)>,
}

impl Items {
    /// Registers a started item and returns its number (the same number if seen before).
    pub fn open(&mut self, native_id: &str, item: Item) -> u64 {
        if let Some((n, _)) = self.open.get(native_id) {
            return *n;
        }
        self.next += 1;
        self.open.insert(native_id.to_owned(), (self.next, item));
        self.next
    }

    /// The item, while it is open.
    pub fn get(&self, native_id: &str) -> Option<&(u64, Item)> {
        self.open.get(native_id)
    }

    /// Closes an item and returns its number (a fresh one if it was never opened).
    pub fn close(&mut self, native_id: &str, item: Item) -> u64 {
        match self.open.remove(native_id) {
            Some((n, _)) => n,
            None => {
                self.next += 1;
                let _ = item;
                self.next
            }
        }
    }

    /// Closes every open item, returning the events that say they were cut short
    /// (a turn that ended while they ran: an interrupt, a refusal).
    pub fn close_all(&mut self) -> Vec<(&'static str, Value)> {
        let mut open: Vec<(u64, Item)> = self.open.drain().map(|(_, v)| v).collect();
        open.sort_by_key(|(n, _)| *n);
        open.into_iter()
            .map(|(n, item)| match item {
                Item::Command(command) => (
                    COMMAND_FINISHED,
                    serde_json::json!({ "item": n, "command": clip(&command, 4000), "status": "interrupted" }),
                ),
                Item::FileChange(changes) => (
                    FILE_CHANGE_FINISHED,
                    serde_json::json!({ "item": n, "status": "interrupted", "changes": changes }),
                ),
                Item::Tool(tool) => {
                    (TOOL_FINISHED, serde_json::json!({ "item": n, "tool": tool, "status": "interrupted" }))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_numbered_in_order_and_closed_once() {
        let mut items = Items::default();
        assert_eq!(items.open("call_a", Item::Command("ls".into())), 1);
        assert_eq!(items.open("call_b", Item::Tool("web_search".into())), 2);
        assert_eq!(items.open("call_a", Item::Command("ls".into())), 1);
        assert_eq!(items.close("call_a", Item::Command("ls".into())), 1);
        let rest = items.close_all();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0, TOOL_FINISHED);
        assert_eq!(rest[0].1["status"], "interrupted");
        assert_eq!(items.close("never", Item::Tool("x".into())), 3);
    }

    #[test]
    fn command_output_is_reported_at_most_every_two_seconds() {
        let mut out = Output::default();
        let t0 = std::time::Instant::now();
        assert_eq!(out.push(1, "a", t0).unwrap()["output"], "a");
        assert!(out.push(1, "b", t0 + std::time::Duration::from_millis(500)).is_none());
        let later = out.push(1, "c", t0 + OUTPUT_EVERY).unwrap();
        assert_eq!(later["output"], "abc");
        let big = "x".repeat(10_000);
        let clipped = out.push(2, &big, t0).unwrap();
        assert!(clipped["output"].as_str().unwrap().len() <= 2000 + '…'.len_utf8());
        out.done(1);
        assert_eq!(out.push(1, "d", t0 + OUTPUT_EVERY).unwrap()["output"], "d");
    }
}
