//! `kill -9` of the bridge at random points of a submission, hundreds of times over one
//! state directory, each followed by a restart and a retry with the same idempotency key:
//! never two tasks for a key, never a stranded lease, never a guard without its task, the
//! database stays intact — and nothing a killed bridge was starting outlives it: in
//! the sandbox, every restart finds the workdir open and no sandbox left.
//!
//! `CRASHLOOP_ITERATIONS` (default 100) and `CRASHLOOP_SEED` (default: the clock, printed)
//! replay a run. Every fifth iteration aims the kill inside a change-set snapshot's start (the
//! debug build's test hook holds the snapshot's child between fork and exec; `CRASHLOOP_AIMED=0`
//! leaves them out, for a build without the hook); the others land up to 3, 20 or 80 ms after
//! the request was written.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use bridge_proto::envelope::Request;
use bridge_proto::methods::{self, CallParams, Surface};
use e2e::{TestBridge, marker_pids, poll_until, poll_until_async};

/// The windows (µs) the kill lands in after the request was written, in turn: the first
/// milliseconds (the request read, checked and inserted: a submission commits about 1–3 ms
/// after it is written), the runner's start, and the provider's run.
const WINDOWS_US: [u64; 3] = [3_000, 20_000, 80_000];

/// SplitMix64: a small deterministic generator, so a failing iteration can be replayed with
/// the same seed.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(text.parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a number")))
}

fn arguments(prompt: &str, key: &str) -> Value {
    json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt, "idempotency_key": key })
}

/// Writes one `submit_agent_task` line on a fresh connection (as the local operator) and
/// returns the connection unread: the caller never learns the outcome.
async fn send_submit(b: &TestBridge, prompt: &str, key: &str) -> UnixStream {
    let Value::Object(arguments) = arguments(prompt, key) else { unreachable!() };
    let params = CallParams {
        credential: None,
        surface: Surface::Cli,
        path: Default::default(),
        client: None,
        name: "submit_agent_task".to_owned(),
        arguments,
    };
    let Ok(Value::Object(params)) = serde_json::to_value(params) else { unreachable!() };
    let request = Request { request_id: format!("crash-{key}"), method: methods::CAPABILITIES_CALL.to_owned(), params };
    let mut stream = UnixStream::connect(&b.socket).await.expect("connect");
    stream.write_all(&request.to_line()).await.expect("send the submission");
    stream
}

fn tasks_for_key(b: &TestBridge, key: &str) -> Vec<String> {
    let db = b.db();
    let mut stmt = db.prepare("SELECT task_id FROM tasks WHERE idempotency_key = ?1").expect("prepare");
    stmt.query_map([key], |r| r.get(0)).expect("query").collect::<Result<_, _>>().expect("rows")
}

fn guards_without_task(b: &TestBridge) -> i64 {
    b.db_count("SELECT COUNT(*) FROM recovery_guards g LEFT JOIN tasks t USING (task_id) WHERE t.task_id IS NULL")
}

fn guard_task(b: &TestBridge) -> Option<String> {
    use rusqlite::OptionalExtension;
    b.db().query_row("SELECT task_id FROM recovery_guards", [], |r| r.get(0)).optional().expect("guard")
}

