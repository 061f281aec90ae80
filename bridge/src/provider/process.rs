//! The one way the bridge starts a child process, and the stop ladder that proves it gone.
//!
//! Every provider child runs in its own process group, in the task's cwd, with a decided
//! environment that carries the marker `AGENT_BRIDGE_TASK=<task_id>`, and — when the machine
//! allows it — inside the task sandbox ([`super::sandbox`]): its own PID namespace, recorded at
//! spawn. A stop is *proven* when the leader was reaped, no process is left in the task's PID
//! namespace (the kernel's proof: nothing inside can leave it) and, as a second check and the
//! proof where there is no sandbox, no process carrying the marker remains (descendants
//! inherit it even when they leave the group with `setsid`). Every child in the sandbox, and
//! every helper, is tied to the bridge before it executes anything ([`super::tether`]).
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_methods,
    reason = "the one module that spawns processes; the /proc reads that go with it are kernel memory, never a disk"
)]

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::procfs::{is_zombie, namespace_pids, start_ticks, stat_fields};
pub use super::procfs::{marker_pids, task_pids};
use super::sandbox::{INFO_FD, SECCOMP_FD};
use super::tether::{SANDBOX_VAR, SpawnKind, TestHook, test_hook, tether};
use crate::config::EgressMode;
use std::os::fd::OwnedFd;

/// The environment variable that names a child's task.
pub const MARKER_VAR: &str = "AGENT_BRIDGE_TASK";

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Absolute program path.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<OsString>,
    /// Working directory (the task's resolved cwd).
    pub cwd: PathBuf,
    /// The complete environment (nothing else is inherited); the marker is added.
    pub env: Vec<(OsString, OsString)>,
    /// The task id written into [`MARKER_VAR`].
    pub task_id: String,
    /// The task sandbox to start the child in (`None`: uncontained, e.g. a version probe).
    pub sandbox: Option<super::sandbox::Containment>,
    /// In the sandbox: the task's workdir root and whether the child may write it (see
    /// [`Containment::wrap`](super::sandbox::Containment::wrap)).
    pub workdir: Option<(PathBuf, bool)>,
    /// In the sandbox, for a worktree task's child (whose `workdir` is its worktree): what it
    /// holds of the repository, and the checkout whose policy applies.
    pub git: Option<super::worktree::TreeGit>,
    /// In the sandbox: more paths the child reads.
    pub read: Vec<PathBuf>,
    /// In the sandbox: more paths the child writes (its runtime's home, a session store).
    pub write: Vec<PathBuf>,
    /// In the sandbox, with `SERVERFS_AGENT_EGRESS=proxy`: the runtime's own endpoints, to
    /// which the operator's rules are added for the child's egress gate; `None`: no network at
    /// all (a snapshot's git).
    pub egress: Option<Vec<crate::egress::Rule>>,
    /// What the child is for (whether it dies with the bridge: [`SpawnKind::dies_with_bridge`]).
    pub kind: SpawnKind,
}

/// A started child and its pipes.
pub struct Spawned {
    /// The supervised leader.
    pub process: Supervised,
    /// Its stdin.
    pub stdin: ChildStdin,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
}

/// A running provider process group and what is needed to stop it with proof.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    pid: i32,
    start_ticks: Option<u64>,
    task_id: String,
    sandbox: Option<Sandboxed>,
    cgroup: Option<PathBuf>,
    /// The child's egress gate, open until the stop is done.
    _gate: Option<crate::egress::Gate>,
}

/// A started sandbox: its init and namespace, and the private `/tmp` to remove after the stop.
#[derive(Debug)]
struct Sandboxed {
    ns: NamespaceProof,
    private_tmp: PathBuf,
    /// The namespace itself, held open: while the bridge holds it, the kernel cannot give its
    /// inode number to another namespace, so "a process with this inode" means "a process of
    /// this task" (without it, another sandbox started the moment this one ended could take
    /// the number and pass for a survivor).
    _pinned: Option<std::fs::File>,
}

