//! `tasks history`: what a year of history costs — bridge start-up, a retention pass,
//! `get_agent_task`, the board's task list (first, second and a deep page) and `tasks list`,
//! with 1,000 and with `--tasks` (1,000,000) retained tasks, the same bridge and the same
//! requests; each figure's ratio, against the targets (start-up ≤ 2 s, every read ≤ 1.2× its
//! cost at 1,000). With `--before-bridge-bin`, another build is measured alike in the same run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use bridge_proto::client::Connection;
use bridge_proto::methods::{self, Surface};
use e2e::browser::http;
use e2e::{Options, TestBridge};

use crate::bins::BinArgs;
use crate::common::{median, ms_since, quantile};
use crate::history_store::{self, PRINCIPAL, Seeded};
use crate::seed::task_id;

/// The small store.
const FEW: usize = 1_000;
/// The start-up target, ms.
const STARTUP_MS: f64 = 2_000.0;
/// The bound on a read's ratio.
const BOUND: f64 = 1.2;
/// The most time one series of requests takes (after at least [`AT_LEAST`] of them): a listing
/// that reads every task takes seconds with a million.
const BUDGET: Duration = Duration::from_secs(30);
/// The fewest requests of a series.
const AT_LEAST: usize = 5;

/// Whether a series started at `started` with `done` requests may stop short.
fn enough(done: usize, started: Instant) -> bool {
    done >= AT_LEAST && started.elapsed() > BUDGET
}

/// The flags of `tasks history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Retained tasks in the large store.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Sequential `get_agent_task` reads of random tasks, per store.
    #[arg(long, default_value_t = 2_000)]
    reads: usize,
    /// Sequential requests of each board page, of `admin_list_tasks` and retention passes (a
    /// series stops short after 30 s, once it has five).
    #[arg(long, default_value_t = 50)]
    pages: usize,
    /// Runs of the `agent-bridge tasks list` CLI (stopping short likewise).
    #[arg(long, default_value_t = 10)]
    lists: usize,
    /// Timed start-ups per store.
    #[arg(long, default_value_t = 3)]
    starts: usize,
    /// Rounds, each measuring the small store then the large one (a bridge each): a figure is
    /// the median over the rounds, a ratio the median of each round's ratio, so a machine
    /// that is slower for a while moves both sides of a ratio.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// An earlier `agent-bridge` to measure alike ("before"), on copies of the same stores.
    #[arg(long)]
    before_bridge_bin: Option<PathBuf>,
    #[command(flatten)]
    bins: BinArgs,
}

/// One bridge's figures on one store, ms.
#[derive(Debug, Clone, Default)]
struct Figures {
    startup: f64,
    gc: f64,
    get_p50: f64,
    get_p99: f64,
    page1: f64,
    page2: f64,
    deep: f64,
    list_server: f64,
    list_totals: f64,
    list_cli: f64,
}

/// What a figure is held to.
#[derive(Clone, Copy)]
enum Target {
    /// ≤ 2 s with the large store.
    Startup,
    /// ≤ 1.2× its figure with the small one.
    Ratio,
    /// None: the ratio is shown.
    Shown,
}

