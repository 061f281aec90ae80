//! Logging in with a board token and out again: the login page, and the cookie of the
//! session `registry::auth` opens for a live token (each attempt audited like a call). A
//! one-time login link (`/login/{token}`, from `agent-bridge board token --once`) shows the same
//! form with the token filled in: opening it changes nothing, its button logs in and uses it up.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::forms::{self, Fields};
use super::html::{self, Frame, Nav};
use super::{Board, COOKIE, html_response};
use crate::registry::sessions::SESSION_MS;

fn login_page(message: Option<&str>, link: Option<&str>) -> String {
    let frame = Frame { title: "Log in", nav: Nav::None, csrf: None, pending_plans: 0, pulse: 0 };
    let mut body = String::from("<div class=\"card login\">");
    if let Some(m) = message {
        crate::html!(body, "<p class=\"error\">{}</p>", m);
    }
    match link {
        Some(token) => crate::html!(
            body,
            "<p>This one-time link logs this browser in; it cannot be used again.</p>\
             <form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"token\" value=\"{}\">\
             <p><button class=\"primary\" autofocus>Log in</button></p></form></div>",
            token
        ),
        None => body.push_str(
            "<p>Paste a board token. Print one on this machine with <code>agent-bridge board token</code>.</p>\
             <form method=\"post\" action=\"/login\"><p><input type=\"password\" name=\"token\" autocomplete=\"off\" \
             size=\"40\" required autofocus aria-label=\"Board token\"></p><p><button class=\"primary\">Log in</button>\
             </p></form></div>",
        ),
    }
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
    html_response(StatusCode::OK, login_page(None, None))
}

/// `GET /login/{token}`: a one-time login link's page, the form with its token filled in
/// (nothing is used up until its button is pressed, so a link preview spends nothing).
pub async fn link(State(board): State<Board>, headers: HeaderMap, Path(token): Path<String>) -> Response {
    if board.session(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    html_response(StatusCode::OK, login_page(None, Some(&token)))
}

/// `POST /login`: a live token opens a session (the registry's authentication decides, and
/// audits the attempt).
pub async fn submit(State(board): State<Board>, headers: HeaderMap, Form(fields): Form<Fields>) -> Response {
    let presented = forms::field(&fields, "token").unwrap_or("").trim();
    let Ok(id) = board.inner.registry.board_login(presented, super::user_agent(&headers)).await else {
        tracing::warn!("board login refused: unknown, used, expired or revoked token");
        return html_response(
            StatusCode::UNAUTHORIZED,
            login_page(Some("That token is unknown, used, expired or revoked."), None),
        );
    };
    tracing::info!("board login");
    let mut response = Redirect::to("/").into_response();
    let cookie = format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{}; Max-Age={}",
        secure(&board, &headers),
        SESSION_MS / 1000
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `; Secure` when the request came through an `https://` public URL's host (the browser then
/// sends the cookie over TLS only); nothing on the loopback board, which is plain HTTP.
fn secure(board: &Board, headers: &HeaderMap) -> &'static str {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    match &board.inner.public {
        Some(p) if p.origin.starts_with("https://") && p.host.eq_ignore_ascii_case(host) => "; Secure",
        _ => "",
    }
}

/// `POST /logout`.
pub async fn logout(State(board): State<Board>, headers: HeaderMap, Form(fields): Form<Fields>) -> Response {
    let authed = match forms::check(&board, &headers, &fields) {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    board.inner.sessions.close(&authed.id);
    let mut response = Redirect::to("/login").into_response();
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict{}; Max-Age=0", secure(&board, &headers));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