/// What identifies a task's PID namespace for a later proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceProof {
    /// The inode of the namespace (`/proc/<pid>/ns/pid` reads `pid:[inode]`).
    pub pid_ns: u64,
    /// The sandbox's init, as a pid of the bridge's namespace.
    pub init_pid: i32,
    /// The init's start time, so a recycled pid is never signalled.
    pub init_start_ticks: Option<u64>,
}

impl NamespaceProof {
    /// Whether processes of this namespace may still run: its recorded init does (same pid
    /// and start time; a zombie init is one whose namespace is empty, since the kernel ends
    /// every member before the init is done exiting), or its start time was never read. Once
    /// the bridge that pinned the namespace is gone, its inode number is free for another
    /// namespace (another bridge's task, started since): processes found under that number
    /// without the recorded init are not this task's.
    pub fn may_hold_processes(&self) -> bool {
        match self.init_start_ticks {
            Some(recorded) => start_ticks(self.init_pid) == Some(recorded) && !is_zombie(self.init_pid),
            None => true,
        }
    }
}

/// What a later process needs to re-check a stop: the leader, its start time (so a recycled
/// pid is never mistaken for it) and the marker value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofMaterial {
    /// The process group leader's pid (also the group id).
    pub pid: i32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: Option<u64>,
    /// The marker value (the task id).
    pub marker: String,
    /// The task's PID namespace, when it ran in the sandbox.
    pub namespace: Option<NamespaceProof>,
    /// The task's own cgroup, when cgroup v2 was delegated to the bridge.
    pub cgroup: Option<PathBuf>,
}

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopProof {
    /// The leader was waited for.
    pub leader_reaped: bool,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    /// Processes found by the marker sweep and killed.
    pub survivors_killed: usize,
    /// Processes of the task (in its namespace or carrying its marker) still present.
    pub remaining: Vec<i32>,
    /// The strongest proof that applied: `cgroup` (a delegated cgroup v2), `pid_namespace`
    /// (the sandbox) or `marker` (with the other two, still checked).
    pub proof: &'static str,
}

impl StopProof {
    /// Whether the provider is proven stopped.
    pub fn proven(&self) -> bool {
        self.leader_reaped && self.remaining.is_empty()
    }
}

/// Leaders spawned here whose exit status tokio has not collected yet: the orphan reaper
/// must never wait for these (it would steal the status the stop proof relies on).
static LEADERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn leaders() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LEADERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Marks every descriptor above stderr close-on-exec, so no provider inherits a descriptor
/// the bridge's own parent left open (the bridge opens its own files close-on-exec).
#[allow(unsafe_code)]
pub fn close_inherited_fds_on_exec() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flags; a descriptor that
        // is already closed (the directory listing's own) fails with EBADF and is skipped.
        unsafe {
            let flags = nix::libc::fcntl(fd, nix::libc::F_GETFD);
            if flags >= 0 && flags & nix::libc::FD_CLOEXEC == 0 {
                nix::libc::fcntl(fd, nix::libc::F_SETFD, flags | nix::libc::FD_CLOEXEC);
            }
        }
    }
}

/// A descriptor, registered with the reactor, that becomes readable when process `pid`
/// terminates (Linux `pidfd_open`).
#[allow(unsafe_code)]
fn watch_pid(pid: i32) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor, or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: an `OwnedFd` stays open, and is the same descriptor, for as long as the `AsyncFd`
    // that owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.map_err(Into::into)
}

/// Resolves when any of `pids` terminates (at once when one is already gone or cannot be
/// watched), without polling: each pid is watched through a pidfd.
pub async fn any_exits(pids: &[i32]) {
    let mut waits = tokio::task::JoinSet::new();
    for &pid in pids {
        let Ok(fd) = watch_pid(pid) else { return };
        waits.spawn(async move {
            let _ = fd.readable().await;
        });
    }
    let _ = waits.join_next().await;
    waits.abort_all();
}

