//! The operator's pages: workdirs (writer lease and recovery guard, with the audited forced
//! clearing), runtimes, and the audit log.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::html::{self, Nav, csrf_field, text, urlencode, when};
use super::{Board, error_page, html_response, to_login};
use crate::html;

/// `GET /workdirs`.
pub async fn workdirs(State(board): State<Board>, headers: HeaderMap) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let frame = board.frame("Workdirs", Nav::Workdirs, &authed).await;
    let v = match board.call("admin_workdir_status", json!({})).await {
        Ok(v) => v,
        Err(e) => return error_page(&board, &authed, "Reading the workdirs", &e, "/").await,
    };
    let mut body = String::from(
        "<p class=\"meta\">A writer task holds its workdir's lease while it runs. A recovery guard closes a \
         workdir until the bridge has proof that a writer's processes are gone; clear one by hand only after \
         checking yourself.</p><table><thead><tr><th>Workdir</th><th>State</th><th>Mode</th><th>Runtimes</th>\
         <th>Lease holder</th><th>Recovery guard</th></tr></thead><tbody>",
    );
    for w in v["workdirs"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let alias = text(&w["alias"]);
        let (label, class) = match w["state"].as_str() {
            Some("free") => ("Free", "good"),
            Some("busy") => ("Busy", "busy"),
            _ => ("Closed: recovery required", "bad"),
        };
        html!(
            body,
            "<tr><td><b>{}</b></td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td>{}</td><td>",
            alias,
            class,
            label,
            text(&w["agent_mode"]),
            text(&w["runtimes"])
        );
        if let Some(holder) = w["lease_holder"].as_str() {
            html!(body, "<a class=\"mono\" href=\"/tasks/{}\">{}</a>", holder, holder);
        } else {
            body.push('—');
        }
        body.push_str("</td><td>");
        match w["guard"].as_object() {
            None => body.push('—'),
            Some(g) => {
                let task = text(&g["task_id"]);
                html!(
                    body,
                    "task <a class=\"mono\" href=\"/tasks/{}\">{}</a> ({})",
                    task,
                    task,
                    text(&g["task_status"])
                );
                if let Some(missing) = g["proof"]["missing"].as_str() {
                    html!(body, "<br><span class=\"meta\">Not proven stopped: {}</span>", missing);
                }
                if w["state"] == "recovery_required" {
                    html!(body, "<form method=\"post\" action=\"/workdirs/{}/clear-guard\">", urlencode(&alias));
                    body.push_str(&csrf_field(&authed.session.csrf));
                    html!(
                        body,
                        "<label><input type=\"checkbox\" name=\"force\" value=\"true\" required> I checked that no \
                         process of task {} runs</label> <button class=\"danger\">Clear the guard</button></form>",
                        task
                    );
                }
            }
        }
        body.push_str("</td></tr>");
    }
    body.push_str("</tbody></table>");
    body.push_str(&branches_table(&v["agent_branches"]));
    html_response(StatusCode::OK, html::page(&frame, &body))
}

