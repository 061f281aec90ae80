//! CPUs and `/proc` for `calls`: pinning threads to a CPU (the spawning thread before the servers
//! start, every thread of this process before the load), checking that every thread of a server
//! is on the server CPU, and reading CPU time (utime + stime, all threads), the clock tick and
//! idle RSS.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::{Pid, SysconfVar, sysconf};

/// The CPUs this process may run on.
pub fn allowed_cpus() -> anyhow::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?;
    Ok((0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).collect())
}

/// Fails unless this process may use both `server` and `load`, two different CPUs.
pub fn check_layout(server: usize, load: usize) -> anyhow::Result<()> {
    let cpus = allowed_cpus()?;
    if cpus.len() < 2 {
        bail!(
            "this machine (or this process's affinity mask) has {} CPU: the benchmark needs two, one for the \
             servers and one for the load generator",
            cpus.len()
        );
    }
    if server == load {
        bail!("--server-cpu and --load-cpu are both {server}: they must differ");
    }
    for (what, cpu) in [("--server-cpu", server), ("--load-cpu", load)] {
        if !cpus.contains(&cpu) {
            bail!("{what} {cpu} is not among the CPUs this process may use ({cpus:?})");
        }
    }
    Ok(())
}

fn one_cpu(cpu: usize) -> anyhow::Result<CpuSet> {
    let mut set = CpuSet::new();
    set.set(cpu).with_context(|| format!("CPU {cpu}"))?;
    Ok(set)
}

/// Pins the calling thread to `cpu` (what it spawns from now on inherits the mask).
pub fn pin_this_thread(cpu: usize) -> anyhow::Result<()> {
    sched_setaffinity(Pid::from_raw(0), &one_cpu(cpu)?).with_context(|| format!("pin this thread to CPU {cpu}"))
}

/// Pins every thread of this process (`/proc/self/task/*`) to `cpu`.
pub fn pin_every_thread(cpu: usize) -> anyhow::Result<()> {
    let set = one_cpu(cpu)?;
    for tid in threads("self")? {
        sched_setaffinity(Pid::from_raw(tid), &set).with_context(|| format!("pin thread {tid} to CPU {cpu}"))?;
    }
    Ok(())
}

fn threads(pid: &str) -> anyhow::Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// Fails unless every thread of process `pid` (`name` in the message) may run on `cpu` only
/// (`Cpus_allowed_list` of `/proc/PID/task/TID/status`).
pub fn check_pinned(name: &str, pid: u32, cpu: usize) -> anyhow::Result<usize> {
    let tids = threads(&pid.to_string()).with_context(|| format!("the threads of {name} (pid {pid})"))?;
    let want = cpu.to_string();
    for tid in &tids {
        let path = format!("/proc/{pid}/task/{tid}/status");
        // A thread that ended meanwhile has nothing left to check.
        let Ok(status) = std::fs::read_to_string(&path) else { continue };
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(str::trim)
            .with_context(|| format!("no Cpus_allowed_list in {path}"))?;
        if allowed != want {
            bail!("thread {tid} of {name} (pid {pid}) may run on CPUs {allowed}, not only on the server CPU {cpu}");
        }
    }
    Ok(tids.len())
}

/// Clock ticks per second (`/proc` CPU times are in ticks).
pub fn clock_tick() -> anyhow::Result<u64> {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => Ok(hz as u64),
        other => bail!("cannot read the clock tick (sysconf CLK_TCK): {other:?}"),
    }
}

/// utime + stime, in ticks, of the `stat` file at `path` (a process: all its threads, the
/// ended ones included; a thread: itself).
fn stat_ticks(path: &Path) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    // utime is field 14, stime field 15.
    let field = |n: usize| -> anyhow::Result<u64> {
        stat_field(&stat, n).and_then(|f| f.parse().ok()).with_context(|| format!("field {n} of {}", path.display()))
    };
    Ok(field(14)? + field(15)?)
}

/// Field `n` (counted from 1, as in proc(5)) of a `/proc/…/stat` text. The command name
/// (field 2) may hold spaces and parentheses, so fields 3 on are counted from its last `)`.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(n.checked_sub(3)?))
}

/// The CPU time process `pid` has used, in ticks (all threads).
pub fn process_ticks(pid: u32) -> anyhow::Result<u64> {
    stat_ticks(Path::new(&format!("/proc/{pid}/stat")))
}

/// The CPU time the calling thread has used, in ticks.
pub fn this_thread_ticks() -> anyhow::Result<u64> {
    stat_ticks(Path::new("/proc/thread-self/stat"))
}

/// How long CPU `cpu` has been busy (anything but idle and iowait) since boot, in ticks, from
/// `/proc/stat`: with the servers' own CPU time, it shows what else ran on their CPU.
pub fn busy_ticks(cpu: usize) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .with_context(|| format!("no {name} line in /proc/stat"))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let (idle, iowait) = (ticks.get(3).copied().unwrap_or(0), ticks.get(4).copied().unwrap_or(0));
    Ok(ticks.iter().take(8).sum::<u64>() - idle - iowait)
}

