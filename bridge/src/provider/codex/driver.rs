//! One Codex turn: the task that drives a `codex app-server` child from handshake to the end of
//! its turn, and keeps answering it until the runner lets go.
//!
//! Start-up is `initialize` → `initialized` → `thread/start` (or `thread/resume`) →
//! `turn/start`; an interrupt that arrives meanwhile ends the session as interrupted (the
//! runner's stop then closes Codex's input, which ends Codex and anything it started). Then
//! notifications become events, the four human-in-the-loop requests become approvals and
//! questions, any other server request is refused at once, and `turn/completed` ends the turn
//! (after an interrupt, `thread/backgroundTerminals/clean` first stops the commands Codex keeps
//! running).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::map::{self, COMMAND_APPROVAL, FILE_APPROVAL, PERMISSIONS_APPROVAL, USER_INPUT};
use super::rpc::{Incoming, Rpc, RpcError};
use crate::error::code;
use crate::model::Profile;
use crate::provider::events::{self, Items};
use crate::provider::io::clip;
use crate::provider::{ProviderCommand, ProviderEvent, StartSpec, TurnOutcome};

/// How long start-up requests may take.
const STARTUP_BOUND: Duration = Duration::from_secs(60);
/// How long cleaning up after an interrupt may take.
const CLEAN_BOUND: Duration = Duration::from_secs(3);
/// JSON-RPC "method not found", for server requests the bridge does not handle.
const METHOD_NOT_FOUND: i64 = -32601;

/// A server request relayed to the caller and not yet answered.
enum Relayed {
    Approval { id: Value, method: String, params: Value },
    Question { id: Value, question: map::Question },
}

pub(super) struct Driver {
    pub rpc: Rpc,
    pub incoming: mpsc::UnboundedReceiver<Incoming>,
    pub commands: mpsc::Receiver<ProviderCommand>,
    pub events: mpsc::Sender<ProviderEvent>,
    pub stderr_done: tokio_util::sync::CancellationToken,
    pub spec: StartSpec,
}

/// Per-turn state.
#[derive(Default)]
struct Turn {
    thread_id: String,
    turn_id: String,
    items: Items,
    output: events::Output,
    relayed: HashMap<String, Relayed>,
    messages: Vec<(Option<String>, String)>,
    interrupted: bool,
    usage: crate::provider::usage::CodexTally,
}

/// Thread and turn settings for a profile: `review` runs in Codex's read-only sandbox with no
/// escalation possible; `workspace-write` runs sandboxed to the workspace and asks when it
/// needs more.
pub fn policy(profile: Profile) -> (&'static str, &'static str) {
    match profile {
        Profile::Review => ("read-only", "never"),
        Profile::WorkspaceWrite => ("workspace-write", "on-request"),
    }
}

fn native_id(id: &Value) -> String {
    id.to_string()
}

impl Driver {
    async fn emit(&self, event: ProviderEvent) -> bool {
        self.events.send(event).await.is_ok()
    }

    async fn emit_all(&self, list: Vec<(&'static str, Value)>) {
        for (event_type, payload) in list {
            self.emit(ProviderEvent::Event { event_type: event_type.into(), payload }).await;
        }
    }

    async fn warn(&self, message: String) {
        self.emit_all(vec![(events::PROVIDER_WARNING, json!({ "message": message }))]).await;
    }

    /// Runs the session to its end. When Codex's output ends first, the event stream ends
    /// once its stderr has been read (the runner quotes its last words).
    pub async fn run(self) {
        let (done, events) = (self.stderr_done.clone(), self.events.clone());
        self.run_inner().await;
        crate::provider::io::stderr_settled(&done).await;
        drop(events);
    }

    async fn run_inner(mut self) {
        let mut commands = std::mem::replace(&mut self.commands, mpsc::channel(1).1);
        let started = tokio::select! {
            r = self.start_turn() => Some(r),
            cmd = wait_interrupt(&mut commands) => { let _ = cmd; None }
        };
        self.commands = commands;
        let turn = match started {
            None => {
                self.emit(ProviderEvent::Finished(TurnOutcome::Interrupted)).await;
                return self.linger().await;
            }
            Some(Err(RpcError::Disconnected(_))) => return, // the stream ends: the runner reports it
            Some(Err(e)) => {
                let message = format!("codex could not start the turn: {e}");
                self.emit(ProviderEvent::Finished(TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message }))
                    .await;
                return self.linger().await;
            }
            Some(Ok(turn)) => turn,
        };
        if let Some(outcome) = self.relay(turn).await {
            self.emit(ProviderEvent::Finished(outcome)).await;
            self.linger().await;
        }
    }

