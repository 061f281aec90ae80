//! Hand-back of a worktree task's branch: merge it into the branch the user's checkout is on,
//! or discard it. Both are repeat-safe (a second call answers what the first did), change
//! nothing when they refuse, and record what they did on the task (an event) and on its
//! worktree row (the whole branch: every task that worked on it).

use serde_json::{Value, json};

use super::{Inner, TaskService};
use crate::error::{ToolError, code};
use crate::model::Principal;
use crate::provider::handback::{Discarded, Merged, Refusal, Strategy};
use crate::store::events::NewEvent;
use crate::store::worktrees::{WorktreeRow, WorktreeState};

/// The refusal of a call on a branch that holds no work to hand back.
fn not_open(row: &WorktreeRow, what: &str) -> ToolError {
    let why = match row.state {
        WorktreeState::Preparing | WorktreeState::Active => "its task is still running".to_owned(),
        WorktreeState::Empty => "its task changed nothing, so it has no branch".to_owned(),
        WorktreeState::Merged => "it was merged".to_owned(),
        WorktreeState::Discarded => "it was discarded".to_owned(),
        WorktreeState::Failed => "its worktree was never made".to_owned(),
        WorktreeState::Kept => format!(
            "its worktree is kept ({}); discard it, or clear the recovery guard and let the bridge finish it",
            row.reason.as_deref().unwrap_or("its stop is not proven")
        ),
        WorktreeState::Open => "it is open".to_owned(),
    };
    ToolError::new(code::AGENT_BRANCH_NOT_OPEN, format!("branch {} cannot be {what}: {why}", row.branch))
}

/// The caller's answer for a refusal.
fn refused(row: &WorktreeRow, refusal: Refusal) -> ToolError {
    let list = |files: &[String]| {
        let mut shown = files.join(", ");
        if shown.len() > 800 {
            shown.truncate(shown.floor_char_boundary(800));
            shown.push('…');
        }
        shown
    };
    match refusal {
        Refusal::BranchGone => ToolError::new(
            code::BRANCH_MOVED,
            format!("branch {} no longer exists in the repository (deleted outside the bridge)", row.branch),
        ),
        Refusal::TaskBranchMoved(tip) => ToolError::new(
            code::BRANCH_MOVED,
            format!(
                "branch {} is at {tip}, not where its task left it ({}): it was changed outside the bridge",
                row.branch,
                row.head_commit.as_deref().unwrap_or("unknown")
            ),
        ),
        Refusal::NoBranch => ToolError::new(
            code::BRANCH_MOVED,
            "the workdir's checkout is on no branch (a detached HEAD): nothing to merge into",
        ),
        Refusal::NotFastForward => ToolError::new(
            code::BRANCH_MOVED,
            format!(
                "the checkout's branch moved since branch {} started: it cannot be fast-forwarded; merge with strategy merge or squash",
                row.branch
            ),
        ),
        Refusal::Conflict(files) => ToolError::new(
            code::MERGE_CONFLICT,
            format!("branch {} and the checkout's branch change the same lines in: {}", row.branch, list(&files)),
        ),
        Refusal::Dirty(files) => ToolError::new(
            code::WORKDIR_DIRTY,
            format!(
                "the checkout has uncommitted changes or untracked files the merge would write: {}; commit or stash them first",
                list(&files)
            ),
        ),
        Refusal::Raced => ToolError::new(
            code::BRANCH_MOVED,
            "the checkout changed while the merge was being made: nothing was changed",
        ),
    }
}

impl Inner {
    /// The task's worktree row, refused unless it is the newest of its branch (a branch that a
    /// continuation or a later plan step went on with is handed back through that task).
    async fn branch_of(&self, principal: &Principal, task_id: &str) -> Result<WorktreeRow, ToolError> {
        self.visible_task(principal, task_id).await?;
        let id = task_id.to_owned();
        let Some(row) = self.store.call(move |s| s.get_worktree(&id)).await? else {
            return Err(ToolError::new(
                code::AGENT_BRANCH_NOT_OPEN,
                "the task worked in place: its changes are in the workdir already, on no branch of its own",
            ));
        };
        let (alias, branch) = (row.workdir_alias.clone(), row.branch.clone());
        let newest = self.store.call(move |s| s.branch_rows(&alias, &branch)).await?;
        match newest.first() {
            Some(latest) if latest.task_id != row.task_id => Err(ToolError::new(
                code::BRANCH_MOVED,
                format!("task {} went on with branch {}: hand it back through that task", latest.task_id, row.branch),
            )),
            _ => Ok(row),
        }
    }

    /// Records a hand-back on the branch's rows and as an event of the task.
    async fn record_hand_back(&self, row: &WorktreeRow, state: WorktreeState, merged: Option<String>, event: NewEvent) {
        let (alias, branch, id, now) =
            (row.workdir_alias.clone(), row.branch.clone(), row.task_id.clone(), self.clock.now_ms());
        let stored = self
            .store
            .call(move |s| {
                s.hand_back(&alias, &branch, state, merged.as_deref(), now)?;
                s.append_event(&id, &event, None, now).map(|_| ())
            })
            .await;
        if let Err(e) = stored {
            tracing::warn!(cause = %e, "cannot record a branch's hand-back");
        }
        self.changes.notify(&row.task_id);
    }
}

