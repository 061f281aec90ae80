//! The task pages: the home page (what needs a human first, then every task with filters)
//! and a task's page (its state at a glance, its pending request with the forms to answer
//! it, cancel, its result and its timeline).

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::html::{self, Nav, badge, csrf_field, text, urlencode, when};
use super::plan_pages::pending_card;
use super::{Board, error_page, html_response, to_login};
use super::{review, timeline};
use crate::html;
use crate::model::TaskStatus;

type Q = Vec<(String, String)>;

/// Events shown on one page of a task's timeline.
const TIMELINE_PAGE: usize = 500;

fn query<'a>(q: &'a Q, name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}

/// A task's title as lists show it (its prompt's start when it was given none).
pub fn task_title(t: &Value) -> String {
    match t["title"].as_str().filter(|s| !s.trim().is_empty()) {
        Some(title) => title.to_owned(),
        None => format!("{} task in {}", text(&t["runtime"]), text(&t["workdir"])),
    }
}

/// A table of tasks: each row led by the task's title, its id shortened under it.
pub fn task_table(tasks: &[Value]) -> String {
    if tasks.is_empty() {
        return "<p class=\"empty\">No task.</p>".to_owned();
    }
    let mut out = String::from(
        "<table class=\"tasks\"><thead><tr><th>State</th><th>Task</th><th>Runs</th><th>Created</th>\
         <th>Duration</th><th>Cost</th><th>Changes</th><th>Error</th></tr></thead><tbody>",
    );
    for t in tasks {
        let id = text(&t["task_id"]);
        out.push_str("<tr><td>");
        out.push_str(&badge(t["status"].as_str().unwrap_or("")));
        out.push_str("</td><td>");
        out.push_str(&html::lead(&format!("/tasks/{id}"), &task_title(t), &id));
        html!(
            out,
            " <span class=\"meta\">by {}</span></td><td class=\"runs\">{} in <b>{}</b><br><span class=\"meta\">{}</span></td><td>",
            text(&t["owner"]),
            text(&t["runtime"]),
            text(&t["workdir"]),
            text(&t["profile"])
        );
        out.push_str(&when(&t["created_at"]));
        html!(
            out,
            "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>",
            review::duration(&t["duration_ms"]),
            review::cost(&t["usage"])
        );
        out.push_str(&review::change_counts(&t["changes"]));
        match t["error_code"].as_str() {
            Some(code) => html!(out, "</td><td><code>{}</code></td></tr>", code),
            None => out.push_str("</td><td></td></tr>"),
        }
    }
    out.push_str("</tbody></table>");
    html::stack(&out)
}

fn select(out: &mut String, name: &str, label: &str, options: &[&str], current: Option<&str>) {
    html!(out, "<label>{}<select name=\"{}\"><option value=\"\">any</option>", label, name);
    for o in options {
        let selected = if current == Some(*o) { " selected" } else { "" };
        html!(out, "<option value=\"{}\"{}>{}</option>", o, selected, o);
    }
    out.push_str("</select></label>");
}

