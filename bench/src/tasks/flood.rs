//! `tasks flood`: a flooding agent — one fake task emitting `--events` events at `--rate` a second
//! while `--pagers` callers long-poll it and page its events — measured as events ingested,
//! events read by the pagers, the bridge's memory against idle, and another (idle) task's
//! `get_agent_task` latency during the flood against before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use e2e::{Options, TestBridge};

use crate::common::{call, clock_tick, median, ms_since, proc_of, quantile, submit};

/// A flooding agent.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Events the flooding task emits.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Events a second.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Callers long-polling the flooding task and paging its events.
    #[arg(long, default_value_t = 16)]
    pagers: usize,
    /// Events per page (`read_agent_task_events`' `limit`, at most 500).
    #[arg(long, default_value_t = 500)]
    page: u64,
    /// How often the probe reads the idle task.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5ms")]
    probe_every: Duration,
    /// How long the probe runs before the flood (the baseline).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    before: Duration,
    #[command(flatten)]
    bins: crate::bins::BinArgs,
}

/// What one probe run saw: its latencies (ms).
struct Probe {
    lat_ms: Vec<f64>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let cap = args.events + 1_000;
    let options = Options { bin: Some(bridge_bin), ..Options::default() }
        .with("SERVERFS_AGENT_MAX_ACTIVE_TASKS=4")
        .with(&format!("SERVERFS_AGENT_MAX_EVENTS_PER_TASK={cap}"))
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    b.spawn().await;
    let b = Arc::new(b);
    let pid = b.pid().context("bridge pid")?;
    let tick = clock_tick()? as f64;

    let idle_task = submit(&b, task("wait:600")).await?;
    b.wait_status(&idle_task, "running").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = proc_of(pid)?.rss_kib;
    let quiet = probe(&b, &idle_task, args.probe_every, Arc::new(AtomicBool::new(false)), Some(args.before)).await?;

    // The flood: the task, its pagers, the probe and a sampler, until every pager has read it all.
    let cpu_before = (proc_of(pid)?.ticks, own_ticks()?);
    let started = Instant::now();
    let flood = submit(&b, task(&format!("events:{}@{}", args.events, args.rate))).await?;
    let done = Arc::new(AtomicBool::new(false));
    let read = Arc::new(AtomicU64::new(0));
    let mut pagers = Vec::new();
    for _ in 0..args.pagers {
        let (b, flood, read, page) = (Arc::clone(&b), flood.clone(), Arc::clone(&read), args.page);
        pagers.push(tokio::spawn(async move { pager(&b, &flood, page, &read).await }));
    }
    let prober = tokio::spawn({
        let (b, idle_task, done, every) = (Arc::clone(&b), idle_task.clone(), Arc::clone(&done), args.probe_every);
        async move { probe(&b, &idle_task, every, done, None).await }
    });
    let sampler = tokio::spawn({
        let (b, flood, done) = (Arc::clone(&b), flood.clone(), Arc::clone(&done));
        async move { sample(&b, pid, &flood, started, &done).await }
    });
    let mut per_pager = Vec::new();
    for p in pagers {
        per_pager.push(p.await.context("a pager")??);
    }
    let all_read = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let busy = prober.await.context("the probe")??;
    let (peak_rss, ended_at) = sampler.await.context("the sampler")??;
    let cpu_after = (proc_of(pid)?.ticks, own_ticks()?);
    let end = call(&b, "get_agent_task", json!({ "task_id": flood })).await?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let settled_rss = proc_of(pid)?.rss_kib;

    let stored = end["event_count"].as_u64().context("event_count")?;
    let dropped = end["events_dropped"].as_u64().context("events_dropped")?;
    if end["status"] != "succeeded" {
        bail!("the flooding task did not succeed: {end:#}");
    }
    let ingest = ended_at.context("the flooding task did not end")?;
    let secs = all_read.as_secs_f64();
    let total_read = read.load(Ordering::Relaxed);
    let bridge_cpu = (cpu_after.0 - cpu_before.0) as f64 / tick / secs;
    let bench_cpu = (cpu_after.1 - cpu_before.1) as f64 / tick / secs;
    let short = per_pager.iter().filter(|n| **n != stored).count();

