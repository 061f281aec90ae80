//! Task rows: creation under the active-task cap and idempotency index, checked state
//! transitions, listing and retention.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::accounting::ChangesSummary;
use super::events::{NewEvent, insert_event};
use super::interactions::InteractionRow;
use super::{Store, StoreError, is_unique_violation};
use crate::model::{ResultStorage, TaskStatus, Usage};

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    /// `agt_…`.
    pub task_id: String,
    /// The principal that submitted it (its owner).
    pub principal: String,
    /// Runtime name.
    pub runtime: String,
    /// Workdir alias.
    pub workdir_alias: String,
    /// Normalized relative cwd ("" = the workdir root).
    pub relative_cwd: String,
    /// Profile wire name.
    pub profile: String,
    /// Model the caller asked for.
    pub requested_model: Option<String>,
    /// Current state.
    pub status: TaskStatus,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms when the provider was started.
    pub started_at: Option<i64>,
    /// Unix ms of the last change.
    pub updated_at: i64,
    /// Unix ms of the terminal transition.
    pub completed_at: Option<i64>,
    /// Unix ms after which the task is interrupted.
    pub deadline_at: i64,
    /// The task this one continues.
    pub continue_from_task_id: Option<String>,
    /// Opaque caller metadata.
    pub correlation_id: Option<String>,
    /// The caller's retry key.
    pub idempotency_key: Option<String>,
    /// SHA-256 of the canonical submission (NULL for tasks without a key).
    pub request_fingerprint: Option<String>,
    /// The provider's session id (private).
    pub native_session_id: Option<String>,
    /// Inline result, or a preview of a spooled one.
    pub final_response: Option<String>,
    /// Where the result is kept.
    pub result_storage: Option<ResultStorage>,
    /// Full result size in UTF-8 bytes.
    pub result_size_bytes: Option<i64>,
    /// SHA-256 of the full result.
    pub result_sha256: Option<String>,
    /// The immutable manifest (canonical JSON).
    pub manifest_json: String,
    /// Its SHA-256.
    pub manifest_sha256: String,
    /// Why the task failed or was interrupted.
    pub error_code: Option<String>,
    /// A redacted explanation.
    pub error_message: Option<String>,
    /// The pending interaction, while waiting.
    pub pending_request_id: Option<String>,
    /// Events stored for this task.
    pub event_count: i64,
    /// Provider events dropped over the per-task cap.
    pub events_dropped: i64,
    /// The first line of the prompt, shortened (NULL for tasks stored before migration 7).
    pub title: Option<String>,
    /// Token usage and cost, when the runtime reported any.
    pub usage: Option<Usage>,
    /// Milliseconds spent waiting for a human on interactions that are over.
    pub human_wait_ms: i64,
    /// The change set's outline, once recorded (or known not to be).
    pub changes: Option<ChangesBrief>,
    /// A worktree task's worktree state (`None`: the task works in place).
    pub worktree_state: Option<String>,
}

/// The outline of a task's change set, read with its row.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangesBrief {
    /// `recorded` or `not_recorded`.
    pub status: String,
    /// Why it was not recorded.
    pub reason: Option<String>,
    /// Files added, modified, deleted or renamed.
    pub files_changed: i64,
    /// Lines added.
    pub added: i64,
    /// Lines removed.
    pub removed: i64,
    /// The diff was cut at its bound.
    pub truncated: bool,
}

/// Milliseconds waited for a human on a task's interactions that are over (a pending one
/// counts from its creation to its expiry only once the task is over); `tasks` is the outer row.
macro_rules! human_wait_sql {
    () => {
        "(SELECT COALESCE(SUM(MAX(0, MIN(COALESCE(i.resolved_at, tasks.completed_at, i.created_at), \
         i.expires_at) - i.created_at)), 0) FROM interactions i WHERE i.task_id = tasks.task_id)"
    };
}
pub(super) const HUMAN_WAIT_SQL: &str = human_wait_sql!();

