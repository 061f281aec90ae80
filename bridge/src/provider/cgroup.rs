//! A cgroup per task, where cgroup v2 is delegated to the bridge (a systemd user unit with
//! `Delegate=yes`, or a bridge run as root): the child enters `<the bridge's cgroup>/
//! agent-bridge-tasks/<instance>/<task id>` before it executes (`<instance>` names the state
//! directory, so two bridges in one cgroup never touch each other's groups), so everything the task ever starts is in
//! it, whatever it does to its session, environment or namespaces. The stop is `cgroup.kill`
//! and its proof `populated 0` in `cgroup.events` (the kernel's count), also after a restart.
//!
//! [`Cgroups::detect`] decides once at startup, by creating and removing a probe group; where
//! it cannot, tasks get no cgroup and the other proofs apply.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory, under the bridge's own cgroup, that holds one cgroup per task.
const TASKS_DIR: &str = "agent-bridge-tasks";

/// Where the bridge may create task cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    /// `<cgroup2 mount><the bridge's cgroup>/agent-bridge-tasks`.
    root: PathBuf,
}

impl Cgroups {
    /// The delegated cgroup v2 of the bridge whose state lives in `state_dir`, if it has one it
    /// may write. Blocking (a few file operations).
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn detect(state_dir: &Path) -> Option<Cgroups> {
        let mount = cgroup2_mount()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
        let base = mount.join(path.trim_start_matches('/'));
        let root = base.join(TASKS_DIR).join(instance_name(state_dir));
        std::fs::create_dir_all(&root).ok()?;
        // A probe group proves the two things a task needs: creating a group, and moving a
        // process into it (write access to the common ancestor's cgroup.procs).
        let probe = root.join(format!("probe-{}", std::process::id()));
        let _ = std::fs::create_dir(&probe);
        let usable = probe.join("cgroup.kill").exists()
            && nix::unistd::access(&base.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK).is_ok()
            && nix::unistd::access(&probe.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK).is_ok();
        let _ = std::fs::remove_dir(&probe);
        usable.then_some(Cgroups { root })
    }

    /// The cgroup of `task_id`, created empty. Blocking.
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn create(&self, task_id: &str) -> std::io::Result<PathBuf> {
        let dir = self.root.join(task_id);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Removes every task group of this bridge that holds no process (start-up: those a
    /// previous bridge left; a populated one stays: its guard waits for it), and the empty
    /// instance directories of bridges that are gone (a plain `rmdir`, which fails on any
    /// directory that still holds a group). Blocking.
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn sweep_empty(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) && !populated(&entry.path()) {
                    remove_tree(&entry.path());
                }
            }
        }
        let Some(parent) = self.root.parent() else { return };
        let Ok(entries) = std::fs::read_dir(parent) else { return };
        for entry in entries.flatten() {
            if entry.path() != self.root && entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }

    /// The task groups of this bridge that still hold a process: (task id, group). Blocking.
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn populated_groups(&self) -> Vec<(String, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && populated(&e.path()))
            .filter_map(|e| Some((e.file_name().to_str()?.to_owned(), e.path())))
            .filter(|(name, _)| crate::ids::looks_like(name, "agt_"))
            .collect()
    }

    /// Kills whatever is left in this bridge's task groups (`cgroup.kill` on each; the
    /// bridge's way out, when no task of it runs any more). Blocking, and quick: cgroupfs is
    /// kernel memory. Returns the groups that held a process.
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn kill_all(&self) -> Vec<String> {
        let groups = self.populated_groups();
        for (_, dir) in &groups {
            let _ = std::fs::write(dir.join("cgroup.kill"), b"1");
        }
        groups.into_iter().map(|(task, _)| task).collect()
    }

    /// Removes this bridge's instance directory if no task group is left in it (an orderly
    /// stop). Blocking.
    #[expect(
        clippy::disallowed_methods,
        reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk"
    )]
    pub fn remove_if_empty(&self) {
        let _ = std::fs::remove_dir(&self.root);
    }

    /// Whether `path` (a cgroup path as `/proc/<pid>/cgroup` gives it, after `0::`) is one of
    /// this bridge's task cgroups; its task id when it is.
    pub fn task_of(&self, proc_cgroup: &str) -> Option<String> {
        let mount = cgroup2_mount()?;
        let full = mount.join(proc_cgroup.trim().trim_start_matches('/'));
        let rest = full.strip_prefix(&self.root).ok()?;
        rest.components().next().and_then(|c| c.as_os_str().to_str()).map(str::to_owned)
    }
}

/// The directory name of the bridge whose state lives in `state_dir` under
/// `agent-bridge-tasks/` (a digest, so two bridges in one cgroup never share one).
pub fn instance_name(state_dir: &Path) -> String {
    use sha2::Digest;
    crate::ids::hex(&sha2::Sha256::digest(state_dir.as_os_str().as_encoded_bytes())[..8])
}

/// Whether `dir`, a task cgroup recorded in a guard, is the group of `task_id` made by the
/// bridge whose state lives in `state_dir`: `…/agent-bridge-tasks/<instance>/<task id>`.
/// Only such a group is this bridge's to kill after a restart (wherever its cgroup is now).
pub fn is_own_group(dir: &Path, state_dir: &Path, task_id: &str) -> bool {
    let names: Vec<&str> = dir.components().rev().take(3).filter_map(|c| c.as_os_str().to_str()).collect();
    dir.is_absolute() && names == [task_id, instance_name(state_dir).as_str(), TASKS_DIR]
}

