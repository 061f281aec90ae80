//! Test harness for the end-to-end suite: starts the real `agent-bridge` binary on a
//! temporary socket with a temporary state, waits until it answers, and talks to it over the
//! real socket protocol.
//!
//! [`bridge`] starts and stops the process, [`calls`] speaks to it, [`store`] reads what it
//! left on disk, [`procs`] reads `/proc`; [`front`] does the same for `mcp-front`, [`model`]
//! and [`real`] serve the real agent CLIs, [`browser`] drives the board, [`idp`] stands in for
//! an identity provider's metadata and keys. Everything the suites
//! use directly is re-exported here (`e2e::TestBridge`, `e2e::poll_until`, …).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the test harness starts the binaries, reads their files and the environment it was given: the daemons' rules do not apply to it"
)]

use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod bridge;
pub mod browser;
pub mod calls;
pub mod front;
pub mod idp;
pub mod model;
pub mod procs;
pub mod real;
pub mod receiver;
pub mod store;

pub use bridge::{Options, TestBridge, base_env};
pub use calls::{code, error_of, event_types};
pub use procs::{
    alive, child_pids, comm, environ_has, marker_pids, read_environ, start_ticks, state_and_parent, zombie_children,
};

/// The `agent-bridge` executable under test: `AGENT_BRIDGE_BIN`, or the one cargo built next
/// to this test binary (checked to be newer than its sources).
pub fn bridge_bin() -> PathBuf {
    static FRESH: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    built_binary("agent-bridge", "AGENT_BRIDGE_BIN", BRIDGE_SOURCES, &FRESH)
}

/// The source folders `agent-bridge` is built from (the workspace crates it links).
pub const BRIDGE_SOURCES: &[&str] = &["bridge/src", "proto/src", "httpd/src"];
/// The source folders `mcp-front` is built from (the workspace crates it links).
pub const FRONT_SOURCES: &[&str] = &["mcp-front/src", "proto/src", "httpd/src"];

/// The workspace binary `name` under test: the path in `$var`, or the one cargo built next to
/// this test binary, checked once (`fresh`) to be newer than every source under `sources`.
pub fn built_binary(name: &str, var: &str, sources: &[&str], fresh: &std::sync::OnceLock<()>) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary has a path");
    let dir = exe.parent().and_then(Path::parent).expect("the test binary lives in target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run the suite with `cargo test --workspace` (which builds it) or set {var}",
        bin.display()
    );
    fresh.get_or_init(|| assert_fresh_from(&bin, sources));
    bin
}

/// Fails when a `.rs` file under one of `dirs` (relative to the workspace) is newer than `bin`
/// (see [`stale_source`]).
pub fn assert_fresh_from(bin: &Path, dirs: &[&str]) {
    if let Err(stale) = stale_source(bin, dirs) {
        panic!("{stale}: build it first (`cargo build --workspace`, or run `cargo test --workspace`)");
    }
}

/// Says which `.rs` file under one of `dirs` (relative to the workspace) is newer than `bin`,
/// if one is, or that `bin` cannot be read; files only unit tests compile (`tests.rs`,
/// `*_tests.rs`, `*_fuzz.rs`) do not count: a binary is never built from them, so cargo
/// rightly leaves it as it is when only they change.
pub fn stale_source(bin: &Path, dirs: &[&str]) -> Result<(), String> {
    fn test_only(path: &Path) -> bool {
        path.file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == "tests" || s.ends_with("_tests") || s.ends_with("_fuzz"))
    }
    fn newest(dir: &Path, newest_seen: &mut Option<(std::time::SystemTime, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                newest(&path, newest_seen);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !test_only(&path)
                && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
                && newest_seen.as_ref().is_none_or(|(t, _)| modified > *t)
            {
                *newest_seen = Some((modified, path));
            }
        }
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let mut newest_source = None;
    for dir in dirs {
        newest(&workspace.join(dir), &mut newest_source);
    }
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .map_err(|e| format!("cannot read the modification time of {}: {e}", bin.display()))?;
    match newest_source {
        Some((modified, source)) if modified > built => {
            Err(format!("{} is older than {}", bin.display(), source.display()))
        }
        _ => Ok(()),
    }
}

/// Bounded polling, for conditions no event announces (a lock file released, a row deleted,
/// a file written by a child): checks `check` every 20 ms until it holds; panics with `what`
/// after `limit`.
pub async fn poll_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: still not true after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Bounded polling of an asynchronous condition (see [`poll_until`]).
pub async fn poll_until_async<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints a measurement a test makes (a duration, a count) on stderr: shown with
/// `--nocapture` (or when the test fails), for the figures a reviewer asks about.
#[allow(clippy::print_stderr)]
pub fn measured(what: std::fmt::Arguments<'_>) {
    eprintln!("measured: {what}");
}
