//! The Codex driver against a scripted peer on in-memory channels: the handshake, a refused
//! unknown server request, a withdrawn approval, and the interrupt → clean → interrupted order.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::driver::Driver;
use super::rpc::Rpc;
use crate::model::Profile;
use crate::provider::io::Read;
use crate::provider::{ProviderCommand, ProviderEvent, StartSpec, TurnOutcome};

struct Peer {
    lines: mpsc::Sender<Read>,
    sent: mpsc::UnboundedReceiver<Value>,
}

impl Peer {
    async fn expect(&mut self, method: &str) -> Value {
        let msg =
            tokio::time::timeout(Duration::from_secs(5), self.sent.recv()).await.expect("in time").expect("a message");
        assert_eq!(msg["method"], method, "{msg}");
        msg
    }

    async fn reply(&self, to: &Value, result: Value) {
        self.lines.send(Read::Json(json!({ "id": to["id"], "result": result }))).await.unwrap();
    }

    async fn say(&self, msg: Value) {
        self.lines.send(Read::Json(msg)).await.unwrap();
    }
}

async fn next(events: &mut mpsc::Receiver<ProviderEvent>) -> ProviderEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("in time").expect("an event")
}

async fn start(resume: Option<&str>) -> (Peer, mpsc::Receiver<ProviderEvent>, mpsc::Sender<ProviderCommand>) {
    let (lines_tx, lines) = mpsc::channel(16);
    let (outbox, sent) = mpsc::unbounded_channel();
    let (rpc, incoming, _router) = Rpc::start(lines, outbox);
    let (event_tx, events) = mpsc::channel(16);
    let (commands, command_rx) = mpsc::channel(16);
    let spec = StartSpec {
        task_id: "agt_test".into(),
        cwd: "/w".into(),
        workdir: "/w".into(),
        profile: Profile::WorkspaceWrite,
        prompt: "hello".into(),
        model: None,
        resume_session: resume.map(str::to_owned),
        git: None,
        hold: None,
    };
    let done = tokio_util::sync::CancellationToken::new();
    done.cancel();
    let driver = Driver { rpc, incoming, commands: command_rx, events: event_tx, stderr_done: done, spec };
    tokio::spawn(driver.run());
    (Peer { lines: lines_tx, sent }, events, commands)
}

async fn handshake(peer: &mut Peer, events: &mut mpsc::Receiver<ProviderEvent>, method: &str) -> Value {
    let init = peer.expect("initialize").await;
    assert_eq!(init["params"]["capabilities"]["experimentalApi"], true);
    assert!(init.get("jsonrpc").is_none());
    peer.reply(&init, json!({})).await;
    peer.expect("initialized").await;
    let thread = peer.expect(method).await;
    assert_eq!(thread["params"]["sandbox"], "workspace-write");
    assert_eq!(thread["params"]["approvalPolicy"], "on-request");
    peer.reply(&thread, json!({ "thread": { "id": "th_1" } })).await;
    assert_eq!(next(events).await, ProviderEvent::Session("th_1".into()));
    let turn = peer.expect("turn/start").await;
    assert_eq!(turn["params"]["input"][0]["text"], "hello");
    peer.reply(&turn, json!({ "turn": { "id": "tu_1" } })).await;
    thread
}

