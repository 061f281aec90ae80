//! Argument validation through `capabilities.call`: every rule on a real bridge.
//!
//! Each refusal must be `INVALID_ARGUMENT` (or the tool's own code), name the parameter and
//! the rule, leave the task table unchanged, and never show a host path. Each leniency
//! (numeric strings, `null`/`""` as absent) is shown to take effect, not merely to pass.

use serde_json::{Value, json};

use bridge_proto::client::CallError;
use e2e::TestBridge;

/// Calls `name` and asserts the refusal: `code`, a message containing every needle, no host
/// path in it, and no task created. Returns the message.
async fn refused(bridge: &TestBridge, name: &str, args: Value, code: &str, needles: &[&str]) -> String {
    let tasks = bridge.count("tasks");
    let case = format!("{name} {args}");
    let message = match bridge.call(name, args).await {
        Ok(v) => panic!("{case}: expected {code}, got {v:#}"),
        Err(CallError::Remote { code: got, message }) => {
            assert_eq!(got, code, "{case}: {message}");
            message
        }
        Err(e) => panic!("{case}: expected {code}, got {e}"),
    };
    for needle in needles {
        assert!(message.contains(needle), "{case}: the message {message:?} does not say {needle:?}");
    }
    assert_no_host_path(bridge, &message, &case);
    assert_eq!(bridge.count("tasks"), tasks, "{case}: a refused call created a task");
    message
}

fn assert_no_host_path(bridge: &TestBridge, text: &str, case: &str) {
    for path in [bridge.root(), bridge.dir.path().to_path_buf()] {
        let path = path.display().to_string();
        assert!(!text.contains(&path), "{case}: {text:?} shows the host path {path}");
    }
    assert!(!text.contains("/tmp/"), "{case}: {text:?} shows a host path");
}

/// A valid submit of a (review, lease-free) fake task, for tests to spoil one field at a time.
fn submit(extra: Value) -> Value {
    let mut args = json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:ok", "profile": "review" });
    for (k, v) in extra.as_object().expect("object") {
        args[k] = v.clone();
    }
    args
}

/// Submits a review task (no writer lease, so tests can run several) and returns its id.
async fn start_task(bridge: &TestBridge, prompt: &str) -> String {
    let v = bridge.call("submit_agent_task", submit(json!({ "prompt": prompt }))).await.expect("submit");
    v["task_id"].as_str().expect("task_id").to_owned()
}

/// A finished task with `n` agent events (plus the bridge's own), for the read tools.
async fn task_with_events(bridge: &TestBridge, n: usize) -> (String, usize) {
    let id = start_task(bridge, &format!("events:{n}")).await;
    let task = bridge.wait_terminal(&id).await;
    assert_eq!(task["status"], "succeeded", "{task:#}");
    let all = bridge.call("read_agent_task_events", json!({ "task_id": id, "limit": 500 })).await.expect("events");
    let total = all["events"].as_array().expect("events").len();
    assert!(total > n, "{all:#}");
    (id, total)
}

#[tokio::test]
async fn an_unknown_parameter_is_refused_by_name() {
    let bridge = TestBridge::start().await;
    let (id, _) = task_with_events(&bridge, 1).await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "bogus_flag": true })),
        "INVALID_ARGUMENT",
        &["'bogus_flag'", "unknown"],
    )
    .await;
    // A near miss of a real name is still unknown (no silent aliasing).
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "workdir_alias": "repo" })),
        "INVALID_ARGUMENT",
        &["'workdir_alias'", "unknown"],
    )
    .await;
    refused(&bridge, "get_agent_task", json!({ "task_id": id, "wait": 5 }), "INVALID_ARGUMENT", &["'wait'", "unknown"])
        .await;
    refused(&bridge, "whoami", json!({ "verbose": true }), "INVALID_ARGUMENT", &["'verbose'", "unknown"]).await;
    refused(
        &bridge,
        "answer_agent_question",
        json!({ "task_id": id, "request_id": "req_x", "answers": [{ "question_id": "q1", "selected_option_ids": [], "note": "x" }] }),
        "INVALID_ARGUMENT",
        &["'answers[0].note'", "unknown"],
    )
    .await;
}