/// Whether a task cgroup still holds a process: `populated 1` in `cgroup.events`. A group
/// that is gone holds none; one whose events cannot be read is counted as populated.
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk")]
pub fn populated(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(events) => !events.lines().any(|l| l.trim() == "populated 0"),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The pids in a task cgroup and all its descendants (the ones a watcher waits for).
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk")]
pub fn pids(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    out
}

/// Kills every process in the group (`cgroup.kill`), waits (bounded, 2 s) for `populated 0`
/// and removes the group and whatever groups were made inside it. Returns whether it is empty.
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk")]
pub async fn kill_and_remove(dir: &Path) -> bool {
    let d = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || std::fs::write(d.join("cgroup.kill"), b"1")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let d = dir.to_path_buf();
        let busy = tokio::task::spawn_blocking(move || populated(&d)).await.unwrap_or(true);
        if !busy {
            let d = dir.to_path_buf();
            let _ = tokio::task::spawn_blocking(move || remove_tree(&d)).await;
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Removes an empty group and its empty descendants, deepest first. Blocking.
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk")]
pub fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid machine), from `/proc/self/mountinfo`.
#[expect(clippy::disallowed_methods, reason = "cgroupfs is kernel memory: reading or writing it never waits on a disk")]
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        right.split_whitespace().next().filter(|t| *t == "cgroup2")?;
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "the tests set up their own files and processes")]
mod tests {
    use super::*;

    #[test]
    fn a_task_cgroup_is_recognized_from_a_process_cgroup_line() {
        let Some(mount) = cgroup2_mount() else { return };
        let cg = Cgroups { root: mount.join("user.slice/agent-bridge.service").join(TASKS_DIR).join("0a1b") };
        let line = format!("/user.slice/agent-bridge.service/{TASKS_DIR}/0a1b/agt_0123/inner");
        assert_eq!(cg.task_of(&line).as_deref(), Some("agt_0123"));
        assert_eq!(cg.task_of("/user.slice/agent-bridge.service"), None);
        assert_eq!(cg.task_of("/system.slice/other"), None);
        assert_eq!(cg.task_of(&format!("/user.slice/agent-bridge.service/{TASKS_DIR}/ffff/agt_9")), None);
    }

    /// The way out's sweep (`kill_all`, the daemon's last act) ends what is left in every
    /// task group of this bridge. Where cgroup v2 is not delegated to this user it says so
    /// loudly; under `CI=true` as root, on a machine with cgroup v2, it must run.
    #[test]
    #[allow(clippy::disallowed_types, clippy::print_stderr, reason = "a test child, and a loud skip")]
    fn the_way_out_kills_what_is_left_in_every_task_group() {
        let state = tempfile::tempdir().expect("dir");
        let Some(cgroups) = Cgroups::detect(state.path()) else {
            let must = std::env::var("CI").as_deref() == Ok("true")
                && nix::unistd::geteuid().is_root()
                && cgroup2_mount().is_some();
            assert!(!must, "CI=true, root and cgroup v2: task cgroups should be available");
            eprintln!("\n*** SKIPPED: no delegated cgroup v2 for this user ***\n");
            return;
        };
        let task = crate::ids::task_id();
        let dir = cgroups.create(&task).expect("create");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).expect("move the child in");
        assert_eq!(cgroups.populated_groups(), vec![(task.clone(), dir.clone())]);
        assert_eq!(cgroups.kill_all(), vec![task]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().expect("wait").signal(), Some(9), "killed by cgroup.kill");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while populated(&dir) {
            assert!(std::time::Instant::now() < deadline, "the group never emptied");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(cgroups.populated_groups().is_empty());
        remove_tree(&dir);
        cgroups.remove_if_empty();
    }

    #[test]
    fn only_a_group_of_this_bridge_and_this_task_is_its_own() {
        let state = Path::new("/home/op/.local/state/agent-bridge");
        let own = Path::new("/sys/fs/cgroup/user.slice/u.service").join(TASKS_DIR).join(instance_name(state));
        assert!(is_own_group(&own.join("agt_1"), state, "agt_1"));
        assert!(!is_own_group(&own.join("agt_1"), state, "agt_2"), "another task's group");
        assert!(!is_own_group(&own.join("agt_1"), Path::new("/other/state"), "agt_1"), "another bridge's");
        assert!(!is_own_group(&own.join("agt_1/inner"), state, "agt_1"), "a group inside it is not the task's");
        assert!(!is_own_group(Path::new("agent-bridge-tasks/x/agt_1"), state, "agt_1"));
    }

    #[test]
    fn a_missing_group_holds_nothing_and_an_unreadable_one_counts_as_populated() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(!populated(&dir.path().join("gone")), "a removed group is empty");
        std::fs::create_dir(dir.path().join("cgroup.events")).expect("a directory where the file should be");
        assert!(populated(dir.path()), "unreadable events are no proof");
        std::fs::remove_dir(dir.path().join("cgroup.events")).expect("rm");
        std::fs::write(dir.path().join("cgroup.events"), "populated 0\nfrozen 0\n").expect("write");
        assert!(!populated(dir.path()));
        std::fs::write(dir.path().join("cgroup.events"), "populated 1\nfrozen 0\n").expect("write");
        assert!(populated(dir.path()));
    }
}
