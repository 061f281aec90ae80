//! The CPU scheduling policy of the daemon's async threads (`SCHED_BATCH`), and the normal one
//! its children get back.
//!
//! Where the front and the bridge share a CPU, a request line the front writes wakes the
//! bridge's reactor thread, and under the normal policy the kernel switches to it at once: the
//! front is preempted between two requests, the bridge reads one line, hands it to a store
//! thread, and each hand-off costs a switch. `SCHED_BATCH` keeps the normal policy's fair
//! share and priority but lets a woken thread wait for the running one to block or use up its
//! slice: the bridge then reads the lines that came meanwhile in one go, and a store thread
//! finishes the calls queued to it before the reactor runs.
//!
//! What it saves, measured by the calls benchmark (`bench/README.md`, custom machinery; release,
//! 16 connections, front and bridge on one CPU, 2026-12-06): with the normal policy instead,
//! 11 % and 15 % fewer calls/s and 12 % and 19 % more CPU per call in two runs (the bridge's own
//! share 1.20× and 1.29×), p99 1.9 → 2.3–2.5 ms.
//!
//! Only the runtime's threads take it (set as each starts); the store's threads set the normal
//! policy as they start ([`normal_policy`]; a thread inherits its creator's, and a store thread
//! may be started from a runtime thread), so a read starts as soon as it is queued.
//!
//! A child inherits its parent thread's policy, so every process the provider module starts
//! gets the normal policy back before it executes ([`normal_policy`]): an agent runs
//! as it would have from the operator's shell.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc;

/// `SCHED_BATCH` for the calling thread (for `on_thread_start`). A refusal (a seccomp
/// profile, say) is logged once and changes nothing else: the daemon runs as before.
pub fn batch_this_thread() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = set_policy(libc::SCHED_BATCH)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(cause = %e, "cannot give the async threads the batch scheduling policy; they keep the normal one");
    }
}

/// The normal policy for the calling thread: a store thread as it starts, or a child in a
/// `pre_exec` hook between fork and exec (async-signal-safe: one system call).
pub fn normal_policy() -> std::io::Result<()> {
    set_policy(libc::SCHED_OTHER)
}

#[allow(unsafe_code)]
fn set_policy(policy: libc::c_int) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling
    // thread; the call touches no memory of ours otherwise.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's policy (`SCHED_OTHER`, `SCHED_BATCH`, …), for the tests.
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) fn policy() -> libc::c_int {
    // SAFETY: no arguments but the calling thread's pid 0.
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_takes_the_batch_policy_and_can_give_it_back() {
        std::thread::spawn(|| {
            assert_eq!(policy(), libc::SCHED_OTHER);
            batch_this_thread();
            assert_eq!(policy(), libc::SCHED_BATCH);
            normal_policy().expect("back to the normal policy");
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .expect("the thread ran");
    }
}
