//! Notification benchmark: the time from a task's terminal state change to the delivery of
//! its `task.finished` webhook at a receiver on 127.0.0.1 (median, p99), how long 1,000 tasks
//! take with and without a target (delivery must not slow task handling), and the bridge's
//! memory while 1,000 notifications wait for a dead receiver.
//!
//! Run with `cargo bench -p agent-bridge --bench notify`. Compare ratios within one run.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the daemon"
)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use e2e::{Options, TestBridge};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// (task id, event type, arrival in Unix ms) of every request the receiver accepted.
type Arrivals = Arc<Mutex<Vec<(String, String, i64)>>>;

/// A receiver: `/hook` records and answers 200, `/dead` answers 503.
async fn receiver() -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let seen = Arc::clone(&arrivals);
    let app = Router::new()
        .route(
            "/hook",
            post(move |body: String| {
                let seen = Arc::clone(&seen);
                async move {
                    let at = now_ms();
                    let v: Value = serde_json::from_str(&body).unwrap_or_default();
                    let task = v["data"]["task_id"].as_str().unwrap_or("").to_owned();
                    let event = v["type"].as_str().unwrap_or("").to_owned();
                    seen.lock().expect("lock").push((task, event, at));
                    StatusCode::OK
                }
            }),
        )
        .route("/dead", post(|| async { StatusCode::SERVICE_UNAVAILABLE }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = bridge_httpd::Server {
        name: "receiver",
        limits: bridge_httpd::Limits::BOARD,
        style: bridge_httpd::Style::Text,
    };
    tokio::spawn(bridge_httpd::serve(listener, app, server, CancellationToken::new()));
    (format!("http://{addr}"), arrivals)
}

async fn bridge(target: Option<&str>) -> TestBridge {
    let mut options = Options { bin: Some(env!("CARGO_BIN_EXE_agent-bridge").into()), ..Options::default() }
        .with("SERVERFS_AGENT_MAX_ACTIVE_TASKS=64")
        .with("SERVERFS_NOTIFY_RETRY_BASE_MS=100");
    if let Some(url) = target {
        options = options
            .with(&format!("SERVERFS_NOTIFY_01_URL={url}"))
            .with("SERVERFS_NOTIFY_01_KIND=webhook")
            .with(&format!("SERVERFS_NOTIFY_01_SECRET={SECRET}"))
            .with("SERVERFS_NOTIFY_01_EVENTS=task.finished,task.failed");
    }
    TestBridge::start_with(options).await
}

/// Runs `n` review tasks, at most `width` at once; returns their ids and the wall time.
async fn run_tasks(b: &TestBridge, n: usize, width: usize) -> (Vec<String>, Duration) {
    let started = Instant::now();
    let mut ids = Vec::with_capacity(n);
    let mut running: Vec<String> = Vec::new();
    while ids.len() < n || !running.is_empty() {
        while ids.len() < n && running.len() < width {
            let args =
                json!({ "workdir": "docs", "profile": "review", "prompt": format!("complete: task {}", ids.len()) });
            match b.submit_args(args).await {
                Ok(v) => {
                    let id = v["task_id"].as_str().expect("task_id").to_owned();
                    ids.push(id.clone());
                    running.push(id);
                }
                Err(e) if e.code() == "AGENT_TASK_LIMIT_REACHED" => break,
                Err(e) => panic!("submit: {e:?}"),
            }
        }
        let Some(first) = running.first().cloned() else { continue };
        b.wait_for(&first, |t| t["status"] == "succeeded" || t["status"] == "failed").await;
        running.remove(0);
    }
    (ids, started.elapsed())
}

fn completed_ms(task: &Value) -> i64 {
    let text = task["completed_at"].as_str().expect("completed_at");
    let t = humantime::parse_rfc3339(text).expect("rfc3339");
    t.duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as i64
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn latency(base: &str, arrivals: &Arrivals) {
    let mut b = bridge(Some(&format!("{base}/hook"))).await;
    // Warm-up: the first tasks start the runtime's caches.
    run_tasks(&b, 10, 4).await;
    let (ids, _) = run_tasks(&b, 200, 4).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while arrivals.lock().expect("lock").iter().filter(|a| ids.contains(&a.0)).count() < ids.len() {
        assert!(Instant::now() < deadline, "not every notification arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut latencies = Vec::new();
    for id in &ids {
        let task = b.get(id).await;
        let arrived = arrivals.lock().expect("lock").iter().find(|a| &a.0 == id).map(|a| a.2).expect("arrival");
        latencies.push(arrived - completed_ms(&task));
    }
    latencies.sort_unstable();
    say(&format!(
        "state change -> delivery ({} tasks, 4 at a time): median {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(0)
    ));
    b.stop().await;
}

async fn flood(base: &str, arrivals: &Arrivals) {
    const N: usize = 1_000;
    let mut plain = bridge(None).await;
    run_tasks(&plain, 20, 8).await;
    let idle = rss_kib(plain.pid().expect("pid"));
    let (_, without) = run_tasks(&plain, N, 32).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss_kib(plain.pid().expect("pid"));
    say(&format!(
        "no target: bridge RSS {idle} KiB after 20 tasks, {after} KiB after {N} more ({:.2}x)",
        after as f64 / idle.max(1) as f64
    ));
    plain.stop().await;
    let mut b = bridge(Some(&format!("{base}/hook"))).await;
    let before = arrivals.lock().expect("lock").len();
    let (ids, with) = run_tasks(&b, N, 32).await;
    let started = Instant::now();
    while arrivals.lock().expect("lock").len() - before < ids.len() {
        assert!(started.elapsed() < Duration::from_secs(120), "the flood was not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drained = started.elapsed();
    say(&format!(
        "{N} tasks, 32 at a time: {:.1} s without a target, {:.1} s with one (ratio {:.2}); every notification delivered {} ms after the last task ended",
        without.as_secs_f64(),
        with.as_secs_f64(),
        with.as_secs_f64() / without.as_secs_f64(),
        drained.as_millis()
    ));
    b.stop().await;
}

async fn dead_receiver(base: &str) {
    const N: usize = 1_000;
    let mut b = bridge(Some(&format!("{base}/dead"))).await;
    run_tasks(&b, 20, 8).await;
    let pid = b.pid().expect("pid");
    let idle = rss_kib(pid);
    run_tasks(&b, N, 32).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss_kib(pid);
    let v = b.call("admin_list_notifications", json!({ "limit": 1 })).await.expect("list");
    say(&format!(
        "dead receiver: {} notifications pending, {} attempts on the newest; bridge RSS {} KiB before, {} KiB after ({:.2}x)",
        v["targets"][0]["pending"],
        v["deliveries"][0]["attempts"],
        idle,
        after,
        after as f64 / idle.max(1) as f64
    ));
    b.stop().await;
}

#[tokio::main]
async fn main() {
    let (base, arrivals) = receiver().await;
    latency(&base, &arrivals).await;
    flood(&base, &arrivals).await;
    dead_receiver(&base).await;
}
