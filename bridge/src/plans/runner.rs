//! The plan runner: one tracked tokio task per approved plan. It starts the steps in order as
//! ordinary tasks through the task service (each later step continues the previous step's
//! session), waits for each to end without polling, and stops the plan at the first step
//! that ends other than `succeeded`.
//!
//! Never re-running a step that may have run: before a step's task is submitted, the runner
//! records its intent (`starting`); after, it links the task (`running`). The task is
//! submitted with the idempotency key `plan:<plan id>:step:<n>` of the plan's owner, so after
//! a crash between the two a runner can tell, by that key, whether the task exists: if it
//! does, it ran (or may have) and is linked, and the plan ends with it; if it does not,
//! nothing ran and the step starts normally.
//!
//! A busy workdir (or one closed for recovery, or the active-task cap) does not fail the plan:
//! it becomes `waiting` and retries on the task service's pulse (any task changing, a lease
//! let go), or after [`RETRY_AFTER`] at the latest — never in a loop.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Inner;
use crate::config::RuntimeName;
use crate::error::{ToolError, code};
use crate::model::{PlanStatus, Principal, Profile, StepStatus, TaskStatus};
use crate::store::StoreError;
use crate::store::plans::{PlanFields, PlanRow, StepRow};
use crate::store::tasks::TaskRow;
use crate::tasks::SubmitRequest;

/// The longest a waiting plan waits before it tries its workdir again on its own.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The idempotency key of a step's task (in its owner's key space).
pub fn step_key(plan_id: &str, position: i64) -> String {
    format!("plan:{plan_id}:step:{position}")
}

