//! The neutral facts the notifier reports: one typed row per change (a task ended, a request
//! opened, a plan waits for approval, a workdir stays closed), written in the transaction of the
//! change itself, so a committed change always has its fact and a rolled-back one never does.
//!
//! A fact says what happened and holds what its wording needs (ids, alias, runtime, status, a
//! request's payload), no prompt and no host path; it names no target, carries no wording and no
//! link. The notifier reads the pending facts, decides who gets what, and hands back the messages
//! of each; [`Store::route_facts`] writes them and deletes the fact in one transaction. This
//! module reads what it records with its own queries and imports no sibling but `outbox.rs`:
//! the modules that record facts (`tasks.rs`, `interactions.rs`, `plans.rs`) depend on it, never
//! the other way round.

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::outbox::NewMessage;
use super::{Store, StoreError};
use crate::model::{InteractionKind, PlanStatus, TaskStatus, WorktreeState};

/// What kind of change a fact reports: the `kind` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactKind {
    /// [`Fact::TaskEnded`].
    TaskEnded,
    /// [`Fact::RequestOpened`].
    RequestOpened,
    /// [`Fact::PlanAwaitsApproval`].
    PlanAwaitsApproval,
    /// [`Fact::GuardKept`].
    GuardKept,
}

crate::model::wire_names!(FactKind, "notification fact kind" {
    TaskEnded => "task.ended",
    RequestOpened => "request.opened",
    PlanAwaitsApproval => "plan.awaits_approval",
    GuardKept => "guard.kept",
});

/// One change, as recorded for the notifier.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// A task reached a terminal state.
    TaskEnded(TaskEnded),
    /// A task asks a human: an approval or a question.
    RequestOpened(RequestOpened),
    /// A plan was created to wait for a human's approval.
    PlanAwaitsApproval(PlanAwaitsApproval),
    /// A workdir stays closed: its last writer's stop is not proven.
    GuardKept(GuardKept),
}

/// What every fact about a task says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFacts {
    /// The task.
    pub task_id: String,
    /// The plan it is a step of, if any.
    pub plan_id: Option<String>,
    /// Its step's position in that plan.
    pub plan_step: Option<i64>,
    /// The workdir's alias.
    pub workdir: String,
    /// The runtime.
    pub runtime: String,
    /// The profile.
    pub profile: String,
    /// Its state when the change was made.
    pub status: TaskStatus,
    /// Its error code, if it has one.
    pub error_code: Option<String>,
}

/// A worktree task's branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Branch {
    /// The branch's name.
    pub name: String,
    /// What became of it.
    pub state: WorktreeState,
}

/// [`Fact::TaskEnded`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEnded {
    /// The task, in its terminal state.
    pub task: TaskFacts,
    /// Its branch, for a worktree task.
    pub branch: Option<Branch>,
}

/// [`Fact::RequestOpened`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestOpened {
    /// The task that waits.
    pub task: TaskFacts,
    /// The request.
    pub request_id: String,
    /// Approval or question.
    pub kind: InteractionKind,
    /// Unix ms after which it cannot be answered.
    pub expires_at: i64,
    /// The request's payload as stored (already redacted), when it is JSON.
    pub payload: Option<Value>,
}

/// [`Fact::PlanAwaitsApproval`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanAwaitsApproval {
    /// The plan.
    pub plan_id: String,
    /// The workdir's alias.
    pub workdir: String,
    /// The runtime.
    pub runtime: String,
    /// The profile.
    pub profile: String,
    /// Its state.
    pub status: PlanStatus,
    /// How many steps it has.
    pub steps: i64,
    /// Its title (the caller's words).
    pub title: String,
    /// Who filed it.
    pub created_by: String,
}

/// [`Fact::GuardKept`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardKept {
    /// The workdir's alias.
    pub workdir: String,
    /// The task the guard names.
    pub task_id: String,
    /// That task, unless retention removed it.
    pub task: Option<TaskFacts>,
}

impl Fact {
    /// Its kind.
    pub fn kind(&self) -> FactKind {
        match self {
            Fact::TaskEnded(_) => FactKind::TaskEnded,
            Fact::RequestOpened(_) => FactKind::RequestOpened,
            Fact::PlanAwaitsApproval(_) => FactKind::PlanAwaitsApproval,
            Fact::GuardKept(_) => FactKind::GuardKept,
        }
    }

