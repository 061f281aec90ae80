//! The operator's view of recovery: `agent-bridge doctor` (text and `--json`) and
//! `agent-bridge guards list|clear`. The orphan cases (a workdir closed by a process that
//! outlived its bridge) are in `orphans.rs`.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use e2e::TestBridge;

pub(crate) fn doctor_json(b: &TestBridge) -> (Option<i32>, Value) {
    let out = b.cli_env(&["doctor", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json printed no JSON ({e}):\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

fn state_of(report: &Value, alias: &str) -> String {
    let w = report["workdirs"].as_array().and_then(|ws| ws.iter().find(|w| w["alias"] == alias));
    w.and_then(|w| w["state"].as_str()).unwrap_or_else(|| panic!("no {alias}: {report:#}")).to_owned()
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["check"] == name))
        .unwrap_or_else(|| panic!("no check {name:?}: {report:#}"))
}

#[tokio::test]
async fn doctor_reports_free_and_busy_workdirs_of_a_healthy_bridge() {
    let mut b = TestBridge::start().await;
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    assert_eq!(report["healthy"], true);
    assert_eq!(check(&report, "bridge")["level"], "ok");
    assert_eq!(check(&report, "state directory")["level"], "ok");
    assert_eq!(check(&report, "lock directory")["level"], "ok");
    assert_eq!(check(&report, "change sets")["level"], "ok", "git is installed here: {report:#}");
    assert_eq!((state_of(&report, "repo"), state_of(&report, "docs")), ("free".into(), "free".into()));

    // A running writer holds the lease: busy, named, and not a failure.
    let id = b.submit("wait:30").await;
    b.wait_status(&id, "running").await;
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "a busy workdir is no failure: {report:#}");
    assert_eq!(state_of(&report, "repo"), "busy");
    let repo = report["workdirs"].as_array().unwrap().iter().find(|w| w["alias"] == "repo").unwrap();
    assert_eq!(repo["lease_holder"], id.as_str());
    let text = b.cli_env(&["doctor"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("WORKDIR") && text.contains("busy") && text.contains(&id), "{text}");

    // A guard that a live task of this bridge holds cannot be cleared by hand.
    let out = b.cli(&["guards", "clear", "repo", "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("WORKDIR_BUSY"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(b.guard_count(), 1);
    // A workdir without a guard: nothing to clear, and an unknown one is refused.
    let out = b.cli(&["guards", "clear", "docs", "--force", "--json"]);
    assert!(out.status.success());
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["cleared"], false);
    let out = b.cli(&["guards", "clear", "nowhere", "--force"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("WORKDIR_NOT_FOUND"));

    b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
    b.writer_idle().await;

    // Down after an orderly stop: no socket, nothing closed, still healthy.
    b.stop().await;
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    assert_eq!(check(&report, "bridge")["level"], "warn");
    assert_eq!(state_of(&report, "repo"), "free");
}

#[tokio::test]
async fn doctor_fails_on_a_state_directory_open_to_others() {
    let mut b = TestBridge::start().await;
    b.stop().await;
    std::fs::set_permissions(&b.state_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (exit, report) = doctor_json(&b);
    std::fs::set_permissions(&b.state_dir, std::fs::Permissions::from_mode(0o700)).expect("chmod back");
    assert_eq!(exit, Some(1), "{report:#}");
    assert_eq!(report["healthy"], false);
    assert_eq!(check(&report, "state directory")["level"], "fail", "{report:#}");
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
}

#[tokio::test]
async fn doctor_warns_about_a_notification_target_failing_for_an_hour() {
    // Nothing listens on port 9 of the loopback: every attempt fails to connect.
    let options = e2e::Options::default()
        .with("SERVERFS_NOTIFY_01_URL=http://127.0.0.1:9/hook")
        .with("SERVERFS_NOTIFY_01_KIND=webhook")
        .with("SERVERFS_NOTIFY_01_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .with("SERVERFS_NOTIFY_RETRY_BASE_MS=100");
    let mut b = TestBridge::start_with(options).await;
    let id = b.submit("complete: done").await;
    b.wait_status(&id, "succeeded").await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v = b.call("admin_list_notifications", json!({ "limit": 5 })).await.expect("list");
        if v["deliveries"][0]["attempts"].as_i64().unwrap_or(0) >= 1 {
            assert_eq!(v["deliveries"][0]["state"], "pending", "{v:#}");
            assert_eq!(v["deliveries"][0]["last_error"], "connection failed", "{v:#}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no attempt: {v:#}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    assert_eq!(check(&report, "notifications")["level"], "ok", "failing, but not for an hour yet");
    b.stop().await;
    b.age_notification_attempts(2);
    // Down: read from the store.
    let (exit, report) = doctor_json(&b);
    assert_eq!(exit, Some(0), "a failing target is a warning, not a failure: {report:#}");
    let warning = check(&report, "notifications");
    assert_eq!(warning["level"], "warn", "{report:#}");
    let detail = warning["detail"].as_str().expect("detail");
    assert!(
        detail.contains("target 01") && detail.contains("has failed since") && detail.contains("notify test 01"),
        "{detail}"
    );
    assert!(!detail.contains("/hook"), "the URL's path is not shown: {detail}");
    // Up again: the bridge says the same.
    b.spawn().await;
    let (_, report) = doctor_json(&b);
    assert_eq!(check(&report, "notifications")["level"], "warn", "{report:#}");
    let text = String::from_utf8_lossy(&b.cli_env(&["doctor"]).stdout).into_owned();
    assert!(text.contains("[warn] notifications: target 01 (webhook to http://127.0.0.1:9/…)"), "{text}");
}
