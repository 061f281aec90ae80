//! The socket's connection table: a cap on open connections, what each one is doing, and which
//! one gives way when a newcomer finds the table full.
//!
//! A newcomer at the cap displaces the connection idle the longest (the front's pool reconnects
//! transparently when the bridge closed an idle connection), else the one whose request line
//! started the longest ago; a connection with a request in progress is never displaced. Only
//! when every connection has one is the newcomer refused (`BRIDGE_BUSY`). So the CLI connects
//! whenever any connection could give way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum State {
    /// Between requests: waiting for the first byte of the next line.
    Idle = 0,
    /// A request line has started and is not complete yet.
    Reading = 1,
    /// A complete request is being answered.
    Busy = 2,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            0 => State::Idle,
            1 => State::Reading,
            _ => State::Busy,
        }
    }
}

/// The open connections, at most `cap` of them.
pub(super) struct Table {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    state: State,
    since: Instant,
    evict: CancellationToken,
    closed: CancellationToken,
}

impl Table {
    /// A table for at most `cap` connections (at least one).
    pub(super) fn new(cap: usize) -> Arc<Table> {
        Arc::new(Table { cap: cap.max(1), inner: Mutex::new(Inner::default()) })
    }

    /// The cap.
    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    /// How many connections are open.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// Admits a newcomer, displacing a connection if the table is full; `None` when every
    /// open connection has a request in progress.
    pub(super) fn admit(self: &Arc<Table>) -> Option<Slot> {
        let mut inner = self.lock();
        if inner.open.len() >= self.cap {
            let victim = inner.victim()?;
            let entry = inner.open.remove(&victim).expect("the victim is open");
            tracing::debug!(state = ?entry.state, "a newcomer displaced a connection at the cap");
            entry.evict.cancel();
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let (evict, closed) = (CancellationToken::new(), CancellationToken::new());
        inner.open.insert(
            id,
            Entry { state: State::Idle, since: Instant::now(), evict: evict.clone(), closed: closed.clone() },
        );
        Some(Slot { table: Some(Arc::clone(self)), id, evict, closed, state: AtomicU8::new(State::Idle as u8) })
    }

    /// Closes up to `n` of the connections idle the longest (to free descriptors); returns,
    /// for each, a token cancelled once its descriptor is closed.
    pub(super) fn evict_idle(&self, n: usize) -> Vec<CancellationToken> {
        let mut inner = self.lock();
        let mut idle: Vec<(Instant, u64)> =
            inner.open.iter().filter(|(_, e)| e.state == State::Idle).map(|(id, e)| (e.since, *id)).collect();
        idle.sort_unstable();
        idle.iter()
            .take(n)
            .filter_map(|(_, id)| inner.open.remove(id))
            .map(|entry| {
                entry.evict.cancel();
                entry.closed
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// The connection to displace: idle the longest, else mid-line the longest (the older
    /// connection on a tie).
    fn victim(&self) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, e)| e.state != State::Busy)
            .min_by_key(|(id, e)| (e.state, e.since, **id))
            .map(|(id, _)| *id)
    }
}

/// One connection's place in the table; dropping it frees the place.
pub(super) struct Slot {
    table: Option<Arc<Table>>,
    id: u64,
    evict: CancellationToken,
    closed: CancellationToken,
    state: AtomicU8,
}

impl Slot {
    /// A place outside any table (a peer that is refused anyway).
    pub(super) fn detached() -> Slot {
        Slot {
            table: None,
            id: 0,
            evict: CancellationToken::new(),
            closed: CancellationToken::new(),
            state: AtomicU8::new(State::Idle as u8),
        }
    }

    /// Records what the connection does now; `false` once it was displaced (it must close).
    pub(super) fn set(&self, state: State) -> bool {
        self.state.store(state as u8, Ordering::Relaxed);
        let Some(table) = &self.table else { return true };
        let mut inner = table.lock();
        match inner.open.get_mut(&self.id) {
            Some(entry) => {
                if entry.state != state {
                    entry.state = state;
                    entry.since = Instant::now();
                }
                true
            }
            None => false,
        }
    }

    /// What the connection was doing when last recorded.
    pub(super) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Completes when the connection was displaced.
    pub(super) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            table.lock().open.remove(&self.id);
        }
        self.closed.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_displaces_the_longest_idle_then_a_stalled_line_never_a_busy_one() {
        let table = Table::new(3);
        let a = table.admit().unwrap();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let b = table.admit().unwrap();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let c = table.admit().unwrap();
        assert!(a.set(State::Busy));
        assert!(b.set(State::Reading));
        // c idles, b reads, a is busy: c gives way first, then b, then nobody.
        let d = table.admit().unwrap();
        assert!(c.evict.is_cancelled() && !c.set(State::Idle), "the idle one is displaced");
        assert!(d.set(State::Busy));
        let e = table.admit().unwrap();
        assert!(b.evict.is_cancelled(), "then the one mid-line");
        assert!(e.set(State::Busy));
        assert!(table.admit().is_none(), "every connection is busy: the newcomer is refused");
        assert_eq!(table.len(), 3);
        drop(a);
        assert_eq!(table.len(), 2);
        assert!(table.admit().is_some(), "a closed connection frees its place");
    }

    #[tokio::test(start_paused = true)]
    async fn evicting_idle_connections_reports_when_they_closed() {
        let table = Table::new(8);
        let slots: Vec<Slot> = (0..4).map(|_| table.admit().unwrap()).collect();
        assert!(slots[0].set(State::Busy));
        let closed = table.evict_idle(2);
        assert_eq!(closed.len(), 2);
        assert!(!slots[0].evict.is_cancelled(), "a busy connection is not evicted");
        assert_eq!(slots.iter().filter(|s| s.evict.is_cancelled()).count(), 2);
        assert!(closed.iter().all(|c| !c.is_cancelled()));
        drop(slots);
        assert!(closed.iter().all(CancellationToken::is_cancelled));
        assert_eq!(table.len(), 0);
    }
}
