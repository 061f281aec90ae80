//! Reads: the task view (with long-poll), the event cursor, result chunks and the admin list.
//! Views are built by hand from store rows; provider-native ids and fingerprints never appear.

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{TaskService, accounting, event_page, results, task_view};
use crate::clock::rfc3339;
use crate::error::{ToolError, code};
use crate::model::{Principal, ResultStorage};
use crate::store::accounting::{TotalsBy, UsageTotals};
use crate::store::tasks::{ChangesBrief, TaskFilter, TaskRow};

/// The longest `get_agent_task` long-poll.
pub const MAX_WAIT_SECONDS: u64 = 25;

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

impl TaskService {
    /// The task view, read in one trip to the store (the row, its pending interaction, the
    /// plan step it belongs to and its change set's summary) and written straight to JSON
    /// text. Anything the principal may not see is `AGENT_TASK_NOT_FOUND`.
    pub(super) async fn view(
        &self,
        principal: &Principal,
        task_id: &str,
        full: bool,
    ) -> Result<(TaskRow, Box<RawValue>), ToolError> {
        if !crate::ids::looks_like(task_id, "agt_") {
            return Err(ToolError::task_not_found());
        }
        let id = task_id.to_owned();
        let parts = self.inner.store.call(move |s| s.task_parts(&id)).await?;
        let Some(parts) = parts.filter(|p| principal.sees_everything() || p.task.principal == principal.name) else {
            return Err(ToolError::task_not_found());
        };
        let view = task_view::render(&parts, full, self.inner.clock.now_ms());
        Ok((parts.task, view))
    }

    /// `get_agent_task`; with `wait_seconds > 0` a long-poll that returns early only when the
    /// task ends or its pending request appears, goes or changes (see `long_poll.rs`). With
    /// `full`, a pending request that was clipped for display carries its whole text
    /// (`full_text`).
    pub async fn get(
        &self,
        principal: &Principal,
        task_id: &str,
        wait_seconds: u64,
        full: bool,
    ) -> Result<Box<RawValue>, ToolError> {
        if wait_seconds == 0 {
            return Ok(self.view(principal, task_id, full).await?.1);
        }
        self.long_poll(principal, task_id, wait_seconds, full).await
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
    ) -> Result<Box<RawValue>, ToolError> {
        let row = self.inner.visible_task(principal, task_id).await?;
        let id = task_id.to_owned();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let status = row.status.as_str();
        let page = self
            .inner
            .store
            .call(move |s| {
                let events = s.read_events(&id, after, limit)?;
                Ok(event_page::render(&id, row.correlation_id.as_deref(), status, after, &events))
            })
            .await?;
        Ok(page)
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

    /// `admin_list_tasks`: every principal's tasks, newest first, with a cursor; with the usage
    /// totals over the whole filter when `with_totals` (they read every task it matches).
    pub async fn list(&self, filter: TaskFilter, limit: u32, with_totals: bool) -> Result<Value, ToolError> {
        let now = self.inner.clock.now_ms();
        let (rows, totals) = self
            .inner
            .store
            .call(move |s| {
                let rows = s.list_tasks(&filter, limit)?;
                let mut totals = Vec::new();
                if with_totals {
                    for by in [TotalsBy::All, TotalsBy::Principal, TotalsBy::Workdir] {
                        totals.push(s.usage_totals(&filter, by, now)?);
                    }
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
        let totals = match totals.as_slice() {
            [all, principals, workdirs] => Some(json!({
                "overall": all.first().map(|(_, t)| accounting::totals_json(t)).unwrap_or_default(),
                "by_principal": group(principals, "principal"),
                "by_workdir": group(workdirs, "workdir"),
            })),
            _ => None,
        };
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
                        None if t.profile == "review" => task_view::read_only_changes(),
                        None => Value::Null,
                    },
                })
            })
            .collect();
        let mut page = json!({ "tasks": tasks, "next_before_task_id": next });
        if let Some(totals) = totals {
            page["totals"] = totals;
        }
        Ok(page)
    }
}