impl TaskService {
    /// Merges a worktree task's branch into the branch the workdir's checkout is on.
    pub async fn merge(&self, principal: &Principal, task_id: &str, strategy: Strategy) -> Result<Value, ToolError> {
        let inner = &self.inner;
        let _serial = inner.hand_back_lock.lock().await;
        let row = inner.branch_of(principal, task_id).await?;
        let answer = |commit: &Option<String>, already: bool| {
            json!({
                "task_id": task_id, "branch": row.branch, "state": "merged", "strategy": strategy.as_str(),
                "merged_commit": commit, "already_merged": already,
            })
        };
        match row.state {
            WorktreeState::Merged => return Ok(answer(&row.merged_commit, true)),
            WorktreeState::Open => {}
            _ => return Err(not_open(&row, "merged")),
        }
        let workdir = inner.workdir(principal, &row.workdir_alias)?.clone();
        if workdir.read_only {
            return Err(ToolError::new(
                code::AGENT_PROFILE_NOT_ALLOWED,
                format!("workdir {:?} is read-only: nothing is merged into it", workdir.alias),
            ));
        }
        // The merge writes the user's checkout: it is an in-place writer for that moment, under
        // the same rules as one (a guard cleared on proof, else the workdir stays closed).
        inner.reconcile_guard(principal, &workdir.alias).await?;
        let lease = inner.take_lease(principal, &workdir, None).await?;
        let Some(head) = row.head_commit.clone() else { return Err(not_open(&row, "merged")) };
        let message = match strategy {
            Strategy::Squash => {
                format!("{} (squashed)\n\nagent-bridge task {task_id}, merged by {}", row.branch, principal.name)
            }
            _ => format!("Merge branch '{}'\n\nagent-bridge task {task_id}, merged by {}", row.branch, principal.name),
        };
        let done =
            inner.providers.worktrees().merge(task_id, &workdir.path, (&row.branch, &head), strategy, &message).await;
        drop(lease);
        let merged = match done {
            Ok(merged) => merged,
            Err(e) => return Err(ToolError::new(code::WORKTREE_FAILED, format!("the merge failed: {}", e.message))),
        };
        let (commit, already, into) = match merged {
            Merged::Done { commit, into } => (commit, false, Some(into)),
            Merged::Already { commit } => (commit, true, None),
            Merged::Refused(refusal) => return Err(refused(&row, refusal)),
        };
        let event = NewEvent::new(
            "worktree.merged",
            json!({ "branch": row.branch, "strategy": strategy.as_str(), "merged_commit": commit, "into": into,
                    "already_merged": already, "by": principal.name }),
        );
        inner.record_hand_back(&row, WorktreeState::Merged, Some(commit.clone()), event).await;
        let mut out = answer(&Some(commit), already);
        out["into"] = json!(into);
        Ok(out)
    }

    /// Deletes a worktree task's branch (and a kept worktree, once its stop no longer holds
    /// the branch closed).
    pub async fn discard(&self, principal: &Principal, task_id: &str) -> Result<Value, ToolError> {
        let inner = &self.inner;
        let _serial = inner.hand_back_lock.lock().await;
        let first = inner.branch_of(principal, task_id).await?;
        // A guard on the branch clears on proof (finishing a kept worktree) or refuses.
        inner
            .reconcile_guard(principal, &crate::store::guards::guard_key(&first.workdir_alias, Some(&first.branch)))
            .await?;
        let row = inner.branch_of(principal, task_id).await?;
        let answer = |already: bool| json!({ "task_id": task_id, "branch": row.branch, "state": "discarded", "already_discarded": already });
        match row.state {
            WorktreeState::Discarded => return Ok(answer(true)),
            WorktreeState::Open | WorktreeState::Kept | WorktreeState::Empty => {}
            _ => return Err(not_open(&row, "discarded")),
        }
        let workdir = inner.workdir(principal, &row.workdir_alias)?.clone();
        let worktrees = inner.providers.worktrees();
        if row.state == WorktreeState::Kept {
            worktrees.remove(task_id, &workdir.path).await.map_err(|e| {
                ToolError::new(code::WORKTREE_FAILED, format!("the kept worktree could not be removed: {}", e.message))
            })?;
        }
        if row.state != WorktreeState::Empty {
            let head = if row.state == WorktreeState::Kept { None } else { row.head_commit.as_deref() };
            match worktrees.discard(task_id, &workdir.path, &row.branch, head).await {
                Ok(Discarded::Done) => {}
                Ok(Discarded::Refused(refusal)) => return Err(refused(&row, refusal)),
                Err(e) => {
                    return Err(ToolError::new(code::WORKTREE_FAILED, format!("the discard failed: {}", e.message)));
                }
            }
        }
        let event = NewEvent::new("worktree.discarded", json!({ "branch": row.branch, "by": principal.name }));
        inner.record_hand_back(&row, WorktreeState::Discarded, None, event).await;
        Ok(answer(false))
    }
}
