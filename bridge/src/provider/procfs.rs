//! Reading `/proc`: which processes belong to a task (by marker, by PID namespace), and the
//! few facts of a process the stop proof needs (state, parent, start time). Read-only; every
//! function is blocking and cheap per process, and a process that cannot be read (gone,
//! another user's) is skipped, never an error.

use std::time::Duration;

use super::spawner::MARKER_VAR;
use super::tether::SANDBOX_VAR;

/// Live processes of a task: those carrying its marker or its sandbox variable (bwrap's own
/// processes, such as a sandbox's init bwrap never released) and, with `pid_ns`, those in its
/// PID namespace. Blocking (reads `/proc`).
pub fn task_pids(task_id: &str, pid_ns: Option<u64>) -> Vec<i32> {
    let mut pids = tagged_pids(&[&format!("{MARKER_VAR}={task_id}"), &format!("{SANDBOX_VAR}={task_id}")]);
    if let Some(ns) = pid_ns {
        pids.extend(namespace_pids(ns).into_iter().filter(|p| !pids.contains(p)).collect::<Vec<_>>());
    }
    pids
}

/// Pids of live processes in the PID namespace `pid_ns`. A process whose namespace cannot be
/// read (another user's, gone, a zombie) is not counted: every process of a task runs as the
/// bridge user, and a zombie no longer runs. Blocking (reads `/proc`).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub fn namespace_pids(pid_ns: u64) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| pid_namespace(pid) == Some(pid_ns) && !is_zombie(pid))
        .collect()
}

/// The inode of `pid`'s PID namespace, or `None` when it cannot be read.
pub fn pid_namespace(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Pids of live (non-zombie) processes whose environment carries `AGENT_BRIDGE_TASK=<task_id>`.
///
/// Processes of other users cannot be read and are skipped: a provider runs as the bridge
/// user, and so does everything it starts.
pub fn marker_pids(task_id: &str) -> Vec<i32> {
    tagged_pids(&[&format!("{MARKER_VAR}={task_id}")])
}

/// Pids of live (non-zombie) processes whose environment holds one of `needles` (whole
/// `NAME=value` entries), in one pass over `/proc`.
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
fn tagged_pids(needles: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let own = std::process::id() as i32;
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Some(environ) = read_environ(pid) else { continue };
        if environ.split(|&b| b == 0).any(|var| needles.iter().any(|n| var == n.as_bytes())) && !is_zombie(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Live (non-zombie) processes of the bridge's own user carrying [`SANDBOX_VAR`], bwrap's
/// processes of a task sandbox: each with the task it names, in one pass over `/proc`. Runs
/// as root too (a bridge allowed to), so the owner is checked, not implied by the read.
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub fn sandbox_processes() -> Vec<(i32, String)> {
    let prefix = format!("{SANDBOX_VAR}=");
    let uid = nix::unistd::getuid().as_raw();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let own = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == own {
            continue;
        }
        let Some(environ) = read_environ(pid) else { continue };
        let Some(task) = environ.split(|&b| b == 0).find_map(|var| var.strip_prefix(prefix.as_bytes())) else {
            continue;
        };
        if let Ok(task) = std::str::from_utf8(task)
            && real_uid(pid) == Some(uid)
            && !is_zombie(pid)
        {
            found.push((pid, task.to_owned()));
        }
    }
    found
}

/// The real uid of `pid` (`Uid:` in `/proc/<pid>/status`, as this process's namespace sees it).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub fn real_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// Reads a process's environment, or `None` if it cannot be read (gone, another user's).
///
/// A process in the middle of `execve` reads as having neither environment nor command line
/// for a moment (the new image's are not laid out yet): such a read is retried briefly, so a
/// sweep never misses a marked process that happens to be exec-ing.
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub(super) fn read_environ(pid: i32) -> Option<Vec<u8>> {
    const TRIES: usize = 5;
    for attempt in 1..=TRIES {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        if !environ.is_empty() || attempt == TRIES || !mid_exec(pid) {
            return Some(environ);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Whether `pid` looks like a user process caught inside `execve`: no command line, and
/// neither a kernel thread nor a zombie (which have none either).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub(super) fn mid_exec(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty())
        && !is_kernel_thread(pid)
        && !is_zombie(pid)
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in the flags, field 9 of `/proc/<pid>/stat`).
pub(super) fn is_kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_fields(pid).and_then(|f| f.get(6)?.parse::<u64>().ok()).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

pub(super) fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state == "Z"))
}

/// `/proc/<pid>/stat` fields after the command name (field 3 onwards).
#[expect(clippy::disallowed_methods, reason = "/proc is kernel memory: reading it never waits on a disk")]
pub(super) fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The process's start time in clock ticks since boot, or `None` if it is gone.
pub fn start_ticks(pid: i32) -> Option<u64> {
    // Field 22 overall is index 19 after the command name (fields 3.. start at index 0).
    stat_fields(pid)?.get(19)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;

    #[test]
    fn a_marked_child_is_found_and_a_user_process_is_not_a_kernel_thread() {
        let me = std::process::id() as i32;
        assert!(!is_kernel_thread(me));
        assert!(read_environ(me).is_some_and(|e| !e.is_empty()), "this test runs with an environment");
        let task = format!("agt_unit_{me}");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .env(MARKER_VAR, &task)
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !marker_pids(&task).contains(&pid) {
            assert!(std::time::Instant::now() < deadline, "the marked child {pid} is never found");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(marker_pids(&task).is_empty());
    }

    #[test]
    fn an_empty_environment_of_a_settled_process_reads_as_empty() {
        let mut child = std::process::Command::new("sleep").arg("30").env_clear().spawn().expect("spawn sleep");
        let pid = child.id() as i32;
        // Once the child has exec-ed (its command name is `sleep`), its environment is empty
        // for good: it has a command line, so the read says so instead of retrying.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim() != "sleep").unwrap_or(true) {
            assert!(std::time::Instant::now() < deadline, "the child never exec-ed");
            std::thread::sleep(Duration::from_millis(5));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while mid_exec(pid) {
            assert!(std::time::Instant::now() < deadline, "the child never finished its exec");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(read_environ(pid), Some(Vec::new()));
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(read_environ(pid), None, "a reaped process cannot be read");
    }
}
