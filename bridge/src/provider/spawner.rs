//! The one place the bridge builds a `Command`: a child's program, arguments, directory and
//! environment, the descriptors it is given, and the hooks that run in it before it executes —
//! tied to the bridge first ([`super::tether`]), the normal scheduling policy back, its task
//! cgroup entered. It knows no task, sandbox or stop: what to start is decided by its callers
//! ([`super::process`] for a provider child, [`super::sandbox`] for the start-up trials,
//! [`super::relay`] for the runtime inside a sandbox); stopping is [`super::supervise`]'s.
//!
//! It also keeps the registry of leaders whose exit status is not collected yet, which the
//! orphan reaper must leave alone.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use super::tether::SpawnKind;

/// The environment variable that names a child's task.
pub const MARKER_VAR: &str = "AGENT_BRIDGE_TASK";

/// How much of each of its streams a bounded run keeps ([`run_bounded`]); the rest is read
/// and dropped, so a child that says more is never blocked on a full pipe.
pub const OUTPUT_BOUND: usize = 64 * 1024;

/// Leaders started here whose exit status tokio has not collected yet: the orphan reaper
/// must never wait for these (it would steal the status the stop proof relies on).
static LEADERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// The registry of leaders not collected yet (see [`LEADERS`]).
pub(super) fn leaders() -> MutexGuard<'static, BTreeSet<i32>> {
    LEADERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// What to start: everything about the child is decided here, nothing is inherited.
#[derive(Debug)]
pub struct Launch {
    /// The program (an absolute path).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its complete environment, in order (a later entry of a name wins).
    pub env: Vec<(OsString, OsString)>,
    /// Tie it to the bridge before anything else runs in it (the parent-death signal), as a
    /// child of this kind.
    pub tether: Option<SpawnKind>,
    /// Descriptors the child gets, each at the given number, open across its exec (the
    /// parent's copies are closed once the spawn returned).
    pub pass: Vec<(OwnedFd, RawFd)>,
    /// The cgroup it enters before it executes (a task's own group).
    pub cgroup: Option<PathBuf>,
}

/// A started child: its leader and its pipes.
#[derive(Debug)]
pub struct Started {
    /// The leader, registered until its status is collected.
    pub leader: Leader,
    /// Its stdin.
    pub stdin: ChildStdin,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
}

/// A started leader, registered in the leaders' registry. Dropped before it was handed on
/// ([`Leader::into_child`]), it undoes the start: its group (or itself, when it has none) is
/// killed and it leaves the registry.
#[derive(Debug)]
pub struct Leader {
    child: Option<Child>,
    pid: i32,
    own_group: bool,
}

impl Leader {
    /// Its pid (also its group's id when it has a group of its own).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The child, to wait for.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("a leader holds its child until it is handed on")
    }

    /// Hands the leader on to its supervisor, which keeps it registered until its status is
    /// collected.
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("a leader holds its child until it is handed on")
    }

    /// Undoes the start: SIGKILL to the group (or the child), its status collected, the
    /// registration dropped.
    pub async fn abandon(mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal(Signal::SIGKILL);
            let _ = child.wait().await;
            forget_leader(self.pid);
        }
    }

    /// The child's status was collected: nothing is left to undo.
    fn collected(mut self) {
        if self.child.take().is_some() {
            forget_leader(self.pid);
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(self.pid);
        let _ = if self.own_group { killpg(pid, signal) } else { kill(pid, signal) };
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Not handed on: a spawn that failed half-way, or a caller that went away. The child is
        // killed (tokio reaps what it drops, `kill_on_drop`), so nothing of it is left behind.
        if self.child.take().is_some() {
            self.signal(Signal::SIGKILL);
            forget_leader(self.pid);
        }
    }
}

/// Forgets a leader whose status was collected (the orphan reaper may wait for that pid again).
pub(super) fn forget_leader(pid: i32) {
    leaders().remove(&pid);
}

