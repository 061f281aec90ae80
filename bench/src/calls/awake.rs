//! `--keep-cpus-awake`, a diagnostic of the machine rather than of the code: a spinner process
//! on each measured CPU under `SCHED_IDLE` (it runs only when nothing else wants that CPU), so
//! neither CPU ever goes idle and no call waits for an idle CPU to be woken. Where an idle CPU
//! is expensive to wake (a VM whose idle vCPUs halt to the host), the difference between a
//! run with it and one without is that cost. The spinners' CPU time is left out of the CPUs'
//! busy times (`cpu::Meter`), so "load CPU busy" and "others on its CPU" keep their meaning.

use std::os::unix::process::parent_id;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::libc;

use crate::cpu;

/// `SCHED_IDLE` in `/proc/PID/stat`'s policy field.
const SCHED_IDLE: &str = "5";

/// The hidden `spin` mode: pins this process to `cpu`, takes `SCHED_IDLE` and spins until its
/// parent is gone (or it is killed).
pub fn spin(cpu: usize) -> anyhow::Result<()> {
    cpu::pin_this_thread(cpu)?;
    idle_policy().context("take the SCHED_IDLE policy")?;
    let parent = parent_id();
    loop {
        for _ in 0..(1 << 20) {
            std::hint::spin_loop();
        }
        if parent_id() != parent {
            return Ok(());
        }
    }
}

#[allow(unsafe_code)]
fn idle_policy() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling
    // thread (the spinner's only one); nothing else is read or written.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The spinners, one per CPU; killed when dropped.
pub struct Spinners {
    children: Vec<(usize, Child)>,
}

impl Spinners {
    /// Starts a spinner on each of `cpus` (this executable in its `spin` mode) and waits until
    /// each runs under `SCHED_IDLE` on its CPU alone.
    pub fn start(cpus: &[usize]) -> anyhow::Result<Spinners> {
        let exe = std::env::current_exe().context("locate this executable")?;
        let mut spinners = Spinners { children: Vec::new() };
        for &cpu in cpus {
            let child = Command::new(&exe)
                .args(["spin", "--cpu", &cpu.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("start the spinner for CPU {cpu}"))?;
            spinners.children.push((cpu, child));
        }
        for (cpu, child) in &mut spinners.children {
            ready(*cpu, child)?;
        }
        Ok(spinners)
    }

    /// The spinner's pid on `cpu`, if there is one.
    pub fn pid_on(&self, cpu: usize) -> Option<u32> {
        self.children.iter().find(|(c, _)| *c == cpu).map(|(_, child)| child.id())
    }
}

/// Waits (5 s at most) until `child` runs under `SCHED_IDLE` and may use `cpu` only.
fn ready(cpu: usize, child: &mut Child) -> anyhow::Result<()> {
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the spinner for CPU {cpu} ended ({status}) before it ran: see its error above");
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if policy(&stat) == Some(SCHED_IDLE) && cpu::check_pinned("the spinner", pid, cpu).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the spinner for CPU {cpu} (pid {pid}) did not take SCHED_IDLE on its CPU within 5 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The scheduling policy in a `/proc/…/stat` text (field 41).
fn policy(stat: &str) -> Option<&str> {
    cpu::stat_field(stat, 41)
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_takes_the_idle_policy_as_proc_shows_it() {
        std::thread::spawn(|| {
            let stat = || std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
            assert_eq!(policy(&stat()), Some("0"), "a new thread runs under SCHED_OTHER");
            idle_policy().expect("SCHED_IDLE");
            assert_eq!(policy(&stat()), Some(SCHED_IDLE));
        })
        .join()
        .expect("the thread");
        assert_eq!(policy("1 (a) b) S 0"), None, "too few fields");
    }
}
