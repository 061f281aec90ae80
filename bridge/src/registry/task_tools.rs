//! The task capabilities: submit a task, follow it (status, events, result), answer what it
//! asks (approvals, questions), steer it and cancel it. Each parses its arguments and calls the
//! task service.

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{Annotations, Scope};
use super::shared::{IsolationArg, ProfileArg, RuntimeArg, meta, tasks};
use super::{CallCtx, Capability};
use crate::config::Role;
use crate::provider::handback::Strategy;
use crate::tasks::SubmitRequest;

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
    /// `worktree`: work in a git worktree of its own, on a new branch, beside other tasks;
    /// `in_place`: in the workdir itself, one writer at a time (default: the workdir's setting).
    isolation: Option<IsolationArg>,
    /// For `worktree`: the commit, branch or tag the new branch starts from (default: `HEAD`).
    #[schemars(length(min = 1, max = 256))]
    base_ref: Option<String>,
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

/// How a task's branch is merged.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
enum StrategyArg {
    /// Only if the checkout's branch has not moved since the task's branch started.
    #[default]
    #[serde(rename = "ff_only")]
    FfOnly,
    /// A merge commit.
    #[serde(rename = "merge")]
    Merge,
    /// One commit holding the branch's whole change.
    #[serde(rename = "squash")]
    Squash,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MergeArgs {
    /// The worktree task whose branch to merge (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// `ff_only` (default), `merge` or `squash`.
    #[serde(default)]
    strategy: StrategyArg,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetTaskArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Wait up to this many seconds for the task to end or for its pending approval or question
    /// to appear, be answered or change (starting to run does not end the wait).
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
#[serde(deny_unknown_fields)]
struct DiffArgs {
    /// The task id (`agt_…`).
    #[schemars(length(max = 64))]
    task_id: String,
    /// Only this file's section (its path relative to the workdir, as the change set lists it).
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
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

const WRITE: Annotations = Annotations { read_only: false, destructive: true, idempotent: false, open_world: true };

/// The task capabilities, in `tools/list` order.
pub(super) fn all() -> Vec<Capability> {
    vec![
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
                    isolation: a.isolation.map(Into::into),
                    base_ref: a.base_ref,
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
                "Shows a task's status, pending approval or question, error and result, what it changed (files, +added −removed) and what it cost (tokens, cost, time); wait_seconds (up to 25) waits until the task ends or an approval or question appears or is resolved, not merely until it runs.",
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
                "read_agent_task_diff",
                Scope::Read,
                Role::Viewer,
                "Reads what a finished task changed in its workdir as a unified diff (paths relative to the workdir), whole or one file's section, in chunks that never split a character.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: DiffArgs| async move {
                tasks(&ctx).diff_chunk(&ctx.principal, &a.task_id, a.path, a.offset_bytes, a.max_bytes as usize).await
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
                "merge_agent_task",
                Scope::Write,
                Role::Operator,
                "Merges a finished worktree task's branch into the branch the workdir's checkout is on (ff_only by default, or merge, or squash), only if that needs no conflict resolution and touches no uncommitted change of the checkout; otherwise it changes nothing and says why. Repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, a: MergeArgs| async move {
                let strategy = match a.strategy {
                    StrategyArg::FfOnly => Strategy::FfOnly,
                    StrategyArg::Merge => Strategy::Merge,
                    StrategyArg::Squash => Strategy::Squash,
                };
                tasks(&ctx).merge(&ctx.principal, &a.task_id, strategy).await
            },
        ),
        Capability::new(
            meta(
                "discard_agent_task",
                Scope::Write,
                Role::Operator,
                "Deletes a finished worktree task's branch (its work is gone). Repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, a: TaskArgs| async move { tasks(&ctx).discard(&ctx.principal, &a.task_id).await },
        ),
    ]
}