/// Starts `launch` in a new process group, its three standard streams piped. Must be called
/// on the thread the child is tied to (see [`super::tether::Tether`]): a runtime worker.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
pub fn start(launch: Launch) -> std::io::Result<Started> {
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args).current_dir(&launch.cwd).env_clear().envs(launch.env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    // First of the child's hooks: nothing else runs in it before it is tied to the bridge.
    if let Some(kind) = launch.tether {
        tether_on_exec(cmd.as_std_mut(), kind);
    }
    normal_policy_on_exec(cmd.as_std_mut());
    for (fd, target) in launch.pass {
        pass_fd(cmd.as_std_mut(), fd, target)?;
    }
    // Where cgroup v2 is delegated, the child enters its task's own group before it executes.
    if let Some(dir) = &launch.cgroup {
        enter_cgroup_on_exec(cmd.as_std_mut(), dir)?;
    }
    let mut leader = spawn_registered(&mut cmd, true)?;
    let take = |what: &str| std::io::Error::other(format!("the child's {what} pipe is missing"));
    let stdin = leader.child().stdin.take().ok_or_else(|| take("stdin"))?;
    let stdout = leader.child().stdout.take().ok_or_else(|| take("stdout"))?;
    let stderr = leader.child().stderr.take().ok_or_else(|| take("stderr"))?;
    Ok(Started { leader, stdin, stdout, stderr })
}

/// Spawns `cmd` and registers its leader, under the lock the reaper takes, so the reaper never
/// sees the new leader unregistered.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
fn spawn_registered(cmd: &mut tokio::process::Command, own_group: bool) -> std::io::Result<Leader> {
    let mut registered = leaders();
    let mut child = cmd.spawn()?;
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        let _ = child.start_kill();
        return Err(std::io::Error::other("the child exited before its pid could be read"));
    };
    registered.insert(pid);
    Ok(Leader { child: Some(child), pid, own_group })
}

/// Why a bounded run gave no output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program could not be started.
    #[error("{0}")]
    Start(#[source] std::io::Error),
    /// It did not end within the time allowed (it was killed).
    #[error("no answer within {} s", .0.as_secs())]
    NoAnswer(Duration),
    /// It ended with a failure: what it said on stderr (clipped) and its status.
    #[error("{stderr} ({status})")]
    Failed {
        /// The start of its stderr, trimmed.
        stderr: String,
        /// How it ended.
        status: ExitStatus,
    },
}

/// Runs `program args` to completion within `limit`, reading its stdout and stderr while it
/// runs (each kept up to [`OUTPUT_BOUND`], the rest read and dropped): its stdout, or why it
/// failed (its stderr, or the timeout). `pass` gives it descriptors, as [`Launch::pass`]. It
/// inherits the bridge's environment. Blocking (it runs its own small runtime, so the child is
/// tied to this thread, which waits for it: never call it from async code, which a runtime
/// already drives); for start-up checks only, never a task.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
pub fn run_bounded(
    program: &Path,
    args: &[&str],
    limit: Duration,
    pass: Vec<(OwnedFd, RawFd)>,
) -> Result<String, RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(RunError::Start)?;
    runtime.block_on(async {
        let mut cmd = tokio::process::Command::new(program);
        // This thread waits for the child: the signal comes when the bridge dies, not before.
        tether_on_exec(cmd.as_std_mut(), SpawnKind::Probe);
        normal_policy_on_exec(cmd.as_std_mut());
        for (fd, target) in pass {
            pass_fd(cmd.as_std_mut(), fd, target).map_err(RunError::Start)?;
        }
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut leader = spawn_registered(&mut cmd, false).map_err(RunError::Start)?;
        drop(cmd);
        let missing = || RunError::Start(std::io::Error::other("the child's pipes are missing"));
        let stdout = leader.child().stdout.take().ok_or_else(missing)?;
        let stderr = leader.child().stderr.take().ok_or_else(missing)?;
        let ran = tokio::time::timeout(limit, async {
            tokio::join!(leader.child().wait(), read_bounded(stdout), read_bounded(stderr))
        })
        .await;
        let Ok((status, out, err)) = ran else {
            leader.abandon().await;
            return Err(RunError::NoAnswer(limit));
        };
        let status = status.map_err(RunError::Start)?;
        leader.collected();
        if status.success() {
            Ok(String::from_utf8_lossy(&out).into_owned())
        } else {
            let err = String::from_utf8_lossy(&err);
            Err(RunError::Failed { stderr: err.trim().chars().take(300).collect(), status })
        }
    })
}

