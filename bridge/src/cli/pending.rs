//! A task's pending request as `tasks show` prints it for a person: what the agent asks, the
//! choices, and the exact commands that answer it; and the lookup that lets `tasks approve|deny
//! |answer ID` leave out the request id (a task has at most one pending request).

use bridge_proto::client::{CallError, Client};
use serde_json::{Value, json};

use super::call::{Failure, call, s};

/// The lines `tasks show` prints for `pending` (a task view's `pending_request`) of `task_id`.
pub(super) fn describe(task_id: &str, pending: &Value) -> Vec<String> {
    let payload = &pending["payload"];
    let mut lines = vec![format!(
        "needs you {} {} (expires {})",
        s(&pending["kind"]),
        s(&pending["request_id"]),
        s(&pending["expires_at"])
    )];
    let text = |v: &Value| v.as_str().filter(|t| !t.is_empty()).map(str::to_owned);
    if pending["kind"] == "question" {
        for (n, q) in payload["questions"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
            lines.push(format!("          {}. {} [{}]", n + 1, s(&q["prompt"]), s(&q["question_id"])));
            for o in q["options"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let about = text(&o["description"]).map(|d| format!(" — {d}")).unwrap_or_default();
                lines.push(format!("             {}  {}{about}", s(&o["option_id"]), s(&o["label"])));
            }
            if q["allow_free_text"] == true {
                lines.push("             (free text allowed)".to_owned());
            }
        }
        let first = &payload["questions"][0];
        let example = match first["options"][0]["option_id"].as_str() {
            Some(option) => format!("--select {}={option}", s(&first["question_id"])),
            None => format!("--text {}='…'", s(&first["question_id"])),
        };
        lines.push("          answer it with:".to_owned());
        lines.push(format!("            agent-bridge tasks answer {task_id} {example}"));
        lines.push(
            "            (--select QUESTION=OPTION[,OPTION] and --text QUESTION=TEXT, once per question)".to_owned(),
        );
        return lines;
    }
    if let Some(title) = text(&payload["title"]) {
        lines.push(format!("          {title}"));
    }
    for (key, label) in [("reason", "reason"), ("command_display", "command"), ("relative_cwd", "in")] {
        if let Some(value) = text(&payload[key]) {
            lines.push(format!("          {label}: {value}"));
        }
    }
    let files: Vec<String> =
        payload["file_changes"].as_array().map(|f| f.iter().map(|f| s(&f["path"])).collect()).unwrap_or_default();
    if !files.is_empty() {
        lines.push(format!("          files: {}", files.join(", ")));
    }
    let permissions: Vec<String> = payload["requested_permissions"]
        .as_array()
        .map(|p| p.iter().map(|p| s(&p["permission_id"])).collect())
        .unwrap_or_default();
    if !permissions.is_empty() {
        lines.push(format!("          permissions: {}", permissions.join(", ")));
    }
    let decisions: Vec<&str> = payload["available_decisions"]
        .as_array()
        .map(|d| d.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    lines.push("          answer it with:".to_owned());
    if decisions.is_empty() || decisions.contains(&"approve_once") {
        lines.push(format!("            agent-bridge tasks approve {task_id}"));
    }
    if decisions.contains(&"approve_session") {
        lines.push(format!(
            "            agent-bridge tasks approve {task_id} --session   (for the rest of the session)"
        ));
    }
    for p in &permissions {
        lines.push(format!("            agent-bridge tasks approve {task_id} --grant {p}   (only this permission)"));
    }
    lines.push(format!("            agent-bridge tasks deny {task_id}"));
    lines
}

/// The id of `task_id`'s pending request of `kind` (`approval` or `question`), read from the
/// task: what `tasks approve|deny|answer` use when no request id is given.
pub(super) async fn request_id(client: &Client, task_id: &str, kind: &str) -> Result<String, Failure> {
    let task = call(client, "get_agent_task", json!({ "task_id": task_id })).await?;
    let pending = &task["pending_request"];
    match pending["request_id"].as_str() {
        Some(id) if pending["kind"] == kind => Ok(id.to_owned()),
        Some(id) => Err(none(task_id, &format!("a pending {} ({id}), not {}", s(&pending["kind"]), article(kind)))),
        None => Err(none(task_id, &format!("no pending {kind} (it is {})", s(&task["status"])))),
    }
}

fn article(kind: &str) -> String {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { format!("an {kind}") } else { format!("a {kind}") }
}

fn none(task_id: &str, what: &str) -> Failure {
    Failure::Call(CallError::Remote {
        code: "REQUEST_NOT_FOUND".to_owned(),
        message: format!("task {task_id} has {what}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_names_the_commands_that_answer_it() {
        let pending = json!({"kind": "approval", "request_id": "req_1", "expires_at": "2026-12-06T10:00:00Z",
            "payload": {"title": "Run `make`", "command_display": "make", "reason": "build it",
                        "available_decisions": ["approve_once", "approve_session", "deny", "cancel_task"]}});
        let text = describe("agt_1", &pending).join("\n");
        assert!(text.starts_with("needs you approval req_1 (expires 2026-12-06T10:00:00Z)"), "{text}");
        assert!(text.contains("Run `make`") && text.contains("command: make") && text.contains("reason: build it"));
        assert!(text.contains("agent-bridge tasks approve agt_1\n"), "{text}");
        assert!(text.contains("agent-bridge tasks approve agt_1 --session"), "{text}");
        assert!(text.ends_with("agent-bridge tasks deny agt_1"), "{text}");
        assert!(!text.contains('{'), "no raw JSON: {text}");
    }

    #[test]
    fn a_question_lists_its_options_and_an_answer_that_works() {
        let pending = json!({"kind": "question", "request_id": "req_2", "expires_at": "x", "payload": {"questions": [
            {"question_id": "color", "prompt": "Which color?", "allow_free_text": false,
             "options": [{"option_id": "opt_1", "label": "Red", "description": "warm"}, {"option_id": "opt_2", "label": "Blue"}]}]}});
        let text = describe("agt_2", &pending).join("\n");
        assert!(
            text.contains("1. Which color? [color]")
                && text.contains("opt_1  Red — warm")
                && text.contains("opt_2  Blue")
        );
        assert!(text.contains("agent-bridge tasks answer agt_2 --select color=opt_1"), "{text}");
        assert!(!text.contains('{'), "no raw JSON: {text}");
    }
}
