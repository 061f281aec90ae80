//! Errors that say why, for the operator and the caller: a busy workdir names the task holding
//! it and the human it waits for, a runtime that cannot run (not installed, not logged in) is
//! `AGENT_RUNTIME_UNAVAILABLE` rather than a policy refusal and is seen again once installed,
//! and a provider that cannot reach its model service fails within its bound. The CLI shows a
//! pending request with the commands that answer it and answers it without its id. Real
//! `codex` and `claude` CLIs, against closed loopback ports where they must fail.

use std::time::Duration;

use serde_json::{Value, json};

use e2e::TestBridge;
use e2e::real::{Cli, RealBridge, installed, outside_tmp};
use e2e::{error_of, poll_until_async};

fn runtime(list: &Value, name: &str) -> Value {
    list["runtimes"].as_array().expect("runtimes").iter().find(|r| r["name"] == name).cloned().expect("listed")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A second writer is told which task holds the workdir, that it waits for a human's approval
/// and until when; another caller learns the state but not the task. The CLI shows the
/// pending approval with the command that answers it, and that command needs no request id.
#[tokio::test]
async fn a_busy_workdir_names_its_holder_and_the_human_it_waits_for() {
    let b = TestBridge::start().await;
    let alice = b.create_key("alice", "operator").await;
    let bob = b.create_key("bob", "operator").await;
    let args = |prompt: &str| json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt });
    let held = b.call_mcp(Some(&alice), "submit_agent_task", args("approval:rm -rf build")).await.expect("submit");
    let id = held["task_id"].as_str().unwrap().to_owned();
    let t = b.wait_for(&id, |t| t["pending_request"].is_object()).await;
    let request = t["pending_request"]["request_id"].as_str().unwrap().to_owned();

    let (code, message) = error_of(&b.call_mcp(Some(&alice), "submit_agent_task", args("complete:x")).await);
    assert_eq!(code, "WORKDIR_BUSY");
    assert!(message.contains(&format!("task {id} holds it (waiting_for_approval since 20")), "{message}");
    assert!(message.contains(&format!("waits for an approval from a human (request {request})")), "{message}");
    assert!(message.contains("until that is given or expires at 20"), "{message}");

    let (code, message) = error_of(&b.call_mcp(Some(&bob), "submit_agent_task", args("complete:x")).await);
    assert_eq!(code, "WORKDIR_BUSY");
    assert!(message.contains("another caller's task holds it (waiting_for_approval since"), "{message}");
    assert!(!message.contains(&id) && !message.contains(&request), "bob learns alice's ids: {message}");

    let shown = b.cli(&["tasks", "show", &id]);
    let text = stdout(&shown);
    assert!(shown.status.success(), "{text}");
    assert!(text.contains(&format!("needs you approval {request}")), "{text}");
    assert!(text.contains("Run `rm -rf build`") || text.contains("rm -rf build"), "{text}");
    assert!(text.contains(&format!("agent-bridge tasks approve {id}\n")), "{text}");
    assert!(text.contains(&format!("agent-bridge tasks deny {id}")), "{text}");
    assert!(!text.contains("\"payload\""), "raw JSON in `tasks show`: {text}");

    // A question is not an approval: `tasks answer ID` without a request id says so.
    let wrong = b.cli(&["tasks", "answer", &id, "--select", "q1=opt_1"]);
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success() && err.contains("REQUEST_NOT_FOUND"), "{err}");
    assert!(err.contains(&format!("task {id} has a pending approval ({request}), not a question")), "{err}");

    let approved = b.cli(&["tasks", "approve", &id]);
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));
    assert!(stdout(&approved).contains(&request), "{}", stdout(&approved));
    let t = b.wait_for(&id, |t| t["terminal"] == true).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let again = b.cli(&["tasks", "deny", &id]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("has no pending approval (it is succeeded)"), "{err}");
}

