//! The real Codex CLI (`codex app-server`, pinned) through the bridge's public tools, against
//! the scripted Responses server on 127.0.0.1. Skipped loudly when the CLI is not installed;
//! mandatory in CI.

use std::time::{Duration, Instant};

use serde_json::json;

use e2e::model::responses::{self, HELLO};
use e2e::real::{Cli, RealBridge, codex_version};
use e2e::{event_types, marker_pids, poll_until};

#[tokio::test]
async fn codex_plain_task_succeeds_with_the_models_answer() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let runtimes = r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes");
    let codex = runtimes["runtimes"].as_array().unwrap().iter().find(|x| x["name"] == "codex").cloned().unwrap();
    assert_eq!(codex["available"], true, "{runtimes:#}");
    assert_eq!(codex["version"], codex_version());
    assert_eq!(codex["live_steer"], true);
    let models = r.b.call("list_agent_models", json!({ "runtime": "codex" })).await.expect("models");
    assert_eq!(models["status"], "ok", "{models:#}");
    assert!(!models["models"].as_array().unwrap().is_empty(), "{models:#}");
    assert!(r.server.posts("/responses").is_empty(), "listing runtimes and models must not start inference");

    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    assert_eq!(t["final_response"], HELLO);
    // The usage is what the scripted server reported, summed over this task's requests.
    let posts = r.server.posts("/responses").len() as u64;
    let [input, cached, output, reasoning] = responses::USAGE;
    let usage = &t["usage"];
    assert!(posts >= 1);
    assert_eq!(usage["input_tokens"], input * posts, "{usage:#} over {posts} requests");
    assert_eq!(usage["cached_input_tokens"], cached * posts, "{usage:#}");
    assert_eq!(usage["output_tokens"], output * posts, "{usage:#}");
    assert_eq!(usage["reasoning_tokens"], reasoning * posts, "{usage:#}");
    assert_eq!(usage["model"], "scripted-model", "{usage:#}");
    let events = r.b.all_events(&id).await;
    let types = event_types(&events);
    for expected in ["task.started", "turn.started", "agent.message", "usage.updated", "task.completed"] {
        assert!(types.iter().any(|t| t == expected), "no {expected} in {types:?}");
    }
    let text = serde_json::to_string(&events).unwrap();
    for private in ["threadId", "thread_id", "turnId", "sessionId", r.ws.to_str().unwrap()] {
        assert!(!text.contains(private), "{private} leaked into the events: {text}");
    }
    assert!(marker_pids(&id).is_empty());
}

#[tokio::test]
async fn codex_command_approval_approved_runs_and_denied_does_not() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("RUN_ESCALATED: echo approved > approved.txt").await;
    let (rid, payload) = r.pending(&id).await;
    assert_eq!(payload["category"], "command", "{payload:#}");
    assert_eq!(payload["command_display"], "echo approved > approved.txt", "{payload:#}");
    assert!(payload["title"].as_str().unwrap().contains("echo approved"));
    assert_eq!(payload["reason"], "The scripted test needs to run this outside the sandbox");
    assert_eq!(payload["relative_cwd"], ".", "the cwd is the workdir root: {payload:#}");
    let decisions = payload["available_decisions"].as_array().unwrap();
    assert!(decisions.contains(&json!("deny")) && decisions.contains(&json!("cancel_task")), "{payload:#}");
    // The supervised child is the native binary, not the node launcher the config names.
    assert!(!r.marked(&id, "codex").is_empty(), "no native codex among {:?}", marker_pids(&id));
    assert!(r.marked(&id, "node").is_empty());
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(t["final_response"].as_str().unwrap().starts_with("DONE. tool output was:"), "{t:#}");
    assert_eq!(std::fs::read_to_string(r.ws.join("approved.txt")).unwrap(), "approved\n");
    let types = event_types(&r.b.all_events(&id).await);
    for expected in ["approval.requested", "approval.resolved", "command.started", "command.finished"] {
        assert!(types.iter().any(|t| t == expected), "no {expected} in {types:?}");
    }

    let id = r.submit("RUN_ESCALATED: echo denied > denied.txt").await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "deny").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!r.ws.join("denied.txt").exists(), "a denied command ran");
    let finished = r.b.all_events(&id).await.into_iter().find(|e| e["event_type"] == "command.finished");
    if let Some(e) = finished {
        assert_eq!(e["payload"]["status"], "declined", "{e:#}");
    }
}

