//! The audit writer: one row per capability call, batched into group commits off the request
//! path, with the calls that failed authentication coalesced so a flood stays a few rows. A
//! write failure is logged and never fails a call.
//!
//! **Coalescing.** A row with no principal (authentication failed, or the peer itself was
//! refused) or with `UNAUTHENTICATED` is a *flood row*. Its source is what the bridge decided,
//! never what the caller chose (key, client name, arguments): the surface, the capability (a
//! name the registry knows, else `*`, set where the row is built), the error code, the task of
//! a refused task process (the bridge found it from the peer), and the minute of `at`. The
//! first call of a source in a minute is queued like any other row, so it keeps its place
//! among its neighbours; later calls of that source and minute only add to a count held here
//! in memory, written (an UPSERT on the row's coalescing key, so every call is counted exactly
//! once) at every flush, every [`TICK`] and at shutdown. At most [`SOURCES_PER_MINUTE`]
//! sources a minute get a row of their own; past that a flood row loses its capability and
//! task (`*`), so the flood rows of a minute are at most that many plus one per surface and
//! error code. Flood rows take at most that many slots a minute in the queue real rows use,
//! and a flood row that finds the queue full is counted in memory instead of lost.
//!
//! **Safe client names.** [`safe_client`] is applied here, to every row, before it is stored:
//! at most [`CLIENT_MAX`] characters of `[A-Za-z0-9 ._()+:@/-]`, any other character `_`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::code;
use crate::store::Store;
use crate::store::audit::AuditRow;

const QUEUE: usize = 16_384;
const BATCH: usize = 512;
/// How long the writer waits for more rows after the first of a batch: under load a commit
/// then carries many rows instead of a few (rows wait in memory that long, no caller does).
const GATHER: Duration = Duration::from_millis(5);
/// The most flood sources a minute that get a row of their own.
pub const SOURCES_PER_MINUTE: usize = 64;
/// How often the coalesced counts are written at the latest.
pub const TICK: Duration = Duration::from_secs(5);
/// The longest client name kept, in characters.
pub const CLIENT_MAX: usize = 64;

enum Msg {
    /// A row, the key it used (to mark it used), and its coalescing key for a flood row.
    Row(Box<AuditRow>, Option<String>, Option<String>),
    Flush(oneshot::Sender<()>),
}

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<Msg>,
    flood: Arc<Mutex<Flood>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("audit message")
    }
}

/// The flood sources of the current minutes and the counts not yet written.
#[derive(Debug, Default)]
struct Flood {
    sources: HashMap<String, Source>,
    /// Own-row sources admitted per minute (for [`SOURCES_PER_MINUTE`]).
    admitted: HashMap<i64, usize>,
    /// The newest minute seen.
    latest: i64,
}

#[derive(Debug)]
struct Source {
    minute: i64,
    /// The first call's row: what a count is written with if that row never reached the store.
    row: AuditRow,
    /// Calls counted and not yet written.
    pending: i64,
    /// The longest of those calls.
    longest_us: i64,
}

/// Whether `row` is a flood row (see the module documentation).
pub fn is_flood_row(row: &AuditRow) -> bool {
    row.principal.is_none() || row.error_code.as_deref() == Some(code::UNAUTHENTICATED)
}

/// A caller-chosen client name in a safe shape: at most [`CLIENT_MAX`] characters of
/// `[A-Za-z0-9 ._()+:@/-]`, every other character (control characters, `<`, `&`, quotes, …)
/// replaced by `_`, surrounding spaces trimmed; `None` when nothing is left.
pub fn safe_client(raw: &str) -> Option<String> {
    let safe: String = raw
        .chars()
        .take(CLIENT_MAX)
        .map(|c| if c.is_ascii_alphanumeric() || " ._()+:@/-".contains(c) { c } else { '_' })
        .collect();
    let safe = safe.trim();
    (!safe.is_empty()).then(|| safe.to_owned())
}

fn coalesce_key(row: &AuditRow, minute: i64) -> String {
    format!(
        "{minute}|{}|{}|{}|{}",
        row.surface,
        row.capability,
        row.error_code.as_deref().unwrap_or(""),
        row.task_id.as_deref().unwrap_or("")
    )
}

