//! One run of the bridge's own git: a fixed `sh` script (no caller data in it; paths and values
//! come in the environment) inside the task sandbox, under settings a repository cannot
//! override (no hooks, no fsmonitor, no network protocol, no system or user config), bounded in
//! time and in what is read back. The snapshots and the worktrees both run git this way.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::process::{SpawnSpec, spawn};
use super::sandbox::Containment;
use super::tether::{SpawnKind, TestHook, test_hook};

/// Git settings for every run (command-line scope, so a repository's own cannot override them).
pub const GIT_SETTINGS: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.untrackedCache", "false"),
    ("core.splitIndex", "false"),
    ("core.quotePath", "false"),
    ("core.symlinks", "true"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("diff.renames", "true"),
    ("diff.noprefix", "false"),
    ("submodule.recurse", "false"),
    ("protocol.allow", "never"),
    ("safe.directory", "*"),
];

/// The most of a run's standard output kept.
const STDOUT_LIMIT: u64 = 64 * 1024;

/// One run.
pub struct GitRun<'a> {
    /// git, as found at start-up.
    pub git: &'a Path,
    /// The task it runs for (its sandbox is the task's).
    pub task_id: &'a str,
    /// The script (`sh -c`), and the argument it gets as `$1`.
    pub script: &'static str,
    /// `$1`: which part of the script runs.
    pub phase: &'a str,
    /// Where it starts (a directory of its view that is not one of the bridge's private paths).
    pub cwd: &'a Path,
    /// More environment (the script's `AB_*` values, `GIT_DIR`...).
    pub env: Vec<(OsString, OsString)>,
    /// More settings, after [`GIT_SETTINGS`].
    pub settings: Vec<(&'static str, OsString)>,
    /// The tree it works on and whether it may write it.
    pub workdir: Option<(PathBuf, bool)>,
    /// What else it reads.
    pub read: Vec<PathBuf>,
    /// What else it writes.
    pub write: Vec<PathBuf>,
    /// What it is (whether a test hook applies).
    pub kind: SpawnKind,
    /// Whether it may reach the network: through the task's egress gate (the workdir's
    /// allowed hosts only) when the sandbox has one.
    pub network: bool,
    /// How long it may take.
    pub limit: Duration,
    /// It runs beside the task's agent, which may start meanwhile (see
    /// [`SpawnSpec::beside`](super::process::SpawnSpec::beside)).
    pub beside: bool,
}

/// How a run failed: its exit code (when it exited) and its last line of stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The script's exit code (its step), when it exited.
    pub code: Option<i32>,
    /// What went wrong, one line (git's own words, which may name host paths).
    pub said: String,
}

