//! What the soak counts and measures: answers by kind and outcome, malformed answers (with the
//! first few examples), CLI latencies, and the processes' RSS and open descriptors sampled from
//! `/proc`; and the verdict over them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// How many malformed answers are kept as examples.
const EXAMPLES: usize = 20;

/// Counters shared by every load task.
#[derive(Default)]
pub struct Tally {
    counts: Mutex<BTreeMap<(&'static str, String), u64>>,
    failures: Mutex<(u64, Vec<String>)>,
    cli: Mutex<CliFigures>,
}

/// The CLI's answers.
#[derive(Default, Clone)]
pub struct CliFigures {
    /// Runs that exited 0.
    pub ok: u64,
    /// Runs that failed or did not answer.
    pub failed: u64,
    /// The slowest run.
    pub max: Duration,
    /// The sum of all run times (for the mean).
    pub total: Duration,
}

impl Tally {
    /// Counts one answer of `kind` with `outcome` (`ok`, an error code, `http 401`, …).
    pub fn count(&self, kind: &'static str, outcome: impl Into<String>) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry((kind, outcome.into())).or_default() += 1;
    }

    /// Counts a malformed (or wrong) answer: a failure of the run.
    pub fn malformed(&self, kind: &'static str, what: impl Into<String>) {
        let what = what.into();
        self.count(kind, "MALFORMED");
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.0 += 1;
        if failures.1.len() < EXAMPLES {
            failures.1.push(format!("{kind}: {what}"));
        }
    }

    /// Records one CLI run.
    pub fn cli(&self, ok: bool, took: Duration, what: &str) {
        let mut cli = self.cli.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            cli.ok += 1;
        } else {
            cli.failed += 1;
            drop(cli);
            self.malformed("cli", what.to_owned());
            cli = self.cli.lock().unwrap_or_else(|p| p.into_inner());
        }
        cli.max = cli.max.max(took);
        cli.total += took;
    }

    /// The number of malformed answers and the first examples.
    pub fn failures(&self) -> (u64, Vec<String>) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The count of `kind` with `outcome`.
    pub fn get(&self, kind: &str, outcome: &str) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.iter().filter(|((k, o), _)| *k == kind && o == outcome).map(|(_, n)| *n).sum()
    }

    /// A copy of every count.
    pub fn counts(&self) -> BTreeMap<(&'static str, String), u64> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A copy of the CLI figures.
    pub fn cli_figures(&self) -> CliFigures {
        self.cli.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One process's figures at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Its anonymous part, KiB (`RssAnon`: heap, arenas, stacks; the rest is mostly the
    /// binary's code paged in).
    pub anon_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Open descriptors (entries of `/proc/PID/fd`).
    pub fds: u64,
}

/// Reads a live process's RSS and descriptor count; `None` if it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    if status.lines().any(|l| l.starts_with("State:") && l.contains('Z')) {
        return None;
    }
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage { rss_kib: field("VmRSS:")?, anon_kib: field("RssAnon:")?, threads: field("Threads:")?, fds })
}

/// One sample of both processes.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Time since the load started.
    pub at: Duration,
    /// The bridge.
    pub bridge: Usage,
    /// The front.
    pub front: Usage,
}

/// The limits a run is judged by.
pub struct Limits {
    /// When the reference level is taken.
    pub baseline: Duration,
    /// The largest end/reference RSS ratio allowed.
    pub rss_ratio: f64,
    /// Descriptors the bridge may hold above its reference level.
    pub bridge_fd_slack: u64,
    /// Descriptors the front may hold above its reference level.
    pub front_fd_slack: u64,
}

/// How long a level is averaged over: the idle connections come and go in waves (each server
/// time-out closes a batch that reopens a moment later), and a process's RSS follows how many
/// it holds, so one sample could land in a trough or on a crest.
pub const LEVEL_WINDOW: Duration = Duration::from_secs(30);

/// The mean of `f` over the samples taken in `[from, to)`; `None` when there are none.
pub fn level(samples: &[Sample], from: Duration, to: Duration, f: impl Fn(&Sample) -> u64) -> Option<u64> {
    let picked: Vec<u64> = samples.iter().filter(|s| s.at >= from && s.at < to).map(f).collect();
    (!picked.is_empty()).then(|| picked.iter().sum::<u64>() / picked.len() as u64)
}

