//! The embedded default configuration: what `agent-bridge serve` runs with when it is given
//! neither a `.env` nor a rendered config (the quick start).

/// The embedded default: the current directory as the workspace-write workdir `here` with the
/// `fake` runtime and the `codex` and `claude` CLIs (when installed), every other setting at its
/// `.env` default. The one setting taken from the
/// environment is an explicit `SERVERFS_AGENT_ALLOW_ROOT` (validated like the `.env` key), so a
/// throwaway container or CI running as root can start the quick start on purpose.
pub fn embedded_default() -> Result<super::BridgeConfig, String> {
    let quote = |text: &str| format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"));
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let cwd = cwd.to_str().ok_or("the current directory is not valid UTF-8")?;
    let mut lines = vec![
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true".to_owned(),
        "WORKDIR_01_ALIAS=here".to_owned(),
        format!("WORKDIR_01_PATH={}", quote(cwd)),
        "WORKDIR_01_DESCRIPTION=The directory agent-bridge was started in".to_owned(),
        "WORKDIR_01_READ_ONLY=false".to_owned(),
        "WORKDIR_01_AGENT_MODE=workspace-write".to_owned(),
    ];
    // Every runtime is allowed: whether one can run is the probe's answer at each submit
    // (`AGENT_RUNTIME_UNAVAILABLE`, not installed or not logged in), so a CLI installed
    // after start is usable without a restart.
    lines.push("WORKDIR_01_AGENT_RUNTIMES=fake,codex,claude".to_owned());
    if let Some(allow_root) = std::env::var_os("SERVERFS_AGENT_ALLOW_ROOT") {
        let allow_root = allow_root.to_str().ok_or("SERVERFS_AGENT_ALLOW_ROOT is not valid UTF-8")?.to_owned();
        lines.push(format!("SERVERFS_AGENT_ALLOW_ROOT={}", quote(&allow_root)));
    }
    let entries = super::dotenv::parse(lines.join("\n").as_bytes())
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))?;
    let context = super::env::Context::current().map_err(|r| r.to_string())?;
    super::env::from_pairs(&entries, &context).map(|r| r.config).map_err(|r| r.to_string())
}

#[cfg(test)]
mod tests {
    /// The quick start offers the fake runtime, but not its `exec:` (a shell command for any
    /// operator key, unasked).
    #[test]
    fn the_quick_start_offers_the_fake_runtime_without_its_exec() {
        let config = super::embedded_default().expect("the embedded default is valid");
        assert!(config.enable_fake_runtime);
        assert!(!config.fake_exec);
        // Every runtime is offered: one not installed is refused as unavailable, not by policy.
        let runtimes: Vec<&str> = config.workdirs[0].runtimes.iter().map(|r| r.as_str()).collect();
        assert_eq!(runtimes, ["fake", "codex", "claude"]);
    }
}
