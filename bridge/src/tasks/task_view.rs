//! The task view, written straight from its rows to JSON text: `get_agent_task` is the call
//! callers poll, and building a JSON tree of it, then writing the tree, was most of the
//! bridge's work per poll. The stored JSON (the manifest, the request's payload) goes in as it
//! was stored. The keys are written in sorted order, the order the bridge's other views (JSON
//! trees) write theirs; the tests pin the text of every kind of row.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::clock::rfc3339;
use crate::model::{ResultStorage, Usage};
use crate::store::accounting::ChangesSummary;
use crate::store::tasks::{TaskParts, TaskRow};
use crate::store::worktrees::WorktreeRow;

/// The task view of `parts` at `now`. A pending request that was clipped for display keeps
/// its whole text (`full_text`) only with `full`.
pub fn render(parts: &TaskParts, full: bool, now: i64) -> Box<RawValue> {
    let t = &parts.task;
    let pending = parts.pending.as_ref();
    let view = TaskView {
        changes: match &parts.changes {
            Some(c) => Json::Tree(changes_view(c)),
            None if t.profile == "review" => Json::Raw(&READ_ONLY_CHANGES),
            None => Json::Tree(Value::Null),
        },
        completed_at: t.completed_at.map(rfc3339),
        continue_from_task_id: t.continue_from_task_id.as_deref(),
        correlation_id: t.correlation_id.as_deref(),
        created_at: rfc3339(t.created_at),
        deadline_at: rfc3339(t.deadline_at),
        error: t.error_code.as_deref().map(|code| ErrorView { code, message: t.error_message.as_deref() }),
        event_count: t.event_count,
        events_dropped: t.events_dropped,
        final_response: t.final_response.as_deref(),
        final_response_truncated: t.result_storage == Some(ResultStorage::Spool),
        idempotency_key: t.idempotency_key.as_deref(),
        isolation: match &parts.worktree {
            Some(w) => Json::Tree(isolation_view(w)),
            None => Json::Raw(&IN_PLACE),
        },
        manifest: stored_json(&t.manifest_json),
        manifest_sha256: &t.manifest_sha256,
        model: t.requested_model.as_deref(),
        owner: &t.principal,
        path: &t.relative_cwd,
        pending_request: pending.map(|p| RequestView {
            created_at: rfc3339(p.created_at),
            expires_at: rfc3339(p.expires_at),
            kind: p.kind.as_str(),
            payload: payload(&p.payload_json, full),
            request_id: &p.request_id,
            status: p.status.as_str(),
        }),
        plan: parts.plan.as_ref().map(|(plan_id, step)| PlanView { plan_id, step: *step }),
        profile: &t.profile,
        result: t.result_storage.map(|storage| ResultView {
            retrievable: storage == ResultStorage::Spool,
            sha256: t.result_sha256.as_deref(),
            size_bytes: t.result_size_bytes,
            storage: storage.as_str(),
        }),
        runtime: &t.runtime,
        started_at: t.started_at.map(rfc3339),
        status: t.status.as_str(),
        task_id: &t.task_id,
        terminal: t.status.is_terminal(),
        timing: timing(t, pending.map(|p| p.created_at), now),
        title: t.title.as_deref(),
        updated_at: rfc3339(t.updated_at),
        usage: t.usage.as_ref().map(UsageView::of),
        workdir: &t.workdir_alias,
    };
    serde_json::value::to_raw_value(&view).unwrap_or_else(|e| {
        tracing::error!(cause = %e, "cannot write a task view");
        serde_json::value::to_raw_value(&json!({ "task_id": t.task_id, "status": t.status.as_str() }))
            .unwrap_or_default()
    })
}

/// The view's fields, in sorted order (see the module documentation).
#[derive(Serialize)]
struct TaskView<'a> {
    changes: Json<'a>,
    completed_at: Option<String>,
    continue_from_task_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    created_at: String,
    deadline_at: String,
    error: Option<ErrorView<'a>>,
    event_count: i64,
    events_dropped: i64,
    final_response: Option<&'a str>,
    final_response_truncated: bool,
    idempotency_key: Option<&'a str>,
    isolation: Json<'a>,
    manifest: Json<'a>,
    manifest_sha256: &'a str,
    model: Option<&'a str>,
    owner: &'a str,
    path: &'a str,
    pending_request: Option<RequestView<'a>>,
    plan: Option<PlanView<'a>>,
    profile: &'a str,
    result: Option<ResultView<'a>>,
    runtime: &'a str,
    started_at: Option<String>,
    status: &'static str,
    task_id: &'a str,
    terminal: bool,
    timing: Timing,
    title: Option<&'a str>,
    updated_at: String,
    usage: Option<UsageView<'a>>,
    workdir: &'a str,
}

#[derive(Serialize)]
struct ErrorView<'a> {
    code: &'a str,
    message: Option<&'a str>,
}

#[derive(Serialize)]
struct RequestView<'a> {
    created_at: String,
    expires_at: String,
    kind: &'static str,
    payload: Json<'a>,
    request_id: &'a str,
    status: &'static str,
}

#[derive(Serialize)]
struct PlanView<'a> {
    plan_id: &'a str,
    step: i64,
}

#[derive(Serialize)]
struct ResultView<'a> {
    retrievable: bool,
    sha256: Option<&'a str>,
    size_bytes: Option<i64>,
    storage: &'static str,
}

