//! Claude Code's stream-json shapes mapped to the bridge's: assistant tool uses and their
//! results to normalized events (see [`crate::provider::events`]), `can_use_tool` requests to
//! approval and question payloads, and the caller's decisions and answers back to control
//! responses. Pure functions over JSON: they never panic, whatever the CLI sends.

use serde_json::{Map, Value, json};

use crate::provider::events::{self, Item, Items};
use crate::provider::io::{clip, clip_tail};

/// Tools that write files.
const FILE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn file_path(input: &Value) -> Option<&str> {
    s(input, "file_path").or_else(|| s(input, "notebook_path"))
}

/// The event for an assistant `tool_use` block; registers the item.
pub fn tool_use(block: &Value, items: &mut Items) -> Option<(&'static str, Value)> {
    let id = s(block, "id")?;
    let tool = s(block, "name").unwrap_or("tool");
    let input = block.get("input").unwrap_or(&Value::Null);
    if tool == "Bash" {
        let command = s(input, "command").unwrap_or("").to_owned();
        let n = items.open(id, Item::Command(command.clone()));
        return Some((events::COMMAND_STARTED, json!({ "item": n, "command": clip(&command, 4000) })));
    }
    if FILE_TOOLS.contains(&tool) {
        let kind = if tool == "Write" { "add" } else { "update" };
        let changes = vec![json!({ "path": file_path(input).unwrap_or(""), "kind": kind })];
        let n = items.open(id, Item::FileChange(changes.clone()));
        return Some((events::FILE_CHANGE_STARTED, json!({ "item": n, "tool": tool, "changes": changes })));
    }
    if tool == "AskUserQuestion" {
        return None; // a question, relayed as such
    }
    let n = items.open(id, Item::Tool(tool.to_owned()));
    Some((events::TOOL_STARTED, json!({ "item": n, "tool": tool, "input": events::bounded_value(input) })))
}

fn result_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| s(p, "text")).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// The event for a `tool_result` block echoed in a `user` message; closes the item.
/// `declined` says whether the bridge refused that tool use.
pub fn tool_result(block: &Value, items: &mut Items, declined: bool) -> Option<(&'static str, Value)> {
    let id = s(block, "tool_use_id")?;
    let (n, item) = items.get(id).cloned()?;
    items.close(id, item.clone());
    let is_error = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let status = match (declined, is_error) {
        (true, _) => "declined",
        (false, true) => "failed",
        (false, false) => "completed",
    };
    Some(match item {
        Item::Command(command) => (
            events::COMMAND_FINISHED,
            json!({ "item": n, "command": clip(&command, 4000), "status": status, "output": clip_tail(&result_text(block), 2000) }),
        ),
        Item::FileChange(changes) => {
            (events::FILE_CHANGE_FINISHED, json!({ "item": n, "status": status, "changes": changes }))
        }
        Item::Tool(tool) => {
            let error = is_error.then(|| clip(&result_text(block), 1000));
            (events::TOOL_FINISHED, json!({ "item": n, "tool": tool, "status": status, "error": error }))
        }
    })
}

/// What a `can_use_tool` request becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Permission {
    /// An approval, with its normalized payload.
    Approval(Value),
    /// An `AskUserQuestion`, with its normalized payload.
    Question(Value),
}

fn category(tool: &str) -> &'static str {
    match tool {
        "Bash" => "command",
        t if FILE_TOOLS.contains(&t) => "file_change",
        "WebFetch" | "WebSearch" => "network_permission",
        t if t.starts_with("mcp__") => "mcp_tool",
        _ => "other",
    }
}

/// Whether a tool changes things (a `review` task refuses it without asking anyone).
pub fn mutates(tool: &str) -> bool {
    tool != "AskUserQuestion"
}

