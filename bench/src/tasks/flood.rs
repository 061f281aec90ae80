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

use crate::common::{call, clock_tick, median, ms_since, proc_of, quantile, submit, wait_until};

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
    before_flood: Duration,
    /// An `agent-bridge` of an earlier build, flooded the same way first, for ratios in one run.
    #[arg(long)]
    before: Option<std::path::PathBuf>,
    /// More earlier builds, `NAME=PATH` (repeatable), flooded after `--before`.
    #[arg(long)]
    variant: Vec<String>,
    #[command(flatten)]
    bins: crate::bins::BinArgs,
}

/// What one probe run saw: its latencies (ms).
struct Probe {
    lat_ms: Vec<f64>,
}

/// One build's figures.
struct Figures {
    name: String,
    stored: u64,
    dropped: u64,
    ended_s: f64,
    all_read_s: f64,
    read: u64,
    short: usize,
    bridge_cpu: f64,
    bench_cpu: f64,
    rss_kib: [u64; 3],
    quiet: Probe,
    busy: Probe,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let mut builds = Vec::new();
    if let Some(before) = &args.before {
        builds.push(("before", before.clone()));
    }
    for v in &args.variant {
        let (name, path) = v.split_once('=').with_context(|| format!("--variant {v:?}: not NAME=PATH"))?;
        builds.push((name, path.into()));
    }
    builds.push(("this build", bridge_bin));
    let mut results = Vec::new();
    for (name, bin) in builds {
        let f = measure(name, bin, &args).await.with_context(|| name.to_owned())?;
        eprintln!("flood: {name} done");
        results.push(f);
    }
    report(&results, &args);
    Ok(())
}

async fn measure(name: &str, bin: std::path::PathBuf, args: &Args) -> anyhow::Result<Figures> {
    let options = Options { bin: Some(bin), ..Options::default() }
        .with("SERVERFS_AGENT_MAX_ACTIVE_TASKS=4")
        .with(&format!("SERVERFS_AGENT_MAX_EVENTS_PER_TASK={}", cap(args)))
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
    let quiet =
        probe_apart(&b, &idle_task, args.probe_every, Arc::new(AtomicBool::new(false)), Some(args.before_flood))
            .await
            .context("the probe before the flood")??;

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
    let prober = probe_apart(&b, &idle_task, args.probe_every, Arc::clone(&done), None);
    let sampler = tokio::spawn({
        let (b, flood, done) = (Arc::clone(&b), flood.clone(), Arc::clone(&done));
        async move { sample(&b, pid, &flood, started, &done).await }
    });
    let mut per_pager = Vec::new();
    for p in pagers {
        per_pager.push(p.await.context("a pager")??);
    }
    let all_read = started.elapsed();
    // With no pagers, the flood lasts until the task ends.
    wait_until(&b, &flood, Duration::from_secs(600), |t| t["terminal"] == true).await?;
    let flood_secs = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let busy = prober.await.context("the probe")??;
    let (peak_rss, ended_at) = sampler.await.context("the sampler")??;
    let cpu_after = (proc_of(pid)?.ticks, own_ticks()?);
    let end = call(&b, "get_agent_task", json!({ "task_id": flood })).await?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let settled_rss = proc_of(pid)?.rss_kib;
    if end["status"] != "succeeded" {
        bail!("the flooding task did not succeed: {end:#}");
    }
    let stored = end["event_count"].as_u64().context("event_count")?;
    let secs = all_read.as_secs_f64();
    Ok(Figures {
        name: name.to_owned(),
        stored,
        dropped: end["events_dropped"].as_u64().context("events_dropped")?,
        ended_s: ended_at.context("the flooding task did not end")?.as_secs_f64(),
        all_read_s: secs,
        read: read.load(Ordering::Relaxed),
        short: per_pager.iter().filter(|n| **n != stored).count(),
        bridge_cpu: (cpu_after.0 - cpu_before.0) as f64 / tick / flood_secs,
        bench_cpu: (cpu_after.1 - cpu_before.1) as f64 / tick / flood_secs,
        rss_kib: [idle_rss, peak_rss, settled_rss],
        quiet,
        busy,
    })
}

/// The per-task event cap the bridge runs with: room for every emitted event.
fn cap(args: &Args) -> u64 {
    args.events + 1_000
}

