//! Plans and their steps: atomic creation (a plan and all its steps, or nothing), checked plan
//! transitions, the step intents the plan runner writes before and after each task, and
//! listings with plans awaiting a human first.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Store, StoreError, is_unique_violation};
use crate::model::{PlanStatus, StepStatus, TaskStatus};

/// A stored plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRow {
    /// `pln_…`.
    pub plan_id: String,
    /// The owner (its step tasks belong to it).
    pub principal: String,
    /// Provenance: the principal that filed it.
    pub created_by: String,
    /// The surface it was filed through (`mcp`, `cli`, `board`).
    pub created_surface: String,
    /// Short title.
    pub title: String,
    /// Runtime name.
    pub runtime: String,
    /// Workdir alias.
    pub workdir_alias: String,
    /// Normalized relative cwd.
    pub relative_cwd: String,
    /// Profile wire name.
    pub profile: String,
    /// Current state.
    pub status: PlanStatus,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last change.
    pub updated_at: i64,
    /// Unix ms of the human approval (NULL until then).
    pub approved_at: Option<i64>,
    /// Who approved it.
    pub approved_by: Option<String>,
    /// Unix ms of the rejection.
    pub rejected_at: Option<i64>,
    /// Who rejected it.
    pub rejected_by: Option<String>,
    /// Why it was rejected.
    pub rejection_reason: Option<String>,
    /// Unix ms of the terminal transition.
    pub completed_at: Option<i64>,
    /// Why the plan waits (`WORKDIR_BUSY`, …), while `waiting`.
    pub wait_code: Option<String>,
    /// Why the plan stopped.
    pub error_code: Option<String>,
    /// A redacted explanation.
    pub error_message: Option<String>,
    /// Opaque caller metadata.
    pub correlation_id: Option<String>,
    /// The caller's retry key.
    pub idempotency_key: Option<String>,
    /// SHA-256 of the canonical plan (with a key only).
    pub request_fingerprint: Option<String>,
    /// `in_place` or `worktree` as the caller asked (`None`: the workdir's setting).
    pub isolation: Option<String>,
}

/// A stored step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// 1-based position.
    pub position: i64,
    /// Short title.
    pub title: String,
    /// The step's objective (the task's prompt).
    pub prompt: String,
    /// Where the step is.
    pub status: StepStatus,
    /// The step's task, once submitted.
    pub task_id: Option<String>,
    /// Unix ms when its task was submitted.
    pub started_at: Option<i64>,
    /// Unix ms when its task ended.
    pub completed_at: Option<i64>,
    /// Its task's state, once submitted (read with the step: whether it waits for a person).
    pub task_status: Option<TaskStatus>,
}

/// A plan to create.
#[derive(Debug, Clone)]
pub struct NewPlan {
    /// Fresh id.
    pub plan_id: String,
    /// Owner.
    pub principal: String,
    /// Provenance.
    pub created_by: String,
    /// Surface.
    pub created_surface: String,
    /// Title.
    pub title: String,
    /// Runtime.
    pub runtime: String,
    /// Workdir alias.
    pub workdir_alias: String,
    /// Normalized relative cwd.
    pub relative_cwd: String,
    /// Profile.
    pub profile: String,
    /// Unix ms.
    pub created_at: i64,
    /// Approved at creation (the local operator's own plans).
    pub approved_by: Option<String>,
    /// Caller metadata.
    pub correlation_id: Option<String>,
    /// Retry key.
    pub idempotency_key: Option<String>,
    /// Fingerprint (with the key).
    pub request_fingerprint: Option<String>,
    /// `in_place` or `worktree` as the caller asked (`None`: the workdir's setting).
    pub isolation: Option<String>,
}

