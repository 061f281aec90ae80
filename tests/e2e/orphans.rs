//! Proof of stop against processes that escape a plain group kill: an agent's
//! stray background command (`orphan:SECONDS` leaves a `setsid sleep` carrying the task
//! marker). While the bridge runs it kills the orphan before it clears the guard and reaps it;
//! after `kill -9` of the bridge the orphan outlives it, and the next bridge keeps the workdir
//! closed until the orphan is gone, or until an operator clears the guard by hand (audited).

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use e2e::{TestBridge, alive, code, event_types, marker_pids, poll_until, zombie_children};

/// An orphan outlives its bridge only without the task sandbox (whose PID namespace dies with
/// the bridge): the marker proof's own case, tested with the sandbox off.
const NO_SANDBOX: &str = "SERVERFS_AGENT_SANDBOX=off";

/// Kills a stray test process when the test ends, whatever happens.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

fn doctor(b: &TestBridge) -> (Option<i32>, Value) {
    let out = b.cli_env(&["doctor", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("doctor --json printed no JSON ({e}):\n{text}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), v)
}

fn workdir<'a>(report: &'a Value, alias: &str) -> &'a Value {
    report["workdirs"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["alias"] == alias))
        .unwrap_or_else(|| panic!("no {alias}: {report:#}"))
}

/// The doctor's verdict on `repo` closed by the orphan of `task_id`.
fn assert_doctor_sees_the_orphan(report: &Value, exit: Option<i32>, task_id: &str, orphan: i32) {
    assert_eq!(exit, Some(1), "a closed workdir is a failed check: {report:#}");
    assert_eq!(report["healthy"], false);
    let repo = workdir(report, "repo");
    assert_eq!(repo["state"], "recovery_required", "{report:#}");
    assert_eq!(repo["guard"]["task_id"], task_id);
    let proof = &repo["guard"]["proof"];
    assert_eq!(proof["marker_processes"], json!([orphan]), "the orphan is listed by its marker: {proof:#}");
    assert_eq!(proof["proven_stopped"], false);
    assert!(proof["missing"].as_str().is_some_and(|m| m.contains("marker")), "{proof:#}");
    assert_eq!(workdir(report, "docs")["state"], "free");
    let checks = report["checks"].as_array().expect("checks");
    assert!(
        checks.iter().any(|c| c["check"] == "recovery guard"
            && c["level"] == "fail"
            && c["detail"].as_str().is_some_and(|d| d.contains(task_id))),
        "{checks:#?}"
    );
}

