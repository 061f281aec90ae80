//! The full comparison of `calls`: every chosen target and every other build (`--variant`,
//! `before`) started and pinned, measured `repeat` times in turn (round-robin, so a slow minute
//! of the machine touches every one alike), the medians printed as a markdown table with the
//! ratios in this one run (each other build's figures over ours'), the idle RSS of bridge and
//! front, optionally each front's RSS with idle kept-alive connections, and what the figures
//! include; optionally the same as JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use crate::idle::{self, IdleRss};
use crate::report::{self, Figures, grouped, latency};
use crate::servers::Bins;
use crate::stack::{Stack, Subject, Target};
use crate::{LoadArgs, Setup, cpu, note, profile, say};

/// What the comparison writes and measures besides the table.
pub struct Outputs<'a> {
    /// Also write the medians as JSON here.
    pub json: Option<&'a Path>,
    /// After the runs, each front's RSS with this many idle kept-alive connections (0: not).
    pub idle_connections: usize,
}

/// Measures `targets` and the other builds `variants` over `tasks` tasks; prints the report.
pub async fn run(
    setup: &Setup,
    targets: &[Target],
    variants: &[(String, Bins)],
    tasks: usize,
    load: &LoadArgs,
    outputs: Outputs<'_>,
) -> anyhow::Result<bool> {
    if targets.is_empty() && variants.is_empty() {
        anyhow::bail!("no target left to measure");
    }
    let plan = load.plan();
    let stack = Stack::start_with(setup, targets, variants, tasks).await?;
    // The other builds come right after ours (first when ours is not measured).
    let others = (0..variants.len()).map(Subject::Variant);
    let mut subjects: Vec<Subject> = targets.iter().map(|&t| Subject::Target(t)).collect();
    let at = subjects.iter().position(|s| *s == Subject::Target(Target::Ours)).map_or(0, |i| i + 1);
    subjects.splice(at..at, others);
    let mut rss = Vec::new();
    if let Some(ours) = &stack.ours {
        note(&format!("seeded {tasks} tasks in {:.1} s", ours.seeded_in.as_secs_f64()));
        rss.push(("bridge".to_owned(), cpu::rss_kib(ours.bridge_pid()?)?));
        rss.push(("front".to_owned(), cpu::rss_kib(ours.front_pid()?)?));
    }
    for (name, other) in &stack.variants {
        rss.push((format!("{name}'s bridge"), cpu::rss_kib(other.bridge_pid()?)?));
        rss.push((format!("{name}'s front"), cpu::rss_kib(other.front_pid()?)?));
    }
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); subjects.len()];
    for round in 1..=load.repeat {
        for (i, &subject) in subjects.iter().enumerate() {
            let f = stack.measure(setup, subject, plan).await?;
            note(&format!(
                "run {round}/{}: {:<12} {:>9} calls/s, p50 {}, {:.1} µs CPU per call",
                load.repeat,
                f.target,
                grouped(f.calls_per_s),
                latency(f.p50_us),
                f.cpu_us
            ));
            runs[i].push(f);
        }
    }
    // Threads a server started under load must be on its CPU too.
    stack.check_pinned(setup.server_cpu)?;
    let medians: Vec<Figures> = runs.iter().map(|r| report::median(r)).collect();
    let mut idle_rss = Vec::new();
    if outputs.idle_connections > 0 {
        let fronts = stack.ours.iter().map(|o| ("ours", o)).chain(stack.variants.iter().map(|(n, o)| (n.as_str(), o)));
        for (name, front) in fronts {
            note(&format!("{name}: {} idle connections after one call each", outputs.idle_connections));
            idle_rss.push(idle::measure(name, front, outputs.idle_connections).await?);
        }
    }

    say(&format!(
        "# calls: tools/call get_agent_task, {} connections, {} s measured after {} s of warm-up, median of {}",
        plan.connections,
        plan.duration.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        load.repeat
    ));
    say(&format!(
        "{} build; servers on CPU {}, load generator on CPU {}; {tasks} distinct tasks and request bodies, cycled; {}\n",
        profile(),
        setup.server_cpu,
        setup.load_cpu,
        report::today()
    ));
    say(&report::table(&medians));
    if let Some(noise) = report::noise(&medians) {
        say(&noise);
    }
    let names: Vec<String> = stack.variants.iter().map(|(n, _)| n.clone()).collect();
    if let Some(table) = builds_table(&medians, &names) {
        say(&table);
    }
    let ratios = ratios(&medians, &names);
    say(&ratios.0);
    if !rss.is_empty() {
        let shown: Vec<String> = rss
            .iter()
            .map(|(n, kib)| format!("{n} {} KiB ({:.1} MB)", grouped(*kib as f64), *kib as f64 * 1.024e-3))
            .collect();
        say(&format!("idle RSS before the load: {} (the aim: bridge ≤ 15 MB, front ≤ 10 MB)\n", shown.join(", ")));
    }
    if let Some(text) = idle_report(&idle_rss, outputs.idle_connections) {
        say(&text);
    }
    say(&legend(&stack, &subjects));
    if let Some(path) = outputs.json {
        let mut doc = json!({
            "date": report::today(),
            "profile": profile(),
            "settings": {
                "connections": plan.connections,
                "warmup_s": plan.warmup.as_secs_f64(),
                "duration_s": plan.duration.as_secs_f64(),
                "repeat": load.repeat,
                "tasks": tasks,
                "server_cpu": setup.server_cpu,
                "load_cpu": setup.load_cpu,
                "keep_cpus_awake": setup.spinners.is_some(),
            },
            "targets": medians.iter().map(|f| (f.target.clone(), f.json())).collect::<serde_json::Map<_, _>>(),
            "ratios": ratios.1,
            "idle_rss_kib": rss.iter().map(|(n, k)| (n.replace("'s ", "_"), json!(k))).collect::<serde_json::Map<_, _>>(),
        });
        if !idle_rss.is_empty() {
            doc["front_rss_kib_with_idle_connections"] = json!({
                "connections": outputs.idle_connections,
                "settle_s": idle::SETTLE.as_secs_f64(),
                "fronts": idle_rss
                    .iter()
                    .map(|r| (r.name.clone(), json!({ "before": r.before_kib, "with": r.with_kib })))
                    .collect::<serde_json::Map<_, _>>(),
            });
        }
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
        note(&format!("wrote the medians to {}", path.display()));
    }
    Ok(true)
}