const TASK_COLUMNS: &str = concat!(
    "task_id, principal, runtime, workdir_alias, relative_cwd, profile, \
    requested_model, status, created_at, started_at, updated_at, completed_at, deadline_at, \
    continue_from_task_id, correlation_id, idempotency_key, request_fingerprint, native_session_id, \
    final_response, result_storage, result_size_bytes, result_sha256, manifest_json, manifest_sha256, \
    error_code, error_message, pending_request_id, event_count, events_dropped, title, \
    usage_input_tokens, usage_cached_input_tokens, usage_cache_write_input_tokens, usage_output_tokens, \
    usage_reasoning_tokens, usage_cost_usd, usage_model, \
    ",
    human_wait_sql!(),
    ", \
    (SELECT c.status FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT c.reason FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT c.files_changed FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT c.lines_added FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT c.lines_removed FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT c.truncated FROM task_changes c WHERE c.task_id = tasks.task_id), \
    (SELECT w.state FROM worktrees w WHERE w.task_id = tasks.task_id)",
);

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        task_id: row.get(0)?,
        principal: row.get(1)?,
        runtime: row.get(2)?,
        workdir_alias: row.get(3)?,
        relative_cwd: row.get(4)?,
        profile: row.get(5)?,
        requested_model: row.get(6)?,
        status: row.get(7)?,
        created_at: row.get(8)?,
        started_at: row.get(9)?,
        updated_at: row.get(10)?,
        completed_at: row.get(11)?,
        deadline_at: row.get(12)?,
        continue_from_task_id: row.get(13)?,
        correlation_id: row.get(14)?,
        idempotency_key: row.get(15)?,
        request_fingerprint: row.get(16)?,
        native_session_id: row.get(17)?,
        final_response: row.get(18)?,
        result_storage: row.get(19)?,
        result_size_bytes: row.get(20)?,
        result_sha256: row.get(21)?,
        manifest_json: row.get(22)?,
        manifest_sha256: row.get(23)?,
        error_code: row.get(24)?,
        error_message: row.get(25)?,
        pending_request_id: row.get(26)?,
        event_count: row.get(27)?,
        events_dropped: row.get(28)?,
        title: row.get(29)?,
        usage: usage_from_row(row, 30)?,
        human_wait_ms: row.get(37)?,
        changes: match row.get::<_, Option<String>>(38)? {
            None => None,
            Some(status) => Some(ChangesBrief {
                status,
                reason: row.get(39)?,
                files_changed: row.get(40)?,
                added: row.get(41)?,
                removed: row.get(42)?,
                truncated: row.get(43)?,
            }),
        },
        worktree_state: row.get(44)?,
    })
}

/// The usage columns from `at` on (input, cached, cache write, output, reasoning, cost,
/// model); all NULL: nothing was reported.
fn usage_from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<Usage>> {
    let Some(input) = row.get::<_, Option<i64>>(at)? else { return Ok(None) };
    let count =
        |i: usize| -> rusqlite::Result<u64> { Ok(row.get::<_, Option<i64>>(at + i)?.unwrap_or(0).max(0) as u64) };
    Ok(Some(Usage {
        input_tokens: input.max(0) as u64,
        cached_input_tokens: count(1)?,
        cache_write_input_tokens: count(2)?,
        output_tokens: count(3)?,
        reasoning_tokens: row.get::<_, Option<i64>>(at + 4)?.map(|r| r.max(0) as u64),
        cost_usd: row.get(at + 5)?,
        model: row.get(at + 6)?,
    }))
}

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Fresh id.
    pub task_id: String,
    /// Owner.
    pub principal: String,
    /// Runtime name.
    pub runtime: String,
    /// Workdir alias.
    pub workdir_alias: String,
    /// Normalized relative cwd.
    pub relative_cwd: String,
    /// Profile wire name.
    pub profile: String,
    /// Requested model.
    pub requested_model: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub deadline_at: i64,
    /// Continuation source.
    pub continue_from_task_id: Option<String>,
    /// Caller metadata.
    pub correlation_id: Option<String>,
    /// Retry key.
    pub idempotency_key: Option<String>,
    /// Fingerprint of the submission (set with the key).
    pub request_fingerprint: Option<String>,
    /// Canonical manifest.
    pub manifest_json: String,
    /// Its SHA-256.
    pub manifest_sha256: String,
    /// The first line of the prompt, shortened and redacted.
    pub title: Option<String>,
}

/// The recovery guard to publish with a writer task (and, for a worktree task, its row).
#[derive(Debug, Clone, Default)]
pub struct NewGuard {
    /// What it protects: the workdir's alias, or for a worktree task its branch's guard key
    /// ([`super::guards::guard_key`]).
    pub workdir_alias: String,
    /// A worktree task's row.
    pub worktree: Option<super::worktrees::NewWorktree>,
}

/// What [`Store::insert_task`] did.
#[derive(Debug)]
pub enum Inserted {
    /// A new task was created.
    Created(TaskRow),
    /// The principal already has a retained task with this idempotency key.
    Existing(TaskRow),
}