/// Live processes still standing between a guard and its proof: the recorded leader (same pid
/// and start time), every process carrying the marker, and those of the recorded namespace
/// while it is still that namespace ([`NamespaceProof::may_hold_processes`]). Blocking (reads
/// `/proc`).
pub fn unproven_pids(material: Option<&ProofMaterial>, task_id: &str) -> Vec<i32> {
    let namespace = material.and_then(|m| m.namespace).filter(NamespaceProof::may_hold_processes);
    let mut pids = task_pids(task_id, namespace.map(|n| n.pid_ns));
    if let Some(dir) = material.and_then(|m| m.cgroup.as_deref())
        && super::cgroup::populated(dir)
    {
        let inside = super::cgroup::pids(dir);
        pids.extend(inside.into_iter().filter(|p| !pids.contains(p)).collect::<Vec<_>>());
    }
    if let Some(m) = material.filter(|m| leader_alive(m) && !pids.contains(&m.pid)) {
        pids.push(m.pid);
    }
    pids
}

/// Makes this process a child subreaper: descendants whose parent dies (an agent's stray
/// background command, a `setsid` grandchild) are reparented to the bridge instead of init, so
/// the bridge sees them and reaps them.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Reaps every exited child of this process that is not a leader tokio is waiting for
/// (orphans reparented to the subreaper); returns how many. Blocking (reads `/proc`).
pub fn reap_orphans() -> usize {
    let leaders = leaders();
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut reaped = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if leaders.contains(&pid) {
            continue;
        }
        let is_our_zombie =
            stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s == "Z") && f.get(1) == Some(&me));
        if is_our_zombie
            && nix::sys::wait::waitpid(Pid::from_raw(pid), Some(nix::sys::wait::WaitPidFlag::WNOHANG)).is_ok()
        {
            reaped += 1;
        }
    }
    reaped
}

