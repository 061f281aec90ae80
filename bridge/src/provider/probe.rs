//! Runtime availability: where the CLI is (configured, or looked up on `PATH` at each probe, so
//! a CLI installed after start is seen), `<bin> --version` with a timeout, and — where the CLI
//! can tell without inference — whether it is logged in; cached briefly.
//!
//! The probe runs through [`process::spawn`](super::process::spawn) like any provider child
//! (own group, decided environment, a `probe-…` marker) and is stopped with the same ladder.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::process::{SpawnSpec, spawn};
use super::tether::SpawnKind;

/// How long a version or login probe may run. Generous: a cold start of Claude Code's
/// 400 MB executable on a loaded two-core machine took more than 5 s; only a hung CLI
/// reaches this bound, and its failure is cached for [`FAILED_PROBE_TTL`] only.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a working runtime's probe is reused.
pub const PROBE_TTL: Duration = Duration::from_secs(30);
/// How long a failed probe is reused: short, so a fix (a login, an install) is seen soon.
pub const FAILED_PROBE_TTL: Duration = Duration::from_secs(3);

/// Why a runtime cannot be used, as `list_agent_runtimes` names it (`reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No executable: not configured and not on `PATH`, or the configured path is not a file.
    NotInstalled,
    /// The executable does not answer `--version` as the CLI does.
    NotWorking,
    /// The CLI says it is not logged in (and its configuration needs a login).
    NotLoggedIn,
    /// The bridge's configuration does not enable it (the fake runtime).
    Disabled,
}

impl Reason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotInstalled => "not_installed",
            Reason::NotWorking => "not_working",
            Reason::NotLoggedIn => "not_logged_in",
            Reason::Disabled => "disabled",
        }
    }
}

/// What a probe found.
#[derive(Debug, Clone, PartialEq)]
pub enum Probed {
    /// The CLI answered with this version (and, where it can tell, is logged in).
    Version(String),
    /// It cannot be used: why, and in words.
    Unavailable(Reason, String),
}

/// Where a runtime's executable is.
#[derive(Debug, Clone)]
pub enum Locator {
    /// An absolute path from the configuration (`SERVERFS_CODEX_BIN` / `SERVERFS_CLAUDE_BIN`).
    Configured(PathBuf),
    /// The first executable `name` on the bridge's `PATH`, looked up again at each probe.
    OnPath {
        /// The command's name.
        name: &'static str,
        /// The `PATH` the bridge's children get.
        path: Option<OsString>,
    },
}

impl Locator {
    /// The executable now, or `None` when `PATH` has none.
    pub async fn resolve(&self) -> Option<PathBuf> {
        match self {
            Locator::Configured(bin) => Some(bin.clone()),
            Locator::OnPath { name, path } => {
                let (name, path) = (*name, path.clone());
                tokio::task::spawn_blocking(move || super::env::which(name, path.as_deref())).await.ok().flatten()
            }
        }
    }

    /// Why there is no executable, in words an operator can act on.
    pub fn missing(&self, install: &str, key: &str) -> String {
        match self {
            Locator::Configured(_) => format!("the configured executable ({key}) is missing"),
            Locator::OnPath { name, .. } => {
                format!("not installed: no `{name}` on the bridge's PATH (install it with `{install}`, or set {key})")
            }
        }
    }
}

/// A cached probe of one runtime.
#[derive(Debug, Default)]
pub struct ProbeCache {
    last: tokio::sync::Mutex<Option<(Instant, PathBuf, Probed)>>,
}

impl ProbeCache {
    /// The cached result for `bin`, or a fresh `probe` when the cache is older than its TTL
    /// ([`PROBE_TTL`], [`FAILED_PROBE_TTL`] for a failure) or was for another executable. One
    /// probe runs at a time; concurrent callers wait for it.
    pub async fn get(&self, bin: &Path, probe: impl AsyncFnOnce() -> Probed) -> Probed {
        let mut last = self.last.lock().await;
        if let Some((at, probed_bin, probed)) = last.as_ref() {
            let ttl = if matches!(probed, Probed::Version(_)) { PROBE_TTL } else { FAILED_PROBE_TTL };
            if probed_bin == bin && at.elapsed() < ttl {
                return probed.clone();
            }
        }
        let probed = probe().await;
        *last = Some((Instant::now(), bin.to_owned(), probed.clone()));
        probed
    }
}

