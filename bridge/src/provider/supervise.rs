//! Supervising a started provider child: the stop ladder and the proof that it is gone, the
//! marker sweep, the watch on a recorded process, and the reaping of orphans.
//!
//! A stop is *proven* when the leader was reaped, no process is left in the task's cgroup
//! (where cgroup v2 is delegated) or PID namespace (the kernel's proof: nothing inside can
//! leave it) and, as a second check and the proof where there is no sandbox, no process
//! carrying the marker remains (descendants inherit it even when they leave the group with
//! `setsid`). The children themselves are started by [`super::process`] through
//! [`super::spawner`]; this module never starts one.

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

use super::procfs::{is_zombie, marker_pids, namespace_pids, start_ticks, stat_fields, task_pids};
use super::sandbox::SandboxInfo;
use super::spawner::{Leader, forget_leader, leaders};

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
    /// It runs beside the task's own process: its stop ends its sandbox only (see
    /// [`SpawnSpec::beside`](super::process::SpawnSpec::beside)).
    beside: bool,
}

/// A started sandbox: its init and namespace, and the private `/tmp` to remove after the stop.
#[derive(Debug)]
pub struct Sandboxed {
    ns: NamespaceProof,
    private_tmp: Option<PathBuf>,
    /// The namespace itself, held open: while the bridge holds it, the kernel cannot give its
    /// inode number to another namespace, so "a process with this inode" means "a process of
    /// this task" (without it, another sandbox started the moment this one ended could take
    /// the number and pass for a survivor).
    _pinned: Option<std::fs::File>,
}

impl Sandboxed {
    /// The sandbox bwrap reported (`info`), whose private `/tmp` is `private_tmp`: its init's
    /// start time read and its namespace pinned. Reads `/proc` (kernel memory).
    pub fn started(info: SandboxInfo, private_tmp: Option<PathBuf>) -> Sandboxed {
        Sandboxed {
            ns: NamespaceProof {
                pid_ns: info.pid_ns,
                init_pid: info.init_pid,
                init_start_ticks: start_ticks(info.init_pid),
            },
            private_tmp,
            _pinned: pin_namespace(info.init_pid, info.pid_ns),
        }
    }

    /// Its PID namespace.
    pub fn namespace(&self) -> u64 {
        self.ns.pid_ns
    }
}

/// Opens the PID namespace `pid_ns` through its init `pid` (close-on-exec), if that process
/// is still in it: holding it open keeps the namespace's inode number from being reused.
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: opening it never waits on a disk")]
fn pin_namespace(pid: i32, pid_ns: u64) -> Option<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(format!("/proc/{pid}/ns/pid")).ok()?;
    (file.metadata().ok()?.ino() == pid_ns).then_some(file)
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

impl Supervised {
    /// Takes over a started leader of `task_id`: its sandbox, cgroup and egress gate, if any,
    /// go with it until the stop.
    pub fn new(
        leader: Leader,
        task_id: String,
        sandbox: Option<Sandboxed>,
        cgroup: Option<PathBuf>,
        gate: Option<crate::egress::Gate>,
    ) -> Supervised {
        let pid = leader.pid();
        Supervised {
            child: leader.into_child(),
            pid,
            start_ticks: start_ticks(pid),
            task_id,
            sandbox,
            cgroup,
            _gate: gate,
            beside: false,
        }
    }

    /// Marks it as running beside the task's own process: its stop leaves the task's cgroup
    /// and other marked processes alone, and proves its own end by its sandbox's PID namespace
    /// (the spawn gives such a child a sandbox, never a cgroup or a `/tmp` on the host).
    pub fn beside(&mut self) {
        self.beside = true;
    }

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
            forget_leader(self.pid);
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
        // Beside the task's own process, the marker is the task's: its sweep is the task's stop.
        let (marked, mut remaining) = if self.beside { (0, Vec::new()) } else { sweep_marker(&self.task_id).await };
        survivors_killed += marked;
        if let Some(ns) = ns {
            let left = tokio::task::spawn_blocking(move || namespace_pids(ns.pid_ns)).await.unwrap_or_default();
            remaining.extend(left.into_iter().filter(|p| !remaining.contains(p)).collect::<Vec<_>>());
        }
        remaining.extend(cgroup_left.into_iter().filter(|p| !remaining.contains(p)).collect::<Vec<_>>());
        if let Some(tmp) = self.sandbox.as_ref().and_then(|s| s.private_tmp.clone())
            && remaining.is_empty()
        {
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

/// A descriptor, registered with the reactor, that becomes readable when process `pid`
/// terminates (Linux `pidfd_open`, which `nix` does not wrap).
#[expect(
    unsafe_code,
    reason = "pidfd_open is a raw system call; its descriptor is taken over and registered with the reactor"
)]
fn watch_pid(pid: i32) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor, or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(std::io::Error::other)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
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

/// Makes this process a child subreaper: descendants whose parent dies (an agent's stray
/// background command, a `setsid` grandchild) are reparented to the bridge instead of init, so
/// the bridge sees them and reaps them.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Reaps every exited child of this process that is not a leader tokio is waiting for
/// (orphans reparented to the subreaper); returns how many. Blocking (reads `/proc`).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
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