/// Starts `spec` in a new process group with a decided environment, inside the task sandbox
/// when the spec names one. Must be called on a runtime worker thread, never from
/// `spawn_blocking`: a sandbox dies with the thread that forked it (`--die-with-parent`).
pub async fn spawn(spec: SpawnSpec) -> std::io::Result<Spawned> {
    // A child that may reach the network through the proxy gets its gate first: the sandbox
    // mounts it.
    let gate = match (&spec.sandbox, &spec.egress) {
        (Some(c), Some(own)) if c.contained() && c.network_mode() == EgressMode::Proxy => {
            let mut rules = own.clone();
            let policy_root = match &spec.git {
                Some(git) => Some(git.checkout.as_path()),
                None => spec.workdir.as_ref().map(|(root, _)| root.as_path()),
            };
            rules.extend(c.egress().operator_rules(policy_root));
            let allow = crate::egress::Allow::new(rules);
            let own_loopback = !allow.names_loopback();
            Some((c.egress().open(&spec.task_id, allow).await?, own_loopback))
        }
        _ => None,
    };
    let (gate, own_loopback) = match gate {
        Some((gate, own)) => (Some(gate), own),
        None => (None, false),
    };
    // The sandbox's command line and the task's cgroup are prepared off the reactor (they
    // touch the filesystem); the fork itself stays on this worker thread.
    let (wrap, cgroup) = match spec.sandbox.clone() {
        Some(containment) => {
            let view = super::sandbox::ViewRequest {
                program: spec.program.clone(),
                cwd: spec.cwd.clone(),
                workdir: spec.workdir.clone(),
                git: spec.git.clone(),
                read: spec.read.clone(),
                write: spec.write.clone(),
                gate: gate.as_ref().map(|g| g.path().to_owned()),
            };
            let (task_id, env) = (spec.task_id.clone(), spec.env.clone());
            tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                let wrap = containment.wrap(&task_id, &env, &view)?;
                let cgroup = containment.cgroups().map(|c| c.create(&task_id)).transpose()?;
                Ok((wrap, cgroup))
            })
            .await
            .map_err(std::io::Error::other)??
        }
        None => (None, None),
    };
    let untethered = test_hook(spec.kind) == Some(TestHook::Untethered);
    let mut cmd = match &wrap {
        // Inside the sandbox only the task's own processes carry the marker (bwrap's pair is
        // the leader and the namespace's init, proven by pid and by namespace); bwrap's pair
        // carries the sandbox variable instead, which bwrap unsets for the program.
        Some(w) => {
            let mut cmd = Command::new(&w.bwrap);
            let base = w.args[..w.args.len() - 1].iter().filter(|a| !untethered || *a != "--die-with-parent");
            cmd.args(base).arg("--unsetenv").arg(SANDBOX_VAR);
            match &w.relay {
                // The relay runs first and sets the marker for the runtime alone.
                Some(relay) => cmd
                    .arg("--")
                    .arg(relay)
                    .args(["sandbox-exec", "--gate", super::relay::GATE, "--marker"])
                    .arg(format!("{MARKER_VAR}={}", spec.task_id))
                    .arg("--")
                    .arg(&spec.program),
                None => cmd.arg("--setenv").arg(MARKER_VAR).arg(&spec.task_id).arg("--").arg(&spec.program),
            };
            cmd
        }
        None => Command::new(&spec.program),
    };
    cmd.args(&spec.args).current_dir(&spec.cwd).env_clear().envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(git) = &spec.git {
        // The task's git writes its objects to its private directory, never the repository's.
        cmd.envs(git.env());
    }
    match &wrap {
        Some(_) => cmd.env(SANDBOX_VAR, &spec.task_id),
        None => cmd.env(MARKER_VAR, &spec.task_id),
    };
    if wrap.as_ref().is_some_and(|w| w.relay.is_some()) {
        // The runtime's way out: the relay on the namespace's loopback (upper and lower case:
        // curl reads only the latter for http).
        let proxy = format!("http://{}", super::relay::LISTEN);
        for var in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"] {
            cmd.env(var, &proxy);
        }
        // The namespace's loopback is the task's own (a dev server it starts, its tests): reached
        // directly, unless a rule sends loopback names to the host's, which only the proxy can.
        if own_loopback {
            for var in ["NO_PROXY", "no_proxy"] {
                cmd.env(var, "localhost,127.0.0.1,::1");
            }
        }
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    // First of the child's hooks: nothing else runs in it before it is tied to the bridge.
    if spec.kind.dies_with_bridge(wrap.is_some()) {
        tether(cmd.as_std_mut(), spec.kind);
    }
    normal_policy_on_exec(cmd.as_std_mut());
    let info = match &wrap {
        Some(_) => Some(info_pipe(&mut cmd)?),
        None => None,
    };
    let _seccomp = match &wrap {
        Some(w) if w.seccomp => Some(seccomp_pipe(cmd.as_std_mut())?),
        _ => None,
    };
    // Where cgroup v2 is delegated, the child enters its task's own group before it executes.
    let _procs = match &cgroup {
        Some(dir) => Some(super::cgroup::enter_on_exec(&mut cmd, dir)?),
        None => None,
    };
    // Registered under the lock the reaper takes, so it never sees the new leader unregistered.
    let (mut child, pid) = {
        let mut registered = leaders();
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                drop(registered);
                if let Some(w) = &wrap {
                    super::sandbox::remove_private_tmp(&w.private_tmp);
                }
                if let Some(dir) = &cgroup {
                    super::cgroup::remove_tree(dir);
                }
                return Err(e);
            }
        };
        let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
            let _ = child.start_kill();
            return Err(std::io::Error::other("the child exited before its pid could be read"));
        };
        registered.insert(pid);
        (child, pid)
    };
    let take = |what: &str| std::io::Error::other(format!("the child's {what} pipe is missing"));
    let stdin = child.stdin.take().ok_or_else(|| take("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| take("stdout"))?;
    let mut stderr = child.stderr.take().ok_or_else(|| take("stderr"))?;
    let sandbox = match (wrap, info) {
        (Some(w), Some((read, write))) => {
            drop(write);
            match read_info(read).await {
                Some(info) => Some(Sandboxed {
                    ns: NamespaceProof {
                        pid_ns: info.pid_ns,
                        init_pid: info.init_pid,
                        init_start_ticks: start_ticks(info.init_pid),
                    },
                    private_tmp: w.private_tmp,
                    _pinned: pin_namespace(info.init_pid, info.pid_ns),
                }),
                None => {
                    // bwrap said nothing: the sandbox did not start. Its own words are on stderr.
                    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                    let mut why = String::new();
                    use tokio::io::AsyncReadExt;
                    let _ = tokio::time::timeout(Duration::from_secs(1), stderr.read_to_string(&mut why)).await;
                    // The whole group: a sandbox init that bwrap cloned and never released
                    // is in it, blocked, and would never end by itself.
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = child.wait().await;
                    leaders().remove(&pid);
                    super::sandbox::remove_private_tmp(&w.private_tmp);
                    if let Some(dir) = &cgroup {
                        let _ = super::cgroup::kill_and_remove(dir).await;
                    }
                    let why: String = why.trim().chars().take(400).collect();
                    return Err(std::io::Error::other(format!("the task sandbox did not start: {why}")));
                }
            }
        }
        _ => None,
    };
    super::peers::register(pid, &spec.task_id, sandbox.as_ref().map(|s| s.ns.pid_ns));
    Ok(Spawned {
        process: Supervised {
            child,
            pid,
            start_ticks: start_ticks(pid),
            task_id: spec.task_id,
            sandbox,
            cgroup,
            _gate: gate,
        },
        stdin,
        stdout,
        stderr,
    })
}

/// Opens the PID namespace `pid_ns` through its init `pid` (close-on-exec), if that process
/// is still in it: holding it open keeps the namespace's inode number from being reused.
fn pin_namespace(pid: i32, pid_ns: u64) -> Option<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(format!("/proc/{pid}/ns/pid")).ok()?;
    (file.metadata().ok()?.ino() == pid_ns).then_some(file)
}