    async fn start_turn(&mut self) -> Result<Turn, RpcError> {
        let init = json!({
            "clientInfo": { "name": "agent_bridge", "title": "agent-bridge", "version": env!("CARGO_PKG_VERSION") },
            "capabilities": { "experimentalApi": true },
        });
        self.rpc.call("initialize", init, STARTUP_BOUND).await?;
        self.rpc.notify("initialized", None);
        let (sandbox, approval) = policy(self.spec.profile);
        let mut params = json!({
            "cwd": self.spec.cwd, "sandbox": sandbox, "approvalPolicy": approval, "approvalsReviewer": "user",
        });
        if let Some(model) = &self.spec.model {
            params["model"] = json!(model);
        }
        let result = match &self.spec.resume_session {
            Some(thread) => {
                params["threadId"] = json!(thread);
                params["excludeTurns"] = json!(true);
                self.rpc.call("thread/resume", params, STARTUP_BOUND).await?
            }
            None => {
                params["serviceName"] = json!("agent-bridge");
                self.rpc.call("thread/start", params, STARTUP_BOUND).await?
            }
        };
        let thread_id = result.pointer("/thread/id").and_then(Value::as_str).unwrap_or_default().to_owned();
        let usage = crate::provider::usage::CodexTally::new(result.get("model").and_then(Value::as_str));
        if thread_id.is_empty() {
            return Err(RpcError::Remote { method: "thread/start".into(), code: 0, message: "no thread id".into() });
        }
        if self.spec.resume_session.as_ref().is_some_and(|want| *want != thread_id) {
            self.warn("codex resumed a different session than the one asked for".into()).await;
        }
        self.emit(ProviderEvent::Session(thread_id.clone())).await;
        let input = json!([{ "type": "text", "text": self.spec.prompt, "text_elements": [] }]);
        let result =
            self.rpc.call("turn/start", json!({ "threadId": thread_id, "input": input }), STARTUP_BOUND).await?;
        let turn_id = result.pointer("/turn/id").and_then(Value::as_str).unwrap_or_default().to_owned();
        Ok(Turn { thread_id, turn_id, usage, ..Turn::default() })
    }

    /// The turn's main loop; `None` when the output ended or the runner left.
    async fn relay(&mut self, mut turn: Turn) -> Option<TurnOutcome> {
        loop {
            tokio::select! {
                msg = self.incoming.recv() => {
                    let msg = msg?;
                    if let Some(outcome) = self.on_incoming(&mut turn, msg).await {
                        return Some(outcome);
                    }
                }
                cmd = self.commands.recv() => {
                    let cmd = cmd?;
                    self.on_command(&mut turn, cmd).await;
                }
            }
            if self.events.is_closed() {
                return None;
            }
        }
    }

    async fn on_incoming(&mut self, turn: &mut Turn, msg: Incoming) -> Option<TurnOutcome> {
        match msg {
            Incoming::Garbage(text) => self.warn(format!("unreadable output from codex: {}", clip(&text, 200))).await,
            Incoming::Request { id, method, params } => self.on_request(turn, id, method, params).await,
            Incoming::Notification { method, params } => {
                let thread = params.get("threadId").and_then(Value::as_str);
                if thread.is_some_and(|t| t != turn.thread_id) {
                    return None; // another thread's (a sub-agent's) chatter
                }
                match method.as_str() {
                    "serverRequest/resolved" => {
                        let key = params.get("requestId").map(native_id).unwrap_or_default();
                        if turn.relayed.remove(&key).is_some() {
                            self.emit(ProviderEvent::Withdrawn { native_id: key }).await;
                        }
                    }
                    "turn/completed" => return Some(self.complete(turn, &params).await),
                    "thread/tokenUsage/updated" => {
                        if let Some(usage) = turn.usage.update(&params) {
                            self.emit(ProviderEvent::Usage(usage)).await;
                        }
                    }
                    "item/commandExecution/outputDelta" => {
                        let item = params.get("itemId").and_then(Value::as_str).and_then(|id| turn.items.get(id));
                        let delta = params.get("delta").and_then(Value::as_str).unwrap_or_default();
                        if let Some((n, _)) = item
                            && let Some(payload) = turn.output.push(*n, delta, std::time::Instant::now())
                        {
                            self.emit_all(vec![(events::COMMAND_OUTPUT, payload)]).await;
                        }
                    }
                    _ => {
                        if method == "item/completed"
                            && let Some(item) = params.get("item").filter(|i| i["type"] == "agentMessage")
                        {
                            let text = item.get("text").and_then(Value::as_str).unwrap_or_default();
                            let phase = item.get("phase").and_then(Value::as_str).map(str::to_owned);
                            turn.messages.push((phase, text.to_owned()));
                        }
                        if method == "item/completed"
                            && let Some((n, _)) =
                                params.pointer("/item/id").and_then(Value::as_str).and_then(|id| turn.items.get(id))
                        {
                            turn.output.done(*n);
                        }
                        let list = map::notification(&method, &params, &mut turn.items);
                        self.emit_all(list).await;
                    }
                }
            }
        }
        None
    }

