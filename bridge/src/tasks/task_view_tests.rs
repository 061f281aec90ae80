//! The written task view against the JSON tree of the same rows (the shape the view always
//! had, kept here as the reference): the same text, key for key and byte for byte, for every
//! kind of row.

use serde_json::{Value, json};

use super::*;
use crate::model::{InteractionKind, InteractionStatus, TaskStatus};
use crate::store::interactions::InteractionRow;
use crate::store::tasks::ChangesBrief;

/// The view as a JSON tree, written the way it was before it was written from the rows.
fn reference(parts: &TaskParts, full: bool, now: i64) -> Value {
    let t = &parts.task;
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let result = t.result_storage.map(|storage| {
        json!({
            "storage": storage.as_str(),
            "size_bytes": t.result_size_bytes,
            "sha256": t.result_sha256,
            "retrievable": storage == ResultStorage::Spool,
        })
    });
    let pending = parts.pending.as_ref().map(|r| {
        let mut payload = parse(&r.payload_json);
        if !full && let Some(map) = payload.as_object_mut() {
            map.remove("full_text");
        }
        json!({
            "request_id": r.request_id,
            "kind": r.kind.as_str(),
            "status": r.status.as_str(),
            "created_at": rfc3339(r.created_at),
            "expires_at": rfc3339(r.expires_at),
            "payload": payload,
        })
    });
    let wall = t.started_at.map(|s| (t.completed_at.unwrap_or(now) - s).max(0));
    let waiting = parts
        .pending
        .as_ref()
        .map(|p| p.created_at)
        .filter(|_| t.completed_at.is_none())
        .map_or(0, |since| (now - since).max(0));
    json!({
        "task_id": t.task_id,
        "status": t.status.as_str(),
        "terminal": t.status.is_terminal(),
        "runtime": t.runtime,
        "workdir": t.workdir_alias,
        "path": t.relative_cwd,
        "profile": t.profile,
        "model": t.requested_model,
        "owner": t.principal,
        "created_at": rfc3339(t.created_at),
        "started_at": t.started_at.map(rfc3339),
        "updated_at": rfc3339(t.updated_at),
        "completed_at": t.completed_at.map(rfc3339),
        "deadline_at": rfc3339(t.deadline_at),
        "correlation_id": t.correlation_id,
        "idempotency_key": t.idempotency_key,
        "continue_from_task_id": t.continue_from_task_id,
        "error": t.error_code.as_ref().map(|c| json!({ "code": c, "message": t.error_message })),
        "pending_request": pending,
        "final_response": t.final_response,
        "final_response_truncated": t.result_storage == Some(ResultStorage::Spool),
        "result": result,
        "event_count": t.event_count,
        "events_dropped": t.events_dropped,
        "manifest": parse(&t.manifest_json),
        "manifest_sha256": t.manifest_sha256,
        "title": t.title,
        "usage": t.usage.as_ref().map(|u| json!({
            "input_tokens": u.input_tokens,
            "cached_input_tokens": u.cached_input_tokens,
            "cache_write_input_tokens": u.cache_write_input_tokens,
            "output_tokens": u.output_tokens,
            "reasoning_tokens": u.reasoning_tokens,
            "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
            "cost_usd": u.cost_usd,
            "model": u.model,
        })),
        "timing": json!({ "wall_ms": wall, "human_wait_ms": t.human_wait_ms + waiting }),
        "changes": match &parts.changes {
            Some(c) => changes_view(c),
            None if t.profile == "review" => read_only_changes(),
            None => Value::Null,
        },
        "plan": parts.plan.as_ref().map_or(Value::Null, |(plan_id, step)| json!({ "plan_id": plan_id, "step": step })),
        "isolation": match &parts.worktree {
            Some(w) => isolation_view(w),
            None => json!({ "mode": "in_place" }),
        },
    })
}

