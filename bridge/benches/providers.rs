//! Latency of a one-message turn per real CLI against the scripted model servers on
//! 127.0.0.1: submit → the provider's first event, submit → `succeeded` as a caller sees it,
//! and where the time goes (bridge before the spawn, CLI start-up and handshake, the turn, the
//! stop with proof and persistence), from the store's event times.
//!
//! Each CLI is measured twice in one run, in the task sandbox (the default where bubblewrap
//! works) and with `SERVERFS_AGENT_SANDBOX=off`, and the sandbox's cost is printed as the
//! ratio of the two and as its share of the CLI's own start-up.
//!
//! Run with `.ci/install-clis && cargo bench -p agent-bridge --bench providers`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the daemon"
)]

use std::time::{Duration, Instant};

use e2e::real::{Cli, RealBridge};

fn event_times(r: &RealBridge, task_id: &str) -> Vec<(String, i64)> {
    let db = r.b.db();
    let mut stmt =
        db.prepare("SELECT event_type, created_at FROM events WHERE task_id = ?1 ORDER BY event_id").unwrap();
    stmt.query_map([task_id], |row| Ok((row.get(0)?, row.get(1)?))).unwrap().map(Result::unwrap).collect()
}

fn at(events: &[(String, i64)], kind: &str, last: bool) -> i64 {
    let mut it = events.iter().filter(|(t, _)| t == kind).map(|(_, ms)| *ms);
    let found = if last { it.next_back() } else { it.next() };
    found.unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The medians of one configuration: submit → first provider event, CLI start + handshake.
async fn measure(cli: Cli, extra: &[&str], label: &str) -> Option<(f64, f64)> {
    let Some(r) = RealBridge::start(cli, extra).await else {
        say(&format!("{cli:?}: not installed (run .ci/install-clis); nothing measured"));
        return None;
    };
    let health = r.b.health().await.expect("health");
    let contained = health["containment"]["contained"] == true;
    // One warm-up turn (page cache, the CLI's first-run files), then the measured ones.
    let warm = r.submit("say hello").await;
    r.finish(&warm).await;
    let runs = 7;
    let mut rows: Vec<[f64; 7]> = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let id = r.submit("say hello").await;
        let submit_rtt = t0.elapsed();
        let first = r.b.wait_for(&id, |t| t["status"] != "queued" && t["status"] != "starting").await;
        let _ = first;
        let done = r.b.wait_terminal(&id).await;
        let to_succeeded = t0.elapsed();
        assert_eq!(done["status"], "succeeded");
        r.b.wait_released(&id, 3).await;
        let ev = event_times(&r, &id);
        let submitted = at(&ev, "task.submitted", false);
        let started = at(&ev, "task.started", false);
        let turn = at(&ev, "turn.started", false);
        let message = at(&ev, "agent.message", true);
        let completed = at(&ev, "task.completed", false);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        rows.push([
            ms(submit_rtt),
            (turn - submitted) as f64,
            ms(to_succeeded),
            (started - submitted) as f64,
            (turn - started) as f64,
            (message - turn) as f64,
            (completed - message) as f64,
        ]);
    }
    let col = |i: usize| median(rows.iter().map(|r| r[i]).collect());
    // The bridge logs each provider stop in two parts: the CLI's own exit once its input is
    // closed, and the proof (group kill, `/proc` marker sweep).
    let log = r.b.log();
    let field = |line: &str, key: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
    };
    let stops: Vec<&str> = log.lines().filter(|l| l.contains("provider stopped")).collect();
    let exit = median(stops.iter().filter_map(|l| field(l, "exit_ms=")).collect());
    let proof = median(stops.iter().filter_map(|l| field(l, "proof_ms=")).collect());
    say(&format!(
        "{cli:?} {label} (contained: {contained}) (median of {runs}, ms): submit rtt {:.1} | submit→first provider event {:.0} | submit→succeeded seen {:.0} || bridge before spawn {:.0} | CLI start+handshake {:.0} | turn {:.0} | stop with proof + persist {:.0} (CLI exit {exit:.0}, proof {proof:.0})",
        col(0),
        col(1),
        col(2),
        col(3),
        col(4),
        col(5),
        col(6)
    ));
    Some((col(1), col(4)))
}

/// One CLI in the sandbox and without it, and the sandbox's cost.
async fn compare(cli: Cli) {
    let Some((boxed_first, boxed_start)) = measure(cli, &[], "sandbox").await else { return };
    let Some((bare_first, bare_start)) = measure(cli, &["SERVERFS_AGENT_SANDBOX=off"], "no sandbox").await else {
        return;
    };
    say(&format!(
        "{cli:?}: the sandbox costs submit→first event ×{:.2} ({:+.0} ms), CLI start+handshake ×{:.2}; {:.0}% of the CLI's own start-up without it",
        boxed_first / bare_first,
        boxed_first - bare_first,
        boxed_start / bare_start,
        100.0 * (boxed_first - bare_first) / bare_start
    ));
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        compare(Cli::Codex).await;
        compare(Cli::Claude).await;
    });
}
