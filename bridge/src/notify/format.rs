//! What a notification says and how it is sent: the wording of each fact (its title, here
//! and nowhere else), and the three wire formats of a message — a Standard Webhooks message
//! (signed JSON), an ntfy JSON publish and a Slack Block Kit message — rendered from a stored
//! message's facts.
//!
//! A title is written once, when a fact is routed (`route.rs`), and kept with the message, so a
//! message written before a wording change goes out as it was written. Rendering is a pure
//! function of the message, the target and the links' base, so every attempt of a message
//! sends the same body (only the webhook timestamp and signature are per attempt).

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use reqwest::Url;
use serde_json::{Value, json};

use crate::config::notify::{NotifyEvent, NotifyKind, NotifyTarget, check_webhook_secret, ntfy_topic};
use crate::model::{InteractionKind, TaskStatus, WorktreeState};
use crate::store::facts::{Fact, TaskEnded};
use crate::store::outbox::{MessageKind, OutboxRow};

/// The title of a test notification.
pub const TEST_TITLE: &str = "Test notification from agent-bridge";

/// The title of a fact's notification: what happened, to what, where — never a prompt or a path.
pub fn title(fact: &Fact) -> String {
    match fact {
        Fact::TaskEnded(ended) => {
            let task = &ended.task;
            let verb = match task.status {
                TaskStatus::Succeeded => "succeeded",
                TaskStatus::Cancelled => "was cancelled",
                TaskStatus::Failed => "failed",
                TaskStatus::Interrupted => "was interrupted",
                TaskStatus::Queued
                | TaskStatus::Starting
                | TaskStatus::Running
                | TaskStatus::WaitingForApproval
                | TaskStatus::WaitingForQuestion => "ended",
            };
            let code = task.error_code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
            let mut title = format!("{} task in {} {verb}{code}", task.runtime, task.workdir);
            if let Some(branch) = ended.branch.as_ref().filter(|_| branch_waits(ended)) {
                title.push_str(&format!("; branch {} waits to be merged or discarded", branch.name));
            }
            title
        }
        Fact::RequestOpened(opened) => {
            let asks = match opened.kind {
                InteractionKind::Approval => "needs an approval",
                InteractionKind::Question => "asks a question",
            };
            format!("{} task in {} {asks}", opened.task.runtime, opened.task.workdir)
        }
        Fact::PlanAwaitsApproval(plan) => {
            format!("A plan of {} steps for {} in {} waits for approval", plan.steps, plan.runtime, plan.workdir)
        }
        Fact::GuardKept(kept) => {
            format!("Workdir {} stays closed: its last writer's stop is not proven", kept.workdir)
        }
    }
}

/// Whether an ended task's branch holds work that waits to be merged or discarded.
pub fn branch_waits(ended: &TaskEnded) -> bool {
    ended.branch.as_ref().is_some_and(|b| b.state == WorktreeState::Open)
}

/// The version of the webhook body's shape.
pub const SCHEMA_VERSION: u32 = 1;

/// One HTTP request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Where.
    pub url: String,
    /// Headers besides the content type.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: String,
}

/// Renders `row` for `target`; `base` is the board's address for links; `now_s` the attempt's
/// Unix time in seconds (the webhook timestamp).
pub fn render(row: &OutboxRow, target: &NotifyTarget, base: &str, now_s: i64) -> Result<Request, String> {
    let facts: Value = serde_json::from_str(&row.facts_json).map_err(|e| format!("stored facts unreadable: {e}"))?;
    let links = links(&facts, row, base);
    match target.kind {
        NotifyKind::Webhook => webhook(row, target, &facts, links, now_s),
        NotifyKind::Ntfy => ntfy(row, target, &facts, &links),
        NotifyKind::Slack => Ok(slack(target, &facts, &links)),
    }
}

/// The absolute links: the board page and, for a request, the action link.
fn links(facts: &Value, row: &OutboxRow, base: &str) -> Value {
    let mut links = json!({});
    if let Some(page) = facts.pointer("/links/board").and_then(Value::as_str) {
        links["board"] = json!(format!("{base}{page}"));
    }
    if let Some(path) = &row.action_url {
        links["action"] = json!(format!("{base}{path}"));
    }
    links
}

/// The title a message was written with.
fn stored_title(facts: &Value) -> &str {
    facts.get("title").and_then(Value::as_str).unwrap_or("agent-bridge")
}

fn webhook(row: &OutboxRow, target: &NotifyTarget, facts: &Value, links: Value, now_s: i64) -> Result<Request, String> {
    let mut data = facts.clone();
    if let Some(map) = data.as_object_mut() {
        map.remove("event");
        map.retain(|_, v| !v.is_null());
        map.insert("links".into(), links);
    }
    let body = json!({
        "schema_version": SCHEMA_VERSION,
        "type": row.kind.as_str(),
        "timestamp": crate::clock::rfc3339(row.created_at),
        "data": data,
    })
    .to_string();
    let secret = target.secret.as_deref().ok_or("the webhook has no secret")?;
    let signature = sign(secret, &row.message_id, now_s, &body)?;
    Ok(Request {
        url: target.url.clone(),
        headers: vec![
            ("webhook-id", row.message_id.clone()),
            ("webhook-timestamp", now_s.to_string()),
            ("webhook-signature", signature),
        ],
        body,
    })
}

