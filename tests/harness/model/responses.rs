//! The scripted OpenAI Responses API for Codex (`POST …/responses`, SSE; notes §4.5).
//!
//! When the conversation ends with a tool output, the reply is `DONE. tool output was: …`.
//! Otherwise the last user message decides:
//!
//! | trigger | reply |
//! |---|---|
//! | `RUN_SHELL:<cmd>` | an `exec_command` call running `<cmd>` in the sandbox |
//! | `RUN_ESCALATED:<cmd>` | an `exec_command` call asking to run `<cmd>` outside the sandbox (Codex asks for approval) |
//! | `APPLY_PATCH:<path>` | an `exec_command` call running `apply_patch` that adds `<path>` with the line `patched` (Codex applies it itself, asking first when the path is outside the writable roots) |
//! | `ASK_USER` | a `request_user_input` call with one question (`color`: Blue / Red) |
//! | `SLOW` | an answer streamed over about four seconds |
//! | `HOLD_REPLY` | an answer whose every event comes 30 s after the last (a model call that keeps its CLI waiting for minutes) |
//! | `SAY:<text>` | `<text>` |
//! | anything else | [`HELLO`] |

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{ModelServer, Reply, Request, after, not_found};

/// The default answer.
pub const HELLO: &str = "Hello from the scripted Responses server.";

/// The usage every response reports: input tokens (cached included), cached input tokens,
/// output tokens, reasoning tokens.
pub const USAGE: [u64; 4] = [1200, 1000, 34, 12];

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Starts the scripted Responses server.
pub async fn start() -> ModelServer {
    ModelServer::start(reply).await
}

fn input_items(request: &Request) -> Vec<Value> {
    request.body.get("input").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// The text of an input message (`input_text` parts joined).
pub fn message_text(item: &Value) -> String {
    match item.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// The last user message of a request.
pub fn last_user_text(request: &Request) -> String {
    input_items(request)
        .iter()
        .rev()
        .find(|i| i.get("type").and_then(Value::as_str) == Some("message") && i["role"] == "user")
        .map(message_text)
        .unwrap_or_default()
}

/// Every user message text of a request, in order.
pub fn user_texts(request: &Request) -> Vec<String> {
    input_items(request)
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("message") && i["role"] == "user")
        .map(message_text)
        .collect()
}

/// The tool outputs a request carries.
pub fn tool_outputs(request: &Request) -> Vec<String> {
    input_items(request)
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("call_output")))
        .map(|i| match i.get("output") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
        .collect()
}

fn reply(request: &Request) -> Reply {
    if request.method != "POST" || !request.path.ends_with("/responses") {
        return not_found();
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let items = input_items(request);
    let last = items.last().cloned().unwrap_or(Value::Null);
    if last.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("call_output")) {
        let output = tool_outputs(request).pop().unwrap_or_default();
        let clipped: String = output.chars().take(600).collect();
        return text(n, &format!("DONE. tool output was: {clipped}"), Duration::ZERO, 1);
    }
    let prompt = last_user_text(request);
    if let Some(cmd) = after(&prompt, "RUN_SHELL:") {
        return call(n, "exec_command", json!({ "cmd": cmd, "yield_time_ms": 30000 }));
    }
    if let Some(path) = after(&prompt, "APPLY_PATCH:") {
        let cmd = format!("apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {path}\n+patched\n*** End Patch\nEOF\n");
        return call(n, "exec_command", json!({ "cmd": cmd, "yield_time_ms": 30000 }));
    }
    if let Some(cmd) = after(&prompt, "RUN_ESCALATED:") {
        let args = json!({
            "cmd": cmd, "sandbox_permissions": "require_escalated",
            "justification": "The scripted test needs to run this outside the sandbox", "yield_time_ms": 30000,
        });
        return call(n, "exec_command", args);
    }
    if prompt.contains("ASK_USER") {
        let args = json!({ "questions": [{
            "id": "color", "header": "Color", "question": "Which color should I use?",
            "options": [{ "label": "Blue", "description": "Calm" }, { "label": "Red", "description": "Bold" }],
        }]});
        return call(n, "request_user_input", args);
    }
    if prompt.contains("HOLD_REPLY") {
        return text(n, "Held. ", Duration::from_secs(30), 1);
    }
    if prompt.contains("SLOW") {
        return text(n, "This answer takes a while to arrive. ", Duration::from_millis(250), 16);
    }
    if let Some(said) = after(&prompt, "SAY:") {
        return text(n, said, Duration::ZERO, 1);
    }
    text(n, HELLO, Duration::ZERO, 1)
}

fn created(n: u64) -> (String, Value) {
    ("response.created".into(), json!({ "type": "response.created", "response": { "id": format!("resp_{n}") } }))
}

fn completed(n: u64) -> (String, Value) {
    let [input, cached, output, reasoning] = USAGE;
    let usage = json!({
        "input_tokens": input, "input_tokens_details": { "cached_tokens": cached },
        "output_tokens": output, "output_tokens_details": { "reasoning_tokens": reasoning },
        "total_tokens": input + output,
    });
    (
        "response.completed".into(),
        json!({ "type": "response.completed", "response": { "id": format!("resp_{n}"), "usage": usage } }),
    )
}

/// A text reply: `chunk` sent `times` times, `pause` apart.
fn text(n: u64, chunk: &str, pause: Duration, times: usize) -> Reply {
    let id = format!("msg_{n}");
    let mut events = vec![
        created(n),
        (
            "response.output_item.added".into(),
            json!({ "type": "response.output_item.added", "output_index": 0,
                    "item": { "type": "message", "role": "assistant", "id": id, "status": "in_progress", "content": [] } }),
        ),
    ];
    for _ in 0..times {
        events.push((
            "response.output_text.delta".into(),
            json!({ "type": "response.output_text.delta", "item_id": id, "output_index": 0, "content_index": 0, "delta": chunk }),
        ));
    }
    let full = chunk.repeat(times);
    events.push((
        "response.output_item.done".into(),
        json!({ "type": "response.output_item.done", "output_index": 0, "item": {
            "type": "message", "role": "assistant", "id": id, "status": "completed",
            "content": [{ "type": "output_text", "text": full, "annotations": [] }] } }),
    ));
    events.push(completed(n));
    Reply::Sse(events, pause)
}

/// A function call reply.
fn call(n: u64, name: &str, args: Value) -> Reply {
    let item = json!({
        "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
        "name": name, "arguments": args.to_string(), "status": "completed",
    });
    Reply::Sse(
        vec![
            created(n),
            (
                "response.output_item.added".into(),
                json!({ "type": "response.output_item.added", "output_index": 0, "item": item }),
            ),
            (
                "response.output_item.done".into(),
                json!({ "type": "response.output_item.done", "output_index": 0, "item": item }),
            ),
            completed(n),
        ],
        Duration::ZERO,
    )
}

/// The `config.toml` for a Codex home that talks to `server` only.
pub fn codex_config(server: &ModelServer, key_var: &str) -> String {
    format!(
        r#"model = "scripted-model"
model_provider = "scripted"

[model_providers.scripted]
name = "Scripted local Responses server"
base_url = "{}/v1"
wire_api = "responses"
env_key = "{key_var}"
request_max_retries = 0
stream_max_retries = 0
"#,
        server.url()
    )
}
