//! `tasks many`: what many waiting tasks cost the bridge — its CPU (% of a core per waiting task),
//! its RSS and its descriptors per running task, its own per-task helpers (the sandbox's relay,
//! bwrap) counted with it and the agents apart — for `--tasks` fake `wait:` tasks at once and for
//! `--real` real CLI tasks held on their model call by the scripted model server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use e2e::real::{Cli, RealBridge};
use e2e::{Options, TestBridge};

use crate::common::{call, clock_tick, proc_of, submit, wait_until};

/// Many tasks at once.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Fake `wait:` tasks running at once.
    #[arg(long, default_value_t = 32)]
    tasks: usize,
    /// Real CLI tasks running at once, each waiting on a held model reply (0: none).
    #[arg(long, default_value_t = 8)]
    real: usize,
    /// The real CLI: codex or claude.
    #[arg(long, default_value = "codex")]
    cli: String,
    /// How long the running tasks are sampled (and the idle bridge, before them).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    window: Duration,
    #[command(flatten)]
    bins: crate::bins::BinArgs,
}

/// The processes the bridge started that are its own machinery, not the agent's.
const OWN_HELPERS: [&str; 2] = ["relay", "bwrap"];

/// One window's readings.
#[derive(Debug, Default)]
struct Window {
    /// The bridge's mean `VmRSS`, KiB.
    rss_kib: f64,
    /// The bridge's mean open descriptors.
    fds: f64,
    /// The bridge's CPU over the window, in cores.
    cpu: f64,
    /// By kind of descendant process: how many, their `RssAnon` (KiB, summed) and CPU (cores).
    kids: BTreeMap<String, (usize, u64, f64)>,
}

impl Window {
    fn own(&self) -> (u64, f64) {
        OWN_HELPERS.iter().filter_map(|k| self.kids.get(*k)).fold((0, 0.0), |(rss, cpu), (_, r, c)| (rss + r, cpu + c))
    }
}

/// One load's figures: idle and with its tasks running.
struct Load {
    name: String,
    tasks: usize,
    idle: Window,
    busy: Window,
}

