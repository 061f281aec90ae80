//! The real Claude Code CLI (`claude -p` stream-json, pinned) through the bridge's public
//! tools, against the scripted Messages server on 127.0.0.1. Skipped loudly when the CLI is
//! not installed; mandatory in CI.

use std::time::{Duration, Instant};

use serde_json::json;

use e2e::model::messages::{self, HELLO};
use e2e::real::{Cli, RealBridge, claude_version};
use e2e::{event_types, marker_pids, poll_until};

use crate::codex::parent_of;

#[tokio::test]
async fn claude_plain_task_succeeds_with_the_models_answer() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let runtimes = r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes");
    let claude = runtimes["runtimes"].as_array().unwrap().iter().find(|x| x["name"] == "claude").cloned().unwrap();
    assert_eq!(claude["available"], true, "{runtimes:#}");
    assert_eq!(claude["version"], claude_version());
    assert_eq!(claude["live_steer"], false);
    let models = r.b.call("list_agent_models", json!({ "runtime": "claude" })).await.expect("models");
    // Claude Code's own catalog, through its `list_models` control request.
    assert_eq!(models["status"], "ok", "{models:#}\n{}", r.b.log());
    assert_eq!(models["scope"], "runtime_catalog", "{models:#}");
    let listed = models["models"].as_array().unwrap();
    assert!(listed.iter().any(|m| m["id"] == "default" && m["is_default"] == true), "{models:#}");
    assert!(listed.iter().any(|m| m["id"] == "sonnet"), "{models:#}");
    assert_eq!(claude["model_discovery"], "runtime_catalog", "{claude:#}");
    assert!(r.server.posts("/v1/messages").is_empty(), "listing must not start inference");

    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    assert_eq!(t["final_response"], HELLO);
    // The usage is what the scripted server reported over this task's requests (the cache
    // reads and writes counted into the input), and the cost is the CLI's own figure.
    let posts =
        r.server.posts("/v1/messages").iter().filter(|p| p.path.split('?').next() == Some("/v1/messages")).count()
            as u64;
    let [input, read, write, output] = messages::USAGE;
    let usage = &t["usage"];
    assert!(posts >= 1);
    assert_eq!(usage["input_tokens"], (input + read + write) * posts, "{usage:#} over {posts} requests");
    assert_eq!(usage["cached_input_tokens"], read * posts, "{usage:#}");
    assert_eq!(usage["cache_write_input_tokens"], write * posts, "{usage:#}");
    assert_eq!(usage["output_tokens"], output * posts, "{usage:#}");
    // Claude prices the scripted tokens at its default model's rates: a positive figure, which
    // the admin totals carry unchanged.
    let cost = usage["cost_usd"].as_f64().expect("Claude reports a cost");
    assert!(cost > 0.0, "{usage:#}");
    let totals = r.b.call("admin_list_tasks", json!({})).await.expect("list")["totals"]["overall"].clone();
    assert_eq!(totals["cost_usd"].as_f64(), Some(cost), "{totals:#}");
    assert_eq!(totals["output_tokens"], output * posts, "{totals:#}");
    let events = r.b.all_events(&id).await;
    let types = event_types(&events);
    for expected in ["task.started", "turn.started", "agent.message", "usage.updated", "task.completed"] {
        assert!(types.iter().any(|t| t == expected), "no {expected} in {types:?}");
    }
    let text = serde_json::to_string(&events).unwrap();
    for private in ["session_id", "sessionId", "tool_use_id", "toolu_", r.ws.to_str().unwrap()] {
        assert!(!text.contains(private), "{private} leaked into the events: {text}");
    }
    // Nothing but the scripted server was asked anything, and nothing non-essential.
    for req in r.server.requests() {
        assert!(req.path.starts_with("/v1/messages"), "unexpected request {} {}", req.method, req.path);
    }
    let steer = r.b.call("send_agent_message", json!({ "task_id": id, "message": "hi" })).await;
    assert!(steer.is_err());
}

#[tokio::test]
async fn claude_command_approval_approved_runs_and_denied_does_not() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit("RUN_BASH: echo approved > approved.txt").await;
    let (rid, payload) = r.pending(&id).await;
    assert_eq!(payload["category"], "command", "{payload:#}");
    assert_eq!(payload["tool"], "Bash");
    assert_eq!(payload["command_display"], "echo approved > approved.txt", "{payload:#}");
    assert!(!payload.to_string().contains(r.ws.to_str().unwrap()), "a host path leaked: {payload:#}");
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(t["final_response"].as_str().unwrap().starts_with("DONE. tool result was:"), "{t:#}");
    assert_eq!(std::fs::read_to_string(r.ws.join("approved.txt")).unwrap(), "approved\n");
    let events = r.b.all_events(&id).await;
    let finished = events.iter().find(|e| e["event_type"] == "command.finished").expect("command.finished");
    assert_eq!(finished["payload"]["status"], "completed", "{finished:#}");

    let id = r.submit("RUN_BASH: echo denied > denied.txt").await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "deny").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!r.ws.join("denied.txt").exists(), "a denied command ran");
    let events = r.b.all_events(&id).await;
    let finished = events.iter().find(|e| e["event_type"] == "command.finished").expect("command.finished");
    assert_eq!(finished["payload"]["status"], "declined", "{finished:#}");
}