/// The Standard Webhooks signature: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`
/// under the secret's bytes.
pub fn sign(secret: &str, message_id: &str, timestamp_s: i64, body: &str) -> Result<String, String> {
    let key = check_webhook_secret(secret)?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
    mac.update(format!("{message_id}.{timestamp_s}.").as_bytes());
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    Ok(format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(digest)))
}

/// The lines a human reads under the title: what, where, and (with `DETAILS=full`) the request.
fn message_lines(facts: &Value) -> Vec<String> {
    let text = |k: &str| facts.get(k).and_then(Value::as_str);
    let mut lines = Vec::new();
    if let Some(id) = text("task_id") {
        lines.push(format!("Task {id}"));
    } else if let Some(id) = text("plan_id") {
        lines.push(format!("Plan {id}"));
    }
    let mut place: Vec<String> = Vec::new();
    for k in ["workdir", "runtime", "status"] {
        if let Some(v) = text(k) {
            place.push(v.to_owned());
        }
    }
    if !place.is_empty() {
        lines.push(place.join(" · "));
    }
    if let Some(expires) = text("expires_at") {
        lines.push(format!("Answer before {expires}"));
    }
    if let Some(details) = facts.get("details") {
        lines.push(details_text(details));
    }
    lines
}

/// A short text of a request's details: an approval's title and command, or the questions.
fn details_text(details: &Value) -> String {
    let mut parts = Vec::new();
    // `command_display` is the whole command both runtimes' approvals carry (the title clips it).
    for key in ["title", "command_display", "reason", "plan_title"] {
        if let Some(v) = details.get(key).and_then(Value::as_str) {
            parts.push(v.to_owned());
        }
    }
    for q in details.get("questions").and_then(Value::as_array).into_iter().flatten() {
        let text = ["question", "prompt", "header", "text"].iter().find_map(|k| q.get(*k).and_then(Value::as_str));
        if let Some(text) = text {
            parts.push(format!("? {text}"));
        }
    }
    if parts.is_empty() {
        parts.push(details.to_string());
    }
    clip(&parts.join("\n"), 1500)
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

fn is_request(facts: &Value) -> bool {
    facts.get("request_id").is_some_and(Value::is_string)
}

fn ntfy(row: &OutboxRow, target: &NotifyTarget, facts: &Value, links: &Value) -> Result<Request, String> {
    let url = Url::parse(&target.url).map_err(|e| e.to_string())?;
    let (root, topic) = ntfy_topic(&url).ok_or("the ntfy URL names no topic")?;
    let tag = match row.kind {
        MessageKind::Event(NotifyEvent::ApprovalRequested | NotifyEvent::QuestionRequested) => "raising_hand",
        MessageKind::Event(NotifyEvent::TaskFinished) => "white_check_mark",
        MessageKind::Event(NotifyEvent::TaskFailed) => "x",
        MessageKind::Event(NotifyEvent::WorkdirRecoveryRequired) => "warning",
        MessageKind::Event(NotifyEvent::PlanPendingApproval) | MessageKind::Test => "robot",
    };
    let link = links.get("action").or_else(|| links.get("board")).and_then(Value::as_str);
    // ntfy needs a message; a notification with nothing more to say repeats its title.
    let lines = message_lines(facts);
    let message = if lines.is_empty() { clip(stored_title(facts), 3500) } else { clip(&lines.join("\n"), 3500) };
    let mut body = json!({
        "topic": topic,
        "title": clip(stored_title(facts), 250),
        "message": message,
        "priority": if is_request(facts) { 4 } else { 3 },
        "tags": [tag],
    });
    if let Some(link) = link {
        body["click"] = json!(link);
        let label = if links.get("action").is_some() { "Answer" } else { "Open" };
        body["actions"] = json!([{ "action": "view", "label": label, "url": link }]);
    }
    let headers = match &target.secret {
        Some(token) => vec![("authorization", format!("Bearer {token}"))],
        None => Vec::new(),
    };
    Ok(Request { url: root, headers, body: body.to_string() })
}

/// Escapes text for Slack's mrkdwn (`&`, `<`, `>`).
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn slack(target: &NotifyTarget, facts: &Value, links: &Value) -> Request {
    let title = clip(stored_title(facts), 150);
    let lines = message_lines(facts);
    let mut blocks = vec![json!({ "type": "header", "text": { "type": "plain_text", "text": title, "emoji": true } })];
    // Slack refuses a section with empty text (`invalid_blocks`): one with nothing more to say
    // than its title (a test notification) has none.
    if !lines.is_empty() {
        blocks.push(
            json!({ "type": "section", "text": { "type": "mrkdwn", "text": clip(&slack_escape(&lines.join("\n")), 2900) } }),
        );
    }
    if let Some(link) = links.get("action").or_else(|| links.get("board")).and_then(Value::as_str) {
        let label = if links.get("action").is_some() { "Answer" } else { "Open" };
        blocks.push(json!({
            "type": "actions",
            "elements": [{ "type": "button", "text": { "type": "plain_text", "text": label }, "url": link }],
        }));
    }
    let body = json!({ "text": title, "blocks": blocks });
    Request { url: target.url.clone(), headers: Vec::new(), body: body.to_string() }
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
