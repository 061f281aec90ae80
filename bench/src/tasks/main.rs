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
mod flood;
mod many;

use clap::{Parser, Subcommand};

/// What users wait for: task start, many tasks, a flood, a big store, notifications.
#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Many tasks at once: the bridge's CPU, RSS and descriptors per waiting task.
    Many(many::Args),
    /// A flooding agent: ingestion, paging, memory and another task's latency meanwhile.
    Flood(flood::Args),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Many(args) => many::run(args).await,
        Command::Flood(args) => flood::run(args).await,
    }
}