#[tokio::test]
async fn codex_cancel_task_decision_cancels() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("RUN_ESCALATED: echo never > never.txt").await;
    let (rid, _) = r.pending(&id).await;
    let answer = r.respond(&id, &rid, "cancel_task").await;
    assert_eq!(answer["status"], "cancelled", "{answer:#}");
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "cancelled");
    assert!(!r.ws.join("never.txt").exists());
    r.no_survivors(&id, Duration::from_secs(5)).await;
    // The model was not called again after the cancel.
    assert_eq!(r.server.posts("/responses").len(), 1);
}

#[tokio::test]
async fn codex_question_answer_reaches_the_model() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("ASK_USER which color?").await;
    let (rid, payload) = r.pending(&id).await;
    let q = &payload["questions"][0];
    assert_eq!(q["question_id"], "color", "{payload:#}");
    assert_eq!(q["options"][0]["label"], "Blue");
    let answers = json!([{ "question_id": "color", "selected_option_ids": [q["options"][0]["option_id"]] }]);
    r.b.call("answer_agent_question", json!({ "task_id": id, "request_id": rid, "answers": answers }))
        .await
        .expect("answer");
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let outputs: Vec<String> = r.server.posts("/responses").iter().flat_map(responses::tool_outputs).collect();
    assert!(outputs.iter().any(|o| o.contains("Blue")), "the answer did not reach the model: {outputs:?}");
}

#[tokio::test]
async fn codex_cancel_during_a_running_command_leaves_no_process() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("RUN_SHELL: echo started > started.txt; sleep 60").await;
    let started = r.ws.join("started.txt");
    poll_until("the command started", Duration::from_secs(30), || started.exists()).await;
    // The command runs under the marker (its `sleep` starts just after the file is written).
    poll_until("the command's sleep runs", Duration::from_secs(10), || r.marked(&id, "sleep").len() == 1).await;
    let t0 = Instant::now();
    let answer = r.b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    assert_eq!(answer["status"], "cancelled");
    r.finish(&id).await;
    r.no_survivors(&id, Duration::from_secs(5)).await;
    assert!(t0.elapsed() < Duration::from_secs(15), "cleanup took {:?}", t0.elapsed());
}

#[tokio::test]
async fn codex_continuation_resumes_the_same_thread_with_its_history() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let first = r.submit("SAY: the first answer").await;
    assert_eq!(r.finish(&first).await["final_response"], "the first answer");
    let second = r.submit_with(json!({ "prompt": "SAY: the second answer", "continue_from_task_id": first })).await;
    let t = r.finish(&second).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["final_response"], "the second answer");
    let posts = r.server.posts("/responses");
    let (a, b) = (&posts[0], posts.last().unwrap());
    assert!(a.header("thread-id").is_some(), "no thread header in {:?}", a.headers);
    assert_eq!(a.header("thread-id"), b.header("thread-id"), "a different native session was used");
    let history = responses::user_texts(b);
    assert!(history.iter().any(|t| t.contains("SAY: the first answer")), "history not re-sent: {history:?}");
    assert!(history.last().unwrap().contains("SAY: the second answer"));
}

