//! Worktree tasks: the choice of isolation at submit, and the two moments the runner hands a
//! worktree task's repository to [`crate::provider::worktree`] — making its worktree before
//! the agent starts, and putting its work on its branch once the agent has stopped with proof.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Inner;
use super::submit::SubmitRequest;
use crate::config::Workdir;
use crate::error::{ToolError, code};
use crate::model::{Isolation, Profile};
use crate::provider::worktree::{Created, Start};
use crate::store::events::NewEvent;
use crate::store::worktrees::{BranchSize, NewWorktree, WorktreeRow, WorktreeStarted, WorktreeState};

/// Where a submitted writer task works, decided at submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placement {
    /// The branch.
    pub branch: String,
    /// The task that made the branch (leases and guards are the branch's).
    pub origin_task_id: String,
    /// A new branch from a named ref, or the branch as a previous task left it.
    pub start: Start,
    /// The ref the caller named (`HEAD` when none), for the view.
    pub base_ref: String,
}

impl Placement {
    /// The row written with the task.
    pub fn new_row(&self) -> NewWorktree {
        NewWorktree {
            branch: self.branch.clone(),
            origin_task_id: self.origin_task_id.clone(),
            base_ref: self.base_ref.clone(),
        }
    }
}

/// What a runner carries for a worktree task.
#[derive(Debug)]
pub(super) struct WorktreeJob {
    pub placement: Placement,
    /// The checkout (the workdir's root).
    pub checkout: PathBuf,
    /// The relative path the task starts in.
    pub path: String,
    /// Set once the worktree exists.
    pub created: Option<Created>,
}

/// The longest `base_ref` accepted.
const MAX_REF: usize = 256;

/// Checks a caller's `base_ref`: a name git would read as a revision, nothing that could be
/// read as an option or a path outside the repository's names.
fn check_base_ref(base_ref: &str) -> Result<(), ToolError> {
    let ok = !base_ref.is_empty()
        && base_ref.len() <= MAX_REF
        && !base_ref.starts_with('-')
        && !base_ref.contains("..")
        && base_ref.chars().all(|c| c.is_ascii_alphanumeric() || "/._-~^@{}".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ToolError::invalid(
            "base_ref",
            "must be a branch, tag or commit (letters, digits and / . _ - ~ ^ @ { }, no leading -, no ..)",
        ))
    }
}

/// The branch of a new worktree task: the prefix and the first 12 hex digits of its id.
pub(super) fn branch_name(prefix: &str, task_id: &str) -> String {
    let short: String = task_id.trim_start_matches("agt_").chars().take(12).collect();
    format!("{prefix}{short}")
}

/// Decides where a writer task works: `None` for in place, else its placement. `prior` is
/// the worktree row of the task it continues, if that one worked in a worktree.
pub(super) fn decide(
    inner: &Inner,
    workdir: &Workdir,
    req: &SubmitRequest,
    task_id: &str,
    prior: Option<&WorktreeRow>,
) -> Result<Option<Placement>, ToolError> {
    if let Some(base_ref) = &req.base_ref {
        check_base_ref(base_ref)?;
    }
    if req.profile == Profile::Review {
        if req.isolation == Some(Isolation::Worktree) || req.base_ref.is_some() {
            return Err(ToolError::invalid(
                "isolation",
                "a review task reads the workdir in place: worktree and base_ref need the workspace-write profile",
            ));
        }
        return Ok(None);
    }
    if let Some(prior) = prior {
        // A continuation goes on where its task left the branch.
        if req.isolation == Some(Isolation::InPlace) || req.base_ref.is_some() {
            return Err(ToolError::invalid(
                "isolation",
                "a continuation of a worktree task continues on its branch: leave isolation and base_ref out",
            ));
        }
        let not_resumable = |why: String| ToolError::new(code::AGENT_SESSION_NOT_RESUMABLE, why);
        let start = match (prior.state, &prior.base_commit) {
            (WorktreeState::Open, Some(base)) => Start::Existing { base_commit: base.clone() },
            // It changed nothing: its branch went; it comes back from the same commit.
            (WorktreeState::Empty, Some(base)) => Start::New { base_ref: base.clone() },
            (state, _) => {
                return Err(not_resumable(format!(
                    "the branch {} of the task to continue is {}: there is nothing to continue on",
                    prior.branch,
                    state.as_str()
                )));
            }
        };
        return Ok(Some(Placement {
            branch: prior.branch.clone(),
            origin_task_id: prior.origin_task_id.clone(),
            start,
            base_ref: prior.base_ref.clone(),
        }));
    }
    if req.isolation.unwrap_or(workdir.isolation) == Isolation::InPlace {
        if req.base_ref.is_some() {
            return Err(ToolError::invalid("base_ref", "only a worktree task starts from a base_ref"));
        }
        return Ok(None);
    }
    let base_ref = req.base_ref.clone().unwrap_or_else(|| "HEAD".to_owned());
    Ok(Some(Placement {
        branch: branch_name(&inner.config.branch_prefix, task_id),
        origin_task_id: task_id.to_owned(),
        start: Start::New { base_ref: base_ref.clone() },
        base_ref,
    }))
}