/// Runs `run` to its end in the sandbox; its standard output (bounded) when it succeeds.
pub async fn run(containment: &Containment, run: GitRun<'_>) -> Result<Vec<u8>, Failed> {
    let failed = |said: String| Failed { code: None, said };
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |k: &str, v: OsString| env.push((k.into(), v));
    let mut path = run.git.parent().map(Path::as_os_str).unwrap_or_default().to_owned();
    path.push(":/usr/bin:/bin");
    set("PATH", path);
    set("LC_ALL", "C".into());
    for var in ["GIT_CONFIG_NOSYSTEM", "GIT_ATTR_NOSYSTEM", "GIT_NO_REPLACE_OBJECTS", "GIT_NO_LAZY_FETCH"] {
        set(var, "1".into());
    }
    set("GIT_CONFIG_GLOBAL", "/dev/null".into());
    set("GIT_OPTIONAL_LOCKS", "0".into());
    set("GIT_TERMINAL_PROMPT", "0".into());
    set("GIT_PAGER", "cat".into());
    // git deflates each new object with a fresh zlib stream of about 256 KiB, which glibc's
    // malloc gives back to the kernel (`brk`) after every object at its default trim threshold.
    // Keeping up to 64 MiB of freed heap makes adding 10,000 small files spend a third of the
    // system time, with the same peak RSS (bench/README.md, `tasks start`). Another libc
    // ignores the variable.
    set("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=67108864".into());
    let settings = GIT_SETTINGS.iter().map(|(k, v)| (*k, OsString::from(v))).chain(run.settings);
    let mut count = 0;
    for (i, (key, value)) in settings.enumerate() {
        set(&format!("GIT_CONFIG_KEY_{i}"), key.into());
        set(&format!("GIT_CONFIG_VALUE_{i}"), value);
        count = i + 1;
    }
    set("GIT_CONFIG_COUNT", count.to_string().into());
    // Says what this process is (the task's own processes carry the same task marker).
    set("AGENT_BRIDGE_GIT", run.phase.into());
    for (k, v) in run.env {
        env.retain(|(existing, _)| *existing != k);
        env.push((k, v));
    }
    if let Some(TestHook::Delay(delay)) = test_hook(run.kind) {
        tokio::time::sleep(delay).await;
    }
    let spawned = spawn(SpawnSpec {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), run.script.into(), "agent-bridge-git".into(), run.phase.into()],
        cwd: run.cwd.to_owned(),
        env,
        task_id: run.task_id.to_owned(),
        sandbox: Some(containment.clone()),
        workdir: run.workdir,
        git: None,
        read: run.read,
        write: run.write,
        // Only a run that fetches gets the network, and only the workdir's allowed hosts.
        egress: run.network.then(Vec::new),
        kind: run.kind,
        hold: None,
        beside: run.beside,
    })
    .await
    .map_err(|e| failed(format!("git could not be started: {}", e.kind())))?;
    let mut process = spawned.process;
    drop(spawned.stdin);
    let (mut stdout, mut stderr) = (spawned.stdout, spawned.stderr);
    let out = tokio::spawn(async move {
        let mut kept = Vec::new();
        let _ = (&mut stdout).take(STDOUT_LIMIT).read_to_end(&mut kept).await;
        // The rest is drained, so the script never blocks on a full pipe.
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
        kept
    });
    let tail = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(16 * 1024).read_to_end(&mut text).await;
        let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
        text
    });
    let status = tokio::time::timeout(run.limit, process.wait()).await;
    let proof = process.stop(Duration::from_millis(100), Duration::from_secs(2)).await;
    let said = tail.await.unwrap_or_default();
    let kept = out.await.unwrap_or_default();
    if !proof.proven() {
        tracing::warn!(?proof, phase = run.phase, "the bridge's git did not stop with proof");
    }
    let said = String::from_utf8_lossy(&said);
    let last: String =
        said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().chars().take(300).collect();
    match status {
        Err(_) => Err(failed(format!("git took longer than {} s", run.limit.as_secs()))),
        Ok(Err(e)) => Err(failed(format!("git could not be waited for: {}", e.kind()))),
        Ok(Ok(s)) if s.success() => Ok(kept),
        Ok(Ok(s)) => {
            tracing::warn!(phase = run.phase, status = %s, "the bridge's git failed");
            Err(Failed { code: s.code(), said: last })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SandboxMode;

    #[tokio::test]
    async fn a_run_sees_only_its_settings_and_the_malloc_tuning() {
        let Some(git) = super::super::snapshot::tests::git_bin() else { return };
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = GitRun {
            git: &git,
            task_id: "agt_gitrun_env",
            script: r#"printf '%s|%s|%s' "$GLIBC_TUNABLES" "$GIT_CONFIG_GLOBAL" "$(git config core.hooksPath)""#,
            phase: "probe",
            cwd: tmp.path(),
            env: Vec::new(),
            settings: Vec::new(),
            workdir: None,
            read: Vec::new(),
            write: Vec::new(),
            kind: SpawnKind::Probe,
            network: false,
            limit: Duration::from_secs(30),
            beside: false,
        };
        let out = super::run(&Containment::none(SandboxMode::Off, "a unit test"), run).await.expect("the run");
        assert_eq!(String::from_utf8_lossy(&out), "glibc.malloc.trim_threshold=67108864|/dev/null|/dev/null");
    }
}