/// Filters for [`Store::list_tasks`].
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Only this owner.
    pub principal: Option<String>,
    /// Only these states.
    pub status: Option<TaskStatus>,
    /// Only this workdir.
    pub workdir_alias: Option<String>,
    /// Only this runtime.
    pub runtime: Option<String>,
    /// Only tasks created before this task (cursor; newest first).
    pub before_task_id: Option<String>,
    /// Only tasks created at or after this instant (Unix ms).
    pub created_since: Option<i64>,
    /// Only tasks created before this instant (Unix ms).
    pub created_until: Option<i64>,
}

/// Extra fields written with a transition.
#[derive(Debug, Default)]
pub struct TransitionFields {
    /// Error code (failed/interrupted).
    pub error_code: Option<String>,
    /// Error message (already redacted).
    pub error_message: Option<String>,
    /// The result, on success.
    pub result: Option<ResultFields>,
    /// The event recorded in the same transaction.
    pub event: Option<NewEvent>,
}

/// A task's result as stored.
#[derive(Debug, Clone)]
pub struct ResultFields {
    /// Inline text or preview.
    pub final_response: String,
    /// Where it is kept.
    pub storage: ResultStorage,
    /// Full size in bytes.
    pub size_bytes: i64,
    /// SHA-256 of the full result.
    pub sha256: String,
}

/// The `AND …` clauses of a filter and their arguments (`?1`…); the cursor only `with_cursor`.
pub(super) fn filter_sql(filter: &TaskFilter, with_cursor: bool) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = String::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    let mut add = |clause: &str, v: rusqlite::types::Value| {
        args.push(v);
        sql.push_str(&format!(" AND {clause} ?{}", args.len()));
    };
    if let Some(p) = &filter.principal {
        add("principal =", p.clone().into());
    }
    if let Some(s) = filter.status {
        add("status =", s.as_str().to_owned().into());
    }
    if let Some(w) = &filter.workdir_alias {
        add("workdir_alias =", w.clone().into());
    }
    if let Some(r) = &filter.runtime {
        add("runtime =", r.clone().into());
    }
    if let Some(since) = filter.created_since {
        add("created_at >=", since.into());
    }
    if let Some(until) = filter.created_until {
        add("created_at <", until.into());
    }
    if with_cursor && let Some(before) = &filter.before_task_id {
        args.push(before.clone().into());
        sql.push_str(&format!(" AND rowid < (SELECT rowid FROM tasks WHERE task_id = ?{})", args.len()));
    }
    (sql, args)
}

pub(super) fn get_task_in(conn: &Connection, task_id: &str) -> Result<Option<TaskRow>, StoreError> {
    Ok(conn.prepare_cached(get_task_sql())?.query_row([task_id], task_from_row).optional()?)
}

/// The statement of [`get_task_in`] (a test checks that SQLite never prepares it again).
pub(super) fn get_task_sql() -> &'static str {
    static SQL: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?1"));
    &SQL
}

fn find_by_key_in(conn: &Connection, principal: &str, key: &str) -> Result<Option<TaskRow>, StoreError> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE principal = ?1 AND idempotency_key = ?2");
    Ok(conn.prepare_cached(&sql)?.query_row([principal, key], task_from_row).optional()?)
}

/// The terminal tasks completed before `?1`. A task ends after it was created, so each of them
/// was also created before `?1`: that bound lets SQLite walk `tasks_by_created` over the tasks
/// older than the cutoff (none, most passes) instead of reading every row of the table — a
/// retention pass runs at every submit, end and cancel. (Should the wall clock step back
/// while a task runs, so that it ends "before" its creation, it goes that much later.)
pub(super) const EXPIRED: &str = "created_at < ?1 AND completed_at IS NOT NULL AND completed_at < ?1";

const ACTIVE_STATES: &str = "('queued','starting','running','waiting_for_approval','waiting_for_question')";

/// What a task view is made of, read on one connection: the task, its pending request, the
/// plan step it is, and its change set's summary.
#[derive(Debug, Clone)]
pub struct TaskParts {
    /// The task.
    pub task: TaskRow,
    /// Its pending request.
    pub pending: Option<InteractionRow>,
    /// The plan and step position it belongs to.
    pub plan: Option<(String, i64)>,
    /// Its change set's summary.
    pub changes: Option<ChangesSummary>,
    /// Its worktree, for a worktree task.
    pub worktree: Option<super::worktrees::WorktreeRow>,
}

