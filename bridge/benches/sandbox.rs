//! Cost of the task sandbox (bubblewrap), measured against no sandbox in one run: two bridges
//! started once each, one with the default `SERVERFS_AGENT_SANDBOX` (`auto`: bubblewrap) and
//! one with `SERVERFS_AGENT_SANDBOX=off`, fake tasks interleaved between them so machine noise
//! hits both. Per task: submit → `running` and submit → terminal as a caller sees them (long
//! polls, no sleeps), and submit → the first provider event from the store's event times (ms
//! resolution), for `complete:x` and `exec:true`. Then bubblewrap's own cost (`bwrap … -- true`
//! against plain `true`) and, where installed, the real CLIs' `--version` with and without the
//! same wrapper: the sandbox must cost a small fraction of a CLI's own start-up.
//!
//! Run with `cargo bench -p agent-bridge --bench sandbox`. Compare ratios within one run. Exits
//! non-zero, loudly, when bubblewrap cannot start a sandbox on this machine.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the daemon"
)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use agent_bridge::provider::sandbox::BASE_FLAGS;
use e2e::{Options, TestBridge};

const WARMUP: usize = 3;
const RUNS: usize = 30;

fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn refuse(why: &str) -> ! {
    let bar = "!".repeat(90);
    let _ = writeln!(std::io::stderr(), "{bar}\nSANDBOX BENCH NOT RUN: {why}\n{bar}");
    std::process::exit(1);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and p90 (nearest rank).
fn stats(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[(v.len() * 9).div_ceil(10) - 1])
}

fn row(what: &str, on: &[f64], off: &[f64]) {
    let ((m1, p1), (m0, p0)) = (stats(on), stats(off));
    say(&format!(
        "{what:<50} sandbox {m1:8.2} / p90 {p1:8.2} | off {m0:8.2} / p90 {p0:8.2} | ratio {:.2} / p90 {:.2} | +{:.2} ms",
        m1 / m0,
        p1 / p0,
        m1 - m0
    ));
}

/// Times one run of `program args`, which must succeed.
fn run(program: &str, args: &[&str]) -> f64 {
    let t = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let took = ms(t.elapsed());
    assert!(status.success(), "{program} {args:?}: {status}");
    took
}

/// `program args` plain and wrapped in the sandbox's [`BASE_FLAGS`], interleaved: (wrapped, plain) in ms.
fn plain_and_wrapped(program: &str, args: &[&str]) -> (Vec<f64>, Vec<f64>) {
    let wrapped: Vec<&str> = BASE_FLAGS.iter().copied().chain(["--", program]).chain(args.iter().copied()).collect();
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + RUNS {
        let (a, b) = if i % 2 == 0 {
            let a = run("bwrap", &wrapped);
            (a, run(program, args))
        } else {
            let b = run(program, args);
            (run("bwrap", &wrapped), b)
        };
        if i >= WARMUP {
            on.push(a);
            off.push(b);
        }
    }
    (on, off)
}

/// One fake task's times, in ms.
#[derive(Default)]
struct Times {
    running: Vec<f64>,
    first: Vec<f64>,
    terminal: Vec<f64>,
}