fn report(results: &[Figures], args: &Args) {
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "## tasks flood: {} events at {}/s ({:.1} s of emission), {} pagers ({} a page), event cap {}\n",
        args.events,
        args.rate,
        args.events as f64 / args.rate as f64,
        args.pagers,
        args.page,
        cap(args)
    );
    let names: Vec<&str> = results.iter().map(|f| f.name.as_str()).collect();
    println!("| figure | {} |", names.join(" | "));
    println!("|---|{}", "---:|".repeat(results.len()));
    let row = |label: &str, cell: &dyn Fn(&Figures) -> String| {
        let cells: Vec<String> = results.iter().map(cell).collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    row("events stored (the task's own lifecycle events included)", &|f| f.stored.to_string());
    row("events dropped by the cap", &|f| f.dropped.to_string());
    row("submit → task ended", &|f| format!("{:.2} s", f.ended_s));
    row("events ingested per second (stored ÷ submit → end)", &|f| format!("{:.0}", f.stored as f64 / f.ended_s));
    row("submit → every pager has read every event", &|f| format!("{:.2} s", f.all_read_s));
    row("events read by the pagers, per second", &|f| format!("{:.0}", f.read as f64 / f.all_read_s));
    row("pagers that read fewer than the stored events", &|f| f.short.to_string());
    row("bridge CPU, submit → all read and ended", &|f| format!("{:.0} % of a core", f.bridge_cpu * 100.0));
    row("the benchmark's own CPU meanwhile", &|f| format!("{:.0} % of a core", f.bench_cpu * 100.0));
    row("bridge RSS: idle → peak → 12 s after", &|f| {
        format!("{:.1} → {:.1} → {:.1} MiB", mib(f.rss_kib[0]), mib(f.rss_kib[1]), mib(f.rss_kib[2]))
    });
    for (when, pick) in [("before the flood", true), ("during the flood", false)] {
        let lat = |f: &Figures| if pick { f.quiet.lat_ms.clone() } else { f.busy.lat_ms.clone() };
        row(&format!("another task's get_agent_task {when}: calls"), &|f| lat(f).len().to_string());
        row(&format!("… p50 / p99 / max ms {when}"), &|f| {
            let l = lat(f);
            format!("{:.2} / {:.2} / {:.2}", median(&l), quantile(&l, 0.99), quantile(&l, 1.0))
        });
    }
    println!();
    for f in results {
        let (before, during) = (quantile(&f.quiet.lat_ms, 0.99), quantile(&f.busy.lat_ms, 0.99));
        println!(
            "{}: p99 during ÷ before the flood {:.2}×; target p99 during ≤ 10 ms: {}",
            f.name,
            during / before,
            if during <= 10.0 { "met" } else { "MISSED" }
        );
    }
    let Some((after, earlier)) = results.split_last() else { return };
    for before in earlier {
        let rate = |f: &Figures| f.stored as f64 / f.ended_s;
        println!(
            "this build ÷ {}: ingestion {:.2}×, pagers' reads {:.2}×, p99 during the flood {:.2}×, peak RSS {:.2}×",
            before.name,
            rate(after) / rate(before),
            (after.read as f64 / after.all_read_s) / (before.read as f64 / before.all_read_s),
            quantile(&after.busy.lat_ms, 0.99) / quantile(&before.busy.lat_ms, 0.99),
            after.rss_kib[1] as f64 / before.rss_kib[1] as f64
        );
    }
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

/// [`probe`] on a thread and runtime of its own, as another caller's process would be: on the
/// benchmark's runtime, a probe's answer could wait while the pagers' tasks parse their pages.
fn probe_apart(
    b: &Arc<TestBridge>,
    id: &str,
    every: Duration,
    stop: Arc<AtomicBool>,
    span: Option<Duration>,
) -> tokio::task::JoinHandle<anyhow::Result<Probe>> {
    let (b, id) = (Arc::clone(b), id.to_owned());
    tokio::task::spawn_blocking(move || {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().context("the probe's runtime")?;
        runtime.block_on(probe(&b, &id, every, stop, span))
    })
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

/// Samples the bridge's RSS every 50 ms and the flooding task every 100 ms until `done`: the
/// peak RSS and when the task was first seen ended (since `started`).
async fn sample(
    b: &TestBridge,
    pid: u32,
    id: &str,
    started: Instant,
    done: &AtomicBool,
) -> anyhow::Result<(u64, Option<Duration>)> {
    let (mut peak, mut ended, mut n) = (0, None, 0u64);
    // Until the pagers are done and the task was seen ended (the pagers may see it first).
    while !done.load(Ordering::Relaxed) || ended.is_none() {
        peak = peak.max(proc_of(pid)?.rss_kib);
        if ended.is_none() && n.is_multiple_of(2) {
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