/// Reads `pipe` to its end, keeping its first [`OUTPUT_BOUND`] bytes.
async fn read_bounded(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_BOUND - kept.len();
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// Starts the runtime inside a sandbox (the relay's child, [`super::relay`]): `command` with the
/// relay's own environment and streams, less the variables `unset`, plus the task marker
/// `marker`. Blocking.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
pub fn start_in_sandbox(
    command: &[String],
    marker: (&str, &str),
    unset: &[String],
) -> std::io::Result<std::process::Child> {
    let (program, args) = command.split_first().ok_or_else(|| std::io::Error::other("no program"))?;
    let mut cmd = std::process::Command::new(program);
    for name in unset {
        cmd.env_remove(name);
    }
    cmd.args(args).env(marker.0, marker.1).spawn()
}

/// Marks every descriptor above stderr close-on-exec, so no child inherits a descriptor the
/// bridge's own parent left open (the bridge opens its own files close-on-exec).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory; this runs once, in start-up's synchronous part")]
#[expect(unsafe_code, reason = "the descriptors are numbers read from /proc/self/fd, borrowed for one call each")]
pub fn close_inherited_fds_on_exec() {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: nothing closes descriptors while start-up's synchronous part runs, so each
        // number listed is open for the two calls below; the directory listing's own, already
        // closed, fails with EBADF and is skipped.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFD).map(FdFlag::from_bits_truncate)
            && !flags.contains(FdFlag::FD_CLOEXEC)
        {
            let _ = fcntl(fd, FcntlArg::F_SETFD(flags | FdFlag::FD_CLOEXEC));
        }
    }
}

/// Makes `cmd`'s child arm its parent-death signal before anything else runs in it, and exit
/// at once when the bridge is already gone ([`super::tether::Tether::arm`]); nothing when the
/// debug build's test hook leaves `kind` untethered. Register this hook first.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
#[expect(unsafe_code, reason = "a pre_exec hook runs between fork and exec")]
pub(super) fn tether_on_exec(cmd: &mut std::process::Command, kind: SpawnKind) {
    let Some(tether) = super::tether::Tether::for_kind(kind) else { return };
    // SAFETY: between fork and exec the hook only makes async-signal-safe system calls
    // (clock_nanosleep, prctl, getppid) on values copied in before the fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || tether.arm());
    }
}

/// The child gets the normal scheduling policy back before it executes: it would inherit the
/// batch policy of the async thread that started it (`crate::sched`).
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
#[expect(unsafe_code, reason = "a pre_exec hook runs between fork and exec")]
fn normal_policy_on_exec(cmd: &mut std::process::Command) {
    // SAFETY: the hook makes one system call (sched_setscheduler), async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, crate::sched::normal_policy);
    }
}

/// Makes `fd` the child's descriptor `target` (open across its exec). The hook owns a copy
/// moved above 9 first, so that one hook's `dup2` never overwrites the descriptor another hook
/// passes (a pipe the kernel numbered 3 or 4); the copy closes with `cmd`.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
#[expect(
    unsafe_code,
    reason = "a descriptor fcntl returned is taken over, and a pre_exec hook runs between fork and exec"
)]
fn pass_fd(cmd: &mut std::process::Command, fd: OwnedFd, target: RawFd) -> std::io::Result<()> {
    let high = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let high = unsafe { OwnedFd::from_raw_fd(high) };
    drop(fd);
    // SAFETY: between fork and exec the hook only calls dup2, async-signal-safe, on the
    // descriptor it owns; the new descriptor is the child's `target`, left open for its exec
    // (`into_raw_fd`: never closed here).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let _ = nix::unistd::dup2_raw(&high, target)?.into_raw_fd();
            Ok(())
        });
    }
    Ok(())
}

/// Makes the child of `cmd` enter the cgroup `dir` before it executes (it writes `0` to the
/// group's `cgroup.procs`, which moves the writer), so nothing it starts is ever outside it. A
/// child that cannot enter fails its spawn: a task never runs outside the cgroup it was given.
#[expect(clippy::disallowed_types, reason = "the spawner: the one place a Command is built")]
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: opening a file of it never waits on a disk")]
#[expect(unsafe_code, reason = "a pre_exec hook runs between fork and exec")]
fn enter_cgroup_on_exec(cmd: &mut std::process::Command, dir: &Path) -> std::io::Result<()> {
    let procs: OwnedFd = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"))?.into();
    // SAFETY: between fork and exec the hook only calls write(2), async-signal-safe, on the
    // descriptor it owns (open close-on-exec; it closes with `cmd`).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || match nix::unistd::write(&procs, b"0")? {
            1 => Ok(()),
            _ => Err(std::io::Error::other("cgroup.procs took a short write")),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "spawner_tests.rs"]
mod tests;
