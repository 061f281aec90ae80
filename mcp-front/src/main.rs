//! The `mcp-front` binary: read the settings, start logging on stderr, serve.

use std::process::ExitCode;

use clap::Parser;

use mcp_front::config::{Args, Config};

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(args) {
        Ok(config) => config,
        Err(e) => {
            init_tracing();
            tracing::error!("mcp-front: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing();
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

fn init_tracing() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_FRONT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
