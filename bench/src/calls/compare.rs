//! The full comparison of `calls`: every chosen target started and pinned, measured `repeat`
//! times in turn (round-robin, so a slow minute of the machine touches every target alike), the
//! medians printed as a markdown table with the ratios in this one run, the idle RSS of bridge and
//! front, and what the figures include; optionally the same as JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use crate::report::{self, Figures, grouped, latency};
use crate::stack::{Stack, Target};
use crate::{LoadArgs, Setup, cpu, note, profile, say};

/// Measures `targets` over `tasks` tasks; prints the report; writes the JSON to `json`.
pub async fn run(
    setup: &Setup,
    targets: &[Target],
    tasks: usize,
    load: &LoadArgs,
    json_path: Option<&Path>,
) -> anyhow::Result<bool> {
    if targets.is_empty() {
        anyhow::bail!("no target left to measure");
    }
    let plan = load.plan();
    let stack = Stack::start(setup, targets, tasks).await?;
    let mut rss = Vec::new();
    if let Some(ours) = &stack.ours {
        note(&format!("seeded {tasks} tasks in {:.1} s", ours.seeded_in.as_secs_f64()));
        rss.push(("bridge", cpu::rss_kib(ours.bridge_pid()?)?));
        rss.push(("front", cpu::rss_kib(ours.front_pid()?)?));
    }
    if let Some(before) = &stack.before {
        rss.push(("before's bridge", cpu::rss_kib(before.bridge_pid()?)?));
        rss.push(("before's front", cpu::rss_kib(before.front_pid()?)?));
    }
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); targets.len()];
    for round in 1..=load.repeat {
        for (i, &target) in targets.iter().enumerate() {
            let f = stack.measure(setup, target, plan).await?;
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
    let ratios = ratios(&medians);
    say(&ratios.0);
    if !rss.is_empty() {
        let shown: Vec<String> = rss
            .iter()
            .map(|(n, kib)| format!("{n} {} KiB ({:.1} MB)", grouped(*kib as f64), *kib as f64 * 1.024e-3))
            .collect();
        say(&format!(
            "idle RSS before the load: {} (issue 17 keeps bridge ≤ 15 MB, front ≤ 10 MB)\n",
            shown.join(", ")
        ));
    }
    say(&legend(targets));
    if let Some(path) = json_path {
        let doc = json!({
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
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
        note(&format!("wrote the medians to {}", path.display()));
    }
    Ok(true)
}

/// The ratios within this run, as text and as JSON.
fn ratios(medians: &[Figures]) -> (String, Value) {
    let get = |name: &str| medians.iter().find(|f| f.target == name);
    let mut text = String::from("Ratios in this run:\n");
    let mut doc = serde_json::Map::new();
    let Some(ours) = get("ours") else { return (text + "- (ours was not measured)\n", Value::Object(doc)) };
    if let Some(before) = get("before") {
        let _ = writeln!(
            text,
            "- ours vs before (the other build): {:.2}× the calls/s ({} vs {}); CPU per call {:.1} vs {:.1} µs ({:.2}× less); p99 {} vs {}",
            ours.calls_per_s / before.calls_per_s,
            grouped(ours.calls_per_s),
            grouped(before.calls_per_s),
            ours.cpu_us,
            before.cpu_us,
            before.cpu_us / ours.cpu_us,
            latency(ours.p99_us),
            latency(before.p99_us),
        );
        doc.insert("ours_over_before_calls_per_s".into(), json!(ours.calls_per_s / before.calls_per_s));
        doc.insert("before_over_ours_cpu".into(), json!(before.cpu_us / ours.cpu_us));
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
fn legend(targets: &[Target]) -> String {
    let mut out = String::from("What the figures are:\n");
    for &t in targets {
        let what = match t {
            Target::Ours => {
                "HTTP `tools/call get_agent_task` with a bearer key through mcp-front and agent-bridge (their production log levels); CPU is both processes'"
            }
            Target::Before => {
                "the same through the other build given by --before-bridge-bin and --before-front-bin (the same store seeding, settings and load)"
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
