//! The operator's view of recovery: each workdir's writer lease and recovery guard, what a
//! guard's proof of stop still lacks, and the audited, forced clearing of a guard by an
//! operator who has checked by hand.

use serde_json::{Value, json};

use super::recovery::guard_proof;
use super::{Inner, TaskService};
use crate::clock::rfc3339;
use crate::error::{ToolError, code};
use crate::model::TaskStatus;
use crate::store::events::NewEvent;
use crate::store::guards::GuardRow;
use crate::store::tasks::TransitionFields;

impl TaskService {
    /// `admin_workdir_status`: every workdir's lease and guard, the sandboxes whose task this
    /// bridge is not running, and what its start stopped of the previous bridge's.
    pub async fn workdir_status(&self) -> Result<Value, ToolError> {
        let inner = &self.inner;
        let holders: Vec<(String, String)> = inner
            .active
            .lock()
            .map(|a| a.iter().filter_map(|(id, t)| t.writes.clone().map(|w| (w, id.clone()))).collect())
            .unwrap_or_default();
        let guards = inner.store.call(|s| s.list_guards()).await?;
        let mut out = Vec::new();
        for w in &inner.config.workdirs {
            let holder = holders.iter().find(|(alias, _)| alias == &w.alias).map(|(_, id)| id.clone());
            let guard = match guards.iter().find(|g| g.workdir_alias == w.alias) {
                Some(g) => Some(guard_view(inner, g).await?),
                None => None,
            };
            // Worktree tasks' guards: one per branch, each its own writer.
            let mut branch_guards = Vec::new();
            for g in guards.iter().filter(|g| g.alias() == w.alias && g.branch().is_some()) {
                let mut view = guard_view(inner, g).await?;
                view["branch"] = json!(g.branch());
                branch_guards.push(view);
            }
            let state = match (&holder, &guard) {
                (Some(_), _) => "busy",
                (None, Some(_)) => "recovery_required",
                (None, None) => "free",
            };
            out.push(json!({
                "alias": w.alias,
                "slot": w.slot,
                "agent_mode": w.agent_mode.as_str(),
                "runtimes": w.runtimes.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                "state": state,
                "lease_holder": holder,
                "guard": guard,
                "isolation": w.isolation.as_str(),
                "branch_guards": branch_guards,
            }));
        }
        let orphaned: Vec<Value> = guards
            .iter()
            .filter(|g| !inner.config.workdirs.iter().any(|w| w.alias == g.alias()))
            .map(|g| json!({ "workdir": g.workdir_alias, "task_id": g.task_id }))
            .collect();
        let branches = inner.store.call(|s| s.agent_branches()).await?;
        Ok(json!({
            "workdirs": out,
            "agent_branches": branches.iter().map(super::task_view::branch_view).collect::<Vec<_>>(),
            "guards_of_unknown_workdirs": orphaned,
            "leftover_sandboxes": self.leftover_sandboxes().await,
            "reconciled_at_start": self.reconciled_at_start(),
        }))
    }

    /// `admin_clear_guard`: removes a workdir's guard without proof, on the operator's word.
    /// Refused while a live task of this bridge writes there; the guard's task, if still
    /// non-terminal, is interrupted. Audited like every call.
    pub async fn clear_guard_forced(&self, alias: &str, operator: &str) -> Result<Value, ToolError> {
        let inner = &self.inner;
        if !inner.config.workdirs.iter().any(|w| w.alias == alias) {
            return Err(ToolError::new(code::WORKDIR_NOT_FOUND, format!("no workdir named {alias:?}")));
        }
        let _serial = inner.submit_lock.lock().await;
        let live = inner.active.lock().map(|a| a.values().any(|t| t.writes.as_deref() == Some(alias))).unwrap_or(false);
        if live {
            return Err(ToolError::new(
                code::WORKDIR_BUSY,
                "a running task of this bridge writes there; cancel it instead",
            ));
        }
        let a = alias.to_owned();
        let Some(guard) = inner.store.call(move |s| s.get_guard(&a)).await? else {
            return Ok(json!({ "workdir": alias, "cleared": false, "detail": "the workdir has no guard" }));
        };
        let g = guard.clone();
        let proof = tokio::task::spawn_blocking(move || guard_proof(&g)).await.unwrap_or(Value::Null);
        let now = inner.clock.now_ms();
        let id = guard.task_id.clone();
        let fields = TransitionFields {
            error_code: Some(code::WORKDIR_RECOVERY_REQUIRED.to_owned()),
            error_message: Some("an operator cleared the workdir's recovery guard".into()),
            event: Some(NewEvent::new("task.interrupted", json!({ "error_code": code::WORKDIR_RECOVERY_REQUIRED }))),
            ..Default::default()
        };
        let _ = inner.store.call(move |s| s.transition(&id, TaskStatus::Interrupted, fields, now)).await;
        let event = NewEvent::new("guard.cleared", json!({ "forced": true, "by": operator, "proof": proof }));
        let (tid, now) = (guard.task_id.clone(), inner.clock.now_ms());
        let _ = inner.store.call(move |s| s.append_event(&tid, &event, None, now)).await;
        let (a, id) = (alias.to_owned(), guard.task_id.clone());
        let cleared = inner.store.call(move |s| s.clear_guard(&a, &id)).await?;
        inner.changes.notify(&guard.task_id);
        tracing::warn!(
            workdir = alias,
            task_id = guard.task_id,
            by = operator,
            "recovery guard cleared by an operator"
        );
        Ok(json!({ "workdir": alias, "task_id": guard.task_id, "cleared": cleared, "proof_at_clearing": proof }))
    }
}

async fn guard_view(inner: &Inner, g: &GuardRow) -> Result<Value, ToolError> {
    let id = g.task_id.clone();
    let task = inner.store.call(move |s| s.get_task(&id)).await?;
    let copy = g.clone();
    let proof = tokio::task::spawn_blocking(move || guard_proof(&copy)).await.unwrap_or(Value::Null);
    // A guard whose task this bridge runs now is the writer's own, not a leftover: its stop
    // is not due yet, so "not proven" says nothing about it.
    let running = inner.active.lock().is_ok_and(|a| a.contains_key(&g.task_id));
    Ok(json!({
        "task_id": g.task_id,
        "running": running,
        "runtime": g.runtime,
        "task_status": task.map(|t| t.status.as_str()),
        "created_at": rfc3339(g.created_at),
        "updated_at": rfc3339(g.updated_at),
        "proof": proof,
    }))
}
