//! The `calls` benchmark: what one `tools/call get_agent_task` costs through the real
//! `mcp-front` and `agent-bridge` — calls/s, p50, p99 and the servers' CPU per call read from
//! `/proc` — with front and bridge pinned together to one CPU and the load generator on another,
//! beside the Python reference stack and the floors (a fixed-reply HTTP server, a Unix-socket
//! echo, a SQLite read). `calls guard` is CI's regression guard, `calls retained` compares 10
//! retained tasks with 100,000.
//!
//! Run: `cargo build --release -p agent-bridge -p mcp-front -p bench && ./target/release/calls`.
//! See `bench/README.md`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the calls benchmark is a load generator, not a daemon: it starts the binaries, reads /proc and opens SQLite files"
)]

mod answers;
mod awake;
#[path = "../bins.rs"]
mod bins;
mod compare;
mod cpu;
mod floors;
mod guard;
mod idle;
mod load;
mod report;
mod retained;
mod seed;
mod servers;
mod stack;
mod wire;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use load::Plan;
use servers::Bins;
use stack::Target;

/// The cost of one tool call through the real mcp-front and agent-bridge, beside the Python
/// reference and the floors. Without a subcommand: the full comparison.
#[derive(Parser, Debug)]
#[command(name = "calls", args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// CI's regression guard: ours' CPU per call over the UDS floor's, against the committed
    /// baseline of this build profile.
    Guard(guard::GuardArgs),
    /// `get_agent_task` with 10 retained tasks and with many (100,000).
    Retained(retained::RetainedArgs),
    /// The HTTP floor's server (started by `calls` itself).
    #[command(hide = true)]
    ServeHttpFloor {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// The UDS floor's server (started by `calls` itself).
    #[command(hide = true)]
    ServeUdsFloor {
        #[arg(long)]
        socket: PathBuf,
    },
    /// A `--keep-cpus-awake` spinner (started by `calls` itself).
    #[command(hide = true)]
    Spin {
        #[arg(long)]
        cpu: usize,
    },
}

/// Where things run and which binaries.
#[derive(Args, Debug, Clone)]
pub struct SetupArgs {
    /// The CPU the servers are pinned to.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// The CPU the load generator (this process) is pinned to.
    #[arg(long, default_value_t = 1)]
    load_cpu: usize,
    #[command(flatten)]
    bins: bins::BinArgs,
    /// Another build's `agent-bridge`, measured as the target `before` by the full comparison
    /// (with --before-front-bin; the same as `--variant before=BRIDGE,FRONT`).
    #[arg(long, requires = "before_front_bin")]
    before_bridge_bin: Option<PathBuf>,
    /// Another build's `mcp-front`, measured as the target `before` by the full comparison
    /// (with --before-bridge-bin).
    #[arg(long, requires = "before_bridge_bin")]
    before_front_bin: Option<PathBuf>,
}

/// How much load (each mode has its own defaults).
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Concurrent kept-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Load before each measured window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    warmup: Duration,
    /// The measured window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    duration: Duration,
    /// Runs per target; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
}

impl LoadArgs {
    fn plan(&self) -> Plan {
        Plan { connections: self.connections, warmup: self.warmup, duration: self.duration }
    }
}

/// The full comparison's flags.
#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    setup: SetupArgs,
    #[command(flatten)]
    load: LoadArgs,
    /// Distinct tasks (and request bodies, cycled).
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// The targets to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ours,bridge,python,http-floor,uds-floor,sqlite-floor"
    )]
    targets: Vec<Target>,
    /// Targets to leave out (e.g. `--skip python` on a machine without the reference's venv).
    #[arg(long, value_enum, value_delimiter = ',')]
    skip: Vec<Target>,
    /// The reference's interpreter [default: .tools/oauth-venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Another build of both, measured beside ours like ours, as `NAME=BRIDGE_BIN,FRONT_BIN`
    /// (repeatable; never checked against today's sources); each is reported with its ratios to
    /// ours.
    #[arg(long = "variant", value_name = "NAME=BRIDGE_BIN,FRONT_BIN", value_parser = parse_variant)]
    variants: Vec<(String, Bins)>,
    /// After the runs, open this many kept-alive connections to each front (ours and the
    /// variants), make one call on each and leave them idle, and report the front's RSS then.
    #[arg(long, default_value_t = 0)]
    idle_connections: usize,
    /// Also write the medians as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A diagnostic of the machine, not the layout: keep both CPUs from ever going idle
    /// with a spinner on each under SCHED_IDLE (it runs only when nothing else wants the CPU),
    /// so no call waits for an idle CPU to wake; compare with a run without it.
    #[arg(long)]
    keep_cpus_awake: bool,
}

/// What every mode needs: the CPUs, the clock tick, the binaries and the interpreter.
pub struct Setup {
    /// The servers' CPU.
    pub server_cpu: usize,
    /// The load generator's CPU.
    pub load_cpu: usize,
    /// Clock ticks per second.
    pub tick: u64,
    /// The reference's interpreter.
    pub python: PathBuf,
    /// The `--keep-cpus-awake` spinners, if asked for.
    pub spinners: Option<awake::Spinners>,
    args: SetupArgs,
}

impl Setup {
    fn new(args: &SetupArgs, python: Option<PathBuf>) -> anyhow::Result<Setup> {
        Ok(Setup {
            server_cpu: args.server_cpu,
            load_cpu: args.load_cpu,
            tick: cpu::clock_tick()?,
            python: python.unwrap_or_else(servers::default_python),
            spinners: None,
            args: args.clone(),
        })
    }

