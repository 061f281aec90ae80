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
#[allow(dead_code, reason = "the frame's shared pieces: the other subcommands use what these two do not")]
mod common;
mod history;
mod history_store;
mod notify;
#[path = "../calls/seed.rs"]
#[expect(dead_code, reason = "`calls`' seed, shared: `tasks` uses its bridge store, not its reference file")]
mod seed;

use clap::{Parser, Subcommand};

/// What users wait for: task start, many tasks, a flood, a big store, notifications.
#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A year of history: start-up, retention, reads, the board's list and `tasks list` with
    /// 1,000 and with 1,000,000 retained tasks.
    History(history::HistoryArgs),
    /// Notification latency: a state change → its webhook on loopback, p50/p99.
    Notify(notify::NotifyArgs),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::History(args) => history::main(&args).await,
        Command::Notify(args) => notify::main(&args).await,
    }
}
