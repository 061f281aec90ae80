//! What every `tasks` measure shares: a loopback server that notes when each request arrives,
//! waiting on a task, `/proc` readings of a process, and order statistics.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use e2e::TestBridge;

/// A server on 127.0.0.1 that answers every request `200 ok` and notes when each arrived.
pub struct Arrivals {
    /// Its port.
    pub port: u16,
    seen: Arc<Mutex<Vec<Instant>>>,
}

impl Arrivals {
    /// Starts the server (a thread per connection; it lives as long as the process).
    pub fn start() -> anyhow::Result<Arrivals> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1")?;
        let port = listener.local_addr().context("its address")?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                if let Ok(mut log) = log.lock() {
                    log.push(Instant::now());
                }
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf);
                    let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
                });
            }
        });
        Ok(Arrivals { port, seen })
    }

    /// How many requests have arrived.
    pub fn count(&self) -> usize {
        self.seen.lock().map_or(0, |s| s.len())
    }

    /// Waits (up to `limit`) for request number `index` (from 0) and returns when it arrived.
    pub async fn wait_for(&self, index: usize, limit: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(at) = self.seen.lock().ok().and_then(|s| s.get(index).copied()) {
                return Ok(at);
            }
            if Instant::now() > deadline {
                bail!("request {index} did not arrive within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The python interpreter named by its path (a version manager's shim would add its own
/// start-up where it is visible, and only there).
pub fn python() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("python3")
}

/// A python script that makes one `GET` to the server (through `HTTP_PROXY` when set).
pub fn probe_script(port: u16) -> String {
    format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/').read()\n")
}

/// Calls a capability through the bridge's socket (the CLI surface), naming it on failure.
pub async fn call(b: &TestBridge, name: &str, args: Value) -> anyhow::Result<Value> {
    b.call(name, args).await.map_err(|e| anyhow::anyhow!("{name}: {e:?}"))
}

/// Submits and returns the task id.
pub async fn submit(b: &TestBridge, args: Value) -> anyhow::Result<String> {
    let v = call(b, "submit_agent_task", args).await?;
    Ok(v["task_id"].as_str().context("no task_id in the submit's answer")?.to_owned())
}

/// Long-polls `get_agent_task` until `done` holds (up to `limit`).
pub async fn wait_until(
    b: &TestBridge,
    id: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let t = call(b, "get_agent_task", json!({ "task_id": id, "wait_seconds": 5 })).await?;
        if done(&t) {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("task {id} did not get there within {limit:?}: {t:#}");
        }
    }
}

/// A process's `VmRSS` (KiB), open descriptors and CPU time (clock ticks: user + system).
#[derive(Debug, Clone, Copy)]
pub struct Proc {
    /// `VmRSS`, KiB.
    pub rss_kib: u64,
    /// Entries of `/proc/PID/fd`.
    pub fds: u64,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
}

/// Reads `pid`'s figures (RSS and CPU time through `calls`' `/proc` readers).
pub fn proc_of(pid: u32) -> anyhow::Result<Proc> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).with_context(|| format!("fds of {pid}"))?.count() as u64;
    Ok(Proc { rss_kib: crate::cpu::rss_kib(pid)?, fds, ticks: crate::cpu::process_ticks(pid)? })
}

pub use crate::cpu::clock_tick;

/// The `q`-quantile (0..=1) of `v`, nearest rank; NaN when empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// The median of `v`.
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// Milliseconds since `from`.
pub fn ms_since(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// Spawn → the request of the fake agent started bare (`agent-bridge fake-agent` in `dir`, its
/// sessions under `home`, given `prompt` as the bridge would), in ms; waits for it to exit.
pub async fn fake_bare(
    bin: &std::path::Path,
    home: &std::path::Path,
    dir: &std::path::Path,
    prompt: &str,
    arrivals: &Arrivals,
) -> anyhow::Result<f64> {
    use tokio::io::AsyncWriteExt as _;
    let before = arrivals.count();
    let t = Instant::now();
    let mut child = tokio::process::Command::new(bin)
        .arg("fake-agent")
        .env(agent_bridge::provider::fake::HOME_VAR, home)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("start the fake agent")?;
    let mut stdin = child.stdin.take().context("its stdin")?;
    let start = json!({ "type": "start", "prompt": prompt, "resume": null, "profile": "workspace-write" });
    stdin.write_all(format!("{start}\n").as_bytes()).await.context("its start line")?;
    drop(stdin);
    let first = arrivals.wait_for(before, std::time::Duration::from_secs(60)).await?;
    let status = child.wait().await.context("wait for the fake agent")?;
    if !status.success() {
        bail!("the bare fake agent exited with {status}");
    }
    Ok(ms_since(t, first))
}
