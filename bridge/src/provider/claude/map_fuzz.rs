//! Fuzz target of the Claude stream mapping (`fuzz/corpus/claude/`: the stream-json
//! transcript and the unit tests' shapes): sessions of mutated stdout lines go through the
//! driver's path, `io::parse_line` → the message type → tool uses and results, `can_use_tool`
//! permissions and questions, and the control responses back to the CLI.
//!
//! Properties: nothing panics; every event has a known type and a bounded object payload that
//! round-trips through JSON; approvals offer only the four decisions; every control response
//! body says `allow` or `deny` in the shape the CLI reads.

use std::collections::HashSet;

use crate::fuzz_events as events;
use crate::mutate;
use proptest::prelude::*;
use serde_json::Value;

use super::map::{self, Permission};
use crate::provider::events::Items;
use crate::provider::io::{Read, parse_line};
use events::{answers_for, check_approval, check_event, check_questions};
use mutate::Corpus;

const WORDS: &[&str] = &[
    "assistant",
    "user",
    "result",
    "system",
    "control_request",
    "control_response",
    "control_cancel_request",
    "can_use_tool",
    "tool_use",
    "tool_result",
    "text",
    "Bash",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "AskUserQuestion",
    "WebFetch",
    "WebSearch",
    "mcp__x__y",
    "success",
    "error_during_execution",
];

fn check_body(body: &Value) -> Result<(), TestCaseError> {
    mutate::round_trips(body)?;
    match body["behavior"].as_str() {
        Some("allow") => prop_assert!(body.get("updatedInput").is_some(), "{body}"),
        Some("deny") => prop_assert!(body["message"].is_string(), "{body}"),
        _ => return Err(TestCaseError::fail(format!("a control response without a behavior: {body}"))),
    }
    if let Some(list) = body.get("updatedPermissions") {
        let list = list.as_array().ok_or_else(|| TestCaseError::fail("updatedPermissions is not a list"))?;
        prop_assert!(list.iter().all(|s| s["destination"] == "session"), "a grant outlives the session: {body}");
    }
    Ok(())
}

fn on_request(request: &Value, choice: u64, declined: &mut HashSet<String>) -> Result<(), TestCaseError> {
    if request.get("subtype").and_then(Value::as_str) != Some("can_use_tool") {
        return Ok(());
    }
    let tool = request.get("tool_name").and_then(Value::as_str).unwrap_or("");
    let _ = map::mutates(tool);
    match map::permission(request) {
        Ok(Permission::Approval(payload)) => {
            check_approval(&payload)?;
            for decision in ["approve_once", "approve_session"] {
                check_body(&map::allow(request, decision))?;
            }
            check_body(&map::deny("The operator denied this request.", choice & 1 == 0))?;
            if choice & 2 == 0
                && let Some(id) = request.get("tool_use_id").and_then(Value::as_str)
            {
                declined.insert(id.to_owned());
            }
        }
        Ok(Permission::Question(payload)) => {
            check_questions(&payload)?;
            let answers = answers_for(&payload, &[choice, choice.rotate_left(17), choice.rotate_left(33)]);
            let body = map::answer(request, &answers);
            check_body(&body)?;
            if request.get("input").is_some_and(Value::is_object) {
                prop_assert!(body["updatedInput"]["answers"].is_object(), "{body}");
            }
        }
        Err(why) => prop_assert!(!why.is_empty()),
    }
    Ok(())
}

/// Runs one session of stdout lines the way the driver does.
fn session(lines: &[mutate::Bytes], choices: &[u64]) -> Result<(), TestCaseError> {
    let mut items = Items::default();
    let mut declined = HashSet::new();
    for (index, line) in lines.iter().enumerate() {
        let choice = choices.get(index).copied().unwrap_or_default();
        let msg = match parse_line(line) {
            Read::Json(msg) => msg,
            Read::Garbage(text) => {
                prop_assert!(text.chars().count() <= 200);
                continue;
            }
            Read::TooLong => return Err(TestCaseError::fail("parse_line never says TooLong")),
        };
        let blocks = msg.pointer("/message/content").and_then(Value::as_array).cloned().unwrap_or_default();
        match msg.get("type").and_then(Value::as_str).unwrap_or("") {
            "control_request" => on_request(msg.get("request").unwrap_or(&Value::Null), choice, &mut declined)?,
            "assistant" => {
                for block in blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use")) {
                    if let Some((event_type, payload)) = map::tool_use(block, &mut items) {
                        check_event(event_type, &payload)?;
                    }
                }
            }
            "user" => {
                for block in blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")) {
                    let id = block.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                    if let Some((event_type, payload)) = map::tool_result(block, &mut items, declined.contains(id)) {
                        check_event(event_type, &payload)?;
                    }
                }
            }
            "result" => {
                let why = map::result_error(&msg);
                prop_assert!(!why.is_empty());
            }
            _ => {}
        }
    }
    for (event_type, payload) in items.close_all() {
        check_event(event_type, &payload)?;
    }
    Ok(())
}

#[test]
fn fuzz_claude_stream() {
    let corpus = Corpus::load("claude", WORDS);
    let lines = proptest::collection::vec(mutate::json_lines(&corpus), 1..8);
    let choices = proptest::collection::vec(any::<u64>(), 8);
    mutate::run("claude_stream", (lines, choices), |(lines, choices)| session(&lines, &choices));
}