/// Refuses a worktree task on a workdir that is not the top of a git work tree.
pub(super) async fn check_repository(workdir: &Workdir) -> Result<(), ToolError> {
    let root = workdir.path.clone();
    let found =
        tokio::task::spawn_blocking(move || crate::provider::worktree::repo_of(&root).is_some()).await.unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(ToolError::new(
            code::WORKDIR_NOT_A_GIT_REPOSITORY,
            format!("workdir {:?} is not the top of a git work tree: isolation worktree needs one", workdir.alias),
        ))
    }
}

impl super::TaskService {
    /// Checks a plan's isolation against its workdir and profile before it is filed: a review
    /// plan reads in place, and a worktree plan needs a git work tree.
    pub async fn check_isolation(
        &self,
        workdir: &Workdir,
        profile: Profile,
        isolation: Option<Isolation>,
    ) -> Result<(), ToolError> {
        let worktree = isolation.unwrap_or(workdir.isolation) == Isolation::Worktree;
        if profile == Profile::Review {
            if isolation == Some(Isolation::Worktree) {
                return Err(ToolError::invalid(
                    "isolation",
                    "a review plan reads the workdir in place: worktree needs the workspace-write profile",
                ));
            }
            return Ok(());
        }
        if worktree { check_repository(workdir).await } else { Ok(()) }
    }
}

/// Records that a task's worktree was never made, and why.
async fn mark_failed(inner: &Arc<Inner>, task_id: &str, reason: String) {
    let (id, now) = (task_id.to_owned(), inner.clock.now_ms());
    let from = [WorktreeState::Preparing];
    let stored = inner
        .store
        .call(move |s| s.set_worktree_state(&id, &from, WorktreeState::Failed, None, Some(&reason), None, now))
        .await;
    if let Err(e) = stored {
        tracing::warn!(cause = %e, "cannot record that the task's worktree was never made");
    }
}

/// Makes the task's worktree and records it; the error is the task's failure message.
pub(super) async fn create(inner: &Arc<Inner>, task_id: &str, wt: &mut WorktreeJob) -> Result<(), String> {
    let p = &wt.placement;
    let made = inner.providers.worktrees().create(task_id, &wt.checkout, &p.branch, &p.start).await;
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            mark_failed(inner, task_id, e.message.clone()).await;
            return Err(format!("the task's worktree could not be made: {}", e.message));
        }
    };
    let started = WorktreeStarted {
        base_commit: made.base_commit.clone(),
        start_commit: made.start_commit.clone(),
        base_dirty: made.base_dirty,
    };
    let (id, now) = (task_id.to_owned(), inner.clock.now_ms());
    let event = NewEvent::new(
        "worktree.created",
        json!({
            "branch": p.branch,
            "base_commit": made.base_commit,
            "start_commit": made.start_commit,
            "base_dirty": made.base_dirty,
            // `.worktreeinclude`'s ignored files copied in, and the submodules' initialisation.
            "included": (made.included != Default::default()).then(|| json!({
                "files": made.included.files,
                "bytes": made.included.bytes,
                "skipped": made.included.skipped,
                "cut": made.included.cut,
                "failed": made.included.failed,
            })),
            "submodules": match &made.submodules {
                None => Value::Null,
                Some(Ok(())) => json!({ "initialised": true }),
                Some(Err(why)) => json!({ "initialised": false, "reason": why }),
            },
        }),
    );
    let stored = inner
        .store
        .call(move |s| {
            s.worktree_started(&id, &started, now)?;
            s.append_event(&id, &event, None, now).map(|_| ())
        })
        .await;
    if let Err(e) = stored {
        tracing::warn!(cause = %e, "cannot record the task's worktree");
    }
    wt.created = Some(made);
    Ok(())
}