#[tokio::test]
async fn unknown_requests_are_refused_and_withdrawn_approvals_are_reported() {
    let (mut peer, mut events, commands) = start(None).await;
    handshake(&mut peer, &mut events, "thread/start").await;
    // Server ids start at 0 and may equal ours: routed by `method`, never mixed.
    peer.say(json!({ "method": "mcpServer/elicitation/request", "id": 1, "params": {} })).await;
    let refusal = tokio::time::timeout(Duration::from_secs(5), peer.sent.recv()).await.unwrap().unwrap();
    assert_eq!(refusal["id"], 1);
    assert_eq!(refusal["error"]["code"], -32601);
    let approval = json!({ "threadId": "th_1", "turnId": "tu_1", "itemId": "c", "command": "ls", "cwd": "/w" });
    peer.say(json!({ "method": super::map::COMMAND_APPROVAL, "id": 0, "params": approval })).await;
    let ProviderEvent::Approval { native_id, payload } = next(&mut events).await else { panic!("no approval") };
    assert_eq!(native_id, "0");
    assert_eq!(payload["category"], "command");
    peer.say(json!({ "method": "serverRequest/resolved", "params": { "threadId": "th_1", "requestId": 0 } })).await;
    assert_eq!(next(&mut events).await, ProviderEvent::Withdrawn { native_id: "0".into() });
    // A second approval answered by us is not "withdrawn" when Codex confirms it.
    peer.say(json!({ "method": super::map::COMMAND_APPROVAL, "id": 2, "params": approval })).await;
    let ProviderEvent::Approval { native_id, .. } = next(&mut events).await else { panic!("no approval") };
    let decision = "approve_session".to_owned();
    commands.send(ProviderCommand::Approval { native_id, decision, granted_permission_ids: vec![] }).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), peer.sent.recv()).await.unwrap().unwrap();
    assert_eq!(answer, json!({ "id": 2, "result": { "decision": "acceptForSession" } }));
    peer.say(json!({ "method": "serverRequest/resolved", "params": { "threadId": "th_1", "requestId": 2 } })).await;
    peer.say(json!({ "method": "turn/completed", "params": { "threadId": "th_1", "turn": { "id": "tu_1", "status": "completed", "items": [] } } })).await;
    assert_eq!(next(&mut events).await, ProviderEvent::Finished(TurnOutcome::Completed(String::new())));
}

#[tokio::test]
async fn an_interrupt_cleans_background_terminals_before_the_turn_ends() {
    let (mut peer, mut events, commands) = start(Some("th_1")).await;
    let resume = handshake(&mut peer, &mut events, "thread/resume").await;
    assert_eq!(resume["params"]["threadId"], "th_1");
    // Once the turn runs (its notifications flow), an interrupt goes to Codex.
    peer.say(json!({ "method": "turn/started", "params": { "threadId": "th_1", "turn": { "id": "tu_1" } } })).await;
    assert!(
        matches!(next(&mut events).await, ProviderEvent::Event { ref event_type, .. } if event_type == "turn.started")
    );
    commands.send(ProviderCommand::Interrupt).await.unwrap();
    let interrupt = peer.expect("turn/interrupt").await;
    assert_eq!(interrupt["params"], json!({ "threadId": "th_1", "turnId": "tu_1" }));
    peer.reply(&interrupt, json!({})).await;
    peer.say(json!({ "method": "turn/completed", "params": { "threadId": "th_1", "turn": { "id": "tu_1", "status": "interrupted" } } })).await;
    let clean = peer.expect("thread/backgroundTerminals/clean").await;
    // Nothing is reported before the clean is answered.
    assert!(tokio::time::timeout(Duration::from_millis(100), events.recv()).await.is_err());
    peer.reply(&clean, json!({})).await;
    assert_eq!(next(&mut events).await, ProviderEvent::Finished(TurnOutcome::Interrupted));
}

#[tokio::test]
async fn an_interrupt_during_the_handshake_ends_the_turn_as_interrupted() {
    let (mut peer, mut events, commands) = start(None).await;
    peer.expect("initialize").await;
    commands.send(ProviderCommand::Interrupt).await.unwrap();
    assert_eq!(next(&mut events).await, ProviderEvent::Finished(TurnOutcome::Interrupted));
}

#[tokio::test]
async fn output_ending_during_the_handshake_ends_the_stream_at_once() {
    let (mut peer, mut events, _commands) = start(None).await;
    peer.expect("initialize").await;
    drop(peer.lines);
    let ended = tokio::time::timeout(Duration::from_secs(2), events.recv()).await.expect("at once");
    assert_eq!(ended, None);
}
