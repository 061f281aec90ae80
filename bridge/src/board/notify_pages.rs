//! The notifications page: each configured target with its delivery figures (a target failing
//! for an hour stands out), and the newest deliveries with their attempts. One registry call,
//! `admin_list_notifications`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::html::{self, Nav, text, when};
use super::{Board, error_page, html_response, to_login};
use crate::html;

/// Deliveries shown.
const RECENT: u32 = 100;

/// The words and colour class of a delivery's state.
fn delivery_state(state: &str) -> (&'static str, &'static str) {
    match state {
        "delivered" => ("Delivered", "good"),
        "pending" => ("Pending", "idle"),
        "given_up" => ("Given up", "bad"),
        _ => ("Unknown", "off"),
    }
}

/// The targets table.
fn targets(list: &[Value]) -> String {
    if list.is_empty() {
        return "<p class=\"empty\">No notification target is configured (SERVERFS_NOTIFY_01_URL …).</p>".to_owned();
    }
    let mut out = String::from(
        "<table><thead><tr><th>Target</th><th>Kind</th><th>URL</th><th>Events</th><th>Delivered</th>\
         <th>Pending</th><th>Given up</th><th>Last OK</th><th>Failing since</th></tr></thead><tbody>",
    );
    for t in list {
        let slot = t["target"].as_u64().unwrap_or(0);
        let long = t["failing_for_an_hour"] == true;
        let events: Vec<&str> =
            t["events"].as_array().map(Vec::as_slice).unwrap_or(&[]).iter().filter_map(Value::as_str).collect();
        html!(
            out,
            "<tr data-target=\"{}\" class=\"{}\"><td><b>{}</b></td><td>{}</td><td><code>{}</code></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>",
            slot,
            if long { "failing" } else { "" },
            format!("{slot:02}"),
            text(&t["kind"]),
            text(&t["url"]),
            events.join(", "),
            text(&t["delivered"]),
            text(&t["pending"]),
            text(&t["given_up"])
        );
        out.push_str(&when(&t["last_ok_at"]));
        out.push_str("</td><td>");
        if t["failing_since"].is_string() {
            let (label, class) = if long { ("Failing for over an hour", "bad") } else { ("Failing", "warn") };
            html!(out, "<span class=\"badge {}\">{}</span> ", class, label);
        }
        out.push_str(&when(&t["failing_since"]));
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
    html::stack(&out)
}

/// The deliveries table.
fn deliveries(list: &[Value]) -> String {
    if list.is_empty() {
        return "<p class=\"empty\">No notification yet.</p>".to_owned();
    }
    let mut out = String::from(
        "<table><thead><tr><th>Created</th><th>Message</th><th>Target</th><th>Event</th><th>Task / plan</th>\
         <th>State</th><th>Attempts</th><th>Last status</th><th>Latency</th></tr></thead><tbody>",
    );
    for d in list {
        let state = d["state"].as_str().unwrap_or("");
        let (label, class) = delivery_state(state);
        out.push_str("<tr><td>");
        out.push_str(&when(&d["created_at"]));
        html!(
            out,
            "</td><td><span class=\"id\" title=\"{}\">{}</span></td><td>{}</td><td><code>{}</code></td><td>",
            text(&d["message_id"]),
            text(&d["message_id"]),
            format!("{:02}", d["target"].as_u64().unwrap_or(0)),
            text(&d["event"])
        );
        if let Some(task) = d["task_id"].as_str() {
            html!(out, "<a href=\"/tasks/{}\">", task);
            out.push_str(&html::short_id(task));
            out.push_str("</a> ");
        }
        if let Some(plan) = d["plan_id"].as_str() {
            html!(out, "<a href=\"/plans/{}\">", plan);
            out.push_str(&html::short_id(plan));
            out.push_str("</a>");
        }
        html!(
            out,
            "</td><td><span class=\"badge {}\" data-state=\"{}\">{}</span></td><td>{}</td><td>",
            class,
            state,
            label,
            text(&d["attempts"])
        );
        match (d["last_status"].as_u64(), d["last_error"].as_str()) {
            (Some(status), Some(error)) => html!(out, "HTTP {} <span class=\"meta\">{}</span>", status, error),
            (Some(status), None) => html!(out, "HTTP {}", status),
            (None, Some(error)) => html!(out, "<span class=\"meta\">{}</span>", error),
            (None, None) => out.push('—'),
        }
        if state == "pending" && d["next_attempt_at"].is_string() {
            out.push_str("<br><span class=\"meta\">next try ");
            out.push_str(&when(&d["next_attempt_at"]));
            out.push_str("</span>");
        }
        out.push_str("</td><td>");
        match d["latency_ms"].as_i64() {
            Some(ms) => html!(out, "{} ms", ms),
            None => out.push('—'),
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
    html::stack(&out)
}

/// `GET /notifications`.
pub async fn notifications(State(board): State<Board>, headers: HeaderMap) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let v = match board.call("admin_list_notifications", json!({ "limit": RECENT })).await {
        Ok(v) => v,
        Err(e) => return error_page(&board, &authed, "Reading the notifications", &e, "/").await,
    };
    let frame = board.frame("Notifications", Nav::Notifications, &authed).await;
    let mut body = String::new();
    html!(
        body,
        "<p class=\"meta\">Links in notifications point at <code>{}</code>. A failed delivery is retried with a \
         growing delay for 24 hours; <code>agent-bridge notify test NN</code> sends a test.</p><h2>Targets</h2>",
        text(&v["link_base"])
    );
    body.push_str(&targets(v["targets"].as_array().map(Vec::as_slice).unwrap_or(&[])));
    body.push_str("<h2>Recent deliveries</h2>");
    body.push_str(&deliveries(v["deliveries"].as_array().map(Vec::as_slice).unwrap_or(&[])));
    html_response(StatusCode::OK, html::page(&frame, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_failing_for_an_hour_stands_out_and_everything_is_escaped() {
        let list = [
            json!({ "target": 1, "kind": "webhook", "url": "https://<x>/…", "events": ["task.failed"],
                    "delivered": 3, "pending": 1, "given_up": 0, "last_ok_at": null,
                    "failing_since": "2026-12-04T10:00:00Z", "failing_for_an_hour": true }),
            json!({ "target": 2, "kind": "ntfy", "url": "https://ntfy.sh/…", "events": [],
                    "delivered": 0, "pending": 0, "given_up": 0, "last_ok_at": "2026-12-04T10:00:00Z",
                    "failing_since": null, "failing_for_an_hour": false }),
        ];
        let out = targets(&list);
        assert!(out.contains("<tr data-target=\"1\" class=\"failing\"><td data-label=\"Target\">"), "{out}");
        assert!(out.contains("Failing for over an hour") && out.contains("https://&lt;x&gt;/…"), "{out}");
        assert!(out.contains("<tr data-target=\"2\" class=\"\"><td data-label=\"Target\"><b>02</b>"), "{out}");
        let d = deliveries(&[json!({ "message_id": "msg_1", "target": 1, "event": "approval.requested",
            "task_id": "agt_<1>", "plan_id": null, "state": "pending", "attempts": 2, "last_status": null,
            "last_error": "connection <failed>", "latency_ms": 3, "created_at": "2026-12-04T10:00:00Z",
            "next_attempt_at": "2026-12-04T10:00:10Z" })]);
        assert!(d.contains("href=\"/tasks/agt_&lt;1&gt;\"") && d.contains("connection &lt;failed&gt;"), "{d}");
        assert!(d.contains("data-state=\"pending\"") && d.contains("3 ms") && d.contains("next try"), "{d}");
    }
}
