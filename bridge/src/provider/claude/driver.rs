//! One Claude Code turn: the task that drives a `claude -p` stream-json child.
//!
//! The control `initialize` goes first; once it is answered the prompt is written as a user
//! message. `can_use_tool` requests become approvals (`AskUserQuestion` a question) — in a
//! `review` task every tool use that would ask is refused here, without a human — and
//! `control_cancel_request` withdraws one. The turn ends with the CLI's `result`. An
//! interrupt is the control `interrupt` request (or, with an approval pending, a deny that
//! stops the turn).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::map::{self, Permission};
use crate::error::code;
use crate::model::Profile;
use crate::provider::events::{self, Items};
use crate::provider::io::{Read, clip};
use crate::provider::{ProviderCommand, ProviderEvent, StartSpec, TurnOutcome};

/// How long the control `initialize` may take.
const INIT_BOUND: Duration = Duration::from_secs(60);
const INIT_ID: &str = "bridge_init";

pub(super) struct Driver {
    pub lines: mpsc::Receiver<Read>,
    pub outbox: mpsc::UnboundedSender<Value>,
    pub commands: mpsc::Receiver<ProviderCommand>,
    pub events: mpsc::Sender<ProviderEvent>,
    pub stderr_done: tokio_util::sync::CancellationToken,
    pub spec: StartSpec,
}

#[derive(Default)]
struct State {
    initialized: bool,
    session_seen: bool,
    items: Items,
    /// Relayed `can_use_tool` requests by the CLI's request id.
    relayed: HashMap<String, Value>,
    /// Tool uses the bridge refused (their results are `declined`).
    declined: HashSet<String>,
    interrupted: bool,
    next_id: u64,
    /// The model `system/init` named.
    model: Option<String>,
}

fn control_response(request_id: &str, body: Value) -> Value {
    json!({ "type": "control_response", "response": { "subtype": "success", "request_id": request_id, "response": body } })
}

fn control_error(request_id: &str, message: &str) -> Value {
    json!({ "type": "control_response", "response": { "subtype": "error", "request_id": request_id, "error": message } })
}

impl Driver {
    async fn emit(&self, event: ProviderEvent) {
        let _ = self.events.send(event).await;
    }

    async fn event(&self, event_type: &str, payload: Value) {
        self.emit(ProviderEvent::Event { event_type: event_type.into(), payload }).await;
    }

    fn send(&self, msg: Value) {
        let _ = self.outbox.send(msg);
    }

    /// Runs the session to its end. When the CLI's output ends first, the event stream ends
    /// once its stderr has been read (the runner quotes its last words).
    pub async fn run(self) {
        let (done, events) = (self.stderr_done.clone(), self.events.clone());
        self.run_inner().await;
        crate::provider::io::stderr_settled(&done).await;
        drop(events);
    }