#[tokio::test]
async fn claude_cancel_task_decision_cancels() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit("RUN_BASH: echo never > never.txt").await;
    let (rid, _) = r.pending(&id).await;
    let answer = r.respond(&id, &rid, "cancel_task").await;
    assert_eq!(answer["status"], "cancelled", "{answer:#}");
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "cancelled");
    assert!(!r.ws.join("never.txt").exists());
    r.no_survivors(&id, Duration::from_secs(5)).await;
    assert_eq!(r.server.posts("/v1/messages").len(), 1, "the model was called again after the cancel");
}

#[tokio::test]
async fn claude_question_answer_reaches_the_model() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit("ASK_USER which color?").await;
    let (rid, payload) = r.pending(&id).await;
    let q = &payload["questions"][0];
    assert_eq!(q["prompt"], "Color: Which color should I use?", "{payload:#}");
    assert_eq!(q["options"][0]["label"], "Blue");
    let answers = json!([{ "question_id": q["question_id"], "selected_option_ids": [q["options"][0]["option_id"]] }]);
    r.b.call("answer_agent_question", json!({ "task_id": id, "request_id": rid, "answers": answers }))
        .await
        .expect("answer");
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let last = r.server.posts("/v1/messages").pop().expect("a model request");
    let texts = messages::user_texts(&last);
    assert!(texts.iter().any(|t| t.contains("Blue")), "the answer did not reach the model: {texts:?}");
}

#[tokio::test]
async fn claude_cancel_during_a_running_command_leaves_no_process() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit("RUN_BASH: echo started > started.txt; sleep 60").await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "approve_once").await;
    let started = r.ws.join("started.txt");
    poll_until("the command started", Duration::from_secs(30), || started.exists()).await;
    let t0 = Instant::now();
    let answer = r.b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    assert_eq!(answer["status"], "cancelled");
    r.finish(&id).await;
    r.no_survivors(&id, Duration::from_secs(5)).await;
    assert!(t0.elapsed() < Duration::from_secs(15), "cleanup took {:?}", t0.elapsed());
}

#[tokio::test]
async fn claude_continuation_resumes_the_same_session_with_its_history() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let first = r.submit("SAY: the first answer").await;
    assert_eq!(r.finish(&first).await["final_response"], "the first answer");
    let second = r.submit_with(json!({ "prompt": "SAY: the second answer", "continue_from_task_id": first })).await;
    let t = r.finish(&second).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["final_response"], "the second answer");
    let posts = r.server.posts("/v1/messages");
    let (a, b) = (&posts[0], posts.last().unwrap());
    let session = |req: &e2e::model::Request| req.header("x-claude-code-session-id").map(str::to_owned);
    assert!(session(a).is_some(), "no session header in {:?}", a.headers);
    assert_eq!(session(a), session(b), "a different native session was used");
    let history = messages::user_texts(b);
    assert!(history.iter().any(|t| t.contains("SAY: the first answer")), "history not re-sent: {history:?}");
}

#[tokio::test]
async fn claude_unanswered_interaction_times_out_and_stops_the_cli() {
    let Some(r) = RealBridge::start(Cli::Claude, &["SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=2"]).await else {
        return;
    };
    let id = r.submit("RUN_BASH: echo late > late.txt").await;
    r.pending(&id).await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_INTERACTION_TIMED_OUT", "{t:#}");
    r.no_survivors(&id, Duration::from_secs(5)).await;
    assert!(!r.ws.join("late.txt").exists());
}

/// Kills the `claude` child of the bridge with SIGKILL while the approved command runs;
/// returns the command's shell pids (in their own session, so the group kill misses them).
async fn kill_claude_mid_command(r: &RealBridge, id: &str) -> Vec<i32> {
    let (rid, _) = r.pending(id).await;
    r.respond(id, &rid, "approve_once").await;
    let started = r.ws.join("started.txt");
    poll_until("the command started", Duration::from_secs(30), || started.exists()).await;
    let bridge = r.b.pid().unwrap() as i32;
    let pids = marker_pids(id);
    // The agent itself: the bridge's child, or, in the task sandbox, the child of the
    // sandbox's init (bwrap) or of its relay.
    let sandboxed = |pid: i32| parent_of(pid).is_some_and(e2e::procs::is_sandbox_frame);
    let leader = pids
        .iter()
        .copied()
        .find(|pid| parent_of(*pid) == Some(bridge) || sandboxed(*pid))
        .unwrap_or_else(|| panic!("no child of the bridge among {pids:?}"));
    // The file is written just before `sleep` is started: wait for the sleep itself.
    poll_until("the command's sleep runs", Duration::from_secs(10), || !r.marked(id, "sleep").is_empty()).await;
    let sleepers = r.marked(id, "sleep");
    let leader_group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(leader))).unwrap();
    let escaped: Vec<i32> = sleepers
        .iter()
        .copied()
        .filter(|p| nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(*p))).is_ok_and(|g| g != leader_group))
        .collect();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(leader), nix::sys::signal::Signal::SIGKILL).unwrap();
    escaped
}

