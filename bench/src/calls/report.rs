//! What `calls` prints and writes: one run's figures from a [`Sample`] (calls/s, p50, p99, CPU
//! per call for all the target's server processes and for each, the server CPU's utilisation),
//! the median of the repeats metric by metric, the markdown table and the figures as JSON.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::load::Sample;

/// One target's figures (one run, or the median of the repeats).
#[derive(Debug, Clone)]
pub struct Figures {
    /// The target's name.
    pub target: String,
    /// Calls answered per second of the window.
    pub calls_per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// CPU per call of all the target's server processes together, µs.
    pub cpu_us: f64,
    /// CPU seconds of those processes per wall second (1.0: the server CPU saturated).
    pub utilisation: f64,
    /// The load CPU's busy seconds per wall second (1.0: the load generator was the limit).
    pub load_busy: f64,
    /// Busy seconds per wall second of the target's CPU that were not the target's: other
    /// processes on the machine (noise).
    pub others: f64,
    /// CPU per call of each process, µs, by name.
    pub parts: Vec<(String, f64)>,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at] as f64 / 1e3
}

impl Figures {
    /// The figures of one run of `target`, whose processes were `names` (in the sample's order);
    /// `in_process`: it ran in this process, on the load CPU.
    pub fn of(target: &str, names: &[&str], s: &Sample, in_process: bool) -> Figures {
        let calls = s.calls.max(1) as f64;
        let wall = s.wall.as_secs_f64();
        let total: f64 = s.cpu.procs.iter().map(|c| c.as_secs_f64()).sum();
        let its_cpu = if in_process { s.cpu.load_cpu } else { s.cpu.server_cpu }.as_secs_f64();
        Figures {
            target: target.to_owned(),
            calls_per_s: s.calls as f64 / wall,
            p50_us: percentile(&s.latencies, 0.50),
            p99_us: percentile(&s.latencies, 0.99),
            cpu_us: total * 1e6 / calls,
            utilisation: total / wall,
            load_busy: s.cpu.load_cpu.as_secs_f64() / wall,
            others: (its_cpu - total).max(0.0) / wall,
            parts: names
                .iter()
                .zip(&s.cpu.procs)
                .map(|(n, c)| ((*n).to_owned(), c.as_secs_f64() * 1e6 / calls))
                .collect(),
        }
    }

    /// CPU per call of the process `name`, µs.
    pub fn part(&self, name: &str) -> Option<f64> {
        self.parts.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// These figures as JSON.
    pub fn json(&self) -> Value {
        let parts: serde_json::Map<String, Value> = self.parts.iter().map(|(n, v)| (n.clone(), json!(v))).collect();
        json!({
            "calls_per_s": self.calls_per_s,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "cpu_us_per_call": self.cpu_us,
            "server_cpu_utilisation": self.utilisation,
            "load_cpu_busy": self.load_busy,
            "others_on_its_cpu": self.others,
            "cpu_us_per_call_by_process": parts,
        })
    }
}

fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median of `runs` (one target's repeats), metric by metric.
pub fn median(runs: &[Figures]) -> Figures {
    let of = |f: fn(&Figures) -> f64| median_of(runs.iter().map(f).collect());
    let first = &runs[0];
    Figures {
        target: first.target.clone(),
        calls_per_s: of(|r| r.calls_per_s),
        p50_us: of(|r| r.p50_us),
        p99_us: of(|r| r.p99_us),
        cpu_us: of(|r| r.cpu_us),
        utilisation: of(|r| r.utilisation),
        load_busy: of(|r| r.load_busy),
        // The worst run's: noise is what a reader must see.
        others: runs.iter().map(|r| r.others).fold(0.0, f64::max),
        parts: first
            .parts
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), median_of(runs.iter().map(|r| r.parts[i].1).collect())))
            .collect(),
    }
}

/// Today's date (UTC), `YYYY-MM-DD`.
pub fn today() -> String {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    civil_date(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// The UTC date of the instant `ms` (Unix milliseconds), from the bridge's RFC 3339 formatter.
fn civil_date(ms: i64) -> String {
    let mut text = agent_bridge::clock::rfc3339(ms);
    text.truncate(10);
    text
}

/// A warning when other processes used more than 5 % of a measured CPU in some window.
pub fn noise(rows: &[Figures]) -> Option<String> {
    let worst = rows.iter().max_by(|a, b| a.others.total_cmp(&b.others))?;
    (worst.others > 0.05).then(|| {
        format!(
            "!!! other processes used up to {:.0} % of a measured CPU during the windows ({}'s): the machine was not \
             quiet, so calls/s and latencies are understated; rerun when it is !!!\n",
            worst.others * 100.0,
            worst.target
        )
    })
}

/// A number with thousands separators (`4,509`).
pub fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency in µs, or ms when it is one or more.
pub fn latency(us: f64) -> String {
    if us >= 1000.0 { format!("{:.2} ms", us / 1000.0) } else { format!("{us:.1} µs") }
}

/// The markdown table of `rows` (CPU per call split by process where a target has several).
pub fn table(rows: &[Figures]) -> String {
    let mut out = String::from(
        "| target | calls/s | p50 | p99 | CPU µs per call | server CPU utilisation | load CPU busy | others on its CPU |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let parts = if r.parts.len() > 1 {
            let each: Vec<String> = r.parts.iter().map(|(n, v)| format!("{n} {v:.1}")).collect();
            format!(" ({})", each.join(" + "))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1}{parts} | {:.0} % | {:.0} % | {:.0} % |",
            r.target,
            grouped(r.calls_per_s),
            latency(r.p50_us),
            latency(r.p99_us),
            r.cpu_us,
            r.utilisation * 100.0,
            r.load_busy * 100.0,
            r.others * 100.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cpu::Used;

    #[test]
    fn figures_of_a_sample_and_their_median() {
        let sample = Sample {
            calls: 1000,
            wall: Duration::from_secs(2),
            cpu: Used {
                procs: vec![Duration::from_millis(300), Duration::from_millis(100)],
                server_cpu: Duration::from_millis(500),
                load_cpu: Duration::from_millis(1000),
            },
            latencies: (1..=1000).map(|i| i * 1000).collect(),
        };
        let f = Figures::of("ours", &["bridge", "front"], &sample, false);
        assert_eq!(f.calls_per_s, 500.0);
        assert_eq!((f.p50_us, f.p99_us), (500.0, 990.0));
        assert!((f.cpu_us - 400.0).abs() < 1e-9 && (f.utilisation - 0.2).abs() < 1e-9);
        assert_eq!(f.part("front").map(|v| v.round()), Some(100.0));
        let mut slower = f.clone();
        slower.cpu_us = 900.0;
        let mut faster = f.clone();
        faster.cpu_us = 100.0;
        assert_eq!(median(&[slower, f.clone(), faster]).cpu_us, f.cpu_us);
        assert_eq!(grouped(4509.4), "4,509");
        assert_eq!(
            (civil_date(0), civil_date(19_782 * 86_400_000), civil_date(11_016 * 86_400_000 + 86_399_999)),
            ("1970-01-01".into(), "2024-02-29".into(), "2000-02-29".into())
        );
        assert_eq!(grouped(999.0), "999");
        assert_eq!(grouped(1_234_567.0), "1,234,567");
        assert!(
            table(&[f]).contains("| ours | 500 | 500.0 µs | 990.0 µs | 400.0 (bridge 300.0 + front 100.0) | 20 % |")
        );
    }
}
