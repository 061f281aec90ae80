//! Pending interactions (approvals and questions) with compare-and-set resolution.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::events::{NewEvent, insert_event};
use super::tasks::{TaskRow, get_task_in};
use super::{Store, StoreError};
use crate::model::{InteractionKind, InteractionStatus, TaskStatus};

/// A stored interaction.
#[derive(Debug, Clone, PartialEq)]
pub struct InteractionRow {
    /// `req_…`.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
    /// Approval or question.
    pub kind: InteractionKind,
    /// Whether it can still be answered.
    pub status: InteractionStatus,
    /// The normalized, redacted request (JSON).
    pub payload_json: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms after which it can no longer be answered.
    pub expires_at: i64,
    /// Unix ms.
    pub resolved_at: Option<i64>,
    /// The caller's decision or answers (JSON).
    pub resolution_json: Option<String>,
}

fn interaction_from_row(r: &Row<'_>) -> rusqlite::Result<InteractionRow> {
    Ok(InteractionRow {
        request_id: r.get(0)?,
        task_id: r.get(1)?,
        kind: r.get(2)?,
        status: r.get(3)?,
        payload_json: r.get(4)?,
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        resolved_at: r.get(7)?,
        resolution_json: r.get(8)?,
    })
}

const COLUMNS: &str =
    "request_id, task_id, kind, status, payload_json, created_at, expires_at, resolved_at, resolution_json";

pub(super) fn get_in(conn: &Connection, request_id: &str) -> Result<Option<InteractionRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM interactions WHERE request_id = ?1");
    Ok(conn.prepare_cached(&sql)?.query_row([request_id], interaction_from_row).optional()?)
}

/// An interaction to open.
#[derive(Debug, Clone)]
pub struct NewInteraction {
    /// Fresh `req_…` id.
    pub request_id: String,
    /// Approval or question.
    pub kind: InteractionKind,
    /// Normalized, redacted payload (JSON).
    pub payload_json: String,
    /// Unix ms.
    pub expires_at: i64,
}

impl Store {
    /// Reads one interaction.
    pub fn get_interaction(&self, request_id: &str) -> Result<Option<InteractionRow>, StoreError> {
        self.read(|c| get_in(c, request_id))
    }

    /// Opens an interaction: the task goes `running → waiting_for_*`, the request becomes its
    /// pending one, and `<kind>.requested` is recorded, all in one transaction.
    pub fn open_interaction(&self, task_id: &str, new: &NewInteraction, now: i64) -> Result<TaskRow, StoreError> {
        self.write(|tx| {
            let task = get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)?;
            let waiting = new.kind.waiting_status();
            if task.pending_request_id.is_some() {
                return Err(StoreError::RequestPending);
            }
            if !(task.status == TaskStatus::Running && task.status.can_become(waiting)) {
                return Err(StoreError::InvalidTransition { from: task.status, to: waiting });
            }
            tx.execute(
                &format!("INSERT INTO interactions ({COLUMNS}) VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, NULL, NULL)"),
                params![new.request_id, task_id, new.kind, new.payload_json, now, new.expires_at],
            )?;
            tx.execute(
                "UPDATE tasks SET status = ?2, pending_request_id = ?3, updated_at = ?4 WHERE task_id = ?1",
                params![task_id, waiting, new.request_id, now],
            )?;
            let event = NewEvent::new(
                &format!("{}.requested", new.kind.as_str()),
                serde_json::json!({
                    "request_id": new.request_id,
                    "expires_at": crate::clock::rfc3339(new.expires_at),
                }),
            );
            insert_event(tx, task_id, &event, now)?;
            let row = get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)?;
            let fact = super::facts::request_opened_in(
                tx,
                task_id,
                &new.request_id,
                new.kind,
                new.expires_at,
                &new.payload_json,
            )?;
            super::facts::record_in(self, tx, &fact, now)?;
            Ok(row)
        })
    }

    /// Resolves a pending interaction by compare-and-set: exactly one concurrent caller wins;
    /// the task goes back to `running` in the same transaction.
    pub fn resolve_interaction(
        &self,
        task_id: &str,
        request_id: &str,
        kind: InteractionKind,
        resolution_json: &str,
        event: &NewEvent,
        now: i64,
    ) -> Result<TaskRow, StoreError> {
        self.write(|tx| {
            let req = get_in(tx, request_id)?.filter(|r| r.task_id == task_id).ok_or(StoreError::RequestNotFound)?;
            match req.status {
                InteractionStatus::Pending => {}
                InteractionStatus::Resolved => return Err(StoreError::RequestAlreadyResolved),
                InteractionStatus::Stale => return Err(StoreError::RequestStale),
            }
            if req.kind != kind {
                return Err(StoreError::WrongKind { expected: kind, actual: req.kind });
            }
            let task = get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)?;
            if task.pending_request_id.as_deref() != Some(request_id) || !task.status.is_waiting() {
                return Err(StoreError::RequestStale);
            }
            if req.expires_at <= now {
                return Err(StoreError::RequestStale);
            }
            let changed = tx.execute(
                "UPDATE interactions SET status = 'resolved', resolved_at = ?2, resolution_json = ?3 \
                 WHERE request_id = ?1 AND status = 'pending'",
                params![request_id, now, resolution_json],
            )?;
            if changed != 1 {
                return Err(StoreError::RequestAlreadyResolved);
            }
            tx.execute(
                "UPDATE tasks SET status = 'running', pending_request_id = NULL, updated_at = ?2 WHERE task_id = ?1",
                params![task_id, now],
            )?;
            insert_event(tx, task_id, event, now)?;
            get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)
        })
    }

    /// The provider withdrew a pending interaction itself: the request goes stale and the task
    /// returns to `running`. Returns false when the request was no longer pending.
    pub fn abandon_interaction(
        &self,
        task_id: &str,
        request_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            let resolution = serde_json::json!({ "stale_reason": reason }).to_string();
            let changed = tx.execute(
                "UPDATE interactions SET status = 'stale', resolved_at = ?3, resolution_json = ?4 \
                 WHERE request_id = ?2 AND task_id = ?1 AND status = 'pending'",
                params![task_id, request_id, now, resolution],
            )?;
            if changed == 0 {
                return Ok(false);
            }
            tx.execute(
                "UPDATE tasks SET status = 'running', pending_request_id = NULL, updated_at = ?2 \
                 WHERE task_id = ?1 AND pending_request_id = ?3 \
                 AND status IN ('waiting_for_approval','waiting_for_question')",
                params![task_id, now, request_id],
            )?;
            let event =
                NewEvent::new("interaction.stale", serde_json::json!({ "request_id": request_id, "reason": reason }));
            insert_event(tx, task_id, &event, now)?;
            Ok(true)
        })
    }
}
