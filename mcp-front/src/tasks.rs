//! The MCP Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) over the bridge's own
//! durable tasks: pure mappings between the bridge's task views and the extension's wire
//! shapes. The front keeps nothing: `tasks/get` is one `get_agent_task`, `tasks/cancel` one
//! `cancel_agent_task`, each answer of `tasks/update` one `respond_agent_approval` or
//! `answer_agent_question`, all through the bridge's registry (same policy, same audit).
//!
//! States: `queued`, `starting`, `running` → `working`; `waiting_for_approval` and
//! `waiting_for_question` → `input_required`, with the pending request as an
//! `elicitation/create` form under the key `approval:<request_id>` or `question:<request_id>`
//! (unique for the task's lifetime, and saying which tool answers it); `succeeded` →
//! `completed` with the final task view as the tool result; `failed` and `interrupted` →
//! `completed` with `isError` (a tool's failure is a completed task, the extension says);
//! `cancelled` → `cancelled`.

use rmcp::model::{CallToolResult, CreateTaskResult, DetailedTask, InputRequests, Task, TaskPayload, TaskStatus};
use serde_json::{Map, Value, json};

/// How often a client should poll a task.
pub const POLL_INTERVAL_MS: u64 = 2_000;

/// The extension's status for a bridge task status.
pub fn status(bridge: &str) -> TaskStatus {
    match bridge {
        "waiting_for_approval" | "waiting_for_question" => TaskStatus::InputRequired,
        "succeeded" | "failed" | "interrupted" => TaskStatus::Completed,
        "cancelled" => TaskStatus::Cancelled,
        _ => TaskStatus::Working,
    }
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The task fields every answer carries.
fn task_of(view: &Value) -> Task {
    let created = text(view, "created_at");
    let updated = view.get("updated_at").and_then(Value::as_str).unwrap_or(created);
    let mut task = Task::new(text(view, "task_id"), status(text(view, "status")), created, updated)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    let hours = view.pointer("/manifest/limits/retention_hours").and_then(Value::as_u64);
    if let Some(ms) = view.get("retention_ms").and_then(Value::as_u64).or(hours.map(|h| h * 3_600_000)) {
        task = task.with_ttl_ms(ms);
    }
    if let Some(title) = view.get("title").and_then(Value::as_str) {
        task = task.with_status_message(format!("{}: {title}", text(view, "status")));
    }
    task
}

/// The answer to a task-augmented `submit_agent_task`: the handle the bridge stored.
pub fn created(handle: &Value) -> CreateTaskResult {
    CreateTaskResult::new(task_of(handle))
}

/// The elicitation form for a pending approval or question; `None` for a request the form
/// cannot carry.
fn input_request(pending: &Value) -> Option<(String, Value)> {
    let id = pending.get("request_id").and_then(Value::as_str)?;
    let payload = pending.get("payload")?;
    let (key, message, schema) = match text(pending, "kind") {
        "approval" => {
            let decisions =
                payload.get("available_decisions").cloned().unwrap_or_else(|| json!(["approve_once", "deny"]));
            let shown =
                payload.get("command_display").and_then(Value::as_str).map(|c| format!(": {c}")).unwrap_or_default();
            let schema = json!({
                "type": "object",
                "properties": { "decision": { "type": "string", "title": "Decision", "enum": decisions } },
                "required": ["decision"],
            });
            (format!("approval:{id}"), format!("{}{shown}", text(payload, "title")), schema)
        }
        "question" => {
            let mut properties = Map::new();
            let mut required = Vec::new();
            let mut lines = Vec::new();
            for q in payload.get("questions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                let qid = q.get("question_id").and_then(Value::as_str)?;
                let options: Vec<Value> = q
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|o| o.iter().filter_map(|o| o.get("option_id").cloned()).collect())
                    .unwrap_or_default();
                let titles: Vec<Value> = q
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|o| o.iter().map(|o| json!({ "const": o["option_id"], "title": o["label"] })).collect())
                    .unwrap_or_default();
                lines.push(text(q, "prompt").to_owned());
                if !options.is_empty() {
                    let field = if q.get("multi_select") == Some(&Value::Bool(true)) {
                        json!({ "type": "array", "title": text(q, "prompt"), "items": { "anyOf": titles } })
                    } else {
                        json!({ "type": "string", "title": text(q, "prompt"), "oneOf": titles })
                    };
                    properties.insert(qid.to_owned(), field);
                    required.push(json!(qid));
                }
                if q.get("allow_free_text") == Some(&Value::Bool(true)) || options.is_empty() {
                    properties.insert(format!("{qid}.text"), json!({ "type": "string", "title": "Your own answer" }));
                }
            }
            let schema = json!({ "type": "object", "properties": properties, "required": required });
            (format!("question:{id}"), lines.join("\n"), schema)
        }
        _ => return None,
    };
    let request = json!({
        "method": "elicitation/create",
        "params": { "mode": "form", "message": message, "requestedSchema": schema },
    });
    Some((key, request))
}

