//! What the test bridge left on disk, read (never written, but for one aging helper while the
//! bridge is down): store rows, writer leases and the instance lock, fake-runtime sessions.

use std::time::Duration;

use crate::TestBridge;

impl TestBridge {
    /// Opens the store read-only (the tests inspect rows, never write them).
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(
            self.state_dir.join("bridge.sqlite3"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open the store read-only")
    }

    /// Runs one `SELECT COUNT(*) …` (or any single-integer query) on the store.
    pub fn db_count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Counts the rows of a store table (`tasks`, `events`, `interactions`, …).
    pub fn count(&self, table: &str) -> i64 {
        assert!(table.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "table name {table:?}");
        self.db().query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).expect("count rows")
    }

    /// Row counts of the task tables, to prove a refused request changed nothing.
    pub fn store_counts(&self) -> [(&'static str, i64); 3] {
        ["tasks", "events", "interactions"].map(|t| (t, self.count(t)))
    }

    /// Number of task rows in the store.
    pub fn task_count(&self) -> i64 {
        self.db_count("SELECT COUNT(*) FROM tasks")
    }

    /// Number of recovery guards in the store.
    pub fn guard_count(&self) -> i64 {
        self.db_count("SELECT COUNT(*) FROM recovery_guards")
    }

    /// Whether the writer lease of `slot` is free (tries the same `flock`).
    pub fn lease_is_free(&self, slot: u8) -> bool {
        use fs2::FileExt;
        let path = self.lock_dir.join(format!("{slot:02}.lock"));
        match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f.try_lock_exclusive().is_ok(),
            Err(_) => true,
        }
    }

    /// Whether the bridge's instance lock (`bridge.lock` in the state directory) is free,
    /// that is whether a new bridge could start on this state directory now.
    ///
    /// Right after a crash it may not be: a provider the bridge was spawning at the moment
    /// of the kill is a fork of the bridge until it execs, and holds copies of the bridge's
    /// descriptors (this lock, a writer lease) until then.
    pub fn instance_lock_is_free(&self) -> bool {
        use fs2::FileExt;
        match std::fs::OpenOptions::new().read(true).write(true).open(self.state_dir.join("bridge.lock")) {
            Ok(f) => f.try_lock_exclusive().is_ok(),
            Err(_) => true,
        }
    }

    /// Waits (bounded polling: no event announces it) until a finished writer task has let go
    /// of its workdir: the lease of `slot` is free and no recovery guard names `task_id`. The
    /// bridge persists a terminal state before its runner releases the lease and clears the
    /// guard, so a second writer submitted the moment the first reads terminal may still get
    /// `WORKDIR_BUSY`.
    pub async fn wait_released(&self, task_id: &str, slot: u8) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let guards: i64 = self
                .db()
                .query_row("SELECT COUNT(*) FROM recovery_guards WHERE task_id = ?1", [task_id], |r| r.get(0))
                .expect("count guards");
            if guards == 0 && self.lease_is_free(slot) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {task_id} still holds slot {slot:02} (guards: {guards}) after 20 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no writer holds `repo` (slot 01): its lease is free and its guard cleared.
    /// A terminal task may still hold both for a moment: they are released only after the
    /// provider's cleanup, so a writer submitted right away may get
    /// `WORKDIR_BUSY`.
    pub async fn writer_idle(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !(self.lease_is_free(1) && self.guard_count() == 0) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer lease and guard of `repo` are not released after 20 s (lease free: {}, guards: {}):\n{}",
                self.lease_is_free(1),
                self.guard_count(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many provider turns the fake runtime started (one session record per turn).
    pub fn fake_turns(&self) -> usize {
        let dir = self.state_dir.join("runtimes/fake/sessions");
        std::fs::read_dir(dir)
            .map(|entries| {
                entries.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().lines().count()).sum()
            })
            .unwrap_or(0)
    }

    /// Moves every recorded notification attempt `hours` into the past (while the bridge is
    /// down), as if its target had been failing that long.
    pub fn age_notification_attempts(&self, hours: i64) {
        assert!(self.child.is_none(), "age attempts only while the bridge is down");
        let db = rusqlite::Connection::open(self.state_dir.join("bridge.sqlite3")).expect("open the store");
        let n = db.execute("UPDATE notify_attempts SET at = at - ?1", [hours * 3_600_000]).expect("age the attempts");
        assert!(n > 0, "no attempt to age");
    }

    /// Moves the completion time of terminal tasks `hours` into the past, as if the bridge had
    /// been down that long since they ended. Only while the bridge is stopped: this is the one
    /// place the tests write the store, to let retention see old tasks without waiting hours.
    pub fn age_terminal_tasks(&self, task_ids: &[&str], hours: i64) {
        assert!(self.child.is_none(), "age tasks only while the bridge is down");
        let db = rusqlite::Connection::open(self.state_dir.join("bridge.sqlite3")).expect("open the store");
        for id in task_ids {
            let n = db
                .execute(
                    "UPDATE tasks SET created_at = created_at - ?2, started_at = started_at - ?2, \
                     completed_at = completed_at - ?2 WHERE task_id = ?1 AND completed_at IS NOT NULL",
                    rusqlite::params![id, hours * 3_600_000],
                )
                .expect("age a task");
            assert_eq!(n, 1, "task {id} is not terminal");
        }
    }
}
