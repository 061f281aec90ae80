//! `calls guard`, CI's regression guard: a short run of `ours` and `uds-floor`, and the ratio of
//! their CPU per call (medians), which the machine's speed divides out of; it fails when the
//! ratio is over 1.5 × the committed baseline of this build profile (debug and release differ
//! many-fold, so the file keeps one per profile), and `--write` records the measured ratio as
//! the new baseline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::load::Plan;
use crate::report::{self, Figures};
use crate::stack::{Stack, Target};
use crate::{Setup, SetupArgs, note, profile, say};

/// How far over the baseline ratio a run may go.
const TOLERANCE: f64 = 1.5;

/// The guard's flags.
#[derive(Args, Debug)]
pub struct GuardArgs {
    #[command(flatten)]
    setup: SetupArgs,
    /// The committed baselines (one per build profile).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/calls-baseline.json"))]
    baseline: PathBuf,
    /// Record this run's ratio as the baseline of this build profile, instead of judging it
    /// (refused when other processes used over 5 % of a measured CPU: a baseline comes from a
    /// quiet machine).
    #[arg(long)]
    write: bool,
    /// With `--write`: record the ratio even from a noisy run.
    #[arg(long, requires = "write")]
    allow_noise: bool,
    /// The build profile of the binaries under test (`debug` or `release`) [default: from their
    /// path, `target/debug/…` or `target/release/…`].
    #[arg(long)]
    bins_profile: Option<String>,
    /// Concurrent kept-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Load before each measured window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    warmup: Duration,
    /// The measured window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    duration: Duration,
    /// Runs per target (medians).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Distinct tasks (and request bodies, cycled).
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
}

/// The build profile a binary at `path` was built with, from its cargo target folder.
fn profile_of(path: &Path) -> Option<&'static str> {
    let names: Vec<_> = path.iter().filter_map(|c| c.to_str()).collect();
    names.windows(2).find_map(|w| match w {
        [_, "debug"] => Some("debug"),
        [_, "release"] => Some("release"),
        _ => None,
    })
}

/// Runs the guard; `Ok(false)` is a regression.
pub async fn main(args: &GuardArgs) -> anyhow::Result<bool> {
    let setup = Setup::new(&args.setup, None)?;
    let bins = setup.bins()?;
    let mine = profile();
    for bin in [&bins.bridge, &bins.front] {
        let theirs = match args.bins_profile.as_deref() {
            Some(p @ ("debug" | "release")) => p,
            Some(other) => bail!("--bins-profile {other:?}: say debug or release"),
            None => profile_of(bin).with_context(|| {
                format!("cannot tell the build profile of {} from its path: pass --bins-profile", bin.display())
            })?,
        };
        if theirs != mine {
            bail!(
                "{} is a {theirs} build but this guard is a {mine} build and reads the {mine} baseline: run the \
                 {theirs} guard (`cargo run{} -p bench --bin calls -- guard`)",
                bin.display(),
                if theirs == "release" { " --release" } else { "" }
            );
        }
    }
    let plan = Plan { connections: args.connections, warmup: args.warmup, duration: args.duration };
    let targets = [Target::Ours, Target::UdsFloor];
    let stack = Stack::start(&setup, &targets, args.tasks).await?;
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for round in 1..=args.repeat {
        ours.push(stack.measure(&setup, Target::Ours, plan).await?);
        floor.push(stack.measure(&setup, Target::UdsFloor, plan).await?);
        note(&format!(
            "guard run {round}/{}: ours {:.1} µs, uds-floor {:.2} µs CPU per call",
            args.repeat,
            ours[round - 1].cpu_us,
            floor[round - 1].cpu_us
        ));
    }
    stack.check_pinned(setup.server_cpu)?;
    let (ours, floor) = (report::median(&ours), report::median(&floor));
    let ratio = ours.cpu_us / floor.cpu_us;
    say(&report::table(&[ours.clone(), floor.clone()]));
    if let Some(noise) = report::noise(&[ours.clone(), floor.clone()]) {
        say(&noise);
    }
    let measured = format!(
        "ours {:.1} µs ÷ uds-floor {:.2} µs CPU per call = {ratio:.1} ({mine} build, median of {})",
        ours.cpu_us, floor.cpu_us, args.repeat
    );
    let noise = ours.others.max(floor.others);
    let mut doc = read_baselines(&args.baseline)?;
    if args.write && noise > 0.05 && !args.allow_noise {
        say(&format!(
            "calls guard: {measured}; NOT written: other processes used up to {:.0} % of a measured CPU, so this is \
             no baseline; rerun on a quiet machine (or pass --allow-noise)",
            noise * 100.0
        ));
        return Ok(false);
    }
    if args.write {
        doc[mine] = entry(ratio, &ours, &floor, plan, args);
        doc[mine]["others_on_a_measured_cpu"] = json!((noise * 1000.0).round() / 1000.0);
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        std::fs::write(&args.baseline, text).with_context(|| format!("write {}", args.baseline.display()))?;
        say(&format!("calls guard: {measured}; written as the {mine} baseline to {}", args.baseline.display()));
        return Ok(true);
    }
    let Some(base) = doc[mine]["ratio"].as_f64() else {
        bail!(
            "{} holds no {mine} baseline: measure one with `calls guard --write` on a quiet machine and commit it",
            args.baseline.display()
        );
    };
    let limit = limit(base);
    let base_figures = format!(
        "the {mine} baseline of {}: ours {:.1} µs ÷ uds-floor {:.2} µs = {base:.1}",
        doc[mine]["date"].as_str().unwrap_or("?"),
        doc[mine]["ours_cpu_us_per_call"].as_f64().unwrap_or(f64::NAN),
        doc[mine]["uds_floor_cpu_us_per_call"].as_f64().unwrap_or(f64::NAN)
    );
    if !within(ratio, base) {
        say(&format!(
            "calls guard: FAIL: {measured}, over {TOLERANCE} × {base_figures} (limit {limit:.1}): a tool call costs \
             {:.0} % more CPU than the baseline, against the same floor",
            (ratio / base - 1.0) * 100.0
        ));
        return Ok(false);
    }
    say(&format!("calls guard: PASS: {measured}; {base_figures} (limit {limit:.1})"));
    Ok(true)
}

