//! Leftover sandboxes: processes of this bridge's task sandboxes that outlived the bridge
//! that started them, found by what identifies them and stopped only when provably its own.
//!
//! Three things identify them, each one the bridge's own by construction:
//! - the sandbox variable ([`SANDBOX_VAR`](super::tether::SANDBOX_VAR)) in a bwrap process of the bridge's user, naming a
//!   task of this bridge's store (only the bridge puts it there, and bwrap keeps it from the
//!   program) — it finds a sandbox's init that bwrap never released, whose task recorded
//!   nothing yet;
//! - the task's PID namespace as its recovery guard recorded it, while the namespace's init
//!   is the very process recorded (same pid, same start time): killing it ends the namespace;
//! - the task's cgroup: a group of this bridge's instance directory (`cgroup.kill`).
//!
//! Anything else (a process that carries only the task marker, without the sandbox) is not
//! attributable here and keeps its workdir closed, as the proof rules say.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::cgroup::{self, Cgroups};
use super::procfs::{namespace_pids, pid_namespace, sandbox_processes, start_ticks};
use super::supervise::{NamespaceProof, ProofMaterial};

/// How long stopping a task's leftovers may take before what is left is reported.
pub const STOP_BOUND: Duration = Duration::from_secs(5);

/// One task's leftover processes, and where they were found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftover {
    /// The task.
    pub task_id: String,
    /// bwrap processes carrying the sandbox variable.
    pub sandbox: Vec<i32>,
    /// The PID namespaces those processes are the init of (not the bridge's own), and the
    /// processes in them: what the sandbox ran, killed with its init.
    pub sandbox_namespaces: Vec<u64>,
    /// The recorded PID namespace, while its recorded init still runs.
    pub namespace: Option<NamespaceProof>,
    /// The processes in that namespace.
    pub in_namespace: Vec<i32>,
    /// The task's cgroup, while it holds a process.
    pub cgroup: Option<PathBuf>,
    /// The processes in that cgroup.
    pub in_cgroup: Vec<i32>,
}

impl Leftover {
    /// Every process found, once, in order.
    pub fn pids(&self) -> Vec<i32> {
        let mut all: Vec<i32> = self.sandbox.iter().chain(&self.in_namespace).chain(&self.in_cgroup).copied().collect();
        for ns in &self.sandbox_namespaces {
            all.extend(namespace_pids(*ns));
        }
        all.sort_unstable();
        all.dedup();
        all
    }

    /// What found them: `sandbox_variable`, `pid_namespace`, `cgroup`.
    pub fn found_by(&self) -> Vec<&'static str> {
        let mut ways = Vec::new();
        if !self.sandbox.is_empty() {
            ways.push("sandbox_variable");
        }
        if self.namespace.is_some() {
            ways.push("pid_namespace");
        }
        if self.cgroup.is_some() {
            ways.push("cgroup");
        }
        ways
    }

    /// The operator's view (`doctor`, `admin_workdir_status`): pids, never a path.
    pub fn to_json(&self) -> Value {
        json!({ "task_id": self.task_id, "processes": self.pids(), "found_by": self.found_by() })
    }

    fn is_empty(&self) -> bool {
        self.sandbox.is_empty() && self.namespace.is_none() && self.cgroup.is_none()
    }
}

/// What the bridge knows when it looks: its store's tasks, its guards' proof material, its
/// cgroups and where its state lives.
pub struct Scope<'a> {
    /// Whether a task id is one of this bridge's tasks (its store holds it).
    pub is_ours: &'a dyn Fn(&str) -> bool,
    /// Tasks that must not count (this bridge's running tasks).
    pub active: &'a [String],
    /// The proof material each guard recorded: (task id, material).
    pub proofs: &'a [(String, ProofMaterial)],
    /// The bridge's task cgroups, where cgroup v2 is delegated.
    pub cgroups: Option<&'a Cgroups>,
    /// The state directory (names this bridge's cgroup instance).
    pub state_dir: &'a Path,
    /// Only processes started before this instant (clock ticks since boot) count: at start-up,
    /// the bridge's own start.
    pub started_before: Option<u64>,
}

