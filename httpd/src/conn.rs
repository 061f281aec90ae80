//! One connection: hyper's HTTP/1.1 state machine over the socket, with a watchdog that
//! closes it when a head, an idle spell or a blocked answer outlasts its bound, and the
//! per-request service that applies the in-flight cap and the body deadline.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::body::{DeadlineBody, GuardedBody};
use crate::{Limits, Shared};

/// What the watchdog watches; changed by the socket wrapper and the service.
#[derive(Default)]
struct Timers {
    /// Requests whose answer has not been written to the end.
    active: usize,
    /// Since when a request head is awaited (the connection's accept, or the first byte after
    /// an idle spell); `None` while a request is in flight or the connection is idle.
    head_since: Option<Instant>,
    /// Since when the connection is idle between requests.
    idle_since: Option<Instant>,
    /// Since when a write of the answer has been blocked by the client not reading.
    blocked_since: Option<Instant>,
}

/// One connection's state, shared by its socket, its service and its watchdog.
pub(crate) struct ConnState {
    timers: Mutex<Timers>,
    changed: Notify,
}

impl ConnState {
    fn new() -> ConnState {
        let timers = Timers { head_since: Some(Instant::now()), ..Timers::default() };
        ConnState { timers: Mutex::new(timers), changed: Notify::new() }
    }

    fn timers(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes arrived: after an idle spell they start the next head's clock.
    fn read_some(&self) {
        let mut t = self.timers();
        if t.active == 0 && t.head_since.is_none() {
            t.head_since = Some(Instant::now());
            t.idle_since = None;
            drop(t);
            self.changed.notify_one();
        }
    }

    fn write_blocked(&self, blocked: bool) {
        let mut t = self.timers();
        match (blocked, t.blocked_since.is_some()) {
            (true, false) => {
                t.blocked_since = Some(Instant::now());
                drop(t);
                self.changed.notify_one();
            }
            (false, true) => t.blocked_since = None,
            _ => {}
        }
    }

    /// A request head was read.
    fn begin(self: &Arc<Self>) -> RequestGuard {
        let mut t = self.timers();
        t.active += 1;
        t.head_since = None;
        t.idle_since = None;
        drop(t);
        self.changed.notify_one();
        RequestGuard { conn: Arc::clone(self), _permit: None }
    }

    fn end(&self) {
        let mut t = self.timers();
        t.active = t.active.saturating_sub(1);
        if t.active == 0 {
            t.idle_since = Some(Instant::now());
        }
        drop(t);
        self.changed.notify_one();
    }

    /// The next moment a bound runs out, and which one.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, &'static str)> {
        let t = self.timers();
        let mut next: Option<(Instant, &'static str)> = None;
        let mut consider = |at: Instant, why: &'static str| {
            if next.is_none_or(|(n, _)| at < n) {
                next = Some((at, why));
            }
        };
        if let Some(since) = t.blocked_since {
            consider(since + limits.body_timeout, "the client did not read the answer in time");
        }
        if t.active == 0 {
            if let Some(since) = t.head_since {
                consider(since + limits.header_timeout, "no whole request head in time");
            } else if let Some(since) = t.idle_since {
                consider(since + limits.idle_timeout, "idle keep-alive connection");
            }
        }
        next
    }
}

/// Held from a request's head to the end of its answer: counts the request on its connection
/// and, when admitted, holds its in-flight permit.
pub(crate) struct RequestGuard {
    conn: Arc<ConnState>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.conn.end();
    }
}

/// The socket, reporting reads and blocked writes to the connection's state.
struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.read_some();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        self.state.write_blocked(polled.is_pending());
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.state.write_blocked(polled.is_pending());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.state.write_blocked(polled.is_pending());
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves one connection until it ends, a bound runs out, or shutdown (then drains until
/// `force`).
pub(crate) async fn run<T>(io: T, shared: Arc<Shared>, shutdown: CancellationToken, force: CancellationToken)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(ConnState::new());
    let limits = shared.server.limits;
    let name = shared.server.name;
    let io = TokioIo::new(Watched { inner: io, state: Arc::clone(&state) });
    let service = Service { shared, conn: Arc::clone(&state) };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true).max_buf_size(crate::MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let deadline = state.deadline(&limits);
        let expiry = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(server = name, cause = %e, "connection ended with an error");
                }
                return;
            }
            _ = state.changed.notified() => {}
            _ = expiry => {
                // The state may have moved since the deadline was computed: look again.
                if let Some((at, why)) = state.deadline(&limits)
                    && at <= Instant::now()
                {
                    tracing::debug!(server = name, reason = why, "closing a connection");
                    return;
                }
            }
            _ = shutdown.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = force.cancelled() => return,
        }
    }
}

/// The per-connection hyper service around the application.
struct Service {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<GuardedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let mut guard = self.conn.begin();
        let shared = Arc::clone(&self.shared);
        let limits = shared.server.limits;
        let style = shared.server.style;
        let Ok(permit) = Arc::clone(&shared.inflight).try_acquire_owned() else {
            tracing::debug!(server = shared.server.name, "too many requests in flight: 503");
            let answer = own_answer(
                style,
                StatusCode::SERVICE_UNAVAILABLE,
                "too many requests in flight: retry later",
                Some(limits.retry_after_seconds),
            );
            return Box::pin(async move { Ok(answer.map(|b| GuardedBody::new(b, guard))) });
        };
        guard._permit = Some(permit);
        let timed_out = Arc::new(AtomicBool::new(false));
        let request = request
            .map(|body| axum::body::Body::new(DeadlineBody::new(body, limits.body_timeout, Arc::clone(&timed_out))));
        let mut app = shared.app.clone();
        Box::pin(async move {
            let Ok(response) = tower_service::Service::call(&mut app, request).await;
            let response = if timed_out.load(Ordering::Acquire) {
                tracing::debug!(server = shared.server.name, "request body too slow: 408");
                let mut answer =
                    own_answer(style, StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time", None);
                answer.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                answer
            } else {
                response
            };
            Ok(response.map(|b| GuardedBody::new(b, guard)))
        })
    }
}

/// An answer of the server's own (busy, too slow).
fn own_answer(
    style: crate::Style,
    status: StatusCode,
    message: &str,
    retry_after: Option<u32>,
) -> Response<axum::body::Body> {
    let (content_type, body) = style.body(message);
    let mut response = Response::new(axum::body::Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