#[tokio::test]
async fn claude_killed_mid_turn_fails_as_disconnected_and_its_escaped_command_is_killed_before_the_guard_clears() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit("RUN_BASH: echo started > started.txt; sleep 60").await;
    let escaped = kill_claude_mid_command(&r, &id).await;
    assert!(!escaped.is_empty(), "Claude's Bash command should run in its own session (notes §7)");
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_PROVIDER_DISCONNECTED", "{t:#}");
    // `finish` waited for the guard to clear: by then the escaped command must be gone.
    for pid in escaped {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"));
        assert!(!alive, "the escaped command {pid} outlived the guard");
    }
    assert!(marker_pids(&id).is_empty(), "{:?}", marker_pids(&id));
}

#[tokio::test]
async fn claude_review_task_refuses_changes_without_asking() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let id = r.submit_with(json!({ "prompt": "RUN_BASH: echo x > review.txt", "profile": "review" })).await;
    let t = r.b.wait_terminal(&id).await;
    assert_eq!(t["changes"]["status"], "read_only", "a review task reports no changes: {t:#}");
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!r.ws.join("review.txt").exists(), "a review task wrote to the workdir");
    let events = r.b.all_events(&id).await;
    let types = event_types(&events);
    assert!(!types.contains(&"approval.requested".to_owned()), "{types:?}");
    assert!(types.contains(&"provider.warning".to_owned()), "{types:?}");
    assert!(t["final_response"].as_str().unwrap().contains("review profile"), "{t:#}");
    // The model is not even offered the editing tools.
    let tools = r.server.posts("/v1/messages")[0].body["tools"].clone();
    assert!(!tools.as_array().unwrap().iter().any(|t| t["name"] == "Write"), "Write offered to a review task");
}

/// The attack through the real CLI: the model asks for one innocuous-looking command
/// (`python3 attack.py …`), a human approves it, and inside the task sandbox it reaches neither
/// the bridge socket (no admin key, no plan approval, no answer to an approval), nor the store,
/// spool or config, nor the session sockets — while the same script from the operator's shell
/// does all of it.
#[tokio::test]
async fn claude_an_approved_command_cannot_take_over_the_bridge() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let session = crate::containment::session_dir();
    let xdg = session.path().display().to_string();
    let Some(r) = RealBridge::start_with_vars(Cli::Claude, &[], &[("XDG_RUNTIME_DIR", &xdg)]).await else { return };
    let stage = crate::containment::Stage::set_up(&r.b, session.path(), &r.ws).await;
    let id = r.submit(&format!("RUN_BASH: {}", stage.attack_command(&r.b))).await;
    let (rid, payload) = r.pending(&id).await;
    assert_eq!(payload["tool"], "Bash", "{payload:#}");
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
    let text = t["final_response"].as_str().expect("final_response");
    let json_text = text.get(text.find('{').expect("a report")..=text.rfind('}').expect("a report")).expect("report");
    let report: serde_json::Value =
        serde_json::from_str(json_text).unwrap_or_else(|e| panic!("the command's report ({e}): {text}"));
    crate::containment::Stage::assert_contained(&report);
    stage.gates_hold(&r.b).await;
    stage.assert_operator_succeeds(&r.b, &r.ws).await;
}

