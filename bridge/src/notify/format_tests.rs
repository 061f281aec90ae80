//! The wording and the wire formats: each fact's title, stable webhook bodies with absolute
//! links and signatures, ntfy's and Slack's shapes and bounds, and messages stored before the
//! wording moved here rendering as they were written.

use super::*;
use crate::config::notify::Details;
use crate::store::outbox::DeliveryState;

fn row(event: &str, facts: Value, action: Option<&str>) -> OutboxRow {
    OutboxRow {
        outbox_id: 1,
        message_id: "msg_0123".into(),
        target: 1,
        kind: MessageKind::parse(event).expect("a known kind"),
        task_id: Some("agt_1".into()),
        plan_id: None,
        facts_json: facts.to_string(),
        action_url: action.map(str::to_owned),
        state: DeliveryState::Pending,
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
    let req =
        render(&r, &target(NotifyKind::Slack, "https://hooks.example/T/B/C", None), "https://b", 0).expect("render");
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
