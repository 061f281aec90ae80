//! The board's actions: each is a plain form POST (no JavaScript needed), checked for its
//! session and CSRF token, turned into exactly one registry call on surface `board`, and
//! answered with a redirect to the page that shows the result (or a page explaining a
//! refusal).

use axum::Form;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Value, json};

use super::forms::{self, Fields};
use super::html::urlencode;
use super::{Board, error_page};

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

/// `POST /tasks/{id}/merge`: `strategy` is `ff_only`, `merge` or `squash`.
pub async fn merge_task(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let args = json!({ "task_id": id, "strategy": forms::field(&f, "strategy").unwrap_or("ff_only") });
    let back = format!("/tasks/{}#branch", urlencode(&id));
    act(&board, &headers, &f, "Merging the branch", "merge_agent_task", args, back).await
}

/// `POST /tasks/{id}/discard`.
pub async fn discard_task(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let back = format!("/tasks/{}#branch", urlencode(&id));
    act(&board, &headers, &f, "Discarding the branch", "discard_agent_task", json!({ "task_id": id }), back).await
}

/// `POST /tasks/{id}/approval`.
pub async fn approval(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let args = approval_args(&f, Some(&id));
    let back = format!("/tasks/{}", urlencode(&id));
    act(&board, &headers, &f, "Answering the approval", "respond_agent_approval", args, back).await
}

/// The arguments of `respond_agent_approval` from an approval form (`task_id` from the path,
/// or else from the form when it has one).
pub fn approval_args(f: &Fields, task_id: Option<&str>) -> Value {
    let grants: Vec<&str> = forms::all(f, "grant").collect();
    let mut args = json!({
        "request_id": forms::field(f, "request_id").unwrap_or(""),
        "decision": forms::field(f, "decision").unwrap_or(""),
        "granted_permission_ids": if grants.is_empty() { Value::Null } else { json!(grants) },
    });
    if let Some(task_id) = task_id.or_else(|| forms::field(f, "task_id")) {
        args["task_id"] = json!(task_id);
    }
    args
}

/// `POST /tasks/{id}/answer`: `opt:<question>` fields are chosen options, `text:<question>`
/// free text.
pub async fn answer(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let args = answer_args(&f, Some(&id));
    let back = format!("/tasks/{}", urlencode(&id));
    act(&board, &headers, &f, "Answering the question", "answer_agent_question", args, back).await
}

/// The arguments of `answer_agent_question` from a question form (`task_id` as for
/// [`approval_args`]).
pub fn answer_args(f: &Fields, task_id: Option<&str>) -> Value {
    let mut order: Vec<String> = Vec::new();
    let mut answers: std::collections::HashMap<String, (Vec<String>, Option<String>)> = Default::default();
    for (k, v) in f {
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
    let mut args = json!({
        "request_id": forms::field(f, "request_id").unwrap_or(""),
        "answers": list,
    });
    if let Some(task_id) = task_id.or_else(|| forms::field(f, "task_id")) {
        args["task_id"] = json!(task_id);
    }
    args
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
