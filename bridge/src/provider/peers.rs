//! Whether a socket peer is one of the bridge's own task processes: decided from the kernel's
//! peer credentials and `/proc`, once per connection.
//!
//! A process is inside a task when it carries a task marker, when it is in a task's cgroup or
//! PID namespace, or when it descends from the bridge (every provider child, every orphan the
//! subreaper adopted, every process nested in a sandbox). A task's process is always visible
//! to the bridge (its namespaces are the bridge's descendants), so a peer whose pid the kernel
//! could not translate is not one; a peer that vanished before it could be looked at counts as
//! inside a task (the check fails closed). Such a peer never acts as the local operator, nor
//! as anyone else, on the socket.

use std::sync::Mutex;

use super::cgroup::Cgroups;
use super::procfs::{pid_namespace, read_environ, stat_fields};
use super::spawner::MARKER_VAR;

/// Why a peer counts as a task process, and which task when that is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOrigin {
    /// The task, when it is known.
    pub task_id: Option<String>,
    /// What showed it: `marker`, `cgroup`, `pid_namespace`, `descendant` or `unknown_pid`.
    pub evidence: &'static str,
}

/// A provider child the bridge runs now: its leader pid, task and PID namespace.
#[derive(Debug, Clone)]
struct Live {
    leader: i32,
    task_id: String,
    pid_ns: Option<u64>,
}

static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<Live>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records a started provider child (called by the spawn).
pub(super) fn register(leader: i32, task_id: &str, pid_ns: Option<u64>) {
    live().push(Live { leader, task_id: task_id.to_owned(), pid_ns });
}

/// Forgets a provider child whose stop is over.
pub(super) fn unregister(leader: i32) {
    live().retain(|l| l.leader != leader);
}

/// Whether the process `pid` (as the kernel reported the peer; `None` when it could not) is
/// inside a task of the bridge `bridge_pid`, whose task cgroups (if any) are `cgroups`.
/// Blocking (reads `/proc`).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub fn task_origin(pid: Option<i32>, bridge_pid: i32, cgroups: Option<&Cgroups>) -> Option<TaskOrigin> {
    let unknown = || Some(TaskOrigin { task_id: None, evidence: "unknown_pid" });
    let pid = pid.filter(|p| *p > 0)?;
    if pid == bridge_pid {
        return None;
    }
    // The environment and the namespace need ptrace-read access (a process that made itself
    // non-dumpable hides them); the cgroup and the parent chain are readable by anyone.
    let prefix = format!("{MARKER_VAR}=");
    if let Some(environ) = read_environ(pid)
        && let Some(var) = environ.split(|&b| b == 0).find(|v| v.starts_with(prefix.as_bytes()))
    {
        let task_id = String::from_utf8_lossy(&var[prefix.len()..]).chars().take(64).collect();
        return Some(TaskOrigin { task_id: Some(task_id), evidence: "marker" });
    }
    if let Some(cgroups) = cgroups
        && let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        && let Some(task_id) = text.lines().find_map(|l| l.strip_prefix("0::")).and_then(|p| cgroups.task_of(p))
    {
        return Some(TaskOrigin { task_id: Some(task_id), evidence: "cgroup" });
    }
    let ns = pid_namespace(pid);
    if ns.is_some()
        && let Some(l) = live().iter().find(|l| l.pid_ns.is_some() && l.pid_ns == ns)
    {
        return Some(TaskOrigin { task_id: Some(l.task_id.clone()), evidence: "pid_namespace" });
    }
    // Up the parent chain: a descendant of the bridge is one of its children's processes.
    let mut current = pid;
    let mut nearest_leader: Option<String> = None;
    for _ in 0..4096 {
        let Some(parent) = stat_fields(current).and_then(|f| f.get(1)?.parse::<i32>().ok()) else {
            return unknown();
        };
        if nearest_leader.is_none() {
            nearest_leader = live().iter().find(|l| l.leader == current).map(|l| l.task_id.clone());
        }
        if parent == bridge_pid {
            return Some(TaskOrigin { task_id: nearest_leader, evidence: "descendant" });
        }
        if parent <= 1 {
            return None;
        }
        current = parent;
    }
    unknown()
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;

    #[test]
    fn the_test_process_itself_is_no_task_and_its_child_is_a_descendant() {
        let me = std::process::id() as i32;
        // The test binary is not a descendant of a pid that does not exist.
        assert_eq!(task_origin(Some(me), i32::MAX, None), None);
        // No pid: a peer outside the bridge's namespaces, which no task process is.
        assert_eq!(task_origin(None, me, None), None);
        assert_eq!(task_origin(Some(0), me, None), None);
        // A pid that is gone by the time it is looked at: fail closed.
        let mut gone = std::process::Command::new("true").spawn().expect("spawn true");
        let gone_pid = gone.id() as i32;
        gone.wait().expect("reap");
        assert_eq!(task_origin(Some(gone_pid), me, None), Some(TaskOrigin { task_id: None, evidence: "unknown_pid" }));
        let mut child = std::process::Command::new("sleep").arg("30").env_clear().spawn().expect("spawn sleep");
        let pid = child.id() as i32;
        register(pid, "agt_unit_peer", None);
        let origin = task_origin(Some(pid), me, None);
        unregister(pid);
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(origin, Some(TaskOrigin { task_id: Some("agt_unit_peer".into()), evidence: "descendant" }));
    }

    #[test]
    fn a_marked_process_names_its_task_even_outside_the_bridge() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .env(MARKER_VAR, "agt_unit_marked")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let origin = loop {
            let origin = task_origin(Some(pid), i32::MAX, None);
            if origin.as_ref().is_some_and(|o| o.evidence == "marker") || std::time::Instant::now() > deadline {
                break origin;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(origin, Some(TaskOrigin { task_id: Some("agt_unit_marked".into()), evidence: "marker" }));
    }
}
