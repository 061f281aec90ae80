//! `tasks`: what users wait for, as ratios in one run — a task's start against the same agent
//! started bare, many tasks at once, a flooding agent, a year of history, and notification
//! latency — and `tasks guard`, CI's regression guard on the start overhead. Each subcommand
//! starts the real bridge (through the e2e harness) and prints a markdown report; bench/README.md
//! has the commands and the figures.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark, not a daemon: it starts the binaries, reads /proc and prints its report"
)]

#[path = "../bins.rs"]
mod bins;
mod common;
#[path = "../calls/cpu.rs"]
#[expect(dead_code, reason = "`calls`' CPU and /proc readers, shared: `tasks` pins nothing")]
mod cpu;
mod flood;
mod guard;
mod history;
mod history_store;
mod many;
mod notify;
#[path = "../calls/seed.rs"]
#[expect(dead_code, reason = "`calls`' seed, shared: `tasks` uses its bridge store, not its reference file")]
mod seed;
mod start;
mod workdirs;

use clap::{Parser, Subcommand};

/// What users wait for: task start, many tasks, a flood, a big store, notifications.
#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Submit → the agent's first model request, against the agent started bare.
    Start(start::StartArgs),
    /// Many tasks at once: the bridge's CPU, RSS and descriptors per waiting task.
    Many(many::Args),
    /// A flooding agent: ingestion, paging, memory and another task's latency meanwhile.
    Flood(flood::Args),
    /// CI's regression guard: a fake task's start against the agent started bare.
    Guard(guard::GuardArgs),
    /// A year of history: start-up, retention, reads, the board's list and `tasks list` with
    /// 1,000 and with 1,000,000 retained tasks.
    History(history::HistoryArgs),
    /// Notification latency: a state change → its webhook on loopback, p50/p99.
    Notify(notify::NotifyArgs),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let run = async {
        match cli.command {
            Command::Start(args) => start::main(&args).await,
            Command::Many(args) => many::run(args).await,
            Command::Flood(args) => flood::run(args).await,
            Command::History(args) => history::main(&args).await,
            Command::Notify(args) => notify::main(&args).await,
            Command::Guard(args) => {
                if !guard::main(&args).await? {
                    std::process::exit(1);
                }
                Ok(())
            }
        }
    };
    // Ctrl-C drops the run, and with it every bridge it started (a harness bridge is killed
    // when dropped), instead of leaving them running.
    tokio::select! {
        result = run => result,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    }
}
