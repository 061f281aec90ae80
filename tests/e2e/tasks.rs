//! The task lifecycle against a real bridge: approvals, questions, steering, cancellation,
//! continuation, long-polling, the active-task cap and the writer lease.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::{Options, TestBridge, code, event_types, poll_until};

/// The four decisions every fake approval offers.
const ALL_DECISIONS: [&str; 4] = ["approve_once", "approve_session", "deny", "cancel_task"];

async fn respond(
    b: &TestBridge,
    task_id: &str,
    request_id: &str,
    decision: &str,
) -> Result<Value, bridge_proto::client::CallError> {
    b.call("respond_agent_approval", json!({ "task_id": task_id, "request_id": request_id, "decision": decision }))
        .await
}

async fn answer(
    b: &TestBridge,
    task_id: &str,
    request_id: &str,
    answers: Value,
) -> Result<Value, bridge_proto::client::CallError> {
    b.call("answer_agent_question", json!({ "task_id": task_id, "request_id": request_id, "answers": answers })).await
}

fn request_id(task: &Value) -> String {
    task["pending_request"]["request_id"].as_str().unwrap_or_else(|| panic!("no pending request: {task:#}")).to_owned()
}

#[tokio::test]
async fn approval_is_requested_resolved_once_and_checked() {
    let b = TestBridge::start().await;
    let id = b.submit("approval:make test").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let req = &t["pending_request"];
    assert_eq!(req["kind"], "approval", "{t:#}");
    assert_eq!(req["status"], "pending");
    assert_eq!(req["payload"]["title"], "Run `make test`");
    assert_eq!(req["payload"]["category"], "command");
    assert_eq!(req["payload"]["available_decisions"], json!(ALL_DECISIONS));
    let rid = request_id(&t);
    assert!(rid.starts_with("req_"), "{rid}");
    // expires_at = min(deadline, now + 1800 s): with the defaults, 30 minutes after creation.
    let expires = req["expires_at"].as_str().expect("expires_at");
    assert!(expires > req["created_at"].as_str().unwrap() && expires < t["deadline_at"].as_str().unwrap(), "{t:#}");
    let (created, expires_ms): (i64, i64) = b
        .db()
        .query_row("SELECT created_at, expires_at FROM interactions WHERE request_id = ?1", [&rid], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("interaction row");
    assert_eq!(expires_ms - created, 1_800_000);

    // Wrong answers leave the request pending.
    let wrong = b
        .call(
            "respond_agent_approval",
            json!({ "task_id": id, "request_id": "req_0123456789abcdef01234567", "decision": "approve_once" }),
        )
        .await;
    assert_eq!(code(&wrong), "REQUEST_NOT_FOUND");
    let as_question = answer(&b, &id, &rid, json!([{ "question_id": "q1", "selected_option_ids": ["yes"] }])).await;
    assert_eq!(code(&as_question), "INVALID_QUESTION_ANSWER");
    let outside = b
        .call(
            "respond_agent_approval",
            json!({ "task_id": id, "request_id": rid, "decision": "approve_once", "granted_permission_ids": ["net.all"] }),
        )
        .await;
    assert_eq!(code(&outside), "PERMISSION_OUTSIDE_POLICY");
    assert_eq!(b.get(&id).await["status"], "waiting_for_approval");

    let ok = respond(&b, &id, &rid, "approve_once").await.expect("approve");
    assert_eq!(ok["resolved"], true);
    assert_eq!(ok["decision"], "approve_once");
    let done = b.wait_terminal(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    assert_eq!(done["final_response"], "approval=approve_once");
    assert!(done["pending_request"].is_null());

    let events = b.all_events(&id).await;
    let types = event_types(&events);
    for expected in ["approval.requested", "approval.resolved", "command.started", "task.completed"] {
        assert!(types.iter().any(|t| t == expected), "no {expected} in {types:?}");
    }
    let requested = events.iter().find(|e| e["event_type"] == "approval.requested").unwrap();
    assert_eq!(requested["payload"]["request_id"], rid.as_str());
    let resolved = events.iter().find(|e| e["event_type"] == "approval.resolved").unwrap();
    assert_eq!(resolved["payload"]["decision"], "approve_once");
    let pos = |t: &str| types.iter().position(|x| x == t).unwrap();
    assert!(
        pos("approval.requested") < pos("approval.resolved") && pos("approval.resolved") < pos("command.started"),
        "{types:?}"
    );

    let again = respond(&b, &id, &rid, "approve_once").await;
    assert_eq!(code(&again), "REQUEST_ALREADY_RESOLVED");

    // A deny is relayed as such; a request id of another task is not found on this one.
    b.writer_idle().await;
    let id2 = b.submit("approval:rm -rf build").await;
    let t2 = b.wait_status(&id2, "waiting_for_approval").await;
    let foreign = respond(&b, &id2, &rid, "deny").await;
    assert_eq!(code(&foreign), "REQUEST_NOT_FOUND");
    respond(&b, &id2, &request_id(&t2), "deny").await.expect("deny");
    let denied = b.wait_terminal(&id2).await;
    assert_eq!(denied["status"], "succeeded", "{denied:#}");
    assert_eq!(denied["final_response"], "approval=deny");
    assert!(!event_types(&b.all_events(&id2).await).contains(&"command.started".to_owned()));
}

#[tokio::test]
async fn cancel_task_decision_cancels_before_returning_and_stales_the_request() {
    let b = TestBridge::start().await;
    let id = b.submit("approval:deploy").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let rid = request_id(&t);
    assert!(!b.lease_is_free(1), "a writer task holds the lease");

    let r = respond(&b, &id, &rid, "cancel_task").await.expect("cancel_task");
    assert_eq!(r["status"], "cancelled", "{r:#}");
    let now = b.get(&id).await;
    assert_eq!(now["status"], "cancelled", "{now:#}");
    assert_eq!(now["terminal"], true);
    assert!(now["pending_request"].is_null());

    poll_until("the lease is released after cleanup", Duration::from_secs(15), || b.lease_is_free(1)).await;
    poll_until("the guard is cleared on proof", Duration::from_secs(15), || b.guard_count() == 0).await;

    let late = respond(&b, &id, &rid, "approve_once").await;
    let late = code(&late);
    assert!(late == "REQUEST_STALE" || late == "REQUEST_ALREADY_RESOLVED", "{late}");
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "cancelled", "a cancelled task stays cancelled: {end:#}");
    assert!(end["final_response"].is_null());
    let types = event_types(&b.all_events(&id).await);
    assert_eq!(types.iter().filter(|t| *t == "task.cancelled").count(), 1, "{types:?}");
    assert!(!types.contains(&"command.started".to_owned()), "{types:?}");
}

#[tokio::test]
async fn question_answers_are_validated_and_echoed() {
    let b = TestBridge::start().await;
    let id = b.submit("question:Proceed?").await;
    let t = b.wait_status(&id, "waiting_for_question").await;
    let req = &t["pending_request"];
    assert_eq!(req["kind"], "question", "{t:#}");
    assert_eq!(req["payload"]["questions"][0]["question_id"], "q1");
    assert_eq!(req["payload"]["questions"][0]["prompt"], "Proceed?");
    let rid = request_id(&t);

    let invalid = [
        ("unknown question", json!([{ "question_id": "q9", "selected_option_ids": ["yes"] }])),
        ("unknown option", json!([{ "question_id": "q1", "selected_option_ids": ["maybe"] }])),
        ("two options on single-select", json!([{ "question_id": "q1", "selected_option_ids": ["yes", "no"] }])),
        (
            "question answered twice",
            json!([{ "question_id": "q1", "selected_option_ids": ["yes"] }, { "question_id": "q1", "selected_option_ids": ["no"] }]),
        ),
        ("empty answer", json!([{ "question_id": "q1", "selected_option_ids": [] }])),
        ("empty answer with empty text", json!([{ "question_id": "q1", "selected_option_ids": [], "text": "" }])),
    ];
    for (what, answers) in invalid {
        let r = answer(&b, &id, &rid, answers).await;
        assert_eq!(code(&r), "INVALID_QUESTION_ANSWER", "{what}");
    }
    // The fake asks one question, so "a question left unanswered" can only be an empty list,
    // which the schema refuses first (answers: 1..10 items).
    let none = answer(&b, &id, &rid, json!([])).await;
    assert_eq!(code(&none), "INVALID_ARGUMENT");
    let as_approval = respond(&b, &id, &rid, "approve_once").await;
    assert_eq!(code(&as_approval), "INVALID_APPROVAL_DECISION");
    assert_eq!(b.get(&id).await["status"], "waiting_for_question");

    let ok =
        answer(&b, &id, &rid, json!([{ "question_id": "q1", "selected_option_ids": ["yes"], "text": "go ahead" }]))
            .await
            .expect("answer");
    assert_eq!(ok["resolved"], true);
    let done = b.wait_terminal(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let echoed: Value =
        serde_json::from_str(done["final_response"].as_str().unwrap()).expect("the fake echoes the answers as JSON");
    assert_eq!(echoed, json!([{ "question_id": "q1", "selected_option_ids": ["yes"], "text": "go ahead" }]));
    let events = b.all_events(&id).await;
    let answered = events.iter().find(|e| e["event_type"] == "question.answered").expect("question.answered");
    assert_eq!(answered["payload"]["question_count"], 1);
    assert!(!answered.to_string().contains("go ahead"), "answer text is not an event: {answered}");
    let again = answer(&b, &id, &rid, json!([{ "question_id": "q1", "selected_option_ids": ["no"] }])).await;
    assert_eq!(code(&again), "REQUEST_ALREADY_RESOLVED");
}

#[tokio::test]
async fn steering_reaches_a_running_agent_only() {
    let b = TestBridge::start().await;
    let id = b.submit("wait:30").await;
    b.wait_status(&id, "running").await;
    let text = "turn left at the fork";
    let r = b.call("send_agent_message", json!({ "task_id": id, "message": text })).await.expect("steer");
    assert_eq!(r["accepted"], true, "{r:#}");

    let steered = format!("steered: {text}");
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !events.iter().any(|e: &Value| e["event_type"] == "agent.message" && e["payload"]["text"] == steered.as_str())
    {
        assert!(Instant::now() < deadline, "no `{steered}` event: {events:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        events = b.all_events(&id).await;
    }
    let user: Vec<&Value> = events.iter().filter(|e| e["event_type"] == "user.message").collect();
    assert_eq!(user.len(), 1, "{events:#?}");
    assert_eq!(user[0]["payload"], json!({ "bytes": text.len() }), "only the size is recorded");

    let too_big = b.call("send_agent_message", json!({ "task_id": id, "message": "x".repeat(65_537) })).await;
    assert_eq!(code(&too_big), "AGENT_MESSAGE_TOO_LARGE");

    // A task waiting for a human is not steerable (a review task: the writer lease is taken).
    let waiting = b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": "approval:ls" })).await;
    b.wait_status(&waiting, "waiting_for_approval").await;
    let r = b.call("send_agent_message", json!({ "task_id": waiting, "message": "hurry" })).await;
    assert_eq!(code(&r), "AGENT_TASK_NOT_ACTIVE");

    for task in [&id, &waiting] {
        assert_eq!(
            b.call("cancel_agent_task", json!({ "task_id": task })).await.expect("cancel")["status"],
            "cancelled"
        );
    }
    let r = b.call("send_agent_message", json!({ "task_id": id, "message": "too late" })).await;
    assert_eq!(code(&r), "AGENT_TASK_TERMINAL");
    poll_until("the lease is released", Duration::from_secs(15), || b.lease_is_free(1)).await;
}

#[tokio::test]
async fn cancel_is_persisted_first_repeat_safe_and_releases_the_lease_after_cleanup() {
    let b = TestBridge::start().await;
    let id = b.submit("wait:30").await;
    b.wait_status(&id, "running").await;
    let c = b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    assert_eq!(c["status"], "cancelled");
    let now = b.get(&id).await;
    assert_eq!(now["status"], "cancelled", "persisted before the RPC returned: {now:#}");
    assert!(now["completed_at"].is_string());
    let again = b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("repeat cancel");
    assert_eq!(again["status"], "cancelled");
    poll_until("the lease is released after cleanup", Duration::from_secs(15), || b.lease_is_free(1)).await;
    poll_until("the guard is cleared", Duration::from_secs(15), || b.guard_count() == 0).await;
    assert!(e2e::marker_pids(&id).is_empty(), "the provider is gone");
    let types = event_types(&b.all_events(&id).await);
    assert_eq!(types.iter().filter(|t| *t == "task.cancelled").count(), 1, "{types:?}");

    // Cancelling a finished task reports its terminal state and changes nothing.
    let done = b.submit("complete:done").await;
    assert_eq!(b.wait_terminal(&done).await["status"], "succeeded");
    let c = b.call("cancel_agent_task", json!({ "task_id": done })).await.expect("cancel a finished task");
    assert_eq!(c["status"], "succeeded");
    let after = b.get(&done).await;
    assert_eq!(after["status"], "succeeded");
    assert_eq!(after["final_response"], "done");

    // A provider that ignores the interrupt: the task is cancelled at once, the lease is held
    // until the provider is stopped, and its late result is discarded.
    b.writer_idle().await;
    let stubborn = b.submit("ignore-interrupt:10").await;
    b.wait_status(&stubborn, "running").await;
    let started = Instant::now();
    let c = b.call("cancel_agent_task", json!({ "task_id": stubborn })).await.expect("cancel");
    assert_eq!(c["status"], "cancelled");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancel does not wait for the provider: {:?}",
        started.elapsed()
    );
    assert_eq!(b.get(&stubborn).await["status"], "cancelled");
    assert!(!b.lease_is_free(1), "the lease is held while the provider still runs");
    poll_until("the lease is released once the provider is stopped", Duration::from_secs(20), || b.lease_is_free(1))
        .await;
    poll_until("the guard is cleared", Duration::from_secs(5), || b.guard_count() == 0).await;
    let end = b.get(&stubborn).await;
    assert_eq!(end["status"], "cancelled", "{end:#}");
    assert!(end["final_response"].is_null(), "{end:#}");
    assert!(end["result"].is_null(), "{end:#}");
}

#[tokio::test]
async fn continuation_resumes_the_session_under_the_rules() {
    let b = TestBridge::start().await;
    let first = b.submit("complete:one").await;
    assert_eq!(b.wait_terminal(&first).await["status"], "succeeded");
    b.writer_idle().await;
    let second = b.submit_ok(json!({ "prompt": "complete:two", "continue_from_task_id": first })).await;
    let t = b.wait_terminal(&second).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["final_response"], "two");
    assert_eq!(t["continue_from_task_id"], first.as_str());
    assert_eq!(t["manifest"]["continuation"]["from_task_id"], first.as_str());
    let events = b.all_events(&second).await;
    assert!(
        events.iter().any(|e| e["event_type"] == "agent.message" && e["payload"]["text"] == "resumed session: 1 earlier turn(s)"),
        "{events:#?}"
    );
    assert_eq!(b.fake_turns(), 2);

    let rows = b.task_count();
    // A running task cannot be continued.
    b.writer_idle().await;
    let running = b.submit("wait:30").await;
    b.wait_status(&running, "running").await;
    let rows = rows + 1;
    let r =
        b.submit_args(json!({ "profile": "review", "prompt": "complete:x", "continue_from_task_id": running })).await;
    assert_eq!(code(&r), "AGENT_SESSION_NOT_RESUMABLE");
    b.call("cancel_agent_task", json!({ "task_id": running })).await.expect("cancel");
    // Nor continued in another workdir.
    let r = b
        .submit_args(
            json!({ "workdir": "docs", "profile": "review", "prompt": "complete:x", "continue_from_task_id": first }),
        )
        .await;
    assert_eq!(code(&r), "AGENT_SESSION_NOT_RESUMABLE");
    assert_eq!(b.task_count(), rows, "refused continuations add no row");

    // A review task cannot be continued as workspace-write (but can as review).
    let review = b.submit_ok(json!({ "profile": "review", "prompt": "complete:read" })).await;
    assert_eq!(b.wait_terminal(&review).await["status"], "succeeded");
    b.writer_idle().await;
    let r = b
        .submit_args(
            json!({ "profile": "workspace-write", "prompt": "complete:write", "continue_from_task_id": review }),
        )
        .await;
    assert_eq!(code(&r), "AGENT_PROFILE_NOT_ALLOWED");
    let ok =
        b.submit_ok(json!({ "profile": "review", "prompt": "complete:again", "continue_from_task_id": review })).await;
    assert_eq!(b.wait_terminal(&ok).await["status"], "succeeded");
}

#[tokio::test]
async fn long_poll_wakes_on_a_change_and_times_out_otherwise() {
    let b = TestBridge::start().await;
    let id = b.submit("approval:ship it").await;
    let t = b.wait_status(&id, "waiting_for_approval").await;
    let rid = request_id(&t);

    let long_poll = async {
        let started = Instant::now();
        let v = b.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 20 })).await.expect("long poll");
        (v, started.elapsed())
    };
    let approve = async {
        // A 1 s wait on the unchanged task (itself a long poll) both shows that an unchanged
        // task is returned after the wait, unchanged, and makes sure the 20 s poll is parked.
        let started = Instant::now();
        let same = b.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 1 })).await.expect("short poll");
        let waited = started.elapsed();
        respond(&b, &id, &rid, "approve_once").await.expect("approve");
        (same, waited)
    };
    let ((woken, woke_after), (same, waited)) = tokio::join!(long_poll, approve);
    assert_eq!(same["status"], "waiting_for_approval", "{same:#}");
    assert_eq!(same["pending_request"]["request_id"], rid.as_str());
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "an unchanged 1 s wait took {waited:?}"
    );
    assert!(
        woke_after >= Duration::from_millis(900),
        "the long poll returned before anything changed: {woke_after:?} {woken:#}"
    );
    // Far under the 20 s the poll would otherwise wait (bounds wide for a loaded machine).
    assert!(woke_after < Duration::from_secs(14), "the long poll did not wake on the change: {woke_after:?}");
    assert_ne!(woken["status"], "waiting_for_approval", "{woken:#}");
    assert!(woken["pending_request"].is_null(), "{woken:#}");
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");

    // A terminal task is returned at once whatever the wait.
    let started = Instant::now();
    let v = b.call("get_agent_task", json!({ "task_id": id, "wait_seconds": 20 })).await.expect("poll");
    assert_eq!(v["status"], "succeeded");
    assert!(started.elapsed() < Duration::from_secs(10), "a terminal task waited: {:?}", started.elapsed());
}

