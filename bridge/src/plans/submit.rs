//! What callers do to plans: file one (atomically, retry-safe), read it, cancel it, and — a
//! person at this machine only — approve or reject it.

use bridge_proto::methods::Surface;
use serde_json::{Value, json};

use super::views::plan_view;
use super::{Inner, MAX_REASON_CHARS, MAX_STEPS, MAX_TITLE_CHARS, PlanService};
use crate::config::RuntimeName;
use crate::error::{ToolError, code};
use crate::model::{PlanStatus, Principal, Profile, StepStatus};
use crate::store::plans::{NewPlan, NewStep, PlanFields, PlanFilter, PlanInserted, PlanRow};
use crate::tasks::MAX_TEXT_BYTES;
use crate::tasks::manifest::canonical;
use crate::tasks::results::sha256_hex;

/// One step of a `submit_agent_plan` call.
#[derive(Debug, Clone)]
pub struct StepRequest {
    /// Short title.
    pub title: String,
    /// The step's objective (its task's prompt).
    pub prompt: String,
}

/// A parsed `submit_agent_plan` call.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Workdir alias.
    pub workdir: String,
    /// Runtime.
    pub runtime: RuntimeName,
    /// Profile of every step.
    pub profile: Profile,
    /// Where the steps work (`None`: the workdir's setting); a worktree plan's steps share one branch.
    pub isolation: Option<crate::model::Isolation>,
    /// Relative cwd of every step.
    pub path: String,
    /// Short title.
    pub title: String,
    /// 1 to 20 steps, in order.
    pub steps: Vec<StepRequest>,
    /// Retry key.
    pub idempotency_key: Option<String>,
    /// Caller metadata.
    pub correlation_id: Option<String>,
}

fn check_opaque(param: &str, value: &Option<String>) -> Result<(), ToolError> {
    if let Some(v) = value {
        if v.is_empty() || v.len() > 256 {
            return Err(ToolError::invalid(param, "must be 1 to 256 UTF-8 bytes"));
        }
        if v.chars().any(char::is_control) {
            return Err(ToolError::invalid(param, "must not contain control characters"));
        }
    }
    Ok(())
}

fn check_title(param: &str, title: &str) -> Result<String, ToolError> {
    let t = title.trim();
    if t.is_empty() {
        return Err(ToolError::invalid(param, "must not be empty"));
    }
    if t.chars().count() > MAX_TITLE_CHARS || t.chars().any(char::is_control) {
        return Err(ToolError::invalid(param, format!("must be one line of at most {MAX_TITLE_CHARS} characters")));
    }
    Ok(t.to_owned())
}

/// Checks every step before anything is stored: one invalid step refuses the whole plan.
fn check_steps(steps: &[StepRequest]) -> Result<Vec<NewStep>, ToolError> {
    if steps.is_empty() || steps.len() > MAX_STEPS {
        return Err(ToolError::invalid("steps", format!("must hold 1 to {MAX_STEPS} steps")));
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let title = check_title(&format!("steps[{i}].title"), &s.title)?;
            if s.prompt.trim().is_empty() {
                return Err(ToolError::invalid(&format!("steps[{i}].prompt"), "must not be empty"));
            }
            if s.prompt.len() > MAX_TEXT_BYTES {
                return Err(ToolError::new(
                    code::AGENT_PROMPT_TOO_LARGE,
                    format!("the prompt of step {} is larger than {MAX_TEXT_BYTES} bytes", i + 1),
                ));
            }
            Ok(NewStep { title, prompt: s.prompt.clone() })
        })
        .collect()
}

/// SHA-256 of the canonical plan; prompts are represented only by their hashes.
fn fingerprint(req: &PlanRequest, path: &str, title: &str, steps: &[NewStep]) -> String {
    let steps: Vec<Value> =
        steps.iter().map(|s| json!({ "title": s.title, "prompt_sha256": sha256_hex(s.prompt.as_bytes()) })).collect();
    let doc = json!({
        "runtime": req.runtime.as_str(),
        "workdir": req.workdir,
        "path": path,
        "profile": req.profile.as_str(),
        "title": title,
        "steps": steps,
        "correlation_id": req.correlation_id,
    });
    let mut doc = doc;
    // Only when given, so that a plan's fingerprint from before isolation existed still matches.
    if let Some(isolation) = req.isolation {
        doc["isolation"] = json!(isolation.as_str());
    }
    sha256_hex(canonical(&doc).as_bytes())
}

fn replay(row: PlanRow, fingerprint: &str) -> Result<PlanRow, ToolError> {
    if row.request_fingerprint.as_deref() == Some(fingerprint) {
        Ok(row)
    } else {
        Err(ToolError::from(crate::store::StoreError::IdempotencyConflict))
    }
}

