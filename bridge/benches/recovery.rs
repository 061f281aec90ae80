//! Recovery benchmark: startup reconciliation with 10,000 retained tasks and 8 guards left by
//! a "crashed" bridge, retention GC of 10,000 expired tasks, and the bridge's memory (RSS)
//! idle and with 4 active tasks.
//!
//! Run with `cargo bench -p agent-bridge --bench recovery`. Compare ratios within one run.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the daemon"
)]

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;

use agent_bridge::model::TaskStatus;
use agent_bridge::store::Store;
use agent_bridge::store::events::NewEvent;
use agent_bridge::store::tasks::{NewGuard, NewTask, TransitionFields};
use e2e::{Options, TestBridge};

const RETAINED: usize = 10_000;
const EVENTS_PER_TASK: usize = 5;
const GUARDS: usize = 8;

fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn new_task(id: &str, alias: &str, created_at: i64) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        principal: "operator@local".into(),
        runtime: "fake".into(),
        workdir_alias: alias.to_owned(),
        relative_cwd: String::new(),
        profile: "workspace-write".into(),
        requested_model: None,
        created_at,
        deadline_at: created_at + 7_200_000,
        continue_from_task_id: None,
        correlation_id: None,
        idempotency_key: Some(format!("key-{id}")),
        request_fingerprint: Some("bench".into()),
        manifest_json: "{}".into(),
        manifest_sha256: "bench".into(),
        title: None,
    }
}

/// `RETAINED` terminal tasks with a few events each, all completed at `completed_at`.
fn seed_retained(store: &Store, completed_at: i64) {
    let submitted = NewEvent::new("task.submitted", json!({}));
    let message = NewEvent::new("agent.message", json!({ "text": "a line of agent output" }));
    for i in 0..RETAINED {
        let id = format!("agt_{i:032x}");
        store.insert_task(&new_task(&id, "docs", completed_at - 1_000), u32::MAX, None, &submitted).expect("insert");
        for _ in 0..EVENTS_PER_TASK {
            store.append_event(&id, &message, Some(10_000), completed_at).expect("event");
        }
        store.transition(&id, TaskStatus::Cancelled, TransitionFields::default(), completed_at).expect("finish");
    }
}