#[tokio::test]
async fn the_active_task_cap_is_enforced_at_insert() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_MAX_ACTIVE_TASKS=2")).await;
    let review = |prompt: &str| json!({ "workdir": "docs", "profile": "review", "prompt": prompt });
    let a = b.submit_ok(review("wait:30")).await;
    let c = b.submit_ok(review("wait:30")).await;
    let rows = b.task_count();
    let r = b.submit_args(review("wait:30")).await;
    assert_eq!(code(&r), "AGENT_TASK_LIMIT_REACHED");
    // A writer refused by the cap keeps neither the lease nor a guard.
    let r = b.submit_args(json!({ "prompt": "wait:30" })).await;
    assert_eq!(code(&r), "AGENT_TASK_LIMIT_REACHED");
    assert_eq!(b.task_count(), rows, "no row was added");
    assert!(b.lease_is_free(1));
    assert_eq!(b.guard_count(), 0);

    assert_eq!(b.call("cancel_agent_task", json!({ "task_id": a })).await.expect("cancel")["status"], "cancelled");
    let d = b.submit_ok(review("wait:30")).await;
    assert_eq!(b.task_count(), rows + 1);
    for id in [&c, &d] {
        b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    }
}

#[tokio::test]
async fn a_review_task_runs_beside_a_writer_without_a_lease() {
    let b = TestBridge::start().await;
    let writer = b.submit("wait:30").await;
    b.wait_status(&writer, "running").await;
    assert!(!b.lease_is_free(1));
    assert_eq!(b.guard_count(), 1);
    let busy = b.submit_args(json!({ "prompt": "complete:second writer" })).await;
    assert_eq!(code(&busy), "WORKDIR_BUSY");

    let reader = b.submit_ok(json!({ "profile": "review", "prompt": "complete:read while writing" })).await;
    let r = b.wait_terminal(&reader).await;
    assert_eq!(r["status"], "succeeded", "{r:#}");
    assert_eq!(r["final_response"], "read while writing");
    assert_eq!(r["manifest"]["workspace"]["profile"], "review");
    assert_eq!(b.get(&writer).await["status"], "running", "the writer was not disturbed");
    assert_eq!(b.guard_count(), 1, "a review task publishes no guard");

    b.call("cancel_agent_task", json!({ "task_id": writer })).await.expect("cancel");
    poll_until("the lease is released", Duration::from_secs(15), || b.lease_is_free(1)).await;
}