    async fn on_request(&mut self, turn: &mut Turn, id: Value, method: String, params: Value) {
        let key = native_id(&id);
        match method.as_str() {
            COMMAND_APPROVAL | FILE_APPROVAL | PERMISSIONS_APPROVAL => {
                let Some(payload) = map::approval(&method, &params, &turn.items) else { return };
                if self.spec.profile == Profile::Review {
                    // A review task never changes anything; Codex should not ask, but if it
                    // does, the answer is no.
                    self.rpc.respond(&id, map::decision_response(&method, &params, "deny", &[]));
                    self.warn("a review task cannot approve changes; the request was declined".into()).await;
                    return;
                }
                turn.relayed.insert(key.clone(), Relayed::Approval { id, method, params });
                self.emit(ProviderEvent::Approval { native_id: key, payload }).await;
            }
            USER_INPUT => match map::question(&params) {
                Ok(question) => {
                    let payload = question.payload.clone();
                    turn.relayed.insert(key.clone(), Relayed::Question { id, question });
                    self.emit(ProviderEvent::Question { native_id: key, payload }).await;
                }
                Err(why) => {
                    self.rpc.respond(&id, json!({ "answers": {} }));
                    self.warn(format!("a question was not relayed: {why}")).await;
                }
            },
            other => {
                tracing::debug!(method = other, "refusing a codex server request the bridge does not handle");
                self.rpc.respond_error(&id, METHOD_NOT_FOUND, &format!("agent-bridge does not handle {other}"));
            }
        }
    }

    async fn on_command(&mut self, turn: &mut Turn, cmd: ProviderCommand) {
        match cmd {
            ProviderCommand::Approval { native_id, decision, granted_permission_ids } => {
                if let Some(Relayed::Approval { id, method, params }) = turn.relayed.remove(&native_id) {
                    let answer = map::decision_response(&method, &params, &decision, &granted_permission_ids);
                    self.rpc.respond(&id, answer);
                    if decision == "cancel_task" {
                        turn.interrupted = true;
                    }
                }
            }
            ProviderCommand::Answers { native_id, answers } => {
                if let Some(Relayed::Question { id, question }) = turn.relayed.remove(&native_id) {
                    self.rpc.respond(&id, map::answers_response(&question, &answers));
                }
            }
            ProviderCommand::Steer(text) => {
                let params = json!({
                    "threadId": turn.thread_id, "expectedTurnId": turn.turn_id,
                    "input": [{ "type": "text", "text": text, "text_elements": [] }],
                });
                let (rpc, events) = (self.rpc.clone(), self.events.clone());
                crate::provider::io::spawn(async move {
                    if let Err(e) = rpc.call("turn/steer", params, STARTUP_BOUND).await {
                        let payload = json!({ "message": format!("the steering message was not delivered: {e}") });
                        let _ = events
                            .send(ProviderEvent::Event { event_type: events::PROVIDER_WARNING.into(), payload })
                            .await;
                    }
                });
            }
            ProviderCommand::Interrupt => {
                turn.interrupted = true;
                let params = json!({ "threadId": turn.thread_id, "turnId": turn.turn_id });
                let rpc = self.rpc.clone();
                crate::provider::io::spawn(async move {
                    if let Err(e) = rpc.call("turn/interrupt", params, STARTUP_BOUND).await {
                        tracing::debug!(cause = %e, "turn/interrupt failed");
                    }
                });
            }
        }
    }

    async fn complete(&mut self, turn: &mut Turn, params: &Value) -> TurnOutcome {
        let leftovers = turn.items.close_all();
        self.emit_all(leftovers).await;
        let status = params.pointer("/turn/status").and_then(Value::as_str).unwrap_or("failed");
        if turn.interrupted || status == "interrupted" {
            // Codex keeps commands running past an interrupt (notes §7): stop them.
            let clean = json!({ "threadId": turn.thread_id });
            if let Err(e) = self.rpc.call("thread/backgroundTerminals/clean", clean, CLEAN_BOUND).await {
                tracing::debug!(cause = %e, "thread/backgroundTerminals/clean failed");
            }
        }
        match status {
            "completed" if !turn.interrupted => TurnOutcome::Completed(map::final_text(&turn.messages)),
            "completed" | "interrupted" => TurnOutcome::Interrupted,
            _ => {
                let message = params
                    .pointer("/turn/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported the turn as failed");
                TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message: clip(message, 2000) }
            }
        }
    }

    /// After the turn: refuse whatever Codex still asks until the runner lets go (it then
    /// drops its command sender, and leaving here closes Codex's stdin).
    async fn linger(mut self) {
        loop {
            tokio::select! {
                cmd = self.commands.recv() => if cmd.is_none() { return },
                msg = self.incoming.recv() => match msg {
                    None => return,
                    Some(Incoming::Request { id, .. }) => self.rpc.respond_error(&id, METHOD_NOT_FOUND, "the turn is over"),
                    Some(_) => {}
                },
            }
        }
    }
}

/// Resolves when an interrupt arrives (other commands before the turn exists are dropped:
/// there is nothing to answer or steer yet); never resolves if the runner lets go.
async fn wait_interrupt(commands: &mut mpsc::Receiver<ProviderCommand>) -> ProviderCommand {
    loop {
        match commands.recv().await {
            Some(ProviderCommand::Interrupt) => return ProviderCommand::Interrupt,
            Some(_) => continue,
            None => std::future::pending::<()>().await,
        }
    }
}
