//! The task view's text for every kind of row, pinned byte for byte, and what a caller sees
//! of a request clipped for display.

use serde_json::{Value, json};

use super::*;
use crate::model::{InteractionKind, InteractionStatus, TaskStatus};
use crate::store::interactions::InteractionRow;
use crate::store::tasks::ChangesBrief;

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
fn the_view_is_written_as_pinned_for_every_kind_of_row() {
    let now = 1_780_000_003_000;
    let cases = cases();
    assert_eq!(cases.len(), PINNED.len());
    for ((what, parts), (short, full)) in cases.iter().zip(PINNED) {
        assert_eq!(render(parts, false, now).get(), short, "{what}");
        assert_eq!(render(parts, true, now).get(), full.unwrap_or(short), "{what} (full)");
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

/// The text of each of [`cases`]' views, pinned byte for byte (keys sorted, stored JSON as
/// stored), and the text with the whole request where it differs: a change to what callers
/// read must change this on purpose.
const PINNED: [(&str, Option<&str>); 4] = [
    // a finished review task
    (
        concat!(
            r#"{"changes":{"added":0,"files":[],"files_changed":0,"reason":"a review task runs read-only and takes no baseline","removed":0,"status":"read_only","truncated":false},"#,
            r#""completed_at":"2026-05-28T20:26:41.000Z","#,
            r#""continue_from_task_id":null,"#,
            r#""correlation_id":null,"#,
            r#""created_at":"2026-05-28T20:26:40.000Z","#,
            r#""deadline_at":"2026-05-28T20:26:47.200Z","#,
            r#""error":null,"#,
            r#""event_count":7,"#,
            r#""events_dropped":0,"#,
            r#""final_response":"done \"quoted\" é 😀 \\ back\nslash\t<tag>&\u0001","#,
            r#""final_response_truncated":false,"#,
            r#""idempotency_key":null,"#,
            r#""isolation":{"mode":"in_place"},"#,
            r#""manifest":{"limits":{"task_timeout_seconds":7200},"runtime":"fake","workspace":{"alias":"repo"}},"#,
            r#""manifest_sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","#,
            r#""model":null,"#,
            r#""owner":"alice","#,
            r#""path":"src/app","#,
            r#""pending_request":null,"#,
            r#""plan":null,"#,
            r#""profile":"review","#,
            r#""result":{"retrievable":false,"sha256":"abababababababababababababababababababababababababababababababab","size_bytes":52,"storage":"inline"},"#,
            r#""runtime":"fake","#,
            r#""started_at":"2026-05-28T20:26:40.100Z","#,
            r#""status":"succeeded","#,
            r#""task_id":"agt_0123456789abcdef0123456789abcdef","#,
            r#""terminal":true,"#,
            r#""timing":{"human_wait_ms":0,"wall_ms":900},"#,
            r#""title":"Fix the build","#,
            r#""updated_at":"2026-05-28T20:26:41.000Z","#,
            r#""usage":null,"#,
            r#""workdir":"repo"}"#,
        ),
        None,
    ),
    // a failed writer task of a plan in a worktree, with usage and a change set
    (
        concat!(
            r#"{"changes":{"added":10,"files":[{"added":10,"path":"a.rs","removed":3,"status":"modified"}],"files_changed":2,"method":"git","removed":3,"status":"recorded","truncated":false},"#,
            r#""completed_at":"2026-05-28T20:26:41.000Z","#,
            r#""continue_from_task_id":null,"#,
            r#""correlation_id":null,"#,
            r#""created_at":"2026-05-28T20:26:40.000Z","#,
            r#""deadline_at":"2026-05-28T20:26:47.200Z","#,
            r#""error":{"code":"AGENT_PROVIDER_ERROR","message":"the agent exited with status 3 <b>"},"#,
            r#""event_count":7,"#,
            r#""events_dropped":0,"#,
            r#""final_response":"done \"quoted\" é 😀 \\ back\nslash\t<tag>&\u0001","#,
            r#""final_response_truncated":true,"#,
            r#""idempotency_key":null,"#,
            r#""isolation":{"base_commit":"1111111111111111111111111111111111111111","base_dirty":true,"base_ref":"HEAD","branch":"agent/0123456789ab","head_commit":null,"merged_commit":null,"mode":"worktree","reason":"its work could not be put on its branch","size":{"commits":2,"files_changed":3,"lines_added":10,"lines_removed":1},"start_commit":"1111111111111111111111111111111111111111","state":"kept"},"#,
            r#""manifest":{"limits":{"task_timeout_seconds":7200},"runtime":"fake","workspace":{"alias":"repo"}},"#,
            r#""manifest_sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","#,
            r#""model":null,"#,
            r#""owner":"alice","#,
            r#""path":"src/app","#,
            r#""pending_request":null,"#,
            r#""plan":{"plan_id":"pln_1","step":2},"#,
            r#""profile":"workspace-write","#,
            r#""result":{"retrievable":true,"sha256":"abababababababababababababababababababababababababababababababab","size_bytes":9000000,"storage":"spool"},"#,
            r#""runtime":"fake","#,
            r#""started_at":"2026-05-28T20:26:40.100Z","#,
            r#""status":"failed","#,
            r#""task_id":"agt_0123456789abcdef0123456789abcdef","#,
            r#""terminal":true,"#,
            r#""timing":{"human_wait_ms":1234,"wall_ms":900},"#,
            r#""title":"Fix the build","#,
            r#""updated_at":"2026-05-28T20:26:41.000Z","#,
            r#""usage":{"cache_write_input_tokens":10,"cached_input_tokens":1000,"cost_usd":0.0123456789,"input_tokens":12345678901,"model":"gpt-5.5-codex","output_tokens":456,"reasoning_tokens":7,"total_tokens":12345679357},"#,
            r#""workdir":"repo"}"#,
        ),
        None,
    ),
    // a task waiting for an approval clipped for display
    (
        concat!(
            r#"{"changes":{"added":0,"files":[],"files_changed":0,"reason":"a review task runs read-only and takes no baseline","removed":0,"status":"read_only","truncated":false},"#,
            r#""completed_at":null,"#,
            r#""continue_from_task_id":"agt_ffff","#,
            r#""correlation_id":"corr-9","#,
            r#""created_at":"2026-05-28T20:26:40.000Z","#,
            r#""deadline_at":"2026-05-28T20:26:47.200Z","#,
            r#""error":null,"#,
            r#""event_count":7,"#,
            r#""events_dropped":0,"#,
            r#""final_response":null,"#,
            r#""final_response_truncated":false,"#,
            r#""idempotency_key":"key é","#,
            r#""isolation":{"mode":"in_place"},"#,
            r#""manifest":{"limits":{"task_timeout_seconds":7200},"runtime":"fake","workspace":{"alias":"repo"}},"#,
            r#""manifest_sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","#,
            r#""model":"o3","#,
            r#""owner":"alice","#,
            r#""path":"src/app","#,
            r#""pending_request":{"created_at":"2026-05-28T20:26:40.500Z","expires_at":"2026-05-28T20:26:42.300Z","kind":"approval","payload":{"available_decisions":["approve_once","deny"],"command_display":"ls","title":"Run `ls`"},"request_id":"req_1","status":"pending"},"#,
            r#""plan":null,"#,
            r#""profile":"review","#,
            r#""result":null,"#,
            r#""runtime":"fake","#,
            r#""started_at":"2026-05-28T20:26:40.100Z","#,
            r#""status":"waiting_for_approval","#,
            r#""task_id":"agt_0123456789abcdef0123456789abcdef","#,
            r#""terminal":false,"#,
            r#""timing":{"human_wait_ms":2500,"wall_ms":2900},"#,
            r#""title":"Fix the build","#,
            r#""updated_at":"2026-05-28T20:26:41.000Z","#,
            r#""usage":null,"#,
            r#""workdir":"repo"}"#,
        ),
        Some(concat!(
            r#"{"changes":{"added":0,"files":[],"files_changed":0,"reason":"a review task runs read-only and takes no baseline","removed":0,"status":"read_only","truncated":false},"#,
            r#""completed_at":null,"#,
            r#""continue_from_task_id":"agt_ffff","#,
            r#""correlation_id":"corr-9","#,
            r#""created_at":"2026-05-28T20:26:40.000Z","#,
            r#""deadline_at":"2026-05-28T20:26:47.200Z","#,
            r#""error":null,"#,
            r#""event_count":7,"#,
            r#""events_dropped":0,"#,
            r#""final_response":null,"#,
            r#""final_response_truncated":false,"#,
            r#""idempotency_key":"key é","#,
            r#""isolation":{"mode":"in_place"},"#,
            r#""manifest":{"limits":{"task_timeout_seconds":7200},"runtime":"fake","workspace":{"alias":"repo"}},"#,
            r#""manifest_sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","#,
            r#""model":"o3","#,
            r#""owner":"alice","#,
            r#""path":"src/app","#,
            r#""pending_request":{"created_at":"2026-05-28T20:26:40.500Z","expires_at":"2026-05-28T20:26:42.300Z","kind":"approval","payload":{"available_decisions":["approve_once","deny"],"command_display":"ls","full_text":"the whole command","title":"Run `ls`"},"request_id":"req_1","status":"pending"},"#,
            r#""plan":null,"#,
            r#""profile":"review","#,
            r#""result":null,"#,
            r#""runtime":"fake","#,
            r#""started_at":"2026-05-28T20:26:40.100Z","#,
            r#""status":"waiting_for_approval","#,
            r#""task_id":"agt_0123456789abcdef0123456789abcdef","#,
            r#""terminal":false,"#,
            r#""timing":{"human_wait_ms":2500,"wall_ms":2900},"#,
            r#""title":"Fix the build","#,
            r#""updated_at":"2026-05-28T20:26:41.000Z","#,
            r#""usage":null,"#,
            r#""workdir":"repo"}"#,
        )),
    ),
    // stored text that is not JSON, a change set not recorded
    (
        concat!(
            r#"{"changes":{"reason":"no git","status":"not_recorded"},"#,
            r#""completed_at":"2026-05-28T20:26:41.000Z","#,
            r#""continue_from_task_id":null,"#,
            r#""correlation_id":null,"#,
            r#""created_at":"2026-05-28T20:26:40.000Z","#,
            r#""deadline_at":"2026-05-28T20:26:47.200Z","#,
            r#""error":null,"#,
            r#""event_count":7,"#,
            r#""events_dropped":0,"#,
            r#""final_response":"done \"quoted\" é 😀 \\ back\nslash\t<tag>&\u0001","#,
            r#""final_response_truncated":false,"#,
            r#""idempotency_key":null,"#,
            r#""isolation":{"mode":"in_place"},"#,
            r#""manifest":null,"#,
            r#""manifest_sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","#,
            r#""model":null,"#,
            r#""owner":"alice","#,
            r#""path":"src/app","#,
            r#""pending_request":null,"#,
            r#""plan":null,"#,
            r#""profile":"review","#,
            r#""result":{"retrievable":false,"sha256":"abababababababababababababababababababababababababababababababab","size_bytes":52,"storage":"inline"},"#,
            r#""runtime":"fake","#,
            r#""started_at":"2026-05-28T20:26:40.100Z","#,
            r#""status":"succeeded","#,
            r#""task_id":"agt_0123456789abcdef0123456789abcdef","#,
            r#""terminal":true,"#,
            r#""timing":{"human_wait_ms":0,"wall_ms":900},"#,
            r#""title":"Fix the build","#,
            r#""updated_at":"2026-05-28T20:26:41.000Z","#,
            r#""usage":null,"#,
            r#""workdir":"repo"}"#,
        ),
        None,
    ),
];