impl AuditSink {
    /// Starts the writer on `tracker`; it drains and stops when `shutdown` is cancelled.
    pub fn start(store: Arc<Store>, tracker: &TaskTracker, shutdown: CancellationToken) -> AuditSink {
        let (tx, rx) = mpsc::channel(QUEUE);
        let flood = Arc::new(Mutex::new(Flood::default()));
        tracker.spawn(writer(store, rx, Arc::clone(&flood), shutdown));
        AuditSink { tx, flood }
    }

    /// Queues a row (or counts a flood row); `key_id` marks the key as used. Never blocks or
    /// fails the caller.
    pub fn record(&self, mut row: AuditRow, key_id: Option<String>) {
        row.client_name = row.client_name.as_deref().and_then(safe_client);
        row.count = 1;
        if is_flood_row(&row) {
            return self.count_flood(row);
        }
        if let Err(e) = self.tx.try_send(Msg::Row(Box::new(row), key_id, None)) {
            tracing::error!(cause = %e, "audit queue is full or closed; a row was lost");
        }
    }

    fn count_flood(&self, mut row: AuditRow) {
        let minute = row.at.div_euclid(60_000);
        let mut flood = self.flood.lock().unwrap_or_else(|p| p.into_inner());
        flood.latest = flood.latest.max(minute);
        let mut key = coalesce_key(&row, minute);
        let mut own = true;
        if !flood.sources.contains_key(&key) && flood.admitted.get(&minute).copied().unwrap_or(0) >= SOURCES_PER_MINUTE
        {
            row.capability = "*".into();
            row.scope = None;
            row.task_id = None;
            row.plan_id = None;
            row.client_name = None;
            key = coalesce_key(&row, minute);
            own = false;
        }
        if let Some(source) = flood.sources.get_mut(&key) {
            source.pending += 1;
            source.longest_us = source.longest_us.max(row.duration_us);
            return;
        }
        if own {
            *flood.admitted.entry(minute).or_default() += 1;
        }
        // Queued under the lock: a later count of this key cannot overtake its first row.
        let queued = self.tx.try_send(Msg::Row(Box::new(row.clone()), None, Some(key.clone()))).is_ok();
        let pending = if queued { 0 } else { 1 };
        let longest_us = row.duration_us;
        flood.sources.insert(key, Source { minute, row, pending, longest_us });
    }

    /// Waits until every row recorded before this call is written (coalesced counts too).
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }
}

/// Takes the counts not yet written, as rows to add, and forgets the sources of minutes
/// older than the one before the newest.
fn take_counts(flood: &Mutex<Flood>) -> Vec<(Option<String>, AuditRow)> {
    let mut flood = flood.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    for (key, source) in flood.sources.iter_mut().filter(|(_, s)| s.pending > 0) {
        let mut row = source.row.clone();
        row.count = source.pending;
        row.duration_us = source.longest_us;
        out.push((Some(key.clone()), row));
        source.pending = 0;
    }
    let keep_from = flood.latest - 1;
    flood.sources.retain(|_, s| s.minute >= keep_from);
    flood.admitted.retain(|minute, _| *minute >= keep_from);
    out
}

async fn writer(store: Arc<Store>, mut rx: mpsc::Receiver<Msg>, flood: Arc<Mutex<Flood>>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut open = true;
    while open {
        let first = tokio::select! {
            msg = rx.recv() => msg,
            _ = tick.tick() => {
                write(&store, take_counts(&flood), Vec::new()).await;
                continue;
            }
            _ = shutdown.cancelled() => { rx.close(); rx.recv().await }
        };
        let mut batch = Vec::new();
        match first {
            Some(first) => batch.push(first),
            None => open = false,
        }
        // A group commit: rows that arrive within [`GATHER`] of the first join its batch (a
        // flush or the shutdown ends the wait at once).
        let gathered = tokio::time::Instant::now() + GATHER;
        while open && batch.len() < BATCH && !matches!(batch.last(), Some(Msg::Flush(_))) {
            let next = match rx.try_recv() {
                Ok(msg) => Some(msg),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                Err(mpsc::error::TryRecvError::Empty) => tokio::select! {
                    msg = rx.recv() => msg,
                    _ = tokio::time::sleep_until(gathered) => break,
                    _ = shutdown.cancelled() => break,
                },
            };
            match next {
                Some(msg) => batch.push(msg),
                None => open = false,
            }
        }
        // In queue order: a flood source's first row keeps its place among its neighbours.
        let mut rows = Vec::new();
        let mut used = Vec::new();
        let mut acks = Vec::new();
        for msg in batch {
            match msg {
                Msg::Row(row, key, coalesce) => {
                    if let Some(key) = key {
                        used.push((key, row.at));
                    }
                    rows.push((coalesce, *row));
                }
                Msg::Flush(ack) => acks.push(ack),
            }
        }
        // A flush (and the last pass) also writes the counts recorded so far.
        if !acks.is_empty() || !open {
            rows.extend(take_counts(&flood));
        }
        write(&store, rows, used).await;
        for ack in acks {
            let _ = ack.send(());
        }
    }
}