/// Maps a `can_use_tool` request.
pub fn permission(request: &Value) -> Result<Permission, String> {
    let tool = s(request, "tool_name").ok_or("no tool_name")?;
    let input = request.get("input").cloned().unwrap_or(Value::Null);
    if tool == "AskUserQuestion" {
        return question(&input).map(Permission::Question);
    }
    let mut p = Map::new();
    let cat = category(tool);
    p.insert("category".into(), json!(cat));
    p.insert("tool".into(), json!(tool));
    p.insert("tool_input".into(), events::bounded_value(&input));
    let title = match cat {
        "command" => {
            let command = s(&input, "command").unwrap_or("");
            p.insert("command_display".into(), json!(clip(command, 4000)));
            format!("Run `{}`", clip(command, 200))
        }
        "file_change" => {
            let path = file_path(&input).unwrap_or("");
            p.insert("file_changes".into(), json!([{ "path": path }]));
            clip(&format!("{tool} {path}"), 200)
        }
        _ => clip(&format!("Use {tool}"), 200),
    };
    p.insert("title".into(), json!(title));
    let command = (cat == "command").then(|| s(&input, "command").unwrap_or(""));
    if command.is_some_and(|c| c.len() > 4000) || events::is_clipped(&input) {
        // A command is approved for what it runs; any other tool for its whole input.
        let whole = command.map_or_else(|| serde_json::to_string_pretty(&input).unwrap_or_default(), str::to_owned);
        events::keep_full_text(&mut p, &whole);
    }
    if let Some(reason) = s(request, "description").or_else(|| s(request, "decision_reason")) {
        p.insert("reason".into(), json!(clip(reason, 2000)));
    }
    if let Some(path) = s(request, "blocked_path") {
        p.insert("blocked_path".into(), json!(path));
    }
    let session = request.get("permission_suggestions").and_then(Value::as_array).is_some_and(|l| !l.is_empty());
    let decisions: Vec<&str> = if session {
        vec!["approve_once", "approve_session", "deny", "cancel_task"]
    } else {
        vec!["approve_once", "deny", "cancel_task"]
    };
    p.insert("available_decisions".into(), json!(decisions));
    Ok(Permission::Approval(Value::Object(p)))
}