/// `GET /`: plans awaiting approval, tasks waiting for a human, then every task.
pub async fn index(State(board): State<Board>, headers: HeaderMap, Query(q): Query<Q>) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let frame = board.frame("Tasks", Nav::Tasks, &authed).await;
    let mut body = String::new();
    let pending = board.call("admin_list_plans", json!({ "status": "pending_approval", "limit": 50 })).await;
    if let Ok(plans) = &pending
        && let Some(list) = plans["plans"].as_array().filter(|l| !l.is_empty())
    {
        html!(body, "<h2 class=\"needs-you\">Plans awaiting your approval ({})</h2>", list.len());
        for plan in list {
            body.push_str(&pending_card(plan, &authed.session.csrf));
        }
    }
    let mut waiting = Vec::new();
    for status in ["waiting_for_approval", "waiting_for_question"] {
        if let Ok(v) = board.call("admin_list_tasks", json!({ "status": status, "limit": 50, "totals": false })).await {
            waiting.extend(v["tasks"].as_array().cloned().unwrap_or_default());
        }
    }
    if !waiting.is_empty() {
        html!(body, "<h2 class=\"needs-you\">Tasks waiting for you ({})</h2>", waiting.len());
        body.push_str(&task_table(&waiting));
    }
    body.push_str("<h2>All tasks</h2><form class=\"filters\" method=\"get\" action=\"/\">");
    let statuses: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    select(&mut body, "status", "State", &statuses, query(&q, "status"));
    let services = board.inner.registry.services();
    let aliases: Vec<&str> = services.config.workdirs.iter().map(|w| w.alias.as_str()).collect();
    select(&mut body, "workdir", "Workdir", &aliases, query(&q, "workdir"));
    select(&mut body, "runtime", "Runtime", &["claude", "codex", "fake"], query(&q, "runtime"));
    html!(
        body,
        "<label>Owner<input type=\"text\" name=\"owner\" value=\"{}\" size=\"14\"></label><button>Filter</button> \
         <a href=\"/\">clear</a></form>",
        query(&q, "owner").unwrap_or("")
    );
    let args = json!({
        "status": query(&q, "status"), "workdir": query(&q, "workdir"), "runtime": query(&q, "runtime"),
        "owner": query(&q, "owner"), "before_task_id": query(&q, "before"), "limit": 50,
        // The page shows no totals: they would read every task the filter matches.
        "totals": false,
    });
    match board.call("admin_list_tasks", args).await {
        Ok(v) => {
            body.push_str(&task_table(v["tasks"].as_array().map(Vec::as_slice).unwrap_or(&[])));
            if let Some(next) = v["next_before_task_id"].as_str() {
                let mut more: Vec<(String, String)> = q.iter().filter(|(k, _)| k != "before").cloned().collect();
                more.push(("before".into(), next.into()));
                let link: Vec<String> =
                    more.iter().map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v))).collect();
                html!(body, "<p><a href=\"/?{}\">Older tasks →</a></p>", link.join("&"));
            }
        }
        Err(e) => html!(body, "<div class=\"error\"><code>{}</code>: {}</div>", e.code, e.message),
    }
    html_response(StatusCode::OK, html::page(&frame, &body))
}

/// The form answering a task's pending request: the approval's decisions as buttons (and the
/// requested permissions as checkboxes), or one field set per question.
pub fn pending_form(task_id: &str, pending: &Value, csrf: &str) -> String {
    let (approval, answer) = (format!("/tasks/{task_id}/approval"), format!("/tasks/{task_id}/answer"));
    request_form(pending, csrf, FormTarget { approval: &approval, answer: &answer, task_id: None })
}

/// Where a request's form posts, and whether it names its task in a field.
pub struct FormTarget<'a> {
    /// The approval form's `action`.
    pub approval: &'a str,
    /// The question form's `action`.
    pub answer: &'a str,
    /// A hidden `task_id` field (the action-link page's form: its path names no task).
    pub task_id: Option<&'a str>,
}