#[tokio::test]
async fn an_orphan_is_killed_and_reaped_before_the_guard_clears() {
    let b = TestBridge::start().await;
    let bridge = b.pid().expect("running") as i32;
    let id = b.submit("orphan:60").await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    assert_eq!(end["final_response"], "orphan left for 60 s");
    let events = b.all_events(&id).await;
    assert!(
        events.iter().any(|e| e["payload"]["text"] == "left a background process for 60 s"),
        "the provider did start its background process: {events:#?}"
    );

    // The guard goes only once nothing carries the task's marker any more.
    let started = Instant::now();
    loop {
        let guards = b.guard_count();
        let marked = marker_pids(&id);
        if guards == 0 {
            assert!(marked.is_empty(), "the guard was cleared while {marked:?} still carry the marker");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the guard stays: {marked:?}\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.writer_idle().await;
    assert!(marker_pids(&id).is_empty(), "the orphan was killed, not left to sleep its 60 s");
    // Reparented to the bridge (a child subreaper), the killed orphan is reaped: no zombie
    // child remains under the bridge.
    poll_until("no zombie child remains under the bridge", Duration::from_secs(10), || {
        zombie_children(bridge).is_empty()
    })
    .await;

    let next = b.submit("complete:after the orphan").await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    b.writer_idle().await;
    assert!(zombie_children(bridge).is_empty(), "{:?}", zombie_children(bridge));
}

#[tokio::test]
async fn an_orphan_that_outlives_a_killed_bridge_keeps_the_workdir_closed_until_it_is_gone() {
    let mut b = TestBridge::start_with(e2e::Options::default().with(NO_SANDBOX)).await;
    let (id, orphan) = b.crash_leaving_an_orphan(120).await;
    let _cleanup = KillOnDrop(orphan);
    assert!(alive(orphan), "the orphan outlived the bridge");
    let turns = b.fake_turns();
    assert_eq!(b.guard_count(), 1);

    // With the bridge down, the doctor reads the store: a stale socket, and the closed workdir.
    let (exit, report) = doctor(&b);
    assert_doctor_sees_the_orphan(&report, exit, &id, orphan);
    let bridge_check = report["checks"].as_array().unwrap().iter().find(|c| c["check"] == "bridge").cloned();
    assert!(
        bridge_check.as_ref().is_some_and(|c| c["detail"].as_str().is_some_and(|d| d.contains("stale socket"))),
        "{bridge_check:?}"
    );

    b.spawn().await;
    let t = b.get(&id).await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(t["error"]["code"], "BRIDGE_RESTARTED");
    assert_eq!(b.fake_turns(), turns, "never re-run");
    assert!(alive(orphan));
    assert_eq!(b.guard_count(), 1, "the orphan carries the marker: no proof, no clearing");
    let rows = b.task_count();
    let refused = b.submit_args(json!({ "prompt": "complete:too early" })).await;
    assert_eq!(code(&refused), "WORKDIR_RECOVERY_REQUIRED");
    assert!(refused.unwrap_err().to_string().contains(&id));
    assert_eq!(b.task_count(), rows);

    // The doctor through the running bridge says the same.
    let (exit, report) = doctor(&b);
    assert_doctor_sees_the_orphan(&report, exit, &id, orphan);
    let listed = b.cli(&["guards", "list", "--json"]);
    assert!(listed.status.success());
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("guards list --json");
    assert_eq!(workdir(&listed, "repo")["state"], "recovery_required", "{listed:#}");

    // Still closed a moment later: nothing but the orphan's end may open it.
    let refused = b.submit_args(json!({ "prompt": "complete:still too early" })).await;
    assert_eq!(code(&refused), "WORKDIR_RECOVERY_REQUIRED");

    kill(Pid::from_raw(orphan), Signal::SIGKILL).expect("kill the orphan");
    poll_until("the orphan is gone", Duration::from_secs(10), || !alive(orphan)).await;
    // The bridge watches the processes that keep a guard from its proof: once they are gone it
    // clears the guard by itself, without waiting for a submit.
    poll_until("the guard clears once the orphan is gone", Duration::from_secs(10), || b.guard_count() == 0).await;
    let old = b.get(&id).await;
    assert_eq!(old["error"]["code"], "BRIDGE_RESTARTED", "the reason stays the restart: {old:#}");
    let next = b.submit_ok(json!({ "prompt": "complete:recovered" })).await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    let old = b.get(&id).await;
    assert_eq!(old["status"], "interrupted");
    let reason = old["error"]["code"].as_str().unwrap_or_default();
    assert!(reason == "BRIDGE_RESTARTED" || reason == "AGENT_PROVIDER_INACTIVE", "{old:#}");
    b.writer_idle().await;
    let (exit, report) = doctor(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    assert_eq!(workdir(&report, "repo")["state"], "free");
}

#[tokio::test]
async fn an_operator_may_clear_a_guard_by_hand_while_the_orphan_lives_and_it_is_audited() {
    let mut b = TestBridge::start_with(e2e::Options::default().with(NO_SANDBOX)).await;
    let (id, orphan) = b.crash_leaving_an_orphan(120).await;
    let _cleanup = KillOnDrop(orphan);
    b.spawn().await;
    assert_eq!(code(&b.submit_args(json!({ "prompt": "complete:x" })).await), "WORKDIR_RECOVERY_REQUIRED");

    let without_force = b.cli(&["guards", "clear", "repo"]);
    assert_eq!(without_force.status.code(), Some(2), "clearing without --force is a usage error");
    assert_eq!(b.guard_count(), 1);

    let out = b.cli(&["guards", "clear", "repo", "--force", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["cleared"], true, "{v:#}");
    assert_eq!(v["task_id"], id.as_str());
    assert_eq!(v["proof_at_clearing"]["marker_processes"], json!([orphan]), "the clearing records what was left");
    assert_eq!(b.guard_count(), 0);
    assert!(alive(orphan), "a forced clear kills nothing");

    // The operator's word opens the workdir.
    let next = b.submit_ok(json!({ "prompt": "complete:after a forced clear" })).await;
    assert_eq!(b.wait_terminal(&next).await["status"], "succeeded");
    let old = b.get(&id).await;
    assert_eq!(old["status"], "interrupted");
    let types = event_types(&b.all_events(&id).await);
    assert!(types.iter().any(|t| t == "guard.cleared"), "{types:?}");

    let audit = b
        .call("admin_read_audit_log", json!({ "capability": "admin_clear_guard", "limit": 50 }))
        .await
        .expect("read the audit log");
    let rows = audit["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "one forced clear reached the bridge: {audit:#}");
    assert_eq!(rows[0]["outcome"], "ok");
    assert_eq!(rows[0]["surface"], "cli");
    assert_eq!(rows[0]["capability"], "admin_clear_guard");
    kill(Pid::from_raw(orphan), Signal::SIGKILL).expect("kill the orphan");
}
