//! `tasks notify`: notification latency — a state change to its webhook's arrival at a receiver
//! on loopback (a keep-alive HTTP server in this process noting when each request's body is
//! read), p50 and p99 of `--count` sequential changes of two kinds:
//! - **cancel**: the bench cancels a running fake task (`wait:600`); from just before its
//!   `cancel_agent_task` call to the arrival of that task's `task.finished`;
//! - **end**: a fake task ends on its own (`complete:done`); from its `completed_at` (the
//!   bridge's wall clock, ms, stamped in the transaction that ends it) to the arrival (the same
//!   machine's wall clock).
//!
//! Both in the read-only workdir `docs`: a reader holds no writer lease, so a cancelled task's
//! clean-up never delays the next submit. Target: p99 ≤ 100 ms on loopback.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use e2e::{Options, TestBridge};

use crate::bins::BinArgs;
use crate::common::{call, ms_since, quantile, submit, wait_until};

/// The target on the p99, ms.
const TARGET_MS: f64 = 100.0;
/// A valid Standard Webhooks secret (24 bytes); the receiver does not check signatures.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The flags of `tasks notify`.
#[derive(Args, Debug)]
pub struct NotifyArgs {
    /// Sequential state changes of each kind.
    #[arg(long, default_value_t = 200)]
    count: usize,
    #[command(flatten)]
    bins: BinArgs,
}

/// One webhook request as the receiver read it.
struct Arrival {
    at: Instant,
    wall_ms: f64,
    body: Value,
}

/// A keep-alive HTTP/1.1 server on 127.0.0.1 answering `200 ok` to every request and noting
/// each one once its body is read.
#[derive(Clone)]
struct Receiver {
    port: u16,
    seen: Arc<Mutex<Vec<Arrival>>>,
}

impl Receiver {
    fn start() -> anyhow::Result<Receiver> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || serve(stream, &log));
            }
        });
        Ok(Receiver { port, seen })
    }

    /// Waits (up to 30 s) for the `kind` message of `task_id`.
    async fn wait_for(&self, kind: &str, task_id: &str) -> anyhow::Result<(Instant, f64)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(seen) = self.seen.lock()
                && let Some(a) = seen.iter().find(|a| a.body["type"] == kind && a.body["data"]["task_id"] == task_id)
            {
                return Ok((a.at, a.wall_ms));
            }
            if Instant::now() > deadline {
                bail!("no {kind} of {task_id} arrived within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Reads requests off one connection until it closes: head, `Content-Length` bytes of body.
fn serve(mut stream: std::net::TcpStream, log: &Mutex<Vec<Arrival>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let (at, wall) = (Instant::now(), SystemTime::now());
        let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
        let wall_ms = wall.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        if let Ok(mut log) = log.lock() {
            log.push(Arrival { at, wall_ms, body });
        }
        buf.drain(..head_end + length);
        if stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}

/// Runs the measure and prints its report.
pub async fn main(args: &NotifyArgs) -> anyhow::Result<()> {
    let (bin, _) = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?;
    let receiver = Receiver::start()?;
    let options = Options { bin: Some(bin), ..Options::default() }
        .with(&format!("SERVERFS_NOTIFY_01_URL=http://127.0.0.1:{}/hook", receiver.port))
        .with("SERVERFS_NOTIFY_01_KIND=webhook")
        .with(&format!("SERVERFS_NOTIFY_01_SECRET={SECRET}"))
        .with("SERVERFS_NOTIFY_01_EVENTS=task.finished")
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    b.spawn().await;
    let (mut cancels, mut replies, mut after, mut ends) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.count {
        let (latency, reply) = cancel(&b, &receiver).await.with_context(|| format!("cancel {i}"))?;
        cancels.push(latency);
        replies.push(reply);
        after.push(latency - reply);
        ends.push(end(&b, &receiver).await.with_context(|| format!("end {i}"))?);
    }
    b.stop().await;
    let delivered = receiver.seen.lock().map_or(0, |s| s.len());
    println!("# tasks notify: a state change → its webhook on loopback, {} changes of each kind\n", args.count);
    println!(
        "One webhook target (`task.finished`) on a keep-alive receiver in the bench; the fake runtime; \
         {delivered} webhooks received. Sequential: one change at a time, each waited for.\n"
    );
    println!("| change | p50 | p99 | max | target (p99) | verdict |");
    println!("|---|---:|---:|---:|---|---|");
    for (what, v, judged) in [
        ("cancel: the `cancel_agent_task` call → `task.finished` arrives", &cancels, true),
        ("(the cancel call's own answer)", &replies, false),
        ("(the webhook's arrival after that answer, per change; negative: before it)", &after, false),
        ("end: the task's `completed_at` → `task.finished` arrives (wall clocks, ms)", &ends, true),
    ] {
        let p99 = quantile(v, 0.99);
        let (target, verdict) = match judged {
            true => (format!("≤ {TARGET_MS:.0} ms"), if p99 <= TARGET_MS { "met" } else { "MISSED" }),
            false => (String::new(), ""),
        };
        println!(
            "| {what} | {:.1} ms | {p99:.1} ms | {:.1} ms | {target} | {verdict} |",
            quantile(v, 0.5),
            quantile(v, 1.0)
        );
    }
    Ok(())
}

/// Cancels a running task; the time to its webhook and the cancel call's own, ms.
async fn cancel(b: &TestBridge, receiver: &Receiver) -> anyhow::Result<(f64, f64)> {
    let id =
        submit(b, json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": "wait:600" })).await?;
    wait_until(b, &id, Duration::from_secs(30), |t| t["status"] == "running").await?;
    let at = Instant::now();
    let v = call(b, "cancel_agent_task", json!({ "task_id": id })).await?;
    let reply = ms_since(at, Instant::now());
    if v["status"] != "cancelled" {
        bail!("cancel of {id}: {v}");
    }
    let (arrived, _) = receiver.wait_for("task.finished", &id).await?;
    wait_until(b, &id, Duration::from_secs(30), |t| t["status"] == "cancelled").await?;
    Ok((ms_since(at, arrived), reply))
}

/// A task that ends on its own; from its `completed_at` to its webhook, ms.
async fn end(b: &TestBridge, receiver: &Receiver) -> anyhow::Result<f64> {
    let id = submit(b, json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": "complete:done" }))
        .await?;
    let (_, wall_ms) = receiver.wait_for("task.finished", &id).await?;
    let t = wait_until(b, &id, Duration::from_secs(30), |t| t["status"] == "succeeded").await?;
    let completed = t["completed_at"].as_str().context("no completed_at")?;
    let at = humantime::parse_rfc3339(completed).with_context(|| format!("completed_at {completed}"))?;
    let completed_ms = at.duration_since(UNIX_EPOCH)?.as_secs_f64() * 1000.0;
    Ok(wall_ms - completed_ms)
}
