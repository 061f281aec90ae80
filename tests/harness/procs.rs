//! Processes as `/proc` shows them: the bridge's task marker, children, environments, states
//! and start times (so a reused pid never looks alive), and a crash that leaves an orphan.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::{TestBridge, measured};

impl TestBridge {
    /// Submits `orphan:SECONDS` as a writer and kills the bridge (SIGKILL) once the provider
    /// has started and before the runner's cleanup could sweep its marker: the provider leaves
    /// its `setsid sleep` orphan behind, and that orphan outlives the bridge. Returns the task
    /// id and the orphan's pid, with the bridge down. Only on a bridge started with
    /// `SERVERFS_AGENT_SANDBOX=off`: in the sandbox no orphan outlives its bridge (the
    /// `containment` suite shows it).
    ///
    /// The kill must land between the provider's start (its start line is written right
    /// after the spawn) and the sweep that follows its result (a few milliseconds later):
    /// the bridge's children are watched directly, and an attempt that lands outside the
    /// window (no orphan survives) is retried on a fresh task.
    pub async fn crash_leaving_an_orphan(&mut self, seconds: u32) -> (String, i32) {
        for attempt in 1..=20 {
            let bridge = self.pid().expect("the bridge is running") as i32;
            let id = self.submit_ok(json!({ "prompt": format!("orphan:{seconds}") })).await;
            let marker = format!("AGENT_BRIDGE_TASK={id}");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            // Tight loop on purpose: the window is a few milliseconds wide.
            let started = loop {
                // The provider, not the bridge's own git (the change-set baseline taken just
                // before it, a worktree's creation), which says what it is in `AGENT_BRIDGE_GIT`.
                let provider = |pid: i32| {
                    environ_has(pid, &marker)
                        && !read_environ(pid)
                            .is_some_and(|e| e.split(|&b| b == 0).any(|v| v.starts_with(b"AGENT_BRIDGE_GIT=")))
                };
                if child_pids(bridge).iter().any(|&pid| provider(pid)) {
                    break true;
                }
                if std::time::Instant::now() > deadline {
                    break false;
                }
                std::thread::yield_now();
            };
            self.crash().await;
            assert!(started, "the provider of {id} never started:\n{}", self.log());
            // The provider runs on without its bridge: it leaves the orphan and exits.
            // "Nothing carries the marker" must hold for several scans in a row before the
            // attempt counts as missed: a process caught in the middle of an exec reads as
            // having no environment for a moment.
            let limit = std::time::Instant::now() + Duration::from_secs(10);
            let mut empty_scans = 0;
            let orphan = loop {
                let pids = marker_pids(&id);
                let sleepers: Vec<i32> =
                    pids.iter().copied().filter(|&p| comm(p).as_deref() == Some("sleep")).collect();
                if pids.len() == 1 && sleepers.len() == 1 {
                    break Some(sleepers[0]);
                }
                empty_scans = if pids.is_empty() { empty_scans + 1 } else { 0 };
                if empty_scans >= 5 || std::time::Instant::now() > limit {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            if let Some(pid) = orphan {
                // Pins the orphan's identity (see `alive`) while it is certainly the orphan.
                assert!(alive(pid), "the orphan {pid} of {id} is alive");
                measured(format_args!("the orphan of {id} outlived its bridge (attempt {attempt})"));
                return (id, pid);
            }
            // Too early (no start line yet) or too late (already swept): start over. Whatever
            // of the missed attempt still runs is ended, so its guard can clear.
            self.spawn().await;
            for pid in marker_pids(&id) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            self.writer_idle().await;
        }
        panic!("could not crash the bridge between a provider's start and its cleanup in 20 attempts");
    }
}

/// Pids of live (not zombie) processes carrying the bridge's task marker
/// `AGENT_BRIDGE_TASK=<task_id>`, read from `/proc` like the bridge does.
pub fn marker_pids(task_id: &str) -> Vec<i32> {
    let needle = format!("AGENT_BRIDGE_TASK={task_id}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Some(environ) = read_environ(pid) else { continue };
        if !environ.split(|&b| b == 0).any(|var| var == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next().map(str::to_owned));
        if state.is_some_and(|s| s != "Z") {
            pids.push(pid);
        }
    }
    pids
}

/// The child pids of `pid` (all its threads), from `/proc/<pid>/task/*/children`.
pub fn child_pids(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// Whether the environment of `pid` holds exactly `var` (`KEY=VALUE`).
pub fn environ_has(pid: i32, var: &str) -> bool {
    read_environ(pid).is_some_and(|environ| environ.split(|&b| b == 0).any(|v| v == var.as_bytes()))
}

/// The environment of `pid`, or `None` if it cannot be read. A process in the middle of
/// `execve` reads as having neither environment nor command line for a moment, so such a read
/// of a live user process is retried briefly (as the bridge's own sweep does).
pub fn read_environ(pid: i32) -> Option<Vec<u8>> {
    for attempt in 1..=5 {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let mid_exec = || {
            let no_cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty());
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let rest: Vec<&str> = stat[stat.rfind(')').map_or(stat.len(), |i| i + 1)..].split_whitespace().collect();
            let kernel_thread = rest.get(6).and_then(|f| f.parse::<u64>().ok()).is_some_and(|f| f & 0x0020_0000 != 0);
            no_cmdline && !kernel_thread && rest.first().is_some_and(|&state| state != "Z")
        };
        if !environ.is_empty() || attempt == 5 || !mid_exec() {
            return Some(environ);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// The command name of `pid` (`/proc/<pid>/comm`).
pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_owned())
}

/// The state letter and parent pid of `pid` (`/proc/<pid>/stat` fields 3 and 4).
pub fn state_and_parent(pid: i32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.to_owned();
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` is a live process (it exists and is not a zombie). A pid is identified with
/// the start time it had the first time this was asked, so a pid the kernel reuses for another
/// process (this machine wraps at 32768, and the suite spawns thousands) never looks alive.
pub fn alive(pid: i32) -> bool {
    static FIRST_SEEN: std::sync::Mutex<BTreeMap<i32, u64>> = std::sync::Mutex::new(BTreeMap::new());
    let Some(start) = start_ticks(pid) else { return false };
    let mut seen = FIRST_SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let first = *seen.entry(pid).or_insert(start);
    first == start && state_and_parent(pid).is_some_and(|(state, _)| state != "Z")
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.parse().ok()
}

/// Zombie children of `parent`: processes in state `Z` whose parent is `parent`.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| state_and_parent(pid).is_some_and(|(state, ppid)| state == "Z" && ppid == parent))
        .collect()
}

/// Live (not zombie) `bwrap` processes whose command line names a path under `root`: the
/// sandboxes of the test bridge that lives there (their private `/tmp` is under its state
/// directory). Each with its command line, for a failure to name.
pub fn sandboxes_under(root: &std::path::Path) -> Vec<(i32, String)> {
    let root = root.as_os_str().as_encoded_bytes();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let is_bwrap = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().starts_with("bwrap")))
            .unwrap_or(false);
        if !is_bwrap || state_and_parent(pid).is_none_or(|(state, _)| state == "Z") {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if cmdline.windows(root.len()).any(|w| w == root) {
            let shown: Vec<String> =
                cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            found.push((pid, shown.join(" ").chars().take(300).collect()));
        }
    }
    found
}

/// Whether `pid` is a sandbox's own process above the agent: bwrap, or the relay the sandbox
/// runs first when the task has an egress gate (`agent-bridge sandbox-exec`).
pub fn is_sandbox_frame(pid: i32) -> bool {
    comm(pid).is_some_and(|c| c == "bwrap")
        || std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"sandbox-exec"))
}
