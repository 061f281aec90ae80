//! The command line: the daemon (`serve`), configuration (`config
//! render|check|example|reference`), the operator's client commands over the socket (`keys …`,
//! `tasks …`, `plans …`, `board …`, `guards …`, `health`), and the fake runtime's hidden child
//! entry point. Exit codes are mapped here, in one place.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod audit;
mod call;
mod client;
mod doctor;
mod leftovers;
mod notify;
mod output;
mod pending;
mod plans;
mod tasks;

/// Exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// The command failed (a refused call, a runtime error).
    Failure = 1,
    /// Bad configuration or usage.
    Config = 2,
    /// The bridge could not be reached.
    Unavailable = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// agent-bridge: runs coding agents for remote MCP callers, safely.
#[derive(Debug, Parser)]
#[command(name = "agent-bridge", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the config comes from (neither: the embedded default, see [`crate::config::embedded::embedded_default`]).
#[derive(Debug, Args, Clone)]
#[group(required = false, multiple = false)]
pub struct ConfigSource {
    /// A private JSON config written by `config render`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// An operator `.env` (validated the same way as by `config check`).
    #[arg(long)]
    env_file: Option<PathBuf>,
}

/// How the client commands find the bridge.
#[derive(Debug, Args, Clone, Default)]
pub struct Target {
    /// The bridge socket.
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Find the socket in this JSON config.
    #[arg(long, global = true, conflicts_with = "socket")]
    config: Option<PathBuf>,
    /// Find the socket in this `.env`.
    #[arg(long, global = true, conflicts_with_all = ["socket", "config"])]
    env_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon in the foreground (no option: the current directory as workdir `here`
    /// with the scripted `fake` runtime, state under the XDG directories).
    Serve(ConfigSource),
    /// Validate and render configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: client::KeysCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Inspect and act on tasks.
    Tasks {
        #[command(subcommand)]
        command: client::TasksCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Plans: list and show them, approve or reject those awaiting a human, file one.
    Plans {
        #[command(subcommand)]
        command: plans::PlansCommand,
        #[command(flatten)]
        target: Target,
    },
    /// The web board: print a login token, or revoke them all.
    Board {
        #[command(subcommand)]
        command: plans::BoardCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Notifications: test a target, list the targets and their deliveries.
    Notify {
        #[command(subcommand)]
        command: notify::NotifyCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Check files, permissions, the socket and every workdir's lease and recovery guard.
    Doctor {
        #[command(flatten)]
        target: Target,
    },
    /// Recovery guards: list them, or clear one by hand.
    Guards {
        #[command(subcommand)]
        command: client::GuardsCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Read the audit log, newest first (a coalesced row counts its calls).
    Audit {
        #[command(flatten)]
        args: audit::AuditArgs,
        #[command(flatten)]
        target: Target,
    },
    /// Check that the bridge answers.
    Health {
        #[command(flatten)]
        target: Target,
    },
    /// The fake runtime's child process (used by the bridge itself).
    #[command(hide = true)]
    FakeAgent,
    /// A sandbox's first program when it has an egress gate (used by the bridge itself).
    #[command(hide = true)]
    SandboxExec {
        /// `--gate PATH --marker NAME=VALUE -- PROGRAM ARGS…`
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a `.env` and write the bridge's private JSON config (0600, atomic).
    Render {
        /// The operator's `.env`.
        #[arg(long)]
        env_file: PathBuf,
        /// Where to write the JSON config.
        #[arg(long)]
        output: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print `.env.example`: every key, grouped, with its default and meaning.
    Example,
    /// Print `docs/configuration.md`: the same catalog as a markdown reference page.
    Reference,
    /// Validate a `.env` and print the effective configuration or every refusal.
    Check {
        /// The operator's `.env`.
        #[arg(long)]
        env_file: PathBuf,
        /// Print the effective bridge config and the ignored keys as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The relay's subcommand (`agent-bridge sandbox-exec …`).
const SANDBOX_EXEC: &str = "sandbox-exec";

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    // The relay lives as long as its task, one per task: read its arguments without building
    // the whole command line's parser, whose freed memory the allocator keeps (about 400 KiB
    // a task, measured with `tasks many`). The parser keeps the (hidden) command all the same.
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|a| a == SANDBOX_EXEC) {
        return match argv.map(std::ffi::OsString::into_string).collect::<Result<Vec<_>, _>>() {
            Ok(args) => ExitCode::from(crate::provider::relay::run(&args).clamp(0, 255) as u8),
            Err(arg) => refuse(&format!("{SANDBOX_EXEC}: an argument is not UTF-8: {arg:?}")),
        };
    }
    let cli = Cli::parse();
    match cli.command {
        Command::FakeAgent => ExitCode::from(crate::provider::fake_agent::run().clamp(0, 255) as u8),
        Command::SandboxExec { args } => ExitCode::from(crate::provider::relay::run(&args).clamp(0, 255) as u8),
        Command::Config(ConfigCommand::Example) => {
            output::line(crate::config::example::render().trim_end());
            Exit::Ok.into()
        }
        Command::Config(ConfigCommand::Reference) => {
            output::line(crate::config::reference::render().trim_end());
            Exit::Ok.into()
        }
        Command::Config(ConfigCommand::Check { env_file, json }) => {
            match crate::config::env::from_env_file(&env_file) {
                Ok(report) if json => {
                    let ignored: Vec<&str> = report.ignored.iter().map(|k| k.key.as_str()).collect();
                    let doc = serde_json::json!({ "config": report.config, "ignored_keys": ignored });
                    output::json(&doc);
                    Exit::Ok.into()
                }
                Ok(report) => {
                    output::line(&report.to_string());
                    Exit::Ok.into()
                }
                Err(refusals) => refuse(&refusals.to_string()),
            }
        }
        Command::Config(ConfigCommand::Render { env_file, output: out, json }) => {
            match crate::config::env::from_env_file(&env_file) {
                Ok(report) => match crate::config::render::write_private_json(&report.config, &out) {
                    Ok(()) if json => {
                        output::line(&serde_json::json!({ "output": out }).to_string());
                        Exit::Ok.into()
                    }
                    Ok(()) => {
                        output::line(&format!("wrote {}", out.display()));
                        Exit::Ok.into()
                    }
                    Err(e) => refuse(&e.to_string()),
                },
                Err(refusals) => refuse(&refusals.to_string()),
            }
        }
        Command::Serve(source) => serve(source),
        Command::Keys { command, target } => client::run(target, client::Action::Keys(command)),
        Command::Tasks { command, target } => client::run(target, client::Action::Tasks(command)),
        Command::Plans { command, target } => client::run(target, client::Action::Plans(command)),
        Command::Board { command, target } => client::run(target, client::Action::Board(command)),
        Command::Notify { command, target } => client::run(target, client::Action::Notify(command)),
        Command::Health { target } => client::run(target, client::Action::Health),
        Command::Audit { args, target } => client::run(target, client::Action::Audit(args)),
        Command::Guards { command, target } => client::run(target, client::Action::Guards(command)),
        Command::Doctor { target } => {
            let config = target_config(&target);
            doctor::run(target, config)
        }
    }
}

/// The configuration a client command's flags point at (the defaults when none does).
fn target_config(target: &Target) -> Result<crate::config::BridgeConfig, String> {
    if let Some(path) = &target.config {
        return crate::config::load_json(path).map_err(|e| e.to_string());
    }
    if let Some(path) = &target.env_file {
        return crate::config::env::from_env_file(path).map(|r| r.config).map_err(|r| r.to_string());
    }
    let context = crate::config::env::Context::current().map_err(|r| r.to_string())?;
    crate::config::env::from_pairs(&[], &context).map(|r| r.config).map_err(|r| r.to_string())
}

fn refuse(message: &str) -> ExitCode {
    output::error(message);
    Exit::Config.into()
}

fn serve(source: ConfigSource) -> ExitCode {
    let config = match (&source.config, &source.env_file) {
        (Some(path), _) => crate::config::load_json(path).map_err(|e| e.to_string()),
        (None, Some(path)) => crate::config::env::from_env_file(path).map(|r| r.config).map_err(|r| r.to_string()),
        (None, None) => crate::config::embedded::embedded_default(),
    };
    let mut config = match config {
        Ok(c) => c,
        Err(message) => return refuse(&message),
    };
    // The file the settings came from is one of the bridge's private files: tasks never see it.
    config.config_file = source.config.clone().or_else(|| source.env_file.clone());
    init_tracing(config.log_level);
    // Blocking work (store calls, /proc and cgroup reads) is short: a bounded pool of threads
    // that live a while serves it without a thread (stack, allocator arena) per burst.
    // Its threads run under the batch scheduling policy (`sched.rs` says why).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(crate::sched::batch_this_thread)
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(std::time::Duration::from_secs(60))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            output::error(&format!("cannot start the async runtime: {e}"));
            return Exit::Failure.into();
        }
    };
    // The blocking part of start-up runs before the runtime runs anything.
    match crate::daemon::prepare(config).and_then(|prelude| runtime.block_on(crate::daemon::run(prelude))) {
        Ok(()) => Exit::Ok.into(),
        Err(e) => {
            output::error(&format!("agent-bridge: {e:#}"));
            Exit::Failure.into()
        }
    }
}

/// The most threads the daemon runs blocking work on at once (tokio's default is 512).
const BLOCKING_THREADS: usize = 32;

/// Logs on stderr at `level` (`SERVERFS_LOG_LEVEL`), unless `AGENT_BRIDGE_LOG` holds a filter.
fn init_tracing(level: crate::config::LogLevel) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_BRIDGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.directive()));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
