//! The plan capabilities and the board's login tokens. Approval and rejection exist
//! on the local surfaces only (CLI, board): an MCP caller never sees them, whatever its role,
//! and the plan service refuses them to anyone but a person at this machine.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::policy::{Annotations, Scope};
use super::shared::{IsolationArg, ProfileArg, RuntimeArg, local_on, meta};
use super::{CallCtx, Capability, LOCAL_SURFACES};
use crate::config::Role;
use crate::error::ToolError;
use crate::model::PlanStatus;
use crate::plans::{PlanRequest, StepRequest};
use crate::store::plans::PlanFilter;
use bridge_proto::methods::Surface;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StepArg {
    /// A short title for the step.
    #[schemars(length(min = 1, max = 200))]
    title: String,
    /// The step's objective for the agent, as for submit_agent_task.
    #[schemars(length(min = 1))]
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SubmitPlanArgs {
    /// The workdir alias, from `list_workdirs`.
    #[schemars(length(max = 64))]
    workdir: String,
    /// The agent runtime every step runs on: `codex`, `claude` (or `fake` for tests).
    runtime: RuntimeArg,
    /// `workspace-write` lets the steps change files; `review` only reads.
    #[serde(default)]
    profile: ProfileArg,
    /// A directory relative to the workdir the steps start in (default: the workdir root).
    #[serde(default)]
    path: String,
    /// `worktree`: the steps work on one new branch in a git worktree, each starting where the
    /// previous one ended; `in_place`: in the workdir itself (default: the workdir's setting).
    isolation: Option<IsolationArg>,
    /// A short title a human reads when deciding to approve the plan.
    #[schemars(length(min = 1, max = 200))]
    title: String,
    /// The ordered steps; step 2 continues step 1's session, and so on.
    #[schemars(length(min = 1, max = 20))]
    steps: Vec<StepArg>,
    /// A fresh key per plan; retry an uncertain submission with the same key and you get the same plan.
    #[schemars(length(min = 1, max = 256))]
    idempotency_key: Option<String>,
    /// Your own opaque label, echoed back and given to every step's task.
    #[schemars(length(max = 256))]
    correlation_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PlanArgs {
    /// The plan id (`pln_…`).
    #[schemars(length(max = 64))]
    plan_id: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RejectArgs {
    /// The plan id (`pln_…`).
    #[schemars(length(max = 64))]
    plan_id: String,
    /// Why: kept with the plan and shown to its owner.
    #[schemars(length(max = 1000))]
    reason: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum PlanStatusArg {
    PendingApproval,
    Approved,
    Running,
    Waiting,
    Succeeded,
    Failed,
    Cancelled,
    Rejected,
    Interrupted,
}

fn default_limit() -> u32 {
    50
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListPlansArgs {
    /// Only plans in this state.
    status: Option<PlanStatusArg>,
    /// Only plans of this owner.
    #[schemars(length(max = 64))]
    owner: Option<String>,
    /// At most this many plans.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 200))]
    limit: u32,
}

fn default_hours() -> u32 {
    24
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BoardTokenArgs {
    /// How long the token can log in, in hours.
    #[serde(default = "default_hours")]
    #[schemars(range(min = 1, max = 720))]
    valid_hours: u32,
    /// A one-time login link instead: its token opens one session and is used up (kept in
    /// memory only: a restarted bridge forgets it).
    #[serde(default)]
    once: bool,
}

// No arguments. Not `shared::NoArgs`: this schema has always been announced without that
// type's description, and a doc comment here would add one.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// The CLI only (a board session cannot mint or revoke the tokens that open it).
const CLI_ONLY: &[Surface] = &[Surface::Cli];

const DECIDE: Annotations = Annotations { read_only: false, destructive: true, idempotent: false, open_world: true };

impl From<PlanStatusArg> for PlanStatus {
    fn from(s: PlanStatusArg) -> PlanStatus {
        match s {
            PlanStatusArg::PendingApproval => PlanStatus::PendingApproval,
            PlanStatusArg::Approved => PlanStatus::Approved,
            PlanStatusArg::Running => PlanStatus::Running,
            PlanStatusArg::Waiting => PlanStatus::Waiting,
            PlanStatusArg::Succeeded => PlanStatus::Succeeded,
            PlanStatusArg::Failed => PlanStatus::Failed,
            PlanStatusArg::Cancelled => PlanStatus::Cancelled,
            PlanStatusArg::Rejected => PlanStatus::Rejected,
            PlanStatusArg::Interrupted => PlanStatus::Interrupted,
        }
    }
}

/// The plan and board-token capabilities.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            meta(
                "submit_agent_plan",
                Scope::Write,
                Role::Operator,
                "Files a multi-step plan for an agent runtime in a workdir; nothing runs until a human approves it, then the steps run in order as tasks.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: false },
            ),
            |ctx: CallCtx, a: SubmitPlanArgs| async move {
                let request = PlanRequest {
                    workdir: a.workdir,
                    runtime: a.runtime.into(),
                    profile: a.profile.into(),
                    isolation: a.isolation.map(Into::into),
                    path: a.path,
                    title: a.title,
                    steps: a.steps.into_iter().map(|s| StepRequest { title: s.title, prompt: s.prompt }).collect(),
                    idempotency_key: a.idempotency_key,
                    correlation_id: a.correlation_id,
                };
                ctx.services.plans.submit(&ctx.principal, ctx.surface, request).await
            },
        ),
        Capability::new(
            meta(
                "get_agent_plan",
                Scope::Read,
                Role::Viewer,
                "Shows a plan: whether it still awaits a human, its state, and each step's status and task_id (follow those with get_agent_task); needs_human and a step's attention \"needs_you\" say its task waits for a human's approval or answer.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: PlanArgs| async move { ctx.services.plans.get(&ctx.principal, &a.plan_id).await },
        ),
        Capability::new(
            meta(
                "cancel_agent_plan",
                Scope::Write,
                Role::Operator,
                "Cancels a plan and the step it is running; it is cancelled when this returns, and repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: true },
            ),
            |ctx: CallCtx, a: PlanArgs| async move { ctx.services.plans.cancel(&ctx.principal, &a.plan_id).await },
        ),
        Capability::new(
            local_on(
                "admin_list_plans",
                Scope::Read,
                LOCAL_SURFACES,
                "Lists plans, those awaiting a human first, with their provenance.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: ListPlansArgs| async move {
                let filter = PlanFilter { principal: a.owner, status: a.status.map(PlanStatus::from) };
                ctx.services.plans.list(filter, a.limit).await
            },
        ),
        Capability::new(
            local_on(
                "admin_approve_plan",
                Scope::Write,
                LOCAL_SURFACES,
                "Approves a plan awaiting a human; its first step starts at once.",
                DECIDE,
            ),
            |ctx: CallCtx, a: PlanArgs| async move {
                ctx.services.plans.approve(&ctx.principal, ctx.surface, &a.plan_id).await
            },
        ),
        Capability::new(
            local_on(
                "admin_reject_plan",
                Scope::Write,
                LOCAL_SURFACES,
                "Rejects a plan awaiting a human, with a reason its owner will read; none of it runs.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: false },
            ),
            |ctx: CallCtx, a: RejectArgs| async move {
                ctx.services.plans.reject(&ctx.principal, ctx.surface, &a.plan_id, a.reason).await
            },
        ),
        Capability::new(
            local_on(
                "admin_create_board_token",
                Scope::Write,
                CLI_ONLY,
                "Creates a login token for the web board and shows it once.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: false },
            ),
            |ctx: CallCtx, a: BoardTokenArgs| async move {
                let services = &ctx.services;
                let now = services.clock.now_ms();
                let url = services.board_addr.get().map(|addr| format!("http://{addr}/login"));
                if a.once {
                    let (secret, expires_at) = services.auth.issue_login_link(a.valid_hours, now);
                    return Ok(json!({
                        "token": secret,
                        "once": true,
                        "expires_at": crate::clock::rfc3339(expires_at),
                        "login_url": url,
                        "login_link": url.as_ref().map(|u| format!("{u}/{secret}")),
                        "board_socket": services.config.board_socket,
                    }));
                }
                let (row, secret) = services.auth.issue_board_token(&services.store, a.valid_hours, now).await?;
                Ok(json!({
                    "token_id": row.token_id,
                    "token": secret,
                    "expires_at": crate::clock::rfc3339(row.expires_at),
                    "login_url": url,
                    "board_socket": services.config.board_socket,
                }))
            },
        ),
        Capability::new(
            local_on(
                "admin_revoke_board_tokens",
                Scope::Write,
                CLI_ONLY,
                "Revokes every board login token and ends every board session.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let now = ctx.services.clock.now_ms();
                let revoked = ctx.services.auth.revoke_board_tokens(&ctx.services.store, now).await?;
                Ok::<_, ToolError>(json!({ "revoked": revoked }))
            },
        ),
    ]
}
