//! The store `tasks history` reads: a year of finished tasks. The first (up to) 1,000 are
//! seeded through the bridge's own `Store` API (`calls`' seed: insert, three transitions, three
//! events each, twenty more on every hundredth); the rest are copies of those rows made by SQL
//! in the same store, 1,000 tasks per statement — the API's four commits a task would take most
//! of an hour for a million. Each copy gets its own id, correlation id and idempotency key, and
//! its times (and its events') are shifted so the tasks are spread evenly over the last year,
//! newest last, as a year of use leaves them.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use agent_bridge::store::{DB_FILE, Store};

use crate::seed;

/// The owner of every seeded task.
pub const PRINCIPAL: &str = "bench";
/// How many tasks are seeded through the API; the rest are copies of them.
const TEMPLATE: usize = 1_000;
/// A year, in ms: the seeded tasks end over the year before the run.
pub const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
/// Copies per write transaction (1,000 tasks each).
const CHUNKS_PER_COMMIT: usize = 25;
/// The task columns holding a time, shifted in each copy.
const TIMES: [&str; 5] = ["created_at", "started_at", "updated_at", "completed_at", "deadline_at"];

/// How the store was made.
#[derive(Debug, Clone, Copy)]
pub struct Seeded {
    /// Tasks seeded through the store's API.
    pub through_api: usize,
    /// The whole seeding.
    pub took: Duration,
    /// The database file's size, bytes.
    pub bytes: u64,
}

/// Seeds `tasks` finished tasks into a new store in `state_dir` (best on tmpfs).
pub fn seed(state_dir: &Path, tasks: usize) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let template = tasks.min(TEMPLATE);
    seed::bridge_store(state_dir, PRINCIPAL, template, 20).context("the tasks seeded through the API")?;
    let store = Store::open(state_dir).context("open the seeded store")?;
    let step = YEAR_MS / tasks as i64;
    let last = tasks as i64 - 1;
    let max_rowid: i64 = store.read(|c| Ok(c.query_row("SELECT MAX(rowid) FROM tasks", [], |r| r.get(0))?))?;
    if max_rowid != template as i64 {
        bail!("the seeded tasks are rows 1 to {max_rowid}, not 1 to {template}");
    }
    let columns: Vec<String> = store.read(|c| {
        let mut stmt = c.prepare("SELECT name FROM pragma_table_info('tasks') ORDER BY cid")?;
        let names = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
        Ok(names)
    })?;
    // `?1`: the copy's first index; `?2`: the last task's index; `?3`: the time step; `?4`:
    // how many template rows this copy takes (the last copy may take fewer).
    let id = "printf('agt_%032x', rowid - 1 + ?1)";
    let shift = "((rowid - 1 + ?1) - ?2) * ?3";
    let select: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "task_id" => id.to_owned(),
            "correlation_id" => format!("'bench-' || {id}"),
            "idempotency_key" => format!("'key-' || {id}"),
            t if TIMES.contains(&t) => format!("{t} + {shift}"),
            other => other.to_owned(),
        })
        .collect();
    let copy_tasks = format!(
        "INSERT INTO tasks ({}) SELECT {} FROM tasks WHERE rowid <= ?4 ORDER BY rowid",
        columns.join(", "),
        select.join(", ")
    );
    let copy_events = "INSERT INTO events (task_id, event_type, payload_json, created_at) \
         SELECT printf('agt_%032x', t.rowid - 1 + ?1), e.event_type, e.payload_json, \
         e.created_at + ((t.rowid - 1 + ?1) - ?2) * ?3 \
         FROM events e JOIN tasks t ON t.task_id = e.task_id WHERE t.rowid <= ?4 ORDER BY t.rowid, e.event_id";
    let copies: Vec<usize> = (1..tasks.div_ceil(template)).collect();
    for batch in copies.chunks(CHUNKS_PER_COMMIT) {
        store.write(|tx| {
            for &k in batch {
                let first = (k * template) as i64;
                let rows = template.min(tasks - k * template) as i64;
                tx.execute(&copy_tasks, rusqlite::params![first, last, step, rows])?;
                tx.execute(copy_events, rusqlite::params![first, last, step, rows])?;
            }
            Ok(())
        })?;
    }
    // The template itself last (the copies read its times unshifted): copy 0.
    store.write(|tx| {
        let events = "UPDATE events SET created_at = created_at + \
             (((SELECT t.rowid FROM tasks t WHERE t.task_id = events.task_id) - 1) - ?2) * ?3 \
             WHERE task_id IN (SELECT task_id FROM tasks WHERE rowid <= ?4)";
        tx.execute(events, rusqlite::params![0i64, last, step, template as i64])?;
        let sets: Vec<String> = TIMES.iter().map(|t| format!("{t} = {t} + {shift}")).collect();
        let tasks_sql = format!("UPDATE tasks SET {} WHERE rowid <= ?4", sets.join(", "));
        tx.execute(&tasks_sql, rusqlite::params![0i64, last, step, template as i64])?;
        Ok(())
    })?;
    let count: i64 = store.read(|c| Ok(c.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))?))?;
    if count != tasks as i64 {
        bail!("the store holds {count} tasks, not {tasks}");
    }
    drop(store);
    let bytes = std::fs::metadata(state_dir.join(DB_FILE)).map(|m| m.len()).unwrap_or(0);
    Ok(Seeded { through_api: template, took: started.elapsed(), bytes })
}

/// Copies the seeded store of `from` into the state directory `to` (created 0700).
pub fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to)
        .with_context(|| format!("create {}", to.display()))?;
    for suffix in ["", "-wal"] {
        let source = from.join(format!("{DB_FILE}{suffix}"));
        if source.exists() {
            std::fs::copy(&source, to.join(format!("{DB_FILE}{suffix}")))
                .with_context(|| format!("copy {} into {}", source.display(), to.display()))?;
        }
    }
    Ok(())
}
