//! The SQLite store: the only module that contains SQL.
//!
//! One writer connection (every write is one `BEGIN IMMEDIATE` transaction, so checks and
//! updates are atomic) and a small pool of reader connections; WAL mode lets readers run
//! beside the writer. rusqlite blocks, so async callers go through [`Store::call`], which runs
//! the work on the store's own threads (`workers.rs`) and never on the reactor.
//!
//! Files: the state directory must be a private (0700) directory owned by the bridge user;
//! a directory with broader permissions is refused, never chmod-ed. The database is created
//! 0600 and SQLite gives its WAL and SHM files the same mode.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::model::{InteractionKind, PlanStatus, StepStatus, TaskStatus};

pub mod accounting;
pub mod audit;
pub mod board;
mod columns;
pub mod events;
pub mod facts;
pub mod guards;
pub mod interactions;
pub mod keys;
pub mod outbox;
pub mod plans;
mod schema;
pub mod tasks;
mod workers;
pub mod worktrees;

/// What can go wrong in the store; callers branch on the variants.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file or directory problem.
    #[error("{0}")]
    Files(String),
    /// The database was written by a newer bridge.
    #[error("the database schema version {found} is newer than this bridge understands ({known})")]
    TooNew {
        /// The version found in the file.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// No task with that id.
    #[error("task not found")]
    TaskNotFound,
    /// The transition is not allowed from the task's current state.
    #[error("a {from} task cannot become {to}")]
    InvalidTransition {
        /// Current state.
        from: TaskStatus,
        /// Requested state.
        to: TaskStatus,
    },
    /// The active-task cap is reached.
    #[error("{limit} tasks are already active")]
    TaskLimitReached {
        /// The cap.
        limit: u32,
    },
    /// The idempotency key is taken by a different request (unique index).
    #[error("the idempotency key is already used by a different request")]
    IdempotencyConflict,
    /// A recovery guard already names this workdir.
    #[error("the workdir has a recovery guard for task {task_id}")]
    GuardPresent {
        /// The task the guard names.
        task_id: String,
    },
    /// No interaction with that id on that task.
    #[error("request not found")]
    RequestNotFound,
    /// The interaction was already resolved.
    #[error("request already resolved")]
    RequestAlreadyResolved,
    /// The interaction is no longer the task's pending one.
    #[error("request is stale")]
    RequestStale,
    /// The task already has a pending interaction.
    #[error("the task already has a pending request")]
    RequestPending,
    /// The interaction is of another kind than the call expects.
    #[error("the request is a {actual}, not a {expected}")]
    WrongKind {
        /// What the call expected.
        expected: InteractionKind,
        /// What the request is.
        actual: InteractionKind,
    },
    /// No plan with that id.
    #[error("plan not found")]
    PlanNotFound,
    /// The plan transition is not allowed from the plan's current state.
    #[error("a {from} plan cannot become {to}")]
    InvalidPlanTransition {
        /// Current state.
        from: PlanStatus,
        /// Requested state.
        to: PlanStatus,
    },
    /// The plan step is not in the state the runner expected.
    #[error("step {position} of the plan is {actual}, not {expected}")]
    StepState {
        /// The step.
        position: i64,
        /// What the runner expected.
        expected: StepStatus,
        /// What the step is.
        actual: StepStatus,
    },
    /// An API key name is already used.
    #[error("an API key named {0:?} already exists")]
    KeyNameTaken(String),
    /// The blocking work panicked or was cancelled.
    #[error("store worker failed: {0}")]
    Worker(String),
}

/// The store handle; cheap to clone through `Arc`.
pub struct Store {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    /// Set by a write that recorded a notification fact or message; the delivery worker is
    /// woken after its commit.
    outbox_dirty: std::sync::atomic::AtomicBool,
    outbox_wake: tokio::sync::Notify,
    /// The threads async calls run on.
    workers: Arc<workers::Workers>,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.workers.close();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

/// The database file name inside the state directory.
pub const DB_FILE: &str = "bridge.sqlite3";

impl Store {
    /// Opens (creating if needed) the store in `state_dir`, checking permissions and applying
    /// migrations.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        ensure_private_dir(state_dir)?;
        let path = state_dir.join(DB_FILE);
        ensure_private_file(&path)?;
        let mut writer = open_connection(&path)?;
        schema::migrate(&mut writer)?;
        Ok(Store::with(path, writer))
    }

    fn with(path: PathBuf, writer: Connection) -> Store {
        Store {
            path,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            outbox_dirty: Default::default(),
            outbox_wake: tokio::sync::Notify::new(),
            workers: Default::default(),
        }
    }

