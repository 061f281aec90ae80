//! The public view of a plan: its state in words a calling model (and a person) can act on,
//! its provenance, its steps and their task ids. Built by hand from store rows.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::clock::rfc3339;
use crate::model::{PlanStatus, StepStatus, TaskStatus};
use crate::store::plans::{PlanRow, StepRow};

/// Whether a step's task waits for a person: a pending approval or question.
pub fn step_needs_human(s: &StepRow) -> bool {
    matches!(s.task_status, Some(TaskStatus::WaitingForApproval | TaskStatus::WaitingForQuestion))
}

/// What a caller should know about the plan's state, in one sentence.
fn message(p: &PlanRow, board: Option<SocketAddr>, current: Option<i64>, waiting: Option<&StepRow>) -> String {
    // A board on a Unix socket has no address a caller could use (and its path is a host path).
    let at = board.map_or_else(String::new, |addr| format!(" (http://{addr}/)"));
    if p.status == PlanStatus::Running
        && let Some(step) = waiting
    {
        let question = step.task_status == Some(TaskStatus::WaitingForQuestion);
        return format!(
            "Step {} waits for a human: its task {} asks for {}. get_agent_task shows the request; answer it with {}.",
            step.position,
            step.task_id.as_deref().unwrap_or("?"),
            if question { "an answer" } else { "an approval" },
            if question { "answer_agent_question" } else { "respond_agent_approval" }
        );
    }
    match p.status {
        PlanStatus::PendingApproval => format!(
            "This plan awaits a human: nothing runs until an operator approves it on the agent-bridge board\
             {at} or with `agent-bridge plans approve {}`. Poll get_agent_plan to follow it.",
            p.plan_id
        ),
        PlanStatus::Approved => "Approved by a human; its first step starts now.".to_owned(),
        PlanStatus::Running => format!(
            "Step {} runs as an ordinary task: follow it, and answer its approvals and questions, with get_agent_task.",
            current.unwrap_or(1)
        ),
        PlanStatus::Waiting => format!(
            "Step {} waits for its workdir ({}); it starts by itself when the workdir is free.",
            current.unwrap_or(1),
            p.wait_code.as_deref().unwrap_or("busy")
        ),
        PlanStatus::Succeeded => "Every step succeeded.".to_owned(),
        PlanStatus::Rejected => match &p.rejection_reason {
            Some(reason) => format!("A human rejected this plan: {reason}"),
            None => "A human rejected this plan (no reason given).".to_owned(),
        },
        PlanStatus::Failed | PlanStatus::Cancelled | PlanStatus::Interrupted => {
            format!("The plan stopped: {}", p.error_message.as_deref().unwrap_or(p.status.as_str()))
        }
    }
}

/// The step a plan is at: the one running or starting, else (while the plan is live) the
/// next pending one.
pub fn current_step(p: &PlanRow, steps: &[StepRow]) -> Option<i64> {
    if p.status.is_terminal() || p.status == PlanStatus::PendingApproval {
        return None;
    }
    steps
        .iter()
        .find(|s| matches!(s.status, StepStatus::Running | StepStatus::Starting))
        .or_else(|| steps.iter().find(|s| s.status == StepStatus::Pending))
        .map(|s| s.position)
}

/// The public view of a plan with its steps.
pub fn plan_view(p: &PlanRow, steps: &[StepRow], board: Option<SocketAddr>) -> Value {
    let current = current_step(p, steps);
    let waiting = steps.iter().find(|s| !p.status.is_terminal() && step_needs_human(s));
    let message = message(p, board, current, waiting);
    let steps: Vec<Value> = steps
        .iter()
        .map(|s| {
            let status = match s.status {
                StepStatus::Pending if p.status.is_terminal() => "not_run",
                other => other.as_str(),
            };
            json!({
                "position": s.position,
                "title": s.title,
                "prompt": s.prompt,
                "status": status,
                "task_id": s.task_id,
                "task_status": s.task_status.map(TaskStatus::as_str),
                "attention": (!p.status.is_terminal() && step_needs_human(s)).then_some("needs_you"),
                "started_at": s.started_at.map(rfc3339),
                "completed_at": s.completed_at.map(rfc3339),
            })
        })
        .collect();
    let error = p.error_code.as_ref().map(|c| json!({ "code": c, "message": p.error_message }));
    let rejection = (p.status == PlanStatus::Rejected)
        .then(|| json!({ "by": p.rejected_by, "at": p.rejected_at.map(rfc3339), "reason": p.rejection_reason }));
    json!({
        "plan_id": p.plan_id,
        "title": p.title,
        "status": p.status.as_str(),
        "terminal": p.status.is_terminal(),
        "awaiting_human": p.status == PlanStatus::PendingApproval,
        "needs_human": p.status == PlanStatus::PendingApproval || waiting.is_some(),
        "message": message,
        "owner": p.principal,
        "created_by": p.created_by,
        "created_surface": p.created_surface,
        "created_at": rfc3339(p.created_at),
        "approved_at": p.approved_at.map(rfc3339),
        "approved_by": p.approved_by,
        "rejection": rejection,
        "updated_at": rfc3339(p.updated_at),
        "completed_at": p.completed_at.map(rfc3339),
        "runtime": p.runtime,
        "workdir": p.workdir_alias,
        "path": p.relative_cwd,
        "profile": p.profile,
        "isolation": p.isolation.as_deref().unwrap_or("workdir_default"),
        "correlation_id": p.correlation_id,
        "idempotency_key": p.idempotency_key,
        "waiting_for": p.wait_code.as_ref().filter(|_| p.status == PlanStatus::Waiting),
        "error": error,
        "current_step": current,
        "steps": steps,
    })
}
