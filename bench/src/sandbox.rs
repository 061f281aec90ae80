//! The sandbox benchmark: what least privilege costs a task, as ratios in one run.
//! Three layouts of the real bridge (fake runtime), side by side: `proxy` (the task sandbox
//! with its own network namespace, egress gate and relay: the default), `host` (the same
//! sandbox on the host's network: `SERVERFS_AGENT_EGRESS=host`) and `none`
//! (`SERVERFS_AGENT_SANDBOX=off`). For each:
//! - task start: submit → the agent's first network request reaching a server on loopback
//!   (the agent is `exec:python3`, whose one `GET` goes through `HTTP_PROXY` where there is
//!   one), median and p90 over `--tasks` tasks;
//! - a proxied request: the mean time of `--requests` sequential `GET`s from inside one task;
//! - memory per running task: the bridge's RSS with `--running` tasks waiting, less its idle
//!   RSS, plus each task's relay, divided by the tasks.
//!
//! With `--before <agent-bridge>`, a fourth layout `before`: an earlier build with its own
//! default sandbox.
//!
//! Run: `cargo build --release -p agent-bridge && cargo run --release -p bench --bin sandbox`.
//! Aims: ≤ 50 ms more per task start than `host`, ≤ 1 ms more per proxied request.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark, not a daemon: it starts the binaries, reads /proc and prints its report"
)]

#[path = "bins.rs"]
mod bins;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::json;

use e2e::{Options, TestBridge};

/// What least privilege costs a task.
#[derive(Parser, Debug)]
struct Args {
    /// Tasks timed per layout.
    #[arg(long, default_value_t = 30)]
    tasks: usize,
    /// Sequential requests timed from inside one task.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Tasks running at once for the memory figure.
    #[arg(long, default_value_t = 8)]
    running: usize,
    /// An `agent-bridge` of an earlier build, measured as a fourth layout `before` with its own
    /// default sandbox (e.g. a build from before the sandbox: the host's filesystem and network).
    #[arg(long)]
    before: Option<std::path::PathBuf>,
    #[command(flatten)]
    bins: bins::BinArgs,
}

/// A server on loopback that answers every request and notes when each arrived.
struct Server {
    port: u16,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

fn server() -> Server {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            seen.lock().expect("arrivals").push(Instant::now());
            let mut stream = stream;
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
    Server { port, arrivals }
}

/// One layout's figures.
#[derive(Debug, Default)]
struct Figures {
    start_median_ms: f64,
    start_p90_ms: f64,
    request_ms: f64,
    rss_per_task_kib: f64,
}

/// The three layouts: name and `.env` lines.
const LAYOUTS: [(&str, &[&str]); 3] =
    [("proxy", &[]), ("host", &["SERVERFS_AGENT_EGRESS=host"]), ("none", &["SERVERFS_AGENT_SANDBOX=off"])];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let server = server();
    // One interpreter for every layout, named by its path (a version manager's shim on PATH
    // would add its own start-up where it is visible, and only there).
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("python3")
        .to_owned();
    let mut results = Vec::new();
    let before = args.before.as_ref().map(|bin| ("before", bin.clone(), &[][..]));
    let layouts = LAYOUTS.iter().map(|(name, lines)| (*name, bridge_bin.clone(), *lines)).chain(before);
    for (name, bin, lines) in layouts {
        let mut options = Options { bin: Some(bin), ..Options::default() }
            .with(&format!("SERVERFS_AGENT_EGRESS_ALLOW=127.0.0.1:{}", server.port))
            .with(&format!("SERVERFS_AGENT_MAX_ACTIVE_TASKS={}", args.running.max(4) + 2))
            .var("AGENT_BRIDGE_LOG", "warn");
        for line in lines {
            options = options.with(line);
        }
        let mut b = TestBridge::prepare(options);
        if name == "before" {
            // An earlier build refuses the keys it does not know; its `exec:` needs none.
            let env = std::fs::read_to_string(&b.env_file)?;
            let known: String = env
                .lines()
                .filter(|l| {
                    !l.starts_with("SERVERFS_AGENT_FAKE_EXEC=") && !l.starts_with("SERVERFS_AGENT_EGRESS_ALLOW=")
                })
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&b.env_file, known)?;
        }
        b.spawn().await;
        let figures = measure(&b, &server, &args, &python).await.with_context(|| format!("layout {name}"))?;
        eprintln!("sandbox: {name}: {figures:?}");
        results.push((name, figures));
    }
    report(&results, &args);
    Ok(())
}

