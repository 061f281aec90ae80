//! The capability table: each tool's argument type (its schema), metadata and a handler that
//! delegates to a service. Adding a capability is one entry here.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::policy::{Annotations, Scope};
use super::{ALL_SURFACES, CallCtx, Capability, LOCAL_SURFACES, Meta};
use crate::config::{AgentMode, Role, RuntimeName};
use crate::error::{ToolError, code};
use crate::model::{AuditOutcome, Profile, TaskStatus};
use crate::store::audit::AuditFilter;
use crate::store::keys::KeyRow;
use crate::store::tasks::TaskFilter;
use crate::tasks::{SubmitRequest, TaskService};

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// A runtime name.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum RuntimeArg {
    Codex,
    Claude,
    Fake,
}

impl From<RuntimeArg> for RuntimeName {
    fn from(r: RuntimeArg) -> RuntimeName {
        match r {
            RuntimeArg::Codex => RuntimeName::Codex,
            RuntimeArg::Claude => RuntimeName::Claude,
            RuntimeArg::Fake => RuntimeName::Fake,
        }
    }
}

/// A task profile.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
pub(super) enum ProfileArg {
    #[serde(rename = "review")]
    Review,
    #[default]
    #[serde(rename = "workspace-write")]
    WorkspaceWrite,
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Profile {
        match p {
            ProfileArg::Review => Profile::Review,
            ProfileArg::WorkspaceWrite => Profile::WorkspaceWrite,
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ModelsArgs {
    /// The runtime whose models to list.
    runtime: RuntimeArg,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SubmitArgs {
    /// The agent runtime to run: `codex`, `claude` (or `fake` for tests).
    runtime: RuntimeArg,
    /// The workdir alias, from `list_workdirs`.
    #[schemars(length(max = 64))]
    workdir: String,
    /// One narrow objective for the agent: what to change, where to stop, what evidence to return.
    #[schemars(length(min = 1))]
    prompt: String,
    /// A directory relative to the workdir to start in (default: the workdir root).
    #[serde(default)]
    path: String,
    /// `workspace-write` lets the agent change files; `review` only reads.
    #[serde(default)]
    profile: ProfileArg,
    /// A model id from `list_agent_models` (default: the runtime's own default).
    model: Option<String>,
    /// Continue the session of this finished task (same runtime and workdir).
    #[schemars(length(max = 64))]
    continue_from_task_id: Option<String>,
    /// Your own opaque label, echoed back; not unique, never used for retries.
    #[schemars(length(max = 256))]
    correlation_id: Option<String>,
    /// A fresh key per objective; retry an uncertain submission with the same key and you get the same task.
    #[schemars(length(min = 1, max = 256))]
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetTaskArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Wait up to this many seconds for the status or the pending request to change.
    #[serde(default)]
    #[schemars(range(min = 0, max = 25))]
    wait_seconds: u32,
    /// Include the pending request's whole text (`full_text`) when its display was clipped
    /// (`clipped: true`): read it before you approve.
    #[serde(default)]
    full_request: bool,
}

fn default_event_limit() -> u32 {
    100
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EventsArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Return events after this cursor (`next_after_event_id` of the previous page).
    #[serde(default)]
    after_event_id: u64,
    /// At most this many events.
    #[serde(default = "default_event_limit")]
    #[schemars(range(min = 1, max = 500))]
    limit: u32,
}

fn default_chunk() -> u32 {
    65_536
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResultArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Byte offset to read from (`next_offset_bytes` of the previous chunk).
    #[serde(default)]
    offset_bytes: u64,
    /// At most this many bytes; a character is never split.
    #[serde(default = "default_chunk")]
    #[schemars(range(min = 1, max = 65536))]
    max_bytes: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum DecisionArg {
    ApproveOnce,
    ApproveSession,
    Deny,
    CancelTask,
}

impl DecisionArg {
    fn as_str(&self) -> &'static str {
        match self {
            DecisionArg::ApproveOnce => "approve_once",
            DecisionArg::ApproveSession => "approve_session",
            DecisionArg::Deny => "deny",
            DecisionArg::CancelTask => "cancel_task",
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ApprovalArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// The pending request's id (`req_…`).
    #[schemars(length(max = 64))]
    request_id: String,
    /// `approve_once`, `approve_session`, `deny`, or `cancel_task` (deny and cancel the whole task).
    decision: DecisionArg,
    /// For permission requests: the requested permission ids you grant.
    #[schemars(length(max = 64), inner(length(max = 128)))]
    granted_permission_ids: Option<Vec<String>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AnswerArg {
    /// The question's id.
    #[schemars(length(max = 64))]
    question_id: String,
    /// The chosen option ids.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    selected_option_ids: Vec<String>,
    /// Free text, where the question allows it.
    text: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QuestionArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// The pending request's id (`req_…`).
    #[schemars(length(max = 64))]
    request_id: String,
    /// One answer per question.
    #[schemars(length(min = 1, max = 10))]
    answers: Vec<AnswerArg>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MessageArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Guidance for the running agent.
    #[schemars(length(min = 1))]
    message: String,
}

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
    /// At most this many tasks.
    #[serde(default = "default_list_limit")]
    #[schemars(range(min = 1, max = 200))]
    limit: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum OutcomeArg {
    Ok,
    Denied,
    Invalid,
    Error,
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
    #[serde(default = "default_event_limit")]
    #[schemars(range(min = 1, max = 500))]
    limit: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum RoleArg {
    Viewer,
    Operator,
    Admin,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateKeyArgs {
    /// A unique name; tasks created with the key belong to it.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// `viewer`, `operator` or `admin`.
    role: RoleArg,
    /// Restrict the key to these workdir aliases.
    workdirs: Option<Vec<String>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RevokeKeyArgs {
    /// The key's name or id.
    name: String,
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

const WRITE: Annotations = Annotations { read_only: false, destructive: true, idempotent: false, open_world: true };

fn meta(name: &'static str, scope: Scope, min_role: Role, description: &'static str, annotations: Annotations) -> Meta {
    Meta { name, scope, min_role, surfaces: ALL_SURFACES, description, annotations }
}

fn local(name: &'static str, scope: Scope, description: &'static str, annotations: Annotations) -> Meta {
    Meta { name, scope, min_role: Role::Admin, surfaces: LOCAL_SURFACES, description, annotations }
}

fn tasks(ctx: &CallCtx) -> &TaskService {
    &ctx.services.tasks
}

/// Every capability of this build.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            meta(
                "whoami",
                Scope::Read,
                Role::Viewer,
                "Shows who you are to this bridge: principal, role, surface and how many tools you can use.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                Ok(json!({
                    "principal": ctx.principal.name,
                    "role": ctx.principal.role.as_str(),
                    "surface": ctx.surface.as_str(),
                    "visible_tools": ctx.visible_tools,
                    "workdirs": ctx.principal.workdirs,
                }))
            },
        ),
        Capability::new(
            meta(
                "list_workdirs",
                Scope::Read,
                Role::Viewer,
                "Lists the work directories you may use, with their access, agent mode and allowed runtimes.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let workdirs: Vec<Value> = ctx
                    .services
                    .config
                    .workdirs
                    .iter()
                    .filter(|w| ctx.principal.may_use_workdir(&w.alias))
                    .map(|w| {
                        json!({
                            "alias": w.alias,
                            "description": w.description,
                            "access": if w.read_only { "read-only" } else { "read-write" },
                            "agent_mode": w.agent_mode.as_str(),
                            "runtimes": w.runtimes.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                Ok(json!({ "workdirs": workdirs }))
            },
        ),
        Capability::new(
            meta(
                "list_agent_runtimes",
                Scope::Read,
                Role::Viewer,
                "Lists the agent runtimes enabled on your workdirs, whether each is available now, its version and what it supports.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let mut enabled: Vec<RuntimeName> = ctx
                    .services
                    .config
                    .workdirs
                    .iter()
                    .filter(|w| w.agent_mode != AgentMode::Disabled && ctx.principal.may_use_workdir(&w.alias))
                    .flat_map(|w| w.runtimes.iter().copied())
                    .collect();
                enabled.sort();
                enabled.dedup();
                let mut runtimes = Vec::new();
                for r in enabled {
                    runtimes.push(tasks(&ctx).providers().probe(r).await.to_json());
                }
                let containment = tasks(&ctx).providers().containment().caller_json();
                for r in &mut runtimes {
                    r["containment"] = containment.clone();
                }
                Ok(json!({ "runtimes": runtimes, "containment": containment }))
            },
        ),
        Capability::new(
            meta(
                "list_agent_models",
                Scope::Read,
                Role::Viewer,
                "Lists the models a runtime offers (discovery only; it never starts the agent).",
                Annotations::READ,
            ),
            |ctx: CallCtx, args: ModelsArgs| async move { Ok(tasks(&ctx).providers().models(args.runtime.into()).await) },
        ),
        Capability::new(
            meta(
                "submit_agent_task",
                Scope::Write,
                Role::Operator,
                "Hands one coding objective to an agent runtime in a workdir and returns a task_id at once; poll it with get_agent_task.",
                WRITE,
            ),
            |ctx: CallCtx, a: SubmitArgs| async move {
                let req = SubmitRequest {
                    runtime: a.runtime.into(),
                    workdir: a.workdir,
                    prompt: a.prompt,
                    path: a.path,
                    profile: a.profile.into(),
                    model: a.model,
                    continue_from_task_id: a.continue_from_task_id,
                    correlation_id: a.correlation_id,
                    idempotency_key: a.idempotency_key,
                };
                tasks(&ctx).submit(&ctx.principal, req).await
            },
        ),
        Capability::new(
            meta(
                "get_agent_task",
                Scope::Read,
                Role::Viewer,
                "Shows a task's status, pending approval or question, error and result; wait_seconds (up to 25) waits for a change.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: GetTaskArgs| async move {
                tasks(&ctx).get(&ctx.principal, &a.task_id, u64::from(a.wait_seconds), a.full_request).await
            },
        ),
        Capability::new(
            meta(
                "read_agent_task_events",
                Scope::Read,
                Role::Viewer,
                "Reads a task's events in order, a page at a time, after a cursor.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: EventsArgs| async move {
                tasks(&ctx).events(&ctx.principal, &a.task_id, a.after_event_id, a.limit).await
            },
        ),
        Capability::new(
            meta(
                "read_agent_task_result",
                Scope::Read,
                Role::Viewer,
                "Reads a large (spooled) task result in chunks that never split a character.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: ResultArgs| async move {
                tasks(&ctx).result_chunk(&ctx.principal, &a.task_id, a.offset_bytes, a.max_bytes as usize).await
            },
        ),
        Capability::new(
            meta(
                "respond_agent_approval",
                Scope::Write,
                Role::Operator,
                "Answers a task's pending approval request: approve once, approve for the session, deny, or cancel the task.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: true },
            ),
            |ctx: CallCtx, a: ApprovalArgs| async move {
                tasks(&ctx)
                    .respond_approval(
                        &ctx.principal,
                        &a.task_id,
                        &a.request_id,
                        a.decision.as_str(),
                        a.granted_permission_ids,
                    )
                    .await
            },
        ),
        Capability::new(
            meta(
                "answer_agent_question",
                Scope::Write,
                Role::Operator,
                "Answers a task's pending question: one answer per question, with option ids and/or free text.",
                Annotations { read_only: false, destructive: false, idempotent: true, open_world: true },
            ),
            |ctx: CallCtx, a: QuestionArgs| async move {
                let answers = a
                    .answers
                    .into_iter()
                    .map(|x| crate::tasks::Answer {
                        question_id: x.question_id,
                        selected_option_ids: x.selected_option_ids,
                        text: x.text,
                    })
                    .collect();
                tasks(&ctx).answer_question(&ctx.principal, &a.task_id, &a.request_id, answers).await
            },
        ),
        Capability::new(
            meta(
                "send_agent_message",
                Scope::Write,
                Role::Operator,
                "Sends guidance to a running task's agent (only runtimes that support steering).",
                WRITE,
            ),
            |ctx: CallCtx, a: MessageArgs| async move {
                tasks(&ctx).send_message(&ctx.principal, &a.task_id, &a.message).await
            },
        ),
        Capability::new(
            meta(
                "cancel_agent_task",
                Scope::Write,
                Role::Operator,
                "Cancels a task; it is cancelled when this returns, and repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: true },
            ),
            |ctx: CallCtx, a: TaskArgs| async move { tasks(&ctx).cancel(&ctx.principal, &a.task_id).await },
        ),
        Capability::new(
            meta(
                "admin_list_tasks",
                Scope::Read,
                Role::Admin,
                "Lists every principal's tasks, newest first, with filters and a page cursor.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: ListTasksArgs| async move {
                let filter = TaskFilter {
                    principal: a.owner,
                    status: a.status.map(TaskStatus::from),
                    workdir_alias: a.workdir,
                    runtime: a.runtime.map(|r| RuntimeName::from(r).as_str().to_owned()),
                    before_task_id: a.before_task_id,
                };
                tasks(&ctx).list(filter, a.limit).await
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
                ctx.services.audit.flush().await;
                let filter = AuditFilter {
                    principal: a.principal,
                    capability: a.capability,
                    outcome: a.outcome.map(|o| match o {
                        OutcomeArg::Ok => AuditOutcome::Ok,
                        OutcomeArg::Denied => AuditOutcome::Denied,
                        OutcomeArg::Invalid => AuditOutcome::Invalid,
                        OutcomeArg::Error => AuditOutcome::Error,
                    }),
                    task_id: a.task_id,
                };
                let before = a.before_audit_id.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
                let limit = a.limit;
                let rows = ctx.services.store.call(move |s| s.read_audit(&filter, before, limit)).await?;
                let next = if rows.len() as u32 == limit { rows.last().map(|r| r.audit_id) } else { None };
                let rows: Vec<Value> = rows
                    .iter()
                    .map(|r| {
                        json!({
                            "audit_id": r.audit_id,
                            "at": crate::clock::rfc3339(r.at),
                            "surface": r.surface,
                            "principal": r.principal,
                            "role": r.role.map(Role::as_str),
                            "capability": r.capability,
                            "scope": r.scope,
                            "outcome": r.outcome.as_str(),
                            "error_code": r.error_code,
                            "duration_us": r.duration_us,
                            "task_id": r.task_id,
                            "plan_id": r.plan_id,
                            "client": r.client_name,
                            "count": r.count,
                        })
                    })
                    .collect();
                Ok(json!({ "rows": rows, "next_before_audit_id": next }))
            },
        ),
        Capability::new(
            meta(
                "admin_workdir_status",
                Scope::Read,
                Role::Admin,
                "Shows each workdir's writer lease and recovery guard, and what a guard's proof of stop still lacks.",
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
        Capability::new(
            local(
                "admin_create_api_key",
                Scope::Write,
                "Creates an API key and shows its secret once.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: false },
            ),
            |ctx: CallCtx, a: CreateKeyArgs| async move {
                let name = a.name.trim().to_owned();
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || "@._-".contains(c)) || name.is_empty() {
                    return Err(ToolError::invalid("name", "may use letters, digits and @ . _ - only"));
                }
                if name == crate::model::Principal::local_operator().name
                    || name == crate::model::Principal::board_operator().name
                    || name == ctx.services.config.mcp_auth.tunnel_principal
                {
                    return Err(ToolError::invalid("name", "is reserved"));
                }
                if let Some(list) = &a.workdirs
                    && let Some(unknown) =
                        list.iter().find(|w| !ctx.services.config.workdirs.iter().any(|c| &c.alias == *w))
                {
                    return Err(ToolError::new(code::WORKDIR_NOT_FOUND, format!("no workdir named {unknown:?}")));
                }
                let role = match a.role {
                    RoleArg::Viewer => Role::Viewer,
                    RoleArg::Operator => Role::Operator,
                    RoleArg::Admin => Role::Admin,
                };
                let secret = crate::ids::api_key_secret();
                let row = KeyRow {
                    key_id: crate::ids::key_id(),
                    name,
                    role,
                    key_sha256: super::auth::hash_secret(&secret),
                    workdirs: a.workdirs,
                    created_at: ctx.services.clock.now_ms(),
                    last_used_at: None,
                    revoked_at: None,
                };
                let (stored, cache) = (row.clone(), ctx.services.auth.keys().clone());
                ctx.services
                    .store
                    .call(move |s| {
                        s.insert_key(&stored)?;
                        cache.reload(s)
                    })
                    .await?;
                Ok(
                    json!({ "key_id": row.key_id, "name": row.name, "role": row.role.as_str(), "workdirs": row.workdirs, "secret": secret }),
                )
            },
        ),
        Capability::new(
            local("admin_list_api_keys", Scope::Read, "Lists the API keys (never their secrets).", Annotations::READ),
            |ctx: CallCtx, _: NoArgs| async move {
                let keys = ctx.services.store.call(|s| s.list_keys()).await?;
                let keys: Vec<Value> = keys
                    .iter()
                    .map(|k| {
                        json!({
                            "key_id": k.key_id,
                            "name": k.name,
                            "role": k.role.as_str(),
                            "workdirs": k.workdirs,
                            "created_at": crate::clock::rfc3339(k.created_at),
                            "last_used_at": k.last_used_at.map(crate::clock::rfc3339),
                            "revoked_at": k.revoked_at.map(crate::clock::rfc3339),
                        })
                    })
                    .collect();
                Ok(json!({ "keys": keys }))
            },
        ),
        Capability::new(
            local(
                "admin_revoke_api_key",
                Scope::Write,
                "Revokes an API key by name or id; repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, a: RevokeKeyArgs| async move {
                let (now, cache) = (ctx.services.clock.now_ms(), ctx.services.auth.keys().clone());
                let name = a.name.clone();
                let revoked = ctx
                    .services
                    .store
                    .call(move |s| {
                        let row = s.revoke_key(&name, now)?;
                        cache.reload(s)?;
                        Ok(row)
                    })
                    .await?;
                let row = revoked
                    .ok_or_else(|| ToolError::new(code::KEY_NOT_FOUND, format!("no API key named {:?}", a.name)))?;
                Ok(
                    json!({ "key_id": row.key_id, "name": row.name, "revoked_at": row.revoked_at.map(crate::clock::rfc3339) }),
                )
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
