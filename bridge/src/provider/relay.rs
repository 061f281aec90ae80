//! The first program of a sandbox with a network of its own (`agent-bridge sandbox-exec`): it
//! listens on the namespace's loopback for the runtime's proxy connections (`HTTPS_PROXY`
//! points there), relays each one to the task's egress gate (a Unix socket the sandbox mounts,
//! [`crate::egress`]), and runs the runtime as its child: the namespace has no other way out.
//!
//! It stays out of the task's way: the runtime gets the standard streams (this process drops
//! its own copies), an empty signal mask, and the task marker (this process carries none, so
//! the marker still names the task's own processes only); a TERM meant for the task is the
//! runtime's to handle, and this process ends when its child does, with its status (the same
//! signal re-raised, or the exit code), which the sandbox reports to the bridge.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where the relay listens inside the namespace (each task has its own loopback).
pub const LISTEN: &str = "127.0.0.1:3128";
/// The relay's allocator settings (jemalloc's `MALLOC_CONF`, for the relay alone: it waits
/// beside its task and allocates little). One arena and no per-thread caches: 180 KiB less
/// per task than jemalloc's defaults (`tasks many`, bench/README.md).
pub const MALLOC_CONF: &str = "narenas:1,tcache:false";
/// Where the sandbox mounts the task's egress gate.
pub const GATE: &str = "/run/agent-bridge/egress.sock";
/// The most relayed connections at once (the gate bounds its own side too).
const MAX_CONNECTIONS: usize = 256;

/// What `sandbox-exec` was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The gate to relay to.
    pub gate: PathBuf,
    /// The task marker, `NAME=VALUE`, set for the runtime only.
    pub marker: (String, String),
    /// Variables of this process's environment the runtime does not get (`--unset NAME`,
    /// repeatable): the relay's own allocator settings.
    pub unset: Vec<String>,
    /// The runtime and its arguments.
    pub command: Vec<String>,
}

/// Reads `--gate PATH --marker NAME=VALUE [--unset NAME]… -- PROGRAM ARGS…`.
pub fn parse(args: &[String]) -> Result<Args, String> {
    let (mut gate, mut marker, mut unset) = (None, None, Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--gate" => gate = it.next().map(PathBuf::from),
            "--marker" => {
                let m = it.next().ok_or("--marker needs NAME=VALUE")?;
                marker = Some(
                    m.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or("--marker needs NAME=VALUE")?,
                );
            }
            "--unset" => match it.next() {
                Some(name) if !name.is_empty() && !name.starts_with('-') && !name.contains('=') => {
                    unset.push(name.clone())
                }
                _ => return Err("--unset needs a variable's NAME".into()),
            },
            "--" => break,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let command: Vec<String> = it.cloned().collect();
    if command.is_empty() {
        return Err("no program after --".into());
    }
    Ok(Args { gate: gate.ok_or("--gate is missing")?, marker: marker.ok_or("--marker is missing")?, unset, command })
}

/// Runs `sandbox-exec`; returns the exit code (or does not return: a child killed by a signal
/// is reported by this process dying of the same signal).
#[expect(
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "the sandbox's own first program, not the daemon (no reactor): it says on stderr why it cannot, and opens /dev/null"
)]
pub fn run(args: &[String]) -> i32 {
    let args = match parse(args) {
        Ok(a) => a,
        Err(why) => {
            eprintln!("agent-bridge sandbox-exec: {why}");
            return 2;
        }
    };
    let listener = match TcpListener::bind(LISTEN) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agent-bridge sandbox-exec: cannot listen on {LISTEN}: {e}");
            return 2;
        }
    };
    // The signals a stop sends are the runtime's: this process waits for it instead. (Blocked
    // here; the child starts with an empty mask.)
    let mut blocked = nix::sys::signal::SigSet::empty();
    for sig in [nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGHUP] {
        blocked.add(sig);
    }
    let _ = blocked.thread_block();
    let mut child = match super::spawner::start_in_sandbox(&args.command, (&args.marker.0, &args.marker.1), &args.unset)
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agent-bridge sandbox-exec: cannot start {}: {e}", args.command[0]);
            return 127;
        }
    };
    // The bridge reads the runtime's output to its end: only the runtime may hold it.
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
    let gate = Arc::new(args.gate);
    std::thread::spawn(move || accept(listener, gate));
    let status = match child.wait() {
        Ok(s) => s,
        Err(_) => return 1,
    };
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal().and_then(|s| nix::sys::signal::Signal::try_from(s).ok()) {
        // Die of the same signal, so the status the sandbox reports is the runtime's.
        default_disposition(sig);
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(sig);
        let _ = set.thread_unblock();
        let _ = nix::sys::signal::raise(sig);
    }
    status.code().unwrap_or(1)
}