    /// The task it is about, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Fact::TaskEnded(f) => Some(&f.task.task_id),
            Fact::RequestOpened(f) => Some(&f.task.task_id),
            Fact::PlanAwaitsApproval(_) => None,
            Fact::GuardKept(f) => Some(&f.task_id),
        }
    }

    /// The plan it is about, if any (a task's plan for a task's fact).
    pub fn plan_id(&self) -> Option<&str> {
        match self {
            Fact::TaskEnded(f) => f.task.plan_id.as_deref(),
            Fact::RequestOpened(f) => f.task.plan_id.as_deref(),
            Fact::PlanAwaitsApproval(f) => Some(&f.plan_id),
            Fact::GuardKept(f) => f.task.as_ref().and_then(|t| t.plan_id.as_deref()),
        }
    }

    /// The request it is about, if any.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Fact::RequestOpened(f) => Some(&f.request_id),
            Fact::TaskEnded(_) | Fact::PlanAwaitsApproval(_) | Fact::GuardKept(_) => None,
        }
    }

    fn data_json(&self) -> serde_json::Result<String> {
        match self {
            Fact::TaskEnded(f) => serde_json::to_string(f),
            Fact::RequestOpened(f) => serde_json::to_string(f),
            Fact::PlanAwaitsApproval(f) => serde_json::to_string(f),
            Fact::GuardKept(f) => serde_json::to_string(f),
        }
    }

    fn from_json(kind: FactKind, data: &str) -> serde_json::Result<Fact> {
        Ok(match kind {
            FactKind::TaskEnded => Fact::TaskEnded(serde_json::from_str(data)?),
            FactKind::RequestOpened => Fact::RequestOpened(serde_json::from_str(data)?),
            FactKind::PlanAwaitsApproval => Fact::PlanAwaitsApproval(serde_json::from_str(data)?),
            FactKind::GuardKept => Fact::GuardKept(serde_json::from_str(data)?),
        })
    }
}

/// A recorded fact the notifier has not routed yet.
#[derive(Debug)]
pub struct StoredFact {
    /// Row id (the order facts happened in).
    pub fact_id: i64,
    /// Unix ms of the change.
    pub created_at: i64,
    /// The fact, or why its row cannot be read (an unknown kind, unreadable data); such a row
    /// is kept as it is.
    pub fact: Result<Fact, StoreError>,
}

