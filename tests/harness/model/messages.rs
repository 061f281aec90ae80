//! The scripted Anthropic Messages API for Claude Code (`POST /v1/messages`, SSE or JSON;
//! `/v1/messages/count_tokens`; notes §5.6).
//!
//! When the last user message ends with a `tool_result`, the reply is
//! `DONE. tool result was: …`. Otherwise its trailing text block decides (Claude puts an
//! interrupted tool's result, a marker and the next prompt into one message: only the
//! trailing block counts):
//!
//! | trigger | reply |
//! |---|---|
//! | `RUN_BASH:<cmd>` | a `Bash` tool use running `<cmd>` |
//! | `WRITE_FILE:<path>` | a `Write` tool use creating `<path>` |
//! | `ASK_USER` | an `AskUserQuestion` tool use with one question (Blue / Red) |
//! | `SLOW` | an answer streamed over about four seconds |
//! | `HOLD_REPLY` | an answer whose every event comes 30 s after the last (a model call that keeps its CLI waiting for minutes) |
//! | `SAY:<text>` | `<text>` |
//! | anything else | [`HELLO`] |
//!
//! A tool use is only answered when the request offers that tool, so the CLI's side requests
//! (no tools) get plain text.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{ModelServer, Reply, Request, after, not_found};

/// The default answer.
pub const HELLO: &str = "Hello from the scripted Messages server.";

/// The usage every message reports: uncached input tokens, cache reads, cache writes, output.
pub const USAGE: [u64; 4] = [12, 1000, 200, 34];

fn usage(output: u64) -> Value {
    let [input, read, write, _] = USAGE;
    json!({ "input_tokens": input, "cache_read_input_tokens": read, "cache_creation_input_tokens": write, "output_tokens": output })
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Starts the scripted Messages server.
pub async fn start() -> ModelServer {
    ModelServer::start(reply).await
}

/// The messages of a request.
pub fn messages(request: &Request) -> Vec<Value> {
    request.body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn blocks(message: &Value) -> Vec<Value> {
    match message.get("content") {
        Some(Value::String(s)) => vec![json!({ "type": "text", "text": s })],
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    }
}

/// The text of a `tool_result` block.
pub fn result_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Every text a request's user messages carry (prompts and tool results), in order.
pub fn user_texts(request: &Request) -> Vec<String> {
    messages(request)
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(blocks)
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("tool_result") => result_text(&b),
            _ => b.get("text").and_then(Value::as_str).unwrap_or("").to_owned(),
        })
        .collect()
}

fn offers(request: &Request, tool: &str) -> bool {
    request
        .body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t.get("name").and_then(Value::as_str) == Some(tool)))
}

fn reply(request: &Request) -> Reply {
    if request.method != "POST" {
        return not_found();
    }
    if request.path.starts_with("/v1/messages/count_tokens") {
        return Reply::Json(200, json!({ "input_tokens": 10 }));
    }
    if !request.path.starts_with("/v1/messages") {
        return not_found();
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let stream = request.body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let last =
        messages(request).into_iter().rev().find(|m| m["role"] == "user").map(|m| blocks(&m)).unwrap_or_default();
    let trailing = last.last().cloned().unwrap_or(Value::Null);
    if trailing.get("type").and_then(Value::as_str) == Some("tool_result") {
        let clipped: String = result_text(&trailing).chars().take(600).collect();
        return text(n, &format!("DONE. tool result was: {clipped}"), stream, Duration::ZERO, 1);
    }
    let prompt = trailing.get("text").and_then(Value::as_str).unwrap_or("").to_owned();
    if let Some(cmd) = after(&prompt, "RUN_BASH:").filter(|_| offers(request, "Bash")) {
        return tool(n, "Bash", json!({ "command": cmd, "description": "Run the scripted command" }), stream);
    }
    if let Some(path) = after(&prompt, "WRITE_FILE:").filter(|_| offers(request, "Write")) {
        return tool(n, "Write", json!({ "file_path": path, "content": "written by the scripted model\n" }), stream);
    }
    if prompt.contains("ASK_USER") && offers(request, "AskUserQuestion") {
        let input = json!({ "questions": [{
            "question": "Which color should I use?", "header": "Color", "multiSelect": false,
            "options": [{ "label": "Blue", "description": "Calm" }, { "label": "Red", "description": "Bold" }],
        }]});
        return tool(n, "AskUserQuestion", input, stream);
    }
    if prompt.contains("HOLD_REPLY") {
        return text(n, "Held. ", stream, Duration::from_secs(30), 1);
    }
    if prompt.contains("SLOW") {
        return text(n, "This answer takes a while to arrive. ", stream, Duration::from_millis(250), 16);
    }
    if let Some(said) = after(&prompt, "SAY:") {
        return text(n, said, stream, Duration::ZERO, 1);
    }
    text(n, HELLO, stream, Duration::ZERO, 1)
}

fn start_event(n: u64) -> (String, Value) {
    (
        "message_start".into(),
        json!({ "type": "message_start", "message": {
            "id": format!("msg_scripted_{n}"), "type": "message", "role": "assistant", "model": "scripted-model",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(1) } }),
    )
}

fn end_events(stop_reason: &str) -> Vec<(String, Value)> {
    vec![
        (
            "message_delta".into(),
            json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason, "stop_sequence": null }, "usage": { "output_tokens": USAGE[3] } }),
        ),
        ("message_stop".into(), json!({ "type": "message_stop" })),
    ]
}

fn whole(n: u64, content: Value, stop_reason: &str) -> Reply {
    Reply::Json(
        200,
        json!({ "id": format!("msg_scripted_{n}"), "type": "message", "role": "assistant", "model": "scripted-model",
                "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                "usage": usage(USAGE[3]) }),
    )
}

fn text(n: u64, chunk: &str, stream: bool, pause: Duration, times: usize) -> Reply {
    if !stream {
        return whole(n, json!([{ "type": "text", "text": chunk.repeat(times) }]), "end_turn");
    }
    let mut events = vec![
        start_event(n),
        (
            "content_block_start".into(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
        ),
    ];
    for _ in 0..times {
        events.push((
            "content_block_delta".into(),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": chunk } }),
        ));
    }
    events.push(("content_block_stop".into(), json!({ "type": "content_block_stop", "index": 0 })));
    events.extend(end_events("end_turn"));
    Reply::Sse(events, pause)
}

fn tool(n: u64, name: &str, input: Value, stream: bool) -> Reply {
    let id = format!("toolu_scripted_{n}");
    if !stream {
        return whole(n, json!([{ "type": "tool_use", "id": id, "name": name, "input": input }]), "tool_use");
    }
    let mut events = vec![
        start_event(n),
        (
            "content_block_start".into(),
            json!({ "type": "content_block_start", "index": 0,
                    "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }),
        ),
        (
            "content_block_delta".into(),
            json!({ "type": "content_block_delta", "index": 0,
                    "delta": { "type": "input_json_delta", "partial_json": input.to_string() } }),
        ),
        ("content_block_stop".into(), json!({ "type": "content_block_stop", "index": 0 })),
    ];
    events.extend(end_events("tool_use"));
    Reply::Sse(events, Duration::ZERO)
}