#[tokio::test]
async fn codex_unanswered_interaction_times_out_and_stops_the_cli() {
    let Some(r) = RealBridge::start(Cli::Codex, &["SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=2"]).await else {
        return;
    };
    let id = r.submit("RUN_ESCALATED: echo late > late.txt").await;
    r.pending(&id).await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_INTERACTION_TIMED_OUT", "{t:#}");
    r.no_survivors(&id, Duration::from_secs(5)).await;
    assert!(!r.ws.join("late.txt").exists());
}

#[tokio::test]
async fn codex_killed_mid_turn_fails_as_disconnected_and_the_guard_is_cleared_by_proof() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("RUN_SHELL: echo started > started.txt; sleep 60").await;
    let started = r.ws.join("started.txt");
    poll_until("the command started", Duration::from_secs(30), || started.exists()).await;
    let bridge = r.b.pid().unwrap() as i32;
    // The agent itself: the bridge's child, or, in the task sandbox, a child of the bridge
    // through our bwrap processes only. Codex runs its own commands through its own sandbox
    // helper (the codex executable again, under a bwrap of its own): that one has codex among
    // its ancestors and is not the agent.
    let the_agent = |pid: i32| {
        let mut up = parent_of(pid);
        for _ in 0..4 {
            match up {
                Some(p) if p == bridge => return true,
                Some(p) if e2e::procs::is_sandbox_frame(p) => up = parent_of(p),
                _ => return false,
            }
        }
        false
    };
    let leader = r
        .marked(&id, "codex")
        .into_iter()
        .find(|pid| the_agent(*pid))
        .unwrap_or_else(|| panic!("no codex child of the bridge among {:?}", marker_pids(&id)));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(leader), nix::sys::signal::Signal::SIGKILL).unwrap();
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_PROVIDER_DISCONNECTED", "{t:#}");
    assert!(marker_pids(&id).is_empty(), "the guard was cleared while {:?} still run", marker_pids(&id));
}

/// The parent pid of `pid` (`/proc/<pid>/stat` field 4).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn codex_steering_reaches_the_running_turn() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit("SLOW please").await;
    r.b.wait_for(&id, |t| t["status"] == "running").await;
    poll_until("the model is streaming", Duration::from_secs(20), || !r.server.posts("/responses").is_empty()).await;
    let sent = r.b.call("send_agent_message", json!({ "task_id": id, "message": "SAY: steered" })).await;
    assert_eq!(sent.expect("steer")["accepted"], true);
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let posts = r.server.posts("/responses");
    let steered = posts.iter().any(|p| responses::last_user_text(p).contains("SAY: steered"));
    assert!(
        steered,
        "the steering message never reached the model: {:?}",
        posts.iter().map(responses::last_user_text).collect::<Vec<_>>()
    );
    assert_eq!(t["final_response"], "steered", "{t:#}");
}

#[tokio::test]
async fn codex_review_task_runs_read_only() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let id = r.submit_with(json!({ "prompt": "RUN_SHELL: echo x > review.txt", "profile": "review" })).await;
    let t = r.b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!r.ws.join("review.txt").exists(), "a review task wrote to the workdir");
    let events = r.b.all_events(&id).await;
    assert!(!event_types(&events).contains(&"approval.requested".to_owned()));
    let output = responses::tool_outputs(r.server.posts("/responses").last().unwrap()).join("\n");
    assert!(output.contains("Read-only") || output.contains("exited with code 1"), "{output}");
}

