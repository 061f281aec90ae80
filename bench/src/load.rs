//! The soak's load tasks, each a loop until it is aborted: long-polling callers, submitters
//! that also cancel and replay, bad-key and bad-id callers, idle connections, slow-header
//! clients and the operator CLI. Every answer is checked and counted in the [`Tally`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::{Conn, Exchange, Outcome, check_tool_reply, tool_call};
use crate::stats::Tally;
use e2e::TestBridge;

/// A well-shaped task id no task has.
const MISSING_ID: &str = "agt_00000000000000000000000000000000";

/// How many times a request goes again on a fresh connection after the server closed the old
/// one before answering.
const RETRIES: usize = 3;

/// What every load task shares.
pub struct Shared {
    /// The front.
    pub addr: SocketAddr,
    /// `Bearer <operator key>`.
    pub auth: String,
    /// The counters.
    pub tally: Tally,
    /// A tag making this run's idempotency keys unique.
    pub run: String,
    active: Mutex<Vec<String>>,
    ids: AtomicU64,
}

impl Shared {
    /// The shared state for a front at `addr` called with operator key `key`.
    pub fn new(addr: SocketAddr, key: &str) -> Shared {
        Shared {
            addr,
            auth: format!("Bearer {key}"),
            tally: Tally::default(),
            run: format!("{:x}", std::process::id() as u64 * 1_000_003 + fastrand::u64(..1_000_000)),
            active: Mutex::new(Vec::new()),
            ids: AtomicU64::new(1),
        }
    }

