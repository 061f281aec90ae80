//! The worktree benchmark: what a task's own worktree costs on a big repository, as
//! ratios in one run. On a generated git repository (`--files` files of `--file-bytes` bytes,
//! 100,000 by default, in directories of 500), against the real bridge (fake runtime, default
//! sandbox):
//! - `git worktree add` alone (and its removal untimed), median of `--rounds`;
//! - a worktree task's start: submit → the agent's first request reaching a server on loopback
//!   (the agent is `exec:python3 probe.py`, a file of the repository), which covers the branch,
//!   the checkout, the change-set baseline and the sandbox; median of `--rounds`;
//! - the same for an in-place task (the baseline of the user's own checkout and the sandbox);
//! - the disk a running worktree task adds: its worktree, its entry in the repository and its
//!   private objects, against the checkout's own files.
//!
//! Run: `cargo build --release -p agent-bridge && cargo run --release -p bench --bin worktree`.
//! Aim: a worktree task's start ≤ 1.5× `git worktree add` alone.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark, not a daemon: it runs git, reads the disk and prints its report"
)]

#[path = "bins.rs"]
mod bins;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::json;

use e2e::{Options, TestBridge};

/// What a worktree costs a task.
#[derive(Parser, Debug)]
struct Args {
    /// Files in the generated repository.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Bytes per file.
    #[arg(long, default_value_t = 1024)]
    file_bytes: usize,
    /// Timed rounds of each measure.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[command(flatten)]
    bins: bins::BinArgs,
}

/// A server on loopback that notes when each request arrives.
fn server() -> (u16, Arc<Mutex<Vec<Instant>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            seen.lock().expect("arrivals").push(Instant::now());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
    (port, arrivals)
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git").args(args).current_dir(dir).output().context("git")?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Bytes on disk under `path` (allocated blocks, links not followed).
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    own + std::fs::read_dir(path).into_iter().flatten().flatten().map(|e| disk_bytes(&e.path())).sum::<u64>()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Writes the repository: `files` files in directories of 500, and the probe, committed.
fn generate(repo: &Path, files: usize, bytes: usize, probe: &str) -> anyhow::Result<()> {
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    let body: String = line.repeat(bytes / line.len() + 1)[..bytes].to_owned();
    for i in 0..files {
        let dir = repo.join(format!("d{:04}", i / 500));
        if i % 500 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("{i}\n{body}"))?;
    }
    std::fs::write(repo.join("probe.py"), probe)?;
    git(repo, &["init", "-q", "-b", "main"])?;
    git(repo, &["add", "-A"])?;
    git(repo, &["-c", "user.name=bench", "-c", "user.email=b@x", "commit", "-qm", "generated"])?;
    Ok(())
}