/// `bin --version` (see [`version`]), then — when it answers — the CLI's login check
/// `logged_out`, which says why the CLI is not logged in, or nothing.
pub async fn version_and_login(
    bin: &Path,
    env: Vec<(OsString, OsString)>,
    parse: fn(&str) -> Option<String>,
    logged_out: impl AsyncFnOnce() -> Option<String>,
) -> Probed {
    match version(bin, env, parse).await {
        Probed::Version(v) => match logged_out().await {
            Some(why) => Probed::Unavailable(Reason::NotLoggedIn, why),
            None => Probed::Version(v),
        },
        failed => failed,
    }
}

static PROBES: AtomicU64 = AtomicU64::new(0);

/// Runs `bin --version` and parses its first line. Why it failed is told without host paths
/// (callers read it in `list_agent_runtimes`); the full text goes to the bridge's log.
pub async fn version(bin: &Path, env: Vec<(OsString, OsString)>, parse: fn(&str) -> Option<String>) -> Probed {
    match version_unredacted(bin, env, parse).await {
        Probed::Unavailable(reason, why) => {
            tracing::info!(detail = ?why, "a runtime is unavailable");
            Probed::Unavailable(reason, super::io::without_host_paths(&why))
        }
        version => version,
    }
}

async fn version_unredacted(bin: &Path, env: Vec<(OsString, OsString)>, parse: fn(&str) -> Option<String>) -> Probed {
    let broken = |why: String| Probed::Unavailable(Reason::NotWorking, why);
    if !bin.is_absolute() {
        return broken(format!("{} is not an absolute path", bin.display()));
    }
    let path = bin.to_owned();
    #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
    let metadata = tokio::task::spawn_blocking(move || std::fs::metadata(path))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match metadata {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Probed::Unavailable(Reason::NotInstalled, format!("{} is not a file", bin.display())),
        Err(e) => return Probed::Unavailable(Reason::NotInstalled, format!("{}: {e}", bin.display())),
    }
    let out = match output(bin, &["--version"], env, Path::new("/"), 4096).await {
        Ok(out) => out,
        Err(why) => return broken(why),
    };
    let text = String::from_utf8_lossy(&out.0);
    let first = text.lines().next().unwrap_or("").trim();
    match (parse(first), out.1) {
        (Some(v), Some(0)) => Probed::Version(v),
        _ => broken(format!(
            "`{} --version` answered {:?} (exit {:?})",
            bin.display(),
            super::io::clip(first, 120),
            out.1
        )),
    }
}