/// The form of [`pending_form`], posting to `target`.
pub fn request_form(pending: &Value, csrf: &str, target: FormTarget<'_>) -> String {
    let payload = &pending["payload"];
    let request_id = text(&pending["request_id"]);
    let mut out = String::from("<div class=\"card attention\">");
    if pending["kind"] == "approval" {
        html!(
            out,
            "<h2>The agent asks for approval</h2><p><b>{}</b> <span class=\"meta\">({}) · expires ",
            text(&payload["title"]),
            text(&payload["category"])
        );
        out.push_str(&when(&pending["expires_at"]));
        out.push_str("</span></p>");
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
                html!(out, "<dt>{}</dt><dd><pre>{}</pre></dd>", k.replace('_', " "), lines(v));
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
        html!(out, "<form method=\"post\" action=\"{}\">", target.approval);
        out.push_str(&hidden_fields(csrf, target.task_id, &request_id));
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
    html!(out, "<h2>The agent asks a question</h2><form method=\"post\" action=\"{}\">", target.answer);
    out.push_str(&hidden_fields(csrf, target.task_id, &request_id));
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

/// A request's value as lines of text: a list's items one a line, an object's `key: value`.
fn lines(v: &Value) -> String {
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(lines).collect::<Vec<_>>().join("\n"),
        Value::Object(map) if !map.is_empty() => {
            map.iter().map(|(k, v)| format!("{}: {}", k.replace('_', " "), text(v))).collect::<Vec<_>>().join("\n")
        }
        other => text(other),
    }
}

fn hidden_fields(csrf: &str, task_id: Option<&str>, request_id: &str) -> String {
    let mut out = csrf_field(csrf);
    if let Some(task_id) = task_id {
        html!(out, "<input type=\"hidden\" name=\"task_id\" value=\"{}\">", task_id);
    }
    html!(out, "<input type=\"hidden\" name=\"request_id\" value=\"{}\">", request_id);
    out
}

/// `GET /tasks/{id}`.
pub async fn task(
    State(board): State<Board>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<Q>,
) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let t = match board.call("get_agent_task", json!({ "task_id": id, "full_request": true })).await {
        Ok(t) => t,
        Err(e) => return error_page(&board, &authed, "Showing this task", &e, "/").await,
    };
    // A page of events at a time: `?after=N` shows those after event N.
    let after = query(&q, "after").and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    let args = json!({ "task_id": id, "after_event_id": after, "limit": TIMELINE_PAGE });
    let events = board.call("read_agent_task_events", args).await;
    let title = task_title(&t);
    let frame = board.frame(&title, Nav::Tasks, &authed).await;
    let csrf = &authed.session.csrf;
    let mut body = String::from("<div class=\"card\"><div class=\"row\">");
    body.push_str(&badge(t["status"].as_str().unwrap_or("")).replace("class=\"badge ", "class=\"badge big "));
    html!(
        body,
        "<span class=\"meta\"><b>{}</b> in <b>{}</b>{} · {} · owner <b>{}</b></span></div><dl class=\"kv\">",
        text(&t["runtime"]),
        text(&t["workdir"]),
        if t["path"].as_str().is_some_and(|p| !p.is_empty()) {
            format!("/{}", text(&t["path"]))
        } else {
            String::new()
        },
        text(&t["profile"]),
        text(&t["owner"])
    );
    html!(body, "<dt>Task</dt><dd class=\"full-id\">{}</dd>", id);
    for (label, key) in [
        ("Created", "created_at"),
        ("Started", "started_at"),
        ("Finished", "completed_at"),
        ("Deadline", "deadline_at"),
    ] {
        html!(body, "<dt>{}</dt><dd>", label);
        body.push_str(&when(&t[key]));
        body.push_str("</dd>");
    }
    if let Some(plan) = t["plan"].as_object() {
        let plan_id = text(&plan["plan_id"]);
        html!(body, "<dt>Plan</dt><dd>step {} of <a href=\"/plans/{}\">the plan</a> ", text(&plan["step"]), plan_id);
        body.push_str(&html::short_id(&plan_id));
        body.push_str("</dd>");
    }
    if let Some(from) = t["continue_from_task_id"].as_str() {
        html!(body, "<dt>Continues</dt><dd><a class=\"full-id\" href=\"/tasks/{}\">{}</a></dd>", from, from);
    }
    body.push_str("</dl></div>");
    if !t["error"].is_null() {
        html!(
            body,
            "<div class=\"error\"><code>{}</code>: {}</div>",
            text(&t["error"]["code"]),
            text(&t["error"]["message"])
        );
    }
    if let Ok(v) = &events {
        body.push_str(&timeline::denials(v["events"].as_array().map(Vec::as_slice).unwrap_or(&[])));
    }
    if let Some(p) = t.get("pending_request").filter(|p| !p.is_null()) {
        body.push_str(&pending_form(&id, p, csrf));
    }
    if t["terminal"] == false {
        html!(body, "<form class=\"inline\" method=\"post\" action=\"/tasks/{}/cancel\">", id);
        body.push_str(&csrf_field(csrf));
        body.push_str("<button class=\"danger\">Cancel this task</button></form>");
    }
    if let Some(result) = t["final_response"].as_str() {
        html!(body, "<h2>Result</h2><pre>{}</pre>", result);
        if t["final_response_truncated"] == true {
            body.push_str("<p class=\"meta\">The start of a longer result (read it all with <code>agent-bridge tasks result</code>).</p>");
        }
    }
    body.push_str(&review::usage_card(&t));
    body.push_str(&review::branch_card(&id, &t, csrf));
    let diff_offset = query(&q, "diff_offset").and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    body.push_str(&review::changes_section(&board, &id, &t, query(&q, "file"), diff_offset).await);
    body.push_str("<h2>Timeline</h2>");
    match events {
        Ok(v) => {
            let list = v["events"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            if after > 0 {
                html!(body, "<p><a href=\"/tasks/{}\">← From the first event</a></p>", urlencode(&id));
            }
            body.push_str(&timeline::timeline(list));
            if list.len() == TIMELINE_PAGE {
                let next = v["next_after_event_id"].as_u64().unwrap_or(after);
                html!(body, "<p><a href=\"/tasks/{}?after={}\">Later events →</a></p>", urlencode(&id), next);
            }
        }
        Err(e) => html!(body, "<div class=\"error\"><code>{}</code>: {}</div>", e.code, e.message),
    }
    html_response(StatusCode::OK, html::page(&frame, &body))
}