impl Load {
    /// A task's cost: the bridge's gain over idle plus its own helpers, divided by the tasks:
    /// (RSS in KiB, CPU in % of a core).
    fn per_task(&self) -> (f64, f64) {
        let (own_rss, own_cpu) = self.busy.own();
        let kib = (self.busy.rss_kib - self.idle.rss_kib + own_rss as f64) / self.tasks as f64;
        let cpu = (self.busy.cpu - self.idle.cpu + own_cpu) / self.tasks as f64 * 100.0;
        (kib, cpu)
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let mut loads = Vec::new();
    let options = Options { bin: Some(bridge_bin.clone()), ..Options::default() }
        .with(&format!("SERVERFS_AGENT_MAX_ACTIVE_TASKS={}", args.tasks + 2))
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    b.spawn().await;
    let load = fake(&b, &args).await.context("fake tasks")?;
    loads.push(load);
    drop(b);
    if args.real > 0 {
        let cli = match args.cli.as_str() {
            "codex" => Cli::Codex,
            "claude" => Cli::Claude,
            other => bail!("--cli must be codex or claude, not {other:?}"),
        };
        let base = Options { bin: Some(bridge_bin), ..Options::default() }.var("AGENT_BRIDGE_LOG", "warn");
        let limit = format!("SERVERFS_AGENT_MAX_ACTIVE_TASKS={}", args.real + 2);
        let r = RealBridge::start_on(base, cli, &[&limit]).await.context("the real CLI is not installed")?;
        let load = real(&r, &args).await.with_context(|| format!("{} tasks", cli.name()))?;
        loads.push(load);
    }
    report(&loads, &args);
    Ok(())
}

async fn fake(b: &TestBridge, args: &Args) -> anyhow::Result<Load> {
    let pid = b.pid().context("bridge pid")?;
    // One task run to its end first: the first task's one-time work (the sandbox's caches, the
    // store's statements) is not what a waiting task costs.
    let warm = submit(b, task("complete:warm")).await?;
    b.wait_terminal(&warm).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = window(pid, args.window / 2).await?;
    let mut ids = Vec::new();
    for _ in 0..args.tasks {
        ids.push(submit(b, task("wait:600")).await?);
    }
    for id in &ids {
        until(b, id, Duration::from_secs(120), |t| t["status"] == "running").await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy = window(pid, args.window).await?;
    end(b, &ids).await?;
    Ok(Load { name: "fake `wait:`".into(), tasks: args.tasks, idle, busy })
}

async fn real(r: &RealBridge, args: &Args) -> anyhow::Result<Load> {
    let b = &r.b;
    let pid = b.pid().context("bridge pid")?;
    // One task to its end first, as for the fake tasks (the CLI's files in the page cache).
    let warm =
        submit(b, json!({ "runtime": r.cli.name(), "workdir": "ws", "profile": "review", "prompt": "SAY:warm" }))
            .await?;
    wait_until(b, &warm, Duration::from_secs(120), |t| t["terminal"] == true).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = window(pid, args.window / 2).await?;
    let held_before = r.server.requests().len();
    // Read-only (`review`) tasks: a workdir has one writing task at a time.
    let mut ids = Vec::new();
    for _ in 0..args.real {
        let prompt = "HOLD_REPLY: wait for the model";
        ids.push(
            submit(b, json!({ "runtime": r.cli.name(), "workdir": "ws", "profile": "review", "prompt": prompt }))
                .await?,
        );
    }
    for id in &ids {
        until(b, id, Duration::from_secs(120), |t| t["status"] == "running").await?;
    }
    // Running is not yet waiting: each CLI's held model call must have arrived.
    let deadline = Instant::now() + Duration::from_secs(120);
    while held(r, held_before) < args.real {
        if Instant::now() > deadline {
            bail!("only {} of {} held model calls arrived", held(r, held_before), args.real);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy = window(pid, args.window).await?;
    end(b, &ids).await?;
    Ok(Load { name: format!("real {} (model call held)", r.cli.name()), tasks: args.real, idle, busy })
}

/// The held model calls that arrived since `from` requests.
fn held(r: &RealBridge, from: usize) -> usize {
    r.server.requests().iter().skip(from).filter(|q| q.body.to_string().contains("HOLD_REPLY")).count()
}

fn task(prompt: &str) -> Value {
    json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": prompt })
}

/// Polls `get_agent_task` (no wait: a long poll waits for an end, not for `running`).
async fn until(b: &TestBridge, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let t = call(b, "get_agent_task", json!({ "task_id": id })).await?;
        if done(&t) {
            return Ok(());
        }
        if t["terminal"] == true || Instant::now() > deadline {
            bail!("task {id} did not get there: {t:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Cancels the tasks and waits for their ends.
async fn end(b: &TestBridge, ids: &[String]) -> anyhow::Result<()> {
    for id in ids {
        call(b, "cancel_agent_task", json!({ "task_id": id })).await?;
    }
    for id in ids {
        until(b, id, Duration::from_secs(60), |t| t["terminal"] == true).await?;
    }
    Ok(())
}

/// Samples the bridge once a second over `span`, and its descendants at both ends.
async fn window(pid: u32, span: Duration) -> anyhow::Result<Window> {
    let tick = clock_tick()? as f64;
    let start = Instant::now();
    let first = proc_of(pid)?;
    let kids_before = descendants(pid);
    let (mut rss, mut fds, mut n) = (0.0, 0.0, 0.0);
    while start.elapsed() < span {
        let p = proc_of(pid)?;
        (rss, fds, n) = (rss + p.rss_kib as f64, fds + p.fds as f64, n + 1.0);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let last = proc_of(pid)?;
    let secs = start.elapsed().as_secs_f64();
    let mut kids = BTreeMap::new();
    for (kid, kind, ticks) in descendants(pid) {
        // CPU over the window, for the processes alive at both ends.
        let before = kids_before.iter().find(|(p, _, _)| *p == kid).map(|(_, _, t)| *t);
        let cpu = before.map_or(0.0, |b| ticks.saturating_sub(b) as f64 / tick / secs);
        let entry = kids.entry(kind).or_insert((0, 0, 0.0));
        *entry = (entry.0 + 1, entry.1 + status_kib(kid, "RssAnon:"), entry.2 + cpu);
    }
    Ok(Window {
        rss_kib: rss / n,
        fds: fds / n,
        cpu: last.ticks.saturating_sub(first.ticks) as f64 / tick / secs,
        kids,
    })
}

/// Every descendant of `root`: its pid, its kind (the relay, bwrap, the agent's programs by
/// name) and its CPU ticks.
fn descendants(root: u32) -> Vec<(u32, String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let procs: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(procs.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> =
                cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            // bwrap's own command line names what it runs: its name decides first.
            let name = args.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_owned()).unwrap_or_default();
            let kind = if name == "bwrap" {
                name
            } else if args.iter().any(|a| a == "sandbox-exec") {
                "relay".to_owned()
            } else if args.iter().any(|a| a == "fake-agent") {
                "agent: fake-agent".to_owned()
            } else {
                format!("agent: {name}")
            };
            Some((pid, kind, proc_of(pid).ok()?.ticks))
        })
        .collect()
}

/// A `/proc/PID/status` figure in KiB (0 when unreadable).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix(field))?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn report(loads: &[Load], args: &Args) {
    println!("## tasks many: {:?} windows, the bridge alone and with its tasks running\n", args.window);
    println!(
        "| load | tasks | bridge RSS idle → running | + own helpers' RssAnon | RSS per task | bridge CPU idle → running | + own helpers' CPU | CPU per task | fds idle → running | fds per task |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in loads {
        let (own_rss, own_cpu) = l.busy.own();
        let (per_task_kib, per_task_cpu) = l.per_task();
        println!(
            "| {} | {} | {:.1} → {:.1} MiB | {:.1} MiB | {:.0} KiB | {:.2} % → {:.2} % | {:.2} % | {:.3} % of a core | {:.0} → {:.0} | {:.1} |",
            l.name,
            l.tasks,
            l.idle.rss_kib / 1024.0,
            l.busy.rss_kib / 1024.0,
            own_rss as f64 / 1024.0,
            per_task_kib,
            l.idle.cpu * 100.0,
            l.busy.cpu * 100.0,
            own_cpu * 100.0,
            per_task_cpu,
            l.idle.fds,
            l.busy.fds,
            (l.busy.fds - l.idle.fds) / l.tasks as f64,
        );
    }
    println!("\nThe processes under the bridge while the tasks ran (own helpers: {OWN_HELPERS:?}):\n");
    println!("| load | process | count | RssAnon, sum | CPU, sum |");
    println!("|---|---|---:|---:|---:|");
    for l in loads {
        for (kind, (count, rss, cpu)) in &l.busy.kids {
            println!("| {} | {kind} | {count} | {:.1} MiB | {:.2} % |", l.name, *rss as f64 / 1024.0, cpu * 100.0);
        }
    }
    println!();
    for l in loads {
        let (kib, cpu) = l.per_task();
        println!(
            "{}: RSS per running task {:.0} KiB (target ≤ 1 MiB: {}), CPU per waiting task {:.3} % of a core (target ≤ 1 %: {})",
            l.name,
            kib,
            verdict(kib <= 1024.0),
            cpu,
            verdict(cpu <= 1.0)
        );
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