/// What became of a worktree once its task's agent stopped.
struct Settled {
    state: WorktreeState,
    head: Option<String>,
    reason: Option<String>,
    size: Option<BranchSize>,
}

impl Settled {
    fn kept_or_failed(state: WorktreeState, reason: String) -> Settled {
        Settled { state, head: None, reason: Some(reason), size: None }
    }
}

/// Puts what the agent left in `task_id`'s worktree on `branch` (which it found at `start`,
/// made from `base`) and removes the worktree; or keeps the worktree and says why.
async fn put_on_branch(
    inner: &Arc<Inner>,
    task_id: &str,
    checkout: &std::path::Path,
    branch: &str,
    (base, start): (&str, &str),
    message: &str,
) -> Settled {
    let worktrees = inner.providers.worktrees();
    let settled = match worktrees.finish(task_id, checkout, branch, (base, start), message).await {
        Ok(done) => Settled {
            state: if done.deleted { WorktreeState::Empty } else { WorktreeState::Open },
            head: Some(done.head),
            reason: None,
            size: Some(done.size),
        },
        Err(e) => {
            let why = format!("its work could not be put on its branch: {}; the worktree is kept", e.message);
            return Settled::kept_or_failed(WorktreeState::Kept, why);
        }
    };
    if let Err(e) = worktrees.remove(task_id, checkout).await {
        tracing::warn!(reason = %e.message, "cannot remove a finished task's worktree");
    }
    settled
}

/// Stores what became of `task_id`'s worktree (if its row is in one of `from`) with an event
/// `event_type` naming `branch`.
async fn record(inner: &Arc<Inner>, task_id: &str, from: &[WorktreeState], branch: &str, event_type: &str, s: Settled) {
    let event = NewEvent::new(
        event_type,
        json!({ "branch": branch, "state": s.state.as_str(), "head_commit": s.head, "reason": s.reason }),
    );
    let (id, now, from) = (task_id.to_owned(), inner.clock.now_ms(), from.to_vec());
    let stored = inner
        .store
        .call(move |st| {
            st.set_worktree_state(&id, &from, s.state, s.head.as_deref(), s.reason.as_deref(), s.size, now)?;
            st.append_event(&id, &event, None, now).map(|_| ())
        })
        .await;
    if let Err(e) = stored {
        tracing::warn!(cause = %e, "cannot record how the task's worktree ended");
    }
    inner.changes.notify(task_id);
}

/// Once the agent has stopped: puts its work on the branch and removes the worktree, or keeps
/// the worktree and says why. `proven` says whether the agent's stop is proven (if not, nothing
/// is committed: it may still be writing).
pub(super) async fn finish(inner: &Arc<Inner>, task_id: &str, wt: &WorktreeJob, proven: bool) {
    let Some(made) = &wt.created else {
        // The task ended before its worktree was made (or it could not be): nothing is left.
        mark_failed(inner, task_id, "the task ended before its worktree was made".to_owned()).await;
        return;
    };
    let branch = &wt.placement.branch;
    let settled = if proven {
        let message = format!("agent-bridge: task {task_id}");
        put_on_branch(inner, task_id, &wt.checkout, branch, (&made.base_commit, &made.start_commit), &message).await
    } else {
        let why = "the agent's stop is not proven: its worktree is kept as it is".to_owned();
        Settled::kept_or_failed(WorktreeState::Kept, why)
    };
    record(inner, task_id, &[WorktreeState::Active], branch, "worktree.finished", settled).await;
}