/// `timing`: how long the task has run and how long it waited for a human.
#[derive(Serialize)]
pub struct Timing {
    human_wait_ms: i64,
    wall_ms: Option<i64>,
}

/// A task's timing at `now`; `pending_since` is when its pending request was opened.
pub fn timing(t: &TaskRow, pending_since: Option<i64>, now: i64) -> Timing {
    let wall_ms = t.started_at.map(|s| (t.completed_at.unwrap_or(now) - s).max(0));
    let waiting = pending_since.filter(|_| t.completed_at.is_none()).map_or(0, |since| (now - since).max(0));
    Timing { human_wait_ms: t.human_wait_ms + waiting, wall_ms }
}

/// `usage`: what the runtime reported.
#[derive(Serialize)]
pub struct UsageView<'a> {
    cache_write_input_tokens: u64,
    cached_input_tokens: u64,
    cost_usd: Option<f64>,
    input_tokens: u64,
    model: Option<&'a str>,
    output_tokens: u64,
    reasoning_tokens: Option<u64>,
    total_tokens: u64,
}

impl UsageView<'_> {
    /// The view of `u`.
    pub fn of(u: &Usage) -> UsageView<'_> {
        UsageView {
            cache_write_input_tokens: u.cache_write_input_tokens,
            cached_input_tokens: u.cached_input_tokens,
            cost_usd: u.cost_usd,
            input_tokens: u.input_tokens,
            model: u.model.as_deref(),
            output_tokens: u.output_tokens,
            reasoning_tokens: u.reasoning_tokens,
            total_tokens: u.input_tokens.saturating_add(u.output_tokens),
        }
    }
}

/// JSON kept as text when it is valid, `null` when the stored text is not (never an invalid
/// answer).
pub(super) enum Json<'a> {
    Raw(&'a RawValue),
    Tree(Value),
}

impl Serialize for Json<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Raw(raw) => raw.serialize(s),
            Json::Tree(value) => value.serialize(s),
        }
    }
}

/// [`read_only_changes`], written once.
static READ_ONLY_CHANGES: std::sync::LazyLock<Box<RawValue>> = std::sync::LazyLock::new(|| {
    serde_json::value::to_raw_value(&read_only_changes()).unwrap_or_else(|_| RawValue::NULL.to_owned())
});

/// The isolation of a task in place, written once.
static IN_PLACE: std::sync::LazyLock<Box<RawValue>> = std::sync::LazyLock::new(|| {
    serde_json::value::to_raw_value(&json!({ "mode": "in_place" })).unwrap_or_else(|_| RawValue::NULL.to_owned())
});

/// A worktree task's `isolation`: its branch, where the branch started, where this task found
/// and left it, what became of it, and whether the checkout had changes the task did not see.
pub fn isolation_view(w: &WorktreeRow) -> Value {
    json!({
        "mode": "worktree",
        "branch": w.branch,
        "base_ref": w.base_ref,
        "base_commit": w.base_commit,
        "start_commit": w.start_commit,
        "head_commit": w.head_commit,
        "base_dirty": w.base_dirty,
        "state": w.state.as_str(),
        "reason": w.reason,
        "size": w.size.map(|z| json!({
            "commits": z.ahead,
            "files_changed": z.files_changed,
            "lines_added": z.lines_added,
            "lines_removed": z.lines_removed,
        })),
        "merged_commit": w.merged_commit,
    })
}

/// An agent branch neither merged nor discarded, for `doctor` and the board: where it is,
/// which task to hand it back through, and what it holds.
/// Its task's `isolation` view with where it is.
pub fn branch_view(w: &WorktreeRow) -> Value {
    let mut view = isolation_view(w);
    view["workdir"] = json!(w.workdir_alias);
    view["task_id"] = json!(w.task_id);
    view["updated_at"] = json!(crate::clock::rfc3339(w.updated_at));
    view
}

pub(super) fn stored_json(text: &str) -> Json<'_> {
    // Checked where it lies, not copied.
    match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) => Json::Raw(raw),
        Err(_) => Json::Tree(Value::Null),
    }
}

/// A request's payload; without `full`, its whole text (`full_text`) is left out.
fn payload(text: &str, full: bool) -> Json<'_> {
    if full || !text.contains("\"full_text\"") {
        return stored_json(text);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut map)) => {
            map.remove("full_text");
            Json::Tree(Value::Object(map))
        }
        Ok(other) => Json::Tree(other),
        Err(_) => Json::Tree(Value::Null),
    }
}

/// The public view of a stored change set: its summary, or why there is none.
pub fn changes_view(c: &ChangesSummary) -> Value {
    let mut view = c
        .summary_json
        .as_deref()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    view["status"] = json!(c.status);
    if let Some(reason) = &c.reason {
        view["reason"] = json!(reason);
    }
    view
}

/// What a review task changed: nothing it may — it runs with the runtime's read-only sandbox,
/// and holds no writer lease, so no baseline is taken (another writer's changes would not be
/// its own).
pub(super) fn read_only_changes() -> Value {
    json!({
        "status": "read_only",
        "reason": "a review task runs read-only and takes no baseline",
        "files": [],
        "files_changed": 0,
        "added": 0,
        "removed": 0,
        "truncated": false,
    })
}

#[cfg(test)]
#[path = "task_view_tests.rs"]
mod tests;