#[tokio::test]
async fn a_wrong_type_names_the_parameter_and_the_expected_type() {
    let bridge = TestBridge::start().await;
    let (id, _) = task_with_events(&bridge, 1).await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "prompt": 42 })),
        "INVALID_ARGUMENT",
        &["'prompt'", "must be a string"],
    )
    .await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "workdir": ["repo"] })),
        "INVALID_ARGUMENT",
        &["'workdir'", "must be a string"],
    )
    .await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "model": false })),
        "INVALID_ARGUMENT",
        &["'model'", "string"],
    )
    .await;
    refused(
        &bridge,
        "read_agent_task_events",
        json!({ "task_id": id, "limit": true }),
        "INVALID_ARGUMENT",
        &["'limit'", "must be an integer"],
    )
    .await;
    refused(
        &bridge,
        "read_agent_task_events",
        json!({ "task_id": id, "limit": 1.5 }),
        "INVALID_ARGUMENT",
        &["'limit'", "must be an integer"],
    )
    .await;
    refused(
        &bridge,
        "read_agent_task_events",
        json!({ "task_id": id, "limit": "five" }),
        "INVALID_ARGUMENT",
        &["'limit'", "must be an integer"],
    )
    .await;
    refused(&bridge, "get_agent_task", json!({ "task_id": 7 }), "INVALID_ARGUMENT", &["'task_id'", "must be a string"])
        .await;
    refused(
        &bridge,
        "answer_agent_question",
        json!({ "task_id": id, "request_id": "req_x", "answers": { "question_id": "q1" } }),
        "INVALID_ARGUMENT",
        &["'answers'", "must be an array"],
    )
    .await;
    refused(
        &bridge,
        "respond_agent_approval",
        json!({ "task_id": id, "request_id": "req_x", "decision": "deny", "granted_permission_ids": "all" }),
        "INVALID_ARGUMENT",
        &["'granted_permission_ids'", "array"],
    )
    .await;
}

#[tokio::test]
async fn out_of_bounds_values_are_refused_with_the_bound() {
    let bridge = TestBridge::start().await;
    let (id, _) = task_with_events(&bridge, 1).await;
    let events = |limit: Value| json!({ "task_id": id, "limit": limit });
    refused(&bridge, "read_agent_task_events", events(json!(0)), "INVALID_ARGUMENT", &["'limit'", "at least 1"]).await;
    refused(&bridge, "read_agent_task_events", events(json!(501)), "INVALID_ARGUMENT", &["'limit'", "at most 500"])
        .await;
    refused(&bridge, "read_agent_task_events", events(json!(-3)), "INVALID_ARGUMENT", &["'limit'", "at least"]).await;
    // A numeric string is converted first, then held to the same bounds.
    refused(&bridge, "read_agent_task_events", events(json!("501")), "INVALID_ARGUMENT", &["'limit'", "at most 500"])
        .await;
    refused(
        &bridge,
        "get_agent_task",
        json!({ "task_id": id, "wait_seconds": 26 }),
        "INVALID_ARGUMENT",
        &["'wait_seconds'", "at most 25"],
    )
    .await;
    refused(
        &bridge,
        "get_agent_task",
        json!({ "task_id": id, "wait_seconds": "26" }),
        "INVALID_ARGUMENT",
        &["'wait_seconds'", "at most 25"],
    )
    .await;
    refused(
        &bridge,
        "get_agent_task",
        json!({ "task_id": id, "wait_seconds": -1 }),
        "INVALID_ARGUMENT",
        &["'wait_seconds'", "at least 0"],
    )
    .await;
    refused(
        &bridge,
        "read_agent_task_result",
        json!({ "task_id": id, "max_bytes": 65537 }),
        "INVALID_ARGUMENT",
        &["'max_bytes'", "at most 65536"],
    )
    .await;
    refused(
        &bridge,
        "read_agent_task_events",
        json!({ "task_id": id, "after_event_id": -1 }),
        "INVALID_ARGUMENT",
        &["'after_event_id'", "at least 0"],
    )
    .await;
    refused(&bridge, "submit_agent_task", submit(json!({ "prompt": "" })), "INVALID_ARGUMENT", &["'prompt'"]).await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "idempotency_key": "k".repeat(257) })),
        "INVALID_ARGUMENT",
        &["'idempotency_key'", "256"],
    )
    .await;
    // The bounds themselves are allowed.
    for limit in [1, 500] {
        bridge.call("read_agent_task_events", events(json!(limit))).await.expect("a limit on the bound");
    }
    bridge.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 0 })).await.expect("wait_seconds 0");
}

