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
    let mut table = String::from(
        "<table><thead><tr><th>Workdir</th><th>State</th><th>Mode</th><th>Runtimes</th>\
         <th>Writer</th><th>Recovery guard</th></tr></thead><tbody>",
    );
    for w in v["workdirs"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let alias = text(&w["alias"]);
        let (label, class) = match w["state"].as_str() {
            Some("free") => ("Free", "good"),
            Some("busy") => ("In use", "busy"),
            _ => ("Closed: recovery required", "bad"),
        };
        html!(
            table,
            "<tr><td><b>{}</b></td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td>",
            alias,
            class,
            label,
            text(&w["agent_mode"])
        );
        table.push_str(&html::chips(&w["runtimes"]));
        table.push_str("</td><td>");
        let holder = w["lease_holder"].as_str();
        match holder {
            Some(holder) => {
                table.push_str("in use by task ");
                table.push_str(&task_link(&board, holder).await);
            }
            None => table.push('—'),
        }
        table.push_str("</td><td>");
        let guard_link = match w["guard"]["task_id"].as_str() {
            Some(task) if holder != Some(task) => task_link(&board, task).await,
            _ => String::new(),
        };
        table.push_str(&guard_cell(w, &guard_link, &authed.session.csrf));
        table.push_str("</td></tr>");
    }
    table.push_str("</tbody></table>");
    let mut body = String::from(
        "<p class=\"meta\">A writer task holds its workdir while it runs. A recovery guard left behind (after a \
         crash, or a stop the bridge could not prove) closes a workdir until the bridge has proof that the \
         writer's processes are gone; clear one by hand only after checking yourself.</p>",
    );
    body.push_str(&html::stack(&table));
    body.push_str(&branches_table(&v["agent_branches"]));
    html_response(StatusCode::OK, html::page(&frame, &body))
}

/// A workdir's recovery guard: nothing, the running writer's own (released when its task
/// stops: nothing to recover), or one left behind — with what its proof of stop lacks and,
/// while it closes the workdir, the forced clearing. `link` is the guard's task as a link.
fn guard_cell(w: &Value, link: &str, csrf: &str) -> String {
    let mut out = String::new();
    let g = &w["guard"];
    if !g.is_object() {
        out.push('—');
        return out;
    }
    if g["running"] == true || w["lease_holder"] == g["task_id"] {
        out.push_str("<span class=\"meta\">held while its task runs</span>");
        return out;
    }
    let task = text(&g["task_id"]);
    out.push_str("left by task ");
    out.push_str(link);
    html!(out, " ({})", html::state_label(g["task_status"].as_str().unwrap_or("")).0);
    if let Some(missing) = g["proof"]["missing"].as_str() {
        html!(out, "<br><span class=\"meta\">Not proven stopped: {}</span>", missing);
    }
    if w["state"] == "recovery_required" {
        html!(out, "<form method=\"post\" action=\"/workdirs/{}/clear-guard\">", urlencode(&text(&w["alias"])));
        out.push_str(&csrf_field(csrf));
        html!(
            out,
            "<label><input type=\"checkbox\" name=\"force\" value=\"true\" required> I checked that no \
             process of task {} runs</label> <button class=\"danger\">Clear the guard</button></form>",
            task
        );
    }
    out
}