/// The operator's own MCP servers (user scope in Claude's config, project scope in the
/// workdir's `.mcp.json`) never start for a task: `--strict-mcp-config` with none named.
#[tokio::test]
async fn claude_never_starts_the_operators_own_mcp_servers() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let user = r.cli_home.join("user-mcp-started");
    let project = r.cli_home.join("project-mcp-started");
    let server = |marker: &std::path::Path| json!({ "type": "stdio", "command": "sh", "args": ["-c", format!("touch {}; sleep 30", marker.display())] });
    let claude_json = json!({ "mcpServers": { "operator-own": server(&user) }, "hasCompletedOnboarding": true });
    std::fs::write(r.cli_home.join(".claude.json"), claude_json.to_string()).expect("write .claude.json");
    let mcp_json = json!({ "mcpServers": { "project-own": server(&project) } });
    std::fs::write(r.ws.join(".mcp.json"), mcp_json.to_string()).expect("write .mcp.json");
    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(!user.exists(), "the operator's user-scope MCP server was started for a task");
    assert!(!project.exists(), "the workdir's project MCP server was started for a task");
}

/// What a real Claude Code task changed in a plain (non-git) workdir: the file its approved
/// command added and the one it edited, with line counts, and a diff that applies.
#[tokio::test]
async fn claude_change_set_in_a_plain_directory_is_exactly_what_the_agent_wrote() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    std::fs::write(r.ws.join("edit.txt"), "one\ntwo\nthree\n").unwrap();
    let copy = r.b.root().join("claude-baseline");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(r.ws.join("edit.txt"), copy.join("edit.txt")).unwrap();
    let id = r.submit("RUN_BASH: printf 'new\\n' > added.txt && printf 'one\\nthree\\n' > edit.txt").await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let changes = &t["changes"];
    assert_eq!(changes["method"], "tree", "{changes:#}");
    let files = crate::changes::files(changes);
    // Claude Code may leave files of its own; the agent's two are there exactly.
    assert!(files.contains(&("added.txt".into(), "added".into(), 1, 0)), "{changes:#}");
    assert!(files.contains(&("edit.txt".into(), "modified".into(), 0, 1)), "{changes:#}");
    assert_eq!(files.len(), 2, "{changes:#}");
    crate::changes::applies(&r.b, &id, &copy, &r.ws, &["added.txt", "edit.txt"]).await;
}

/// An approved Claude Code `Bash` command of a prompt-injected task goes for the operator's SSH
/// key, the other runtime's credentials and for a second model server on the host's loopback: the key is not in its view, and
/// its only way out (the egress proxy) reaches the task's own model server and nothing else.
/// The refusal reaches the caller as an `egress.denied` event.
#[tokio::test]
async fn claude_an_approved_command_reads_no_secret_and_reaches_no_other_server() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    let other = messages::start().await;
    let port = other.url().rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse::<u16>().ok()).expect("port");
    let home = r.ws.parent().expect("root").join("home");
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n").expect("key");
    std::fs::create_dir_all(home.join(".codex")).expect("codex home");
    std::fs::write(home.join(".codex/auth.json"), "{\"OPENAI_API_KEY\":\"CODEX KEY\"}\n").expect("auth");
    let command = format!(
        "cat {0}/.ssh/id_ed25519 || echo no-key; cat {0}/.codex/auth.json || echo no-codex; curl -s --max-time 10 http://127.0.0.1:{port}/v1/messages || echo curl-failed",
        home.display()
    );
    let id = r.submit(&format!("RUN_BASH: {command}")).await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let said = t["final_response"].as_str().unwrap_or_default();
    assert!(said.contains("no-key") && !said.contains("PRIVATE KEY"), "{said}");
    assert!(said.contains("no-codex") && !said.contains("CODEX KEY"), "the other runtime's key: {said}");
    assert!(said.contains("is not allowed for this task"), "the proxy's refusal: {said}");
    assert!(other.requests().is_empty(), "the second server was reached: {:?}", other.requests());
    let events = r.b.all_events(&id).await;
    let denied = events.iter().find(|e| e["event_type"] == "egress.denied").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(denied["payload"]["port"], port, "{denied:#}");
    // The task's own model server was reached, through the same proxy.
    assert!(!r.server.posts("/v1/messages").is_empty());
}

/// Claude Code in worktree mode: its approved command writes in its own worktree, not the
/// checkout, and the bridge puts its work on its branch.
#[tokio::test]
async fn claude_works_in_a_worktree_on_its_own_branch() {
    let Some(r) = RealBridge::start(Cli::Claude, &[]).await else { return };
    crate::changes::repository_with_state(&r.ws, &r.b.root().join("claude-wt-copy"));
    let before = crate::worktrees::checkout_now(&r.ws);
    let id = r.submit_with(json!({ "prompt": "RUN_BASH: printf 'new\\n' > added.txt", "isolation": "worktree" })).await;
    let (rid, _) = r.pending(&id).await;
    r.respond(&id, &rid, "approve_once").await;
    let t = r.finish(&id).await;
    crate::worktrees::assert_real_worktree_task(&r.ws, &t, "added.txt", &before);
}
