//! Tethering a child to the bridge: its parent-death signal is armed in the child itself,
//! before it executes anything, so a sandbox or a helper started by a bridge that dies at that
//! very moment goes with it.
//!
//! bwrap's own `--die-with-parent` arms the signal only once bwrap runs, and after `fork` the
//! kernel sends it only if the parent dies *after* it was armed: a bridge killed between its
//! `fork` and bwrap's `prctl` left a sandbox that nobody would ever stop. Here the
//! child arms `SIGKILL` first, then compares its parent with the bridge's pid taken before the
//! fork, and exits at once when they differ (the bridge died before the signal was armed).
//!
//! What stays possible is bwrap's own hand-over: its outer process clones the sandbox's init
//! and releases it a moment later; killed in between (by this signal), it leaves the init
//! blocked for good before it has run anything. Those processes carry [`SANDBOX_VAR`], and the
//! next start stops them (`tasks::leftovers`).
//!
//! Debug builds read one test hook, `AGENT_BRIDGE_TEST_SPAWN=<kind>:pause=<ms>` (the child
//! sleeps before it arms anything, so a test can kill the bridge between spawn and exec) or
//! `<kind>:untethered` (neither this signal nor `--die-with-parent`: a sandbox that outlives
//! its bridge, for the tests of the restart's reconciliation). Release builds have neither.

use std::time::Duration;

/// Set in bwrap's own environment (never the program's: bwrap unsets it before it executes
/// the program): the task a sandbox process belongs to, readable in `/proc/<pid>/environ` even
/// for a sandbox's init that is blocked before it has started anything.
pub const SANDBOX_VAR: &str = "AGENT_BRIDGE_SANDBOX";

/// What a spawned child is for: whether it dies with the bridge, and its name in the logs and
/// the test hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnKind {
    /// A task's agent runtime.
    Agent,
    /// The change-set baseline, before the agent starts.
    SnapshotBaseline,
    /// The change-set diff, after the agent stopped.
    SnapshotEnd,
    /// A short-lived helper: a version probe or a model listing.
    Probe,
    /// The bridge's git on a worktree task's repository (making, finishing, removing it).
    Worktree,
}

impl SpawnKind {
    /// Every kind, for parsing.
    pub const ALL: [SpawnKind; 5] =
        [SpawnKind::Agent, SpawnKind::SnapshotBaseline, SpawnKind::SnapshotEnd, SpawnKind::Probe, SpawnKind::Worktree];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnKind::Agent => "agent",
            SpawnKind::SnapshotBaseline => "snapshot-baseline",
            SpawnKind::SnapshotEnd => "snapshot-end",
            SpawnKind::Probe => "probe",
            SpawnKind::Worktree => "worktree",
        }
    }

    /// Whether a child of this kind dies with the bridge. Everything does but an agent
    /// started without the sandbox (`SERVERFS_AGENT_SANDBOX=off`, or `auto` without bwrap):
    /// that one keeps the first wave's behaviour, where a provider may outlive its bridge and
    /// the marker proof keeps its workdir closed until it is gone.
    pub fn dies_with_bridge(self, sandboxed: bool) -> bool {
        sandboxed || self != SpawnKind::Agent
    }
}

/// What the test hook asks of one kind of spawn (debug builds only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestHook {
    /// The child sleeps this long before it arms its parent-death signal.
    Pause(Duration),
    /// The child is not tethered at all (no parent-death signal, no `--die-with-parent`).
    Untethered,
    /// The bridge waits this long before it starts the child (its run is that much later,
    /// and nothing blocks meanwhile: the bridge's git runs only).
    Delay(Duration),
}

/// Parses `AGENT_BRIDGE_TEST_SPAWN`: `<kind>:pause=<ms>`, `<kind>:delay=<ms>` or
/// `<kind>:untethered`.
pub fn parse_test_hook(text: &str) -> Result<(SpawnKind, TestHook), String> {
    let (kind, hook) = text.split_once(':').ok_or_else(|| format!("{text:?} is not <kind>:<hook>"))?;
    let kind = SpawnKind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind)
        .ok_or_else(|| format!("unknown spawn kind {kind:?} (agent, snapshot-baseline, snapshot-end, probe)"))?;
    let hook = match hook.split_once('=') {
        None if hook == "untethered" => TestHook::Untethered,
        Some((name @ ("pause" | "delay"), ms)) => {
            let ms = ms.parse::<u64>().ok().filter(|ms| *ms <= 60_000);
            let d = Duration::from_millis(ms.ok_or_else(|| format!("{hook:?}: 0 to 60000 ms"))?);
            if name == "pause" { TestHook::Pause(d) } else { TestHook::Delay(d) }
        }
        _ => return Err(format!("unknown hook {hook:?} (pause=<ms>, delay=<ms>, untethered)")),
    };
    Ok((kind, hook))
}

