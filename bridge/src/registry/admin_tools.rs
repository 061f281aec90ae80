//! The administrator's capabilities over every principal's work: the task list, the audit
//! log, the workdirs' leases and guards, and the forced guard clear.

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{Annotations, Scope};
use super::shared::{NoArgs, RuntimeArg, local, meta, tasks};
use super::{CallCtx, Capability};
use crate::audit_view::AuditQuery;
use crate::config::{Role, RuntimeName};
use crate::error::ToolError;
use crate::model::{AuditOutcome, TaskStatus};
use crate::store::tasks::TaskFilter;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum StatusArg {
    Queued,
    Starting,
    Running,
    WaitingForApproval,
    WaitingForQuestion,
    Succeeded,
    Failed,
    Cancelled,
    Interrupted,
}

fn default_list_limit() -> u32 {
    50
}

fn default_totals() -> bool {
    true
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListTasksArgs {
    /// Only tasks in this state.
    status: Option<StatusArg>,
    /// Only tasks in this workdir.
    #[schemars(length(max = 64))]
    workdir: Option<String>,
    /// Only tasks of this runtime.
    runtime: Option<RuntimeArg>,
    /// Only tasks of this principal.
    #[schemars(length(max = 64))]
    owner: Option<String>,
    /// Page cursor: tasks created before this one.
    #[schemars(length(max = 64))]
    before_task_id: Option<String>,
    /// Only tasks created at or after this instant (RFC 3339, e.g. `2026-12-01T00:00:00Z`);
    /// also bounds the totals.
    #[schemars(length(max = 40))]
    since: Option<String>,
    /// Only tasks created before this instant (RFC 3339); also bounds the totals.
    #[schemars(length(max = 40))]
    until: Option<String>,
    /// At most this many tasks.
    #[serde(default = "default_list_limit")]
    #[schemars(range(min = 1, max = 200))]
    limit: u32,
    /// Whether to add the usage totals over the whole filter (a pass over every task it
    /// matches); false leaves `totals` out, for a page that does not show them.
    #[serde(default = "default_totals")]
    totals: bool,
}

/// An optional RFC 3339 argument as Unix ms, or an error naming it.
fn instant(param: &str, value: Option<&str>) -> Result<Option<i64>, ToolError> {
    value
        .map(|v| {
            crate::clock::parse_rfc3339_ms(v)
                .ok_or_else(|| ToolError::invalid(param, "must be an RFC 3339 instant such as 2026-12-01T00:00:00Z"))
        })
        .transpose()
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum OutcomeArg {
    Ok,
    Denied,
    Invalid,
    Error,
}

impl From<OutcomeArg> for AuditOutcome {
    fn from(o: OutcomeArg) -> AuditOutcome {
        match o {
            OutcomeArg::Ok => AuditOutcome::Ok,
            OutcomeArg::Denied => AuditOutcome::Denied,
            OutcomeArg::Invalid => AuditOutcome::Invalid,
            OutcomeArg::Error => AuditOutcome::Error,
        }
    }
}

fn default_audit_limit() -> u32 {
    100
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AuditArgs {
    /// Only rows of this principal.
    #[schemars(length(max = 64))]
    principal: Option<String>,
    /// Only rows of this capability.
    #[schemars(length(max = 64))]
    capability: Option<String>,
    /// Only rows with this outcome.
    outcome: Option<OutcomeArg>,
    /// Only rows about this task.
    #[schemars(length(max = 64))]
    task_id: Option<String>,
    /// Page cursor: rows older than this id.
    before_audit_id: Option<u64>,
    /// At most this many rows.
    #[serde(default = "default_audit_limit")]
    #[schemars(range(min = 1, max = 500))]
    limit: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClearGuardArgs {
    /// The workdir alias whose guard to remove.
    #[schemars(length(max = 64))]
    workdir: String,
    /// Must be true: you have checked that no process of the guard's task still runs.
    force: bool,
}

/// The administrator's capabilities, in `tools/list` order.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            meta(
                "admin_list_tasks",
                Scope::Read,
                Role::Admin,
                "Lists every principal's tasks, newest first, with filters and a page cursor, each with its title, duration, usage and change outline, and (unless `totals` is false) usage totals over the whole filter per principal and per workdir.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: ListTasksArgs| async move {
                let filter = TaskFilter {
                    principal: a.owner,
                    status: a.status.map(TaskStatus::from),
                    workdir_alias: a.workdir,
                    runtime: a.runtime.map(|r| RuntimeName::from(r).as_str().to_owned()),
                    before_task_id: a.before_task_id,
                    created_since: instant("since", a.since.as_deref())?,
                    created_until: instant("until", a.until.as_deref())?,
                };
                tasks(&ctx).list(filter, a.limit, a.totals).await
            },
        ),
        Capability::new(
            meta(
                "admin_read_audit_log",
                Scope::Read,
                Role::Admin,
                "Reads the audit log (a row per call, denials included; unauthenticated calls counted per minute), newest first, with filters and a page cursor.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: AuditArgs| async move {
                // The rows of the calls made so far are written before the page is read.
                ctx.services.audit.flush().await;
                let query = AuditQuery {
                    principal: a.principal,
                    capability: a.capability,
                    outcome: a.outcome.map(AuditOutcome::from),
                    task_id: a.task_id,
                    before_audit_id: a.before_audit_id,
                    limit: a.limit,
                };
                crate::audit_view::page(&ctx.services.store, query).await
            },
        ),
        Capability::new(
            meta(
                "admin_workdir_status",
                Scope::Read,
                Role::Admin,
                "Shows each workdir's writer lease and recovery guard, what a guard's proof of stop still lacks, and task sandboxes left behind.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move { tasks(&ctx).workdir_status().await },
        ),
        Capability::new(
            local(
                "admin_clear_guard",
                Scope::Write,
                "Removes a workdir's recovery guard without proof, after you checked by hand that the task's processes are gone.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, a: ClearGuardArgs| async move {
                if !a.force {
                    return Err(ToolError::invalid(
                        "force",
                        "must be true: clearing a guard without proof is the operator's call",
                    ));
                }
                tasks(&ctx).clear_guard_forced(&a.workdir, &ctx.principal.name).await
            },
        ),
    ]
}

impl From<StatusArg> for TaskStatus {
    fn from(s: StatusArg) -> TaskStatus {
        match s {
            StatusArg::Queued => TaskStatus::Queued,
            StatusArg::Starting => TaskStatus::Starting,
            StatusArg::Running => TaskStatus::Running,
            StatusArg::WaitingForApproval => TaskStatus::WaitingForApproval,
            StatusArg::WaitingForQuestion => TaskStatus::WaitingForQuestion,
            StatusArg::Succeeded => TaskStatus::Succeeded,
            StatusArg::Failed => TaskStatus::Failed,
            StatusArg::Cancelled => TaskStatus::Cancelled,
            StatusArg::Interrupted => TaskStatus::Interrupted,
        }
    }
}