impl Store {
    /// Reads one task.
    pub fn get_task(&self, task_id: &str) -> Result<Option<TaskRow>, StoreError> {
        self.read(|c| get_task_in(c, task_id))
    }

    /// Reads one task with what its view shows ([`TaskParts`]), from one snapshot.
    pub fn task_parts(&self, task_id: &str) -> Result<Option<TaskParts>, StoreError> {
        self.read_snapshot(|c| {
            let Some(task) = get_task_in(c, task_id)? else { return Ok(None) };
            let pending = match &task.pending_request_id {
                Some(request) => super::interactions::get_in(c, request)?,
                None => None,
            };
            let plan = super::plans::plan_of_task_in(c, task_id)?;
            let changes = match task.changes {
                Some(_) => super::accounting::changes_summary_in(c, task_id)?,
                None => None,
            };
            let worktree = match task.worktree_state {
                Some(_) => super::worktrees::get_in(c, task_id)?,
                None => None,
            };
            Ok(Some(TaskParts { task, pending, plan, changes, worktree }))
        })
    }

    /// Looks a principal's idempotency key up.
    pub fn find_by_idempotency_key(&self, principal: &str, key: &str) -> Result<Option<TaskRow>, StoreError> {
        self.read(|c| find_by_key_in(c, principal, key))
    }

    /// Creates a task in one transaction: re-checks the idempotency key, counts active tasks
    /// against `max_active`, refuses when a guard already names the workdir, inserts the row,
    /// publishes the guard and records `task.submitted`.
    pub fn insert_task(
        &self,
        new: &NewTask,
        max_active: u32,
        guard: Option<&NewGuard>,
        event: &NewEvent,
    ) -> Result<Inserted, StoreError> {
        self.write(|tx| {
            if let Some(key) = &new.idempotency_key
                && let Some(existing) = find_by_key_in(tx, &new.principal, key)?
            {
                return Ok(Inserted::Existing(existing));
            }
            let active: i64 =
                tx.query_row(&format!("SELECT COUNT(*) FROM tasks WHERE status IN {ACTIVE_STATES}"), [], |r| r.get(0))?;
            if active >= i64::from(max_active) {
                return Err(StoreError::TaskLimitReached { limit: max_active });
            }
            if let Some(guard) = guard {
                let holder: Option<String> = tx
                    .query_row(
                        "SELECT task_id FROM recovery_guards WHERE workdir_alias = ?1",
                        [&guard.workdir_alias],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(task_id) = holder {
                    return Err(StoreError::GuardPresent { task_id });
                }
            }
            tx.execute(
                "INSERT INTO tasks (task_id, principal, runtime, workdir_alias, relative_cwd, profile, \
                 requested_model, status, created_at, updated_at, deadline_at, continue_from_task_id, \
                 correlation_id, idempotency_key, request_fingerprint, manifest_json, manifest_sha256, title) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    new.task_id,
                    new.principal,
                    new.runtime,
                    new.workdir_alias,
                    new.relative_cwd,
                    new.profile,
                    new.requested_model,
                    new.created_at,
                    new.deadline_at,
                    new.continue_from_task_id,
                    new.correlation_id,
                    new.idempotency_key,
                    new.request_fingerprint,
                    new.manifest_json,
                    new.manifest_sha256,
                    new.title,
                ],
            )
            .map_err(|e| if is_unique_violation(&e) { StoreError::IdempotencyConflict } else { e.into() })?;
            if let Some(guard) = guard {
                tx.execute(
                    "INSERT INTO recovery_guards (workdir_alias, task_id, runtime, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?4)",
                    params![guard.workdir_alias, new.task_id, new.runtime, new.created_at],
                )?;
                if let Some(worktree) = &guard.worktree {
                    super::worktrees::insert_in(tx, &new.task_id, &new.workdir_alias, worktree, new.created_at)?;
                }
            }
            insert_event(tx, &new.task_id, event, new.created_at)?;
            let row = get_task_in(tx, &new.task_id)?.ok_or(StoreError::TaskNotFound)?;
            Ok(Inserted::Created(row))
        })
    }

    /// Moves a task to `to` if the transition matrix allows it from its current state, in one
    /// transaction. A terminal transition stamps `completed_at`, clears the pending request and
    /// marks it stale.
    pub fn transition(
        &self,
        task_id: &str,
        to: TaskStatus,
        fields: TransitionFields,
        now: i64,
    ) -> Result<TaskRow, StoreError> {
        self.write(|tx| {
            let row = transition_in(tx, task_id, to, fields, now)?;
            if row.status.is_terminal() {
                super::facts::record_in(self, tx, &super::facts::task_ended_in(tx, task_id)?, now)?;
            }
            Ok(row)
        })
    }