/// The scheduling policy in a `/proc/…/stat` line (field 41, counted after the parenthesised
/// name): 0 normal, 3 batch.
fn sched_policy(stat: &str) -> Option<u32> {
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    after_name.split_whitespace().nth(38)?.parse().ok()
}

#[tokio::test]
async fn the_bridge_reactor_runs_batch_and_a_task_gets_the_normal_policy_back() {
    let b = TestBridge::start().await;
    let pid = b.pid().expect("the bridge runs");
    // The runtime's threads batch their wake-ups (bridge/src/sched.rs); the store's do not.
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the bridge's threads") {
        let dir = entry.expect("a thread").path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_owned();
        let policy = std::fs::read_to_string(dir.join("stat")).ok().and_then(|stat| sched_policy(&stat));
        threads.push((name, policy));
    }
    let workers: Vec<_> = threads.iter().filter(|(name, _)| name.starts_with("tokio-rt")).collect();
    assert!(!workers.is_empty(), "{threads:?}");
    assert!(workers.iter().all(|(_, policy)| *policy == Some(3)), "the async threads are batch: {threads:?}");
    let store: Vec<_> = threads.iter().filter(|(name, _)| name.starts_with("store-")).collect();
    assert!(store.iter().all(|(_, policy)| *policy == Some(0)), "the store's threads are normal: {threads:?}");
    // A task is started from an async thread; its processes run as from the operator's shell.
    let id = b.submit("exec:cat /proc/self/stat").await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    let text = end["final_response"].as_str().expect("final_response");
    let stat = text.lines().find(|l| l.contains("(cat)")).unwrap_or_else(|| panic!("no stat line: {text}"));
    assert_eq!(sched_policy(stat), Some(0), "the task's process is normal: {stat}");
}