/// Where an iteration's kill lands.
#[derive(Debug, Clone, Copy)]
enum Aim {
    /// Up to this many µs after the request was written.
    Within(u64),
    /// Inside the start of a snapshot (`snapshot-baseline` or `snapshot-end`), on purpose.
    Snapshot(&'static str),
}

#[tokio::test]
async fn kill_9_at_random_points_of_submit_never_duplicates_strands_or_leaves_a_sandbox() {
    let iterations = env_number("CRASHLOOP_ITERATIONS").unwrap_or(100) as u32;
    let seed = env_number("CRASHLOOP_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    e2e::measured(format_args!("crash loop: CRASHLOOP_SEED={seed} CRASHLOOP_ITERATIONS={iterations}"));
    let aiming = env_number("CRASHLOOP_AIMED") != Some(0);
    let contained = crate::containment::sandbox_available();
    let started = Instant::now();
    let mut b = TestBridge::start().await;
    let mut outcomes: BTreeMap<String, u32> = BTreeMap::new();
    let (mut lazy_clears, mut half_spawned, mut aimed) = (0, 0, 0);
    for i in 0..iterations {
        let at = format!("iteration {i} (CRASHLOOP_SEED={seed})");
        let key = format!("crash-loop-{i}");
        let random = splitmix64(seed ^ u64::from(i));
        let aim = match i % 5 {
            4 if aiming && i % 10 == 4 => Aim::Snapshot("snapshot-baseline"),
            4 if aiming => Aim::Snapshot("snapshot-end"),
            n => Aim::Within(random % WINDOWS_US[n as usize % 3]),
        };
        // Mostly instant tasks (the kill lands before, during or after the whole run), and
        // every fourth a provider that is still running when the kill lands.
        let prompt = if i % 4 == 3 { "wait:1".to_owned() } else { format!("complete:iteration {i}") };

        let stream = match aim {
            Aim::Within(us) => {
                let stream = send_submit(&b, &prompt, &key).await;
                tokio::time::sleep(Duration::from_micros(us)).await;
                b.crash().await;
                stream
            }
            Aim::Snapshot(kind) => {
                // A bridge whose snapshots of that kind are held before they execute.
                let _ = b.stop().await;
                b.set_var("AGENT_BRIDGE_TEST_SPAWN", &format!("{kind}:pause={}", crate::leftovers::PAUSE_MS));
                b.spawn().await;
                let stream = send_submit(&b, &prompt, &key).await;
                crate::leftovers::kill_between_spawn_and_exec(&mut b).await;
                b.set_var("AGENT_BRIDGE_TEST_SPAWN", "agent:pause=0");
                aimed += 1;
                stream
            }
        };
        drop(stream);
        let committed = tasks_for_key(&b, &key);
        assert!(committed.len() <= 1, "{at}: {committed:?}");
        assert_eq!(guards_without_task(&b), 0, "{at}: a guard without its task after the crash");

        // A provider being spawned when the kill landed is a fork of the bridge that still
        // holds the instance lock until it execs or exits: a restart in that window is
        // refused ("another agent-bridge already runs"). Wait for it, and count how often.
        if !b.instance_lock_is_free() {
            half_spawned += 1;
            poll_until("the instance lock is released", Duration::from_secs(10), || b.instance_lock_is_free()).await;
        }
        b.spawn().await;
        let retry = b
            .call("submit_agent_task", arguments(&prompt, &key))
            .await
            .unwrap_or_else(|e| panic!("{at}: the retry was refused: {e}\n{}", b.log()));
        let id = retry["task_id"].as_str().expect("task_id").to_owned();
        let replay = retry["idempotent_replay"] == true;
        assert_eq!(replay, !committed.is_empty(), "{at}: a committed task is replayed, never redone");
        if let Some(first) = committed.first() {
            assert_eq!(&id, first, "{at}: the retry returns the committed task");
        }
        assert_eq!(tasks_for_key(&b, &key), vec![id.clone()], "{at}: one task per key");
        let t = b.wait_terminal(&id).await;
        let outcome = format!(
            "{}{}{}",
            if replay { "replayed " } else { "new " },
            t["status"].as_str().unwrap_or("?"),
            t["error"]["code"].as_str().map(|c| format!("/{c}")).unwrap_or_default()
        );
        assert!(
            ["replayed succeeded", "replayed interrupted/BRIDGE_RESTARTED", "new succeeded"]
                .contains(&outcome.as_str()),
            "{at}: unexpected outcome {outcome}: {t:#}"
        );
        *outcomes.entry(outcome).or_default() += 1;

        // The lease is never stranded: free once the task is terminal (its runner released it
        // before publishing the state, or no runner of this bridge ever held it).
        poll_until(&format!("{at}: the lease is released"), Duration::from_secs(10), || b.lease_is_free(1)).await;
        assert_eq!(guards_without_task(&b), 0, "{at}: a guard without its task");
        if contained {
            // The start stopped whatever the killed bridge was starting, and proved it.
            assert_eq!(guard_task(&b), None, "{at}: the workdir stayed closed after the restart:\n{}", b.log());
            let left = b.sandboxes_left();
            assert!(left.is_empty(), "{at}: sandboxes outlived the kill (now killed): {left:#?}\n{}", b.log());
            continue;
        }
        // Without the sandbox, a guard that stays must be explained: it is this task's, kept
        // at startup because the crashed bridge's provider had not exited yet. The next writer
        // re-checks the proof and clears it (the provider is gone by now).
        if let Some(guarded) = guard_task(&b) {
            assert_eq!(guarded, id, "{at}: the guard names another task");
            assert_eq!(t["status"], "interrupted", "{at}: a finished runner left its guard:\n{}", b.log());
            poll_until_async("the crashed bridge's provider exits", Duration::from_secs(10), || async {
                let status = b.call("admin_workdir_status", json!({})).await.expect("workdir status");
                let repo = status["workdirs"].as_array().and_then(|w| w.iter().find(|w| w["alias"] == "repo").cloned());
                // Proven, or already cleared by the guard's watcher.
                repo.is_some_and(|r| r["guard"].is_null() || r["guard"]["proof"]["proven_stopped"] == true)
            })
            .await;
            assert!(marker_pids(&guarded).is_empty());
            let probe = b.submit_ok(json!({ "prompt": "complete:probe" })).await;
            assert_eq!(b.wait_terminal(&probe).await["status"], "succeeded");
            lazy_clears += 1;
            b.writer_idle().await;
        }
    }
    let status = b.stop().await;
    assert!(status.success(), "{status}");
    let db = b.db();
    let integrity: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(integrity, "ok");
    let fk_problems: i64 = db.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| r.get(0)).unwrap();
    assert_eq!(fk_problems, 0);
    assert_eq!(
        b.db_count("SELECT COUNT(DISTINCT idempotency_key) FROM tasks WHERE idempotency_key LIKE 'crash-loop-%'"),
        i64::from(iterations)
    );
    assert_eq!(
        b.db_count("SELECT COUNT(*) FROM tasks WHERE idempotency_key LIKE 'crash-loop-%'"),
        i64::from(iterations)
    );
    assert_eq!(b.guard_count(), 0);
    assert_eq!(guards_without_task(&b), 0);
    assert!(b.fake_turns() as i64 <= b.task_count(), "a provider turn per task at most");
    let stops = b.db_count("SELECT COUNT(*) FROM audit_log WHERE capability = 'reconcile_sandbox' AND outcome = 'ok'");
    let failed =
        b.db_count("SELECT COUNT(*) FROM audit_log WHERE capability = 'reconcile_sandbox' AND outcome != 'ok'");
    assert_eq!(failed, 0, "a leftover sandbox could not be stopped");
    let mut summary = Map::new();
    for (k, v) in &outcomes {
        summary.insert(k.clone(), json!(v));
    }
    e2e::measured(format_args!(
        "crash loop (CRASHLOOP_SEED={seed}): {iterations} iterations ({aimed} aimed inside a snapshot's start) in {:?}; \
         outcomes {}; leftover sandboxes stopped at a restart {stops}; guards cleared lazily {lazy_clears}; \
         restarts delayed by a half-spawned child {half_spawned}",
        started.elapsed(),
        Value::Object(summary)
    ));
}