#[cfg(debug_assertions)]
static TEST_HOOK: std::sync::OnceLock<(SpawnKind, TestHook)> = std::sync::OnceLock::new();

/// Installs the test hook for this process (debug builds; once, at start).
#[cfg(debug_assertions)]
pub fn set_test_hook(kind: SpawnKind, hook: TestHook) {
    let _ = TEST_HOOK.set((kind, hook));
}

/// The test hook for `kind`, if one is installed.
pub fn test_hook(kind: SpawnKind) -> Option<TestHook> {
    #[cfg(debug_assertions)]
    {
        TEST_HOOK.get().filter(|(k, _)| *k == kind).map(|(_, h)| *h)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = kind;
        None
    }
}

/// What a child does to tie itself to the bridge, in the child between fork and exec
/// ([`Tether::arm`], the spawner's first hook).
#[derive(Debug, Clone, Copy)]
pub struct Tether {
    /// The debug build's pause before anything is armed.
    pause: Option<nix::sys::time::TimeSpec>,
    /// The bridge's pid, taken before the fork.
    bridge: nix::unistd::Pid,
}

impl Tether {
    /// The tether for a child of `kind`, or `None` when the debug build's test hook leaves it
    /// untethered. Must be taken on the thread that spawns: the kernel sends the signal when
    /// *that thread* ends (a runtime worker, or a blocking thread that waits for the child).
    pub fn for_kind(kind: SpawnKind) -> Option<Tether> {
        let hook = test_hook(kind);
        if hook == Some(TestHook::Untethered) {
            return None;
        }
        let pause = match hook {
            Some(TestHook::Pause(d)) => Some(nix::sys::time::TimeSpec::from(d)),
            _ => None,
        };
        Some(Tether { pause, bridge: nix::unistd::getpid() })
    }

    /// Arms `SIGKILL` as the calling process's parent-death signal, and fails (the spawn with
    /// it: nothing runs) when the bridge is already gone. Only async-signal-safe system calls
    /// (clock_nanosleep, prctl, getppid): it runs in the child between fork and exec.
    pub fn arm(&self) -> std::io::Result<()> {
        if let Some(pause) = &self.pause {
            let _ = nix::time::clock_nanosleep(
                nix::time::ClockId::CLOCK_MONOTONIC,
                nix::time::ClockNanosleepFlags::empty(),
                pause,
            );
        }
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
        if nix::unistd::getppid() != self.bridge {
            // The bridge died before the signal was armed: nothing must run.
            return Err(nix::errno::Errno::ESRCH.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_hook_is_read_strictly() {
        assert_eq!(
            parse_test_hook("snapshot-end:pause=250"),
            Ok((SpawnKind::SnapshotEnd, TestHook::Pause(Duration::from_millis(250))))
        );
        assert_eq!(parse_test_hook("agent:untethered"), Ok((SpawnKind::Agent, TestHook::Untethered)));
        assert_eq!(
            parse_test_hook("snapshot-baseline:delay=8000"),
            Ok((SpawnKind::SnapshotBaseline, TestHook::Delay(Duration::from_secs(8))))
        );
        for bad in [
            "agent",
            "shell:pause=1",
            "probe:pause=",
            "probe:pause=-1",
            "probe:pause=60001",
            "agent:loose",
            "probe:delay=x",
        ] {
            assert!(parse_test_hook(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn only_an_uncontained_agent_may_outlive_the_bridge() {
        for kind in SpawnKind::ALL {
            assert!(kind.dies_with_bridge(true), "{kind:?} in the sandbox");
        }
        assert!(!SpawnKind::Agent.dies_with_bridge(false));
        assert!(SpawnKind::Probe.dies_with_bridge(false));
        assert!(SpawnKind::SnapshotBaseline.dies_with_bridge(false));
    }
}