/// The extension's view of a bridge task (`get_agent_task`'s answer).
pub fn detailed(view: &Value) -> Result<DetailedTask, String> {
    let task = task_of(view);
    let payload = match task.status {
        TaskStatus::Working => TaskPayload::Working,
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        TaskStatus::InputRequired => {
            let mut requests = Map::new();
            if let Some((key, request)) = view.get("pending_request").and_then(input_request) {
                requests.insert(key, request);
            }
            let input_requests: InputRequests = serde_json::from_value(Value::Object(requests))
                .map_err(|e| format!("the pending request cannot be carried as an input request: {e}"))?;
            if input_requests.is_empty() {
                // Between the state change and the request row: still working, for the client.
                return Ok(DetailedTask::new(task, TaskPayload::Working));
            }
            TaskPayload::InputRequired { input_requests }
        }
        TaskStatus::Completed | TaskStatus::Failed => {
            let result = match text(view, "status") {
                "succeeded" => CallToolResult::structured(view.clone()),
                _ => {
                    let code = view.pointer("/error/code").and_then(Value::as_str).unwrap_or("AGENT_TASK_FAILED");
                    let message = view.pointer("/error/message").and_then(Value::as_str).unwrap_or("the task failed");
                    let mut failed = crate::handler::tool_error(code, message);
                    failed.structured_content =
                        Some(json!({ "error": { "code": code, "message": message }, "task": view }));
                    failed
                }
            };
            match serde_json::to_value(result) {
                Ok(Value::Object(result)) => TaskPayload::Completed { result },
                _ => return Err("the task's result cannot be carried".to_owned()),
            }
        }
        _ => TaskPayload::Working,
    };
    Ok(DetailedTask::new(task, payload))
}

/// One bridge call that an input response stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The tool: `respond_agent_approval` or `answer_agent_question`.
    pub tool: &'static str,
    /// Its arguments.
    pub arguments: Map<String, Value>,
}