fn task() -> TaskRow {
    TaskRow {
        task_id: "agt_0123456789abcdef0123456789abcdef".into(),
        principal: "alice".into(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: "src/app".into(),
        profile: "review".into(),
        requested_model: None,
        status: TaskStatus::Succeeded,
        created_at: 1_780_000_000_000,
        started_at: Some(1_780_000_000_100),
        updated_at: 1_780_000_001_000,
        completed_at: Some(1_780_000_001_000),
        deadline_at: 1_780_000_007_200,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: None,
        request_fingerprint: Some("never shown".into()),
        native_session_id: Some("never shown".into()),
        final_response: Some("done \"quoted\" é 😀 \\ back\nslash\t<tag>&\u{1}".into()),
        result_storage: Some(ResultStorage::Inline),
        result_size_bytes: Some(52),
        result_sha256: Some("ab".repeat(32)),
        manifest_json: r#"{"limits":{"task_timeout_seconds":7200},"runtime":"fake","workspace":{"alias":"repo"}}"#
            .into(),
        manifest_sha256: "cd".repeat(32),
        error_code: None,
        error_message: None,
        pending_request_id: None,
        event_count: 7,
        events_dropped: 0,
        title: Some("Fix the build".into()),
        usage: None,
        human_wait_ms: 0,
        changes: None,
        worktree_state: None,
    }
}

fn parts(task: TaskRow) -> TaskParts {
    TaskParts { task, pending: None, plan: None, changes: None, worktree: None }
}

fn request(payload: Value) -> InteractionRow {
    InteractionRow {
        request_id: "req_1".into(),
        task_id: "agt_0123456789abcdef0123456789abcdef".into(),
        kind: InteractionKind::Approval,
        status: InteractionStatus::Pending,
        payload_json: payload.to_string(),
        created_at: 1_780_000_000_500,
        expires_at: 1_780_000_002_300,
        resolved_at: None,
        resolution_json: None,
    }
}

fn cases() -> Vec<(&'static str, TaskParts)> {
    let mut cases = vec![("a finished review task", parts(task()))];

    let mut t = task();
    t.profile = "workspace-write".into();
    t.status = TaskStatus::Failed;
    t.error_code = Some("AGENT_PROVIDER_ERROR".into());
    t.error_message = Some("the agent exited with status 3 <b>".into());
    t.result_storage = Some(ResultStorage::Spool);
    t.result_size_bytes = Some(9_000_000);
    t.usage = Some(Usage {
        input_tokens: 12_345_678_901,
        cached_input_tokens: 1_000,
        cache_write_input_tokens: 10,
        output_tokens: 456,
        reasoning_tokens: Some(7),
        cost_usd: Some(0.012_345_678_9),
        model: Some("gpt-5.5-codex".into()),
    });
    t.human_wait_ms = 1_234;
    t.changes = Some(ChangesBrief {
        status: "recorded".into(),
        reason: None,
        files_changed: 2,
        added: 10,
        removed: 3,
        truncated: false,
    });
    let mut writer = parts(t);
    writer.changes = Some(ChangesSummary {
        status: "recorded".into(),
        reason: None,
        summary_json: Some(
            json!({ "files": [{ "path": "a.rs", "status": "modified", "added": 10, "removed": 3 }],
                    "files_changed": 2, "added": 10, "removed": 3, "method": "git", "truncated": false })
            .to_string(),
        ),
    });
    writer.plan = Some(("pln_1".into(), 2));
    writer.worktree = Some(crate::store::worktrees::WorktreeRow {
        task_id: "agt_0123456789abcdef0123456789abcdef".into(),
        workdir_alias: "repo".into(),
        branch: "agent/0123456789ab".into(),
        origin_task_id: "agt_0123456789abcdef0123456789abcdef".into(),
        base_ref: "HEAD".into(),
        base_commit: Some("1".repeat(40)),
        start_commit: Some("1".repeat(40)),
        head_commit: None,
        base_dirty: Some(true),
        state: crate::model::WorktreeState::Kept,
        reason: Some("its work could not be put on its branch".into()),
        size: Some(crate::store::worktrees::BranchSize {
            ahead: 2,
            files_changed: 3,
            lines_added: 10,
            lines_removed: 1,
        }),
        merged_commit: None,
        created_at: 1,
        updated_at: 2,
    });
    cases.push(("a failed writer task of a plan in a worktree, with usage and a change set", writer));

    let mut t = task();
    t.status = TaskStatus::WaitingForApproval;
    t.completed_at = None;
    t.result_storage = None;
    t.final_response = None;
    t.pending_request_id = Some("req_1".into());
    t.requested_model = Some("o3".into());
    t.correlation_id = Some("corr-9".into());
    t.idempotency_key = Some("key é".into());
    t.continue_from_task_id = Some("agt_ffff".into());
    let mut waiting = parts(t);
    waiting.pending = Some(request(json!({ "title": "Run `ls`", "command_display": "ls",
        "full_text": "the whole command", "available_decisions": ["approve_once", "deny"] })));
    cases.push(("a task waiting for an approval clipped for display", waiting));

    let mut t = task();
    t.manifest_json = "{not json".into();
    let mut broken = parts(t);
    broken.changes =
        Some(ChangesSummary { status: "not_recorded".into(), reason: Some("no git".into()), summary_json: None });
    cases.push(("stored text that is not JSON, a change set not recorded", broken));
    cases
}

#[test]
fn the_written_view_is_the_json_tree_of_the_same_rows_byte_for_byte() {
    let now = 1_780_000_003_000;
    for (what, parts) in cases() {
        for full in [false, true] {
            let written = render(&parts, full, now);
            let expected = reference(&parts, full, now);
            assert_eq!(written.get(), expected.to_string(), "{what} (full: {full})");
        }
    }
}

#[test]
fn a_clipped_request_keeps_its_whole_text_only_when_asked() {
    let waiting = cases().remove(2).1;
    let short: Value = serde_json::from_str(render(&waiting, false, 0).get()).expect("JSON");
    let full: Value = serde_json::from_str(render(&waiting, true, 0).get()).expect("JSON");
    assert!(short["pending_request"]["payload"].get("full_text").is_none(), "{short:#}");
    assert_eq!(full["pending_request"]["payload"]["full_text"], "the whole command");
    // Never the provider's session id or the request fingerprint.
    assert!(!render(&waiting, true, 0).get().contains("never shown"));
}