#[tokio::test]
async fn a_value_outside_an_enum_lists_the_allowed_values() {
    let bridge = TestBridge::start().await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "profile": "admin" })),
        "INVALID_ARGUMENT",
        &["'profile'", "review", "workspace-write"],
    )
    .await;
    refused(&bridge, "submit_agent_task", submit(json!({ "profile": "Review" })), "INVALID_ARGUMENT", &["'profile'"])
        .await;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "runtime": "gpt-5" })),
        "INVALID_ARGUMENT",
        &["'runtime'", "codex", "claude"],
    )
    .await;
    refused(
        &bridge,
        "respond_agent_approval",
        json!({ "task_id": "agt_x", "request_id": "req_x", "decision": "maybe" }),
        "INVALID_ARGUMENT",
        &["'decision'", "approve_once", "deny"],
    )
    .await;
    refused(&bridge, "admin_list_tasks", json!({ "status": "done" }), "INVALID_ARGUMENT", &["'status'", "succeeded"])
        .await;
}

#[tokio::test]
async fn numeric_strings_become_numbers() {
    let bridge = TestBridge::start().await;
    let (id, total) = task_with_events(&bridge, 8).await;
    assert!(total > 5);

    let page =
        bridge.call("read_agent_task_events", json!({ "task_id": id, "limit": "5" })).await.expect("limit \"5\"");
    assert_eq!(page["events"].as_array().expect("events").len(), 5, "the string limit applied: {page:#}");
    let page =
        bridge.call("read_agent_task_events", json!({ "task_id": id, "limit": "1" })).await.expect("limit \"1\"");
    assert_eq!(page["events"].as_array().expect("events").len(), 1, "{page:#}");
    let first = page["events"][0]["event_id"].as_u64().expect("event id");
    let page = bridge
        .call("read_agent_task_events", json!({ "task_id": id, "after_event_id": first.to_string(), "limit": "500" }))
        .await
        .expect("after_event_id as a string");
    let events = page["events"].as_array().expect("events");
    assert_eq!(events.len(), total - 1, "{page:#}");
    assert!(events.iter().all(|e| e["event_id"].as_u64() > Some(first)), "{page:#}");

    // A spooled result read with a string max_bytes gets a chunk of at most that size.
    let big = start_task(&bridge, "big:300000").await;
    let task = bridge.wait_terminal(&big).await;
    assert_eq!(task["result"]["storage"], "spool", "{task:#}");
    let chunk = bridge
        .call("read_agent_task_result", json!({ "task_id": big, "offset_bytes": "0", "max_bytes": "16" }))
        .await
        .expect("max_bytes \"16\"");
    let text = chunk["text"].as_str().expect("text");
    assert!(!text.is_empty() && text.len() <= 16, "{chunk:#}");
    assert_eq!(chunk["next_offset_bytes"], text.len(), "{chunk:#}");

    // wait_seconds "1" long-polls a task that does not change for one second (not 0, not 25).
    let waiting = start_task(&bridge, "wait:60").await;
    bridge.wait_for(&waiting, |t| t["status"] == "running").await;
    let started = std::time::Instant::now();
    let task = bridge
        .call("get_agent_task", json!({ "task_id": waiting, "wait_seconds": "1" }))
        .await
        .expect("wait_seconds \"1\"");
    let waited = started.elapsed();
    assert_eq!(task["status"], "running", "{task:#}");
    assert!(waited >= std::time::Duration::from_millis(950), "wait_seconds \"1\" did not wait: {waited:?}");
    assert!(waited < std::time::Duration::from_secs(20), "wait_seconds \"1\" waited {waited:?}");
    bridge.call("cancel_agent_task", json!({ "task_id": waiting })).await.expect("cancel");
}