    /// Notes that the current write recorded a fact or a message for the delivery worker.
    fn outbox_written(&self) {
        self.outbox_dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Opens an existing store read-only, without migrating (for `agent-bridge doctor` while
    /// the bridge is down). Any write through it fails.
    #[expect(clippy::disallowed_methods, reason = "`doctor` opens the store from the CLI, with no reactor to block")]
    pub fn open_read_only(state_dir: &Path) -> Result<Store, StoreError> {
        let path = state_dir.join(DB_FILE);
        let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let known = schema::MIGRATIONS.len() as i64;
        if found > known {
            return Err(StoreError::TooNew { found, known });
        }
        Ok(Store::with(path, conn))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one immediate (write-locked) transaction; commits when it returns `Ok`,
    /// durably (the commit is on disk when this returns).
    pub fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.writer.lock().unwrap_or_else(|poison| poison.into_inner());
        self.write_on(&mut conn, f)
    }

    /// [`Store::write`] for a record that may be lost in a power failure: its commit is not
    /// flushed to disk by itself (WAL with `synchronous = NORMAL`); the next durable commit,
    /// or the next checkpoint, flushes it. For the audit rows, which are written after the
    /// calls they describe were answered: a flush per batch was most of their cost.
    pub fn write_relaxed<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.writer.lock().unwrap_or_else(|poison| poison.into_inner());
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let value = self.write_on(&mut conn, f);
        // Restored before the lock is released, so no other write is ever relaxed.
        conn.pragma_update(None, "synchronous", "FULL")?;
        value
    }

    fn write_on<T>(
        &self,
        conn: &mut Connection,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx);
        let dirty = self.outbox_dirty.swap(false, std::sync::atomic::Ordering::Relaxed);
        let value = value?;
        tx.commit()?;
        if dirty {
            self.outbox_wake.notify_one();
        }
        Ok(value)
    }

    /// Runs `f` on a reader connection (a consistent snapshot for each statement).
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path)?,
        };
        let result = f(&conn);
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if readers.len() < 8 {
            readers.push(conn);
        }
        result
    }

    /// [`Store::read`] in one read transaction: every statement of `f` sees the same snapshot,
    /// and the WAL read lock is taken and released once (twice a statement otherwise).
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.read(|c| {
            c.prepare_cached("BEGIN")?.execute([])?;
            let value = f(c);
            if let Err(e) = c.prepare_cached("COMMIT").and_then(|mut end| end.execute([])) {
                // Never leave a pooled connection inside a transaction.
                let _ = c.execute_batch("ROLLBACK");
                value?;
                return Err(e.into());
            }
            value
        })
    }

    /// Runs blocking store work off the async reactor, on the store's threads. The work runs
    /// to its end even if the caller stops waiting (a write is never cut in half).
    pub async fn call<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = Arc::clone(self);
        let (done, result) = tokio::sync::oneshot::channel();
        self.workers.submit(Box::new(move || {
            let _ = done.send(f(&store));
        }));
        result.await.map_err(|_| StoreError::Worker("the store call ended without an answer (it panicked)".into()))?
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the store opens SQLite and its files on its own blocking threads (Store::call)"
)]
fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // A bounded page cache per connection (the default is 2 MiB): with the writer and up to
    // eight pooled readers the store's memory stays bounded however large the file grows.
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    // And one bound for all of SQLite's memory in the process: past it, pages are recycled
    // rather than more memory taken (a soft limit: a statement never fails for it).
    conn.pragma_update(None, "soft_heap_limit", SQLITE_HEAP_BYTES)?;
    Ok(conn)
}

/// Each connection's page cache, in KiB.
const PAGE_CACHE_KIB: i64 = 512;
/// The soft bound on SQLite's heap, all connections together.
const SQLITE_HEAP_BYTES: i64 = 4 * 1024 * 1024;

fn ensure_private_dir(dir: &Path) -> Result<(), StoreError> {
    crate::files::ensure_private_dir(dir).map_err(StoreError::Files)
}

#[expect(
    clippy::disallowed_methods,
    reason = "the store opens SQLite and its files on its own blocking threads (Store::call)"
)]
fn ensure_private_file(path: &Path) -> Result<(), StoreError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => crate::files::check_private(path, &meta, false).map_err(StoreError::Files),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map(drop)
            .map_err(|e| StoreError::Files(format!("cannot create {}: {e}", path.display()))),
        Err(e) => Err(StoreError::Files(format!("cannot inspect {}: {e}", path.display()))),
    }
}

/// Whether an error is a unique or primary-key constraint violation.
fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(err, _)
            if err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

#[cfg(test)]
mod accounting_tests;
#[cfg(test)]
mod facts_tests;
#[cfg(test)]
mod outbox_tests;
#[cfg(test)]
pub(crate) mod tests;