/// Records `fact` inside the change's transaction and wakes the delivery worker after the commit.
pub(super) fn record_in(store: &Store, tx: &Connection, fact: &Fact, now: i64) -> Result<(), StoreError> {
    let data = fact.data_json().map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    tx.prepare_cached(
        "INSERT INTO notify_facts (kind, task_id, plan_id, request_id, data_json, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![fact.kind(), fact.task_id(), fact.plan_id(), fact.request_id(), data, now])?;
    store.outbox_written();
    Ok(())
}

/// What a task's facts say of it, read inside the transaction (`None`: no such task).
fn task_facts_in(tx: &Connection, task_id: &str) -> Result<Option<TaskFacts>, StoreError> {
    Ok(tx
        .prepare_cached(
            "SELECT t.task_id, s.plan_id, s.position, t.workdir_alias, t.runtime, t.profile, t.status, t.error_code \
             FROM tasks t LEFT JOIN plan_steps s ON s.task_id = t.task_id WHERE t.task_id = ?1",
        )?
        .query_row([task_id], |r| {
            Ok(TaskFacts {
                task_id: r.get(0)?,
                plan_id: r.get(1)?,
                plan_step: r.get(2)?,
                workdir: r.get(3)?,
                runtime: r.get(4)?,
                profile: r.get(5)?,
                status: r.get(6)?,
                error_code: r.get(7)?,
            })
        })
        .optional()?)
}

fn task_in(tx: &Connection, task_id: &str) -> Result<TaskFacts, StoreError> {
    task_facts_in(tx, task_id)?.ok_or(StoreError::TaskNotFound)
}

/// The fact of a task's terminal transition, read inside that transaction.
pub(super) fn task_ended_in(tx: &Connection, task_id: &str) -> Result<Fact, StoreError> {
    let branch = tx
        .prepare_cached("SELECT branch, state FROM worktrees WHERE task_id = ?1")?
        .query_row([task_id], |r| Ok(Branch { name: r.get(0)?, state: r.get(1)? }))
        .optional()?;
    Ok(Fact::TaskEnded(TaskEnded { task: task_in(tx, task_id)?, branch }))
}

/// The fact of an opened request, read inside the transaction that opened it.
pub(super) fn request_opened_in(
    tx: &Connection,
    task_id: &str,
    request_id: &str,
    kind: InteractionKind,
    expires_at: i64,
    payload_json: &str,
) -> Result<Fact, StoreError> {
    Ok(Fact::RequestOpened(RequestOpened {
        task: task_in(tx, task_id)?,
        request_id: request_id.to_owned(),
        kind,
        expires_at,
        payload: serde_json::from_str(payload_json).ok(),
    }))
}

/// The fact of a plan created to wait for approval, read inside the transaction that made it.
pub(super) fn plan_awaits_in(tx: &Connection, plan_id: &str) -> Result<Fact, StoreError> {
    let plan = tx
        .prepare_cached(
            "SELECT plan_id, workdir_alias, runtime, profile, status, title, created_by, \
             (SELECT COUNT(*) FROM plan_steps s WHERE s.plan_id = p.plan_id) FROM plans p WHERE plan_id = ?1",
        )?
        .query_row([plan_id], |r| {
            Ok(PlanAwaitsApproval {
                plan_id: r.get(0)?,
                workdir: r.get(1)?,
                runtime: r.get(2)?,
                profile: r.get(3)?,
                status: r.get(4)?,
                title: r.get(5)?,
                created_by: r.get(6)?,
                steps: r.get(7)?,
            })
        })
        .optional()?
        .ok_or(StoreError::PlanNotFound)?;
    Ok(Fact::PlanAwaitsApproval(plan))
}

fn stored_from(r: &Row<'_>) -> rusqlite::Result<StoredFact> {
    let fact_id = r.get(0)?;
    let created_at = r.get(3)?;
    let fact = r.get::<_, FactKind>(1).and_then(|kind| {
        let data: String = r.get(2)?;
        Fact::from_json(kind, &data).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, Type::Text, format!("unreadable {kind} fact: {e}").into())
        })
    });
    Ok(StoredFact { fact_id, created_at, fact: fact.map_err(StoreError::from) })
}

impl Store {
    /// Records that a workdir stays closed because `task_id`'s stop is unproven, while the
    /// workdir's guard still names the task (a kept guard is the absence of a change, so this
    /// is its own write).
    pub fn record_guard_kept(&self, workdir_alias: &str, task_id: &str, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let guarded: Option<String> = tx
                .prepare_cached("SELECT task_id FROM recovery_guards WHERE workdir_alias = ?1")?
                .query_row([workdir_alias], |r| r.get(0))
                .optional()?;
            if guarded.as_deref() != Some(task_id) {
                return Ok(());
            }
            let fact = Fact::GuardKept(GuardKept {
                workdir: workdir_alias.to_owned(),
                task_id: task_id.to_owned(),
                task: task_facts_in(tx, task_id)?,
            });
            record_in(self, tx, &fact, now)
        })
    }

    /// Up to `limit` facts not routed yet, oldest first, leaving out the `skip` rows (those
    /// the notifier found unreadable).
    pub fn pending_facts(&self, skip: &[i64], limit: u32) -> Result<Vec<StoredFact>, StoreError> {
        // Integers only, so the list can be written into the statement.
        let skip = skip.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT fact_id, kind, data_json, created_at FROM notify_facts \
                 WHERE fact_id NOT IN ({skip}) ORDER BY fact_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit], stored_from)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Replaces each routed fact by its messages, all in one transaction: the messages (and
    /// their action links) are written and the fact deleted together. A fact already gone
    /// (routed before) is skipped whole; a message whose dedupe key exists is skipped. Returns
    /// how many messages were written.
    pub fn route_facts(&self, routed: &[(i64, Vec<NewMessage>)]) -> Result<usize, StoreError> {
        if routed.is_empty() {
            return Ok(0);
        }
        self.write(|tx| {
            let mut written = 0;
            for (fact_id, messages) in routed {
                if tx.prepare_cached("DELETE FROM notify_facts WHERE fact_id = ?1")?.execute([fact_id])? == 0 {
                    continue;
                }
                for message in messages {
                    written += usize::from(super::outbox::insert_in(tx, message)?);
                }
            }
            Ok(written)
        })
    }
}