#[cfg(test)]
impl NewPlan {
    /// A test's plan `id` ("Refactor the parser", fake runtime, workdir `repo`, by `panel` on
    /// `mcp`), approved at creation by `approved_by` if given.
    pub(crate) fn for_test(id: &str, approved_by: Option<&str>) -> NewPlan {
        NewPlan {
            plan_id: id.into(),
            principal: "panel".into(),
            created_by: "panel".into(),
            created_surface: "mcp".into(),
            title: "Refactor the parser".into(),
            runtime: "fake".into(),
            workdir_alias: "repo".into(),
            relative_cwd: String::new(),
            profile: "workspace-write".into(),
            created_at: 1_000,
            approved_by: approved_by.map(str::to_owned),
            correlation_id: None,
            idempotency_key: None,
            request_fingerprint: None,
            isolation: None,
        }
    }
}

/// A step to create.
#[derive(Debug, Clone)]
pub struct NewStep {
    /// Title.
    pub title: String,
    /// Objective.
    pub prompt: String,
}

/// What [`Store::insert_plan`] did.
#[derive(Debug)]
pub enum PlanInserted {
    /// A new plan was created.
    Created(PlanRow),
    /// The principal already has a plan with this idempotency key.
    Existing(PlanRow),
}

/// Fields written with a plan transition.
#[derive(Debug, Default, Clone)]
pub struct PlanFields {
    /// Who approved (with `approved`).
    pub approved_by: Option<String>,
    /// Who rejected (with `rejected`).
    pub rejected_by: Option<String>,
    /// Why (with `rejected`).
    pub rejection_reason: Option<String>,
    /// Why the plan waits (with `waiting`).
    pub wait_code: Option<String>,
    /// Why the plan stopped.
    pub error_code: Option<String>,
    /// Explanation.
    pub error_message: Option<String>,
}

/// Filters for [`Store::list_plans`].
#[derive(Debug, Clone, Default)]
pub struct PlanFilter {
    /// Only this owner.
    pub principal: Option<String>,
    /// Only this state.
    pub status: Option<PlanStatus>,
}

const COLUMNS: &str = "plan_id, principal, created_by, created_surface, title, runtime, workdir_alias, \
    relative_cwd, profile, status, created_at, updated_at, approved_at, approved_by, rejected_at, rejected_by, \
    rejection_reason, completed_at, wait_code, error_code, error_message, correlation_id, idempotency_key, \
    request_fingerprint, isolation";

const STEP_COLUMNS: &str = "s.position, s.title, s.prompt, s.status, s.task_id, s.started_at, s.completed_at, t.status";

const LIVE_STATES: &str = "('pending_approval','approved','running','waiting')";

fn plan_from_row(row: &Row<'_>) -> rusqlite::Result<PlanRow> {
    Ok(PlanRow {
        plan_id: row.get(0)?,
        principal: row.get(1)?,
        created_by: row.get(2)?,
        created_surface: row.get(3)?,
        title: row.get(4)?,
        runtime: row.get(5)?,
        workdir_alias: row.get(6)?,
        relative_cwd: row.get(7)?,
        profile: row.get(8)?,
        status: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
        approved_at: row.get(12)?,
        approved_by: row.get(13)?,
        rejected_at: row.get(14)?,
        rejected_by: row.get(15)?,
        rejection_reason: row.get(16)?,
        completed_at: row.get(17)?,
        wait_code: row.get(18)?,
        error_code: row.get(19)?,
        error_message: row.get(20)?,
        correlation_id: row.get(21)?,
        idempotency_key: row.get(22)?,
        request_fingerprint: row.get(23)?,
        isolation: row.get(24)?,
    })
}

fn step_from_row(row: &Row<'_>) -> rusqlite::Result<StepRow> {
    Ok(StepRow {
        position: row.get(0)?,
        title: row.get(1)?,
        prompt: row.get(2)?,
        status: row.get(3)?,
        task_id: row.get(4)?,
        started_at: row.get(5)?,
        completed_at: row.get(6)?,
        task_status: row.get(7)?,
    })
}

fn get_plan_in(conn: &Connection, plan_id: &str) -> Result<Option<PlanRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM plans WHERE plan_id = ?1");
    Ok(conn.prepare_cached(&sql)?.query_row([plan_id], plan_from_row).optional()?)
}