/// The child gets the normal scheduling policy back before it executes: it would inherit the
/// batch policy of the async thread that started it (`crate::sched`).
#[allow(unsafe_code)]
fn normal_policy_on_exec(cmd: &mut std::process::Command) {
    // SAFETY: the hook makes one system call (sched_setscheduler), async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, crate::sched::normal_policy);
    }
}

/// A close-on-exec pipe whose write end the child gets as [`INFO_FD`] (bwrap's `--info-fd`).
fn info_pipe(cmd: &mut Command) -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let write = pass_fd(cmd.as_std_mut(), write, INFO_FD)?;
    Ok((read, write))
}

/// Gives `cmd`'s child the task sandbox's seccomp filter on [`SECCOMP_FD`] (bwrap's
/// `--seccomp`): a pipe holding the whole program, its write end closed. The returned read end
/// must stay open until the spawn has returned.
fn seccomp_pipe(cmd: &mut std::process::Command) -> std::io::Result<std::os::fd::OwnedFd> {
    let program = super::seccomp::program().ok_or_else(|| std::io::Error::other("no seccomp filter here"))?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // 104 bytes into an empty pipe: the write is whole and never blocks.
    let written = nix::unistd::write(&write, &program)?;
    if written != program.len() {
        return Err(std::io::Error::other("the seccomp filter was not written whole"));
    }
    drop(write);
    pass_fd(cmd, read, SECCOMP_FD)
}

