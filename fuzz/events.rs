//! What every normalized event and approval payload must look like, whatever the CLI sent:
//! shared by the Codex and Claude stream-mapping fuzz targets of the bridge.

#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::Value;

use crate::provider::events;

/// Every event type a mapping may produce.
pub const EVENT_TYPES: &[&str] = &[
    events::TURN_STARTED,
    events::AGENT_MESSAGE,
    events::COMMAND_STARTED,
    events::COMMAND_OUTPUT,
    events::COMMAND_FINISHED,
    events::FILE_CHANGE_STARTED,
    events::FILE_CHANGE_FINISHED,
    events::TOOL_STARTED,
    events::TOOL_FINISHED,
    events::PLAN_UPDATED,
    events::PROVIDER_WARNING,
    events::PROVIDER_ERROR,
];

/// The four decisions a caller may be offered.
pub const DECISIONS: &[&str] = &["approve_once", "approve_session", "deny", "cancel_task"];

/// The slack `clip` adds: the `…` it appends.
const ELLIPSIS: usize = '…'.len_utf8();

fn string_at_most(payload: &Value, key: &str, max: usize) -> Result<(), TestCaseError> {
    if let Some(value) = payload.get(key).filter(|v| !v.is_null()) {
        let text = value.as_str().ok_or_else(|| TestCaseError::fail(format!("{key} is not a string: {value}")))?;
        let status = payload.get("status").and_then(Value::as_str).unwrap_or("-");
        prop_assert!(text.len() <= max + ELLIPSIS, "{} is {} bytes, over {} (status {})", key, text.len(), max, status);
    }
    Ok(())
}

/// A clipped tool input: the value itself when its JSON is small, else a clipped string.
fn bounded(value: &Value) -> Result<(), TestCaseError> {
    match value {
        Value::String(text) => prop_assert!(text.len() <= events::MAX_INPUT_BYTES + ELLIPSIS + 2),
        other => prop_assert!(other.to_string().len() <= events::MAX_INPUT_BYTES),
    }
    Ok(())
}

/// One emitted event: a known type, an object payload that round-trips through JSON, an
/// item number from 1, and the clipped fields within their bounds.
pub fn check_event(event_type: &str, payload: &Value) -> Result<(), TestCaseError> {
    prop_assert!(EVENT_TYPES.contains(&event_type), "unknown event type {event_type}");
    prop_assert!(payload.is_object(), "{event_type}: the payload is not an object: {payload}");
    super::mutate::round_trips(payload)?;
    if let Some(item) = payload.get("item") {
        prop_assert!(item.as_u64().is_some_and(|n| n >= 1), "{event_type}: item {item}");
    }
    string_at_most(payload, "command", 4000)?;
    string_at_most(payload, "output", 2000)?;
    string_at_most(payload, "error", 2000)?;
    string_at_most(payload, "message", 2000)?;
    if let Some(input) = payload.get("input") {
        bounded(input)?;
    }
    if let Some(status) = payload.get("status") {
        let known = ["completed", "failed", "declined", "interrupted", "in_progress", "unknown"];
        prop_assert!(status.as_str().is_some_and(|s| known.contains(&s)), "{event_type}: status {status}");
    }
    Ok(())
}

/// An approval payload: a category, a title, offered decisions among the four (always with
/// `deny` and `cancel_task`), and bounded command and input texts.
pub fn check_approval(payload: &Value) -> Result<(), TestCaseError> {
    prop_assert!(payload.is_object());
    super::mutate::round_trips(payload)?;
    prop_assert!(payload.get("category").and_then(Value::as_str).is_some_and(|c| !c.is_empty()));
    prop_assert!(payload.get("title").is_some_and(Value::is_string), "no title: {payload}");
    let offered = payload.get("available_decisions").and_then(Value::as_array);
    let offered: Vec<&str> = offered.map(|l| l.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    prop_assert!(offered.iter().all(|d| DECISIONS.contains(d)), "decisions {offered:?}");
    prop_assert!(offered.contains(&"deny") && offered.contains(&"cancel_task"), "decisions {offered:?}");
    string_at_most(payload, "command_display", 4000)?;
    string_at_most(payload, "reason", 2000)?;
    if let Some(input) = payload.get("tool_input") {
        bounded(input)?;
    }
    Ok(())
}

/// A question payload: at most ten questions, each with an id, a prompt and option ids.
pub fn check_questions(payload: &Value) -> Result<(), TestCaseError> {
    super::mutate::round_trips(payload)?;
    let list = payload.get("questions").and_then(Value::as_array);
    let list = list.ok_or_else(|| TestCaseError::fail(format!("no questions: {payload}")))?;
    prop_assert!(list.len() <= 10, "{} questions relayed", list.len());
    for q in list {
        prop_assert!(q.get("question_id").and_then(Value::as_str).is_some_and(|id| !id.is_empty()));
        prop_assert!(q.get("prompt").is_some_and(Value::is_string));
        for option in q.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            prop_assert!(option.get("option_id").and_then(Value::as_str).is_some_and(|id| id.starts_with("opt_")));
        }
    }
    Ok(())
}

/// Answers a caller might give to `payload`'s questions: picked option ids (some unknown)
/// and free text, driven by `choices`.
pub fn answers_for(payload: &Value, choices: &[u64]) -> Value {
    let questions = payload.get("questions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (i, choice) in choices.iter().enumerate() {
        let id = match questions.get(i % questions.len().max(1)) {
            Some(q) if choice % 7 != 0 => q.get("question_id").cloned().unwrap_or(Value::Null),
            _ => Value::String(format!("q{}", choice % 20)),
        };
        let picks: Vec<Value> =
            (0..choice % 4).map(|j| Value::String(format!("opt_{}", (choice >> (8 * j)) % 12))).collect();
        let text = match choice % 5 {
            0 => Value::Null,
            1 => Value::String(String::new()),
            2 => Value::String("é".repeat(3000)),
            _ => Value::String("other".into()),
        };
        out.push(serde_json::json!({ "question_id": id, "selected_option_ids": picks, "text": text }));
    }
    Value::Array(out)
}