/// The CPU time of the spinner `pid`, in ticks (none: 0).
fn spinner_ticks(pid: Option<u32>) -> anyhow::Result<u64> {
    pid.map_or(Ok(0), |pid| process_ticks(pid).with_context(|| format!("the spinner (pid {pid})")))
}

/// What a window's CPU readings need: the tick, the two CPUs and the spinners on them.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    /// Clock ticks per second.
    pub tick: u64,
    /// The servers' CPU.
    pub server_cpu: usize,
    /// The load generator's CPU.
    pub load_cpu: usize,
    /// The `--keep-cpus-awake` spinners' pids on the server and the load CPU: their time is
    /// not counted in the CPUs' busy times.
    pub spinners: [Option<u32>; 2],
}

/// CPU readings at one instant: each server process's time, and both CPUs' busy time (less
/// the spinners').
#[derive(Debug, Clone)]
pub struct Reading {
    procs: Vec<u64>,
    server_cpu: u64,
    load_cpu: u64,
}

/// CPU time used between two readings.
#[derive(Debug, Clone, Default)]
pub struct Used {
    /// By each server process, in the order of the pids read.
    pub procs: Vec<Duration>,
    /// The server CPU's busy time, whoever used it.
    pub server_cpu: Duration,
    /// The load CPU's busy time, whoever used it.
    pub load_cpu: Duration,
}

impl Meter {
    /// Reads the CPU time of `pids` (processes, all threads; `None`: this thread) and both CPUs.
    pub fn read(&self, pids: Option<&[u32]>) -> anyhow::Result<Reading> {
        let procs = match pids {
            Some(pids) => pids
                .iter()
                .map(|&pid| process_ticks(pid).with_context(|| format!("server process {pid}")))
                .collect::<anyhow::Result<_>>()?,
            None => vec![this_thread_ticks()?],
        };
        let [on_server, on_load] = self.spinners;
        Ok(Reading {
            procs,
            server_cpu: busy_ticks(self.server_cpu)?.saturating_sub(spinner_ticks(on_server)?),
            load_cpu: busy_ticks(self.load_cpu)?.saturating_sub(spinner_ticks(on_load)?),
        })
    }

    /// The CPU time used from `before` to `after`.
    pub fn used(&self, before: &Reading, after: &Reading) -> Used {
        let time = |a: u64, b: u64| Duration::from_secs_f64(b.saturating_sub(a) as f64 / self.tick as f64);
        Used {
            procs: before.procs.iter().zip(&after.procs).map(|(a, b)| time(*a, *b)).collect(),
            server_cpu: time(before.server_cpu, after.server_cpu),
            load_cpu: time(before.load_cpu, after.load_cpu),
        }
    }
}

/// `VmRSS` of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("pid {pid}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no VmRSS for pid {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_rss() {
        let me = std::process::id();
        assert!(rss_kib(me).expect("rss") > 0);
        let start = process_ticks(me).expect("ticks");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(process_ticks(me).expect("ticks") > start, "60 ms of spinning shows in the ticks");
        assert!(this_thread_ticks().is_ok());
        assert!(busy_ticks(0).expect("cpu0") > 0);
        assert!(clock_tick().expect("tick") >= 100);
    }

    #[test]
    fn a_spinners_time_is_left_out_of_its_cpus_busy_time() {
        // This test's thread plays the spinner: pinned to one CPU, it spins there, and the
        // meter that names this process as that CPU's spinner counts less busy time.
        let cpu = allowed_cpus().expect("cpus")[0];
        let me = std::process::id();
        std::thread::spawn(move || {
            pin_this_thread(cpu).expect("pin");
            let tick = clock_tick().expect("tick");
            let plain = Meter { tick, server_cpu: cpu, load_cpu: cpu, spinners: [None, None] };
            let minus_me = Meter { spinners: [Some(me), Some(me)], ..plain };
            let (a, b) = (plain.read(None).expect("read"), minus_me.read(None).expect("read"));
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(200) {
                std::hint::black_box(spin.elapsed());
            }
            let (a2, b2) = (plain.read(None).expect("read"), minus_me.read(None).expect("read"));
            let (all, others) = (plain.used(&a, &a2), minus_me.used(&b, &b2));
            assert!(all.server_cpu >= std::time::Duration::from_millis(100), "200 ms of spinning: {all:?}");
            // This process spun for most of those 200 ms on that CPU: at least 50 ms of it is
            // taken out (its other threads, elsewhere, only take out more).
            let left_out = all.server_cpu.saturating_sub(others.server_cpu);
            assert!(left_out >= std::time::Duration::from_millis(50), "left out {left_out:?}: {others:?} of {all:?}");
            assert!(all.load_cpu.saturating_sub(others.load_cpu) >= std::time::Duration::from_millis(50));
        })
        .join()
        .expect("the spinning thread");
    }
}