async fn measure(b: &TestBridge, server: &Server, args: &Args, python: &str) -> anyhow::Result<Figures> {
    let url = format!("http://127.0.0.1:{}/", server.port);
    let (one, many) = (format!("exec:{python} one.py"), format!("exec:{python} many.py"));
    std::fs::write(b.docs.join("one.py"), format!("import urllib.request\nurllib.request.urlopen('{url}').read()\n"))?;
    std::fs::write(
        b.docs.join("many.py"),
        format!(
            "import time, urllib.request\nn = {}\nt = time.perf_counter()\nfor _ in range(n):\n    urllib.request.urlopen('{url}').read()\nprint((time.perf_counter() - t) / n * 1000)\n",
            args.requests
        ),
    )?;
    // Warm the caches (the page cache of python and the binaries) before timing anything.
    run(b, &one).await?;
    let mut starts = Vec::new();
    for _ in 0..args.tasks {
        let before = server.arrivals.lock().expect("arrivals").len();
        let started = Instant::now();
        let id = submit(b, &one).await?;
        let arrived = loop {
            if let Some(at) = server.arrivals.lock().expect("arrivals").get(before).copied() {
                break at;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("no request arrived from task {id} within 30 s:\n{}", b.log());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        starts.push(arrived.duration_since(started).as_secs_f64() * 1000.0);
        b.wait_terminal(&id).await;
    }
    starts.sort_by(f64::total_cmp);
    let text = run(b, &many).await?;
    let request_ms: f64 = text.lines().last().unwrap_or_default().trim().parse().with_context(|| text.clone())?;
    let bridge = b.pid().context("bridge pid")? as i32;
    let idle = rss_kib(bridge);
    let mut ids = Vec::new();
    for _ in 0..args.running {
        ids.push(submit(b, "wait:60").await?);
    }
    for id in &ids {
        b.wait_status(id, "running").await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A relay's own memory: its private pages (its code is the bridge's binary, shared).
    let relays: u64 = relay_pids().iter().map(|p| status_kib(*p, "RssAnon:")).sum();
    let busy = rss_kib(bridge) + relays;
    for id in &ids {
        let _ = b.call("cancel_agent_task", json!({ "task_id": id })).await;
    }
    for id in &ids {
        b.wait_terminal(id).await;
    }
    Ok(Figures {
        start_median_ms: starts[starts.len() / 2],
        start_p90_ms: starts[(starts.len() * 9 / 10).min(starts.len() - 1)],
        request_ms,
        rss_per_task_kib: busy.saturating_sub(idle) as f64 / args.running as f64,
    })
}

async fn submit(b: &TestBridge, prompt: &str) -> anyhow::Result<String> {
    let v = b
        .call(
            "submit_agent_task",
            json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": prompt }),
        )
        .await
        .map_err(|e| anyhow::anyhow!("submit: {e}"))?;
    Ok(v["task_id"].as_str().context("task_id")?.to_owned())
}

/// Runs `prompt` to its end; its output.
async fn run(b: &TestBridge, prompt: &str) -> anyhow::Result<String> {
    let id = submit(b, prompt).await?;
    let end = b.wait_terminal(&id).await;
    let text = end["final_response"].as_str().unwrap_or_default().to_owned();
    if end["status"] != "succeeded" || !text.starts_with("exit=0") {
        bail!("{prompt} did not succeed: {end:#}");
    }
    Ok(text)
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: i32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` figure in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The tasks' relays (`agent-bridge sandbox-exec`).
fn relay_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"sandbox-exec"))
        })
        .collect()
}

fn report(results: &[(&str, Figures)], args: &Args) {
    println!("| layout | task start, median ms | p90 ms | one proxied request, ms | RSS per running task, KiB |");
    println!("|---|---:|---:|---:|---:|");
    for (name, f) in results {
        println!(
            "| {name} | {:.1} | {:.1} | {:.3} | {:.0} |",
            f.start_median_ms, f.start_p90_ms, f.request_ms, f.rss_per_task_kib
        );
    }
    let get = |n: &str| results.iter().find(|(name, _)| *name == n).map(|(_, f)| f);
    if let (Some(proxy), Some(host), Some(none)) = (get("proxy"), get("host"), get("none")) {
        println!();
        println!(
            "task start: proxy is {:+.1} ms against host (aim ≤ +50 ms) and {:+.1} ms against none ({:.2}×); \
             a request through the proxy: {:+.3} ms against host (aim ≤ +1 ms); {} tasks, {} requests, {} running",
            proxy.start_median_ms - host.start_median_ms,
            proxy.start_median_ms - none.start_median_ms,
            proxy.start_median_ms / none.start_median_ms,
            proxy.request_ms - host.request_ms,
            args.tasks,
            args.requests,
            args.running
        );
    }
    if let (Some(proxy), Some(before)) = (get("proxy"), get("before")) {
        println!(
            "against the earlier build: task start {:+.1} ms ({:.2}×), a request {:+.3} ms, memory per running task {:+.0} KiB",
            proxy.start_median_ms - before.start_median_ms,
            proxy.start_median_ms / before.start_median_ms,
            proxy.request_ms - before.request_ms,
            proxy.rss_per_task_kib - before.rss_per_task_kib
        );
    }
}