fn question(input: &Value) -> Result<Value, String> {
    let list = input.get("questions").and_then(Value::as_array).ok_or("AskUserQuestion without questions")?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, q) in list.iter().take(10).enumerate() {
        let text = s(q, "question").ok_or("a question without text")?;
        if !seen.insert(text) {
            return Err("the same question is asked twice".into());
        }
        let prompt = match s(q, "header") {
            Some(h) if !h.is_empty() => format!("{h}: {text}"),
            _ => text.to_owned(),
        };
        let options: Vec<Value> = q
            .get("options")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .enumerate()
                    .map(|(j, o)| {
                        json!({ "option_id": format!("opt_{}", j + 1), "label": s(o, "label").unwrap_or(""), "description": s(o, "description").unwrap_or("") })
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(json!({
            "question_id": format!("q{}", i + 1),
            "prompt": prompt,
            "options": options,
            "multi_select": q.get("multiSelect").and_then(Value::as_bool).unwrap_or(false),
            "allow_free_text": true,
        }));
    }
    Ok(json!({ "questions": out }))
}

/// The control response body allowing a tool use. `approve_session` also adds the CLI's own
/// suggestions, scoped to this session only (never to the operator's settings files).
pub fn allow(request: &Value, decision: &str) -> Value {
    let mut body = json!({ "behavior": "allow", "updatedInput": request.get("input").cloned().unwrap_or(json!({})) });
    if decision == "approve_session"
        && let Some(list) = request.get("permission_suggestions").and_then(Value::as_array)
    {
        let scoped: Vec<Value> = list
            .iter()
            .filter_map(|sug| {
                let mut sug = sug.as_object()?.clone();
                sug.insert("destination".into(), json!("session"));
                Some(Value::Object(sug))
            })
            .collect();
        body["updatedPermissions"] = json!(scoped);
    }
    body
}

/// The control response body refusing a tool use; `stop` also ends the turn.
pub fn deny(message: &str, stop: bool) -> Value {
    let mut body = json!({ "behavior": "deny", "message": message });
    if stop {
        body["interrupt"] = json!(true);
    }
    body
}

/// The control response body answering an `AskUserQuestion`: the original input plus
/// `answers: {<question text>: "<labels and text, comma separated>"}`.
pub fn answer(request: &Value, answers: &Value) -> Value {
    let input = request.get("input").cloned().unwrap_or(json!({}));
    let questions = input.get("questions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Map::new();
    for a in answers.as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(index) = s(a, "question_id").and_then(|q| q.strip_prefix('q')).and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(q) = index.checked_sub(1).and_then(|i| questions.get(i)) else { continue };
        let Some(text) = s(q, "question") else { continue };
        let options = q.get("options").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut parts: Vec<String> = a
            .get("selected_option_ids")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| id.as_str()?.strip_prefix("opt_")?.parse::<usize>().ok())
                    .filter_map(|j| options.get(j.checked_sub(1)?).and_then(|o| s(o, "label")).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(t) = s(a, "text").filter(|t| !t.is_empty()) {
            parts.push(t.to_owned());
        }
        out.insert(text.to_owned(), json!(parts.join(", ")));
    }
    let mut updated = input;
    if let Some(map) = updated.as_object_mut() {
        map.insert("answers".into(), Value::Object(out));
    }
    json!({ "behavior": "allow", "updatedInput": updated })
}

/// Why a `result` that is not a success ended the turn, in words: the CLI's own text when it
/// gave one (a failed turn may still carry the subtype `success`, which is not repeated), the
/// subtype spelled out otherwise.
pub fn result_error(result: &Value) -> String {
    let errors: Vec<&str> = result
        .get("errors")
        .and_then(Value::as_array)
        .map(|e| e.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let detail = errors.first().copied().or_else(|| s(result, "result")).unwrap_or("").trim();
    let subtype = match s(result, "subtype").unwrap_or("") {
        "error_max_turns" => "claude stopped at its turn limit",
        "error_max_budget_usd" => "claude stopped at its spending limit",
        "error_during_execution" => "claude failed while running the turn",
        _ => "claude ended the turn with an error",
    };
    if detail.is_empty() { clip(subtype, 2000) } else { clip(detail, 2000) }
}

/// The code a failed `result` ends the task with: `AGENT_RUNTIME_UNAVAILABLE` when Claude Code
/// says it is not logged in (the runtime cannot work until someone logs in),
/// `AGENT_PROVIDER_ERROR` otherwise.
pub fn result_code(result: &Value) -> &'static str {
    let text = s(result, "result").unwrap_or("");
    if text.contains("Not logged in") || text.contains("/login") || text.contains("Invalid API key") {
        crate::error::code::AGENT_RUNTIME_UNAVAILABLE
    } else {
        crate::error::code::AGENT_PROVIDER_ERROR
    }
}

/// A `system` message of subtype `api_retry` (Claude Code retries a failed request to its
/// model service) as a `provider.error` that will be retried.
pub fn api_retry(msg: &Value) -> Value {
    let attempt = msg.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    let max = msg.get("max_retries").and_then(Value::as_u64).unwrap_or(0);
    let why = s(msg, "error").filter(|e| !e.is_empty() && *e != "unknown");
    let status = msg.get("error_status").and_then(Value::as_u64);
    let message = match (why, status) {
        (Some(why), Some(status)) => {
            format!("the model service failed (HTTP {status}: {why}); retry {attempt} of {max}")
        }
        (Some(why), None) => format!("the model service failed ({why}); retry {attempt} of {max}"),
        (None, Some(status)) => format!("the model service failed (HTTP {status}); retry {attempt} of {max}"),
        (None, None) => format!("the model service cannot be reached; retry {attempt} of {max}"),
    };
    json!({ "message": clip(&message, 2000), "will_retry": true })
}

/// Why Claude Code is not logged in, from the JSON `claude auth status` prints: `Some` when it
/// says `loggedIn: false`; `None` when logged in or the output is not that JSON.
pub fn why_logged_out(status: &[u8]) -> Option<String> {
    let status: Value = serde_json::from_slice(status).ok()?;
    (status.get("loggedIn")? == &Value::Bool(false)).then(|| {
        "not logged in: run `claude auth login` as the bridge's user, or give the bridge ANTHROPIC_API_KEY".to_owned()
    })
}
