//! The `mcp-front` binary: read the settings, start logging on stderr, serve; or, with
//! `healthcheck`, ask a running front whether it is healthy (for container health checks).

use std::process::ExitCode;

use clap::Parser;

use mcp_front::config::{Args, Command, Config};

/// jemalloc returns freed memory to the system: with a thousand connections coming and going
/// the front's RSS follows its live memory, not its high-water mark.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Healthcheck { addr }) = args.command {
        return healthcheck(&args, addr);
    }
    let config = match Config::load(args) {
        Ok(config) => config,
        Err(e) => {
            init_tracing("info");
            tracing::error!("mcp-front: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(config.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(cause = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(mcp_front::server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("mcp-front: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `mcp-front healthcheck`: one line on stdout (the container runtime shows it), exit 0
/// when the front answers 200, 1 otherwise, 2 when the settings cannot be read.
fn healthcheck(args: &Args, addr: Option<std::net::SocketAddr>) -> ExitCode {
    use std::io::Write;
    let target = match addr.map_or_else(|| Config::load_listen(args), Ok) {
        Ok(listen) => mcp_front::healthcheck::target(listen),
        Err(e) => {
            let _ = writeln!(std::io::stdout(), "mcp-front healthcheck: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stdout(), "mcp-front healthcheck: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The front bounds its own bridge check to 5 s; allow for that plus the connection.
    match runtime.block_on(mcp_front::healthcheck::check(target, std::time::Duration::from_secs(8))) {
        Ok(body) => {
            let _ = writeln!(std::io::stdout(), "healthy: {body}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            let _ = writeln!(std::io::stdout(), "unhealthy: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Logs on stderr at `level` (`SERVERFS_LOG_LEVEL`; the SDK's own chatter at `warn` at most),
/// unless `MCP_FRONT_LOG` holds a filter.
fn init_tracing(level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_FRONT_LOG").unwrap_or_else(|_| {
        let sdk = if matches!(level, "error") { "error" } else { "warn" };
        tracing_subscriber::EnvFilter::new(format!("{level},rmcp={sdk}"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
