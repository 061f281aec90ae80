//! The board's actions: each is a plain form POST (no JavaScript needed), checked for its
//! session and CSRF token, turned into exactly one registry call on surface `board`, and
//! answered with a redirect to the page that shows the result (or a page explaining a
//! refusal). Also the forms that answer a task's pending approval or question.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Value, json};

use super::forms::{self, Fields};
use super::html::{csrf_field, text};
use super::pages::urlencode;
use super::{Board, error_page};
use crate::html;

/// The form answering a task's pending request: the approval's decisions as buttons (and the
/// requested permissions as checkboxes), or one field set per question.
pub fn pending_form(task_id: &str, pending: &Value, csrf: &str) -> String {
    let payload = &pending["payload"];
    let request_id = text(&pending["request_id"]);
    let mut out = String::from("<div class=\"card attention\">");
    if pending["kind"] == "approval" {
        html!(
            out,
            "<h2>The agent asks for approval</h2><p><b>{}</b> <span class=\"meta\">({}) · expires {}</span></p>",
            text(&payload["title"]),
            text(&payload["category"]),
            text(&pending["expires_at"])
        );
        if let Some(map) = payload.as_object() {
            out.push_str("<dl class=\"kv\">");
            for (k, v) in map {
                if matches!(
                    k.as_str(),
                    "title"
                        | "category"
                        | "available_decisions"
                        | "requested_permissions"
                        | "clipped"
                        | "full_text"
                        | "full_text_complete"
                ) {
                    continue;
                }
                html!(out, "<dt>{}</dt><dd><pre>{}</pre></dd>", k, text(v));
            }
            out.push_str("</dl>");
        }
        // What the approver sees is what is approved: a clipped display is followed by the
        // request's whole text, and says so.
        if payload["clipped"] == true {
            out.push_str("<div class=\"error\"><p><b>The display above is clipped.</b> The whole request follows; read it before you decide.</p>");
            if payload["full_text_complete"] != true {
                out.push_str(
                    "<p>Even the whole request is too long to keep: only its start is shown, and approving it for the session is not offered.</p>",
                );
            }
            html!(out, "<pre class=\"full-request\">{}</pre></div>", text(&payload["full_text"]));
        }
        html!(out, "<form method=\"post\" action=\"/tasks/{}/approval\">", task_id);
        out.push_str(&csrf_field(csrf));
        html!(out, "<input type=\"hidden\" name=\"request_id\" value=\"{}\">", request_id);
        for p in payload["requested_permissions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            html!(
                out,
                "<label><input type=\"checkbox\" name=\"grant\" value=\"{}\"> grant {}</label><br>",
                text(&p["permission_id"]),
                text(p.get("description").unwrap_or(&p["permission_id"]))
            );
        }
        out.push_str("<div class=\"row\">");
        for d in payload["available_decisions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let (label, class) = match d.as_str().unwrap_or("") {
                "approve_once" => ("Approve once", "primary"),
                "approve_session" => ("Approve for this session", ""),
                "deny" => ("Deny", "danger"),
                "cancel_task" => ("Deny and cancel the task", "danger"),
                _ => continue,
            };
            html!(out, "<button class=\"{}\" name=\"decision\" value=\"{}\">{}</button>", class, text(d), label);
        }
        out.push_str("</div></form></div>");
        return out;
    }
    html!(out, "<h2>The agent asks a question</h2><form method=\"post\" action=\"/tasks/{}/answer\">", task_id);
    out.push_str(&csrf_field(csrf));
    html!(out, "<input type=\"hidden\" name=\"request_id\" value=\"{}\">", request_id);
    for q in payload["questions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let qid = text(&q["question_id"]);
        let kind = if q["multi_select"] == true { "checkbox" } else { "radio" };
        html!(out, "<fieldset><legend>{}</legend>", text(&q["prompt"]));
        for o in q["options"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            html!(
                out,
                "<label><input type=\"{}\" name=\"opt:{}\" value=\"{}\"> {}</label> ",
                kind,
                qid,
                text(&o["option_id"]),
                text(&o["label"])
            );
        }
        if q["allow_free_text"] == true {
            html!(out, "<p><textarea name=\"text:{}\" placeholder=\"Your answer\"></textarea></p>", qid);
        }
        out.push_str("</fieldset>");
    }
    out.push_str("<button class=\"primary\">Send the answer</button></form></div>");
    out
}

