//! The plan service: a caller files a whole multi-step plan; nothing of
//! it runs until a human approves it on the board or with the local CLI; once approved, its
//! steps run in order as ordinary tasks through the task service, each continuing the
//! previous step's session.
//!
//! The approval invariant lives in three places, each enough on its own: the store refuses
//! to start a step of a plan that is not approved (`Store::start_step`), only the approval
//! capability moves a plan out of `pending_approval`, and that capability exists on the local
//! surfaces only and refuses any principal but a person at this machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::error::{ToolError, code};
use crate::model::Principal;
use crate::store::Store;
use crate::store::plans::PlanRow;
use crate::tasks::TaskService;

mod runner;
mod submit;
pub mod views;

pub use submit::{PlanRequest, StepRequest};

/// Most steps in one plan.
pub const MAX_STEPS: usize = 20;
/// Longest plan or step title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest rejection reason, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// Everything the service and its runners share.
struct Inner {
    store: Arc<Store>,
    tasks: TaskService,
    clock: Clock,
    /// Serializes the moves that must not interleave: a runner starting a step (intent,
    /// submit, link) against a cancel, an approval or a rejection of the same plan.
    lock: tokio::sync::Mutex<()>,
    /// The cancellation token of each plan that has a live runner.
    runners: Mutex<HashMap<String, CancellationToken>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

/// The plan service handle.
#[derive(Clone)]
pub struct PlanService {
    inner: Arc<Inner>,
}

impl PlanService {
    /// Builds the service over the task service. `shutdown` is the root token.
    pub fn new(store: Arc<Store>, tasks: TaskService, clock: Clock, shutdown: CancellationToken) -> PlanService {
        PlanService {
            inner: Arc::new(Inner {
                store,
                tasks,
                clock,
                lock: tokio::sync::Mutex::new(()),
                runners: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                shutdown,
            }),
        }
    }

    /// Startup: retention of old plans, then a runner for every approved, running or waiting
    /// plan. A runner never re-runs a step that may have run (see `runner`): the task service
    /// has already interrupted every task the previous bridge left, so a step in flight ends
    /// its plan as `interrupted`, and a plan with no step in flight goes on with its next one.
    pub async fn start(&self) -> Result<(), ToolError> {
        self.collect_garbage().await;
        let plans = self.inner.store.call(|s| s.runnable_plans()).await?;
        for plan in plans {
            self.spawn_runner(&plan.plan_id);
        }
        Ok(())
    }

    /// Shutdown: the runners stop where they are (their state is in the store; the next
    /// start picks them up) and are awaited.
    pub async fn shutdown(&self, bound: std::time::Duration) {
        let tokens: Vec<CancellationToken> =
            self.inner.runners.lock().map(|r| r.values().cloned().collect()).unwrap_or_default();
        for token in tokens {
            token.cancel();
        }
        self.inner.tracker.close();
        if tokio::time::timeout(bound, self.inner.tracker.wait()).await.is_err() {
            tracing::warn!("some plan runners did not stop within the shutdown bound");
        }
    }

    /// How many plans wait for a human (for the board's navigation).
    pub async fn pending_count(&self) -> Result<i64, ToolError> {
        Ok(self.inner.store.call(|s| s.count_pending_plans()).await?)
    }

    /// The plan and step a task belongs to, if any.
    pub async fn plan_of_task(&self, task_id: &str) -> Result<Option<(String, i64)>, ToolError> {
        let id = task_id.to_owned();
        Ok(self.inner.store.call(move |s| s.plan_of_task(&id)).await?)
    }

    fn spawn_runner(&self, plan_id: &str) {
        let token = self.inner.shutdown.child_token();
        {
            let mut runners = self.inner.runners.lock().unwrap_or_else(|p| p.into_inner());
            if runners.contains_key(plan_id) {
                return;
            }
            runners.insert(plan_id.to_owned(), token.clone());
        }
        let inner = Arc::clone(&self.inner);
        let id = plan_id.to_owned();
        self.inner.tracker.spawn(async move {
            runner::run(&inner, &id, &token).await;
            inner.runners.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            inner.tasks.announce();
        });
    }

    async fn collect_garbage(&self) {
        let inner = &self.inner;
        let hours = inner.tasks.config().limits.retention_hours as i64;
        let cutoff = inner.clock.now_ms() - hours.saturating_mul(3_600_000);
        match inner.store.call(move |s| s.delete_expired_plans(cutoff)).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(plans = n, "retention removed plans"),
            Err(e) => tracing::warn!(cause = %e, "plan retention pass failed"),
        }
    }
}

impl Inner {
    /// Reads a plan the principal may see; anything else is `AGENT_PLAN_NOT_FOUND`.
    async fn visible_plan(&self, principal: &Principal, plan_id: &str) -> Result<PlanRow, ToolError> {
        if !crate::ids::looks_like(plan_id, "pln_") {
            return Err(plan_not_found());
        }
        let id = plan_id.to_owned();
        match self.store.call(move |s| s.get_plan(&id)).await? {
            Some(row) if principal.sees_everything() || row.principal == principal.name => Ok(row),
            _ => Err(plan_not_found()),
        }
    }
}

/// The answer for a plan the caller may not see (identical to a missing one).
pub fn plan_not_found() -> ToolError {
    ToolError::new(code::AGENT_PLAN_NOT_FOUND, "no such plan")
}