/// Whether this caller is a person at the bridge's machine: the local operator on the CLI or
/// the board's operator on the board. An API key, whatever its role or surface, is not.
fn is_local_human(principal: &Principal, surface: Surface) -> bool {
    surface != Surface::Mcp && principal.is_local_human()
}

impl PlanService {
    /// `submit_agent_plan`: stores the plan and all its steps in one transaction. A plan filed
    /// by anyone but the local operator waits for a human (`pending_approval`); the local
    /// operator's own plan is approved at once and starts.
    pub async fn submit(&self, principal: &Principal, surface: Surface, req: PlanRequest) -> Result<Value, ToolError> {
        let inner = &self.inner;
        let title = check_title("title", &req.title)?;
        check_opaque("idempotency_key", &req.idempotency_key)?;
        check_opaque("correlation_id", &req.correlation_id)?;
        let steps = check_steps(&req.steps)?;
        let (workdir, path) = inner.tasks.check_target(principal, &req.workdir, req.runtime, req.profile, &req.path)?;
        for (i, step) in req.steps.iter().enumerate() {
            inner
                .tasks
                .providers()
                .check_prompt(req.runtime, &step.prompt)
                .map_err(|e| ToolError::new(crate::error::code::AGENT_DISABLED, format!("steps[{i}].prompt: {e}")))?;
        }
        crate::tasks::resolve_cwd(&workdir, &path).await?;
        inner.tasks.check_isolation(&workdir, req.profile, req.isolation).await?;
        let fingerprint = fingerprint(&req, &path, &title, &steps);
        if let Some(key) = &req.idempotency_key {
            let (p, k) = (principal.name.clone(), key.clone());
            if let Some(row) = inner.store.call(move |s| s.find_plan_by_key(&p, &k)).await? {
                return self.view(replay(row, &fingerprint)?, true).await;
            }
        }
        let auto = is_local_human(principal, surface);
        let new = NewPlan {
            plan_id: crate::ids::plan_id(),
            principal: principal.name.clone(),
            created_by: principal.name.clone(),
            created_surface: surface.as_str().to_owned(),
            title,
            runtime: req.runtime.as_str().to_owned(),
            workdir_alias: workdir.alias.clone(),
            relative_cwd: path,
            profile: req.profile.as_str().to_owned(),
            created_at: inner.clock.now_ms(),
            approved_by: auto.then(|| principal.name.clone()),
            correlation_id: req.correlation_id.clone(),
            idempotency_key: req.idempotency_key.clone(),
            request_fingerprint: req.idempotency_key.as_ref().map(|_| fingerprint.clone()),
            isolation: req.isolation.map(|i| i.as_str().to_owned()),
        };
        let inserted = inner.store.call(move |s| s.insert_plan(&new, &steps)).await?;
        let row = match inserted {
            PlanInserted::Created(row) => row,
            PlanInserted::Existing(row) => return self.view(replay(row, &fingerprint)?, true).await,
        };
        tracing::info!(plan_id = row.plan_id, created_by = row.created_by, status = row.status.as_str(), "plan filed");
        inner.tasks.announce();
        if row.status == PlanStatus::Approved {
            self.spawn_runner(&row.plan_id);
        }
        self.view(row, false).await
    }

    /// `get_agent_plan`.
    pub async fn get(&self, principal: &Principal, plan_id: &str) -> Result<Value, ToolError> {
        let row = self.inner.visible_plan(principal, plan_id).await?;
        self.view(row, false).await
    }

    /// `admin_list_plans`: plans awaiting a human first, then the newest.
    pub async fn list(&self, filter: PlanFilter, limit: u32) -> Result<Value, ToolError> {
        let rows = self.inner.store.call(move |s| s.list_plans(&filter, limit)).await?;
        let mut plans = Vec::new();
        for row in rows {
            plans.push(self.view(row, false).await?);
        }
        Ok(json!({ "plans": plans }))
    }

    /// `admin_approve_plan`: a person at this machine approves; the plan starts at once.
    pub async fn approve(&self, principal: &Principal, surface: Surface, plan_id: &str) -> Result<Value, ToolError> {
        refuse_unless_human(principal, surface)?;
        let inner = &self.inner;
        let row = inner.visible_plan(principal, plan_id).await?;
        let _serial = inner.lock.lock().await;
        let fields = PlanFields { approved_by: Some(principal.name.clone()), ..Default::default() };
        let row = transition_pending(inner, &row, PlanStatus::Approved, fields).await?;
        tracing::info!(plan_id, by = principal.name, "plan approved");
        inner.tasks.announce();
        self.spawn_runner(plan_id);
        self.view(row, false).await
    }