/// What trying to start a step gave.
enum Start {
    /// Its task exists now.
    Started,
    /// Not now: the workdir is busy or closed, or the cap is reached.
    Wait(&'static str),
    /// The plan is no longer live, or the bridge is closing: stop quietly.
    Stop,
    /// The task service refused the step for good.
    Refused(ToolError),
}

pub(super) async fn run(inner: &Arc<Inner>, plan_id: &str, stop: &CancellationToken) {
    let mut pulse = inner.tasks.pulse();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let id = plan_id.to_owned();
        let (plan, steps) = match inner.store.call(move |s| s.get_plan_with_steps(&id)).await {
            Ok(Some(found)) => found,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(plan_id, cause = %e, "cannot read the plan; its runner stops");
                return;
            }
        };
        if plan.status.is_terminal() || plan.status == PlanStatus::PendingApproval {
            return;
        }
        if let Some(step) = steps.iter().find(|s| s.status == StepStatus::Running) {
            let Some(task_id) = step.task_id.clone() else { return };
            match inner.tasks.wait_terminal(&task_id, stop).await {
                Ok(Some(task)) => {
                    if step_ended(inner, &plan, step, &task).await {
                        continue;
                    }
                    return;
                }
                Ok(None) if stop.is_cancelled() => return,
                Ok(None) => {
                    let why = "the step's task no longer exists";
                    end_plan(inner, &plan, step, PlanStatus::Interrupted, code::AGENT_TASK_NOT_FOUND, why).await;
                    return;
                }
                Err(e) => {
                    tracing::error!(plan_id, cause = %e, "cannot follow the step's task; the runner stops");
                    return;
                }
            }
        }
        if let Some(step) = steps.iter().find(|s| s.status == StepStatus::Starting) {
            if let Err(e) = resolve_starting(inner, &plan, step).await {
                tracing::error!(plan_id, cause = %e, "cannot resolve a step left starting; the runner stops");
                return;
            }
            continue;
        }
        let Some(step) = steps.iter().find(|s| s.status == StepStatus::Pending) else {
            let (id, now) = (plan_id.to_owned(), inner.clock.now_ms());
            let _ = inner
                .store
                .call(move |s| s.plan_transition(&id, PlanStatus::Succeeded, PlanFields::default(), now))
                .await;
            tracing::info!(plan_id, "plan succeeded");
            inner.tasks.announce();
            return;
        };
        let prior = steps.iter().rev().find(|s| s.position < step.position).and_then(|s| s.task_id.clone());
        pulse.borrow_and_update();
        match start(inner, &plan, step, prior).await {
            Start::Started => {}
            Start::Stop => return,
            Start::Refused(e) => {
                let why = format!("step {} ({}) could not start: {}", step.position, step.title, e.message);
                end_plan(inner, &plan, step, PlanStatus::Failed, e.code, &why).await;
                return;
            }
            Start::Wait(wait_code) => {
                if plan.status != PlanStatus::Waiting {
                    let fields = PlanFields { wait_code: Some(wait_code.to_owned()), ..Default::default() };
                    let (id, now) = (plan_id.to_owned(), inner.clock.now_ms());
                    let _ = inner.store.call(move |s| s.plan_transition(&id, PlanStatus::Waiting, fields, now)).await;
                    tracing::info!(plan_id, wait_code, "plan waits for its workdir");
                    inner.tasks.announce();
                }
                tokio::select! {
                    _ = pulse.changed() => {}
                    _ = tokio::time::sleep(RETRY_AFTER) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    }
}

/// The owner the step tasks are submitted as: they belong to the plan's owner, who follows
/// them and answers them with `get_agent_task` like any task. The policy was checked for
/// this owner when the plan was filed, and a human approved it since.
fn owner(plan: &PlanRow) -> Principal {
    Principal {
        name: plan.principal.clone(),
        role: crate::config::Role::Operator,
        workdirs: None,
        key_id: None,
        display: None,
    }
}

async fn start(inner: &Arc<Inner>, plan: &PlanRow, step: &StepRow, prior: Option<String>) -> Start {
    let _serial = inner.lock.lock().await;
    let (id, pos, now) = (plan.plan_id.clone(), step.position, inner.clock.now_ms());
    match inner.store.call(move |s| s.start_step(&id, pos, now)).await {
        Ok(()) => {}
        Err(StoreError::InvalidPlanTransition { .. } | StoreError::StepState { .. }) => return Start::Stop,
        Err(e) => return Start::Refused(e.into()),
    }
    let (Some(runtime), Some(profile)) = (RuntimeName::parse(&plan.runtime), Profile::parse(&plan.profile)) else {
        return Start::Refused(ToolError::new(code::INTERNAL_ERROR, "the plan's runtime or profile is unknown"));
    };
    let request = SubmitRequest {
        runtime,
        workdir: plan.workdir_alias.clone(),
        prompt: step.prompt.clone(),
        path: plan.relative_cwd.clone(),
        profile,
        model: None,
        // The plan's for its first step; a later step continues the previous one, on its
        // branch when it has one.
        isolation: match prior {
            None => plan.isolation.as_deref().and_then(crate::model::Isolation::parse),
            Some(_) => None,
        },
        base_ref: None,
        continue_from_task_id: prior,
        correlation_id: plan.correlation_id.clone(),
        idempotency_key: Some(step_key(&plan.plan_id, step.position)),
    };
    let submitted = inner.tasks.submit(&owner(plan), request).await;
    let task_id = match &submitted {
        Ok(v) => v.get("task_id").and_then(Value::as_str).map(str::to_owned),
        Err(_) => None,
    };
    let (id, pos) = (plan.plan_id.clone(), step.position);
    match (submitted, task_id) {
        (Ok(_), Some(task_id)) => {
            let now = inner.clock.now_ms();
            if let Err(e) = inner.store.call(move |s| s.link_step(&id, pos, &task_id, now)).await {
                tracing::error!(plan_id = plan.plan_id, cause = %e, "cannot link a step to its task");
                return Start::Stop;
            }
            tracing::info!(plan_id = plan.plan_id, step = step.position, "plan step started");
            inner.tasks.announce();
            Start::Started
        }
        (result, _) => {
            let _ = inner.store.call(move |s| s.unstart_step(&id, pos)).await;
            let e = result.err().unwrap_or_else(|| ToolError::new(code::INTERNAL_ERROR, "the submission gave no task"));
            match e.code {
                code::WORKDIR_BUSY => Start::Wait(code::WORKDIR_BUSY),
                code::WORKDIR_RECOVERY_REQUIRED => Start::Wait(code::WORKDIR_RECOVERY_REQUIRED),
                code::AGENT_TASK_LIMIT_REACHED => Start::Wait(code::AGENT_TASK_LIMIT_REACHED),
                code::BRIDGE_CLOSED => Start::Stop,
                _ => Start::Refused(e),
            }
        }
    }
}

/// A step left `starting` by a bridge that stopped between the intent and the link: its task
/// exists (it may have run: link it, and the plan ends with it) or it does not (nothing ran:
/// the step is pending again).
async fn resolve_starting(inner: &Arc<Inner>, plan: &PlanRow, step: &StepRow) -> Result<(), StoreError> {
    let (owner, key) = (plan.principal.clone(), step_key(&plan.plan_id, step.position));
    let (id, pos, now) = (plan.plan_id.clone(), step.position, inner.clock.now_ms());
    inner
        .store
        .call(move |s| match s.find_by_idempotency_key(&owner, &key)? {
            Some(task) => s.link_step(&id, pos, &task.task_id, now),
            None => s.unstart_step(&id, pos),
        })
        .await
}

/// Records how a step's task ended; returns whether the plan goes on.
async fn step_ended(inner: &Arc<Inner>, plan: &PlanRow, step: &StepRow, task: &TaskRow) -> bool {
    let (to, fallback, step_status) = match task.status {
        TaskStatus::Succeeded => {
            let (id, pos, now) = (plan.plan_id.clone(), step.position, inner.clock.now_ms());
            let _ = inner.store.call(move |s| s.finish_step(&id, pos, StepStatus::Succeeded, now)).await;
            tracing::info!(plan_id = plan.plan_id, step = step.position, "plan step succeeded");
            inner.tasks.announce();
            return true;
        }
        TaskStatus::Cancelled => (PlanStatus::Cancelled, code::AGENT_PLAN_STEP_CANCELLED, StepStatus::Cancelled),
        TaskStatus::Interrupted => (PlanStatus::Interrupted, code::BRIDGE_RESTARTED, StepStatus::Interrupted),
        _ => (PlanStatus::Failed, code::AGENT_PLAN_STEP_FAILED, StepStatus::Failed),
    };
    let error_code = task.error_code.clone().unwrap_or_else(|| fallback.to_owned());
    let detail = task.error_message.clone().unwrap_or_else(|| error_code.clone());
    let why = format!("step {} ({}) ended {}: {detail}", step.position, step.title, task.status.as_str());
    end_plan_with(inner, plan, step, step_status, to, error_code, why).await;
    false
}

async fn end_plan(inner: &Arc<Inner>, plan: &PlanRow, step: &StepRow, to: PlanStatus, error_code: &str, why: &str) {
    let step_status = if to == PlanStatus::Failed { StepStatus::Failed } else { StepStatus::Interrupted };
    end_plan_with(inner, plan, step, step_status, to, error_code.to_owned(), why.to_owned()).await;
}

async fn end_plan_with(
    inner: &Arc<Inner>,
    plan: &PlanRow,
    step: &StepRow,
    step_status: StepStatus,
    to: PlanStatus,
    error_code: String,
    why: String,
) {
    let (id, pos, now) = (plan.plan_id.clone(), step.position, inner.clock.now_ms());
    let _ = inner.store.call(move |s| s.finish_step(&id, pos, step_status, now)).await;
    let fields = PlanFields { error_code: Some(error_code), error_message: Some(why), ..Default::default() };
    let id = plan.plan_id.clone();
    // A plan someone cancelled meanwhile keeps its state.
    if inner.store.call(move |s| s.plan_transition(&id, to, fields, now)).await.is_ok() {
        tracing::info!(plan_id = plan.plan_id, step = step.position, status = to.as_str(), "plan stopped");
    }
    inner.tasks.announce();
}
