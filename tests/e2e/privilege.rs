//! Least privilege (issue 29): what a hostile task can no longer do, tried from inside a task
//! as an attacker would, with the controls that show the same act works where it is allowed.

use serde_json::json;

use e2e::{Options, TestBridge, code, error_of};

/// The fake runtime's `exec:` runs a shell command for any operator key, unasked: it is off
/// unless the operator turns it on (the tests do; the quick start does not). Refused before
/// anything is created, for a task and for a plan's step, naming the switch.
#[tokio::test]
async fn the_fake_runtimes_exec_runs_only_when_turned_on() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_FAKE_EXEC=false")).await;
    let before = b.task_count();
    let refused = b.submit_args(json!({ "prompt": "exec:touch planted" })).await;
    let (code_, message) = error_of(&refused);
    assert_eq!(code_, "AGENT_DISABLED", "{message}");
    assert!(message.contains("SERVERFS_AGENT_FAKE_EXEC"), "{message}");
    assert_eq!(b.task_count(), before, "nothing was created");
    assert!(!b.repo.join("planted").exists());
    let plan = json!({ "workdir": "repo", "runtime": "fake", "title": "t",
                       "steps": [{ "title": "one", "prompt": "complete:ok" }, { "title": "two", "prompt": "exec:id" }] });
    let refused = b.call("submit_agent_plan", plan).await;
    assert_eq!(code(&refused), "AGENT_DISABLED");
    assert!(error_of(&refused).1.contains("steps[1].prompt"), "{refused:?}");
    // The other scripts run as ever.
    let id = b.submit("complete:still scripted").await;
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");

    // The control: where the operator turned it on, it runs.
    let on = TestBridge::start().await;
    let id = on.submit("exec:touch planted").await;
    assert_eq!(on.wait_terminal(&id).await["status"], "succeeded");
    assert!(on.repo.join("planted").exists());
}

/// Run inside a task: what it can do to a terminal. The operator's terminal (`/dev/tty`: the
/// bridge's controlling terminal, when it was started from a shell), then a pty the task makes
/// its own controlling terminal: `TIOCSTI` (bytes queued as if typed), `TIOCLINUX`, `TIOCSTI`
/// with high bits in the 64-bit request, and `TCGETS` (an ordinary `ioctl`). Each `ok` or the
/// errno's name.
const TERMINAL_PROBE: &str = r#"
import ctypes, errno, fcntl, os, termios
out = []
libc = ctypes.CDLL(None, use_errno=True)
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
c = ctypes.c_char(b"!")
def sti(fd, req=0x5412):
    r = libc.ioctl(fd, req, ctypes.byref(c))
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
try:
    tty = os.open("/dev/tty", os.O_RDWR)
    out.append("tty_sti=" + sti(tty))
except OSError as e:
    out.append("tty=" + errno.errorcode[e.errno])
os.setsid()
m, s = os.openpty()
fcntl.ioctl(s, termios.TIOCSCTTY, 0)
out.append("sti=" + sti(s))
out.append("linux=" + sti(s, 0x541C))
out.append("sti_high=" + sti(s, 0x5412 | (1 << 32)))
try:
    fcntl.ioctl(s, termios.TCGETS, bytes(64))
    out.append("tcgets=ok")
except OSError as e:
    out.append("tcgets=" + errno.errorcode[e.errno])
print(" ".join(out))
"#;

/// Runs `command` in a fake task of `b` and returns its output after `exit=N`.
async fn in_task(b: &TestBridge, command: &str) -> String {
    let id = b.submit(&format!("exec:{command}")).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    end["final_response"].as_str().expect("final_response").to_owned()
}

/// A task of a bridge started from the operator's shell tries to type into that shell, as a
/// prompt-injected `npm install` would: it has no controlling terminal (a session of its own),
/// and the terminal it makes its own refuses the typing `ioctl`s (the seccomp filter). Nothing
/// reaches the operator's terminal. The control: the bridge does hold that terminal, and the
/// same probe outside the sandbox is not refused by the filter.
#[tokio::test]
async fn a_task_cannot_type_into_the_operators_terminal() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = TestBridge::start_with(Options::default().in_terminal()).await;
    let bridge = b.pid().expect("running");
    let tty_nr = std::fs::read_to_string(format!("/proc/{bridge}/stat")).expect("stat");
    let tty_nr: i64 =
        tty_nr[tty_nr.rfind(')').expect(")") + 1..].split_whitespace().nth(4).expect("tty_nr").parse().unwrap();
    assert_ne!(tty_nr, 0, "the bridge runs with a controlling terminal, as from a shell");
    std::fs::write(b.repo.join("probe.py"), TERMINAL_PROBE).expect("probe");
    let text = in_task(&b, "python3 probe.py").await;
    assert_eq!(text.lines().last(), Some("tty=ENXIO sti=EPERM linux=EPERM sti_high=EPERM tcgets=ok"), "{text}");
    // Nothing was typed into the operator's terminal: its other end reads nothing.
    let master = b.terminal.as_ref().expect("the terminal");
    nix::fcntl::fcntl(master, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).expect("nonblocking");
    let mut buf = [0u8; 64];
    assert_eq!(nix::unistd::read(master, &mut buf), Err(nix::errno::Errno::EAGAIN), "no byte reached the terminal");

    // The control, outside the sandbox: the filter's errno is the sandbox's doing.
    let out = std::process::Command::new("python3").arg(b.repo.join("probe.py")).output().expect("python3");
    let open = String::from_utf8_lossy(&out.stdout);
    assert!(!open.contains("sti=EPERM") && open.contains("tcgets=ok"), "{open}");
}
