//! The binaries under test, as both benchmarks find them: `--bridge-bin`/`--front-bin`, else
//! `AGENT_BRIDGE_BIN`/`MCP_FRONT_BIN`, else next to the benchmark's own executable (the same
//! cargo profile), checked to exist and, unless `--allow-stale`, to be newer than their sources.
//! Included by both binaries (`#[path]`).

use std::path::PathBuf;

use anyhow::{Context, bail};

/// Which `agent-bridge` and `mcp-front` to run.
#[derive(clap::Args, Debug, Clone)]
pub struct BinArgs {
    /// The `agent-bridge` binary [env: AGENT_BRIDGE_BIN; default: next to this one].
    #[arg(long)]
    pub bridge_bin: Option<PathBuf>,
    /// The `mcp-front` binary [env: MCP_FRONT_BIN; default: next to this one].
    #[arg(long)]
    pub front_bin: Option<PathBuf>,
    /// Run the binaries even when a source file is newer than they are.
    #[arg(long)]
    pub allow_stale: bool,
}

impl BinArgs {
    /// The bridge and the front, located and checked; `build` is the command a missing binary's
    /// message suggests.
    pub fn locate(&self, build: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let fresh = !self.allow_stale;
        let bridge = locate(&self.bridge_bin, "AGENT_BRIDGE_BIN", "agent-bridge", e2e::BRIDGE_SOURCES, fresh, build)?;
        let front = locate(&self.front_bin, "MCP_FRONT_BIN", "mcp-front", e2e::FRONT_SOURCES, fresh, build)?;
        Ok((bridge, front))
    }
}

fn locate(
    flag: &Option<PathBuf>,
    var: &str,
    name: &str,
    sources: &[&str],
    check: bool,
    build: &str,
) -> anyhow::Result<PathBuf> {
    let flag_name = if name == "agent-bridge" { "--bridge-bin" } else { "--front-bin" };
    let path = match flag.clone().or_else(|| std::env::var_os(var).map(PathBuf::from)) {
        Some(path) => path,
        None => std::env::current_exe().context("this executable's path")?.with_file_name(name),
    };
    if !path.is_file() {
        bail!("{} is missing: build it first (`{build}`) or pass {flag_name}", path.display());
    }
    if check && let Err(stale) = e2e::stale_source(&path, sources) {
        bail!("{stale}: build it first (`{build}`), or pass --allow-stale to run it as it is");
    }
    Ok(path)
}