/// A row of the report: its name, its figure, its target.
type Row = (&'static str, fn(&Figures) -> f64, Target);

/// The rows of the report.
const ROWS: [Row; 10] = [
    ("start-up: spawn → `bridge.health` answers (median)", |f| f.startup, Target::Startup),
    (
        "retention pass: `cancel_agent_task` of the newest, finished task (two reads + one pass), p50",
        |f| f.gc,
        Target::Shown,
    ),
    ("`get_agent_task` of a random task, p50", |f| f.get_p50, Target::Ratio),
    ("`get_agent_task` of a random task, p99", |f| f.get_p99, Target::Ratio),
    ("board `/` (first page, 50 tasks), p50", |f| f.page1, Target::Ratio),
    ("board `/?before=…` (its Older link: second page), p50", |f| f.page2, Target::Ratio),
    ("board `/?before=…` (the middle of the history), p50", |f| f.deep, Target::Ratio),
    ("`admin_list_tasks` without totals (what `tasks list` asks), p50", |f| f.list_server, Target::Ratio),
    (
        "`admin_list_tasks` with the totals over every task (`tasks list --totals`), p50",
        |f| f.list_totals,
        Target::Shown,
    ),
    ("`agent-bridge tasks list` (the CLI, wall time), p50", |f| f.list_cli, Target::Ratio),
];

/// Runs the measure and prints its report.
pub async fn main(args: &HistoryArgs) -> anyhow::Result<()> {
    let (bridge, _) = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?;
    let mut bins = vec![("after", bridge)];
    if let Some(before) = &args.before_bridge_bin {
        bins.insert(0, ("before", before.clone()));
    }
    let mut stores = Vec::new();
    for n in [FEW, args.tasks] {
        // tmpfs when the machine has one: the seed's commits are not flushed one by one.
        let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
        let dir = tempfile::Builder::new().prefix("tasks-history-").tempdir_in(base).context("a seed directory")?;
        let state = dir.path().join("state");
        let seeded = tokio::task::spawn_blocking({
            let state = state.clone();
            move || history_store::seed(&state, n)
        })
        .await??;
        eprintln!(
            "history: seeded {n} tasks in {:.1} s ({} through the store's API, the rest copied by SQL), {:.0} MB",
            seeded.took.as_secs_f64(),
            seeded.through_api,
            seeded.bytes as f64 / 1e6
        );
        stores.push((n, dir, state, seeded));
    }
    let mut results: Vec<(&str, Vec<Vec<Figures>>)> = bins.iter().map(|(name, _)| (*name, Vec::new())).collect();
    for round in 1..=args.rounds.max(1) {
        for ((name, bin), (_, rounds)) in bins.iter().zip(&mut results) {
            let mut per_store = Vec::new();
            for (n, _, state, _) in &stores {
                let f = measure(bin, state, *n, args).await.with_context(|| format!("{name} with {n} tasks"))?;
                eprintln!("history: round {round}, {name}, {n} tasks: {f:?}");
                per_store.push(f);
            }
            rounds.push(per_store);
        }
    }
    let seeded: Vec<Seeded> = stores.iter().map(|s| s.3).collect();
    report(args, &results, &seeded);
    Ok(())
}

/// Every figure of one bridge on a copy of the store in `seeded`.
async fn measure(bin: &Path, seeded: &Path, tasks: usize, args: &HistoryArgs) -> anyhow::Result<Figures> {
    let options = Options { bin: Some(bin.to_owned()), ..Options::default() }
        // A year of history is kept: nothing of the seeded year is past retention.
        .with("SERVERFS_AGENT_TASK_RETENTION_HOURS=8784")
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    history_store::copy(seeded, &b.state_dir)?;
    let mut starts = Vec::new();
    for _ in 0..args.starts.max(1) {
        starts.push(startup(&b, bin).await?);
    }
    b.spawn().await;
    // One connection for every call, as a client that keeps it would: the figures are the
    // bridge's work on a call, not a connection's set-up.
    let mut socket = Connection::connect(&b.socket).await.map_err(|e| anyhow::anyhow!("connect: {e:?}"))?;
    let mut rng = fastrand::Rng::with_seed(7);
    let mut f = Figures { startup: median(&starts), ..Figures::default() };

    let mut gets = Vec::with_capacity(args.reads);
    for _ in 0..args.reads {
        let id = task_id(rng.usize(..tasks));
        let at = Instant::now();
        let v = call(&mut socket, "get_agent_task", json!({ "task_id": id })).await?;
        gets.push(ms_since(at, Instant::now()));
        if v["status"] != "succeeded" {
            bail!("get_agent_task {id}: {v}");
        }
    }
    (f.get_p50, f.get_p99) = (quantile(&gets, 0.5), quantile(&gets, 0.99));

    let (mut passes, series) = (Vec::with_capacity(args.pages), Instant::now());
    // Always the newest task: its reads hit the cache, so the pass is what grows with the store.
    let newest = task_id(tasks - 1);
    for _ in 0..args.pages {
        if enough(passes.len(), series) {
            break;
        }
        let id = &newest;
        let at = Instant::now();
        let v = call(&mut socket, "cancel_agent_task", json!({ "task_id": id })).await?;
        passes.push(ms_since(at, Instant::now()));
        if v["status"] != "succeeded" {
            bail!("cancel_agent_task of the finished {id}: {v}");
        }
    }
    f.gc = median(&passes);

    f.list_server = timed_lists(&mut socket, json!({ "totals": false }), args.pages).await?;
    f.list_totals = timed_lists(&mut socket, json!({}), args.pages).await?;

    let (mut clis, series) = (Vec::with_capacity(args.lists), Instant::now());
    for _ in 0..args.lists {
        if enough(clis.len(), series) {
            break;
        }
        let at = Instant::now();
        let out = b.cli(&["tasks", "list"]);
        clis.push(ms_since(at, Instant::now()));
        if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains(PRINCIPAL) {
            bail!("tasks list: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    f.list_cli = median(&clis);

    let (addr, cookie) = board_login(&b)?;
    let first = page(&addr, &cookie, "/", 1)?;
    let older = first
        .split("href=\"/?before=")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .context("the first page has no Older link")?
        .to_owned();
    f.page1 = timed_pages(&addr, &cookie, "/", args.pages)?;
    f.page2 = timed_pages(&addr, &cookie, &format!("/?before={older}"), args.pages)?;
    f.deep = timed_pages(&addr, &cookie, &format!("/?before={}", task_id(tasks / 2)), args.pages)?;
    b.stop().await;
    Ok(f)
}

/// The median of up to `n` sequential `admin_list_tasks` calls with `args` (ms).
async fn timed_lists(socket: &mut Connection, args: serde_json::Value, n: usize) -> anyhow::Result<f64> {
    let (mut lists, series) = (Vec::with_capacity(n), Instant::now());
    for _ in 0..n {
        if enough(lists.len(), series) {
            break;
        }
        let at = Instant::now();
        let v = call(socket, "admin_list_tasks", args.clone()).await?;
        lists.push(ms_since(at, Instant::now()));
        if v["tasks"].as_array().is_none_or(Vec::is_empty) {
            bail!("admin_list_tasks listed nothing: {v}");
        }
    }
    Ok(median(&lists))
}

/// Calls a capability as the local operator on an open connection.
async fn call(socket: &mut Connection, name: &str, args: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let serde_json::Value::Object(arguments) = args else { bail!("arguments must be an object") };
    let params = e2e::calls::call_params(Surface::Cli, None, name, arguments);
    socket.call(methods::CAPABILITIES_CALL, params).await.map_err(|e| anyhow::anyhow!("{name}: {e:?}"))
}

/// One start-up of the bridge on `b`'s directory: spawn → its first health answer, polled
/// every millisecond; then it is stopped (SIGTERM) and waited for.
async fn startup(b: &TestBridge, bin: &Path) -> anyhow::Result<f64> {
    let at = Instant::now();
    let mut child = Command::new(bin)
        .arg("serve")
        .arg("--env-file")
        .arg(&b.env_file)
        .env("AGENT_BRIDGE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start agent-bridge")?;
    let ready = loop {
        if b.health().await.is_ok() {
            break ms_since(at, Instant::now());
        }
        if let Some(status) = child.try_wait()? {
            bail!("agent-bridge exited before it answered ({status})");
        }
        if at.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            bail!("agent-bridge did not answer within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)?;
    tokio::task::spawn_blocking(move || child.wait()).await??;
    Ok(ready)
}

/// A board token from the CLI, logged in: the board's address and the session cookie.
fn board_login(b: &TestBridge) -> anyhow::Result<(String, String)> {
    let out = b.cli(&["board", "token", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("board token --json")?;
    let url = v["login_url"].as_str().context("no login url")?;
    let addr = url.trim_start_matches("http://").trim_end_matches("/login").to_owned();
    let token = v["token"].as_str().context("no token")?;
    let origin = format!("http://{addr}");
    let headers = [("Origin", origin.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
    let r = http(&addr, "POST", "/login", &headers, &format!("token={token}"));
    if r.status != 303 {
        bail!("board login: {} {}", r.status, r.body);
    }
    let cookie = r.header("set-cookie").context("no session cookie")?;
    Ok((addr.clone(), cookie.split(';').next().unwrap_or_default().to_owned()))
}

/// One board page, checked to list tasks (`times` GETs, the last one's body).
fn page(addr: &str, cookie: &str, path: &str, times: usize) -> anyhow::Result<String> {
    let mut body = String::new();
    for _ in 0..times {
        let r = http(addr, "GET", path, &[("Cookie", cookie)], "");
        if r.status != 200 || !r.body.contains("agt_") {
            bail!("board {path}: {} {}", r.status, r.body);
        }
        body = r.body;
    }
    Ok(body)
}

/// The median time of `n` sequential GETs of a board page, ms.
fn timed_pages(addr: &str, cookie: &str, path: &str, n: usize) -> anyhow::Result<f64> {
    page(addr, cookie, path, 1)?;
    let (mut times, series) = (Vec::with_capacity(n), Instant::now());
    for _ in 0..n {
        if enough(times.len(), series) {
            break;
        }
        let at = Instant::now();
        page(addr, cookie, path, 1)?;
        times.push(ms_since(at, Instant::now()));
    }
    Ok(median(&times))
}

/// The median over `rounds` of `get` of each round's store `store`.
fn over_rounds(rounds: &[Vec<Figures>], store: usize, get: fn(&Figures) -> f64) -> f64 {
    median(&rounds.iter().map(|r| get(&r[store])).collect::<Vec<_>>())
}

/// The median over `rounds` of each round's ratio of the large store's `get` to the small's.
fn ratio_over_rounds(rounds: &[Vec<Figures>], get: fn(&Figures) -> f64) -> f64 {
    median(&rounds.iter().map(|r| get(&r[1]) / get(&r[0])).collect::<Vec<_>>())
}

fn report(args: &HistoryArgs, results: &[(&str, Vec<Vec<Figures>>)], seeded: &[Seeded]) {
    let many = grouped(args.tasks);
    println!("# tasks history: {FEW} retained tasks against {many}\n");
    println!(
        "Seeded: {} and {many} finished tasks, over a year (the first {} through the store's API, \
         the rest copied by SQL), in {:.1} s and {:.1} s; the large file {:.0} MB. Retention 8784 h: \
         nothing expires, so a retention pass finds nothing to delete (its steady state). Sequential \
         requests on one kept connection (the board: a connection each): {} reads, {} of each page, \
         listing and pass and {} CLI runs (a series stops short after 30 s once it has 5), {} \
         start-ups (median); {} rounds, each the small store then the large one: a figure is its \
         median over the rounds, a ratio the median of the rounds' ratios.\n",
        FEW,
        seeded[1].through_api,
        seeded[0].took.as_secs_f64(),
        seeded[1].took.as_secs_f64(),
        seeded[1].bytes as f64 / 1e6,
        args.reads,
        args.pages,
        args.lists,
        args.starts,
        args.rounds.max(1)
    );
    for (name, f) in results {
        println!("## {name}\n");
        println!("| measure | {FEW} tasks | {many} tasks | ratio | target | verdict |");
        println!("|---|---:|---:|---:|---|---|");
        for (what, get, target) in ROWS {
            let (small, large) = (over_rounds(f, 0, get), over_rounds(f, 1, get));
            let ratio = ratio_over_rounds(f, get);
            let (target, verdict) = match target {
                Target::Ratio => (format!("≤ {BOUND}×"), if ratio <= BOUND { "met" } else { "MISSED" }),
                Target::Startup => {
                    (format!("≤ {:.0} s", STARTUP_MS / 1000.0), if large <= STARTUP_MS { "met" } else { "MISSED" })
                }
                Target::Shown => ("—".to_owned(), ""),
            };
            println!("| {what} | {small:.2} ms | {large:.2} ms | {ratio:.2} | {target} | {verdict} |");
        }
        println!();
    }
    if let [(_, before), (_, after)] = results {
        println!("## before → after, with {many} tasks\n");
        println!("| measure | before | after | after ÷ before |");
        println!("|---|---:|---:|---:|");
        for (what, get, _) in ROWS {
            let (b, a) = (over_rounds(before, 1, get), over_rounds(after, 1, get));
            println!("| {what} | {b:.2} ms | {a:.2} ms | {:.2} |", a / b);
        }
        println!();
    }
}

/// `1000000` as `1,000,000`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