#[tokio::test]
async fn null_and_empty_strings_on_optional_parameters_mean_absent() {
    let bridge = TestBridge::start().await;
    let v = bridge
        .call(
            "submit_agent_task",
            submit(json!({
                "path": "", "model": null, "correlation_id": "", "idempotency_key": null, "continue_from_task_id": "",
            })),
        )
        .await
        .expect("null and \"\" are accepted as absent");
    let id = v["task_id"].as_str().expect("task_id").to_owned();
    assert_eq!(v["correlation_id"], Value::Null, "{v:#}");
    assert_eq!(v["idempotency_key"], Value::Null, "{v:#}");
    let task = bridge.wait_terminal(&id).await;
    assert_eq!(task["status"], "succeeded", "{task:#}");
    assert_eq!(task["path"], "", "the workdir root");
    assert_eq!(task["model"], Value::Null);
    assert_eq!(task["correlation_id"], Value::Null, "\"\" is absent, not an empty label");
    assert_eq!(task["continue_from_task_id"], Value::Null, "\"\" is absent, not a continuation");

    // The control: the same fields with values are kept, so the nulls above were dropped.
    let v = bridge
        .call("submit_agent_task", submit(json!({ "correlation_id": "label-1", "path": "src" })))
        .await
        .expect("submit");
    assert_eq!(v["correlation_id"], "label-1");
    let task = bridge.wait_terminal(v["task_id"].as_str().expect("task_id")).await;
    assert_eq!(task["path"], "src");

    // Optional numbers too: null / "" take the defaults.
    let page = bridge
        .call("read_agent_task_events", json!({ "task_id": id, "limit": null, "after_event_id": "" }))
        .await
        .expect("null limit");
    assert!(!page["events"].as_array().expect("events").is_empty());
    bridge.call("get_agent_task", json!({ "task_id": id, "wait_seconds": null })).await.expect("null wait_seconds");

    // A required parameter is never "absent": null and missing are refused alike.
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "prompt": null })),
        "INVALID_ARGUMENT",
        &["'prompt'", "required"],
    )
    .await;
}

#[tokio::test]
async fn a_missing_required_parameter_is_named() {
    let bridge = TestBridge::start().await;
    for missing in ["runtime", "workdir", "prompt"] {
        let mut args = submit(json!({}));
        args.as_object_mut().expect("object").remove(missing);
        let needle = format!("'{missing}' is required");
        refused(&bridge, "submit_agent_task", args, "INVALID_ARGUMENT", &[&needle]).await;
    }
    refused(&bridge, "get_agent_task", json!({}), "INVALID_ARGUMENT", &["'task_id' is required"]).await;
    refused(
        &bridge,
        "answer_agent_question",
        json!({ "task_id": "agt_x", "request_id": "req_x" }),
        "INVALID_ARGUMENT",
        &["'answers' is required"],
    )
    .await;
    refused(
        &bridge,
        "respond_agent_approval",
        json!({ "task_id": "agt_x", "request_id": "req_x" }),
        "INVALID_ARGUMENT",
        &["'decision' is required"],
    )
    .await;
}

#[tokio::test]
async fn nested_errors_name_the_full_path() {
    let bridge = TestBridge::start().await;
    let answer = |answers: Value| json!({ "task_id": "agt_x", "request_id": "req_x", "answers": answers });
    refused(
        &bridge,
        "answer_agent_question",
        answer(json!([{ "question_id": "q1", "selected_option_ids": [5] }])),
        "INVALID_ARGUMENT",
        &["'answers[0].selected_option_ids[0]'", "must be a string"],
    )
    .await;
    refused(
        &bridge,
        "answer_agent_question",
        answer(json!([{ "question_id": "q1", "selected_option_ids": ["yes"] }, { "selected_option_ids": ["no"] }])),
        "INVALID_ARGUMENT",
        &["'answers[1].question_id' is required"],
    )
    .await;
    refused(&bridge, "answer_agent_question", answer(json!([])), "INVALID_ARGUMENT", &["'answers'", "at least 1"])
        .await;
    refused(
        &bridge,
        "answer_agent_question",
        answer(json!(["q1"])),
        "INVALID_ARGUMENT",
        &["'answers[0]'", "must be an object"],
    )
    .await;
}

#[tokio::test]
async fn refusals_are_audited_as_invalid() {
    let bridge = TestBridge::start().await;
    refused(&bridge, "submit_agent_task", submit(json!({ "bogus": 1 })), "INVALID_ARGUMENT", &["'bogus'"]).await;
    let log = bridge
        .call("admin_read_audit_log", json!({ "capability": "submit_agent_task", "outcome": "invalid" }))
        .await
        .expect("audit log");
    let rows = log["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{log:#}");
    assert_eq!(rows[0]["error_code"], "INVALID_ARGUMENT");
    assert_eq!(rows[0]["surface"], "cli");
}

