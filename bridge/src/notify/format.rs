//! The three wire formats of a notification: a Standard Webhooks message (signed JSON), an
//! ntfy JSON publish and a Slack Block Kit message, rendered from an outbox row's facts.
//!
//! Rendering is a pure function of the row, the target and the links' base, so every attempt
//! of a row sends the same body (only the webhook timestamp and signature are per attempt).

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use reqwest::Url;
use serde_json::{Value, json};

use crate::config::notify::{NotifyKind, NotifyTarget, check_webhook_secret, ntfy_topic};
use crate::store::outbox::OutboxRow;

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

fn title(facts: &Value) -> &str {
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
        "type": row.event_type,
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
    let tag = match row.event_type.as_str() {
        "approval.requested" | "question.requested" => "raising_hand",
        "task.finished" => "white_check_mark",
        "task.failed" => "x",
        "workdir.recovery_required" => "warning",
        _ => "robot",
    };
    let link = links.get("action").or_else(|| links.get("board")).and_then(Value::as_str);
    // ntfy needs a message; a notification with nothing more to say repeats its title.
    let lines = message_lines(facts);
    let message = if lines.is_empty() { clip(title(facts), 3500) } else { clip(&lines.join("\n"), 3500) };
    let mut body = json!({
        "topic": topic,
        "title": clip(title(facts), 250),
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
    let title = clip(title(facts), 150);
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
mod tests {
    use super::*;
    use crate::config::notify::{Details, NotifyEvent};

    fn row(event: &str, facts: Value, action: Option<&str>) -> OutboxRow {
        OutboxRow {
            outbox_id: 1,
            message_id: "msg_0123".into(),
            target: 1,
            event_type: event.into(),
            task_id: Some("agt_1".into()),
            plan_id: None,
            facts_json: facts.to_string(),
            action_url: action.map(str::to_owned),
            state: "pending".into(),
            attempts: 0,
            created_at: 1_780_000_000_000,
            next_attempt_at: 0,
            give_up_at: 0,
            last_status: None,
            last_error: None,
            last_latency_ms: None,
            delivered_at: None,
        }
    }

    fn target(kind: NotifyKind, url: &str, secret: Option<&str>) -> NotifyTarget {
        NotifyTarget {
            slot: 1,
            url: url.into(),
            kind,
            events: NotifyEvent::ALL.to_vec(),
            secret: secret.map(str::to_owned),
            details: Details::Summary,
        }
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn the_signature_matches_the_standard_webhooks_example() {
        // The specification's own example (standard-webhooks/standard-webhooks, spec).
        let body = r#"{"test": 2432232314}"#;
        let signature = sign(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).expect("sign");
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_webhook_body_is_stable_and_carries_absolute_links() {
        let facts = json!({ "event": "approval.requested", "title": "t", "task_id": "agt_1", "plan_id": null,
            "links": { "board": "/tasks/agt_1" } });
        let r = row("approval.requested", facts, Some("/a/abl_x"));
        let t = target(NotifyKind::Webhook, "https://example.test/hook", Some(SECRET));
        let a = render(&r, &t, "https://board.example", 10).expect("render");
        let b = render(&r, &t, "https://board.example", 20).expect("render");
        assert_eq!(a.body, b.body, "the body does not change between attempts");
        assert_ne!(a.headers[2], b.headers[2], "the signature covers the timestamp");
        let body: Value = serde_json::from_str(&a.body).expect("json");
        assert_eq!(body["type"], "approval.requested");
        assert_eq!(body["schema_version"], 1);
        assert_eq!(body["data"]["links"]["action"], "https://board.example/a/abl_x");
        assert_eq!(body["data"]["links"]["board"], "https://board.example/tasks/agt_1");
        assert!(body["data"].get("plan_id").is_none(), "nulls are left out");
        assert!(body["data"].get("event").is_none());
    }

    #[test]
    fn ntfy_posts_to_the_server_root_with_priority_and_a_view_action() {
        let facts = json!({ "title": "needs you", "request_id": "req_1", "links": { "board": "/tasks/agt_1" } });
        let r = row("approval.requested", facts, Some("/a/abl_x"));
        let t = target(NotifyKind::Ntfy, "https://ntfy.example/alerts", Some("tk_abc"));
        let req = render(&r, &t, "https://b", 0).expect("render");
        assert_eq!(req.url, "https://ntfy.example/");
        assert_eq!(req.headers, vec![("authorization", "Bearer tk_abc".to_owned())]);
        let body: Value = serde_json::from_str(&req.body).expect("json");
        assert_eq!(body["topic"], "alerts");
        assert_eq!(body["priority"], 4);
        assert_eq!(body["actions"][0]["action"], "view");
        assert_eq!(body["actions"][0]["url"], "https://b/a/abl_x");
    }

    #[test]
    fn slack_text_is_escaped_and_bounded() {
        let facts = json!({ "title": "x".repeat(400), "workdir": "<a&b>", "links": { "board": "/tasks/agt_1" } });
        let r = row("task.finished", facts, None);
        let req = render(&r, &target(NotifyKind::Slack, "https://hooks.example/T/B/C", None), "https://b", 0)
            .expect("render");
        let body: Value = serde_json::from_str(&req.body).expect("json");
        assert_eq!(body["blocks"][0]["text"]["text"].as_str().map(|t| t.chars().count()), Some(150));
        assert!(body["blocks"][1]["text"]["text"].as_str().expect("text").contains("&lt;a&amp;b&gt;"));
        assert_eq!(body["blocks"][2]["elements"][0]["url"], "https://b/tasks/agt_1");
    }

    #[test]
    fn a_slack_message_with_only_a_title_has_no_empty_section() {
        // What `notify test` writes: a title and the board link, nothing else.
        let facts = json!({ "event": "notify.test", "title": "Test notification from agent-bridge",
                            "links": { "board": "/notifications" } });
        let req = render(
            &row("notify.test", facts, None),
            &target(NotifyKind::Slack, "https://hooks.example/T/B/C", None),
            "https://b",
            0,
        )
        .expect("render");
        let body: Value = serde_json::from_str(&req.body).expect("json");
        let blocks = body["blocks"].as_array().expect("blocks");
        assert_eq!(blocks.iter().map(|b| b["type"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["header", "actions"]);
        assert!(blocks.iter().all(|b| b["text"]["text"].as_str().is_none_or(|t| !t.is_empty())), "{body}");
    }

    #[test]
    fn full_details_show_an_approvals_whole_command_beyond_its_clipped_title() {
        let command = format!("cargo test -- {}", "x".repeat(300));
        let facts = json!({ "title": "repo needs an approval", "request_id": "req_1", "task_id": "agt_1",
            "details": { "title": format!("Run `{}…`", &command[..190]), "command_display": command } });
        for kind in [NotifyKind::Slack, NotifyKind::Ntfy] {
            let req = render(
                &row("approval.requested", facts.clone(), None),
                &target(kind, "https://n.example/alerts", None),
                "https://b",
                0,
            )
            .expect("render");
            assert!(req.body.contains(&"x".repeat(300)), "{kind:?}: {}", req.body);
        }
    }
}