/// Each other build's figures over ours' (`None` without ours or without other builds).
fn builds_table(medians: &[Figures], names: &[String]) -> Option<String> {
    let ours = medians.iter().find(|f| f.target == "ours")?;
    let builds: Vec<&Figures> = names.iter().filter_map(|n| medians.iter().find(|f| &f.target == n)).collect();
    if builds.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Each build against ours in this run (its figure ÷ ours'; calls/s under 1 and the rest over 1 are worse):\n\n\
         | build | calls/s | p50 | p99 | CPU per call | bridge's | front's |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let part = |f: &Figures, name: &str| match (f.part(name), ours.part(name)) {
        (Some(theirs), Some(mine)) => format!("{:.2}×", theirs / mine),
        _ => "—".to_owned(),
    };
    for f in builds {
        let _ = writeln!(
            out,
            "| {} | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {} | {} |",
            f.target,
            f.calls_per_s / ours.calls_per_s,
            f.p50_us / ours.p50_us,
            f.p99_us / ours.p99_us,
            f.cpu_us / ours.cpu_us,
            part(f, "bridge"),
            part(f, "front"),
        );
    }
    Some(out)
}

/// The fronts' RSS with idle connections, as text.
fn idle_report(rows: &[IdleRss], connections: usize) -> Option<String> {
    let ours = rows.iter().find(|r| r.name == "ours")?;
    let mut out = format!(
        "The front's RSS with {connections} idle kept-alive connections (one call each, then {} s idle):\n",
        idle::SETTLE.as_secs()
    );
    let mb = |kib: u64| kib as f64 * 1.024e-3;
    for r in rows {
        let _ = write!(
            out,
            "- {}: {:.1} MB before, {:.1} MB with them (+{:.1} MB, {:.1} KiB a connection)",
            r.name,
            mb(r.before_kib),
            mb(r.with_kib),
            mb(r.with_kib.saturating_sub(r.before_kib)),
            r.with_kib.saturating_sub(r.before_kib) as f64 / connections.max(1) as f64
        );
        if r.name != "ours" {
            let _ = write!(out, "; ours' is {:.0} % less", (1.0 - ours.with_kib as f64 / r.with_kib as f64) * 100.0);
        }
        out.push('\n');
    }
    Some(out)
}

