//! What the deployment files rely on in the real `mcp-front` binary: `mcp-front healthcheck`
//! (the image's health check, which has no shell or HTTP client to call) and
//! `--require-bridge-dir` (the image's default command, which turns a missing socket mount,
//! the compose trap, into a refusal to start).

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use e2e::TestBridge;
use e2e::front::{TestFront, front_bin};

/// Runs the front binary to its end (bounded) and returns its output.
async fn run_front(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(front_bin());
    command
        .args(args)
        .env_remove("SERVERFS_MCP_LISTEN")
        .env_remove("SERVERFS_AGENT_BRIDGE_SOCKET")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("mcp-front exits within 30 s")
        .expect("run mcp-front")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_healthcheck_command_follows_the_bridge() {
    let mut bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let addr = front.addr.to_string();

    let out = run_front(&["healthcheck", "--addr", &addr]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("healthy: {\"status\":\"ok\"}"), "{}", stdout(&out));
    // The listen address from the environment, as in the image (SERVERFS_MCP_LISTEN).
    let out = Command::new(front_bin())
        .arg("healthcheck")
        .env("SERVERFS_MCP_LISTEN", &addr)
        .output()
        .expect("run mcp-front healthcheck");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    bridge.stop().await;
    let out = run_front(&["healthcheck", "--addr", &addr]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.starts_with("unhealthy: HTTP/1.1 503"), "{text}");
    assert!(text.contains("AGENT_BRIDGE_UNAVAILABLE"), "{text}");

    bridge.spawn().await;
    let out = run_front(&["healthcheck", "--addr", &addr]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test]
async fn the_healthcheck_command_reports_a_front_that_is_not_there() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let out = run_front(&["healthcheck", "--addr", &free.to_string()]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("unhealthy: cannot connect"), "{}", stdout(&out));
}

#[tokio::test]
async fn a_required_bridge_dir_that_is_missing_refuses_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("not-mounted/bridge.sock");
    let socket = socket.to_str().expect("utf-8");
    let out = run_front(&["--listen", "127.0.0.1:0", "--bridge-socket", socket, "--require-bridge-dir"]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the bridge socket's directory"), "{stderr}");
    assert!(stderr.contains("not-mounted does not exist"), "{stderr}");
    assert!(stderr.contains("compose.agent.yml"), "{stderr}");

    // The directory present (the mount), the bridge down: the front starts and says so per call.
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &["--require-bridge-dir"]).await;
    assert_eq!(front.http("GET", "/healthz", &[], b"").await.status, 200);
}