async fn write(store: &Arc<Store>, rows: Vec<(Option<String>, AuditRow)>, used: Vec<(String, i64)>) {
    if rows.is_empty() {
        return;
    }
    let count = rows.len();
    let result = store.call(move |s| s.write_audit(&rows, &used)).await;
    if let Err(e) = result {
        tracing::error!(cause = %e, count, "cannot write audit rows");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AuditOutcome;

    fn row(at: i64, principal: Option<&str>, capability: &str) -> AuditRow {
        AuditRow {
            audit_id: 0,
            at,
            surface: "mcp".into(),
            principal: principal.map(str::to_owned),
            role: None,
            capability: capability.into(),
            scope: None,
            outcome: if principal.is_some() { AuditOutcome::Ok } else { AuditOutcome::Denied },
            error_code: principal.is_none().then(|| code::UNAUTHENTICATED.to_owned()),
            duration_us: 1,
            task_id: None,
            plan_id: None,
            client_name: Some("c\u{1b}<x>".into()),
            count: 1,
        }
    }

    /// Past the per-minute cap, new flood sources share one `*` row; every call is counted,
    /// and every real row is kept, in order.
    #[tokio::test]
    async fn flood_sources_are_capped_per_minute_and_every_call_counted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("state")).unwrap());
        let tracker = TaskTracker::new();
        let sink = AuditSink::start(Arc::clone(&store), &tracker, CancellationToken::new());
        let minute = 60_000 * 1_000;
        let mut calls = 0;
        for i in 0..(SOURCES_PER_MINUTE + 100) {
            for _ in 0..3 {
                sink.record(row(minute + i as i64, None, &format!("cap_{i}")), None);
                calls += 1;
            }
            if i % 20 == 0 {
                sink.record(row(minute + i as i64, Some("alice"), &format!("real_{i}")), None);
            }
        }
        // The next minute starts with a fresh allowance.
        sink.record(row(minute + 60_000, None, "cap_late"), None);
        calls += 1;
        sink.flush().await;
        let rows = store.read_audit(&Default::default(), None, 500).unwrap();
        let flood: Vec<&AuditRow> = rows.iter().filter(|r| r.principal.is_none()).collect();
        assert_eq!(flood.iter().map(|r| r.count).sum::<i64>(), calls);
        assert_eq!(flood.len(), SOURCES_PER_MINUTE + 2, "the capped sources, one `*` row, the next minute's row");
        let star = flood.iter().find(|r| r.capability == "*").expect("the overflow row");
        assert_eq!(star.count, 300);
        assert!(flood.iter().any(|r| r.capability == "cap_late" && r.count == 1));
        let real: Vec<&str> =
            rows.iter().rev().filter(|r| r.principal.is_some()).map(|r| r.capability.as_str()).collect();
        assert_eq!(
            real,
            ["real_0", "real_20", "real_40", "real_60", "real_80", "real_100", "real_120", "real_140", "real_160"]
        );
        assert!(rows.iter().all(|r| r.client_name.as_deref().is_none_or(|c| c == "c__x_")), "{rows:#?}");
    }

    #[test]
    fn client_names_are_bounded_and_safe() {
        assert_eq!(safe_client("claude-code/1.0.3 (linux)").as_deref(), Some("claude-code/1.0.3 (linux)"));
        assert_eq!(safe_client("<script>alert(1)</script>").as_deref(), Some("_script_alert(1)_/script_"));
        assert_eq!(safe_client("a\u{1b}[31mb\r\nc\u{85}d").as_deref(), Some("a__31mb__c_d"));
        assert_eq!(safe_client(&"x".repeat(10_000)).map(|s| s.len()), Some(CLIENT_MAX));
        assert_eq!(safe_client("   "), None);
        assert_eq!(safe_client("é\"'&;`$").as_deref(), Some("_______"));
    }
}