fn find_by_key_in(conn: &Connection, principal: &str, key: &str) -> Result<Option<PlanRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM plans WHERE principal = ?1 AND idempotency_key = ?2");
    Ok(conn.prepare_cached(&sql)?.query_row([principal, key], plan_from_row).optional()?)
}

fn steps_in(conn: &Connection, plan_id: &str) -> Result<Vec<StepRow>, StoreError> {
    let sql = format!(
        "SELECT {STEP_COLUMNS} FROM plan_steps s LEFT JOIN tasks t ON t.task_id = s.task_id \
         WHERE s.plan_id = ?1 ORDER BY s.position"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([plan_id], step_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn step_status_in(conn: &Connection, plan_id: &str, position: i64) -> Result<StepStatus, StoreError> {
    conn.prepare_cached("SELECT status FROM plan_steps WHERE plan_id = ?1 AND position = ?2")?
        .query_row(params![plan_id, position], |r| r.get(0))
        .optional()?
        .ok_or(StoreError::PlanNotFound)
}

/// The plan and step position a task belongs to, if any.
pub(super) fn plan_of_task_in(c: &Connection, task_id: &str) -> Result<Option<(String, i64)>, StoreError> {
    Ok(c.prepare_cached("SELECT plan_id, position FROM plan_steps WHERE task_id = ?1")?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

impl Store {
    /// Creates a plan and every step in one transaction: all of it, or (on any failure,
    /// including a step the schema refuses) nothing. A retained idempotency key of the same
    /// principal returns that plan instead.
    pub fn insert_plan(&self, new: &NewPlan, steps: &[NewStep]) -> Result<PlanInserted, StoreError> {
        self.write(|tx| {
            if let Some(key) = &new.idempotency_key
                && let Some(existing) = find_by_key_in(tx, &new.principal, key)?
            {
                return Ok(PlanInserted::Existing(existing));
            }
            let (status, approved_at) = match &new.approved_by {
                Some(_) => (PlanStatus::Approved, Some(new.created_at)),
                None => (PlanStatus::PendingApproval, None),
            };
            tx.execute(
                "INSERT INTO plans (plan_id, principal, created_by, created_surface, title, runtime, workdir_alias, \
                 relative_cwd, profile, status, created_at, updated_at, approved_at, approved_by, correlation_id, \
                 idempotency_key, request_fingerprint, isolation) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                params![
                    new.plan_id,
                    new.principal,
                    new.created_by,
                    new.created_surface,
                    new.title,
                    new.runtime,
                    new.workdir_alias,
                    new.relative_cwd,
                    new.profile,
                    status,
                    new.created_at,
                    approved_at,
                    new.approved_by,
                    new.correlation_id,
                    new.idempotency_key,
                    new.request_fingerprint,
                    new.isolation,
                ],
            )
            .map_err(|e| if is_unique_violation(&e) { StoreError::IdempotencyConflict } else { e.into() })?;
            let mut stmt = tx.prepare_cached(
                "INSERT INTO plan_steps (plan_id, position, title, prompt, status) VALUES (?1, ?2, ?3, ?4, 'pending')",
            )?;
            for (i, step) in steps.iter().enumerate() {
                stmt.execute(params![new.plan_id, (i + 1) as i64, step.title, step.prompt])?;
            }
            let row = get_plan_in(tx, &new.plan_id)?.ok_or(StoreError::PlanNotFound)?;
            if row.status == PlanStatus::PendingApproval {
                super::facts::record_in(self, tx, &super::facts::plan_awaits_in(tx, &new.plan_id)?, new.created_at)?;
            }
            Ok(PlanInserted::Created(row))
        })
    }

    /// Reads one plan.
    pub fn get_plan(&self, plan_id: &str) -> Result<Option<PlanRow>, StoreError> {
        self.read(|c| get_plan_in(c, plan_id))
    }

    /// Reads one plan with its steps, in one snapshot.
    pub fn get_plan_with_steps(&self, plan_id: &str) -> Result<Option<(PlanRow, Vec<StepRow>)>, StoreError> {
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let Some(plan) = get_plan_in(&tx, plan_id)? else { return Ok(None) };
            let steps = steps_in(&tx, plan_id)?;
            Ok(Some((plan, steps)))
        })
    }

    /// Looks a principal's plan idempotency key up.
    pub fn find_plan_by_key(&self, principal: &str, key: &str) -> Result<Option<PlanRow>, StoreError> {
        self.read(|c| find_by_key_in(c, principal, key))
    }

    /// Lists plans: those awaiting approval first (oldest first, so none is forgotten), then
    /// the others newest first.
    pub fn list_plans(&self, filter: &PlanFilter, limit: u32) -> Result<Vec<PlanRow>, StoreError> {
        self.read(|c| {
            let mut sql = format!("SELECT {COLUMNS} FROM plans WHERE 1=1");
            let mut args: Vec<rusqlite::types::Value> = Vec::new();
            if let Some(p) = &filter.principal {
                args.push(p.clone().into());
                sql.push_str(&format!(" AND principal = ?{}", args.len()));
            }
            if let Some(s) = filter.status {
                args.push(s.as_str().to_owned().into());
                sql.push_str(&format!(" AND status = ?{}", args.len()));
            }
            sql.push_str(&format!(
                " ORDER BY status = 'pending_approval' DESC, \
                 CASE WHEN status = 'pending_approval' THEN rowid ELSE -rowid END LIMIT {limit}"
            ));
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(args), plan_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Plans a runner must drive (approved, running or waiting), oldest first.
    pub fn runnable_plans(&self) -> Result<Vec<PlanRow>, StoreError> {
        self.read(|c| {
            let sql =
                format!("SELECT {COLUMNS} FROM plans WHERE status IN ('approved','running','waiting') ORDER BY rowid");
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map([], plan_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// How many plans wait for a human.
    pub fn count_pending_plans(&self) -> Result<i64, StoreError> {
        self.read(|c| {
            Ok(c.prepare_cached("SELECT COUNT(*) FROM plans WHERE status = 'pending_approval'")?
                .query_row([], |r| r.get(0))?)
        })
    }

    /// The plan and step a task belongs to, if any.
    pub fn plan_of_task(&self, task_id: &str) -> Result<Option<(String, i64)>, StoreError> {
        self.read(|c| plan_of_task_in(c, task_id))
    }

    /// Moves a plan to `to` if the plan matrix allows it, in one transaction. `approved`
    /// stamps `approved_at`, `rejected` the rejection, a terminal state `completed_at`; leaving
    /// `waiting` clears the wait code.
    pub fn plan_transition(
        &self,
        plan_id: &str,
        to: PlanStatus,
        fields: PlanFields,
        now: i64,
    ) -> Result<PlanRow, StoreError> {
        self.write(|tx| {
            let current = get_plan_in(tx, plan_id)?.ok_or(StoreError::PlanNotFound)?;
            if !current.status.can_become(to) {
                return Err(StoreError::InvalidPlanTransition { from: current.status, to });
            }
            tx.execute(
                "UPDATE plans SET status = ?2, updated_at = ?3, \
                 approved_at = CASE WHEN ?2 = 'approved' THEN ?3 ELSE approved_at END, \
                 approved_by = COALESCE(?4, approved_by), \
                 rejected_at = CASE WHEN ?2 = 'rejected' THEN ?3 ELSE rejected_at END, \
                 rejected_by = COALESCE(?5, rejected_by), rejection_reason = COALESCE(?6, rejection_reason), \
                 completed_at = CASE WHEN ?7 THEN ?3 ELSE completed_at END, \
                 wait_code = ?8, \
                 error_code = COALESCE(?9, error_code), error_message = COALESCE(?10, error_message) \
                 WHERE plan_id = ?1",
                params![
                    plan_id,
                    to,
                    now,
                    fields.approved_by,
                    fields.rejected_by,
                    fields.rejection_reason,
                    to.is_terminal(),
                    fields.wait_code,
                    fields.error_code,
                    fields.error_message,
                ],
            )?;
            get_plan_in(tx, plan_id)?.ok_or(StoreError::PlanNotFound)
        })
    }

    /// Records the intent to start a step: `pending → starting`, only while the plan is
    /// approved, running or waiting (never for an unapproved or finished plan).
    pub fn start_step(&self, plan_id: &str, position: i64, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let plan = get_plan_in(tx, plan_id)?.ok_or(StoreError::PlanNotFound)?;
            if !matches!(plan.status, PlanStatus::Approved | PlanStatus::Running | PlanStatus::Waiting) {
                return Err(StoreError::InvalidPlanTransition { from: plan.status, to: PlanStatus::Running });
            }
            let actual = step_status_in(tx, plan_id, position)?;
            if actual != StepStatus::Pending {
                return Err(StoreError::StepState { position, expected: StepStatus::Pending, actual });
            }
            tx.execute(
                "UPDATE plan_steps SET status = 'starting', started_at = ?3 WHERE plan_id = ?1 AND position = ?2",
                params![plan_id, position, now],
            )?;
            Ok(())
        })
    }

    /// Withdraws a step's intent when its task was not created: `starting → pending`.
    pub fn unstart_step(&self, plan_id: &str, position: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE plan_steps SET status = 'pending', started_at = NULL \
                 WHERE plan_id = ?1 AND position = ?2 AND status = 'starting'",
                params![plan_id, position],
            )?;
            Ok(())
        })
    }

    /// Links a step to the task created for it (`starting → running`); the plan is `running`
    /// from then on (a waiting plan stops waiting).
    pub fn link_step(&self, plan_id: &str, position: i64, task_id: &str, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let actual = step_status_in(tx, plan_id, position)?;
            if actual != StepStatus::Starting {
                return Err(StoreError::StepState { position, expected: StepStatus::Starting, actual });
            }
            tx.execute(
                "UPDATE plan_steps SET status = 'running', task_id = ?3 WHERE plan_id = ?1 AND position = ?2",
                params![plan_id, position, task_id],
            )?;
            tx.execute(
                "UPDATE plans SET status = 'running', wait_code = NULL, updated_at = ?2 \
                 WHERE plan_id = ?1 AND status IN ('approved','waiting','running')",
                params![plan_id, now],
            )?;
            Ok(())
        })
    }

    /// Records how a step ended (succeeded, failed, cancelled or interrupted).
    pub fn finish_step(&self, plan_id: &str, position: i64, status: StepStatus, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE plan_steps SET status = ?3, completed_at = COALESCE(completed_at, ?4) \
                 WHERE plan_id = ?1 AND position = ?2 AND status IN ('starting','running')",
                params![plan_id, position, status, now],
            )?;
            tx.execute("UPDATE plans SET updated_at = ?2 WHERE plan_id = ?1", params![plan_id, now])?;
            Ok(())
        })
    }

    /// Deletes terminal plans completed before `cutoff`, with their steps (their tasks follow
    /// the tasks' own retention); returns how many went.
    pub fn delete_expired_plans(&self, cutoff: i64) -> Result<usize, StoreError> {
        let due: i64 = self.read(|c| {
            Ok(c.prepare_cached("SELECT COUNT(*) FROM plans WHERE completed_at IS NOT NULL AND completed_at < ?1")?
                .query_row([cutoff], |r| r.get(0))?)
        })?;
        if due == 0 {
            return Ok(0);
        }
        self.write(|tx| {
            Ok(tx.execute(
                &format!("DELETE FROM plans WHERE completed_at IS NOT NULL AND completed_at < ?1 AND status NOT IN {LIVE_STATES}"),
                [cutoff],
            )?)
        })
    }
}

#[cfg(test)]
#[path = "plans_tests.rs"]
mod tests;
