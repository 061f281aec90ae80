//! `tasks guard`, CI's regression guard on a task's start: a short run, in one small workdir,
//! of the fake agent started bare and of the same agent started as a task by the bridge (the
//! default layout: sandbox, network namespace, egress gate, change-set baseline), round by
//! round; the ratio of their medians, which the machine's speed divides out of, fails when it is
//! over 1.5 × the committed baseline (bench/tasks-baseline.json), and `--write` records the
//! measured ratio as the new baseline.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use e2e::{Options, TestBridge};

use crate::bins::BinArgs;
use crate::common::{self, Arrivals, median, quantile};

/// How far over the baseline ratio a run may go.
const TOLERANCE: f64 = 1.5;
/// Rounds whose samples are thrown away (the page cache, the first sandbox).
const WARMUP: usize = 2;

/// The guard's flags.
#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    /// The committed baseline.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tasks-baseline.json"))]
    baseline: PathBuf,
    /// Record this run's ratio as the baseline instead of judging it.
    #[arg(long)]
    write: bool,
    /// Timed rounds (each: one bare start and one task start).
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    #[command(flatten)]
    bins: BinArgs,
}

/// Runs the guard; `Ok(false)` is a regression.
pub async fn main(args: &GuardArgs) -> anyhow::Result<bool> {
    if args.rounds < 3 {
        bail!("--rounds {}: at least 3, for a median", args.rounds);
    }
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    let arrivals = Arrivals::start()?;
    let options = Options { bin: Some(bridge_bin.clone()), ..Options::default() }
        .with(&format!("SERVERFS_AGENT_EGRESS_ALLOW=127.0.0.1:{}", arrivals.port))
        .var("AGENT_BRIDGE_LOG", "warn");
    let mut b = TestBridge::prepare(options);
    std::fs::write(b.repo.join("probe.py"), common::probe_script(arrivals.port)).context("write probe.py")?;
    b.spawn().await;
    let fake_home = b.root().join("bare-home");
    std::fs::create_dir_all(fake_home.join("sessions")).context("the bare agent's home")?;
    let prompt = format!("exec:{} probe.py", common::python());
    let (mut bare, mut task) = (Vec::new(), Vec::new());
    for round in 0..WARMUP + args.rounds {
        let a = common::fake_bare(&bridge_bin, &fake_home, &b.repo, &prompt, &arrivals).await?;
        let t = task_start(&b, &prompt, &arrivals).await?;
        if round >= WARMUP {
            bare.push(a);
            task.push(t);
        }
    }
    b.stop().await;
    let (bare_ms, task_ms) = (median(&bare), median(&task));
    let ratio = task_ms / bare_ms;
    println!(
        "tasks guard: a fake task's start {task_ms:.1} ms (p90 {:.1}), the agent bare {bare_ms:.1} ms (p90 {:.1}), median of {}: ratio {ratio:.2}",
        quantile(&task, 0.9),
        quantile(&bare, 0.9),
        args.rounds
    );
    let measured = json!({
        "date": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()[..10].to_owned(),
        "ratio": (ratio * 100.0).round() / 100.0,
        "task_start_ms": (task_ms * 10.0).round() / 10.0,
        "bare_start_ms": (bare_ms * 10.0).round() / 10.0,
        "rounds": args.rounds,
    });
    if args.write {
        std::fs::write(&args.baseline, serde_json::to_string_pretty(&measured)? + "\n")
            .with_context(|| format!("write {}", args.baseline.display()))?;
        println!("tasks guard: wrote {}", args.baseline.display());
        return Ok(true);
    }
    let text = std::fs::read_to_string(&args.baseline)
        .with_context(|| format!("read the baseline {} (record one with --write)", args.baseline.display()))?;
    let committed: Value = serde_json::from_str(&text).with_context(|| format!("parse {}", args.baseline.display()))?;
    let base = committed["ratio"].as_f64().filter(|r| *r > 0.0).context("the baseline has no positive `ratio`")?;
    let limit = base * TOLERANCE;
    let verdict = ratio <= limit;
    println!(
        "tasks guard: {} — the ratio {ratio:.2} against the baseline {base:.2} ({}): the limit is {limit:.2}",
        if verdict { "passed" } else { "REGRESSION" },
        committed["date"].as_str().unwrap_or("undated")
    );
    Ok(verdict)
}

/// Submit → the task's agent's request, in ms; waits until the task succeeded and let go.
async fn task_start(b: &TestBridge, prompt: &str, arrivals: &Arrivals) -> anyhow::Result<f64> {
    let before = arrivals.count();
    let t = Instant::now();
    let id = common::submit(b, json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt })).await?;
    let first = arrivals
        .wait_for(before, std::time::Duration::from_secs(60))
        .await
        .with_context(|| format!("task {id}:\n{}", b.log()))?;
    let end = common::wait_until(b, &id, std::time::Duration::from_secs(60), |t| t["terminal"] == true).await?;
    if end["status"] != "succeeded" {
        bail!("task {id} did not succeed: {end:#}");
    }
    b.writer_idle().await;
    Ok(common::ms_since(t, first))
}