/// Runs `bin args` in `cwd` with `env` (its own group, a `probe-…` marker, no sandbox: it
/// never runs a model), reads at most `max_bytes` of its stdout within [`PROBE_TIMEOUT`], and
/// stops it with the usual ladder: its output and exit code, or why it could not be read.
pub async fn output(
    bin: &Path,
    args: &[&str],
    env: Vec<(OsString, OsString)>,
    cwd: &Path,
    max_bytes: usize,
) -> Result<(Vec<u8>, Option<i32>), String> {
    let marker = format!("probe-{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
    let spawned = spawn(SpawnSpec {
        program: bin.to_owned(),
        args: args.iter().map(OsString::from).collect(),
        cwd: cwd.to_owned(),
        env,
        task_id: marker,
        sandbox: None,
        workdir: None,
        git: None,
        read: Vec::new(),
        write: Vec::new(),
        egress: None,
        kind: SpawnKind::Probe,
        hold: None,
        beside: false,
    })
    .await
    .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    drop(spawned.stdin);
    let (mut stdout, mut stderr) = (spawned.stdout, spawned.stderr);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let read = tokio::time::timeout(PROBE_TIMEOUT, async {
        let (mut chunk, mut echunk) = ([0u8; 4096], [0u8; 1024]);
        let (mut out_open, mut err_open) = (true, true);
        let keep = |r: std::io::Result<usize>, echunk: &[u8], err: &mut Vec<u8>| match r {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                if err.len() < 4096 {
                    err.extend_from_slice(&echunk[..n]);
                }
                true
            }
        };
        while out_open && out.len() < max_bytes {
            tokio::select! {
                r = stdout.read(&mut chunk) => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => out.extend_from_slice(&chunk[..n]),
                },
                r = stderr.read(&mut echunk), if err_open => err_open = keep(r, &echunk, &mut err),
            }
        }
        // Its stdout ended (it is exiting): what it said on stderr may still be unread, and
        // that is the reason a failure gives (both ends can be ready at once).
        while err_open && !out_open {
            let r = stderr.read(&mut echunk).await;
            err_open = keep(r, &echunk, &mut err);
        }
    })
    .await;
    let proof = spawned.process.stop(Duration::from_secs(1), Duration::from_secs(1)).await;
    if read.is_err() {
        return Err(format!("`{} {}` did not answer within {PROBE_TIMEOUT:?}", bin.display(), args.join(" ")));
    }
    if proof.exit_code != Some(0) && !err.is_empty() {
        let text = String::from_utf8_lossy(&err);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!("`{} {}` failed: {}", bin.display(), args.join(" "), super::io::clip(last, 200)));
    }
    Ok((out, proof.exit_code))
}

/// `codex-cli 0.169.0` → `0.169.0`.
pub fn parse_codex(line: &str) -> Option<String> {
    let v = line.strip_prefix("codex-cli ")?.trim();
    looks_like_version(v).then(|| v.to_owned())
}

/// `2.1.328 (Claude Code)` → `2.1.328`.
pub fn parse_claude(line: &str) -> Option<String> {
    let v = line.split_whitespace().next()?;
    (looks_like_version(v) && line.contains("Claude Code")).then(|| v.to_owned())
}

fn looks_like_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() < 64
        && v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_first_line() {
        assert_eq!(parse_codex("codex-cli 0.169.0").as_deref(), Some("0.169.0"));
        assert_eq!(parse_codex("codex 0.1"), None);
        assert_eq!(parse_claude("2.1.328 (Claude Code)").as_deref(), Some("2.1.328"));
        assert_eq!(parse_claude("2.1.328"), None);
        assert_eq!(parse_claude(""), None);
    }

    #[tokio::test]
    async fn a_missing_or_silent_binary_is_unavailable() {
        let missing = version(Path::new("/nonexistent/codex"), Vec::new(), parse_codex).await;
        assert!(matches!(missing, Probed::Unavailable(Reason::NotInstalled, _)));
        let relative = version(Path::new("codex"), Vec::new(), parse_codex).await;
        assert!(matches!(relative, Probed::Unavailable(Reason::NotWorking, ref m) if m.contains("absolute")));
        // `/bin/true --version` exits 0 but says nothing a version parser accepts.
        let wrong = version(Path::new("/bin/true"), Vec::new(), parse_codex).await;
        assert!(matches!(wrong, Probed::Unavailable(Reason::NotWorking, _)), "{wrong:?}");
    }

    /// A failing child's reason is on stderr, which can still be unread when its stdout ends
    /// (codex's refusal of a setting came back without its reason, once in a few runs).
    #[tokio::test]
    async fn a_failure_gives_its_stderr_reason_however_the_two_ends_arrive() {
        let env = vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
        let cwd = std::env::temp_dir();
        for _ in 0..50 {
            let script = "exec 1>&-; echo 'refused: approval_policy untrusted' >&2; exit 1";
            let failed = output(Path::new("/bin/sh"), &["-c", script], env.clone(), &cwd, 1024).await;
            assert!(matches!(&failed, Err(why) if why.ends_with("refused: approval_policy untrusted")), "{failed:?}");
        }
    }
}
