//! The soak benchmark: starts the real `agent-bridge` (fake runtime) and `mcp-front` on a
//! temporary socket and a loopback port, drives mixed load through the front for `--duration`,
//! samples both processes' RSS and descriptors, and exits non-zero when an answer was
//! malformed, the CLI failed, or memory or descriptors grew past their level after the warm-up.
//!
//! Run: `cargo build --release -p agent-bridge -p mcp-front && cargo run --release -p bench --bin soak --
//! --duration 30m` (CI: the debug build, `--duration 2m`). See `bench/README.md`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the soak benchmark is a load generator, not a daemon: it starts the binaries and reads /proc"
)]

#[path = "bins.rs"]
mod bins;
mod http;
mod load;
mod stats;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use e2e::front::TestFront;
use e2e::{Options, TestBridge};
use load::Shared;
use stats::{Limits, Sample, Tally};

/// Mixed load through the front for a long run; fails on a malformed answer, a CLI failure,
/// or RSS or descriptor growth.
#[derive(Parser, Debug)]
struct Args {
    /// How long the load runs (`2m`, `30m`).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
    duration: Duration,
    /// When the reference level is taken [default: 1 min, or half of a shorter run].
    #[arg(long, value_parser = humantime::parse_duration)]
    baseline: Option<Duration>,
    /// Callers long-polling `get_agent_task`, each on its own kept-alive connection.
    #[arg(long, default_value_t = 64)]
    pollers: usize,
    /// Idle connections held open (half silent, half after one call), reopened when closed.
    #[arg(long, default_value_t = 1000)]
    idle: usize,
    /// Slow-header clients.
    #[arg(long, default_value_t = 16)]
    slow: usize,
    /// Submitters of fake tasks.
    #[arg(long, default_value_t = 2)]
    submitters: usize,
    /// Pause between one submitter's submits.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "750ms")]
    submit_every: Duration,
    /// Bad-key (and bad-id) callers.
    #[arg(long, default_value_t = 2)]
    bad_callers: usize,
    /// Pause between one bad caller's calls.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "50ms")]
    bad_every: Duration,
    /// The bridge's active-task limit (`SERVERFS_AGENT_MAX_ACTIVE_TASKS`).
    #[arg(long, default_value_t = 8)]
    max_active: u64,
    /// A slow-header client's pause between bytes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    dribble: Duration,
    /// When a slow-header client gives up on a connection the server never closes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "90s")]
    slow_give_up: Duration,
    /// How often the CLI runs `tasks list`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    cli_every: Duration,
    /// How often RSS and descriptors are sampled.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    sample_every: Duration,
    #[command(flatten)]
    bins: bins::BinArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => fail(&format!("{e:#}")),
    }
}

fn fail(what: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "soak: {what}");
    ExitCode::FAILURE
}