/// The bridge calls for `tasks/update`'s `inputResponses` (elicitation results keyed as
/// [`detailed`] keyed them). A key that is not one of ours, or a response that answers
/// nothing (`cancel`: the person dismissed the form), is ignored: the extension's update is
/// eventually consistent and ignores what it cannot use.
pub fn answers(task_id: &str, responses: &std::collections::BTreeMap<String, Value>) -> Vec<Answer> {
    let mut out = Vec::new();
    for (key, response) in responses {
        let Some((kind, request_id)) = key.split_once(':') else { continue };
        let action = text(response, "action");
        let content = response.get("content").cloned().unwrap_or(Value::Null);
        let mut arguments = Map::new();
        arguments.insert("task_id".into(), json!(task_id));
        arguments.insert("request_id".into(), json!(request_id));
        match (kind, action) {
            ("approval", "accept") => {
                arguments.insert("decision".into(), content.get("decision").cloned().unwrap_or(Value::Null));
                out.push(Answer { tool: "respond_agent_approval", arguments });
            }
            ("approval", "decline") => {
                arguments.insert("decision".into(), json!("deny"));
                out.push(Answer { tool: "respond_agent_approval", arguments });
            }
            ("question", "accept") => {
                let Some(fields) = content.as_object() else { continue };
                let mut by_question: std::collections::BTreeMap<String, Value> = Default::default();
                for (field, value) in fields {
                    let (qid, is_text) = match field.strip_suffix(".text") {
                        Some(q) => (q.to_owned(), true),
                        None => (field.clone(), false),
                    };
                    let entry = by_question
                        .entry(qid.clone())
                        .or_insert_with(|| json!({ "question_id": qid, "selected_option_ids": [] }));
                    if is_text {
                        entry["text"] = value.clone();
                    } else {
                        entry["selected_option_ids"] = match value {
                            Value::Array(ids) => Value::Array(ids.clone()),
                            one => json!([one]),
                        };
                    }
                }
                arguments.insert("answers".into(), Value::Array(by_question.into_values().collect()));
                out.push(Answer { tool: "answer_agent_question", arguments });
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(status: &str) -> Value {
        json!({
            "task_id": "agt_1", "status": status, "created_at": "2026-12-04T10:00:00.000Z",
            "updated_at": "2026-12-04T10:00:05.000Z", "title": "fix it",
            "manifest": { "limits": { "retention_hours": 168 } },
        })
    }

    #[test]
    fn states_map_onto_the_extensions() {
        for (ours, theirs) in [
            ("queued", TaskStatus::Working),
            ("starting", TaskStatus::Working),
            ("running", TaskStatus::Working),
            ("waiting_for_approval", TaskStatus::InputRequired),
            ("waiting_for_question", TaskStatus::InputRequired),
            ("succeeded", TaskStatus::Completed),
            ("failed", TaskStatus::Completed),
            ("interrupted", TaskStatus::Completed),
            ("cancelled", TaskStatus::Cancelled),
        ] {
            assert_eq!(status(ours), theirs, "{ours}");
        }
        let wire = serde_json::to_value(detailed(&view("running")).unwrap()).unwrap();
        assert_eq!(wire["taskId"], "agt_1");
        assert_eq!(wire["status"], "working");
        assert_eq!(wire["ttlMs"], 168 * 3_600_000u64);
        assert_eq!(wire["lastUpdatedAt"], "2026-12-04T10:00:05.000Z");
        assert!(wire.get("requestState").is_none());
    }

    #[test]
    fn an_approval_is_an_elicitation_and_its_answer_one_bridge_call() {
        let mut v = view("waiting_for_approval");
        v["pending_request"] = json!({ "request_id": "req_9", "kind": "approval", "payload": {
            "title": "Run `make`", "command_display": "make", "available_decisions": ["approve_once", "deny", "cancel_task"] } });
        let wire = serde_json::to_value(detailed(&v).unwrap()).unwrap();
        assert_eq!(wire["status"], "input_required");
        let request = &wire["inputRequests"]["approval:req_9"];
        assert_eq!(request["method"], "elicitation/create", "{wire:#}");
        assert_eq!(request["params"]["requestedSchema"]["properties"]["decision"]["enum"][2], "cancel_task");
        let responses =
            [("approval:req_9".to_owned(), json!({ "action": "accept", "content": { "decision": "approve_once" } }))]
                .into_iter()
                .collect();
        let calls = answers("agt_1", &responses);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].tool, "respond_agent_approval");
        assert_eq!(
            Value::Object(calls[0].arguments.clone()),
            json!({ "task_id": "agt_1", "request_id": "req_9", "decision": "approve_once" })
        );
        let declined = [("approval:req_9".to_owned(), json!({ "action": "decline" }))].into_iter().collect();
        assert_eq!(answers("agt_1", &declined)[0].arguments["decision"], "deny");
        let ignored = [
            ("approval:req_9".to_owned(), json!({ "action": "cancel" })),
            ("nonsense".to_owned(), json!({ "action": "accept" })),
        ]
        .into_iter()
        .collect();
        assert!(answers("agt_1", &ignored).is_empty());
    }

    #[test]
    fn a_question_is_a_form_and_its_answer_names_options_and_text() {
        let mut v = view("waiting_for_question");
        v["pending_request"] = json!({ "request_id": "req_q", "kind": "question", "payload": { "questions": [
            { "question_id": "q1", "prompt": "Which?", "options": [{ "option_id": "yes", "label": "Yes" }], "multi_select": false, "allow_free_text": true }
        ] } });
        let wire = serde_json::to_value(detailed(&v).unwrap()).unwrap();
        let schema = &wire["inputRequests"]["question:req_q"]["params"]["requestedSchema"];
        assert_eq!(schema["properties"]["q1"]["oneOf"][0]["const"], "yes", "{schema:#}");
        assert!(schema["properties"]["q1.text"].is_object());
        let responses = [(
            "question:req_q".to_owned(),
            json!({ "action": "accept", "content": { "q1": "yes", "q1.text": "and more" } }),
        )]
        .into_iter()
        .collect();
        let calls = answers("agt_1", &responses);
        assert_eq!(calls[0].tool, "answer_agent_question");
        assert_eq!(
            calls[0].arguments["answers"],
            json!([{ "question_id": "q1", "selected_option_ids": ["yes"], "text": "and more" }])
        );
    }

    #[test]
    fn a_failed_task_is_a_completed_task_with_a_tool_error() {
        let mut v = view("failed");
        v["error"] = json!({ "code": "AGENT_PROVIDER_ERROR", "message": "boom" });
        let wire = serde_json::to_value(detailed(&v).unwrap()).unwrap();
        assert_eq!(wire["status"], "completed");
        assert_eq!(wire["result"]["isError"], true);
        assert_eq!(wire["result"]["structuredContent"]["error"]["code"], "AGENT_PROVIDER_ERROR");
        let done = serde_json::to_value(detailed(&view("succeeded")).unwrap()).unwrap();
        assert_eq!(done["result"]["structuredContent"]["task_id"], "agt_1");
        assert!(done["result"].get("isError").is_none_or(|e| e == false));
        let cancelled = serde_json::to_value(detailed(&view("cancelled")).unwrap()).unwrap();
        assert_eq!(cancelled["status"], "cancelled");
    }
}