/// The reference sample: the first at or after `baseline`.
pub fn reference(samples: &[Sample], baseline: Duration) -> Option<Sample> {
    samples.iter().find(|s| s.at >= baseline).copied()
}

/// The report table and the reasons the run failed (none: it passed).
pub fn verdict(tally: &Tally, samples: &[Sample], limits: &Limits, elapsed: Duration) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut reasons = Vec::new();
    let _ = writeln!(out, "soak: {} of load", humantime::format_duration(Duration::from_secs(elapsed.as_secs())));
    let _ = writeln!(out, "\n{:<12} {:<34} {:>10}", "kind", "outcome", "count");
    for ((kind, outcome), n) in tally.counts() {
        let _ = writeln!(out, "{kind:<12} {outcome:<34} {n:>10}");
    }
    let cli = tally.cli_figures();
    let runs = cli.ok + cli.failed;
    let mean = if runs == 0 { Duration::ZERO } else { cli.total / runs as u32 };
    let _ = writeln!(
        out,
        "\nCLI `tasks list`: {} answered, {} failed, latency mean {} ms, max {} ms",
        cli.ok,
        cli.failed,
        mean.as_millis(),
        cli.max.as_millis()
    );
    let (malformed, examples) = tally.failures();
    if malformed > 0 {
        reasons.push(format!("{malformed} malformed or wrong answers"));
        let _ = writeln!(out, "\nmalformed answers ({malformed}), the first {}:", examples.len());
        for example in &examples {
            let _ = writeln!(out, "  {example}");
        }
    }
    if cli.ok == 0 {
        reasons.push("the CLI never answered".to_owned());
    }
    for kind in ["poll", "submit"] {
        if tally.get(kind, "ok") == 0 {
            reasons.push(format!("no `{kind}` call succeeded (the load did not reach the bridge)"));
        }
    }

    let (Some(base), Some(end)) = (reference(samples, limits.baseline), samples.last().copied()) else {
        reasons.push(format!("no sample at or after {} s", limits.baseline.as_secs()));
        return (out, reasons);
    };
    let peak = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\n{:<8} {:>14} {:>14} {:>8} {:>12} {:>10} {:>10} {:>8} {:>9}",
        "process",
        format!("RSS {}-{}s", base.at.as_secs(), (base.at + LEVEL_WINDOW).as_secs()),
        format!("RSS {}-{}s", end.at.saturating_sub(LEVEL_WINDOW).as_secs(), end.at.as_secs()),
        "ratio",
        "peak KiB",
        format!("fds {}-{}s", base.at.as_secs(), (base.at + LEVEL_WINDOW).as_secs()),
        format!("fds {}-{}s", end.at.saturating_sub(LEVEL_WINDOW).as_secs(), end.at.as_secs()),
        "peak",
        "fd slack"
    );
    // RSS and descriptor levels: means over a window after the reference time and over the
    // run's last window (the kept-alive idle connections, opened together, time out together).
    let (from, last) = (base.at, end.at + Duration::from_millis(1));
    let base_rss = |f: fn(&Sample) -> u64| level(samples, from, from + LEVEL_WINDOW, f).unwrap_or(0);
    let end_rss = |f: fn(&Sample) -> u64| level(samples, last.saturating_sub(LEVEL_WINDOW), last, f).unwrap_or(0);
    let rows = [
        (
            "bridge",
            (base_rss(|s| s.bridge.rss_kib), end_rss(|s| s.bridge.rss_kib)),
            (base_rss(|s| s.bridge.fds), end_rss(|s| s.bridge.fds)),
            peak(|s| s.bridge.rss_kib),
            peak(|s| s.bridge.fds),
            limits.bridge_fd_slack,
        ),
        (
            "front",
            (base_rss(|s| s.front.rss_kib), end_rss(|s| s.front.rss_kib)),
            (base_rss(|s| s.front.fds), end_rss(|s| s.front.fds)),
            peak(|s| s.front.rss_kib),
            peak(|s| s.front.fds),
            limits.front_fd_slack,
        ),
    ];
    for (name, (base_kib, end_kib), (base_fds, end_fds), rss_peak, fd_peak, slack) in rows {
        let ratio = end_kib as f64 / base_kib.max(1) as f64;
        let _ = writeln!(
            out,
            "{name:<8} {base_kib:>14} {end_kib:>14} {ratio:>8.3} {rss_peak:>12} {base_fds:>10} {end_fds:>10} {fd_peak:>8} {slack:>9}"
        );
        if ratio > limits.rss_ratio {
            reasons.push(format!("{name} RSS grew {ratio:.3}x (limit {:.2}x)", limits.rss_ratio));
        }
        if end_fds > base_fds + slack {
            reasons.push(format!("{name} descriptors grew from {base_fds} to {end_fds} (slack {slack})"));
        }
    }
    let _ = writeln!(
        out,
        "\nanonymous RSS (RssAnon) KiB: bridge {} -> {}, front {} -> {}; threads: bridge {} -> {}, front {} -> {}",
        base.bridge.anon_kib,
        end.bridge.anon_kib,
        base.front.anon_kib,
        end.front.anon_kib,
        base.bridge.threads,
        end.bridge.threads,
        base.front.threads,
        end.front.threads
    );
    let _ = writeln!(out, "\nsamples (s: bridge RSS(anon) KiB/fds/threads, front the same):");
    for chunk in samples.chunks(4) {
        let line: Vec<String> = chunk
            .iter()
            .map(|s| {
                let u = |u: &Usage| format!("{}({})/{}/{}", u.rss_kib, u.anon_kib, u.fds, u.threads);
                format!("{}s {} {}", s.at.as_secs(), u(&s.bridge), u(&s.front))
            })
            .collect();
        let _ = writeln!(out, "  {}", line.join(" | "));
    }
    (out, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, rss: u64, fds: u64) -> Sample {
        let u = Usage { rss_kib: rss, anon_kib: rss / 2, threads: 4, fds };
        Sample { at: Duration::from_secs(at), bridge: u, front: u }
    }

    fn limits() -> Limits {
        Limits { baseline: Duration::from_secs(30), rss_ratio: 1.10, bridge_fd_slack: 10, front_fd_slack: 10 }
    }

    fn passing_tally() -> Tally {
        let tally = Tally::default();
        tally.count("poll", "ok");
        tally.count("submit", "ok");
        tally.cli(true, Duration::from_millis(5), "");
        tally
    }

    #[test]
    fn a_steady_run_passes_and_growth_fails() {
        let steady = [sample(10, 900, 50), sample(30, 1000, 60), sample(120, 1090, 70)];
        let (_, reasons) = verdict(&passing_tally(), &steady, &limits(), Duration::from_secs(120));
        assert!(reasons.is_empty(), "{reasons:?}");
        let grown = [sample(30, 1000, 60), sample(120, 1200, 71)];
        let (_, reasons) = verdict(&passing_tally(), &grown, &limits(), Duration::from_secs(120));
        assert_eq!(reasons.len(), 4, "RSS and fds of both: {reasons:?}");
    }

    #[test]
    fn descriptor_levels_are_window_means_like_rss() {
        // The reference sample falls in a trough (a batch of idle connections timed out
        // together): the window's mean is the level, so the steady end is no growth...
        let trough = [sample(30, 1000, 40), sample(40, 1000, 70), sample(50, 1000, 70), sample(120, 1000, 70)];
        let (_, reasons) = verdict(&passing_tally(), &trough, &limits(), Duration::from_secs(120));
        assert!(reasons.is_empty(), "{reasons:?}");
        // ...while a level that really rose past the slack still fails.
        let risen = [sample(30, 1000, 60), sample(40, 1000, 60), sample(100, 1000, 90), sample(120, 1000, 90)];
        let (_, reasons) = verdict(&passing_tally(), &risen, &limits(), Duration::from_secs(120));
        assert_eq!(reasons.len(), 2, "fds of both: {reasons:?}");
    }

    #[test]
    fn a_malformed_answer_or_a_cli_failure_fails_the_run() {
        let tally = passing_tally();
        tally.malformed("poll", "status 500");
        tally.cli(false, Duration::from_secs(1), "exit 1");
        let (report, reasons) = verdict(&tally, &[sample(30, 1, 1)], &limits(), Duration::from_secs(30));
        assert_eq!(reasons, ["2 malformed or wrong answers"]);
        assert!(report.contains("poll: status 500") && report.contains("cli: exit 1"), "{report}");
    }
}
