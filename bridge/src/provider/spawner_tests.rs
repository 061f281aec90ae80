//! The spawner's tests: bounded runs read while the child runs, descriptors reach the child,
//! a half-made start is undone, and a tethered child dies with its thread.
#![allow(clippy::disallowed_types, reason = "the tether test starts its own children")]

use super::*;

fn sh(script: &str, limit: Duration) -> Result<String, RunError> {
    run_bounded(Path::new("/bin/sh"), &["-c", script], limit, Vec::new())
}

/// A child that says more than a pipe holds is read while it runs: it ends, and its output is
/// what the bound keeps (not "no answer", as when the pipes were read only after the exit).
#[test]
fn a_bounded_run_of_a_child_that_writes_a_mebibyte_keeps_the_bound() {
    let script = "head -c 1048576 /dev/zero | tr '\\0' a; head -c 200000 /dev/zero | tr '\\0' e >&2";
    let out = sh(script, Duration::from_secs(20)).expect("the child ends and its stdout is kept");
    assert_eq!(out.len(), OUTPUT_BOUND, "the bound, no more");
    assert!(out.bytes().all(|b| b == b'a'), "its own stdout, from the start");
}

#[test]
fn a_failing_bounded_run_gives_its_stderr_after_much_output() {
    let failed = sh("head -c 1048576 /dev/zero; echo 'refused: no namespace' >&2; exit 3", Duration::from_secs(20));
    match failed {
        Err(RunError::Failed { stderr, status }) => {
            assert_eq!(stderr, "refused: no namespace");
            assert_eq!(status.code(), Some(3));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_silent_child_is_no_answer_and_is_killed_at_its_limit() {
    let started = std::time::Instant::now();
    let out = sh("sleep 30", Duration::from_millis(300));
    assert!(matches!(out, Err(RunError::NoAnswer(_))), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
    assert_eq!(out.map_err(|e| e.to_string()), Err("no answer within 0 s".to_owned()));
}

#[test]
fn a_passed_descriptor_is_the_childs_at_its_number() {
    use std::io::Read;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let (seccomp_like, other_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    nix::unistd::write(&other_write, b"filter").expect("write");
    drop(other_write);
    let out = run_bounded(
        Path::new("/bin/sh"),
        &["-c", "echo told >&3; cat <&4"],
        Duration::from_secs(10),
        vec![(write, 3), (seccomp_like, 4)],
    )
    .expect("runs");
    assert_eq!(out, "filter", "descriptor 4 is the second pipe, not overwritten by the first");
    let mut told = String::new();
    std::fs::File::from(read).read_to_string(&mut told).expect("read: every write end is closed");
    assert_eq!(told, "told\n");
}

/// A start that fails after the fork, or a caller that drops what it started before handing
/// it on, leaves nothing: the child is killed and the reaper may take it again.
#[tokio::test]
async fn a_leader_dropped_before_it_is_handed_on_is_killed_and_forgotten() {
    let started = start(Launch {
        program: PathBuf::from("/bin/sleep"),
        args: vec!["30".into()],
        cwd: PathBuf::from("/"),
        env: Vec::new(),
        tether: Some(SpawnKind::Probe),
        pass: Vec::new(),
        cgroup: None,
    })
    .expect("start sleep");
    let pid = started.leader.pid();
    assert!(leaders().contains(&pid), "registered while it runs");
    drop(started);
    assert!(!leaders().contains(&pid), "forgotten once undone");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while super::super::procfs::start_ticks(pid).is_some() && !super::super::procfs::is_zombie(pid) {
        assert!(std::time::Instant::now() < deadline, "{pid} still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The kernel sends the signal when the thread that spawned the child ends: of two
/// children of one thread that then returns, the tethered one is killed, the other lives on
/// (the kernel signals a thread's children in one pass as it ends).
#[test]
fn a_tethered_child_dies_with_the_thread_that_started_it() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let sleep = |tethered: bool| {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        if tethered {
            tether_on_exec(&mut cmd, SpawnKind::Probe);
        }
        Pid::from_raw(cmd.spawn().expect("spawn sleep").id() as i32)
    };
    let (tethered, loose) =
        std::thread::spawn(move || (sleep(true), sleep(false))).join().expect("the spawning thread");
    assert_eq!(
        waitpid(tethered, None).expect("wait"),
        WaitStatus::Signaled(tethered, Signal::SIGKILL, false),
        "killed when its thread ended"
    );
    assert_eq!(
        waitpid(loose, Some(WaitPidFlag::WNOHANG)).expect("wait"),
        WaitStatus::StillAlive,
        "an untethered child outlives the thread"
    );
    kill(loose, Signal::SIGKILL).expect("kill");
    waitpid(loose, None).expect("reap");
}