#[tokio::test]
async fn codex_with_a_configuration_it_refuses_fails_the_task_at_once() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    // Codex 0.169 refuses this setting at start-up (notes §4.7): the bridge's listing of the
    // operator's MCP servers, which runs before the app-server, fails at once and names it.
    // (A child that dies during the handshake fails its pending request at stdout EOF: the
    // driver's unit tests.)
    let config = r.cli_home.join("config.toml");
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("approval_policy = \"untrusted\"\n{original}")).unwrap();
    let models = r.b.call("list_agent_models", json!({ "runtime": "codex" })).await.expect("models");
    assert_ne!(models["status"], "ok", "{models:#}");
    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    // "At once": it fails before any inference (no wall-clock bound: the machine is shared).
    assert!(r.server.posts("/responses").is_empty(), "the model was asked anyway");
    assert_eq!(t["status"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_PROVIDER_ERROR", "{t:#}");
    assert!(t["error"]["message"].as_str().unwrap().contains("untrusted"), "{t:#}");
    std::fs::write(&config, original).unwrap();
    let models = r.b.call("list_agent_models", json!({ "runtime": "codex" })).await.expect("models");
    assert_eq!(models["status"], "ok", "{models:#}");
    let first = &models["models"][0];
    assert!(first["id"].is_string() && first["display_name"].is_string(), "{models:#}");
}

#[tokio::test]
async fn codex_command_output_keeps_a_long_command_alive_under_the_idle_timeout() {
    // The command runs 10 s, longer than the 6 s idle bound, printing every second; the bound
    // also covers the CLI's own start-up, which a loaded machine slows.
    let Some(r) = RealBridge::start(Cli::Codex, &["SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=6"]).await else {
        return;
    };
    let id = r.submit("RUN_SHELL: for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 1; done").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let events = r.b.all_events(&id).await;
    let outputs: Vec<&serde_json::Value> = events.iter().filter(|e| e["event_type"] == "command.output").collect();
    assert!(outputs.len() >= 2, "{:?}", event_types(&events));
    assert!(outputs.iter().all(|e| e["payload"]["item"] == 1), "{outputs:?}");
    assert!(outputs.last().unwrap()["payload"]["output"].as_str().unwrap().contains("tick"), "{outputs:?}");
}

/// A directory outside every root Codex's `workspace-write` sandbox may write without asking
/// (the workspace, `/tmp` and `$TMPDIR`): a fresh one under the build's target directory, or
/// under `$HOME` when the checkout itself lies in a temporary directory. Removed on drop.
fn outside_the_writable_roots() -> tempfile::TempDir {
    e2e::real::outside_tmp("codex-outside-")
}

#[tokio::test]
async fn codex_file_change_inside_is_applied_and_outside_asks_first() {
    // A directory outside the workdir that the operator lets this workdir's tasks write (the
    // task's view holds nothing else outside it): Codex's own sandbox still asks first.
    let outside = outside_the_writable_roots();
    let widened = format!("WORKDIR_03_SANDBOX_WRITE={}", outside.path().display());
    let Some(r) = RealBridge::start(Cli::Codex, &[&widened]).await else { return };
    // Inside the workdir, Codex applies the patch itself: no question, the change is reported.
    let id = r.submit("APPLY_PATCH: inside.txt").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(std::fs::read_to_string(r.ws.join("inside.txt")).unwrap(), "patched\n");
    let events = r.b.all_events(&id).await;
    assert!(!event_types(&events).iter().any(|t| t == "approval.requested"), "{events:#?}");
    let finished = events.iter().find(|e| e["event_type"] == "file_change.finished").expect("file_change.finished");
    assert_eq!(finished["payload"]["changes"], json!([{ "kind": "add", "path": "inside.txt" }]), "{finished:#}");
    assert_eq!(finished["payload"]["status"], "completed");

    // Outside the writable roots Codex asks; the request names no host path.
    let approved = outside.path().join("approved.txt");
    let id = r.submit(&format!("APPLY_PATCH: {}", approved.display())).await;
    let (rid, payload) = r.pending(&id).await;
    assert_eq!(payload["category"], "file_change", "{payload:#}");
    let decisions = payload["available_decisions"].as_array().unwrap();
    assert!(decisions.contains(&json!("approve_once")) && decisions.contains(&json!("deny")), "{payload:#}");
    let shown =
        r.b.get(&id).await.to_string() + &r.b.all_events(&id).await.iter().map(|e| e.to_string()).collect::<String>();
    assert!(!shown.contains(&outside.path().display().to_string()), "a host path reached the caller: {shown}");
    assert!(!approved.exists(), "applied before the answer");
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(std::fs::read_to_string(&approved).unwrap(), "patched\n");
    let types = event_types(&r.b.all_events(&id).await);
    for expected in ["file_change.started", "approval.requested", "approval.resolved", "file_change.finished"] {
        assert!(types.iter().any(|t| t == expected), "no {expected} in {types:?}");
    }

    let denied = outside.path().join("denied.txt");
    let id = r.submit(&format!("APPLY_PATCH: {}", denied.display())).await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "deny").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!denied.exists(), "a denied change was applied");
    let finished = r.b.all_events(&id).await.into_iter().find(|e| e["event_type"] == "file_change.finished");
    let finished = finished.expect("file_change.finished");
    assert_eq!(finished["payload"]["status"], "declined", "{finished:#}");
}