/// Submits `prompt` to `repo`, waits until it succeeded and the workdir is free again, and
/// records submit → running, submit → the first `first_event` (store times), submit → terminal.
async fn task(b: &TestBridge, prompt: &str, first_event: &str, into: Option<&mut Times>) {
    let t0 = Instant::now();
    let v = b
        .call("submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt }))
        .await
        .expect("submit");
    let id = v["task_id"].as_str().expect("task_id").to_owned();
    b.wait_for(&id, |t| t["status"] != "queued" && t["status"] != "starting").await;
    let running = ms(t0.elapsed());
    let done = b.wait_terminal(&id).await;
    let terminal = ms(t0.elapsed());
    assert_eq!(done["status"], "succeeded", "{prompt}: {done:#}");
    b.wait_released(&id, 1).await;
    let Some(times) = into else { return };
    let first: i64 = b
        .db()
        .query_row(
            "SELECT (SELECT MIN(created_at) FROM events WHERE task_id = ?1 AND event_type = ?2) - \
             (SELECT created_at FROM events WHERE task_id = ?1 AND event_type = 'task.submitted')",
            rusqlite::params![id, first_event],
            |r| r.get(0),
        )
        .unwrap_or_else(|e| panic!("no {first_event} for {prompt}: {e}"));
    times.running.push(running);
    times.first.push(first as f64);
    times.terminal.push(terminal);
}

const CASES: [(&str, &str); 2] = [("complete:x", "agent.message"), ("exec:true", "command.started")];

async fn tasks() -> [(Times, Times); 2] {
    let bin = || Some(env!("CARGO_BIN_EXE_agent-bridge").into());
    let on = TestBridge::start_with(Options { bin: bin(), ..Options::default() }).await;
    let off =
        TestBridge::start_with(Options { bin: bin(), ..Options::default() }.with("SERVERFS_AGENT_SANDBOX=off")).await;
    let health = on.health().await.expect("health");
    if health["containment"]["contained"] != true {
        refuse(&format!("the default bridge runs tasks without a sandbox: {}", health["containment"]));
    }
    assert_eq!(off.health().await.expect("health")["containment"]["contained"], false);
    for (prompt, first) in CASES {
        for _ in 0..WARMUP {
            task(&on, prompt, first, None).await;
            task(&off, prompt, first, None).await;
        }
    }
    let mut out: [(Times, Times); 2] = Default::default();
    for i in 0..RUNS {
        for ((prompt, first), (t_on, t_off)) in CASES.iter().zip(out.iter_mut()) {
            if i % 2 == 0 {
                task(&on, prompt, first, Some(t_on)).await;
                task(&off, prompt, first, Some(t_off)).await;
            } else {
                task(&off, prompt, first, Some(t_off)).await;
                task(&on, prompt, first, Some(t_on)).await;
            }
        }
    }
    out
}

fn main() {
    // Benches are outside the daemon's rules: timing `bwrap` and the CLIs directly with
    // `std::process::Command` (blocking, no process group, no sandbox decision) is fine here.
    let probe = Command::new("bwrap").args(BASE_FLAGS).arg("--").arg("true").stdin(Stdio::null()).output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => refuse(&format!(
            "bwrap cannot start a sandbox here ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => refuse(&format!("bwrap cannot be run ({e}): install Debian's bubblewrap")),
    }
    say(&format!(
        "task sandbox vs none: {RUNS} runs a case after {WARMUP} warm-ups, interleaved; median / p90 in ms; ratio = sandbox / off"
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let measured = runtime.block_on(tasks());
    for ((prompt, first), (on, off)) in CASES.iter().zip(&measured) {
        row(&format!("{prompt}: submit → running (caller)"), &on.running, &off.running);
        row(&format!("{prompt}: submit → first {first} (store)"), &on.first, &off.first);
        row(&format!("{prompt}: submit → succeeded (caller)"), &on.terminal, &off.terminal);
    }
    let (wrapped, plain) = plain_and_wrapped("true", &[]);
    row("spawn → exit: bwrap … -- true vs true", &wrapped, &plain);
    let task_cost = stats(&measured[0].0.terminal).0 - stats(&measured[0].1.terminal).0;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").join(".runtimes/node_modules");
    let clis = [
        ("claude --version", root.join("@anthropic-ai/claude-code/bin/claude.exe")),
        ("codex --version", root.join("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")),
    ];
    for (name, path) in clis {
        if !path.exists() {
            say(&format!("{name}: not installed at {} (run .ci/install-clis); skipped", path.display()));
            continue;
        }
        let (wrapped, plain) = plain_and_wrapped(&path.to_string_lossy(), &["--version"]);
        row(&format!("{name}: bwrap-wrapped vs plain"), &wrapped, &plain);
        let own = stats(&plain).0;
        say(&format!(
            "  the sandbox's cost per task (complete:x, +{task_cost:.2} ms) is {:.0}% of {name}'s own start-up ({own:.2} ms)",
            100.0 * task_cost / own
        ));
    }
}