/// Makes `fd` the child's descriptor `target` (open across its exec). The parent's copy is
/// moved above 9 first, so that one hook's `dup2` never overwrites the descriptor another hook
/// passes (a pipe the kernel numbered 3 or 4); it must stay open until the spawn has returned.
#[allow(unsafe_code)]
fn pass_fd(cmd: &mut std::process::Command, fd: OwnedFd, target: i32) -> std::io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let high = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let high = unsafe { OwnedFd::from_raw_fd(high) };
    drop(fd);
    let raw = high.as_raw_fd();
    // SAFETY: between fork and exec the closure only calls dup2, async-signal-safe, on a
    // descriptor the parent keeps open until the spawn returns.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            if nix::libc::dup2(raw, target) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(high)
}

/// Reads bwrap's information (bounded: 10 s), or `None` when it closed the pipe without it.
async fn read_info(read: std::os::fd::OwnedFd) -> Option<super::sandbox::SandboxInfo> {
    use tokio::io::AsyncReadExt;
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read).ok()?;
    let mut text = Vec::new();
    let mut limited = (&mut pipe).take(64 * 1024);
    tokio::time::timeout(Duration::from_secs(10), limited.read_to_end(&mut text)).await.ok()?.ok()?;
    super::sandbox::parse_info(std::str::from_utf8(&text).ok()?)
}

/// Runs `program args` to completion, bounded by `limit`: its stdout, or why it failed (its
/// stderr, or the timeout). With `seccomp`, the child finds the task sandbox's filter on
/// [`SECCOMP_FD`] (the start-up's trial sandbox). Blocking; for start-up checks only (never a
/// task).
pub fn run_bounded(program: &Path, args: &[&str], limit: Duration, seccomp: bool) -> Result<String, String> {
    let mut command = std::process::Command::new(program);
    // This thread waits for the child: the signal comes when the bridge dies, not before.
    tether(&mut command, SpawnKind::Probe);
    normal_policy_on_exec(&mut command);
    let _program = match seccomp {
        true => Some(seccomp_pipe(&mut command).map_err(|e| e.to_string())?),
        false => None,
    };
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", limit.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!("{} ({})", err.trim().chars().take(300).collect::<String>(), out.status))
    }
}

impl Supervised {
    /// The material to record in the recovery guard.
    pub fn proof_material(&self) -> ProofMaterial {
        ProofMaterial {
            pid: self.pid,
            start_ticks: self.start_ticks,
            marker: self.task_id.clone(),
            namespace: self.sandbox.as_ref().map(|s| s.ns),
            cgroup: self.cgroup.clone(),
        }
    }