/// Restores `sig`'s default disposition (nix calls `signal(2)` unsafe: a handler could race).
#[expect(unsafe_code, reason = "signal(2) is unsafe in nix; here it only restores the default")]
fn default_disposition(sig: nix::sys::signal::Signal) {
    // SAFETY: restoring a signal's default disposition installs no handler, so nothing can race
    // with one.
    unsafe {
        let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl);
    }
}

/// Accepts the runtime's proxy connections and relays each to the gate.
fn accept(listener: TcpListener, gate: Arc<PathBuf>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(tcp) = stream else { continue };
        if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            continue;
        }
        let Ok(unix) = UnixStream::connect(&*gate) else { continue };
        open.fetch_add(1, Ordering::Relaxed);
        let open = Arc::clone(&open);
        std::thread::spawn(move || {
            relay(tcp, unix);
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Copies both ways until each side has said all it had to say.
fn relay(tcp: TcpStream, unix: UnixStream) {
    let (Ok(tcp_back), Ok(unix_back)) = (tcp.try_clone(), unix.try_clone()) else { return };
    let up = std::thread::spawn(move || pump(tcp, unix));
    pump_back(unix_back, tcp_back);
    let _ = up.join();
}

fn pump(mut from: TcpStream, mut to: UnixStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

fn pump_back(mut from: UnixStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_arguments_are_read_strictly() {
        let a = parse(&strings(&[
            "--gate",
            "/run/g.sock",
            "--marker",
            "AGENT_BRIDGE_TASK=agt_1",
            "--",
            "codex",
            "app-server",
        ]))
        .expect("ok");
        assert_eq!(a.gate, PathBuf::from("/run/g.sock"));
        assert_eq!(a.marker, ("AGENT_BRIDGE_TASK".into(), "agt_1".into()));
        assert_eq!(a.command, ["codex", "app-server"]);
        assert!(a.unset.is_empty());
        let a = parse(&strings(&["--gate", "/g", "--marker", "M=1", "--unset", "MALLOC_CONF", "--", "x", "--unset"]))
            .expect("ok");
        assert_eq!(a.unset, ["MALLOC_CONF"]);
        assert_eq!(a.command, ["x", "--unset"], "the program's own arguments are its own");
        assert!(parse(&strings(&["--gate", "/g", "--marker", "M=1", "--unset", "--", "x"])).is_err(), "no NAME");
        assert!(parse(&strings(&["--gate", "/g", "--marker", "M=1", "--unset", "A=B", "--", "x"])).is_err());
        assert!(parse(&strings(&["--gate", "/g", "--marker", "M=1", "--unset"])).is_err());
        assert!(parse(&strings(&["--gate", "/g", "--", "x"])).is_err(), "no marker");
        assert!(parse(&strings(&["--gate", "/g", "--marker", "M=1", "--"])).is_err(), "no program");
        assert!(parse(&strings(&["--gate", "/g", "--marker", "M", "--", "x"])).is_err());
        assert!(parse(&strings(&["--weird", "--", "x"])).is_err());
    }
}