/// The operator's own MCP servers (in `config.toml`) never start for a task: a remote caller's
/// agent gets the tools the bridge decided, not the operator's.
#[tokio::test]
async fn codex_never_starts_the_operators_own_mcp_servers() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let started = r.cli_home.join("operator-mcp-started");
    let config = r.cli_home.join("config.toml");
    let mut text = std::fs::read_to_string(&config).expect("config.toml");
    text.push_str(&format!(
        "\n[mcp_servers.operator_own]\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}; sleep 30\"]\n",
        started.display()
    ));
    std::fs::write(&config, text).expect("write config.toml");
    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!started.exists(), "the operator's MCP server was started for a task");
}

/// A command that adds `added.txt` and edits `edit.txt` of [`crate::changes::repository_with_state`].
pub(crate) const ADD_AND_EDIT: &str =
    "RUN_SHELL: printf 'new\\n' > added.txt && printf 'one\\nTWO\\nthree\\n' > edit.txt";

/// The task `t` (`id`) of [`ADD_AND_EDIT`] succeeded, and its change set is exactly that: the
/// file it added and the one it edited, with line counts, and a diff that applies to `copy`.
pub(crate) async fn added_and_edited(r: &RealBridge, id: &str, t: &serde_json::Value, copy: &std::path::Path) {
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    let changes = &t["changes"];
    assert_eq!(changes["method"], "git", "{changes:#}");
    assert_eq!(
        crate::changes::files(changes),
        [("added.txt".into(), "added".into(), 1, 0), ("edit.txt".into(), "modified".into(), 1, 1)],
        "{changes:#}"
    );
    crate::changes::applies(&r.b, id, copy, &r.ws, &["added.txt", "edit.txt", "keep.txt", "staged.txt"]).await;
}

/// What a real Codex task changed: exactly the file it added and the one it edited, with their
/// line counts; its diff applies to the baseline; the repository's index, stash, HEAD and
/// objects are as they were. A review task reports `read_only`.
#[tokio::test]
async fn codex_change_set_is_exactly_what_the_agent_wrote() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    let copy = r.b.root().join("codex-baseline");
    let before = crate::changes::repository_with_state(&r.ws, &copy);
    let head = crate::changes::git(&r.ws, &["rev-parse", "HEAD"]);
    let id = r.submit(ADD_AND_EDIT).await;
    let t = r.finish(&id).await;
    assert_eq!(std::fs::read_to_string(r.ws.join("edit.txt")).unwrap(), "one\nTWO\nthree\n", "{t:#}");
    added_and_edited(&r, &id, &t, &copy).await;
    assert_eq!(crate::changes::contents(&r.ws.join(".git")), before, "the user's .git changed");
    assert_eq!(crate::changes::git(&r.ws, &["rev-parse", "HEAD"]), head);
    assert_eq!(crate::changes::git(&r.ws, &["stash", "list"]).lines().count(), 1);

    let id = r.submit_with(json!({ "prompt": "RUN_SHELL: cat edit.txt", "profile": "review" })).await;
    let t = r.finish(&id).await;
    assert_eq!(t["changes"]["status"], "read_only", "{t:#}");
}

/// Codex in worktree mode: it works in its own worktree (its command's file lands there, not
/// in the checkout), and the bridge puts its work on its branch.
#[tokio::test]
async fn codex_works_in_a_worktree_on_its_own_branch() {
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    crate::changes::repository_with_state(&r.ws, &r.b.root().join("codex-wt-copy"));
    let before = crate::worktrees::checkout_now(&r.ws);
    let id =
        r.submit_with(json!({ "prompt": "RUN_SHELL: printf 'new\\n' > added.txt", "isolation": "worktree" })).await;
    let t = r.finish(&id).await;
    crate::worktrees::assert_real_worktree_task(&r.ws, &t, "added.txt", &before);
}
