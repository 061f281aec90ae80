//! The HTTP server: `/mcp` and `/mcp-oauth` behind the guard, the OAuth resource's metadata,
//! `/healthz` for the bridge's liveness, served by
//! the bounded server of `bridge-httpd` (connection and in-flight caps answered 503, header,
//! body and idle timeouts) within the descriptor limit, and a clean shutdown on SIGINT or
//! SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bridge_proto::methods;
use http::StatusCode;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, json};
use tokio_util::sync::CancellationToken;

use crate::bridge::Bridge;
use crate::config::{Config, MAX_BODY_BYTES};
use crate::guard::{self, Guard};
use crate::handler::Front;
use crate::oauth;

/// The whole application for `config`; `shutdown` ends in-flight MCP requests when cancelled.
pub fn router(config: &Config, shutdown: &CancellationToken) -> Router {
    router_with(config, shutdown, true)
}

/// [`router`], choosing whether eligible tool calls are answered directly
/// ([`crate::direct`]; always in the binary, the tests compare both paths).
pub fn router_with(config: &Config, shutdown: &CancellationToken, direct: bool) -> Router {
    let bridge = Arc::new(Bridge::new(&config.bridge_socket, config.bridge_timeout));
    // Host and Origin are checked by the guard before anything else; rmcp's own checks are
    // configured to the same lists so they can only agree with it.
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(shutdown.child_token())
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .disable_allowed_hosts();
    let origins = guard::allowed_origins(config);
    if !origins.is_empty() {
        mcp_config = mcp_config.with_allowed_origins(origins.iter().map(|(scheme, host, port)| {
            if host.contains(':') { format!("{scheme}://[{host}]:{port}") } else { format!("{scheme}://{host}:{port}") }
        }));
    }
    let service_bridge = Arc::clone(&bridge);
    let service = StreamableHttpService::new(
        move || Ok(Front::new(Arc::clone(&service_bridge))),
        Arc::new(NeverSessionManager::default()),
        mcp_config,
    );
    let guard = Arc::new(Guard::new(config, service, Arc::clone(&bridge), direct));
    Router::new()
        .route("/mcp", any(guard::mcp).with_state(Arc::clone(&guard)))
        .route("/mcp-oauth", any(guard::mcp_oauth).with_state(Arc::clone(&guard)))
        .route(
            "/.well-known/oauth-protected-resource/mcp-oauth",
            get(oauth::resource_metadata).with_state(Arc::clone(&guard)),
        )
        .route("/.well-known/oauth-protected-resource", get(oauth::resource_metadata).with_state(guard))
        .route("/healthz", get(healthz).with_state(bridge))
}

/// 200 when the bridge answers `bridge.health`, 503 otherwise.
async fn healthz(State(bridge): State<Arc<Bridge>>) -> Response {
    let answer = tokio::time::timeout(Duration::from_secs(5), bridge.call(methods::BRIDGE_HEALTH, Map::new())).await;
    let failure = match answer {
        Ok(Ok(_)) => return (StatusCode::OK, axum::Json(json!({ "status": "ok" }))).into_response(),
        Ok(Err(e)) => json!({ "code": e.code(), "message": e.to_string() }),
        Err(_) => {
            json!({ "code": bridge_proto::codes::AGENT_BRIDGE_UNAVAILABLE, "message": "no answer from the bridge within 5 s" })
        }
    };
    let body = json!({ "status": "unavailable", "error": failure });
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// Descriptors kept free besides those of the client connections: the bridge connections of
/// the requests in flight are added to this, and the refusals in progress.
const RESERVED_DESCRIPTORS: usize = 64;

/// Raises the descriptor limit and lowers the connection cap to fit it, logging both.
fn fit_descriptors(config: &mut Config) {
    let nofile = match bridge_httpd::raise_nofile_limit() {
        Ok(limit) => {
            tracing::info!(
                before = limit.before,
                soft = limit.soft,
                hard = limit.hard,
                "RLIMIT_NOFILE raised to the hard limit"
            );
            limit.soft
        }
        Err(e) => {
            tracing::warn!(cause = %e, "cannot raise RLIMIT_NOFILE");
            1024
        }
    };
    let http = &mut config.http;
    let reserve = RESERVED_DESCRIPTORS + bridge_httpd::MAX_REFUSING + http.max_inflight;
    let cap = bridge_httpd::connection_cap(http.max_connections, nofile, reserve);
    if cap < http.max_connections {
        tracing::warn!(
            wanted = http.max_connections,
            max_connections = cap,
            nofile,
            reserve,
            "the connection cap is lowered to fit the descriptor limit"
        );
        http.max_connections = cap;
    }
}

/// Binds `config.listen` and serves until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut config = config;
    fit_descriptors(&mut config);
    let shutdown = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let local = listener.local_addr().context("the listening address")?;
    // The port the kernel picked for `:0` is the one the front's own origin uses.
    config.listen = local;
    let app = router(&config, &shutdown);
    if config.tunnel_mode {
        tracing::warn!(
            "SERVERFS_MCP_AUTH=none: tunnel mode, every caller becomes the bridge's tunnel principal; keep this front on a private network"
        );
    }
    if !config.is_loopback() && config.allowed_hosts.is_empty() {
        tracing::warn!(
            "listening on a non-loopback address with no SERVERFS_MCP_ALLOWED_HOSTS: any Host header is accepted"
        );
    }
    let limits = config.http;
    tracing::info!(
        url = %format!("http://{local}/mcp"),
        bridge_socket = %config.bridge_socket.display(),
        max_connections = limits.max_connections,
        max_inflight_requests = limits.max_inflight,
        "mcp-front listening"
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("mcp-front stopping");
        stop.cancel();
    });
    let server = bridge_httpd::Server { name: "mcp-front", limits, style: bridge_httpd::Style::JsonRpc };
    bridge_httpd::serve(listener, app, server, shutdown).await;
    tracing::info!("mcp-front stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        // Without signal handlers the process still stops on the default action.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