fn note(what: &str) {
    let _ = writeln!(std::io::stderr(), "soak: {what}");
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let (bridge_bin, front_bin) =
        args.bins.locate("cargo build -p agent-bridge -p mcp-front, with --release for a release soak")?;
    let baseline = args.baseline.unwrap_or_else(|| Duration::from_secs(60).min(args.duration / 2));
    if baseline >= args.duration {
        bail!("--baseline ({baseline:?}) must fall inside --duration ({:?})", args.duration);
    }

    let options = Options { bin: Some(bridge_bin), ..Options::default() }
        .with(&format!("SERVERFS_AGENT_MAX_ACTIVE_TASKS={}", args.max_active))
        // The debug log of 30 minutes of load would only fill the disk.
        .var("AGENT_BRIDGE_LOG", "info");
    let bridge = Arc::new(TestBridge::start_with(options).await);
    let front = TestFront::start_bin(&front_bin, &bridge.socket, &[]).await;
    let key = bridge.create_key("soak", "operator").await;
    let (bridge_pid, front_pid) = (bridge.pid().context("bridge pid")?, front.pid().context("front pid")?);
    // Only now, so the bridge and the front keep the limit they were given: this process alone
    // holds the far side of every connection.
    raise_nofile();
    note(&format!(
        "bridge pid {bridge_pid}, front pid {front_pid} on {}; {} of load, reference level at {} s",
        front.addr,
        humantime::format_duration(args.duration),
        baseline.as_secs()
    ));

    let shared = Arc::new(Shared::new(front.addr, &key));
    let mut tasks = tokio::task::JoinSet::new();
    let seq = Arc::new(AtomicU64::new(0));
    for _ in 0..args.submitters {
        tasks.spawn(load::submitter(shared.clone(), args.submit_every, seq.clone()));
    }
    for _ in 0..args.pollers {
        tasks.spawn(load::poller(shared.clone()));
    }
    for _ in 0..args.bad_callers {
        tasks.spawn(load::bad_caller(shared.clone(), args.bad_every));
    }
    for _ in 0..args.slow {
        tasks.spawn(load::slow_header(shared.clone(), args.dribble, args.slow_give_up));
    }
    tasks.spawn(load::cli(shared.clone(), bridge.clone(), args.cli_every));
    // The idle connections open over the first seconds, not in one burst.
    for i in 0..args.idle {
        tasks.spawn(load::idle(shared.clone(), i % 2 == 1));
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut died = None;
    let mut next_note = Duration::from_secs(60);
    loop {
        let at = started.elapsed();
        let next = (at + args.sample_every).min(args.duration);
        match (stats::usage(bridge_pid), stats::usage(front_pid)) {
            (Some(bridge), Some(front)) => samples.push(Sample { at, bridge, front }),
            (None, _) => died = Some("the bridge exited during the run"),
            (_, None) => died = Some("the front exited during the run"),
        }
        if died.is_some() || at >= args.duration {
            break;
        }
        if at >= next_note {
            next_note += Duration::from_secs(60);
            note(&progress(&shared.tally, samples.last()));
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(started + next)).await;
    }
    let elapsed = started.elapsed();
    tasks.shutdown().await;

    let limits = Limits {
        baseline,
        rss_ratio: 1.10,
        // In flight at one sample and not at the other: every poller's call (one front→bridge
        // connection each), the bad callers' and submitters' calls, and per active task the
        // child's pipes, its pidfd and its cgroup; plus a margin for the store's files.
        bridge_fd_slack: 32 + (args.pollers + args.bad_callers + 2 * args.submitters) as u64 + 10 * args.max_active,
        // A client connection and a bridge connection per caller, the slow clients, and the
        // idle connections between a close and their reopening (jittered, a few per cent).
        front_fd_slack: 32
            + (args.pollers + args.bad_callers + 2 * args.submitters + args.slow + args.idle / 20) as u64,
    };
    let (report, mut reasons) = stats::verdict(&shared.tally, &samples, &limits, elapsed);
    if let Some(what) = died {
        reasons.push(what.to_owned());
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{report}");
    if reasons.is_empty() {
        let _ = writeln!(out, "\nsoak: PASS");
        return Ok(true);
    }
    let _ = writeln!(out, "\nsoak: FAIL");
    for reason in &reasons {
        let _ = writeln!(out, "  - {reason}");
    }
    let _ = writeln!(out, "\nbridge log (last lines):\n{}", tail(&bridge.log(), 30));
    let _ = writeln!(out, "\nfront log (last lines):\n{}", tail(&front.log(), 30));
    Ok(false)
}

fn progress(tally: &Tally, last: Option<&Sample>) -> String {
    let counts = tally.counts();
    let total: u64 = counts.values().sum();
    let (malformed, _) = tally.failures();
    let usage = last.map_or(String::new(), |s| {
        format!(
            ", bridge {} KiB / {} fds, front {} KiB / {} fds",
            s.bridge.rss_kib, s.bridge.fds, s.front.rss_kib, s.front.fds
        )
    });
    format!("{} s: {total} answers, {malformed} malformed{usage}", last.map_or(0, |s| s.at.as_secs()))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Raises this process's soft descriptor limit to its hard limit (the far ends of 1,000 idle
/// connections and more), saying so when that is not enough.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                note(&format!("cannot raise the descriptor limit from {soft} to {hard}: {e}"));
            }
        }
        Ok(_) => {}
        Err(e) => note(&format!("cannot read the descriptor limit: {e}")),
    }
}