/// `GUARDS` writer tasks left running with their guards, as a SIGKILLed bridge leaves them
/// (their providers are gone: the marker matches no process).
fn seed_crashed_writers(store: &Store, now: i64) {
    let submitted = NewEvent::new("task.submitted", json!({}));
    for slot in 1..=GUARDS {
        let alias = format!("w{slot}");
        let id = format!("agt_{:032x}", 0xdead_0000 + slot);
        let guard = NewGuard { workdir_alias: alias.clone(), worktree: None };
        store.insert_task(&new_task(&id, &alias, now), u32::MAX, Some(&guard), &submitted).expect("insert");
        store.transition(&id, TaskStatus::Starting, TransitionFields::default(), now).expect("starting");
        store.transition(&id, TaskStatus::Running, TransitionFields::default(), now).expect("running");
        let proof = json!({ "pid": 999_999_999, "start_ticks": 1, "marker": id }).to_string();
        store.set_guard_proof(&id, &proof, now).expect("proof");
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A bridge whose `.env` has the eight writer workdirs `w1`…`w8` besides `repo` and `docs`.
fn prepare() -> TestBridge {
    let b = TestBridge::prepare(Options { bin: Some(env!("CARGO_BIN_EXE_agent-bridge").into()), ..Options::default() });
    let root = b.root();
    let mut env = std::fs::read_to_string(&b.env_file).expect("read .env");
    for slot in 1..=GUARDS {
        let dir = root.join(format!("w{slot}"));
        std::fs::create_dir_all(&dir).expect("workdir");
        let n = slot + 2;
        env.push_str(&format!(
            "WORKDIR_{n:02}_ALIAS=w{slot}\nWORKDIR_{n:02}_PATH={}\nWORKDIR_{n:02}_READ_ONLY=false\n\
             WORKDIR_{n:02}_AGENT_MODE=workspace-write\nWORKDIR_{n:02}_AGENT_RUNTIMES=fake\n",
            dir.display()
        ));
    }
    std::fs::write(&b.env_file, env).expect("write .env");
    b
}

async fn startup(b: &mut TestBridge) -> Duration {
    let t = Instant::now();
    b.spawn().await;
    t.elapsed()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        // Warm the page cache with one start, so the baseline is not a cold start.
        let mut warm = prepare();
        startup(&mut warm).await;
        warm.stop().await;
        // Baseline: an empty store.
        let mut empty = prepare();
        let baseline = startup(&mut empty).await;
        let idle_empty = rss_kib(empty.pid().expect("pid"));
        empty.stop().await;

        // 10,000 retained tasks and 8 guards of writers a crash left running.
        let mut b = prepare();
        let seeded = Instant::now();
        {
            let store = Store::open(&b.state_dir).expect("store");
            let now = now_ms();
            seed_retained(&store, now);
            seed_crashed_writers(&store, now);
        }
        let seed_time = seeded.elapsed();
        let loaded = startup(&mut b).await;
        assert_eq!(b.guard_count(), 0, "every guard's provider is provably gone: all cleared at startup");
        let interrupted = b.db_count("SELECT COUNT(*) FROM tasks WHERE error_code = 'BRIDGE_RESTARTED'");
        assert_eq!(interrupted, GUARDS as i64);
        say(&format!(
            "startup to ready: empty store {:.1} ms; {RETAINED} retained tasks ({} events) + {GUARDS} crashed writers with guards {:.1} ms (ratio {:.2}); seeding took {:.1} s",
            baseline.as_secs_f64() * 1e3,
            RETAINED * (EVENTS_PER_TASK + 2),
            loaded.as_secs_f64() * 1e3,
            loaded.as_secs_f64() / baseline.as_secs_f64(),
            seed_time.as_secs_f64(),
        ));

        let pid = b.pid().expect("pid");
        let idle = rss_kib(pid);
        let mut ids = Vec::new();
        for slot in 1..=4 {
            let v = b
                .call("submit_agent_task", json!({ "runtime": "fake", "workdir": format!("w{slot}"), "prompt": "wait:60" }))
                .await
                .expect("submit");
            ids.push(v["task_id"].as_str().expect("id").to_owned());
        }
        for id in &ids {
            b.wait_status(id, "running").await;
        }
        let busy = rss_kib(pid);
        let children: u64 = ids.iter().flat_map(|id| e2e::marker_pids(id)).map(|p| rss_kib(p as u32)).sum();
        say(&format!(
            "bridge RSS: idle with an empty store {idle_empty} KiB; idle with {RETAINED} retained tasks {idle} KiB; with 4 active tasks {busy} KiB (+{} KiB); the 4 fake providers {children} KiB together",
            busy.saturating_sub(idle)
        ));
        for id in &ids {
            b.call("cancel_agent_task", json!({ "task_id": id })).await.expect("cancel");
        }
        b.stop().await;

        // Retention GC of 10,000 expired tasks, in process on the same store.
        let store = Store::open(&b.state_dir).expect("store");
        let before = store.list_tasks(&Default::default(), u32::MAX).expect("list").len();
        let t = Instant::now();
        let deleted = store.delete_expired(now_ms() + 1).expect("gc");
        let gc = t.elapsed();
        let t = Instant::now();
        let nothing = store.delete_expired(now_ms() + 1).expect("gc again");
        let idle_pass = t.elapsed();
        assert!(deleted.len() >= RETAINED && nothing.is_empty());
        say(&format!(
            "retention GC: {} expired tasks (of {before}) with their events in {:.1} ms ({:.1} µs a task); a pass with nothing due {:.3} ms",
            deleted.len(),
            gc.as_secs_f64() * 1e3,
            gc.as_secs_f64() * 1e6 / deleted.len() as f64,
            idle_pass.as_secs_f64() * 1e3
        ));
    });
}
