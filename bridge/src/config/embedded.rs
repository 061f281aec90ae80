//! The embedded default configuration: what `agent-bridge serve` runs with when it is given
//! neither a `.env` nor a rendered config (the quick start).

/// The embedded default: the current directory as the workspace-write workdir `here` with the
/// `fake` runtime and the `codex` and `claude` CLIs (when installed), every other setting at its
/// `.env` default. The one setting taken from the
/// environment is an explicit `SERVERFS_AGENT_ALLOW_ROOT` (validated like the `.env` key), so a
/// throwaway container or CI running as root can start the quick start on purpose.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
pub fn embedded_default() -> Result<super::BridgeConfig, String> {
    let quote = |text: &str| format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"));
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let context = super::env::Context::current().map_err(|r| r.to_string())?;
    refuse_broad_workdir(&cwd, &context.home)?;
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
    let entries = bridge_envfile::parse(lines.join("\n").as_bytes())
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))?;
    super::env::from_pairs(&entries, &context).map(|r| r.config).map_err(|r| r.to_string())
}

/// Refuses the home directory, `/` and any directory above the home as the writable workdir:
/// started there, the embedded default would let every agent a remote caller starts write to
/// the whole home directory.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
fn refuse_broad_workdir(cwd: &std::path::Path, home: &std::path::Path) -> Result<(), String> {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    if !home.starts_with(&cwd) {
        return Ok(());
    }
    let which = if cwd == home {
        "the home directory"
    } else if cwd.parent().is_none() {
        "the root directory"
    } else {
        "a directory above the home directory"
    };
    Err(format!(
        "refusing to start in {} ({which}): with no configuration the current directory becomes the \
         workdir `here`, writable by every agent a caller starts. cd into a project directory and \
         start again, or give a configuration with --env-file",
        cwd.display()
    ))
}

#[cfg(test)]
mod tests {
    /// The home directory, `/` and what lies between are refused as the workdir, saying why
    /// and what to do; a project directory under the home, and one elsewhere, are not.
    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn the_home_directory_and_above_are_refused_as_the_workdir() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home/someone");
        let project = home.join("src/project");
        let elsewhere = root.path().join("srv");
        for dir in [&project, &elsewhere] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (cwd, which) in [
            (home.clone(), "(the home directory)"),
            (root.path().join("home"), "(a directory above the home directory)"),
            ("/".into(), "(the root directory)"),
        ] {
            let refused = super::refuse_broad_workdir(&cwd, &home).expect_err("refused");
            assert!(refused.contains(which) && refused.contains("cd into a project directory"), "{refused}");
        }
        // The same home reached through a symbolic link is the home.
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        super::refuse_broad_workdir(&home, &link).expect_err("the home through a link");
        for cwd in [&project, &elsewhere] {
            super::refuse_broad_workdir(cwd, &home).expect("a project directory");
        }
    }

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
