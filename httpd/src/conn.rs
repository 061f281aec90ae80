//! One connection: hyper's HTTP/1.1 state machine over the socket, with a watchdog that
//! closes it when a head, an idle spell or a blocked answer outlasts its bound, and the
//! per-request service that applies the in-flight cap and the body deadline.
//!
//! A connection holds hyper only while a request is on it. hyper allocates two 8 KiB buffers
//! per connection (its read buffer and its write buffer's head) and keeps them for the
//! connection's life; a connection that has not sent a byte yet, or that is idle between
//! requests, holds only its socket: it waits for its next byte here, and a kept-alive connection
//! that goes idle is taken back from hyper (`into_parts`) once its answer is flushed. With many
//! idle connections those buffers were most of the server's memory, and as they were freed and
//! reused their pages, never written by an idle connection, became resident one by one: the
//! RSS of a steady load crept up for minutes.
//!
//! What parking saves, measured by the calls benchmark (`bench/README.md`, custom machinery;
//! release, 2026-12-06): with 1,000 kept-alive connections idle after one call each, the front
//! held 8.9 MB, against 16.0 MB without parking (1.3 against 8.3 KiB a connection). It is kept
//! for that memory, not for speed: where busy connections go idle between calls it costs CPU
//! (16 connections in a closed loop: 9 % more CPU per call and 10 % fewer calls/s than without).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
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
    /// Request bodies hyper may still be reading (not seen to their end): until they are,
    /// hyper is not idle even when every answer is written.
    unread_bodies: usize,
    /// Bytes may sit in hyper's write buffer: from an answer's end (or a write) to a flush.
    unflushed: bool,
    /// hyper is idle and waits for the next request on a socket with nothing to read: the
    /// connection can be taken back from it.
    parked: bool,
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
        t.parked = false;
        if t.active == 0 && t.head_since.is_none() {
            t.head_since = Some(Instant::now());
            t.idle_since = None;
            drop(t);
            self.changed.notify_one();
        }
    }

    /// hyper's read found nothing to read: when that is the wait for a next request (every
    /// answer written and flushed, every request body read), it may be taken apart.
    fn read_pending(&self) {
        let mut t = self.timers();
        if t.active == 0 && t.head_since.is_none() && t.unread_bodies == 0 && !t.unflushed && !t.parked {
            t.parked = true;
            drop(t);
            self.changed.notify_one();
        }
    }

    /// Whether hyper is parked (see [`ConnState::read_pending`]), nothing having happened since.
    fn is_parked(&self) -> bool {
        self.timers().parked
    }

    /// A new hyper connection takes over the socket.
    fn unpark(&self) {
        let mut t = self.timers();
        t.parked = false;
        t.unread_bodies = 0;
        t.unflushed = false;
    }

    fn wrote(&self) {
        let mut t = self.timers();
        t.unflushed = true;
        t.parked = false;
    }

    fn flushed(&self) {
        self.timers().unflushed = false;
    }

    /// A request came with a body that hyper reads as the application asks for it.
    fn body_started(&self) {
        self.timers().unread_bodies += 1;
    }

    /// That body was read to its end.
    pub(crate) fn body_ended(&self) {
        let mut t = self.timers();
        t.unread_bodies = t.unread_bodies.saturating_sub(1);
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
        t.parked = false;
        drop(t);
        self.changed.notify_one();
        RequestGuard { conn: Arc::clone(self), _permit: None }
    }

    fn end(&self) {
        let mut t = self.timers();
        t.active = t.active.saturating_sub(1);
        // The answer's last bytes may still be in hyper's write buffer.
        t.unflushed = true;
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

/// The socket, reporting reads, writes and flushes to the connection's state; it first gives
/// hyper the bytes read before hyper took the connection (`ahead`).
struct Watched<T> {
    inner: T,
    ahead: Bytes,
    state: Arc<ConnState>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.ahead.is_empty() {
            let n = self.ahead.len().min(buf.remaining());
            buf.put_slice(&self.ahead[..n]);
            self.ahead.advance(n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.state.read_some(),
            Poll::Pending => self.state.read_pending(),
            _ => {}
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.state.wrote();
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        self.state.write_blocked(polled.is_pending());
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.state.wrote();
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
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.state.flushed();
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// How a spell of hyper on the connection ended.
enum Served<T> {
    /// The connection is done (closed, failed, timed out, shut down).
    Ended,
    /// hyper went idle and gave the socket back, with any bytes it had read past its last
    /// request.
    Parked(T, Bytes),
}

/// What waiting for a connection's next byte gave.
enum Arrived {
    /// The first bytes of a request.
    Bytes(Bytes),
    /// The connection is done (closed by the client, timed out, shut down).
    Ended,
}

/// Serves one connection until it ends, a bound runs out, or shutdown (then drains until
/// `force`). No hyper state exists while the connection waits for a request.
pub(crate) async fn run<T>(io: T, shared: Arc<Shared>, shutdown: CancellationToken, force: CancellationToken)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(ConnState::new());
    let mut io = io;
    let mut ahead = Bytes::new();
    loop {
        if ahead.is_empty() {
            match next_bytes(&mut io, &state, &shared, &shutdown, &force).await {
                Arrived::Bytes(bytes) => ahead = bytes,
                Arrived::Ended => return,
            }
        }
        // hyper's state (its buffers, its parser) lives on the heap, and only for this spell.
        let spell = Box::pin(serve(io, ahead, Arc::clone(&shared), Arc::clone(&state), &shutdown, &force));
        match spell.await {
            Served::Ended => return,
            Served::Parked(back, left) => (io, ahead) = (back, left),
        }
    }
}

/// Waits, with no buffer of its own, until the connection has bytes to read, then reads what
/// has come (at most 1 KiB; hyper reads the rest).
async fn next_bytes<T>(
    io: &mut T,
    state: &ConnState,
    shared: &Shared,
    shutdown: &CancellationToken,
    force: &CancellationToken,
) -> Arrived
where
    T: AsyncRead + Unpin,
{
    let limits = shared.server.limits;
    let name = shared.server.name;
    loop {
        let deadline = state.deadline(&limits);
        let expiry = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let read = std::future::poll_fn(|cx| {
            // On the stack of this poll only: an idle connection keeps no read buffer.
            let mut space = [0u8; 1024];
            let mut buf = ReadBuf::new(&mut space);
            match Pin::new(&mut *io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(Bytes::copy_from_slice(buf.filled()))),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        });
        tokio::select! {
            read = read => {
                return match read {
                    Ok(bytes) if !bytes.is_empty() => {
                        state.read_some();
                        Arrived::Bytes(bytes)
                    }
                    Ok(_) => Arrived::Ended,
                    Err(e) => {
                        tracing::debug!(server = name, cause = %e, "connection ended with an error");
                        Arrived::Ended
                    }
                };
            }
            _ = expiry => {
                if let Some((at, why)) = state.deadline(&limits)
                    && at <= Instant::now()
                {
                    tracing::debug!(server = name, reason = why, "closing a connection");
                    return Arrived::Ended;
                }
            }
            // Nothing is in flight: shutdown closes the connection at once.
            _ = shutdown.cancelled() => return Arrived::Ended,
            _ = force.cancelled() => return Arrived::Ended,
        }
    }
}

/// One spell of hyper on the connection: from a request's first bytes (`ahead`) until the
/// connection ends or hyper is idle again with its answers flushed.
async fn serve<T>(
    io: T,
    ahead: Bytes,
    shared: Arc<Shared>,
    state: Arc<ConnState>,
    shutdown: &CancellationToken,
    force: &CancellationToken,
) -> Served<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.server.limits;
    let name = shared.server.name;
    state.unpark();
    let io = TokioIo::new(Watched { inner: io, ahead, state: Arc::clone(&state) });
    let service = Service { shared, conn: Arc::clone(&state) };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true).max_buf_size(crate::MAX_HEAD_BYTES);
    let mut conn = builder.serve_connection(io, service);
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
            served = Pin::new(&mut conn) => {
                if let Err(e) = served {
                    tracing::debug!(server = name, cause = %e, "connection ended with an error");
                }
                return Served::Ended;
            }
            _ = state.changed.notified() => {
                if !draining && state.is_parked() {
                    let parts = conn.into_parts();
                    let Watched { inner, ahead, .. } = parts.io.into_inner();
                    // What hyper read past its last request comes first; copied, as hyper's
                    // buffer keeps its whole allocation.
                    let left = match (parts.read_buf.is_empty(), ahead.is_empty()) {
                        (true, _) => ahead,
                        (false, true) => Bytes::copy_from_slice(&parts.read_buf),
                        (false, false) => Bytes::from([&parts.read_buf[..], &ahead[..]].concat()),
                    };
                    if !left.is_empty() {
                        state.read_some();
                    }
                    return Served::Parked(inner, left);
                }
            }
            _ = expiry => {
                // The state may have moved since the deadline was computed: look again.
                if let Some((at, why)) = state.deadline(&limits)
                    && at <= Instant::now()
                {
                    tracing::debug!(server = name, reason = why, "closing a connection");
                    return Served::Ended;
                }
            }
            _ = shutdown.cancelled(), if !draining => {
                draining = true;
                Pin::new(&mut conn).graceful_shutdown();
            }
            _ = force.cancelled() => return Served::Ended,
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
        let has_body = !request.body().is_end_stream();
        if has_body {
            // Counted until the application reads it to its end (never, if it is refused).
            self.conn.body_started();
        }
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
        let owner = has_body.then(|| Arc::clone(&self.conn));
        let request = request.map(|body| {
            axum::body::Body::new(DeadlineBody::new(body, limits.body_timeout, Arc::clone(&timed_out), owner))
        });
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;

    use crate::{Limits, Server, Style};

    /// A server with a short idle time-out, and its address.
    async fn start() -> (std::net::SocketAddr, CancellationToken) {
        let app =
            Router::new().route("/ok", get(|| async { "ok" })).route("/echo", post(|body: String| async move { body }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Long beside the tests' pauses (≤ 200 ms), short enough to watch it close.
        let limits = Limits { idle_timeout: Duration::from_millis(2500), ..Limits::FRONT };
        let server = Server { name: "test", limits, style: Style::Text };
        let shutdown = CancellationToken::new();
        tokio::spawn(crate::serve(listener, app, server, shutdown.clone()));
        (addr, shutdown)
    }

    /// Reads until `answers` whole answers (each ending with `last`) have come, or the
    /// connection closes; returns what came.
    async fn read_answers(stream: &mut TcpStream, answers: usize, last: &str) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let read = async {
            loop {
                let text = String::from_utf8_lossy(&got).into_owned();
                if text.matches("HTTP/1.1 ").count() >= answers && text.ends_with(last) {
                    return text;
                }
                match stream.read(&mut buf).await.unwrap() {
                    0 => return text,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), read).await.expect("the answers in time")
    }

    #[tokio::test]
    async fn a_kept_alive_connection_is_served_again_after_idle_spells_and_pipelining() {
        let (addr, shutdown) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // A request with a body, then an idle spell (hyper gives the socket back), then more.
        stream.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").await.unwrap();
        let first = read_answers(&mut stream, 1, "hello").await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let second = read_answers(&mut stream, 1, "ok").await;
        assert!(second.starts_with("HTTP/1.1 200"), "{second}");
        // Two requests in one write, the second one's head split from its body.
        stream
            .write_all(
                b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n",
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(b"abc").await.unwrap();
        let both = read_answers(&mut stream, 2, "abc").await;
        assert_eq!(both.matches("HTTP/1.1 200").count(), 2, "{both}");
        // An answered request and the start of the next one in one write: hyper's read-ahead
        // goes over to the next spell.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHo").await.unwrap();
        let answered = read_answers(&mut stream, 1, "ok").await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(b"st: x\r\nContent-Length: 3\r\n\r\nxyz").await.unwrap();
        let rest = read_answers(&mut stream, 1, "xyz").await;
        assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
        // A head that arrives a byte at a time after an idle spell.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for byte in b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n" {
            stream.write_all(&[*byte]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let slow = read_answers(&mut stream, 1, "ok").await;
        assert!(slow.starts_with("HTTP/1.1 200"), "{slow}");
        // Idle past the idle time-out: the server closes.
        let closed = tokio::time::timeout(Duration::from_secs(15), stream.read(&mut [0u8; 16])).await;
        assert!(matches!(closed, Ok(Ok(0))), "{closed:?}");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn an_answer_given_before_its_body_was_read_leaves_the_connection_usable() {
        let (addr, shutdown) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // No such route: answered 404 without reading the body.
        stream.write_all(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody").await.unwrap();
        let first = read_answers(&mut stream, 1, "").await;
        assert!(first.starts_with("HTTP/1.1 404"), "{first}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let second = read_answers(&mut stream, 1, "ok").await;
        assert!(second.starts_with("HTTP/1.1 200"), "{second}");
        shutdown.cancel();
    }
}
