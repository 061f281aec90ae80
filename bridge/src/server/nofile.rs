//! File descriptors: the soft `RLIMIT_NOFILE` raised to the hard limit at start, a reserve
//! descriptor that lets the bridge answer a connection when none is left, and the socket's
//! connection cap lowered to what the limit holds beside the tasks, the store and the board.

use std::fs::File;
use std::time::Duration;

use nix::sys::resource::{Resource, getrlimit};

use super::SocketLimits;

/// The connection cap when the descriptor limit allows it: the front keeps up to 64 idle
/// connections and opens one per call in flight (about 512 at most).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The cap is never lowered below this, however low the limit.
const MIN_CONNECTIONS: usize = 8;
/// Descriptors kept for each task that may run (pipes, spool, lease, sandbox).
const PER_TASK: u64 = 16;
/// Descriptors kept for the rest: the board's connections (128 at most), store journals,
/// runtime probes, `/proc` reads.
const OTHERS: u64 = 192;

/// The process's descriptor budget, prepared at start.
#[derive(Debug)]
pub struct Descriptors {
    /// The soft limit in force (after raising it).
    pub soft: u64,
    reserve: Reserve,
}

/// What the socket server gets: its limits and the reserve descriptor.
#[derive(Debug)]
pub struct Budget {
    /// The connection cap and time bounds.
    pub limits: SocketLimits,
    pub(super) reserve: Reserve,
}

impl Descriptors {
    /// Raises the soft `RLIMIT_NOFILE` to the hard limit (logging both figures) and opens the
    /// reserve descriptor. Call it early, while descriptor numbers are still low and dense.
    pub fn prepare() -> Descriptors {
        let soft = raise_nofile();
        Descriptors { soft, reserve: Reserve::open() }
    }

    /// The socket's budget: 1024 connections, lowered (with a warning) when the limit
    /// cannot hold it beside what is open now and a reserve for `max_active_tasks` tasks.
    pub fn socket_budget(self, max_active_tasks: u32) -> Budget {
        let in_use = open_descriptors();
        let kept = in_use + OTHERS + PER_TASK * u64::from(max_active_tasks);
        let max_connections = fit(self.soft, kept);
        if max_connections < DEFAULT_MAX_CONNECTIONS {
            tracing::warn!(
                rlimit_nofile = self.soft,
                open = in_use,
                kept_for_tasks_store_board = kept - in_use,
                max_connections,
                "RLIMIT_NOFILE is too low for {DEFAULT_MAX_CONNECTIONS} socket connections: the socket takes at most {max_connections}; raise the hard limit (ulimit -Hn, LimitNOFILE=)"
            );
        } else {
            tracing::info!(max_connections, open = in_use, "socket connections are capped");
        }
        Budget { limits: SocketLimits { max_connections, ..SocketLimits::default() }, reserve: self.reserve }
    }
}

impl Default for SocketLimits {
    fn default() -> SocketLimits {
        SocketLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            line: Duration::from_secs(10),
            idle: Duration::from_secs(600),
            write: Duration::from_secs(30),
        }
    }
}

/// The cap that `soft` descriptors hold once `kept` are set aside: the front's rule
/// (`bridge_httpd::connection_cap`), never below [`MIN_CONNECTIONS`].
fn fit(soft: u64, kept: u64) -> usize {
    let kept = usize::try_from(kept).unwrap_or(usize::MAX);
    bridge_httpd::connection_cap(DEFAULT_MAX_CONNECTIONS, soft, kept).max(MIN_CONNECTIONS)
}

/// Raises the soft limit to the hard one (the rule shared with the front, in
/// `bridge-httpd`); logs the figure and returns the soft limit in force.
fn raise_nofile() -> u64 {
    match bridge_httpd::raise_nofile_limit() {
        Ok(limit) if limit.soft > limit.before => {
            let (old_soft, new_soft, hard) = (limit.before, limit.soft, limit.hard);
            tracing::info!(old_soft, new_soft, hard, "RLIMIT_NOFILE: raised the soft limit");
            limit.soft
        }
        Ok(limit) => {
            let (old_soft, new_soft, hard) = (limit.before, limit.soft, limit.hard);
            tracing::info!(old_soft, new_soft, hard, "RLIMIT_NOFILE: the soft limit is already the hard limit");
            limit.soft
        }
        Err(why) => {
            tracing::warn!(cause = %why, "RLIMIT_NOFILE: cannot raise the soft limit; keeping it");
            getrlimit(Resource::RLIMIT_NOFILE).map_or(DEFAULT_MAX_CONNECTIONS as u64, |(soft, _)| soft)
        }
    }
}

/// How many descriptors the process has open.
#[expect(
    clippy::disallowed_methods,
    reason = "descriptor bookkeeping on /proc/self/fd and /dev/null: kernel objects, never a disk"
)]
fn open_descriptors() -> u64 {
    // The directory's own descriptor is in the listing.
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1) as u64).unwrap_or(0)
}

/// One descriptor held in reserve (`/dev/null`): closed to accept a connection when none is
/// left, so that connection is answered (`BRIDGE_BUSY`) rather than left waiting.
#[derive(Debug)]
pub(super) struct Reserve(Option<File>);

impl Reserve {
    fn open() -> Reserve {
        let mut reserve = Reserve(None);
        if !reserve.restore() {
            tracing::warn!("cannot open the reserve descriptor (/dev/null)");
        }
        reserve
    }

    /// Closes the reserve descriptor; `false` if there was none to close.
    pub(super) fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Reopens the reserve descriptor if it is closed; whether it is held.
    #[expect(
        clippy::disallowed_methods,
        reason = "descriptor bookkeeping on /proc/self/fd and /dev/null: kernel objects, never a disk"
    )]
    pub(super) fn restore(&mut self) -> bool {
        if self.0.is_none() {
            self.0 = File::open("/dev/null").ok();
        }
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_limit_between_a_floor_and_the_default() {
        assert_eq!(fit(1 << 20, 200), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(fit(1024, 300), 724);
        assert_eq!(fit(64, 300), MIN_CONNECTIONS);
        assert_eq!(fit(0, 300), MIN_CONNECTIONS);
    }

    #[test]
    fn the_reserve_is_released_and_restored() {
        let mut reserve = Reserve::open();
        assert!(reserve.release());
        assert!(!reserve.release(), "nothing left to release");
        assert!(reserve.restore());
        assert!(reserve.restore(), "restoring a held reserve keeps it");
    }
}