/// Runs one registry call for a checked form and redirects to `back`, or explains a refusal.
async fn act(
    board: &Board,
    headers: &HeaderMap,
    fields: &Fields,
    what: &str,
    name: &str,
    args: Value,
    back: String,
) -> Response {
    let authed = match forms::check(board, headers, fields) {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    match board.call(name, args).await {
        Ok(_) => Redirect::to(&back).into_response(),
        Err(e) => error_page(board, &authed, what, &e, &back).await,
    }
}

/// `POST /tasks/{id}/cancel`.
pub async fn cancel_task(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let back = format!("/tasks/{}", urlencode(&id));
    act(&board, &headers, &f, "Cancelling the task", "cancel_agent_task", json!({ "task_id": id }), back).await
}

/// `POST /tasks/{id}/approval`.
pub async fn approval(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let grants: Vec<&str> = forms::all(&f, "grant").collect();
    let args = json!({
        "task_id": id,
        "request_id": forms::field(&f, "request_id").unwrap_or(""),
        "decision": forms::field(&f, "decision").unwrap_or(""),
        "granted_permission_ids": if grants.is_empty() { Value::Null } else { json!(grants) },
    });
    let back = format!("/tasks/{}", urlencode(&id));
    act(&board, &headers, &f, "Answering the approval", "respond_agent_approval", args, back).await
}

/// `POST /tasks/{id}/answer`: `opt:<question>` fields are chosen options, `text:<question>`
/// free text.
pub async fn answer(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let mut order: Vec<String> = Vec::new();
    let mut answers: std::collections::HashMap<String, (Vec<String>, Option<String>)> = Default::default();
    for (k, v) in &f {
        let (question, is_text) = match (k.strip_prefix("opt:"), k.strip_prefix("text:")) {
            (Some(q), _) => (q, false),
            (_, Some(q)) => (q, true),
            _ => continue,
        };
        if !answers.contains_key(question) {
            order.push(question.to_owned());
        }
        let entry = answers.entry(question.to_owned()).or_default();
        if is_text {
            entry.1 = Some(v.clone()).filter(|t| !t.trim().is_empty());
        } else {
            entry.0.push(v.clone());
        }
    }
    let list: Vec<Value> = order
        .iter()
        .map(|q| {
            let (selected, text) = &answers[q];
            json!({ "question_id": q, "selected_option_ids": selected, "text": text })
        })
        .collect();
    let args = json!({
        "task_id": id,
        "request_id": forms::field(&f, "request_id").unwrap_or(""),
        "answers": list,
    });
    let back = format!("/tasks/{}", urlencode(&id));
    act(&board, &headers, &f, "Answering the question", "answer_agent_question", args, back).await
}

/// `POST /plans/{id}/approve`.
pub async fn approve_plan(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let back = format!("/plans/{}", urlencode(&id));
    act(&board, &headers, &f, "Approving the plan", "admin_approve_plan", json!({ "plan_id": id }), back).await
}

/// `POST /plans/{id}/reject`.
pub async fn reject_plan(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let args = json!({ "plan_id": id, "reason": forms::field(&f, "reason") });
    let back = format!("/plans/{}", urlencode(&id));
    act(&board, &headers, &f, "Rejecting the plan", "admin_reject_plan", args, back).await
}

/// `POST /plans/{id}/cancel`.
pub async fn cancel_plan(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let back = format!("/plans/{}", urlencode(&id));
    act(&board, &headers, &f, "Cancelling the plan", "cancel_agent_plan", json!({ "plan_id": id }), back).await
}

/// `POST /workdirs/{alias}/clear-guard`: the audited override, only with the box ticked.
pub async fn clear_guard(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(alias): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let force = forms::field(&f, "force") == Some("true");
    let args = json!({ "workdir": alias, "force": force });
    act(&board, &headers, &f, "Clearing the recovery guard", "admin_clear_guard", args, "/workdirs".to_owned()).await
}