/// The agent branches neither merged nor discarded: retention never deletes them, so they
/// are listed until a human hands each back (on its task's page).
fn branches_table(branches: &Value) -> String {
    let rows = branches.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut out = String::new();
    html!(out, "<h2 id=\"branches\">Agent branches ({})</h2>", rows.len());
    if rows.is_empty() {
        out.push_str("<p class=\"empty\">No branch waits to be merged or discarded.</p>");
        return out;
    }
    out.push_str(
        "<table><thead><tr><th>Workdir</th><th>Branch</th><th>Task</th><th>State</th><th>Holds</th>\
         <th>Since</th></tr></thead><tbody>",
    );
    for b in rows {
        let task = text(&b["task_id"]);
        html!(
            out,
            "<tr><td>{}</td><td><code>{}</code></td><td><a class=\"mono\" href=\"/tasks/{}#branch\">{}</a></td><td>{}</td><td>",
            text(&b["workdir"]),
            text(&b["branch"]),
            task,
            task,
            text(&b["state"])
        );
        out.push_str(&super::review::branch_size(&b["size"]));
        out.push_str("</td><td>");
        out.push_str(&when(&b["updated_at"]));
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// `GET /runtimes`.
pub async fn runtimes(State(board): State<Board>, headers: HeaderMap) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let frame = board.frame("Runtimes", Nav::Runtimes, &authed).await;
    let v = match board.call("list_agent_runtimes", json!({})).await {
        Ok(v) => v,
        Err(e) => return error_page(&board, &authed, "Reading the runtimes", &e, "/").await,
    };
    let mut body = String::new();
    let c = &v["containment"];
    let (label, class) = if c["contained"] == true { ("Contained", "good") } else { ("Not contained", "bad") };
    html!(
        body,
        "<p>Tasks: <span class=\"badge {}\" id=\"containment\">{}</span> (sandbox mode <code>{}</code>, {}){}</p>",
        class,
        label,
        text(&c["mode"]),
        text(&c["kind"]),
        c["detail"].as_str().map(|d| format!(": {d}")).unwrap_or_default()
    );
    if c["contained"] == true {
        let allowed: Vec<&str> =
            c["egress"]["allowed"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let network = match c["egress"]["mode"].as_str() {
            Some("proxy") if allowed.is_empty() => "its runtime's own endpoints, through the bridge's proxy".to_owned(),
            Some("proxy") => {
                format!("its runtime's own endpoints and {}, through the bridge's proxy", allowed.join(", "))
            }
            Some("none") => "none".to_owned(),
            _ => "this machine's, shared (SERVERFS_AGENT_EGRESS=host)".to_owned(),
        };
        html!(
            body,
            "<p id=\"view\">Each task sees the system read-only, its workdir (read-only for a review), its runtime's own home, a private <code>/tmp</code> and home{}. Network: <span id=\"network\">{}</span>.</p>",
            if c["seccomp"] == true { ", in a session of its own under a seccomp filter" } else { "" },
            network
        );
    }
    body.push_str(
        "<table><thead><tr><th>Runtime</th><th>Available</th><th>Version</th><th>Details</th></tr></thead><tbody>",
    );
    let list = v["runtimes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if list.is_empty() {
        body.push_str("<tr><td colspan=\"4\" class=\"empty\">No runtime is enabled on any workdir.</td></tr>");
    }
    for r in list {
        let (label, class) = if r["available"] == true { ("Available", "good") } else { ("Unavailable", "bad") };
        let mut details = r.clone();
        if let Some(map) = details.as_object_mut() {
            for key in ["runtime", "name", "available", "version", "containment"] {
                map.remove(key);
            }
        }
        html!(
            body,
            "<tr><td><b>{}</b></td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td><code>{}</code></td></tr>",
            text(r.get("runtime").or_else(|| r.get("name")).unwrap_or(&Value::Null)),
            class,
            label,
            text(&r["version"]),
            details.to_string()
        );
    }
    body.push_str("</tbody></table>");
    html_response(StatusCode::OK, html::page(&frame, &body))
}

/// `GET /audit`.
pub async fn audit(State(board): State<Board>, headers: HeaderMap, Query(q): Query<Vec<(String, String)>>) -> Response {
    let Some(authed) = board.session(&headers) else { return to_login() };
    let get = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    let frame = board.frame("Audit log", Nav::Audit, &authed).await;
    let mut body = String::from("<form class=\"filters\" method=\"get\" action=\"/audit\">");
    for (name, label) in [("principal", "Principal"), ("capability", "Capability"), ("task_id", "Task")] {
        html!(
            body,
            "<label>{}<input type=\"text\" name=\"{}\" value=\"{}\" size=\"16\"></label>",
            label,
            name,
            get(name).unwrap_or_default()
        );
    }
    body.push_str("<label>Outcome<select name=\"outcome\"><option value=\"\">any</option>");
    for o in ["ok", "denied", "invalid", "error"] {
        let selected = if get("outcome").as_deref() == Some(o) { " selected" } else { "" };
        html!(body, "<option value=\"{}\"{}>{}</option>", o, selected, o);
    }
    body.push_str("</select></label><button>Filter</button> <a href=\"/audit\">clear</a></form>");
    let args = json!({
        "principal": get("principal"), "capability": get("capability"), "task_id": get("task_id"),
        "outcome": get("outcome"), "before_audit_id": get("before"), "limit": 100,
    });
    let v = match board.call("admin_read_audit_log", args).await {
        Ok(v) => v,
        Err(e) => return error_page(&board, &authed, "Reading the audit log", &e, "/audit").await,
    };
    body.push_str(
        "<table><thead><tr><th>When</th><th>Surface</th><th>Principal</th><th>Capability</th><th>Outcome</th>\
         <th>Task / plan</th><th>Calls</th><th>µs</th></tr></thead><tbody>",
    );
    for r in v["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        body.push_str("<tr><td>");
        body.push_str(&when(&r["at"]));
        let outcome = text(&r["outcome"]);
        let class = match outcome.as_str() {
            "ok" => "good",
            "denied" => "bad",
            _ => "warn",
        };
        html!(
            body,
            "</td><td>{}</td><td>{} <span class=\"meta\">{}</span></td><td><code>{}</code></td>\
             <td><span class=\"badge {}\">{}</span> <code>{}</code></td><td>",
            text(&r["surface"]),
            text(&r["principal"]),
            r["role"].as_str().unwrap_or(""),
            text(&r["capability"]),
            class,
            outcome,
            r["error_code"].as_str().unwrap_or("")
        );
        if let Some(task) = r["task_id"].as_str() {
            html!(body, "<a class=\"mono\" href=\"/tasks/{}\">{}</a> ", task, task);
        }
        if let Some(plan) = r["plan_id"].as_str() {
            html!(body, "<a class=\"mono\" href=\"/plans/{}\">{}</a>", plan, plan);
        }
        // A coalesced row (calls that failed authentication, one row per source and minute)
        // stands for `count` calls.
        let count = r["count"].as_i64().unwrap_or(1);
        if count > 1 {
            html!(body, "</td><td><span class=\"badge bad\">×{}</span>", count);
        } else {
            html!(body, "</td><td>{}", count);
        }
        html!(body, "</td><td>{}</td></tr>", text(&r["duration_us"]));
    }
    body.push_str("</tbody></table>");
    if let Some(next) = v["next_before_audit_id"].as_i64() {
        let mut link: Vec<String> = q
            .iter()
            .filter(|(k, _)| k != "before")
            .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
            .collect();
        link.push(format!("before={next}"));
        html!(body, "<p><a href=\"/audit?{}\">Older rows →</a></p>", link.join("&"));
    }
    html_response(StatusCode::OK, html::page(&frame, &body))
}
