//! Task events: an append-only log per task with a global, increasing cursor.

use rusqlite::{Connection, Transaction, params};

use super::{Store, StoreError};

/// An event to record.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Dotted type, e.g. `task.started`.
    pub event_type: String,
    /// The payload, already redacted and bounded (JSON text).
    pub payload_json: String,
}

impl NewEvent {
    /// Builds an event from a type and a JSON payload.
    pub fn new(event_type: &str, payload: serde_json::Value) -> NewEvent {
        NewEvent { event_type: event_type.to_owned(), payload_json: payload.to_string() }
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Global cursor.
    pub event_id: i64,
    /// The task.
    pub task_id: String,
    /// Dotted type.
    pub event_type: String,
    /// JSON payload.
    pub payload_json: String,
    /// Unix ms.
    pub created_at: i64,
}

pub(super) fn insert_event(tx: &Connection, task_id: &str, event: &NewEvent, now: i64) -> Result<i64, StoreError> {
    tx.prepare_cached("INSERT INTO events (task_id, event_type, payload_json, created_at) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![task_id, event.event_type, event.payload_json, now])?;
    let id = tx.last_insert_rowid();
    tx.prepare_cached("UPDATE tasks SET event_count = event_count + 1 WHERE task_id = ?1")?.execute([task_id])?;
    Ok(id)
}

/// Inserts a provider event, or drops and counts it once the task holds `cap` events.
fn append_capped(
    tx: &Transaction<'_>,
    task_id: &str,
    event: &NewEvent,
    cap: u32,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    let count: i64 =
        tx.prepare_cached("SELECT event_count FROM tasks WHERE task_id = ?1")?.query_row([task_id], |r| r.get(0))?;
    if count >= i64::from(cap) {
        tx.prepare_cached("UPDATE tasks SET events_dropped = events_dropped + 1 WHERE task_id = ?1")?
            .execute([task_id])?;
        return Ok(None);
    }
    insert_event(tx, task_id, event, now).map(Some)
}

impl Store {
    /// Appends an event. With `cap = Some(n)` the event is a provider event subject to the
    /// per-task cap: once the task holds `n` events it is dropped and counted instead, and
    /// `None` is returned. The bridge's own lifecycle events pass `cap = None`.
    ///
    /// A provider event is committed relaxed ([`Store::write_relaxed`]): a power failure may
    /// lose the last ones, never one before a durable commit (the task's next transition
    /// flushes them all). A flush per event held a flooding agent to what the disk flushes a
    /// second (688 to 3,203 events/s on the benchmark's VM; bench/README.md, `tasks flood`).
    pub fn append_event(
        &self,
        task_id: &str,
        event: &NewEvent,
        cap: Option<u32>,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let append = |tx: &Transaction<'_>| match cap {
            Some(cap) => append_capped(tx, task_id, event, cap, now),
            None => insert_event(tx, task_id, event, now).map(Some),
        };
        if cap.is_some() { self.write_relaxed(append) } else { self.write(append) }
    }

    /// Appends provider events in order, in one relaxed transaction, each under the per-task
    /// `cap` as [`Store::append_event`] does; how many were kept.
    pub fn append_provider_events(
        &self,
        task_id: &str,
        events: &[NewEvent],
        cap: u32,
        now: i64,
    ) -> Result<usize, StoreError> {
        self.write_relaxed(|tx| {
            let mut kept = 0;
            for event in events {
                kept += usize::from(append_capped(tx, task_id, event, cap, now)?.is_some());
            }
            Ok(kept)
        })
    }

    /// Reads up to `limit` events of a task after the cursor `after`, oldest first.
    pub fn read_events(&self, task_id: &str, after: i64, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT event_id, task_id, event_type, payload_json, created_at FROM events \
                 WHERE task_id = ?1 AND event_id > ?2 ORDER BY event_id LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![task_id, after, limit], |r| {
                Ok(EventRow {
                    event_id: r.get(0)?,
                    task_id: r.get(1)?,
                    event_type: r.get(2)?,
                    payload_json: r.get(3)?,
                    created_at: r.get(4)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