    println!("## tasks flood: {} events at {}/s, {} pagers ({} a page)\n", args.events, args.rate, args.pagers, args.page);
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| events emitted | {} |", args.events);
    println!("| events stored (all of the task's, its own lifecycle events included) | {stored} |");
    println!("| events dropped by the cap ({cap}) | {dropped} |");
    println!("| submit → task ended (emission takes {:.1} s) | {:.2} s |", args.events as f64 / args.rate as f64, ingest.as_secs_f64());
    println!("| events ingested per second (stored ÷ submit → end) | {:.0} |", stored as f64 / ingest.as_secs_f64());
    println!("| submit → every pager has read every event | {secs:.2} s |");
    println!("| events read by the pagers, all together | {total_read} ({:.0}/s) |", total_read as f64 / secs);
    println!("| pagers that read fewer than the stored events | {short} |");
    println!("| bridge CPU during the flood (submit → all read) | {:.0} % of a core |", bridge_cpu * 100.0);
    println!("| the benchmark's own CPU meanwhile (pagers, probe: the same 2 cores) | {:.0} % of a core |", bench_cpu * 100.0);
    println!(
        "| bridge RSS: idle → peak → 12 s after | {:.1} → {:.1} → {:.1} MiB |",
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0,
        settled_rss as f64 / 1024.0
    );
    println!();
    println!("Another task's `get_agent_task` (no wait), every {:?}:\n", args.probe_every);
    println!("| when | calls | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (name, p) in [("before the flood", &quiet), ("during the flood", &busy)] {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} |",
            p.lat_ms.len(),
            median(&p.lat_ms),
            quantile(&p.lat_ms, 0.99),
            quantile(&p.lat_ms, 1.0)
        );
    }
    let (p99_before, p99_during) = (quantile(&quiet.lat_ms, 0.99), quantile(&busy.lat_ms, 0.99));
    println!(
        "\np99 during ÷ before: {:.2}×; target: p99 during ≤ 10 ms: {}",
        p99_during / p99_before,
        if p99_during <= 10.0 { "met" } else { "MISSED" }
    );
    Ok(())
}

fn task(prompt: &str) -> Value {
    json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": prompt })
}

/// Pages the task's events to the end, long-polling (1 s) whenever it has caught up, until the
/// task has ended and its last page is read; how many events it read.
async fn pager(b: &TestBridge, id: &str, limit: u64, read: &AtomicU64) -> anyhow::Result<u64> {
    let (mut after, mut total, mut ended) = (0u64, 0u64, false);
    loop {
        let page = call(b, "read_agent_task_events", json!({ "task_id": id, "after_event_id": after, "limit": limit }))
            .await?;
        let n = page["events"].as_array().context("events")?.len() as u64;
        (total, after) = (total + n, page["next_after_event_id"].as_u64().unwrap_or(after));
        read.fetch_add(n, Ordering::Relaxed);
        if n == limit {
            continue;
        }
        if ended {
            return Ok(total);
        }
        let t = call(b, "get_agent_task", json!({ "task_id": id, "wait_seconds": 1 })).await?;
        ended = t["terminal"] == true;
    }
}

/// Reads `id` every `every` for `span`, or until `stop`; the latencies.
async fn probe(
    b: &TestBridge,
    id: &str,
    every: Duration,
    stop: Arc<AtomicBool>,
    span: Option<Duration>,
) -> anyhow::Result<Probe> {
    let started = Instant::now();
    let mut lat_ms = Vec::new();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) && span.is_none_or(|s| started.elapsed() < s) {
        ticks.tick().await;
        let at = Instant::now();
        let t = call(b, "get_agent_task", json!({ "task_id": id })).await?;
        lat_ms.push(ms_since(at, Instant::now()));
        if t["status"] != "running" {
            bail!("the idle task is no longer running: {t:#}");
        }
    }
    Ok(Probe { lat_ms })
}

/// Samples the bridge's RSS every 50 ms and the flooding task every 250 ms until `done`: the
/// peak RSS and when the task was first seen ended (since `started`).
async fn sample(
    b: &TestBridge,
    pid: u32,
    id: &str,
    started: Instant,
    done: &AtomicBool,
) -> anyhow::Result<(u64, Option<Duration>)> {
    let (mut peak, mut ended, mut n) = (0, None, 0u64);
    while !done.load(Ordering::Relaxed) {
        peak = peak.max(proc_of(pid)?.rss_kib);
        if ended.is_none() && n.is_multiple_of(5) {
            let t = call(b, "get_agent_task", json!({ "task_id": id })).await?;
            if t["terminal"] == true {
                ended = Some(started.elapsed());
            }
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((peak, ended))
}

/// This process's CPU ticks.
fn own_ticks() -> anyhow::Result<u64> {
    Ok(proc_of(std::process::id())?.ticks)
}
