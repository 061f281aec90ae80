//! Reads: the task view (with long-poll), the event cursor, result chunks and the admin list.
//! Views are built by hand from store rows; provider-native ids and fingerprints never appear.

use std::time::Duration;

use serde_json::{Value, json};

use super::{TaskService, accounting, results};
use crate::clock::rfc3339;
use crate::error::{ToolError, code};
use crate::model::{Principal, ResultStorage};
use crate::store::accounting::{ChangesRow, TotalsBy, UsageTotals};
use crate::store::events::EventRow;
use crate::store::interactions::InteractionRow;
use crate::store::tasks::{ChangesBrief, TaskFilter, TaskRow};

/// The longest `get_agent_task` long-poll.
pub const MAX_WAIT_SECONDS: u64 = 25;

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The public view of an interaction.
pub fn interaction_view(r: &InteractionRow) -> Value {
    json!({
        "request_id": r.request_id,
        "kind": r.kind.as_str(),
        "status": r.status.as_str(),
        "created_at": rfc3339(r.created_at),
        "expires_at": rfc3339(r.expires_at),
        "payload": parse_json(&r.payload_json),
    })
}

/// The public view of a task at `now`; `changes` is its stored change set, when read.
pub fn task_view(t: &TaskRow, pending: Option<&InteractionRow>, changes: Option<&ChangesRow>, now: i64) -> Value {
    let result = t.result_storage.map(|storage| {
        json!({
            "storage": storage.as_str(),
            "size_bytes": t.result_size_bytes,
            "sha256": t.result_sha256,
            "retrievable": storage == ResultStorage::Spool,
        })
    });
    let error = t.error_code.as_ref().map(|c| json!({ "code": c, "message": t.error_message }));
    json!({
        "task_id": t.task_id,
        "status": t.status.as_str(),
        "terminal": t.status.is_terminal(),
        "runtime": t.runtime,
        "workdir": t.workdir_alias,
        "path": t.relative_cwd,
        "profile": t.profile,
        "model": t.requested_model,
        "owner": t.principal,
        "created_at": rfc3339(t.created_at),
        "started_at": t.started_at.map(rfc3339),
        "updated_at": rfc3339(t.updated_at),
        "completed_at": t.completed_at.map(rfc3339),
        "deadline_at": rfc3339(t.deadline_at),
        "correlation_id": t.correlation_id,
        "idempotency_key": t.idempotency_key,
        "continue_from_task_id": t.continue_from_task_id,
        "error": error,
        "pending_request": pending.map(interaction_view),
        "final_response": t.final_response,
        "final_response_truncated": t.result_storage == Some(ResultStorage::Spool),
        "result": result,
        "event_count": t.event_count,
        "events_dropped": t.events_dropped,
        "manifest": parse_json(&t.manifest_json),
        "manifest_sha256": t.manifest_sha256,
        "title": t.title,
        "usage": t.usage.as_ref().map(accounting::usage_json),
        "timing": accounting::timing_json(t, pending.map(|p| p.created_at), now),
        "changes": match changes {
            Some(c) => changes_view(c),
            None if t.profile == "review" => read_only_changes(),
            None => Value::Null,
        },
    })
}

/// The public view of a stored change set: its summary, or why there is none.
pub fn changes_view(c: &ChangesRow) -> Value {
    let mut view = c.summary_json.as_deref().map(parse_json).filter(Value::is_object).unwrap_or_else(|| json!({}));
    view["status"] = json!(c.status);
    if let Some(reason) = &c.reason {
        view["reason"] = json!(reason);
    }
    view
}

/// What a review task changed: nothing it may — it runs with the runtime's read-only sandbox,
/// and holds no writer lease, so no baseline is taken (another writer's changes would not be
/// its own).
fn read_only_changes() -> Value {
    json!({
        "status": "read_only",
        "reason": "a review task runs read-only and takes no baseline",
        "files": [],
        "files_changed": 0,
        "added": 0,
        "removed": 0,
        "truncated": false,
    })
}

/// The outline of a change set in a list: counts only.
fn changes_brief(b: &ChangesBrief) -> Value {
    json!({
        "status": b.status,
        "files_changed": b.files_changed,
        "added": b.added,
        "removed": b.removed,
        "truncated": b.truncated,
    })
}

/// The public view of an event (the schema-versioned envelope).
pub fn event_view(e: &EventRow, correlation_id: Option<&str>) -> Value {
    json!({
        "event_id": e.event_id,
        "task_id": e.task_id,
        "correlation_id": correlation_id,
        "event_type": e.event_type,
        "payload": parse_json(&e.payload_json),
        "created_at": rfc3339(e.created_at),
        "schema_version": 1,
    })
}

