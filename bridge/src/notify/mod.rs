//! Outbound notifications: the one delivery worker, which routes the facts the store recorded
//! into messages and sends them to their targets, and the views the board, `doctor` and
//! `notify test` read.
//!
//! The store records one neutral fact per change, in the change's transaction (see
//! [`crate::store::facts`]); everything about notifications is decided here: who gets what
//! (`route.rs`), what it says (`format.rs`), where it links (`links.rs`). The worker routes the
//! pending facts before each dispatch, then sends the due messages and records each attempt.
//! At most [`IN_FLIGHT`] requests are in flight, [`PER_TARGET`] per target (so a target that
//! hangs delays only its own rows), each bounded by [`CONNECT_TIMEOUT`] and
//! [`ATTEMPT_TIMEOUT`]; a failed attempt is retried after a doubling delay with jitter until 24 h
//! after the row was written; a task's rows to one target go out in order. Nothing here ever
//! waits on a task or fails one: a send runs in its own tracked task, and its only effect is an
//! attempt row.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::BridgeConfig;
use crate::config::notify::{NotifyTarget, redacted_url};
use crate::error::ToolError;
use crate::store::outbox::{Attempt, DeliveryState, OutboxRow};
use crate::store::{Store, StoreError};

pub mod format;
pub mod links;
pub mod route;

/// Requests in flight at once.
pub const IN_FLIGHT: usize = 8;
/// Requests in flight at once to one target.
pub const PER_TARGET: usize = 2;
/// The connect time-out of one attempt.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The whole time of one attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest delay between two attempts.
const MAX_DELAY_MS: i64 = 3600 * 1000;
/// How long delivered and given-up rows stay for the board.
const KEEP_MS: i64 = 7 * 24 * 3600 * 1000;
/// A target failing this long makes `doctor` warn.
pub const FAILING_WARN_MS: i64 = 3600 * 1000;

/// The delivery worker and the notification views; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    config: Arc<BridgeConfig>,
    clock: Clock,
    http: reqwest::Client,
    /// The board's bound address (links point at it without a public URL).
    board_addr: Arc<OnceLock<SocketAddr>>,
    /// Rows being sent now, with their target.
    busy: Mutex<HashMap<i64, u8>>,
    /// Facts that could not be read: kept in the store, skipped by routing.
    unreadable: Mutex<BTreeSet<i64>>,
    /// Pulsed after every recorded attempt.
    attempts: tokio::sync::watch::Sender<u64>,
    tracker: TaskTracker,
}