    fn active(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One of the tasks not yet seen terminal.
    fn pick_active(&self) -> Option<String> {
        let active = self.active();
        (!active.is_empty()).then(|| active[fastrand::usize(..active.len())].clone())
    }

    /// Calls tool `name` on `conn` (connecting when needed), checks the answer and counts it
    /// under `kind`; `None` when there was no well-formed answer (counted too).
    async fn call(
        &self,
        conn: &mut Option<Conn>,
        kind: &'static str,
        auth: Option<&str>,
        name: &str,
        args: Value,
    ) -> Option<Outcome> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = tool_call(id, name, args);
        for _ in 0..RETRIES {
            let mut current = match conn.take() {
                Some(c) => c,
                None => match Conn::connect(self.addr).await {
                    Ok(c) => c,
                    Err(e) => {
                        self.tally.count(kind, format!("connect failed: {}", e.kind()));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            match current.post(auth, &body).await {
                Ok(Exchange::ClosedBeforeAnswer) => {
                    self.tally.count(kind, "closed before answer (retried)");
                }
                Ok(Exchange::Answer(reply)) => {
                    if !current.closing() {
                        *conn = Some(current);
                    }
                    return match check_tool_reply(&reply, id) {
                        Ok(outcome) => {
                            self.tally.count(kind, outcome.label());
                            Some(outcome)
                        }
                        Err(what) => {
                            self.tally.malformed(kind, what);
                            None
                        }
                    };
                }
                Err(what) => {
                    self.tally.malformed(kind, what);
                    return None;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        None
    }
}

/// A caller long-polling `get_agent_task {wait_seconds: 25}` on one kept-alive connection.
pub async fn poller(shared: Arc<Shared>) {
    let mut conn = None;
    loop {
        let task_id = shared.pick_active().unwrap_or_else(|| MISSING_ID.to_owned());
        let started = Instant::now();
        let args = json!({ "task_id": task_id, "wait_seconds": 25 });
        let outcome = shared.call(&mut conn, "poll", Some(&shared.auth), "get_agent_task", args).await;
        match outcome {
            Some(Outcome::Result(task)) if task["task_id"] == task_id.as_str() && task["terminal"] == true => {
                shared.active().retain(|t| *t != task_id);
            }
            Some(Outcome::Result(task)) if task["task_id"] == task_id.as_str() => {}
            Some(Outcome::Result(task)) => shared.tally.malformed("poll", format!("asked for {task_id}, got {task}")),
            Some(Outcome::ToolError(code)) if task_id != MISSING_ID || code != "AGENT_TASK_NOT_FOUND" => {
                shared.tally.malformed("poll", format!("{task_id}: unexpected {code}"));
            }
            _ => {}
        }
        // Pacing, not synchronisation: a poll that returned at once (a finished task, no
        // task at all, a refusal) does not turn the caller into a busy loop.
        if started.elapsed() < Duration::from_millis(100) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Submits fake tasks (unique idempotency keys) every `every`: most wait a few seconds, some
/// complete at once, some wait long and are cancelled; one in ten is replayed with the same key,
/// which must return the same task.
pub async fn submitter(shared: Arc<Shared>, every: Duration, seq: Arc<AtomicU64>) {
    let mut conn = None;
    loop {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let (prompt, cancel) = match fastrand::u8(0..10) {
            0..=5 => (format!("wait:{}", fastrand::u8(1..=6)), false),
            6 | 7 => (format!("complete:soak {n}"), false),
            _ => ("wait:120".to_owned(), true),
        };
        let args = json!({ "runtime": "fake", "workdir": "repo", "profile": "review", "prompt": prompt,
            "idempotency_key": format!("soak-{}-{n}", shared.run) });
        let mut pause = every;
        let outcome = shared.call(&mut conn, "submit", Some(&shared.auth), "submit_agent_task", args.clone()).await;
        match outcome {
            Some(Outcome::Result(task)) => {
                let Some(task_id) = task["task_id"].as_str().map(str::to_owned) else {
                    shared.tally.malformed("submit", format!("no task_id in {task}"));
                    continue;
                };
                shared.active().push(task_id.clone());
                if fastrand::u8(0..10) == 0
                    && let Some(Outcome::Result(again)) =
                        shared.call(&mut conn, "replay", Some(&shared.auth), "submit_agent_task", args).await
                    && again["task_id"] != task_id.as_str()
                {
                    shared
                        .tally
                        .malformed("replay", format!("the same key gave {} then {}", task_id, again["task_id"]));
                }
                if cancel {
                    let delay = Duration::from_millis(fastrand::u64(200..3000)).min(every);
                    tokio::time::sleep(delay).await;
                    pause = every.saturating_sub(delay);
                    let args = json!({ "task_id": task_id });
                    shared.call(&mut conn, "cancel", Some(&shared.auth), "cancel_agent_task", args).await;
                }
            }
            Some(Outcome::ToolError(code)) if code != "AGENT_TASK_LIMIT_REACHED" => {
                shared.tally.malformed("submit", format!("refused with {code}"));
            }
            _ => {}
        }
        tokio::time::sleep(pause).await;
    }
}

/// Calls with bad credentials every `every` (each must be refused with 401), and every fifth
/// call asks with the good key for an id that is oversized, malformed or missing (each must be
/// a tool error, never a result).
pub async fn bad_caller(shared: Arc<Shared>, every: Duration) {
    let mut conn = None;
    let oversized = format!("agt_{}", "f".repeat(4096));
    for i in 0u64.. {
        if i % 5 == 4 {
            let (task_id, wait) = match (i / 5) % 3 {
                0 => (oversized.as_str(), 5),
                1 => ("../../etc/passwd", 5),
                _ => (MISSING_ID, 1),
            };
            let args = json!({ "task_id": task_id, "wait_seconds": wait });
            if let Some(Outcome::Result(v)) =
                shared.call(&mut conn, "bad-id", Some(&shared.auth), "get_agent_task", args).await
            {
                shared.tally.malformed("bad-id", format!("a bogus id was answered {v}"));
            }
        } else {
            let bogus = format!("Bearer abk_soak_not_a_key_{i}");
            let auth = match i % 4 {
                0 => Some(bogus.as_str()),
                1 => None,
                2 => Some("Basic c29hazpzb2Fr"),
                _ => Some("Bearer "),
            };
            let args = json!({ "task_id": MISSING_ID });
            match shared.call(&mut conn, "bad-key", auth, "get_agent_task", args).await {
                Some(Outcome::Refused(_)) | None => {}
                Some(other) => shared.tally.malformed("bad-key", format!("a bad key was answered {other:?}")),
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// How long something lasted, as a coarse bucket for the table.
fn bucket(took: Duration) -> &'static str {
    match took.as_secs() {
        0..5 => "<5s",
        5..15 => "5-15s",
        15..60 => "15-60s",
        60..300 => "1-5min",
        _ => ">=5min",
    }
}

/// One idle connection, reopened whenever the server closes it: silent ones never send a
/// byte; kept-alive ones make one call and then stay quiet. Counts how (and when) they end.
pub async fn idle(shared: Arc<Shared>, keep_alive: bool) {
    let kind = if keep_alive { "idle-kept" } else { "idle-silent" };
    loop {
        let mut conn = None;
        let opened = Instant::now();
        if keep_alive {
            shared.call(&mut conn, kind, Some(&shared.auth), "whoami", json!({})).await;
        } else {
            conn = Conn::connect(shared.addr).await.ok();
        }
        let label = match conn {
            Some(c) => match wait_closed(c.into_stream()).await {
                (0, false) => "closed by server",
                (0, true) => "reset by server",
                _ => "answered, then closed",
            },
            None => "could not open",
        };
        shared.tally.count(kind, format!("{label} after {}", bucket(opened.elapsed())));
        // Jittered, so the connections time out spread over time rather than in waves.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(100..2000))).await;
    }
}

/// Reads until the server closes: the bytes it sent and whether it ended with an error.
async fn wait_closed(mut stream: TcpStream) -> (usize, bool) {
    let mut got = 0;
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => return (got, false),
            Ok(n) => got += n,
            Err(_) => return (got, true),
        }
    }
}

/// A client that sends a request head one byte per `dribble` and never finishes it; gives up
/// after `give_up`. Counts how each attempt ended, then starts another.
pub async fn slow_header(shared: Arc<Shared>, dribble: Duration, give_up: Duration) {
    loop {
        let opened = Instant::now();
        let label = match TcpStream::connect(shared.addr).await {
            Ok(stream) => dribble_head(stream, &shared.addr, dribble, give_up).await,
            Err(_) => "could not open".to_owned(),
        };
        shared.tally.count("slow-header", format!("{label} after {}", bucket(opened.elapsed())));
        tokio::time::sleep(Duration::from_millis(fastrand::u64(100..1000))).await;
    }
}

async fn dribble_head(stream: TcpStream, addr: &SocketAddr, dribble: Duration, give_up: Duration) -> String {
    let (mut read, mut write) = stream.into_split();
    let start = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nX-Soak-Slow: ");
    if write.write_all(start.as_bytes()).await.is_err() {
        return "closed on write".to_owned();
    }
    let deadline = tokio::time::sleep(give_up);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(dribble);
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            read = read.read(&mut buf) => match read {
                Ok(0) if answer.is_empty() => return "closed by server".to_owned(),
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(_) => return "reset by server".to_owned(),
            },
            _ = tick.tick() => {
                if write.write_all(b"a").await.is_err() {
                    return "closed on write".to_owned();
                }
            }
            () = &mut deadline => return "still open (given up)".to_owned(),
        }
    }
    let status = String::from_utf8_lossy(&answer).split_whitespace().nth(1).unwrap_or("?").to_owned();
    format!("answered {status}")
}

/// Runs `agent-bridge tasks list` every `every`; each run must exit 0 within 30 s.
pub async fn cli(shared: Arc<Shared>, bridge: Arc<TestBridge>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let started = Instant::now();
        let b = bridge.clone();
        let run = tokio::task::spawn_blocking(move || b.cli(&["tasks", "list"]));
        match tokio::time::timeout(Duration::from_secs(30), run).await {
            Ok(Ok(out)) if out.status.success() => shared.tally.cli(true, started.elapsed(), ""),
            Ok(Ok(out)) => {
                let what = format!("exit {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
                shared.tally.cli(false, started.elapsed(), &what);
            }
            Ok(Err(e)) => shared.tally.cli(false, started.elapsed(), &format!("could not run: {e}")),
            Err(_) => shared.tally.cli(false, started.elapsed(), "no answer in 30 s"),
        }
    }
}