    /// Stops the process group: waits `grace` for a voluntary exit (the caller has closed
    /// stdin), then SIGTERM to the group, then SIGKILL, then sweeps every process carrying the
    /// marker; bounded by roughly `grace + term_wait + 2 s`.
    pub async fn stop(mut self, grace: Duration, term_wait: Duration) -> StopProof {
        let mut status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok);
        if status.is_none() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGTERM);
            // The sandbox's program runs in a session (and group) of its own: it gets its TERM
            // by namespace (its init ignores one sent from here).
            if let Some(ns) = self.sandbox.as_ref().map(|s| s.ns) {
                let members = tokio::task::spawn_blocking(move || namespace_pids(ns.pid_ns)).await.unwrap_or_default();
                for pid in members {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                }
            }
            status = tokio::time::timeout(term_wait, self.child.wait()).await.ok().and_then(Result::ok);
        }
        if status.is_none() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            status = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await.ok().and_then(Result::ok);
        }
        if status.is_some() {
            leaders().remove(&self.pid);
        }
        // The task's cgroup is killed whole; the sandbox's init ends its namespace, and the
        // kernel every process in it.
        let mut survivors_killed = 0;
        let mut cgroup_left = Vec::new();
        if let Some(dir) = &self.cgroup {
            let d = dir.clone();
            survivors_killed +=
                tokio::task::spawn_blocking(move || super::cgroup::pids(&d)).await.map_or(0, |p| p.len());
            if !super::cgroup::kill_and_remove(dir).await {
                let d = dir.clone();
                cgroup_left = tokio::task::spawn_blocking(move || super::cgroup::pids(&d)).await.unwrap_or_default();
                // Populated without a readable pid is still populated: no proof.
                if cgroup_left.is_empty() {
                    cgroup_left.push(0);
                }
            }
        }
        let ns = self.sandbox.as_ref().map(|s| s.ns);
        if let Some(ns) = ns {
            survivors_killed += end_namespace(ns).await;
        }
        // Whatever the leader did, every other process of the task (its group, and anything
        // that left the group with `setsid`) carries the marker: the sweep ends them all.
        let (marked, mut remaining) = sweep_marker(&self.task_id).await;
        survivors_killed += marked;
        if let Some(ns) = ns {
            let left = tokio::task::spawn_blocking(move || namespace_pids(ns.pid_ns)).await.unwrap_or_default();
            remaining.extend(left.into_iter().filter(|p| !remaining.contains(p)).collect::<Vec<_>>());
        }
        remaining.extend(cgroup_left.into_iter().filter(|p| !remaining.contains(p)).collect::<Vec<_>>());
        if let Some(sandboxed) = &self.sandbox
            && remaining.is_empty()
        {
            let tmp = sandboxed.private_tmp.clone();
            let _ = tokio::task::spawn_blocking(move || super::sandbox::remove_private_tmp(&tmp)).await;
        }
        if remaining.is_empty() {
            super::peers::unregister(self.pid);
        }
        use std::os::unix::process::ExitStatusExt;
        StopProof {
            leader_reaped: status.is_some(),
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            survivors_killed,
            remaining,
            proof: if self.cgroup.is_some() {
                "cgroup"
            } else if ns.is_some() {
                "pid_namespace"
            } else {
                "marker"
            },
        }
    }

    /// Waits for the leader to exit on its own (no signal).
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }
}

/// Ends a task's PID namespace: SIGKILL to its init (the kernel then kills every process in
/// it), then to anything still listed in it; waits (bounded, 2 s) until it is empty. Returns
/// how many processes were found in it.
async fn end_namespace(ns: NamespaceProof) -> usize {
    let scan =
        move || async move { tokio::task::spawn_blocking(move || namespace_pids(ns.pid_ns)).await.unwrap_or_default() };
    let found = scan().await;
    if found.is_empty() {
        return 0;
    }
    if start_ticks(ns.init_pid).is_some_and(|t| Some(t) == ns.init_start_ticks) {
        let _ = kill(Pid::from_raw(ns.init_pid), Signal::SIGKILL);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let left = scan().await;
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return found.len();
        }
        for pid in &left {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills every process carrying the marker for `task_id` (TERM, a short wait, then KILL) and
/// returns how many were found and which remain.
pub async fn sweep_marker(task_id: &str) -> (usize, Vec<i32>) {
    let scan = |id: &str| {
        let id = id.to_owned();
        async move { tokio::task::spawn_blocking(move || marker_pids(&id)).await.unwrap_or_default() }
    };
    let found = scan(task_id).await;
    if found.is_empty() {
        return (0, Vec::new());
    }
    for pid in &found {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    let mut left = found.clone();
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = scan(task_id).await;
    }
    for pid in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let remaining = scan(task_id).await;
        if remaining.is_empty() || tokio::time::Instant::now() >= deadline {
            return (found.len(), remaining);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the process recorded in `material` still runs (same pid *and* start time).
pub fn leader_alive(material: &ProofMaterial) -> bool {
    match (start_ticks(material.pid), material.start_ticks) {
        (Some(now), Some(then)) => now == then && !is_zombie(material.pid),
        (Some(_), None) => !is_zombie(material.pid),
        (None, _) => false,
    }
}