impl TaskService {
    /// The task view, read in one trip to the store: the row, its pending interaction and the
    /// plan step it belongs to. Anything the principal may not see is `AGENT_TASK_NOT_FOUND`.
    async fn view(&self, principal: &Principal, task_id: &str, full: bool) -> Result<(TaskRow, Value), ToolError> {
        if !crate::ids::looks_like(task_id, "agt_") {
            return Err(ToolError::task_not_found());
        }
        let id = task_id.to_owned();
        let found = self
            .inner
            .store
            .call(move |s| {
                let Some(row) = s.get_task(&id)? else { return Ok(None) };
                let pending = match &row.pending_request_id {
                    Some(request) => s.get_interaction(request)?,
                    None => None,
                };
                let plan = s.plan_of_task(&id)?;
                let changes = match row.changes {
                    Some(_) => s.get_changes(&id)?,
                    None => None,
                };
                Ok(Some((row, pending, plan, changes)))
            })
            .await?;
        let Some((row, pending, plan, changes)) =
            found.filter(|(row, ..)| principal.sees_everything() || row.principal == principal.name)
        else {
            return Err(ToolError::task_not_found());
        };
        let mut view = task_view(&row, pending.as_ref(), changes.as_ref(), self.inner.clock.now_ms());
        // A request clipped for display keeps its whole text; it is sent only when asked for.
        // (`pointer_mut`, not indexing: indexing a null `pending_request` would create it.)
        if !full && let Some(payload) = view.pointer_mut("/pending_request/payload").and_then(Value::as_object_mut) {
            payload.remove("full_text");
        }
        // A plan's step says so: its owner finds the plan from any of its tasks.
        view["plan"] = plan.map_or(Value::Null, |(plan_id, step)| json!({ "plan_id": plan_id, "step": step }));
        Ok((row, view))
    }

    /// `get_agent_task`; with `wait_seconds > 0` it returns as soon as the status or the
    /// pending interaction changes, or when the wait is over. Only a task the principal may
    /// see is watched, and the watch ends with the call, however it ends. With `full`, a
    /// pending request that was clipped for display carries its whole text (`full_text`).
    pub async fn get(
        &self,
        principal: &Principal,
        task_id: &str,
        wait_seconds: u64,
        full: bool,
    ) -> Result<Value, ToolError> {
        let inner = &self.inner;
        if wait_seconds == 0 {
            return Ok(self.view(principal, task_id, full).await?.1);
        }
        inner.visible_task(principal, task_id).await?;
        let mut changes = inner.changes.watch(task_id);
        let (row, mut view) = self.view(principal, task_id, full).await?;
        if !row.status.is_terminal() {
            let baseline = (row.status, row.pending_request_id.clone());
            let until = tokio::time::Instant::now() + Duration::from_secs(wait_seconds.min(MAX_WAIT_SECONDS));
            loop {
                tokio::select! {
                    changed = changes.changed() => if !changed { break },
                    _ = tokio::time::sleep_until(until) => break,
                    _ = inner.shutdown.cancelled() => break,
                }
                let row = inner.visible_task(principal, task_id).await?;
                if (row.status, row.pending_request_id.clone()) != baseline {
                    break;
                }
            }
            view = self.view(principal, task_id, full).await?.1;
        }
        Ok(view)
    }

    /// How many tasks are being long-polled right now (one feed per watched task).
    pub fn watched(&self) -> usize {
        self.inner.changes.watched()
    }