#[tokio::test]
async fn a_prompt_over_64_kib_is_refused_by_bytes() {
    let bridge = TestBridge::start().await;
    let limit = 65_536;
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "prompt": "x".repeat(limit + 1) })),
        "AGENT_PROMPT_TOO_LARGE",
        &["65536"],
    )
    .await;
    // 32769 characters, 65538 bytes: the limit counts bytes, not characters.
    refused(
        &bridge,
        "submit_agent_task",
        submit(json!({ "prompt": "é".repeat(limit / 2 + 1) })),
        "AGENT_PROMPT_TOO_LARGE",
        &[],
    )
    .await;
    // Exactly at the limit is accepted.
    let prompt = format!("complete:{}", "x".repeat(limit - "complete:".len()));
    assert_eq!(prompt.len(), limit);
    let v = bridge.call("submit_agent_task", submit(json!({ "prompt": prompt }))).await.expect("a 65536-byte prompt");
    let task = bridge.wait_terminal(v["task_id"].as_str().expect("task_id")).await;
    assert_eq!(task["status"], "succeeded", "{}", task["error"]);
}

#[tokio::test]
async fn path_rules_keep_the_task_inside_the_workdir() {
    let bridge = TestBridge::start().await;
    let outside = bridge.root().join("outside");
    std::fs::create_dir(&outside).expect("outside dir");
    std::os::unix::fs::symlink(&outside, bridge.repo.join("escape")).expect("symlink out");
    std::os::unix::fs::symlink(&bridge.docs, bridge.repo.join("src/to-docs")).expect("symlink to the other workdir");
    std::os::unix::fs::symlink(bridge.repo.join("src"), bridge.repo.join("inner")).expect("symlink in");
    std::fs::write(bridge.repo.join("README"), "a file").expect("file");
    std::os::unix::fs::symlink(bridge.repo.join("loop-b"), bridge.repo.join("loop-a")).expect("symlink loop");
    std::os::unix::fs::symlink(bridge.repo.join("loop-a"), bridge.repo.join("loop-b")).expect("symlink loop");

    let repo = bridge.repo.display().to_string();
    let cases = [
        ("/etc", "INVALID_WORKDIR_PATH"),
        ("/", "INVALID_WORKDIR_PATH"),
        (repo.as_str(), "INVALID_WORKDIR_PATH"),
        ("..", "INVALID_WORKDIR_PATH"),
        ("../docs", "INVALID_WORKDIR_PATH"),
        ("src/../..", "INVALID_WORKDIR_PATH"),
        ("src/..", "INVALID_WORKDIR_PATH"),
        ("src\\lib", "INVALID_WORKDIR_PATH"),
        ("~/x", "INVALID_WORKDIR_PATH"),
        ("missing", "WORKDIR_PATH_NOT_FOUND"),
        ("src/missing/deeper", "WORKDIR_PATH_NOT_FOUND"),
        ("escape", "INVALID_WORKDIR_PATH"),
        ("escape/", "INVALID_WORKDIR_PATH"),
        ("src/to-docs", "INVALID_WORKDIR_PATH"),
        ("README", "INVALID_WORKDIR_PATH"),
        ("README/sub", "INVALID_WORKDIR_PATH"),
        ("loop-a", "INVALID_WORKDIR_PATH"),
        ("src/nul\u{0}byte", "INVALID_WORKDIR_PATH"),
    ];
    for (path, code) in cases {
        let message = refused(&bridge, "submit_agent_task", submit(json!({ "path": path })), code, &[]).await;
        assert!(!message.contains(&outside.display().to_string()), "{path}: {message}");
    }

    // The controls: a real subdirectory, and a symlink that stays inside, are accepted.
    for path in ["src", "./src/", "inner"] {
        let v = bridge
            .call("submit_agent_task", submit(json!({ "path": path })))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let task = bridge.wait_terminal(v["task_id"].as_str().expect("task_id")).await;
        assert_eq!(task["status"], "succeeded", "{path}: {}", task["error"]);
    }
}
