//! Codex's wire shapes mapped to the bridge's: notifications to normalized events (see
//! [`crate::provider::events`]), server requests to approval and question payloads, and the
//! caller's decisions and answers back to Codex responses. Pure functions over JSON: they
//! never panic, whatever Codex sends.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::provider::events::{self, Item, Items};
use crate::provider::io::{clip, clip_tail};

/// The four server requests the bridge relays to a human.
pub const COMMAND_APPROVAL: &str = "item/commandExecution/requestApproval";
/// See [`COMMAND_APPROVAL`].
pub const FILE_APPROVAL: &str = "item/fileChange/requestApproval";
/// See [`COMMAND_APPROVAL`].
pub const PERMISSIONS_APPROVAL: &str = "item/permissions/requestApproval";
/// See [`COMMAND_APPROVAL`].
pub const USER_INPUT: &str = "item/tool/requestUserInput";

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The command a shell wrapper runs: `/bin/bash -lc 'echo hi'` → `echo hi`.
pub fn command_display(command: &str) -> String {
    const WRAPPERS: [&str; 6] =
        ["/bin/bash -lc ", "/bin/bash -c ", "bash -lc ", "bash -c ", "/bin/sh -c ", "/bin/zsh -lc "];
    let Some(rest) = WRAPPERS.iter().find_map(|w| command.strip_prefix(w)) else { return command.to_owned() };
    let Some(inner) = rest.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) else { return rest.to_owned() };
    inner.replace("'\\''", "'")
}

/// Events for one notification; updates `items` (the per-turn item table).
pub fn notification(method: &str, params: &Value, items: &mut Items) -> Vec<(&'static str, Value)> {
    let item = params.get("item").unwrap_or(&Value::Null);
    match method {
        "turn/started" => vec![(events::TURN_STARTED, json!({}))],
        "item/started" => item_started(item, items),
        "item/completed" => item_completed(item, items),
        "turn/plan/updated" => {
            let steps: Vec<Value> = params
                .get("plan")
                .and_then(Value::as_array)
                .map(|p| p.iter().map(|st| json!({ "step": s(st, "step"), "status": s(st, "status") })).collect())
                .unwrap_or_default();
            vec![(events::PLAN_UPDATED, json!({ "explanation": s(params, "explanation"), "steps": steps }))]
        }
        "error" => {
            let message = params.get("error").and_then(|e| s(e, "message")).unwrap_or("unknown error");
            let will_retry = params.get("willRetry").and_then(Value::as_bool).unwrap_or(false);
            vec![(events::PROVIDER_ERROR, json!({ "message": clip(message, 2000), "will_retry": will_retry }))]
        }
        "warning" | "configWarning" | "deprecationNotice" => {
            let message = s(params, "message").or_else(|| s(params, "summary")).unwrap_or("warning");
            vec![(events::PROVIDER_WARNING, json!({ "message": clip(message, 2000) }))]
        }
        _ => Vec::new(),
    }
}