    /// `read_agent_task_events`: events after the cursor, oldest first.
    pub async fn events(
        &self,
        principal: &Principal,
        task_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Value, ToolError> {
        let row = self.inner.visible_task(principal, task_id).await?;
        let id = task_id.to_owned();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let events = self.inner.store.call(move |s| s.read_events(&id, after, limit)).await?;
        let next = events.last().map_or(after, |e| e.event_id);
        Ok(json!({
            "task_id": task_id,
            "correlation_id": row.correlation_id,
            "events": events.iter().map(|e| event_view(e, row.correlation_id.as_deref())).collect::<Vec<_>>(),
            "next_after_event_id": next,
            "status": row.status.as_str(),
        }))
    }

    /// `read_agent_task_result`: a UTF-8-safe chunk of a spooled result.
    pub async fn result_chunk(
        &self,
        principal: &Principal,
        task_id: &str,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Value, ToolError> {
        let row = self.inner.visible_task(principal, task_id).await?;
        match row.result_storage {
            Some(ResultStorage::Spool) => {}
            Some(ResultStorage::Inline) => {
                return Err(ToolError::new(
                    code::AGENT_RESULT_NOT_RETRIEVABLE,
                    "the result is inline: read final_response from get_agent_task",
                ));
            }
            None => return Err(ToolError::new(code::AGENT_RESULT_NOT_RETRIEVABLE, "the task has no result (yet)")),
        }
        let size = row.result_size_bytes.unwrap_or(0).max(0) as u64;
        let state_dir = self.inner.config.state_dir.clone();
        let id = task_id.to_owned();
        let mut chunk =
            tokio::task::spawn_blocking(move || results::read_chunk(&state_dir, &id, size, offset, max_bytes))
                .await
                .map_err(|e| ToolError::internal("result read failed", e))??;
        chunk["task_id"] = json!(task_id);
        chunk["size_bytes"] = json!(size);
        chunk["sha256"] = json!(row.result_sha256);
        chunk["correlation_id"] = json!(row.correlation_id);
        Ok(chunk)
    }

    /// `read_agent_task_diff`: a chunk of the task's diff, whole or one file's section.
    pub async fn diff_chunk(
        &self,
        principal: &Principal,
        task_id: &str,
        path: Option<String>,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Value, ToolError> {
        let row = self.inner.visible_task(principal, task_id).await?;
        let id = task_id.to_owned();
        let changes = self.inner.store.call(move |s| s.get_changes(&id)).await?;
        let changes = match changes {
            Some(c) if c.status == "recorded" => c,
            Some(c) => {
                let why = c.reason.unwrap_or_default();
                return Err(ToolError::new(
                    code::AGENT_DIFF_NOT_AVAILABLE,
                    format!("no change set was recorded: {why}"),
                ));
            }
            None if row.status.is_terminal() => {
                return Err(ToolError::new(code::AGENT_DIFF_NOT_AVAILABLE, "this task has no change set"));
            }
            None => {
                return Err(ToolError::new(
                    code::AGENT_DIFF_NOT_AVAILABLE,
                    "the change set is computed when the task ends",
                ));
            }
        };
        let state_dir = self.inner.config.state_dir.clone();
        let id = task_id.to_owned();
        let mut chunk = tokio::task::spawn_blocking(move || {
            super::diffs::read_chunk(&state_dir, &id, &changes, path.as_deref(), offset, max_bytes)
        })
        .await
        .map_err(|e| ToolError::internal("diff read failed", e))??;
        chunk["correlation_id"] = json!(row.correlation_id);
        Ok(chunk)
    }

    /// `admin_list_tasks`: every principal's tasks, newest first, with a cursor.
    pub async fn list(&self, filter: TaskFilter, limit: u32) -> Result<Value, ToolError> {
        let now = self.inner.clock.now_ms();
        let (rows, totals) = self
            .inner
            .store
            .call(move |s| {
                let rows = s.list_tasks(&filter, limit)?;
                let mut totals = Vec::new();
                for by in [TotalsBy::All, TotalsBy::Principal, TotalsBy::Workdir] {
                    totals.push(s.usage_totals(&filter, by, now)?);
                }
                Ok((rows, totals))
            })
            .await?;
        let group = |lines: &[(String, UsageTotals)], key: &str| -> Vec<Value> {
            lines
                .iter()
                .map(|(name, t)| {
                    let mut v = accounting::totals_json(t);
                    v[key] = json!(name);
                    v
                })
                .collect()
        };
        let overall = totals[0].first().map(|(_, t)| accounting::totals_json(t)).unwrap_or_default();
        let totals = json!({
            "overall": overall,
            "by_principal": group(&totals[1], "principal"),
            "by_workdir": group(&totals[2], "workdir"),
        });
        let next = if rows.len() as u32 == limit { rows.last().map(|r| r.task_id.clone()) } else { None };
        let tasks: Vec<Value> = rows
            .iter()
            .map(|t| {
                json!({
                    "task_id": t.task_id,
                    "status": t.status.as_str(),
                    "runtime": t.runtime,
                    "workdir": t.workdir_alias,
                    "profile": t.profile,
                    "owner": t.principal,
                    "created_at": rfc3339(t.created_at),
                    "completed_at": t.completed_at.map(rfc3339),
                    "error_code": t.error_code,
                    "pending_request_id": t.pending_request_id,
                    "correlation_id": t.correlation_id,
                    "title": t.title,
                    "duration_ms": t.started_at.map(|s| (t.completed_at.unwrap_or(now) - s).max(0)),
                    "usage": t.usage.as_ref().map(accounting::usage_json),
                    "human_wait_ms": t.human_wait_ms,
                    "changes": match &t.changes {
                        Some(b) => changes_brief(b),
                        None if t.profile == "review" => read_only_changes(),
                        None => Value::Null,
                    },
                })
            })
            .collect();
        Ok(json!({ "tasks": tasks, "next_before_task_id": next, "totals": totals }))
    }
}
