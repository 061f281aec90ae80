//! The two body wrappers: a request body that fails once its deadline passes, and an answer
//! body that holds the request's guard (its in-flight permit) until it has been written.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::conn::{ConnState, RequestGuard};

/// The error of a request body that did not arrive in time.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that must end before its deadline; past it, it yields [`BodyTimeout`]
/// and raises `timed_out` so the server answers 408 whatever the application made of it.
pub(crate) struct DeadlineBody {
    inner: Incoming,
    /// Armed only for a body that has something to wait for.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timed_out: Arc<AtomicBool>,
    /// The connection to tell when the body has been read to its end.
    owner: Option<Arc<ConnState>>,
}

impl DeadlineBody {
    pub(crate) fn new(
        inner: Incoming,
        within: Duration,
        timed_out: Arc<AtomicBool>,
        owner: Option<Arc<ConnState>>,
    ) -> DeadlineBody {
        let deadline = (!inner.is_end_stream()).then(|| Box::pin(tokio::time::sleep(within)));
        DeadlineBody { inner, deadline, timed_out, owner }
    }

    /// The body has been read to its end: tell the connection, once.
    fn ended(&mut self) {
        if let Some(owner) = self.owner.take() {
            owner.body_ended();
        }
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.timed_out.load(Ordering::Acquire) {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout))));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if frame.is_none() || (matches!(frame, Some(Ok(_))) && self.inner.is_end_stream()) {
                    self.ended();
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let expired = self.deadline.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                self.timed_out.store(true, Ordering::Release);
                Poll::Ready(Some(Err(Box::new(BodyTimeout))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer body carrying its request's guard: the request counts as in flight (on its
/// connection and against the cap) until hyper has written and dropped it.
pub struct GuardedBody {
    inner: axum::body::Body,
    _guard: RequestGuard,
}

impl GuardedBody {
    pub(crate) fn new(inner: axum::body::Body, guard: RequestGuard) -> GuardedBody {
        GuardedBody { inner, _guard: guard }
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