/// Finds the leftover sandboxes in `scope`, by task. Blocking (reads `/proc` and cgroupfs).
pub fn find(scope: &Scope<'_>) -> Vec<Leftover> {
    let mut found: Vec<Leftover> = Vec::new();
    let counts = |task: &str| !scope.active.iter().any(|a| a == task);
    let old_enough = |pid: i32| match (scope.started_before, start_ticks(pid)) {
        (Some(limit), Some(t)) => t <= limit,
        (None, Some(_)) => true,
        (_, None) => false,
    };
    fn entry<'f>(found: &'f mut Vec<Leftover>, task: &str) -> &'f mut Leftover {
        if let Some(i) = found.iter().position(|l| l.task_id == task) {
            return &mut found[i];
        }
        found.push(Leftover { task_id: task.to_owned(), ..Default::default() });
        found.last_mut().expect("just pushed")
    }
    let own_ns = pid_namespace(std::process::id() as i32);
    for (pid, task) in sandbox_processes() {
        if counts(&task) && (scope.is_ours)(&task) && old_enough(pid) && is_bwrap(pid) {
            let e = entry(&mut found, &task);
            e.sandbox.push(pid);
            if let Some(ns) = pid_namespace(pid).filter(|ns| Some(*ns) != own_ns && !e.sandbox_namespaces.contains(ns))
            {
                e.sandbox_namespaces.push(ns);
            }
        }
    }
    for (task, material) in scope.proofs.iter().filter(|(task, m)| counts(task) && m.marker == *task) {
        if let Some(ns) = material.namespace {
            let init_is_recorded = ns.init_start_ticks.is_some() && start_ticks(ns.init_pid) == ns.init_start_ticks;
            let inside = namespace_pids(ns.pid_ns);
            if init_is_recorded && old_enough(ns.init_pid) && !inside.is_empty() {
                let e = entry(&mut found, task);
                e.namespace = Some(ns);
                e.in_namespace = inside;
            }
        }
        if let Some(dir) = &material.cgroup
            && cgroup::is_own_group(dir, scope.state_dir, task)
            && cgroup::populated(dir)
        {
            let e = entry(&mut found, task);
            e.in_cgroup = cgroup::pids(dir);
            e.cgroup = Some(dir.clone());
        }
    }
    for (task, dir) in scope.cgroups.map(Cgroups::populated_groups).unwrap_or_default() {
        if counts(&task) && found.iter().all(|l| l.task_id != task || l.cgroup.is_none()) {
            let e = entry(&mut found, &task);
            e.in_cgroup = cgroup::pids(&dir);
            e.cgroup = Some(dir);
        }
    }
    found.retain(|l| !l.is_empty());
    found
}

/// Whether `pid` runs bwrap (its executable's name; an upgraded one reads `… (deleted)`).
fn is_bwrap(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|exe| exe.file_name().and_then(|n| n.to_str()).map(str::to_owned))
        .is_some_and(|name| name == "bwrap" || name == "bwrap (deleted)")
}

/// Stops one task's leftovers: `cgroup.kill` on its group, `SIGKILL` to its namespace's init
/// (the kernel ends the namespace) and to each sandbox process; then waits, at most
/// [`STOP_BOUND`], until none is left. Returns the processes still there (empty: stopped).
#[expect(
    clippy::disallowed_methods,
    reason = "/proc and cgroupfs are kernel memory; the scans run on blocking threads"
)]
pub async fn stop(leftover: &Leftover) -> Vec<i32> {
    let l = leftover.clone();
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(dir) = &l.cgroup {
            let _ = std::fs::write(dir.join("cgroup.kill"), b"1");
        }
        if let Some(ns) = l.namespace
            && start_ticks(ns.init_pid) == ns.init_start_ticks
        {
            let _ = kill(Pid::from_raw(ns.init_pid), Signal::SIGKILL);
        }
        for pid in &l.sandbox {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    })
    .await;
    let deadline = tokio::time::Instant::now() + STOP_BOUND;
    loop {
        let l = leftover.clone();
        let left = tokio::task::spawn_blocking(move || still_there(&l)).await.unwrap_or_default();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What of `leftover` still runs: those of its sandbox processes that still carry the
/// variable, its namespaces' members, its cgroup's. Blocking.
fn still_there(leftover: &Leftover) -> Vec<i32> {
    let marked: Vec<i32> =
        sandbox_processes().into_iter().filter(|(_, task)| *task == leftover.task_id).map(|(pid, _)| pid).collect();
    let mut left: Vec<i32> = leftover.sandbox.iter().copied().filter(|p| marked.contains(p)).collect();
    for ns in leftover.namespace.map(|n| n.pid_ns).iter().chain(&leftover.sandbox_namespaces) {
        left.extend(namespace_pids(*ns));
    }
    if let Some(dir) = leftover.cgroup.as_deref().filter(|d| cgroup::populated(d)) {
        let inside = cgroup::pids(dir);
        // Populated without a readable pid is still populated: no proof.
        left.extend(if inside.is_empty() { vec![0] } else { inside });
    }
    left.sort_unstable();
    left.dedup();
    left
}

#[cfg(test)]
#[allow(
    clippy::disallowed_types,
    clippy::zombie_processes,
    reason = "the tests start their own stand-in processes, and reap them with waitpid"
)]
mod tests {
    use super::*;
    use nix::sys::wait::{WaitStatus, waitpid};