/// Codex is not on the bridge's PATH at start: listed unavailable as not installed, a submit
/// refused `AGENT_RUNTIME_UNAVAILABLE` (not the policy's `AGENT_RUNTIME_NOT_ALLOWED`). Once it
/// is installed on that PATH, the same bridge lists it and runs a task, with no restart.
#[tokio::test]
async fn a_runtime_installed_after_start_is_seen_without_a_restart() {
    let Some(launcher) = installed(Cli::Codex) else {
        // `start_unconfigured` below says loudly why, and fails under CI.
        assert!(RealBridge::start_unconfigured(Cli::Codex, &[], &[]).await.is_none());
        return;
    };
    let bin_dir = outside_tmp("ab-path-");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.path().display());
    let Some(r) = RealBridge::start_unconfigured(Cli::Codex, &[], &[("PATH", &path)]).await else { return };
    let before = runtime(&r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes"), "codex");
    assert_eq!(before["available"], false, "{before:#}");
    assert_eq!(before["reason"], "not_installed", "{before:#}");
    assert!(before["detail"].as_str().unwrap().contains("no `codex` on the bridge's PATH"), "{before:#}");
    let (code, message) = error_of(
        &r.b.call("submit_agent_task", json!({ "runtime": "codex", "workdir": "ws", "prompt": "say hello" })).await,
    );
    assert_eq!(code, "AGENT_RUNTIME_UNAVAILABLE", "{message}");
    assert!(message.contains("not installed"), "{message}");

    std::os::unix::fs::symlink(&launcher, bin_dir.path().join("codex")).expect("install codex on the PATH");
    poll_until_async("codex is listed available", Duration::from_secs(30), || async {
        runtime(&r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes"), "codex")["available"] == true
    })
    .await;
    let id = r.submit("say hello").await;
    let t = r.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", r.b.log());
}

/// A CLI that is installed but not logged in is unavailable with the reason `not_logged_in`
/// and a submit says so; its probe never starts inference.
#[tokio::test]
async fn a_logged_out_runtime_is_refused_as_unavailable() {
    // Claude Code with no credentials: a fresh config dir and no ANTHROPIC_API_KEY.
    let Some(r) = RealBridge::start_with_vars(Cli::Claude, &[], &[("ANTHROPIC_API_KEY", "")]).await else { return };
    let claude = runtime(&r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes"), "claude");
    assert_eq!(claude["available"], false, "{claude:#}");
    assert_eq!(claude["reason"], "not_logged_in", "{claude:#}");
    assert!(claude["version"].is_null(), "{claude:#}");
    let (code, message) =
        error_of(&r.b.call("submit_agent_task", json!({ "runtime": "claude", "workdir": "ws", "prompt": "hi" })).await);
    assert_eq!(code, "AGENT_RUNTIME_UNAVAILABLE", "{message}");
    assert!(message.contains("not logged in") && message.contains("claude auth login"), "{message}");
    assert!(r.server.posts("/v1/messages").is_empty(), "the probe must not start inference");

    // Codex with its default provider (OpenAI, which needs a login) and no login.
    let Some(r) = RealBridge::start(Cli::Codex, &[]).await else { return };
    std::fs::remove_file(r.cli_home.join("config.toml")).expect("drop the scripted provider");
    let codex = runtime(&r.b.call("list_agent_runtimes", json!({})).await.expect("runtimes"), "codex");
    assert_eq!(codex["available"], false, "{codex:#}");
    assert_eq!(codex["reason"], "not_logged_in", "{codex:#}");
    let (code, message) =
        error_of(&r.b.call("submit_agent_task", json!({ "runtime": "codex", "workdir": "ws", "prompt": "hi" })).await);
    assert_eq!(code, "AGENT_RUNTIME_UNAVAILABLE", "{message}");
    assert!(message.contains("not logged in") && message.contains("codex login"), "{message}");
}

/// The model service is a closed loopback port and the CLI would retry for minutes: the task
/// fails `AGENT_RUNTIME_UNAVAILABLE` once the bound (3 s here) has passed, with the CLI's last
/// reason, and nothing of it keeps running.
#[tokio::test]
async fn a_provider_that_cannot_reach_its_service_fails_within_its_bound() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let bound = ["SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS=3"];
    let url = format!("http://127.0.0.1:{closed}");
    for cli in [Cli::Claude, Cli::Codex] {
        let r = match cli {
            Cli::Claude => RealBridge::start_with_vars(cli, &bound, &[("ANTHROPIC_BASE_URL", &url)]).await,
            Cli::Codex => RealBridge::start(cli, &bound).await,
        };
        let Some(r) = r else { return };
        if cli == Cli::Codex {
            // Many retries of its own, towards nothing. A failed request is retried silently
            // (`request_max_retries`), a failed stream with a "Reconnecting… n/m" notification
            // (`stream_max_retries`): with these settings Codex would go on for minutes.
            let config = format!(
                "model = \"scripted-model\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\n\
                 name = \"Nothing listens here\"\nbase_url = \"{url}/v1\"\nwire_api = \"responses\"\n\
                 env_key = \"{}\"\nrequest_max_retries = 1\nstream_max_retries = 50\n",
                e2e::real::CODEX_KEY_VAR
            );
            std::fs::write(r.cli_home.join("config.toml"), config).expect("config.toml");
        }
        let started = std::time::Instant::now();
        let id = r.submit("say hello").await;
        let t = r.b.wait_terminal(&id).await;
        let took = started.elapsed();
        assert_eq!(t["status"], "failed", "{}: {t:#}\n{}", cli.name(), r.b.log());
        assert_eq!(t["error"]["code"], "AGENT_RUNTIME_UNAVAILABLE", "{}: {t:#}", cli.name());
        let message = t["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("the {} runtime could not reach its model service for 3 s", cli.name())),
            "{message}"
        );
        assert!(message.contains("its last error:"), "{message}");
        assert!(took < Duration::from_secs(30), "{}: failed after {took:?}", cli.name());
        r.no_survivors(&id, Duration::from_secs(10)).await;
    }
}