/// Waits (up to ten minutes: a checkout of a big repository on a slow disk takes a while)
/// until `done` holds for the task.
async fn wait(
    b: &TestBridge,
    id: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<serde_json::Value> {
    let limit = Instant::now() + Duration::from_secs(600);
    loop {
        let t = b
            .call("get_agent_task", json!({ "task_id": id, "wait_seconds": 5 }))
            .await
            .map_err(|e| anyhow::anyhow!("get: {e}"))?;
        if done(&t) {
            return Ok(t);
        }
        if Instant::now() > limit {
            bail!("task {id} did not get there: {t:#}");
        }
    }
}

/// Submits `prompt` with `isolation` and returns the time until the agent's first request
/// arrived; waits for the task to succeed.
async fn start(b: &TestBridge, arrivals: &Mutex<Vec<Instant>>, prompt: &str, isolation: &str) -> anyhow::Result<f64> {
    let before = arrivals.lock().expect("arrivals").len();
    let t = Instant::now();
    let v = b
        .call(
            "submit_agent_task",
            json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt, "isolation": isolation }),
        )
        .await
        .map_err(|e| anyhow::anyhow!("submit: {e}"))?;
    let id = v["task_id"].as_str().context("task_id")?.to_owned();
    let arrived = loop {
        if let Some(at) = arrivals.lock().expect("arrivals").get(before).copied() {
            break at;
        }
        if t.elapsed() > Duration::from_secs(600) {
            bail!("no request from task {id}:\n{}", b.log());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let end = wait(b, &id, |t| t["terminal"] == true).await?;
    if end["status"] != "succeeded" {
        bail!("task {id} did not succeed: {end:#}");
    }
    // Where the time went, from the task's own events (millisecond timestamps).
    let events =
        b.call("read_agent_task_events", json!({ "task_id": id })).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let at = |kind: &str| {
        events["events"].as_array().into_iter().flatten().find(|e| e["event_type"] == kind).and_then(|e| {
            let text = e["created_at"].as_str()?;
            humantime::parse_rfc3339(text).ok()
        })
    };
    if let (Some(started), Some(agent)) = (at("task.started"), at("command.started")) {
        let ms = |a: std::time::SystemTime, b: std::time::SystemTime| {
            b.duration_since(a).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
        };
        match at("worktree.created") {
            Some(made) => eprintln!(
                "worktree:   {isolation}: worktree made {:.0} ms, then baseline and agent start {:.0} ms",
                ms(started, made),
                ms(made, agent)
            ),
            None => eprintln!("worktree:   {isolation}: baseline and agent start {:.0} ms", ms(started, agent)),
        }
    }
    Ok(arrived.duration_since(t).as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let (port, arrivals) = server();
    let options = Options { bin: Some(bridge_bin), ..Options::default() }
        .with(&format!("SERVERFS_AGENT_EGRESS_ALLOW=127.0.0.1:{port}"))
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    let repo = b.repo.clone();
    let _ = std::fs::remove_dir_all(repo.join("src"));
    let probe = format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/').read()\n");
    let started = Instant::now();
    generate(&repo, args.files, args.file_bytes, &probe)?;
    eprintln!("worktree: generated {} files in {:.1} s", args.files, started.elapsed().as_secs_f64());
    b.spawn().await;
    let python =
        ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("python3");

    // Each round times the three side by side (the disk of these machines varies by several
    // times from one minute to the next: only measures taken together compare). The worktree
    // task's start is also split, from its events, into the worktree's making and the rest.
    let scratch = b.root().join("scratch-tree");
    let scratch = scratch.to_str().context("path")?.to_owned();
    let prompt = format!("exec:{python} probe.py");
    let (mut alone, mut worktree, mut in_place) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        // Which goes first alternates: a removal slows the next checkout on some disks.
        if round % 2 == 1 {
            worktree.push(start(&b, &arrivals, &prompt, "worktree").await?);
        }
        let t = Instant::now();
        git(&repo, &["worktree", "add", "-q", "--detach", &scratch, "HEAD"])?;
        alone.push(t.elapsed().as_secs_f64() * 1000.0);
        git(&repo, &["worktree", "remove", "--force", &scratch])?;
        if round % 2 == 0 {
            worktree.push(start(&b, &arrivals, &prompt, "worktree").await?);
        }
        in_place.push(start(&b, &arrivals, &prompt, "in_place").await?);
        eprintln!(
            "worktree: round {round}: alone {:.0} ms, worktree task {:.0} ms, in-place task {:.0} ms",
            alone[round], worktree[round], in_place[round]
        );
    }

    // The disk a running worktree task adds.
    let v = b
        .call(
            "submit_agent_task",
            json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:120", "isolation": "worktree" }),
        )
        .await
        .map_err(|e| anyhow::anyhow!("submit: {e}"))?;
    let id = v["task_id"].as_str().context("task_id")?.to_owned();
    wait(&b, &id, |t| t["status"] == "running" || t["terminal"] == true).await?;
    let state = b.state_dir.clone();
    let task_disk = disk_bytes(&state.join("worktrees").join(&id))
        + disk_bytes(&state.join("worktree-objects").join(&id))
        + disk_bytes(&repo.join(".git/worktrees").join(&id));
    let _ = b.call("cancel_agent_task", json!({ "task_id": id })).await;
    wait(&b, &id, |t| t["terminal"] == true).await?;
    let checkout_disk = disk_bytes(&repo) - disk_bytes(&repo.join(".git"));
    let git_disk = disk_bytes(&repo.join(".git"));

    let (alone, worktree, in_place) = (median(alone), median(worktree), median(in_place));
    println!("| measure ({} files of {} bytes, {} rounds) | median ms |", args.files, args.file_bytes, args.rounds);
    println!("|---|---:|");
    println!("| `git worktree add` alone | {alone:.0} |");
    println!("| worktree task: submit → the agent's first request | {worktree:.0} |");
    println!("| in-place task: submit → the agent's first request | {in_place:.0} |");
    println!();
    println!(
        "worktree task start / `git worktree add` alone: {:.2}× (aim ≤ 1.5×); / in-place task start: {:.2}×",
        worktree / alone,
        worktree / in_place
    );
    println!(
        "disk per running worktree task: {:.1} MiB (the checkout's files: {:.1} MiB, the repository's .git: {:.1} MiB)",
        task_disk as f64 / 1048576.0,
        checkout_disk as f64 / 1048576.0,
        git_disk as f64 / 1048576.0
    );
    Ok(())
}
