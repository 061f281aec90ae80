//! The plan pages: plans awaiting approval first, each with its provenance, its steps in full
//! (a person approves what they have read) and the approve / reject forms; a plan's page
//! with its steps' states and tasks.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::html::{self, Nav, badge, csrf_field, text, when};
use super::{Board, error_page, html_response, to_login};
use crate::html;
use crate::model::PlanStatus;

fn provenance(plan: &Value) -> String {
    let mut out = String::new();
    html!(
        out,
        "<span class=\"prov\">created by {}</span> <span class=\"meta\">via {} · <b>{}</b> in <b>{}</b>{} · {} · ",
        text(&plan["created_by"]),
        text(&plan["created_surface"]),
        text(&plan["runtime"]),
        text(&plan["workdir"]),
        if plan["path"].as_str().is_some_and(|p| !p.is_empty()) {
            format!("/{}", text(&plan["path"]))
        } else {
            String::new()
        },
        text(&plan["profile"])
    );
    out.push_str(&when(&plan["created_at"]));
    out.push_str("</span>");
    out
}

/// A plan's or a step's state badge: "Needs you" while its task waits for a person (the wire
/// state, e.g. `running`, stays in `data-status`).
fn state_badge(status: &str, needs_you: bool) -> String {
    if !needs_you {
        return badge(status);
    }
    let mut out = String::new();
    html!(out, "<span class=\"badge ask\" data-status=\"{}\" data-attention=\"needs_you\">Needs you</span>", status);
    out
}

/// The step whose task waits for a person, if any.
fn waiting_step(p: &Value) -> Option<&Value> {
    p["steps"].as_array()?.iter().find(|s| s["attention"] == "needs_you")
}

/// Where the plan is, in words for the person at the board (the view's `message` is written
/// for the calling model), with the board's own way to act on it.
fn human_sentence(p: &Value) -> String {
    let mut out = String::new();
    let step = text(&p["current_step"]);
    match p["status"].as_str().unwrap_or("") {
        "pending_approval" => out.push_str("Nothing of this plan runs until you approve it."),
        "approved" => out.push_str("Approved: its first step starts now."),
        "running" => match waiting_step(p) {
            Some(s) => {
                let task = text(&s["task_id"]);
                let what =
                    if s["task_status"] == "waiting_for_question" { "a question to answer" } else { "an approval" };
                html!(
                    out,
                    "<b>Step {} waits for you:</b> its task has {} for you. <a class=\"button\" href=\"/tasks/{}\">Answer it on the task's page →</a>",
                    text(&s["position"]),
                    what,
                    task
                );
            }
            None => html!(out, "Step {} runs as a task; its page has its progress.", step),
        },
        "waiting" => html!(
            out,
            "Step {} waits for its workdir ({}); it starts by itself when the workdir is free.",
            step,
            text(&p["waiting_for"])
        ),
        "succeeded" => out.push_str("Every step succeeded."),
        "rejected" => out.push_str("Rejected: none of it ran."),
        _ => html!(out, "The plan stopped: {}", text(&p["error"]["message"])),
    }
    out
}

fn decision_forms(plan_id: &str, csrf: &str) -> String {
    let mut out = String::from("<div class=\"row\">");
    html!(out, "<form class=\"inline\" method=\"post\" action=\"/plans/{}/approve\">", plan_id);
    out.push_str(&csrf_field(csrf));
    out.push_str("<button class=\"primary\" name=\"approve\">Approve and run</button></form>");
    html!(out, "<form class=\"row grow\" method=\"post\" action=\"/plans/{}/reject\">", plan_id);
    out.push_str(&csrf_field(csrf));
    out.push_str(
        "<input type=\"text\" name=\"reason\" size=\"40\" maxlength=\"1000\" \
         placeholder=\"Reason (the plan's owner reads it)\" aria-label=\"Reason\">\
         <button class=\"danger\" name=\"reject\">Reject</button></form></div>",
    );
    out
}

/// A plan awaiting approval, as a card with everything needed to decide.
pub fn pending_card(plan: &Value, csrf: &str) -> String {
    let id = text(&plan["plan_id"]);
    let mut out = String::new();
    html!(out, "<div class=\"card attention\" data-plan=\"{}\"><div class=\"row\">", id);
    out.push_str(&badge("pending_approval"));
    html!(out, " <b><a href=\"/plans/{}\">{}</a></b> ", id, text(&plan["title"]));
    out.push_str(&html::short_id(&id));
    out.push(' ');
    out.push_str(&provenance(plan));
    out.push_str("</div><ol class=\"steps\">");
    for step in plan["steps"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        html!(
            out,
            "<li><b>{}. {}</b><pre>{}</pre></li>",
            text(&step["position"]),
            text(&step["title"]),
            text(&step["prompt"])
        );
    }
    out.push_str("</ol>");
    out.push_str(&decision_forms(&id, csrf));
    out.push_str("</div>");
    out
}