/// A link to a task's page led by its title (its short id when it cannot be read).
async fn task_link(board: &Board, id: &str) -> String {
    let title = match board.call("get_agent_task", json!({ "task_id": id })).await {
        Ok(t) => super::pages::task_title(&t),
        Err(_) => String::new(),
    };
    let mut out = String::new();
    html!(out, "<a href=\"/tasks/{}\">{}</a> ", id, title);
    out.push_str(&html::short_id(id));
    out
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
    let mut table = String::from(
        "<table><thead><tr><th>Workdir</th><th>Branch</th><th>Task</th><th>State</th><th>Holds</th>\
         <th>Since</th></tr></thead><tbody>",
    );
    for b in rows {
        let task = text(&b["task_id"]);
        html!(
            table,
            "<tr><td>{}</td><td><code>{}</code></td><td><a href=\"/tasks/{}#branch\">",
            text(&b["workdir"]),
            text(&b["branch"]),
            task
        );
        table.push_str(&html::short_id(&task));
        html!(table, "</a></td><td>{}</td><td>", text(&b["state"]));
        table.push_str(&super::review::branch_size(&b["size"]));
        table.push_str("</td><td>");
        table.push_str(&when(&b["updated_at"]));
        table.push_str("</td></tr>");
    }
    table.push_str("</tbody></table>");
    out.push_str(&html::stack(&table));
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
    let mut table = String::from(
        "<table><thead><tr><th>Runtime</th><th>Available</th><th>Version</th><th>Details</th></tr></thead><tbody>",
    );
    let list = v["runtimes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if list.is_empty() {
        table.push_str("<tr><td colspan=\"4\" class=\"empty\">No runtime is enabled on any workdir.</td></tr>");
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
            table,
            "<tr><td><b>{}</b></td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td>",
            text(r.get("runtime").or_else(|| r.get("name")).unwrap_or(&Value::Null)),
            class,
            label,
            text(&r["version"])
        );
        table.push_str(&runtime_details(&details));
        table.push_str("</td></tr>");
    }
    table.push_str("</tbody></table>");
    body.push_str(&html::stack(&table));
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
    let mut table = String::from(
        "<table class=\"audit\"><thead><tr><th>When</th><th>Surface</th><th>Principal</th><th>Capability</th><th>Outcome</th>\
         <th>Task / plan</th><th>Calls</th><th>Duration</th></tr></thead><tbody>",
    );
    for r in v["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let body = &mut table;
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
            html!(body, "<a href=\"/tasks/{}\">", task);
            body.push_str(&html::short_id(task));
            body.push_str("</a> ");
        }
        if let Some(plan) = r["plan_id"].as_str() {
            html!(body, "<a href=\"/plans/{}\">", plan);
            body.push_str(&html::short_id(plan));
            body.push_str("</a>");
        }
        // A coalesced row (calls that failed authentication, one row per source and minute)
        // stands for `count` calls.
        let count = r["count"].as_i64().unwrap_or(1);
        if count > 1 {
            html!(body, "</td><td><span class=\"badge bad\">×{}</span>", count);
        } else {
            html!(body, "</td><td>{}", count);
        }
        html!(
            body,
            "</td><td class=\"num\" data-us=\"{}\">{}</td></tr>",
            text(&r["duration_us"]),
            micros(&r["duration_us"])
        );
    }
    table.push_str("</tbody></table>");
    body.push_str(&html::stack(&table));
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

/// A call's duration, given in µs, as people read it: `10.4 ms`, `0.35 ms`, `2.5 s`.
pub fn micros(us: &Value) -> String {
    match us.as_i64().filter(|u| *u >= 0) {
        None => "—".to_owned(),
        Some(u) if u < 100 => format!("{:.2} ms", u as f64 / 1000.0),
        Some(u) if u < 1_000_000 => format!("{:.1} ms", u as f64 / 1000.0),
        Some(u) => super::review::duration(&json!(u / 1000)),
    }
}

/// A runtime's other facts in words: `key: value` lines, lists as chips — never JSON.
fn runtime_details(details: &Value) -> String {
    let Some(map) = details.as_object().filter(|m| !m.is_empty()) else { return "—".to_owned() };
    let mut out = String::from("<dl class=\"kv\">");
    for (k, v) in map.iter().filter(|(_, v)| !v.is_null()) {
        html!(out, "<dt>{}</dt><dd>", k.replace('_', " "));
        match (v.as_bool(), v.as_str()) {
            (Some(yes), _) => out.push_str(if yes { "yes" } else { "no" }),
            // A machine word (`runtime_catalog`) in words.
            (_, Some(word)) => html!(out, "{}", word.replace('_', " ")),
            _ => out.push_str(&html::chips(v)),
        }
        out.push_str("</dd>");
    }
    out.push_str("</dl>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_ms_and_runtime_details_are_not_json() {
        assert_eq!(micros(&json!(10_417)), "10.4 ms");
        assert_eq!(micros(&json!(40)), "0.04 ms");
        assert_eq!(micros(&json!(2_500_000)), "2.5 s");
        assert_eq!(micros(&Value::Null), "—");
        let d = runtime_details(&json!({ "workdirs": ["repo", "docs"], "reason": null }));
        assert!(!d.contains("reason"), "{d}");
        assert!(d.contains("<span class=\"chip\">repo</span>") && !d.contains('['), "{d}");
    }

    #[test]
    fn only_a_guard_left_behind_reads_not_proven_stopped() {
        let proof = json!({ "missing": "the provider's process group leader still runs" });
        let running = json!({ "alias": "repo", "state": "busy", "lease_holder": "agt_1",
            "guard": { "task_id": "agt_1", "running": true, "task_status": "running", "proof": proof } });
        let cell = guard_cell(&running, "", "c");
        assert!(cell.contains("held while its task runs") && !cell.contains("Not proven"), "{cell}");
        let left = json!({ "alias": "repo", "state": "recovery_required", "lease_holder": null,
            "guard": { "task_id": "agt_2", "running": false, "task_status": "interrupted", "proof": proof } });
        let cell = guard_cell(&left, "<a href=\"/tasks/agt_2\">x</a>", "c");
        assert!(cell.contains("left by task <a href=\"/tasks/agt_2\">x</a> (Interrupted)"), "{cell}");
        assert!(cell.contains("Not proven stopped: the provider&#39;s process group leader still runs"), "{cell}");
        assert!(cell.contains("action=\"/workdirs/repo/clear-guard\""), "{cell}");
        assert_eq!(guard_cell(&json!({ "guard": null }), "", "c"), "—");
    }
}
