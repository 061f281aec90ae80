//! Fuzz target of the Codex stream mapping (`fuzz/corpus/codex/`: the app-server transcript
//! and the unit tests' shapes): sessions of mutated stdout lines go through the driver's path,
//! `io::parse_line` → `rpc::classify` → the notification, approval and question mappings and
//! the answers back to Codex.
//!
//! Properties: nothing panics; every event has a known type and a bounded object payload that
//! round-trips through JSON; approvals offer only the four decisions; answers to Codex are
//! objects of the shape Codex reads.

use crate::fuzz_events as events;
use crate::mutate;
use proptest::prelude::*;
use serde_json::Value;

use super::map::{self, COMMAND_APPROVAL, FILE_APPROVAL, PERMISSIONS_APPROVAL, USER_INPUT};
use super::rpc::{self, Classified, Incoming};
use crate::provider::events::{Items, Output};
use crate::provider::io::{Read, parse_line};
use events::{DECISIONS, answers_for, check_approval, check_event, check_questions};
use mutate::Corpus;

const METHODS: &[&str] = &[
    "item/started",
    "item/completed",
    "turn/started",
    "turn/plan/updated",
    "error",
    "warning",
    "configWarning",
    "deprecationNotice",
    "item/commandExecution/outputDelta",
    COMMAND_APPROVAL,
    FILE_APPROVAL,
    PERMISSIONS_APPROVAL,
    USER_INPUT,
    "commandExecution",
    "fileChange",
    "agentMessage",
    "mcpToolCall",
    "dynamicToolCall",
    "webSearch",
    "final_answer",
    "acceptForSession",
];

fn check_decision(method: &str, params: &Value, choice: u64) -> Result<(), TestCaseError> {
    let decision = DECISIONS.get((choice % 5) as usize).copied().unwrap_or("junk");
    let granted: Vec<String> = match choice % 3 {
        0 => Vec::new(),
        1 => vec!["network".into()],
        _ => vec!["fileSystem".into(), "junk".into()],
    };
    let answer = map::decision_response(method, params, decision, &granted);
    mutate::round_trips(&answer)?;
    if method == PERMISSIONS_APPROVAL {
        prop_assert!(answer["permissions"].is_object(), "{answer}");
        prop_assert!(matches!(answer["scope"].as_str(), Some("turn" | "session")), "{answer}");
        if !matches!(decision, "approve_once" | "approve_session") {
            prop_assert_eq!(&answer["permissions"], &serde_json::json!({}), "a refusal grants nothing");
        }
    } else {
        let native = answer["decision"].as_str().unwrap_or("");
        prop_assert!(["accept", "acceptForSession", "decline", "cancel"].contains(&native), "{answer}");
    }
    Ok(())
}

/// Runs one session of stdout lines the way the driver does.
fn session(lines: &[mutate::Bytes], choices: &[u64]) -> Result<(), TestCaseError> {
    let mut items = Items::default();
    let mut output = Output::default();
    let mut messages: Vec<(Option<String>, String)> = Vec::new();
    let now = std::time::Instant::now();
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
        match rpc::classify(msg) {
            // An answer to one of ours: routed to its waiter, nothing mapped.
            Classified::Response { .. } => {}
            Classified::Other(Incoming::Garbage(why)) => prop_assert!(!why.is_empty()),
            Classified::Other(Incoming::Request { id, method, params }) => {
                prop_assert!(id.is_number() || id.is_string());
                match method.as_str() {
                    COMMAND_APPROVAL | FILE_APPROVAL | PERMISSIONS_APPROVAL => {
                        let payload = map::approval(&method, &params, &items);
                        let payload = payload.ok_or_else(|| TestCaseError::fail("an approval was not mapped"))?;
                        check_approval(&payload)?;
                        check_decision(&method, &params, choice)?;
                    }
                    USER_INPUT => match map::question(&params) {
                        Ok(question) => {
                            check_questions(&question.payload)?;
                            let answers = answers_for(&question.payload, &choices[index..]);
                            let answer = map::answers_response(&question, &answers);
                            mutate::round_trips(&answer)?;
                            prop_assert!(answer["answers"].is_object(), "{answer}");
                        }
                        Err(why) => prop_assert!(!why.is_empty()),
                    },
                    other => prop_assert!(map::approval(other, &params, &items).is_none()),
                }
            }
            Classified::Other(Incoming::Notification { method, params }) => {
                if method == "item/commandExecution/outputDelta" {
                    let item = params.get("itemId").and_then(Value::as_str).and_then(|id| items.get(id));
                    let delta = params.get("delta").and_then(Value::as_str).unwrap_or_default();
                    if let Some((n, _)) = item
                        && let Some(payload) = output.push(*n, delta, now)
                    {
                        check_event(crate::provider::events::COMMAND_OUTPUT, &payload)?;
                    }
                    continue;
                }
                if method == "item/completed"
                    && let Some(item) = params.get("item").filter(|i| i["type"] == "agentMessage")
                {
                    let text = item.get("text").and_then(Value::as_str).unwrap_or_default();
                    messages.push((item.get("phase").and_then(Value::as_str).map(str::to_owned), text.to_owned()));
                }
                for (event_type, payload) in map::notification(&method, &params, &mut items) {
                    check_event(event_type, &payload)?;
                }
            }
        }
    }
    let final_text = map::final_text(&messages);
    prop_assert!(messages.is_empty() || messages.iter().any(|(_, text)| *text == final_text));
    for (event_type, payload) in items.close_all() {
        check_event(event_type, &payload)?;
    }
    Ok(())
}

#[test]
fn fuzz_codex_stream() {
    let corpus = Corpus::load("codex", METHODS);
    let lines = proptest::collection::vec(mutate::json_lines(&corpus), 1..8);
    let choices = proptest::collection::vec(any::<u64>(), 8);
    mutate::run("codex_stream", (lines, choices), |(lines, choices)| session(&lines, &choices));
}

#[test]
fn fuzz_codex_command_display() {
    let corpus = Corpus::load("codex", &[]);
    mutate::run("codex_command_display", mutate::bytes(&corpus), |bytes| {
        let text = String::from_utf8_lossy(&bytes);
        let shown = map::command_display(&text);
        prop_assert!(shown.len() <= text.len(), "the display form is never longer than the command");
        Ok(())
    });
}