/// `GET /plans`.
pub async fn list(State(board): State<Board>, headers: HeaderMap, Query(q): Query<Vec<(String, String)>>) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let frame = board.frame("Plans", Nav::Plans, &authed).await;
    let status = q.iter().find(|(k, _)| k == "status").map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let mut body = String::from(
        "<form class=\"filters\" method=\"get\" action=\"/plans\"><label>State<select name=\"status\"><option value=\"\">any</option>",
    );
    for s in PlanStatus::ALL {
        let selected = if status == Some(s.as_str()) { " selected" } else { "" };
        html!(body, "<option value=\"{}\"{}>{}</option>", s.as_str(), selected, s.as_str());
    }
    body.push_str("</select></label><button>Filter</button></form>");
    let plans = match board.call("admin_list_plans", json!({ "status": status, "limit": 200 })).await {
        Ok(v) => v["plans"].as_array().cloned().unwrap_or_default(),
        Err(e) => return error_page(&board, &authed, "Listing plans", &e, "/").await,
    };
    let pending: Vec<&Value> = plans.iter().filter(|p| p["awaiting_human"] == true).collect();
    if !pending.is_empty() {
        html!(body, "<h2>Awaiting your approval ({})</h2>", pending.len());
        for plan in pending {
            body.push_str(&pending_card(plan, &authed.session.csrf));
        }
    }
    let others: Vec<&Value> = plans.iter().filter(|p| p["awaiting_human"] != true).collect();
    body.push_str("<h2>Plans</h2>");
    if others.is_empty() {
        body.push_str("<p class=\"empty\">No other plan.</p>");
    } else {
        let mut table = String::from(
            "<table><thead><tr><th>State</th><th>Plan</th><th>Runs</th><th>Step</th><th>Created</th></tr></thead><tbody>",
        );
        for p in others {
            let id = text(&p["plan_id"]);
            table.push_str("<tr><td>");
            table.push_str(&state_badge(p["status"].as_str().unwrap_or(""), p["needs_human"] == true));
            table.push_str("</td><td>");
            table.push_str(&html::lead(&format!("/plans/{id}"), &text(&p["title"]), &id));
            let steps = p["steps"].as_array().map_or(0, Vec::len);
            html!(
                table,
                " <span class=\"meta\">by {}</span></td><td>{} in <b>{}</b></td><td>{} / {}</td><td>",
                text(&p["created_by"]),
                text(&p["runtime"]),
                text(&p["workdir"]),
                p["current_step"].as_i64().map_or("—".to_owned(), |s| s.to_string()),
                steps
            );
            table.push_str(&when(&p["created_at"]));
            table.push_str("</td></tr>");
        }
        table.push_str("</tbody></table>");
        body.push_str(&html::stack(&table));
    }
    html_response(StatusCode::OK, html::page(&frame, &body))
}

/// `GET /plans/{id}`.
pub async fn show(State(board): State<Board>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let p = match board.call("get_agent_plan", json!({ "plan_id": id })).await {
        Ok(p) => p,
        Err(e) => return error_page(&board, &authed, "Showing this plan", &e, "/plans").await,
    };
    let title = format!("Plan: {}", text(&p["title"]));
    let frame = board.frame(&title, Nav::Plans, &authed).await;
    let csrf = &authed.session.csrf;
    let mut body = String::from("<div class=\"card\"><div class=\"row\">");
    let needs_you = p["needs_human"] == true && p["awaiting_human"] != true;
    body.push_str(
        &state_badge(p["status"].as_str().unwrap_or(""), needs_you).replace("class=\"badge ", "class=\"badge big "),
    );
    body.push(' ');
    body.push_str(&provenance(&p));
    html!(body, "</div><p id=\"plan-state\">");
    body.push_str(&human_sentence(&p));
    html!(body, "</p><dl class=\"kv\"><dt>Plan</dt><dd class=\"full-id\">{}</dd>", id);
    if let Some(by) = p["approved_by"].as_str() {
        html!(body, "<dt>Approved by</dt><dd>{} ", by);
        body.push_str(&when(&p["approved_at"]));
        body.push_str("</dd>");
    }
    if let Some(r) = p["rejection"].as_object() {
        html!(body, "<dt>Rejected by</dt><dd>{}</dd><dt>Reason</dt><dd>{}</dd>", text(&r["by"]), text(&r["reason"]));
    }
    if let Some(c) = p["correlation_id"].as_str() {
        html!(body, "<dt>Correlation</dt><dd>{}</dd>", c);
    }
    body.push_str("</dl></div>");
    if !p["error"].is_null() {
        html!(
            body,
            "<div class=\"error\"><code>{}</code>: {}</div>",
            text(&p["error"]["code"]),
            text(&p["error"]["message"])
        );
    }
    if p["awaiting_human"] == true {
        body.push_str(&decision_forms(&id, csrf));
    } else if p["terminal"] == false {
        html!(body, "<form method=\"post\" action=\"/plans/{}/cancel\">", id);
        body.push_str(&csrf_field(csrf));
        body.push_str("<button class=\"danger\">Cancel this plan and its running step</button></form>");
    }
    let mut table = String::from(
        "<table class=\"steps-table\"><thead><tr><th>#</th><th>Step</th><th>State</th><th>Task</th><th>Started</th>\
         <th>Finished</th></tr></thead><tbody>",
    );
    // A plan awaiting approval shows its steps in full: a person approves what they have read.
    let open = if p["awaiting_human"] == true { " open" } else { "" };
    for s in p["steps"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        html!(
            table,
            "<tr><td>{}</td><td><details{}><summary>{}</summary><pre>{}</pre></details></td><td>",
            text(&s["position"]),
            open,
            text(&s["title"]),
            text(&s["prompt"])
        );
        table.push_str(&state_badge(s["status"].as_str().unwrap_or(""), s["attention"] == "needs_you"));
        table.push_str("</td><td>");
        if let Some(task) = s["task_id"].as_str() {
            html!(table, "<a href=\"/tasks/{}\">", task);
            table.push_str(&html::short_id(task));
            table.push_str("</a>");
        }
        table.push_str("</td><td>");
        table.push_str(&when(&s["started_at"]));
        table.push_str("</td><td>");
        table.push_str(&when(&s["completed_at"]));
        table.push_str("</td></tr>");
    }
    table.push_str("</tbody></table>");
    body.push_str("<h2>Steps</h2>");
    body.push_str(&html::stack(&table));
    html_response(StatusCode::OK, html::page(&frame, &body))
}