/// The ratios within this run, as text and as JSON.
fn ratios(medians: &[Figures], builds: &[String]) -> (String, Value) {
    let get = |name: &str| medians.iter().find(|f| f.target == name);
    let mut text = String::from("Ratios in this run:\n");
    let mut doc = serde_json::Map::new();
    let Some(ours) = get("ours") else { return (text + "- (ours was not measured)\n", Value::Object(doc)) };
    for name in builds {
        let Some(other) = get(name) else { continue };
        let _ = writeln!(
            text,
            "- ours vs {name} (another build): {:.2}× the calls/s ({} vs {}); CPU per call {:.1} vs {:.1} µs ({:.2}× less); p99 {} vs {}",
            ours.calls_per_s / other.calls_per_s,
            grouped(ours.calls_per_s),
            grouped(other.calls_per_s),
            ours.cpu_us,
            other.cpu_us,
            other.cpu_us / ours.cpu_us,
            latency(ours.p99_us),
            latency(other.p99_us),
        );
        doc.insert(format!("ours_over_{name}_calls_per_s"), json!(ours.calls_per_s / other.calls_per_s));
        doc.insert(format!("{name}_over_ours_cpu"), json!(other.cpu_us / ours.cpu_us));
    }
    if let Some(python) = get("python") {
        let x = ours.calls_per_s / python.calls_per_s;
        let _ = writeln!(
            text,
            "- ours vs python: {x:.1}× the calls/s ({} vs {}); CPU per call {:.1} vs {:.1} µs ({:.1}× less)",
            grouped(ours.calls_per_s),
            grouped(python.calls_per_s),
            ours.cpu_us,
            python.cpu_us,
            python.cpu_us / ours.cpu_us
        );
        doc.insert("ours_vs_python_calls_per_s".into(), json!(x));
        doc.insert("python_cpu_over_ours".into(), json!(python.cpu_us / ours.cpu_us));
    }
    for floor in ["http-floor", "uds-floor", "sqlite-floor"] {
        if let Some(f) = get(floor) {
            let x = ours.cpu_us / f.cpu_us;
            let _ =
                writeln!(text, "- ours' CPU per call ÷ {floor}'s: {x:.1}× ({:.1} / {:.2} µs)", ours.cpu_us, f.cpu_us);
            doc.insert(format!("ours_cpu_over_{}", floor.replace('-', "_")), json!(x));
        }
    }
    if let (Some(bridge), Some(front)) = (ours.part("bridge"), ours.part("front")) {
        let _ = writeln!(
            text,
            "- bridge share of ours: {:.0} % (bridge {bridge:.1} µs + front {front:.1} µs per call in the ours run)",
            bridge * 100.0 / ours.cpu_us
        );
        doc.insert("bridge_share_of_ours".into(), json!(bridge / ours.cpu_us));
    }
    if let Some(alone) = get("bridge") {
        let _ = writeln!(
            text,
            "- the bridge alone on its socket (target bridge): {:.1} µs per call, {:.0} % of ours",
            alone.cpu_us,
            alone.cpu_us * 100.0 / ours.cpu_us
        );
        doc.insert("bridge_alone_over_ours".into(), json!(alone.cpu_us / ours.cpu_us));
    }
    (text, Value::Object(doc))
}

/// What each measured target is, and what the figures include.
fn legend(stack: &Stack, subjects: &[Subject]) -> String {
    let mut out = String::from("What the figures are:\n");
    for &subject in subjects {
        let t = match subject {
            Subject::Target(t) => t,
            Subject::Variant(_) => {
                let _ = writeln!(
                    out,
                    "- {}: the same through another build of both (--variant, or --before-bridge-bin and \
                     --before-front-bin; the same store seeding, settings and load)",
                    stack.name(subject)
                );
                continue;
            }
        };
        let what = match t {
            Target::Ours => {
                "HTTP `tools/call get_agent_task` with a bearer key through mcp-front and agent-bridge (their production log levels); CPU is both processes'"
            }
            Target::Bridge => {
                "the same calls as `capabilities.call` lines on the bridge's Unix socket, one connection per client; CPU is the bridge's"
            }
            Target::Python => {
                "the Python reference: mcp 2.3.0 MCPServer, stateless JSON responses, uvicorn (one worker), one SQLite read per call. It takes NO key (the anchor has none): its figure includes no authentication"
            }
            Target::HttpFloor => {
                "a fixed-reply axum router answering POST /mcp on the front's own HTTP server, bridge-httpd (same requests, same connections)"
            }
            Target::UdsFloor => {
                "an NDJSON echo over a Unix socket: one round trip per call (the lines of target bridge)"
            }
            Target::SqliteFloor => {
                "a SQLite primary-key read (prepared, all columns) in the load process; CPU from the thread's own CPU time (/proc/thread-self/stat), p50/p99 per read"
            }
        };
        let _ = writeln!(out, "- {}: {what}", t.name());
    }
    out.push_str(
        "- CPU per call: utime + stime of the target's server processes (all threads) over the window, \
         ÷ calls answered in it; utilisation: that CPU time ÷ the window (100 %: the server CPU was saturated)",
    );
    out
}