impl Notifier {
    /// The notifier of a bridge.
    pub fn new(
        store: Arc<Store>,
        config: Arc<BridgeConfig>,
        clock: Clock,
        board_addr: Arc<OnceLock<SocketAddr>>,
    ) -> anyhow::Result<Notifier> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let loopback_only =
            config.notify.targets.iter().all(|t| reqwest::Url::parse(&t.url).is_ok_and(|u| u.scheme() == "http"));
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(ATTEMPT_TIMEOUT)
            .pool_max_idle_per_host(PER_TARGET)
            .user_agent(concat!("agent-bridge/", env!("CARGO_PKG_VERSION")));
        if loopback_only {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| anyhow::anyhow!("cannot build the notification HTTP client: {e}"))?;
        let (attempts, _) = tokio::sync::watch::channel(0);
        Ok(Notifier {
            inner: Arc::new(Inner {
                store,
                config,
                clock,
                http,
                board_addr,
                busy: Mutex::new(HashMap::new()),
                unreadable: Mutex::new(BTreeSet::new()),
                attempts,
                tracker: TaskTracker::new(),
            }),
        })
    }

    /// The base URL links point at: the public URL, else the local board.
    pub fn link_base(&self) -> String {
        if let Some(public) = &self.inner.config.notify.board_public_url {
            return public.clone();
        }
        let addr = self.inner.board_addr.get().copied().unwrap_or(self.inner.config.board_addr);
        format!("http://{addr}")
    }

    fn target(&self, slot: u8) -> Option<&NotifyTarget> {
        self.inner.config.notify.targets.iter().find(|t| t.slot == slot)
    }

    /// Runs the delivery worker until `shutdown`; sends in flight are awaited (each is bounded).
    /// Without targets it still runs: it routes each fact to nobody, which deletes it.
    pub async fn run(self, shutdown: CancellationToken) {
        // Rows of targets removed from the config are given up, once, so nothing waits forever.
        self.give_up_removed().await;
        let mut next_cleanup = 0i64;
        loop {
            let now = self.inner.clock.now_ms();
            if now >= next_cleanup {
                next_cleanup = now + 3600 * 1000;
                let store = Arc::clone(&self.inner.store);
                if let Err(e) = store.call(move |s| s.delete_old_notifications(now - KEEP_MS, 1000)).await {
                    tracing::warn!(cause = %e, "cannot delete old notifications");
                }
            }
            let signal = self.inner.store.outbox_signal().notified();
            let mut done = self.inner.attempts.subscribe();
            self.route().await;
            self.dispatch(now, &shutdown).await;
            let store = Arc::clone(&self.inner.store);
            let next = match store.call(|s| s.next_notification_due()).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(cause = %e, "cannot read the notification outbox");
                    Some(now + 1000)
                }
            };
            // A due row that was not dispatched is in flight or over the cap: wait for an
            // attempt to end. A later row: wait for its time. Either way a new row wakes us.
            let wait_until = next.filter(|at| *at > now).map(|at| self.inner.clock.instant_at(at));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = signal => {}
                _ = done.changed() => {}
                _ = async {
                    match wait_until {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    async fn give_up_removed(&self) {
        let configured: Vec<u8> = self.inner.config.notify.targets.iter().map(|t| t.slot).collect();
        let now = self.inner.clock.now_ms();
        let store = Arc::clone(&self.inner.store);
        let result = store
            .call(move |s| {
                let mut n = 0;
                for slot in 1..=crate::config::keys::NOTIFY_COUNT {
                    if !configured.contains(&slot) {
                        n += s.give_up_target(slot, now, "the target is no longer configured")?;
                    }
                }
                Ok(n)
            })
            .await;
        match result {
            Ok(0) => {}
            Ok(n) => tracing::warn!(rows = n, "notifications of removed targets given up"),
            Err(e) => tracing::warn!(cause = %e, "cannot give up the rows of removed targets"),
        }
    }

    /// Routes the pending facts to the configured targets (see [`route`]).
    async fn route(&self) {
        let inner = Arc::clone(&self.inner);
        let routed = self
            .inner
            .store
            .call(move |s| {
                let mut unreadable = inner.unreadable.lock().unwrap_or_else(|p| p.into_inner());
                route::route_pending(s, &inner.config.notify.targets, &mut unreadable)
            })
            .await;
        if let Err(e) = routed {
            tracing::warn!(cause = %e, "cannot route the recorded notification facts");
        }
    }

    /// Starts a send for every due row there is room for: [`IN_FLIGHT`] in all, [`PER_TARGET`]
    /// per target. Rows are fetched in rounds that leave out the targets already full, so a
    /// backlog of one target (ahead of the others in due order) never hides another's rows.
    async fn dispatch(&self, now: i64, shutdown: &CancellationToken) {
        loop {
            let (busy, full) = {
                let busy = self.inner.busy.lock().unwrap_or_else(|p| p.into_inner());
                let mut per_target: HashMap<u8, usize> = HashMap::new();
                for target in busy.values() {
                    *per_target.entry(*target).or_default() += 1;
                }
                let full: Vec<u8> = per_target.into_iter().filter(|(_, n)| *n >= PER_TARGET).map(|(t, _)| t).collect();
                (busy.keys().copied().collect::<Vec<i64>>(), full)
            };
            let room = IN_FLIGHT.saturating_sub(busy.len());
            if room == 0 {
                return;
            }
            let limit = room * PER_TARGET;
            let store = Arc::clone(&self.inner.store);
            let rows = match store.call(move |s| s.due_notifications(now, limit as u32, &busy, &full)).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(cause = %e, "cannot read the notification outbox");
                    return;
                }
            };
            let fetched = rows.len();
            // A full fetch started at least one row (a fetched row is of a target with room
            // when the round began), so rounds end: when nothing more is due, or no room is left.
            self.start(rows, room, shutdown);
            if fetched < limit {
                return;
            }
        }
    }

    /// Starts sends for `rows` in order, at most `room` and [`PER_TARGET`] per target (rows
    /// over a target's share are left for a later round).
    fn start(&self, rows: Vec<OutboxRow>, room: usize, shutdown: &CancellationToken) {
        let mut started = 0;
        for row in rows {
            {
                let mut busy = self.inner.busy.lock().unwrap_or_else(|p| p.into_inner());
                let of_target = busy.values().filter(|t| **t == row.target).count();
                if started == room || of_target >= PER_TARGET {
                    continue;
                }
                busy.insert(row.outbox_id, row.target);
            }
            started += 1;
            let (this, stop) = (self.clone(), shutdown.clone());
            self.inner.tracker.spawn(async move {
                let id = row.outbox_id;
                this.send(row, &stop).await;
                this.inner.busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                this.inner.attempts.send_modify(|n| *n += 1);
            });
        }
    }

    /// One attempt of one row, recorded; an attempt cut short by the shutdown is not (the row
    /// stays pending and the next start sends it).
    async fn send(&self, row: OutboxRow, shutdown: &CancellationToken) {
        let started_ms = self.inner.clock.now_ms();
        let started = Instant::now();
        let (status, error) = match self.target(row.target) {
            None => (None, Some("the target is no longer configured".to_owned())),
            Some(target) => match format::render(&row, target, &self.link_base(), started_ms / 1000) {
                Err(e) => (None, Some(e)),
                Ok(request) => tokio::select! {
                    sent = self.post(request) => sent,
                    _ = shutdown.cancelled() => return,
                },
            },
        };
        let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let attempt = Attempt { at: started_ms, http_status: status, latency_ms, error };
        // The last retry is pulled in to the give-up time, so a row is tried for the whole day.
        let retry_at = attempt.error.as_ref().and_then(|_| {
            let ended = started_ms + latency_ms;
            let at = ended + backoff_ms(self.inner.config.notify.retry_base_ms, row.attempts + 1);
            (ended < row.give_up_at && self.target(row.target).is_some()).then_some(at.min(row.give_up_at))
        });
        match &attempt.error {
            None => {
                tracing::debug!(message_id = row.message_id, target = row.target, latency_ms, "notification delivered")
            }
            Some(e) => tracing::info!(
                message_id = row.message_id,
                target = row.target,
                error = %e,
                retry = retry_at.is_some(),
                "notification attempt failed"
            ),
        }
        let store = Arc::clone(&self.inner.store);
        let id = row.outbox_id;
        if let Err(e) = store.call(move |s| s.record_attempt(id, &attempt, retry_at)).await {
            tracing::warn!(cause = %e, "cannot record a notification attempt");
        }
    }

    /// POSTs one request; the status and, unless 2xx, what went wrong.
    async fn post(&self, request: format::Request) -> (Option<u16>, Option<String>) {
        let mut builder =
            self.inner.http.post(&request.url).header("content-type", "application/json").body(request.body);
        for (name, value) in request.headers {
            builder = builder.header(name, value);
        }
        match builder.send().await {
            Ok(response) => {
                let status = response.status();
                // The answer's body is not needed; dropping it is bounded.
                drop(response);
                if status.is_success() {
                    (Some(status.as_u16()), None)
                } else {
                    (Some(status.as_u16()), Some(format!("HTTP {}", status.as_u16())))
                }
            }
            Err(e) => {
                let what = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "connection failed"
                } else {
                    "request failed"
                };
                (None, Some(what.to_owned()))
            }
        }
    }

    /// `notify test NN`: writes a test notification to one target and waits (at most 15 s)
    /// for its attempt.
    pub async fn test(&self, slot: u8) -> Result<Value, ToolError> {
        let Some(target) = self.target(slot) else {
            return Err(ToolError::invalid(
                "target",
                format!("target {slot:02} is not configured (SERVERFS_NOTIFY_{slot:02}_URL)"),
            ));
        };
        let kind = target.kind.as_str();
        let mut pulse = self.inner.attempts.subscribe();
        let now = self.inner.clock.now_ms();
        let store = Arc::clone(&self.inner.store);
        let message = route::test_message(slot, now);
        let id = message.message_id.clone();
        store.call(move |s| s.insert_message(&message)).await.map_err(store_error)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let (store, mid) = (Arc::clone(&self.inner.store), id.clone());
            let row = store.call(move |s| s.get_notification(&mid)).await.map_err(store_error)?;
            if let Some(row) = row.filter(|r| r.attempts > 0 || r.state != DeliveryState::Pending) {
                return Ok(json!({
                    "target": slot,
                    "kind": kind,
                    "message_id": row.message_id,
                    "delivered": row.state == DeliveryState::Delivered,
                    "http_status": row.last_status,
                    "error": row.last_error,
                    "latency_ms": row.last_latency_ms,
                }));
            }
            tokio::select! {
                _ = pulse.changed() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(ToolError::new(crate::error::code::INTERNAL_ERROR, "the test notification was not attempted within 15 s"));
                }
            }
        }
    }

    /// The targets with their figures, and the newest deliveries.
    pub async fn overview(&self, limit: u32) -> Result<Value, ToolError> {
        let store = Arc::clone(&self.inner.store);
        let (stats, recent) = store
            .call(move |s| Ok((s.notification_stats()?, s.recent_notifications(limit)?)))
            .await
            .map_err(store_error)?;
        let now = self.inner.clock.now_ms();
        let targets: Vec<Value> = self
            .inner
            .config
            .notify
            .targets
            .iter()
            .map(|t| {
                let s = stats.iter().find(|s| s.target == t.slot).cloned().unwrap_or_default();
                let failing = s.failing_since.filter(|_| s.pending > 0 || s.given_up > 0);
                json!({
                    "target": t.slot,
                    "kind": t.kind.as_str(),
                    "url": redacted_url(&t.url),
                    "events": t.events.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
                    "details": if t.details == crate::config::notify::Details::Full { "full" } else { "summary" },
                    "delivered": s.delivered,
                    "pending": s.pending,
                    "given_up": s.given_up,
                    "last_ok_at": s.last_ok_at.map(crate::clock::rfc3339),
                    "failing_since": failing.map(crate::clock::rfc3339),
                    "failing_for_an_hour": failing.is_some() && s.failing_for(FAILING_WARN_MS, now),
                })
            })
            .collect();
        let deliveries: Vec<Value> = recent
            .iter()
            .map(|r| {
                json!({
                    "message_id": r.message_id,
                    "target": r.target,
                    "event": r.kind.as_str(),
                    "task_id": r.task_id,
                    "plan_id": r.plan_id,
                    "state": r.state.as_str(),
                    "attempts": r.attempts,
                    "last_status": r.last_status,
                    "last_error": r.last_error,
                    "latency_ms": r.last_latency_ms,
                    "created_at": crate::clock::rfc3339(r.created_at),
                    "delivered_at": r.delivered_at.map(crate::clock::rfc3339),
                    "next_attempt_at": (r.state == DeliveryState::Pending).then(|| crate::clock::rfc3339(r.next_attempt_at)),
                })
            })
            .collect();
        Ok(json!({ "targets": targets, "deliveries": deliveries, "link_base": self.link_base() }))
    }
}

/// The delay after the `attempt`-th failure: `base · 2^(attempt-1)`, at most an hour, ±20 %.
pub fn backoff_ms(base_ms: u64, attempt: i64) -> i64 {
    let exp = attempt.clamp(1, 32) - 1;
    let raw = (base_ms as i64).saturating_mul(1i64 << exp.min(30)).min(MAX_DELAY_MS);
    let jitter = crate::ids::random_bytes::<2>();
    let unit = f64::from(u16::from_le_bytes(jitter)) / f64::from(u16::MAX); // 0..=1
    (raw as f64 * (0.8 + 0.4 * unit)) as i64
}

fn store_error(e: StoreError) -> ToolError {
    ToolError::internal("the notification outbox cannot be read", e)
}

#[cfg(test)]
mod tests;
