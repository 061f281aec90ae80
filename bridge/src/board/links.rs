//! The action-link page (`/a/{token}`), the one board page that needs no login: a
//! notification's link shows the one request it is bound to, in full, and answers it once.
//!
//! The token is the credential, checked by the registry ([`Registry::call_with_link`]): the
//! page and its POST are each one call with it, on surface `board` as `link:<link_id>`, and
//! nothing else of the board is reachable with it (every other route still wants a session,
//! which a token never is). The page has no navigation, sets no cookie and shows only the task's
//! runtime, workdir, state and pending request. Its form carries a CSRF field derived from a
//! per-process secret and the token (HMAC-SHA256), checked in constant time before the call.
//! Every answer keeps the guard's `Cache-Control: no-store` and `Referrer-Policy: same-origin`,
//! so neither a cache nor another site ever sees the token.
//!
//! [`Registry::call_with_link`]: crate::registry::Registry::call_with_link

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hmac::{KeyInit, Mac};
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;

use super::actions::{answer_args, approval_args};
use super::forms::{self, Fields};
use super::html::{badge, text, when};
use super::pages::{FormTarget, request_form};
use super::{Board, html_response};
use crate::error::{ErrorKind, ToolError};
use crate::html;

/// The CSRF field of the form on a link's page: hex HMAC-SHA256 of the token under `secret`.
fn csrf_for(secret: &[u8; 32], token: &str) -> String {
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"agent-bridge action-link csrf\0");
    mac.update(token.as_bytes());
    crate::ids::hex(&mac.finalize().into_bytes())
}

/// Whether `presented` is the CSRF field of `token`'s form (constant time).
fn csrf_ok(secret: &[u8; 32], token: &str, presented: Option<&str>) -> bool {
    let expected = csrf_for(secret, token);
    presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(expected.as_bytes())))
}

/// A whole page around `body`: no navigation, no script; the stylesheet by a relative path
/// (so it loads under a public URL's prefix too).
fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    html!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{} · agent-bridge</title>\
         <link rel=\"stylesheet\" href=\"../static/board.css\"></head><body class=\"action-link\">\
         <header class=\"top\"><span class=\"brand\">agent-bridge</span></header><main><h1>{}</h1>",
        title,
        title
    );
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// The page of a refused link or answer; the status from the error's kind (403 for a link
/// that is unknown, used or expired, 404 for what it does not name).
fn refused(e: &ToolError, retry: Option<&str>) -> Response {
    let status = match e.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Denied | ErrorKind::Conflict => StatusCode::FORBIDDEN,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::CONFLICT,
    };
    let mut body = String::new();
    html!(body, "<div class=\"error\"><p><code>{}</code>: {}</p></div>", e.code, e.message);
    match retry {
        Some(token) if e.kind() == ErrorKind::Invalid => {
            html!(body, "<p><a href=\"{}\">← Back to the request</a></p>", token);
        }
        _ => body.push_str("<p class=\"meta\">Open the board itself to see this task.</p>"),
    }
    html_response(status, page("This link cannot be used", &body))
}

/// `GET /a/{token}`: the request, in full, with the form that answers it.
pub async fn show(State(board): State<Board>, Path(token): Path<String>) -> Response {
    let mut args = Map::new();
    args.insert("full_request".into(), Value::Bool(true));
    let answer = match board.inner.registry.call_with_link(&token, "get_agent_task", args).await {
        Ok(a) => a,
        Err(e) => return refused(&e, None),
    };
    let t = &answer.value;
    let pending = t.get("pending_request").filter(|p| p["request_id"] == answer.request_id.as_str());
    let title = match pending.map(|p| &p["kind"]) {
        Some(k) if k == "approval" => "An agent asks for approval",
        Some(_) => "An agent asks a question",
        None => "Nothing to answer",
    };
    let mut body = String::from("<div class=\"card\"><div class=\"row\">");
    body.push_str(&badge(t["status"].as_str().unwrap_or("")));
    html!(
        body,
        "<b>{}</b> <span class=\"meta\">{} task in <b>{}</b> · <span class=\"full-id\">{}</span></span></div></div>",
        super::pages::task_title(t),
        text(&t["runtime"]),
        text(&t["workdir"]),
        answer.task_id
    );
    match pending {
        Some(p) => {
            let csrf = csrf_for(&board.inner.link_secret, &token);
            // A relative action: `/a/<token>` at the board's root, under a public URL's prefix too.
            let target = FormTarget { approval: &token, answer: &token, task_id: Some(&answer.task_id) };
            body.push_str(&request_form(p, &csrf, target));
            body.push_str("<p class=\"meta\">This link answers this one request, once, until it expires (");
            body.push_str(&when(&json!(crate::clock::rfc3339(answer.expires_at))));
            body.push_str(").</p>");
        }
        None => body.push_str("<p class=\"empty\">This request is no longer waiting for an answer.</p>"),
    }
    html_response(StatusCode::OK, page(title, &body))
}