    /// `admin_reject_plan`: a person at this machine refuses the plan; it keeps the reason.
    pub async fn reject(
        &self,
        principal: &Principal,
        surface: Surface,
        plan_id: &str,
        reason: Option<String>,
    ) -> Result<Value, ToolError> {
        refuse_unless_human(principal, surface)?;
        let reason = reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
        if reason.as_ref().is_some_and(|r| r.chars().count() > MAX_REASON_CHARS) {
            return Err(ToolError::invalid("reason", format!("must be at most {MAX_REASON_CHARS} characters")));
        }
        let inner = &self.inner;
        let row = inner.visible_plan(principal, plan_id).await?;
        let _serial = inner.lock.lock().await;
        let fields =
            PlanFields { rejected_by: Some(principal.name.clone()), rejection_reason: reason, ..Default::default() };
        let row = transition_pending(inner, &row, PlanStatus::Rejected, fields).await?;
        tracing::info!(plan_id, by = principal.name, "plan rejected");
        inner.tasks.announce();
        self.view(row, false).await
    }

    /// `cancel_agent_plan`: the plan is `cancelled` before this returns, and so is the step
    /// task it was running. Repeat-safe: a finished plan is returned as it is.
    pub async fn cancel(&self, principal: &Principal, plan_id: &str) -> Result<Value, ToolError> {
        let inner = &self.inner;
        let row = inner.visible_plan(principal, plan_id).await?;
        let serial = inner.lock.lock().await;
        let fields = PlanFields {
            error_code: Some(code::AGENT_PLAN_STEP_CANCELLED.to_owned()),
            error_message: Some(format!("cancelled by {}", principal.name)),
            ..Default::default()
        };
        let (id, now) = (plan_id.to_owned(), inner.clock.now_ms());
        let row = match inner.store.call(move |s| s.plan_transition(&id, PlanStatus::Cancelled, fields, now)).await {
            Ok(row) => row,
            Err(crate::store::StoreError::InvalidPlanTransition { .. }) => return self.view(row, false).await,
            Err(e) => return Err(e.into()),
        };
        drop(serial);
        if let Some(token) = inner.runners.lock().ok().and_then(|r| r.get(plan_id).cloned()) {
            token.cancel();
        }
        let id = plan_id.to_owned();
        let steps = inner.store.call(move |s| s.get_plan_with_steps(&id)).await?.map(|(_, s)| s).unwrap_or_default();
        for step in steps.iter().filter(|s| s.status == StepStatus::Running) {
            if let Some(task_id) = &step.task_id {
                // The same path as cancel_agent_task: `cancelled` is persisted before it returns.
                inner.tasks.cancel(principal, task_id).await?;
                let (id, pos, now) = (plan_id.to_owned(), step.position, inner.clock.now_ms());
                inner.store.call(move |s| s.finish_step(&id, pos, StepStatus::Cancelled, now)).await?;
            }
        }
        tracing::info!(plan_id, by = principal.name, "plan cancelled");
        inner.tasks.announce();
        self.view(row, false).await
    }

    async fn view(&self, row: PlanRow, replayed: bool) -> Result<Value, ToolError> {
        let (id, now) = (row.plan_id.clone(), self.inner.clock.now_ms());
        let (steps, usage) = self
            .inner
            .store
            .call(move |s| Ok((s.get_plan_with_steps(&id)?.map(|(_, s)| s), s.plan_usage(&id, now)?)))
            .await?;
        let config = self.inner.tasks.config();
        let board = config.board_socket.is_none().then_some(config.board_addr);
        let mut view = plan_view(&row, &steps.unwrap_or_default(), board);
        view["idempotent_replay"] = json!(replayed);
        // The sum over the steps that ran: tokens, cost, wall and human-wait time.
        view["usage"] = crate::tasks::accounting::totals_json(&usage);
        Ok(view)
    }
}

fn refuse_unless_human(principal: &Principal, surface: Surface) -> Result<(), ToolError> {
    if is_local_human(principal, surface) {
        Ok(())
    } else {
        Err(ToolError::new(
            code::PLAN_APPROVAL_NOT_ALLOWED,
            "only a person at the bridge's machine approves or rejects plans: on the board or with `agent-bridge plans`",
        ))
    }
}

async fn transition_pending(
    inner: &Inner,
    row: &PlanRow,
    to: PlanStatus,
    fields: PlanFields,
) -> Result<PlanRow, ToolError> {
    let (id, now) = (row.plan_id.clone(), inner.clock.now_ms());
    match inner.store.call(move |s| s.plan_transition(&id, to, fields, now)).await {
        Ok(row) => Ok(row),
        Err(crate::store::StoreError::InvalidPlanTransition { from, .. }) => Err(ToolError::new(
            code::PLAN_NOT_PENDING,
            format!("the plan is {from}: only a plan awaiting approval can be approved or rejected"),
        )),
        Err(e) => Err(e.into()),
    }
}