    async fn run_inner(mut self) {
        self.send(json!({ "type": "control_request", "request_id": INIT_ID, "request": { "subtype": "initialize", "hooks": null } }));
        let mut state = State::default();
        let init_deadline = tokio::time::Instant::now() + INIT_BOUND;
        let outcome = loop {
            tokio::select! {
                line = self.lines.recv() => {
                    let Some(line) = line else { return }; // output ended: the runner reports it
                    if let Some(outcome) = self.on_line(&mut state, line).await {
                        break outcome;
                    }
                }
                cmd = self.commands.recv() => {
                    let Some(cmd) = cmd else { return };
                    if let Some(outcome) = self.on_command(&mut state, cmd).await {
                        break outcome;
                    }
                }
                _ = tokio::time::sleep_until(init_deadline), if !state.initialized => {
                    let message = "claude did not answer the control initialize in time".to_owned();
                    break TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message };
                }
            }
            if self.events.is_closed() {
                return;
            }
        };
        let leftovers = state.items.close_all();
        for (event_type, payload) in leftovers {
            self.event(event_type, payload).await;
        }
        self.emit(ProviderEvent::Finished(outcome)).await;
        self.linger().await;
    }

    async fn on_line(&mut self, state: &mut State, line: Read) -> Option<TurnOutcome> {
        let msg = match line {
            Read::Json(msg) => msg,
            Read::Garbage(text) => {
                self.event(
                    events::PROVIDER_WARNING,
                    json!({ "message": format!("unreadable output from claude: {text}") }),
                )
                .await;
                return None;
            }
            Read::TooLong => {
                let message = "claude wrote a line longer than the bridge accepts".to_owned();
                return Some(TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message });
            }
        };
        match msg.get("type").and_then(Value::as_str).unwrap_or("") {
            "control_response" => {
                let response = msg.get("response").unwrap_or(&Value::Null);
                if response.get("request_id").and_then(Value::as_str) == Some(INIT_ID) && !state.initialized {
                    if response.get("subtype").and_then(Value::as_str) != Some("success") {
                        let why = response.get("error").and_then(Value::as_str).unwrap_or("no reason given");
                        let message = format!("claude refused the control initialize: {}", clip(why, 500));
                        return Some(TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message });
                    }
                    state.initialized = true;
                    self.send(json!({
                        "type": "user", "session_id": "", "parent_tool_use_id": null,
                        "message": { "role": "user", "content": self.spec.prompt },
                    }));
                }
            }
            "control_request" => self.on_request(state, &msg).await,
            "control_cancel_request" => {
                let id = msg.get("request_id").and_then(Value::as_str).unwrap_or("").to_owned();
                if state.relayed.remove(&id).is_some() {
                    self.emit(ProviderEvent::Withdrawn { native_id: id }).await;
                }
            }
            "system" => {
                let session = msg.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty());
                if msg.get("subtype").and_then(Value::as_str) == Some("api_retry") {
                    self.event(events::PROVIDER_ERROR, map::api_retry(&msg)).await;
                }
                if msg.get("subtype").and_then(Value::as_str) == Some("init") {
                    state.model = msg.get("model").and_then(Value::as_str).map(str::to_owned);
                }
                if msg.get("subtype").and_then(Value::as_str) == Some("init")
                    && let Some(session) = session
                    && !state.session_seen
                {
                    state.session_seen = true;
                    self.emit(ProviderEvent::Session(session.to_owned())).await;
                    self.event(events::TURN_STARTED, json!({})).await;
                }
            }
            "assistant" => {
                let blocks = msg.pointer("/message/content").and_then(Value::as_array).cloned().unwrap_or_default();
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            if !text.is_empty() {
                                self.event(events::AGENT_MESSAGE, json!({ "text": text })).await;
                            }
                        }
                        Some("tool_use") => {
                            if let Some((t, p)) = map::tool_use(&block, &mut state.items) {
                                self.event(t, p).await;
                            }
                        }
                        _ => {}
                    }
                }
            }
            "user" => {
                let blocks = msg.pointer("/message/content").and_then(Value::as_array).cloned().unwrap_or_default();
                for block in blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")) {
                    let id = block.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                    let declined = state.declined.contains(id);
                    if let Some((t, p)) = map::tool_result(block, &mut state.items, declined) {
                        self.event(t, p).await;
                    }
                }
            }
            "result" => {
                if let Some(usage) = crate::provider::usage::claude_result(&msg, state.model.as_deref()) {
                    self.emit(ProviderEvent::Usage(usage)).await;
                }
                let ok = msg.get("subtype").and_then(Value::as_str) == Some("success")
                    && !msg.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                return Some(if state.interrupted {
                    TurnOutcome::Interrupted
                } else if ok {
                    TurnOutcome::Completed(msg.get("result").and_then(Value::as_str).unwrap_or("").to_owned())
                } else {
                    TurnOutcome::Failed { code: map::result_code(&msg), message: map::result_error(&msg) }
                });
            }
            _ => {}
        }
        None
    }

    async fn on_request(&mut self, state: &mut State, msg: &Value) {
        let id = msg.get("request_id").and_then(Value::as_str).unwrap_or("").to_owned();
        let request = msg.get("request").cloned().unwrap_or(Value::Null);
        let subtype = request.get("subtype").and_then(Value::as_str).unwrap_or("");
        if subtype != "can_use_tool" {
            tracing::debug!(subtype, "refusing a claude control request the bridge does not handle");
            self.send(control_error(&id, &format!("agent-bridge does not handle {subtype}")));
            return;
        }
        let tool = request.get("tool_name").and_then(Value::as_str).unwrap_or("");
        let tool_use = request.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_owned();
        if self.spec.profile == Profile::Review && map::mutates(tool) {
            state.declined.insert(tool_use);
            let why = format!("This task runs with the read-only review profile: {tool} is not allowed.");
            self.send(control_response(&id, map::deny(&why, false)));
            self.event(events::PROVIDER_WARNING, json!({ "message": format!("a review task refused {tool}") })).await;
            return;
        }
        match map::permission(&request) {
            Ok(Permission::Approval(payload)) => {
                state.relayed.insert(id.clone(), request);
                self.emit(ProviderEvent::Approval { native_id: id, payload }).await;
            }
            Ok(Permission::Question(payload)) => {
                state.relayed.insert(id.clone(), request);
                self.emit(ProviderEvent::Question { native_id: id, payload }).await;
            }
            Err(why) => {
                state.declined.insert(tool_use);
                self.send(control_response(
                    &id,
                    map::deny(&format!("The bridge cannot relay this request: {why}"), false),
                ));
                self.event(
                    events::PROVIDER_WARNING,
                    json!({ "message": format!("a {tool} request was refused: {why}") }),
                )
                .await;
            }
        }
    }

    async fn on_command(&mut self, state: &mut State, cmd: ProviderCommand) -> Option<TurnOutcome> {
        match cmd {
            ProviderCommand::Approval { native_id, decision, .. } => {
                let request = state.relayed.remove(&native_id)?;
                let tool_use = request.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_owned();
                let body = match decision.as_str() {
                    "approve_once" | "approve_session" => map::allow(&request, &decision),
                    "cancel_task" => {
                        state.interrupted = true;
                        state.declined.insert(tool_use);
                        map::deny("The operator cancelled the task.", true)
                    }
                    _ => {
                        state.declined.insert(tool_use);
                        map::deny("The operator denied this request.", false)
                    }
                };
                self.send(control_response(&native_id, body));
            }
            ProviderCommand::Answers { native_id, answers } => {
                let request = state.relayed.remove(&native_id)?;
                let body = if answers.as_array().is_some_and(|a| !a.is_empty()) {
                    map::answer(&request, &answers)
                } else {
                    map::deny("The question could not be relayed to a human.", false)
                };
                self.send(control_response(&native_id, body));
            }
            ProviderCommand::Steer(_) => {
                let message = "claude cannot take a message while it works; it was not delivered";
                self.event(events::PROVIDER_WARNING, json!({ "message": message })).await;
            }
            ProviderCommand::Interrupt => {
                if !state.initialized {
                    return Some(TurnOutcome::Interrupted);
                }
                state.interrupted = true;
                state.next_id += 1;
                let id = format!("bridge_{}", state.next_id);
                self.send(
                    json!({ "type": "control_request", "request_id": id, "request": { "subtype": "interrupt" } }),
                );
            }
        }
        None
    }

    /// After the turn: refuse whatever the CLI still asks until the runner lets go (leaving
    /// here drops the outbox, which closes the CLI's stdin: an idle CLI then exits).
    async fn linger(mut self) {
        loop {
            tokio::select! {
                cmd = self.commands.recv() => if cmd.is_none() { return },
                line = self.lines.recv() => match line {
                    None => return,
                    Some(Read::Json(msg)) if msg.get("type").and_then(Value::as_str) == Some("control_request") => {
                        let id = msg.get("request_id").and_then(Value::as_str).unwrap_or("");
                        self.send(control_error(id, "the turn is over"));
                    }
                    Some(_) => {}
                },
            }
        }
    }
}
