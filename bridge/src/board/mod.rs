//! The operator board: server-rendered pages on a loopback address, or on a Unix
//! socket (`SERVERFS_BOARD_SOCKET`, for an `ssh -L` forward on a shared host), served by the
//! bridge itself through the bounded server of `bridge-httpd` ([`bridge_httpd::Limits::BOARD`]:
//! 128 connections, 64 requests in flight, header 10 s, body 30 s, idle 60 s).
//!
//! Every page and every action is a registry call on surface `board`, as the principal
//! `operator@board` (admin), so the board has exactly the rights, validation and audit trail
//! of the other surfaces; it holds no business logic and no SQL. A person logs in with a
//! board token (`agent-bridge board token`; only its hash is stored) and gets an HttpOnly,
//! SameSite=Strict session cookie. Every request must name one of the board's own addresses
//! in `Host` (no DNS rebinding); every POST must come from the board's own origin and carry
//! the session's CSRF token. Every action works without JavaScript; a small script only
//! reloads a page when something it shows has changed (a long poll on `/live`, which returns
//! a change counter and nothing else).
//!
//! Two routes need no login: `/a/{token}`, a notification's action link (see `board/links.rs`),
//! shows one pending request and answers it once. (Besides the login page and a one-time login
//! link's page, `/login/{token}`, which only fill in the login form.) With `SERVERFS_BOARD_PUBLIC_URL` set (the
//! board behind a tunnel or a TLS proxy) its host is a `Host` of the board's too, and a POST
//! under that host must come from its origin.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, ToolError};
use crate::registry::Registry;
use crate::registry::auth::Peer;
use bridge_proto::methods::{CallParams, ClientInfo, Surface};

mod actions;
mod admin_pages;
mod forms;
mod guard;
pub mod html;
mod links;
mod login;
mod notify_pages;
mod pages;
mod plan_pages;
mod review;
mod timeline;

use crate::registry::sessions::{Session, Sessions};
use guard::PublicUrl;
use html::{Frame, Nav};

/// The session cookie's name.
pub const COOKIE: &str = "ab_board";

/// The board's shared state.
#[derive(Clone)]
pub struct Board {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Arc<Registry>,
    sessions: Sessions,
    /// Where the board serves (the `Host` values accepted derive from it).
    place: Place,
    /// The board as the operator reaches it from elsewhere, when configured.
    public: Option<PublicUrl>,
    /// The secret action-link forms' CSRF fields derive from (random per process).
    link_secret: [u8; 32],
    shutdown: CancellationToken,
}

/// Where the board serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A loopback TCP address, the one actually bound.
    Tcp(SocketAddr),
    /// A Unix socket, reached through a forward (`ssh -L PORT:PATH`) on any local port.
    Unix(PathBuf),
}

/// A logged-in request.
pub struct Authed {
    /// The session.
    pub session: Session,
    /// The session id (the cookie value).
    pub id: String,
    /// The change pulse when the request arrived, before the page read anything: a change
    /// while the page is being built then moves the pulse past the page's, so its live
    /// updates reload it (read after the data, a change in between would leave the page stale
    /// with a current pulse, never reloaded).
    pub pulse: u64,
}

impl Board {
    /// The board over `registry`, answering at `place`.
    pub fn new(registry: Arc<Registry>, place: Place, shutdown: CancellationToken) -> Board {
        let sessions = registry.services().auth.board_sessions().clone();
        let public = registry.services().config.notify.board_public_url.as_deref().and_then(PublicUrl::parse);
        let link_secret = crate::ids::random_bytes::<32>();
        Board { inner: Arc::new(Inner { registry, sessions, place, public, link_secret, shutdown }) }
    }

    /// Calls a capability on surface `board` as the board's operator.
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let Value::Object(arguments) = args else { return Err(ToolError::invalid("arguments", "must be an object")) };
        let services = self.inner.registry.services();
        let params = CallParams {
            credential: Some(services.auth.board_credential().to_owned()),
            surface: Surface::Board,
            path: Default::default(),
            client: Some(ClientInfo { name: "board".into(), version: None }),
            name: name.to_owned(),
            arguments,
        };
        // The peer never matters on the board surface; this one matches no uid.
        self.inner
            .registry
            .call(params, &Peer::outside(u32::MAX, u32::MAX))
            .await
            .map(crate::registry::Reply::into_value)
    }

    fn now(&self) -> i64 {
        self.inner.registry.services().clock.now_ms()
    }

    /// The session of a request, if it carries a live one.
    pub fn session(&self, headers: &HeaderMap) -> Option<Authed> {
        self.session_with(headers, true)
    }

    /// The session of a request; `touch` counts it as a person's activity (see
    /// [`sessions`](crate::registry::sessions): the live-update poll does not).
    pub fn session_with(&self, headers: &HeaderMap, touch: bool) -> Option<Authed> {
        let id = cookie(headers, COOKIE)?;
        let pulse = *self.inner.registry.services().tasks.pulse().borrow();
        let session = self.inner.sessions.get(&id, self.now(), user_agent(headers), touch)?;
        Some(Authed { session, id, pulse })
    }

    /// The frame of a logged-in page (navigation counts, and the change pulse the request
    /// arrived at: see [`Authed::pulse`]).
    pub async fn frame<'a>(&self, title: &'a str, nav: Nav, authed: &'a Authed) -> Frame<'a> {
        let pending_plans = self.inner.registry.services().plans.pending_count().await.unwrap_or(0);
        Frame { title, nav, csrf: Some(&authed.session.csrf), pending_plans, pulse: authed.pulse }
    }
}