    /// What a window's CPU readings need.
    pub fn meter(&self) -> cpu::Meter {
        let on = |cpu| self.spinners.as_ref().and_then(|s| s.pid_on(cpu));
        cpu::Meter {
            tick: self.tick,
            server_cpu: self.server_cpu,
            load_cpu: self.load_cpu,
            spinners: [on(self.server_cpu), on(self.load_cpu)],
        }
    }

    /// The binaries under test, located and checked.
    pub fn bins(&self) -> anyhow::Result<Bins> {
        let (bridge, front) = self
            .args
            .bins
            .locate("cargo build --release -p agent-bridge -p mcp-front -p bench, or without --release")?;
        Ok(Bins { bridge, front })
    }
}

impl Setup {
    /// The other builds to measure beside ours: `before` (`--before-bridge-bin`,
    /// `--before-front-bin`) and then `variants`, as given: never checked against today's
    /// sources. Refuses a name taken by a target or another build.
    pub fn variants(&self, variants: &[(String, Bins)]) -> anyhow::Result<Vec<(String, Bins)>> {
        let before = match (&self.args.before_bridge_bin, &self.args.before_front_bin) {
            (Some(bridge), Some(front)) => {
                Some(("before".to_owned(), Bins { bridge: bridge.clone(), front: front.clone() }))
            }
            _ => None,
        };
        let all: Vec<(String, Bins)> = before.into_iter().chain(variants.iter().cloned()).collect();
        for (i, (name, bins)) in all.iter().enumerate() {
            anyhow::ensure!(
                Target::ALL.iter().all(|t| t.name() != name) && all[..i].iter().all(|(n, _)| n != name),
                "the build name {name:?} is taken (by a target or another build)"
            );
            for bin in [&bins.bridge, &bins.front] {
                anyhow::ensure!(bin.is_file(), "{} is not a file", bin.display());
            }
        }
        Ok(all)
    }
}

/// `NAME=BRIDGE_BIN,FRONT_BIN`.
fn parse_variant(text: &str) -> Result<(String, Bins), String> {
    let (name, bins) = text.split_once('=').ok_or("say NAME=BRIDGE_BIN,FRONT_BIN")?;
    let (bridge, front) = bins.split_once(',').ok_or("say NAME=BRIDGE_BIN,FRONT_BIN")?;
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(plain) {
        return Err(format!("the name {name:?}: letters, digits, - and _ only"));
    }
    if bridge.is_empty() || front.is_empty() {
        return Err("say NAME=BRIDGE_BIN,FRONT_BIN".into());
    }
    Ok((name.to_owned(), Bins { bridge: bridge.into(), front: front.into() }))
}

/// The build profile of this binary (and so the one whose baseline the guard reads).
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) { "debug" } else { "release" }
}

/// A line on stdout (the report).
pub fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// A line on stderr (progress).
pub fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "calls: {line}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.mode {
        Some(Mode::ServeHttpFloor { listen }) => floors::serve_http_floor(listen).map(|()| true),
        Some(Mode::ServeUdsFloor { socket }) => floors::serve_uds_floor(&socket).map(|()| true),
        Some(Mode::Spin { cpu }) => awake::spin(cpu).map(|()| true),
        mode => {
            // One thread: it spawns the servers while pinned to their CPU, then drives the load
            // pinned to its own.
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(async move {
                    match mode {
                        Some(Mode::Guard(args)) => guard::main(&args).await,
                        Some(Mode::Retained(args)) => retained::main(&args).await,
                        _ => compare_main(cli.run).await,
                    }
                }),
                Err(e) => Err(anyhow::Error::new(e).context("start the runtime")),
            }
        }
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            note(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn compare_main(args: RunArgs) -> anyhow::Result<bool> {
    let mut setup = Setup::new(&args.setup, args.python.clone())?;
    if args.keep_cpus_awake {
        cpu::check_layout(setup.server_cpu, setup.load_cpu)?;
        setup.spinners = Some(awake::Spinners::start(&[setup.server_cpu, setup.load_cpu])?);
        say(&format!(
            "!!! a diagnostic run (--keep-cpus-awake): a SCHED_IDLE spinner on CPU {} and on CPU {} keeps them from \
             going idle, so no call waits for an idle CPU to wake. This is not the issue's layout and its ratios are \
             not the targets'; the spinners' time is left out of the busy figures !!!",
            setup.server_cpu, setup.load_cpu
        ));
    }
    let variants = setup.variants(&args.variants)?;
    let mut targets: Vec<Target> = Target::ALL.into_iter().filter(|t| args.targets.contains(t)).collect();
    targets.retain(|t| !args.skip.contains(t));
    if args.skip.contains(&Target::Python) {
        say("!!! the Python reference is SKIPPED (--skip python): no ratio against it in this run !!!");
    }
    let outputs = compare::Outputs { json: args.json.as_deref(), idle_connections: args.idle_connections };
    compare::run(&setup, &targets, &variants, args.tasks, &args.load, outputs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variant_is_a_name_and_two_binaries() {
        let (name, bins) = parse_variant("no-direct=/v/a/agent-bridge,/v/a/mcp-front").expect("a variant");
        assert_eq!(name, "no-direct");
        assert_eq!((bins.bridge, bins.front), (PathBuf::from("/v/a/agent-bridge"), PathBuf::from("/v/a/mcp-front")));
        for bad in ["no-direct", "x=/a", "=/a,/b", "a b=/a,/b", "x=,/b", "x=/a,"] {
            assert!(parse_variant(bad).is_err(), "{bad}");
        }
    }
}
