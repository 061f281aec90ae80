//! Logging in with a board token and out again. Each attempt is audited like a call.

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use subtle::ConstantTimeEq;

use super::forms::{self, Fields};
use super::html::{self, Frame, Nav};
use super::{Board, COOKIE, html_response};
use crate::store::audit::AuditRow;

fn login_page(message: Option<&str>) -> String {
    let frame = Frame { title: "Log in", nav: Nav::None, csrf: None, pending_plans: 0, pulse: 0 };
    let mut body = String::from("<div class=\"card login\">");
    if let Some(m) = message {
        crate::html!(body, "<p class=\"error\">{}</p>", m);
    }
    body.push_str(
        "<p>Paste a board token. Print one on this machine with <code>agent-bridge board token</code>.</p>\
         <form method=\"post\" action=\"/login\"><p><input type=\"password\" name=\"token\" autocomplete=\"off\" \
         size=\"40\" required autofocus aria-label=\"Board token\"></p><p><button class=\"primary\">Log in</button>\
         </p></form></div>",
    );
    let mut page = html::page(&frame, &body);
    // The login page needs no live updates.
    page = page.replace(" data-pulse=\"0\"", "");
    page
}

/// `GET /login`.
pub async fn form(State(board): State<Board>, headers: HeaderMap) -> Response {
    if board.session(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    html_response(StatusCode::OK, login_page(None))
}

/// `POST /login`: a live token opens a session.
pub async fn submit(State(board): State<Board>, headers: HeaderMap, Form(fields): Form<Fields>) -> Response {
    let presented = forms::field(&fields, "token").unwrap_or("").trim().to_owned();
    let services = board.inner.registry.services();
    let now = services.clock.now_ms();
    let hash = crate::registry::auth::hash_secret(&presented);
    let tokens = services.store.call(move |s| s.live_board_tokens(now)).await.unwrap_or_default();
    let mut matched = None;
    for t in &tokens {
        if bool::from(t.token_sha256.ct_eq(&hash)) {
            matched = Some(t.expires_at);
        }
    }
    let ok = matched.is_some() && !presented.is_empty();
    services.audit.record(
        AuditRow {
            audit_id: 0,
            at: now,
            surface: "board".into(),
            principal: ok.then(|| crate::model::Principal::board_operator().name),
            role: ok.then_some(crate::config::Role::Admin),
            capability: "board_login".into(),
            scope: Some("write".into()),
            outcome: if ok { crate::model::AuditOutcome::Ok } else { crate::model::AuditOutcome::Denied },
            error_code: (!ok).then(|| crate::error::code::UNAUTHENTICATED.to_owned()),
            duration_us: 0,
            task_id: None,
            plan_id: None,
            client_name: Some("board".into()),
            count: 1,
        },
        None,
    );
    let Some(expires_at) = matched.filter(|_| ok) else {
        tracing::warn!("board login refused: unknown, expired or revoked token");
        return html_response(StatusCode::UNAUTHORIZED, login_page(Some("That token is unknown, expired or revoked.")));
    };
    let id = board.inner.sessions.open(now, expires_at, super::user_agent(&headers));
    tracing::info!("board login");
    let mut response = Redirect::to("/").into_response();
    let cookie =
        format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}", super::session::SESSION_MS / 1000);
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /logout`.
pub async fn logout(State(board): State<Board>, headers: HeaderMap, Form(fields): Form<Fields>) -> Response {
    let authed = match forms::check(&board, &headers, &fields) {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    board.inner.sessions.close(&authed.id);
    let mut response = Redirect::to("/login").into_response();
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