/// A worktree its runner could not finish — the bridge died under it, or its stop was proven
/// only later — once no guard holds its branch any more: what the agent left goes on the
/// branch as the runner would have put it, and the worktree goes. A worktree that was never
/// recorded as made is removed and its row marked failed.
pub(super) async fn recover(inner: &Arc<Inner>, task_id: &str) {
    let id = task_id.to_owned();
    let Ok(Some(row)) = inner.store.call(move |s| s.get_worktree(&id)).await else { return };
    let from = [WorktreeState::Preparing, WorktreeState::Active, WorktreeState::Kept];
    if !from.contains(&row.state) {
        return;
    }
    let Some(workdir) = inner.config.workdirs.iter().find(|w| w.alias == row.workdir_alias) else {
        tracing::warn!(task_id, "the workdir of a worktree to recover is no longer configured; it stays");
        return;
    };
    let worktrees = inner.providers.worktrees();
    let settled = match (&row.base_commit, &row.start_commit, worktrees.tree_exists(task_id).await) {
        (Some(base), Some(start), true) => {
            let message = format!("agent-bridge: task {task_id} (recovered)");
            put_on_branch(inner, task_id, &workdir.path, &row.branch, (base, start), &message).await
        }
        _ => {
            if let Err(e) = worktrees.remove(task_id, &workdir.path).await {
                tracing::warn!(reason = %e.message, "cannot remove a worktree that was never made whole");
            }
            let why = "the bridge stopped before the task's worktree was made".to_owned();
            Settled::kept_or_failed(WorktreeState::Failed, why)
        }
    };
    tracing::info!(task_id, state = settled.state.as_str(), "recovered a worktree");
    record(inner, task_id, &from, &row.branch, "worktree.recovered", settled).await;
}

/// At start, once the guards are settled: every worktree whose task no guard holds is
/// finished ([`recover`]); a worktree directory no task holds any more (a removal the bridge
/// died in) is removed; and git forgets the worktrees whose directories are gone.
pub(super) async fn sweep_at_start(inner: &Arc<Inner>) {
    let holding = match inner.store.call(|s| Ok((s.worktrees_holding_work()?, s.list_guards()?))).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot read the worktrees to sweep");
            return;
        }
    };
    let (rows, guards) = holding;
    let guarded: std::collections::HashSet<&str> = guards.iter().map(|g| g.task_id.as_str()).collect();
    let mut checkouts: Vec<&Workdir> = inner
        .config
        .workdirs
        .iter()
        .filter(|w| w.isolation == Isolation::Worktree || rows.iter().any(|r| r.workdir_alias == w.alias))
        .collect();
    for row in rows.iter().filter(|r| !guarded.contains(r.task_id.as_str())) {
        if matches!(row.state, WorktreeState::Preparing | WorktreeState::Active) {
            recover(inner, &row.task_id).await;
        }
    }
    let worktrees = inner.providers.worktrees();
    for task_id in worktrees.trees().await {
        let id = task_id.clone();
        let row = inner.store.call(move |s| s.get_worktree(&id)).await.ok().flatten();
        let held = row
            .as_ref()
            .is_some_and(|r| matches!(r.state, WorktreeState::Preparing | WorktreeState::Active | WorktreeState::Kept));
        if held {
            continue;
        }
        let checkout = row.as_ref().and_then(|r| inner.config.workdirs.iter().find(|w| w.alias == r.workdir_alias));
        match checkout {
            Some(w) => {
                if let Err(e) = worktrees.remove(&task_id, &w.path).await {
                    tracing::warn!(reason = %e.message, "cannot remove a stray worktree");
                }
                checkouts.push(w);
            }
            None => tracing::warn!(task_id, "a worktree directory of no known task or workdir is left alone"),
        }
    }
    checkouts.sort_by_key(|w| w.slot);
    checkouts.dedup_by_key(|w| w.slot);
    for w in checkouts {
        if let Err(e) = worktrees.prune(&crate::ids::task_id(), &w.path).await {
            tracing::warn!(workdir = w.alias, reason = %e.message, "cannot prune the workdir's worktrees");
        }
    }
}