    /// Starts `program 30` carrying the sandbox variable for `task`; returns its pid once it
    /// has executed (its environment is readable).
    fn start(program: &Path, task: &str) -> i32 {
        let child = std::process::Command::new(program)
            .arg("30")
            .env_clear()
            .env(super::super::tether::SANDBOX_VAR, task)
            .spawn()
            .expect("spawn");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !sandbox_processes().iter().any(|(p, _)| *p == pid) {
            assert!(std::time::Instant::now() < deadline, "{pid} never showed its variable");
            std::thread::sleep(Duration::from_millis(5));
        }
        pid
    }

    /// A stand-in for bwrap (a copy of `sleep` named `bwrap`, since the finder reads the
    /// executable's name): found for a task of the store, not for another bridge's task, not
    /// for a running task, not when younger than the start, not when it is no bwrap; stopped.
    #[tokio::test]
    async fn a_sandbox_process_of_this_bridge_is_found_and_stopped_and_no_other() {
        let dir = tempfile::tempdir().expect("dir");
        let bwrap = dir.path().join("bwrap");
        std::fs::copy("/bin/sleep", &bwrap).expect("copy sleep");
        let (ours, theirs) = (crate::ids::task_id(), crate::ids::task_id());
        let stray = start(&bwrap, &ours);
        let foreign = start(&bwrap, &theirs);
        let not_bwrap = start(Path::new("/bin/sleep"), &ours);
        let is_ours = |task: &str| task == ours;
        let scope = |active, started_before| Scope {
            is_ours: &is_ours,
            active,
            proofs: &[],
            cgroups: None,
            state_dir: dir.path(),
            started_before,
        };
        let found = find(&scope(&[], None));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].task_id, ours);
        assert_eq!(found[0].sandbox, vec![stray], "only the bwrap of this bridge's task: {found:?}");
        assert_eq!(found[0].found_by(), vec!["sandbox_variable"]);
        let running = [ours.clone()];
        assert!(find(&scope(&running, None)).is_empty(), "a running task's sandbox is no leftover");
        let before = start_ticks(stray).expect("ticks") - 1;
        assert!(find(&scope(&[], Some(before))).is_empty(), "a process younger than the start is not a leftover");

        assert!(stop(&found[0]).await.is_empty(), "stopped");
        let pid = Pid::from_raw(stray);
        assert_eq!(waitpid(pid, None).expect("wait"), WaitStatus::Signaled(pid, Signal::SIGKILL, false));
        for other in [foreign, not_bwrap] {
            let pid = Pid::from_raw(other);
            assert_eq!(waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive));
            kill(pid, Signal::SIGKILL).expect("kill");
            waitpid(pid, None).expect("reap");
        }
    }

    /// After the bridge that pinned a namespace is gone, its inode number may name another
    /// namespace: only the recorded init (same pid, same start time, not a zombie) keeps it
    /// the task's.
    #[test]
    fn a_recorded_namespace_holds_processes_only_while_its_recorded_init_runs() {
        let me = std::process::id() as i32;
        let ticks = start_ticks(me);
        let proof = |init_pid, init_start_ticks| NamespaceProof { pid_ns: 1, init_pid, init_start_ticks };
        assert!(proof(me, ticks).may_hold_processes(), "its init runs");
        assert!(!proof(me, ticks.map(|t| t + 1)).may_hold_processes(), "another process under the init's pid");
        assert!(proof(me, None).may_hold_processes(), "never read: no proof either way");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id() as i32;
        let recorded = start_ticks(pid);
        child.wait().expect("reap");
        assert!(!proof(pid, recorded).may_hold_processes(), "its init is gone");
    }
}