fn changes(item: &Value) -> Vec<Value> {
    item.get("changes")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .take(100)
                .map(|c| {
                    let kind = c.get("kind").and_then(|k| s(k, "type")).unwrap_or("update");
                    json!({ "path": s(c, "path").unwrap_or(""), "kind": kind })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn item_started(item: &Value, items: &mut Items) -> Vec<(&'static str, Value)> {
    let Some(id) = s(item, "id") else { return Vec::new() };
    match s(item, "type") {
        Some("commandExecution") => {
            let command = command_display(s(item, "command").unwrap_or(""));
            let n = items.open(id, Item::Command(command.clone()));
            vec![(
                events::COMMAND_STARTED,
                json!({ "item": n, "command": clip(&command, 4000), "cwd": s(item, "cwd") }),
            )]
        }
        Some("fileChange") => {
            let changes = changes(item);
            let n = items.open(id, Item::FileChange(changes.clone()));
            vec![(events::FILE_CHANGE_STARTED, json!({ "item": n, "changes": changes }))]
        }
        Some(kind @ ("mcpToolCall" | "dynamicToolCall" | "webSearch")) => {
            let tool = match kind {
                "mcpToolCall" => {
                    format!("{}/{}", s(item, "server").unwrap_or("mcp"), s(item, "tool").unwrap_or("tool"))
                }
                "dynamicToolCall" => s(item, "tool").unwrap_or("tool").to_owned(),
                _ => "web_search".to_owned(),
            };
            let input = item.get("arguments").or_else(|| item.get("query")).cloned().unwrap_or(Value::Null);
            let n = items.open(id, Item::Tool(tool.clone()));
            vec![(events::TOOL_STARTED, json!({ "item": n, "tool": tool, "input": events::bounded_value(&input) }))]
        }
        _ => Vec::new(),
    }
}

fn item_completed(item: &Value, items: &mut Items) -> Vec<(&'static str, Value)> {
    let id = s(item, "id").unwrap_or("");
    let status = s(item, "status").map(events::status);
    match s(item, "type") {
        Some("agentMessage") => {
            let text = s(item, "text").unwrap_or("");
            if text.is_empty() {
                return Vec::new();
            }
            let mut payload = json!({ "text": text });
            if let Some(phase) = s(item, "phase") {
                payload["phase"] = json!(phase);
            }
            vec![(events::AGENT_MESSAGE, payload)]
        }
        Some("commandExecution") => {
            let command = command_display(s(item, "command").unwrap_or(""));
            let n = items.close(id, Item::Command(command.clone()));
            let output = s(item, "aggregatedOutput").map(|o| clip_tail(o, 2000));
            vec![(
                events::COMMAND_FINISHED,
                json!({
                    "item": n, "command": clip(&command, 4000), "status": status.unwrap_or("completed"),
                    "exit_code": item.get("exitCode").and_then(Value::as_i64),
                    "duration_ms": item.get("durationMs").and_then(Value::as_u64), "output": output,
                }),
            )]
        }
        Some("fileChange") => {
            let changes = changes(item);
            let n = items.close(id, Item::FileChange(changes.clone()));
            vec![(
                events::FILE_CHANGE_FINISHED,
                json!({ "item": n, "status": status.unwrap_or("completed"), "changes": changes }),
            )]
        }
        Some("mcpToolCall" | "dynamicToolCall" | "webSearch") => {
            let tool = match items.get(id) {
                Some((_, Item::Tool(t))) => t.clone(),
                _ => "tool".to_owned(),
            };
            let n = items.close(id, Item::Tool(tool.clone()));
            let error = item.get("error").and_then(|e| s(e, "message").map(|m| clip(m, 1000)));
            vec![(
                events::TOOL_FINISHED,
                json!({ "item": n, "tool": tool, "status": status.unwrap_or("completed"), "error": error }),
            )]
        }
        _ => Vec::new(),
    }
}

/// The final answer of a completed turn: the last message in the `final_answer` phase, else
/// the last message.
pub fn final_text(messages: &[(Option<String>, String)]) -> String {
    messages
        .iter()
        .rev()
        .find(|(phase, _)| phase.as_deref() == Some("final_answer"))
        .or_else(|| messages.last())
        .map(|(_, text)| text.clone())
        .unwrap_or_default()
}

fn decisions(params: &Value) -> Value {
    let offered: Vec<&str> = params
        .get("availableDecisions")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| vec!["accept", "decline", "cancel"]);
    // Codex accepts `decline` and `cancel` even when it does not list them (notes §4.3); a
    // caller can always refuse or stop.
    let mut out = Vec::new();
    if offered.contains(&"accept") {
        out.push("approve_once");
    }
    if offered.contains(&"acceptForSession") {
        out.push("approve_session");
    }
    out.extend(["deny", "cancel_task"]);
    json!(out)
}

/// The normalized approval payload for a server request, or `None` if `method` is not an
/// approval.
pub fn approval(method: &str, params: &Value, items: &Items) -> Option<Value> {
    let mut p = Map::new();
    if let Some(reason) = s(params, "reason") {
        p.insert("reason".into(), json!(clip(reason, 2000)));
    }
    match method {
        COMMAND_APPROVAL => {
            let command = command_display(s(params, "command").unwrap_or(""));
            p.insert("category".into(), json!("command"));
            p.insert("title".into(), json!(format!("Run `{}`", clip(&command, 200))));
            p.insert("command_display".into(), json!(clip(&command, 4000)));
            if let Some(cwd) = s(params, "cwd") {
                p.insert("relative_cwd".into(), json!(cwd));
            }
            for (from, to) in [
                ("additionalPermissions", "additional_permissions"),
                ("networkApprovalContext", "network_approval_context"),
            ] {
                if let Some(v) = params.get(from).filter(|v| !v.is_null()) {
                    p.insert(to.into(), events::bounded_value(v));
                }
            }
            p.insert("available_decisions".into(), decisions(params));
            let clipped_extra: Vec<String> = ["additionalPermissions", "networkApprovalContext"]
                .iter()
                .filter_map(|k| params.get(*k).filter(|v| events::is_clipped(v)))
                .map(|v| serde_json::to_string_pretty(v).unwrap_or_default())
                .collect();
            if command.len() > 4000 || !clipped_extra.is_empty() {
                let whole = std::iter::once(command.clone()).chain(clipped_extra).collect::<Vec<_>>().join("\n\n");
                events::keep_full_text(&mut p, &whole);
            }
        }
        FILE_APPROVAL => {
            let mut files: Vec<Value> = match items.get(s(params, "itemId").unwrap_or("")) {
                Some((_, Item::FileChange(changes))) => {
                    changes.iter().map(|c| json!({ "path": c.get("path").cloned().unwrap_or(Value::Null) })).collect()
                }
                _ => Vec::new(),
            };
            if let Some(root) = s(params, "grantRoot") {
                files.push(json!({ "path": root }));
            }
            p.insert("category".into(), json!("file_change"));
            p.insert("title".into(), json!(format!("Apply changes to {} file(s)", files.len())));
            p.insert("file_changes".into(), json!(files));
            p.insert("available_decisions".into(), json!(["approve_once", "approve_session", "deny", "cancel_task"]));
        }
        PERMISSIONS_APPROVAL => {
            let perms = params.get("permissions").cloned().unwrap_or(Value::Null);
            let requested: Vec<Value> = ["network", "fileSystem"]
                .iter()
                .filter(|k| perms.get(**k).is_some_and(|v| !v.is_null()))
                .map(|k| json!({ "permission_id": k, "kind": k, "details": events::bounded_value(&perms[*k]) }))
                .collect();
            if ["network", "fileSystem"].iter().any(|k| perms.get(*k).is_some_and(events::is_clipped)) {
                events::keep_full_text(&mut p, &serde_json::to_string_pretty(&perms).unwrap_or_default());
            }
            p.insert("category".into(), json!("provider_permission"));
            p.insert("title".into(), json!("Grant additional permissions"));
            p.insert("requested_permissions".into(), json!(requested));
            p.insert("available_decisions".into(), json!(["approve_once", "approve_session", "deny", "cancel_task"]));
        }
        _ => return None,
    }
    Some(Value::Object(p))
}

/// Codex's answer to an approval request for our `decision`.
pub fn decision_response(method: &str, params: &Value, decision: &str, granted: &[String]) -> Value {
    if method == PERMISSIONS_APPROVAL {
        let perms = params.get("permissions").cloned().unwrap_or(Value::Null);
        let mut out = Map::new();
        if matches!(decision, "approve_once" | "approve_session") {
            for key in ["network", "fileSystem"] {
                let wanted = granted.is_empty() || granted.iter().any(|g| g == key);
                if wanted && let Some(v) = perms.get(key).filter(|v| !v.is_null()) {
                    out.insert(key.into(), v.clone());
                }
            }
        }
        let scope = if decision == "approve_session" { "session" } else { "turn" };
        return json!({ "permissions": out, "scope": scope });
    }
    let native = match decision {
        "approve_once" => "accept",
        "approve_session" => "acceptForSession",
        "cancel_task" => "cancel",
        _ => "decline",
    };
    json!({ "decision": native })
}

/// A relayed question: the payload for the bridge and how to answer Codex.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Normalized payload (`questions[]`).
    pub payload: Value,
    /// Per question id: option id → label.
    pub labels: HashMap<String, Vec<(String, String)>>,
}

/// Maps `item/tool/requestUserInput`; a secret question is refused (answers are stored).
pub fn question(params: &Value) -> Result<Question, String> {
    let list = params.get("questions").and_then(Value::as_array).ok_or("the request has no questions")?;
    let mut questions = Vec::new();
    let mut labels = HashMap::new();
    for q in list.iter().take(10) {
        let id = s(q, "id").filter(|id| !id.is_empty()).ok_or("a question has no id")?;
        if q.get("isSecret").and_then(Value::as_bool).unwrap_or(false) {
            return Err("a secret question cannot be relayed (answers are stored)".into());
        }
        let options: Vec<(String, String, String)> = q
            .get("options")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .enumerate()
                    .map(|(i, o)| {
                        (
                            format!("opt_{}", i + 1),
                            s(o, "label").unwrap_or("").to_owned(),
                            s(o, "description").unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let prompt = match (s(q, "header"), s(q, "question")) {
            (Some(h), Some(text)) if !h.is_empty() => format!("{h}: {text}"),
            (_, Some(text)) => text.to_owned(),
            (h, None) => h.unwrap_or("").to_owned(),
        };
        let free = q.get("isOther").and_then(Value::as_bool).unwrap_or(false) || options.is_empty();
        questions.push(json!({
            "question_id": id,
            "prompt": prompt,
            "options": options.iter().map(|(oid, label, d)| json!({ "option_id": oid, "label": label, "description": d })).collect::<Vec<_>>(),
            "multi_select": false,
            "allow_free_text": free,
        }));
        labels.insert(id.to_owned(), options.into_iter().map(|(oid, label, _)| (oid, label)).collect());
    }
    Ok(Question { payload: json!({ "questions": questions }), labels })
}

/// Codex's answer to a question for the bridge's validated answers.
pub fn answers_response(question: &Question, answers: &Value) -> Value {
    let mut out = Map::new();
    for a in answers.as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(qid) = s(a, "question_id") else { continue };
        let labels = question.labels.get(qid);
        let mut picked: Vec<String> = a
            .get("selected_option_ids")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|oid| {
                        labels.and_then(|l| l.iter().find(|(id, _)| id == oid)).map(|(_, label)| label.clone())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(text) = s(a, "text").filter(|t| !t.is_empty()) {
            picked.push(text.to_owned());
        }
        out.insert(qid.to_owned(), json!({ "answers": picked }));
    }
    json!({ "answers": out })
}