/// The request's `User-Agent` (empty when absent or not text).
pub fn user_agent(headers: &HeaderMap) -> &str {
    headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// A cookie's value from the request headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// Builds the router.
pub fn router(board: Board) -> Router {
    Router::new()
        .route("/", get(pages::index))
        .route("/tasks/{id}", get(pages::task))
        .route("/plans", get(plan_pages::list))
        .route("/plans/{id}", get(plan_pages::show))
        .route("/workdirs", get(admin_pages::workdirs))
        .route("/runtimes", get(admin_pages::runtimes))
        .route("/audit", get(admin_pages::audit))
        .route("/notifications", get(notify_pages::notifications))
        .route("/a/{token}", get(links::show).post(links::submit))
        .route("/login", get(login::form).post(login::submit))
        .route("/login/{token}", get(login::link))
        .route("/logout", post(login::logout))
        .route("/live", get(live))
        .route("/tasks/{id}/cancel", post(actions::cancel_task))
        .route("/tasks/{id}/merge", post(actions::merge_task))
        .route("/tasks/{id}/discard", post(actions::discard_task))
        .route("/tasks/{id}/approval", post(actions::approval))
        .route("/tasks/{id}/answer", post(actions::answer))
        .route("/plans/{id}/approve", post(actions::approve_plan))
        .route("/plans/{id}/reject", post(actions::reject_plan))
        .route("/plans/{id}/cancel", post(actions::cancel_plan))
        .route("/workdirs/{alias}/clear-guard", post(actions::clear_guard))
        .route("/static/board.css", get(css))
        .route("/static/board.js", get(js))
        .layer(axum::middleware::from_fn_with_state(board.clone(), guard::guard))
        .with_state(board)
}

/// Serves the board on `listener` (TCP or Unix) within [`bridge_httpd::Limits::BOARD`] until
/// its shutdown token is cancelled; a Unix socket's file is removed at the end.
pub async fn serve<L: bridge_httpd::Listener>(listener: L, board: Board) {
    let stop = board.inner.shutdown.clone();
    let socket = match &board.inner.place {
        Place::Unix(path) => Some(path.clone()),
        Place::Tcp(_) => None,
    };
    let app = router(board);
    let server =
        bridge_httpd::Server { name: "board", limits: bridge_httpd::Limits::BOARD, style: bridge_httpd::Style::Text };
    bridge_httpd::serve(listener, app, server, stop).await;
    if let Some(path) = socket {
        #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await;
    }
}

/// Where a request without a session goes.
pub fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

/// `/live?since=N`: waits (at most 25 s) until the change pulse differs from `N`, then
/// answers `{"pulse": M}`. It carries no data: the page reloads through the registry.
async fn live(
    State(board): State<Board>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<Map<String, Value>>,
) -> Response {
    if board.session_with(&headers, false).is_none() {
        return (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({ "error": "log in again" }))).into_response();
    }
    let since = q.get("since").and_then(Value::as_str).and_then(|s| s.parse::<u64>().ok());
    let mut pulse = board.inner.registry.services().tasks.pulse();
    let current = *pulse.borrow_and_update();
    if since == Some(current) {
        tokio::select! {
            _ = pulse.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(25)) => {}
            _ = board.inner.shutdown.cancelled() => {}
        }
    }
    let now = *pulse.borrow();
    axum::Json(serde_json::json!({ "pulse": now })).into_response()
}

async fn css() -> Response {
    static_asset("text/css; charset=utf-8", include_str!("assets/board.css"))
}

async fn js() -> Response {
    static_asset("text/javascript; charset=utf-8", include_str!("assets/board.js"))
}

fn static_asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    response
}

/// A page answer.
pub fn html_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// A page that explains a refused call, with a way back.
pub async fn error_page(board: &Board, authed: &Authed, what: &str, e: &ToolError, back: &str) -> Response {
    let frame = board.frame("Not done", Nav::None, authed).await;
    let mut body = String::new();
    crate::html!(
        body,
        "<div class=\"error\"><p><b>{}</b> was refused.</p><p><code>{}</code>: {}</p></div><p><a href=\"{}\">← Back</a></p>",
        what,
        e.code,
        e.message,
        back
    );
    html_response(refusal_status(e), html::page(&frame, &body))
}

/// The HTTP status of a refused call's page: 404 when what it names does not exist, 409 for
/// every other refusal.
fn refusal_status(e: &ToolError) -> StatusCode {
    match e.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        _ => StatusCode::CONFLICT,
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;
    use crate::error::code;

    /// Every code gets the status it got when the board chose it by the `NOT_FOUND` suffix.
    #[test]
    fn a_refusal_page_is_404_only_for_what_does_not_exist() {
        for c in code::ALL {
            let want = if c.ends_with("NOT_FOUND") { StatusCode::NOT_FOUND } else { StatusCode::CONFLICT };
            assert_eq!(refusal_status(&ToolError::new(c, "x")), want, "{c}");
        }
    }
}