    /// Records the provider's native session id.
    pub fn set_native_session(&self, task_id: &str, session_id: &str, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE tasks SET native_session_id = ?2, updated_at = ?3 WHERE task_id = ?1",
                params![task_id, session_id, now],
            )?;
            Ok(())
        })
    }

    /// Lists tasks newest first.
    pub fn list_tasks(&self, filter: &TaskFilter, limit: u32) -> Result<Vec<TaskRow>, StoreError> {
        self.read(|c| {
            let (clauses, args) = filter_sql(filter, true);
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1=1{clauses} ORDER BY rowid DESC LIMIT {limit}");
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(args), task_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Every non-terminal task (startup reconciliation).
    pub fn active_tasks(&self) -> Result<Vec<TaskRow>, StoreError> {
        self.read(|c| {
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE status IN {ACTIVE_STATES}");
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map([], task_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Deletes every terminal task completed before `cutoff` that no recovery guard, no
    /// running plan and no unmerged branch names, with its events and interactions; returns the deleted ids (their spool files are the
    /// caller's to remove).
    pub fn delete_expired(&self, cutoff: i64) -> Result<Vec<(String, Option<ResultStorage>)>, StoreError> {
        // Most passes find nothing: check on a reader first so they cost no write transaction.
        let due: i64 = self.read(|c| {
            Ok(c.prepare_cached(&format!("SELECT COUNT(*) FROM tasks WHERE {EXPIRED}"))?
                .query_row([cutoff], |r| r.get(0))?)
        })?;
        if due == 0 {
            return Ok(Vec::new());
        }
        self.write(|tx| {
            // A step of a plan that still runs stays: the next step continues its session.
            let mut stmt = tx.prepare(&format!(
                "SELECT task_id, result_storage FROM tasks WHERE {EXPIRED} \
                 AND task_id NOT IN (SELECT task_id FROM recovery_guards) \
                 AND task_id NOT IN (SELECT task_id FROM worktrees WHERE state IN ('preparing','active','open','kept')) \
                 AND task_id NOT IN (SELECT s.task_id FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id \
                     WHERE s.task_id IS NOT NULL AND p.status IN ('approved','running','waiting'))"
            ))?;
            let doomed = stmt
                .query_map([cutoff], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<ResultStorage>>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            for (task_id, _) in &doomed {
                tx.execute("DELETE FROM tasks WHERE task_id = ?1", [task_id])?;
                tx.execute("DELETE FROM action_links WHERE task_id = ?1", [task_id])?;
            }
            Ok(doomed)
        })
    }
}

pub(super) fn transition_in(
    tx: &Connection,
    task_id: &str,
    to: TaskStatus,
    fields: TransitionFields,
    now: i64,
) -> Result<TaskRow, StoreError> {
    let current = get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)?;
    if !current.status.can_become(to) {
        return Err(StoreError::InvalidTransition { from: current.status, to });
    }
    let terminal = to.is_terminal();
    tx.execute(
        "UPDATE tasks SET status = ?2, updated_at = ?3, \
         started_at = CASE WHEN ?2 = 'starting' THEN ?3 ELSE started_at END, \
         completed_at = CASE WHEN ?4 THEN ?3 ELSE completed_at END, \
         pending_request_id = CASE WHEN ?4 THEN NULL ELSE pending_request_id END, \
         error_code = COALESCE(?5, error_code), error_message = COALESCE(?6, error_message) \
         WHERE task_id = ?1",
        params![task_id, to, now, terminal, fields.error_code, fields.error_message],
    )?;
    if terminal {
        tx.execute(
            "UPDATE interactions SET status = 'stale', resolved_at = ?2 WHERE task_id = ?1 AND status = 'pending'",
            params![task_id, now],
        )?;
    }
    if let Some(result) = &fields.result {
        tx.execute(
            "UPDATE tasks SET final_response = ?2, result_storage = ?3, result_size_bytes = ?4, \
             result_sha256 = ?5 WHERE task_id = ?1",
            params![task_id, result.final_response, result.storage, result.size_bytes, result.sha256],
        )?;
    }
    if let Some(event) = &fields.event {
        insert_event(tx, task_id, event, now)?;
    }
    get_task_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)
}