/// The highest ratio a run may have against a baseline of `base`.
fn limit(base: f64) -> f64 {
    base * TOLERANCE
}

/// Whether a run's `ratio` passes against the baseline `base`.
fn within(ratio: f64, base: f64) -> bool {
    ratio.is_finite() && ratio <= limit(base)
}

fn read_baselines(path: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let doc: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
            if !doc.is_object() {
                bail!("{} is not a JSON object", path.display());
            }
            Ok(doc)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

fn entry(ratio: f64, ours: &Figures, floor: &Figures, plan: Plan, args: &GuardArgs) -> Value {
    let round = |v: f64, places: i32| (v * 10f64.powi(places)).round() / 10f64.powi(places);
    json!({
        "ratio": round(ratio, 2),
        "date": report::today(),
        "profile": profile(),
        "ours_cpu_us_per_call": round(ours.cpu_us, 2),
        "uds_floor_cpu_us_per_call": round(floor.cpu_us, 3),
        "ours_calls_per_s": round(ours.calls_per_s, 0),
        "ours_p50_us": round(ours.p50_us, 1),
        "uds_floor_calls_per_s": round(floor.calls_per_s, 0),
        "settings": {
            "connections": plan.connections,
            "warmup_s": plan.warmup.as_secs_f64(),
            "duration_s": plan.duration.as_secs_f64(),
            "repeat": args.repeat,
            "tasks": args.tasks,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_fails_past_one_and_a_half_times_its_baseline() {
        assert!(within(22.0, 22.0));
        assert!(within(32.9, 22.0));
        assert!(within(33.0, 22.0));
        assert!(!within(33.1, 22.0), "50 % over the baseline is the most a run may be");
        assert!(!within(f64::NAN, 22.0) && !within(f64::INFINITY, 22.0), "a run with no figure never passes");
    }

    #[test]
    fn the_profile_comes_from_the_target_folder() {
        assert_eq!(profile_of(Path::new("/w/target/release/agent-bridge")), Some("release"));
        assert_eq!(profile_of(Path::new("/w/target/debug/mcp-front")), Some("debug"));
        assert_eq!(profile_of(Path::new("/usr/bin/mcp-front")), None);
    }
}
