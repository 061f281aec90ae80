//! A task's timeline on the board: each event in words (never its JSON), and the decisions a
//! person took on the task's requests — a denied approval says who denied it, when, and what.

use serde_json::Value;

use super::html::{self, text, when};
use crate::html;

/// What a decision on an approval reads as.
fn decision_words(decision: &str) -> &'static str {
    match decision {
        "approve_once" => "Approved once",
        "approve_session" => "Approved for the session",
        "deny" => "Denied",
        "cancel_task" => "Denied, and the task cancelled",
        _ => "Answered",
    }
}

/// One event's details in words.
fn details(event_type: &str, payload: &Value) -> String {
    if let Some(t) = payload.get("text").and_then(Value::as_str) {
        return t.chars().take(400).collect();
    }
    if event_type == "approval.resolved" {
        let mut out = decision_words(payload["decision"].as_str().unwrap_or("")).to_owned();
        if let Some(by) = payload["by"].as_str() {
            out.push_str(" by ");
            out.push_str(by);
        }
        if let Some(title) = payload["title"].as_str() {
            out.push_str(": ");
            out.push_str(title);
        }
        return out;
    }
    match payload.as_object() {
        Some(map) if map.is_empty() => String::new(),
        _ => text(payload).chars().take(400).collect(),
    }
}

/// The timeline's table (escaped; stacked on a phone).
pub fn timeline(events: &[Value]) -> String {
    if events.is_empty() {
        return "<p class=\"empty\">No event yet.</p>".to_owned();
    }
    let mut out = String::from("<table><thead><tr><th>Time</th><th>Event</th><th>Details</th></tr></thead><tbody>");
    for e in events {
        let kind = e["event_type"].as_str().unwrap_or("");
        let denied = matches!(e["payload"]["decision"].as_str(), Some("deny" | "cancel_task"));
        out.push_str(if denied { "<tr class=\"denied\"><td>" } else { "<tr><td>" });
        out.push_str(&when(&e["created_at"]));
        html!(out, "</td><td><code>{}</code></td><td>{}</td></tr>", kind, details(kind, &e["payload"]));
    }
    out.push_str("</tbody></table>");
    html::stack(&out)
}

/// The approvals a person denied among `events`, as a card near the top of the task's page:
/// "Denied by …, at …" and the request it denied. Empty when none was.
pub fn denials(events: &[Value]) -> String {
    let denied: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "approval.resolved")
        .filter(|e| matches!(e["payload"]["decision"].as_str(), Some("deny" | "cancel_task")))
        .collect();
    if denied.is_empty() {
        return String::new();
    }
    let mut out = String::from("<div class=\"card decision\" id=\"decisions\"><h2>Denied requests</h2>");
    for e in denied {
        let p = &e["payload"];
        html!(
            out,
            "<p data-decision=\"{}\"><b>{} by {}</b>, at ",
            text(&p["decision"]),
            decision_words(p["decision"].as_str().unwrap_or("")),
            p["by"].as_str().unwrap_or("a person")
        );
        out.push_str(&when(&e["created_at"]));
        match p["title"].as_str() {
            Some(title) => html!(out, "<br><span class=\"meta\">The request:</span> {}", title),
            None => html!(
                out,
                "<br><span class=\"meta\">Request</span> <span class=\"full-id\">{}</span>",
                text(&p["request_id"])
            ),
        }
        out.push_str("</p>");
    }
    out.push_str("</div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_denial_says_who_when_and_what_and_no_event_is_json() {
        let events = [
            json!({ "event_type": "approval.requested", "created_at": "2026-12-04T10:00:00.000Z",
                    "payload": { "request_id": "req_1", "expires_at": "2026-12-04T10:30:00.000Z" } }),
            json!({ "event_type": "approval.resolved", "created_at": "2026-12-04T10:01:00.000Z",
                    "payload": { "request_id": "req_1", "decision": "deny", "by": "operator@board",
                                 "title": "rm -rf <tmp>" } }),
        ];
        let t = timeline(&events);
        assert!(!t.contains('{') && !t.contains("&quot;"), "{t}");
        assert!(
            t.contains("<tr class=\"denied\">") && t.contains("Denied by operator@board: rm -rf &lt;tmp&gt;"),
            "{t}"
        );
        assert!(t.contains("request id: req_1"), "{t}");
        let d = denials(&events);
        assert!(d.contains("<b>Denied by operator@board</b>, at <time"), "{d}");
        assert!(d.contains("rm -rf &lt;tmp&gt;"), "{d}");
        assert_eq!(denials(&events[..1]), "");
    }
}