/// `POST /a/{token}`: the CSRF field, then one answer through the registry with the link.
pub async fn submit(State(board): State<Board>, Path(token): Path<String>, Form(f): Form<Fields>) -> Response {
    if !csrf_ok(&board.inner.link_secret, &token, forms::field(&f, "csrf")) {
        return (StatusCode::FORBIDDEN, "refused: the form's CSRF token is missing or wrong; reload the page")
            .into_response();
    }
    let decision = forms::field(&f, "decision");
    let (name, args) = match decision {
        Some(_) => ("respond_agent_approval", approval_args(&f, None)),
        None => ("answer_agent_question", answer_args(&f, None)),
    };
    let Value::Object(args) = args else { return refused(&ToolError::invalid("form", "not an object"), None) };
    if let Err(e) = board.inner.registry.call_with_link(&token, name, args).await {
        return refused(&e, Some(&token));
    }
    let (title, next) = match decision {
        Some("approve_once" | "approve_session") => ("Approved", "the task goes on"),
        Some("cancel_task") => ("Denied", "the task is cancelled"),
        Some(_) => ("Denied", "the task goes on"),
        None => ("Answered", "the task goes on"),
    };
    let mut body = String::new();
    html!(
        body,
        "<div class=\"card\"><p><b>{} — {}.</b></p><p class=\"meta\">This link is used up; you can close this page.</p></div>",
        title,
        next
    );
    html_response(StatusCode::OK, page(title, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_field_is_bound_to_the_secret_and_the_token() {
        let (secret, other) = ([7u8; 32], [8u8; 32]);
        let token = format!("abl_{}", "ab".repeat(32));
        let field = csrf_for(&secret, &token);
        assert_eq!(field.len(), 64);
        assert_eq!(field, csrf_for(&secret, &token), "stable within a process");
        assert!(csrf_ok(&secret, &token, Some(&field)));
        assert!(!csrf_ok(&secret, &token, None));
        assert!(!csrf_ok(&secret, &token, Some("")));
        assert!(!csrf_ok(&secret, &token, Some(&field[..63])));
        assert!(!csrf_ok(&secret, &token, Some(&field.to_uppercase())));
        assert!(!csrf_ok(&other, &token, Some(&field)), "another process's secret");
        let another = format!("abl_{}", "cd".repeat(32));
        assert!(!csrf_ok(&secret, &another, Some(&field)), "another link's form");
        assert!(!csrf_ok(&secret, &token, Some(&token)), "the token itself is not the field");
    }

    #[test]
    fn the_page_has_no_navigation_and_escapes_its_title() {
        let p = page("<x>", "<p>body</p>");
        assert!(p.contains("<h1>&lt;x&gt;</h1>") && p.contains("<p>body</p>"));
        for absent in ["<nav", "href=\"/", "<script", "Log out"] {
            assert!(!p.contains(absent), "{absent}");
        }
    }

    #[test]
    fn refusals_of_the_link_itself_are_forbidden() {
        use crate::error::code;
        for (c, want) in [
            (code::UNAUTHENTICATED, StatusCode::FORBIDDEN),
            (code::REQUEST_ALREADY_RESOLVED, StatusCode::FORBIDDEN),
            (code::REQUEST_STALE, StatusCode::FORBIDDEN),
            (code::UNKNOWN_TOOL, StatusCode::FORBIDDEN),
            (code::AGENT_TASK_NOT_FOUND, StatusCode::NOT_FOUND),
            (code::REQUEST_NOT_FOUND, StatusCode::NOT_FOUND),
            (code::INVALID_ARGUMENT, StatusCode::BAD_REQUEST),
        ] {
            assert_eq!(refused(&ToolError::new(c, "x"), Some("abl_x")).status(), want, "{c}");
        }
    }
}
