//! The socket server's bounds: a cap on connections where a newcomer
//! displaces an idle one and the CLI still answers, a bound on a partial line's time, the
//! `RLIMIT_NOFILE` figure in the log, and clear refusals (`BRIDGE_BUSY`) when every connection
//! has a request in progress or no descriptor is left, without spinning.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use e2e::{Options, TestBridge, poll_until};

/// How long any single answer may take before the test fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How long the busy connections' long polls last: the refusals are checked meanwhile.
const LONG_POLL_SECONDS: u64 = 8;

/// A raw connection: bytes out, lines in.
struct Raw {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Raw {
    /// Connects, waiting (bounded) while the listen backlog is full.
    async fn connect(socket: &Path) -> Raw {
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => {
                    let (read, writer) = stream.into_split();
                    return Raw { reader: BufReader::new(read), writer };
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("connect to the bridge socket: {e}"),
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("send to the bridge");
    }

    /// The next line as JSON, or `None` when the bridge closed the connection.
    async fn recv(&mut self) -> Option<Value> {
        let mut line = Vec::new();
        let read = tokio::time::timeout(ANSWER_WITHIN, self.reader.read_until(b'\n', &mut line))
            .await
            .expect("the bridge answers or closes within 30 s");
        match read {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(
                serde_json::from_slice(&line)
                    .unwrap_or_else(|e| panic!("a response is JSON ({e}): {:?}", String::from_utf8_lossy(&line))),
            ),
        }
    }

    /// `bridge.health` on this connection.
    async fn health(&mut self) -> Option<Value> {
        self.send(format!("{}\n", health_line("h")).as_bytes()).await;
        self.recv().await
    }
}

fn health_line(request_id: &str) -> String {
    json!({ "protocol_version": 1, "request_id": request_id, "method": "bridge.health", "params": {} }).to_string()
}

fn long_poll_line(request_id: &str, task_id: &str) -> String {
    json!({
        "protocol_version": 1,
        "request_id": request_id,
        "method": "capabilities.call",
        "params": {
            "credential": null,
            "surface": "cli",
            "name": "get_agent_task",
            "arguments": { "task_id": task_id, "wait_seconds": LONG_POLL_SECONDS },
        },
    })
    .to_string()
}

fn assert_ok(v: &Option<Value>, what: &str) {
    let v = v.as_ref().unwrap_or_else(|| panic!("{what}: the bridge closed the connection instead of answering"));
    assert_eq!(v["ok"], true, "{what}: {v}");
}

/// Asserts `v` is the refusal `code` that answers no request.
fn assert_refused(v: &Option<Value>, code: &str, what: &str) {
    let v = v.as_ref().unwrap_or_else(|| panic!("{what}: closed without the {code} line"));
    assert_eq!(
        (&v["ok"], &v["error"]["code"], &v["request_id"]),
        (&json!(false), &json!(code), &Value::Null),
        "{what}: {v}"
    );
}

/// The connection cap the bridge logged at start.
fn logged_cap(log: &str) -> usize {
    let at = log.find("max_connections=").unwrap_or_else(|| panic!("the bridge logs its connection cap:\n{log}"));
    let digits: String = log[at + "max_connections=".len()..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a number")
}

/// Raises this test process's soft descriptor limit to its hard limit (the flood needs more
/// descriptors than a default soft limit of 1024 may give).
fn raise_own_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let hard = if hard == nix::libc::RLIM_INFINITY { 1 << 20 } else { hard };
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
}

/// How many connections the bridge has accepted on `socket` and not closed (its accepted
/// sockets carry the listener's path in `/proc/net/unix`, connected: state 03).
fn accepted(socket: &Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let path = socket.to_str().expect("a UTF-8 socket path");
    table.lines().filter(|l| l.ends_with(path) && l.split_whitespace().nth(5) == Some("03")).count()
}

/// Runs the CLI (through `bin`, the bridge executable or a wrapper) with a deadline.
async fn cli(bin: &Path, socket: &Path, args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(bin)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the CLI");
    tokio::time::timeout(ANSWER_WITHIN, child.wait_with_output())
        .await
        .expect("the CLI answers within 30 s, even while the socket is flooded")
        .expect("wait for the CLI")
}

fn assert_cli_ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_cli_refused(out: &std::process::Output, what: &str) {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && text.contains("BRIDGE_BUSY"), "{what}: {text}");
}

#[tokio::test]
async fn a_flood_at_the_cap_displaces_the_longest_idle_and_the_cli_still_answers() {
    raise_own_nofile();
    let bridge = TestBridge::start().await;
    let log = bridge.log();
    assert!(log.contains("RLIMIT_NOFILE"), "the bridge logs its descriptor limit:\n{log}");
    let cap = logged_cap(&log);
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    if hard >= 4096 {
        assert_eq!(cap, 1024, "the default cap fits a limit of {hard}");
    }

    let mut flood = Vec::with_capacity(cap);
    for _ in 0..cap {
        flood.push(Raw::connect(&bridge.socket).await);
    }
    // The table is full of idle connections: a newcomer is served in place of the oldest.
    let mut newcomer = Raw::connect(&bridge.socket).await;
    assert_ok(&newcomer.health().await, "a newcomer at the cap");
    assert!(flood[0].recv().await.is_none(), "the longest-idle connection gave way, silently");
    // The CLI too, while the flood still holds the rest.
    let out = cli(&e2e::bridge_bin(), &bridge.socket, &["tasks", "list"]).await;
    assert_cli_ok(&out, "the CLI while the socket is at its cap");
    assert!(flood[1].recv().await.is_none(), "the next-oldest gave way to the CLI");
    assert_ok(&flood[cap - 1].health().await, "a younger idle connection is still served");
    e2e::measured(format_args!("socket cap {cap}: {} connections accepted and open", accepted(&bridge.socket)));
}

#[tokio::test]
async fn a_stalled_line_is_answered_and_closed_after_the_bound_while_an_idle_connection_stays() {
    let bridge = TestBridge::start().await;
    let mut idle = Raw::connect(&bridge.socket).await;
    assert_ok(&idle.health().await, "a first request");
    let mut stalled = Raw::connect(&bridge.socket).await;
    let half = health_line("stalled");
    stalled.send(&half.as_bytes()[..half.len() / 2]).await;
    let started = Instant::now();
    let answer = stalled.recv().await;
    let waited = started.elapsed();
    assert_refused(&answer, "REQUEST_TIMED_OUT", "a line that stalls half-way");
    assert!(waited >= Duration::from_secs(9), "the line had its 10 s: answered after {waited:?}");
    assert!(stalled.recv().await.is_none(), "the stalled connection is closed after its answer");
    e2e::measured(format_args!("a stalled line was answered after {waited:?}"));
    // Idle as long between two complete lines: still open and served.
    assert_ok(&idle.health().await, "a connection idle for more than the line bound");
}

/// A wrapper that starts the bridge (or its CLI) with a descriptor limit of 64.
fn low_limit_wrapper(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("agent-bridge-nofile-64");
    let body = format!("#!/bin/sh\nulimit -n 64 || exit 97\nexec '{}' \"$@\"\n", e2e::bridge_bin().display());
    std::fs::write(&script, body).expect("write the wrapper");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod the wrapper");
    script
}

#[tokio::test]
async fn under_a_descriptor_limit_of_64_the_cap_is_lowered_the_cli_served_and_busy_excess_refused() {
    let scripts = tempfile::tempdir().expect("temp dir");
    let wrapper = low_limit_wrapper(scripts.path());
    let bridge = TestBridge::start_with(Options { bin: Some(wrapper.clone()), ..Options::default() }).await;
    let log = bridge.log();
    let figure = log.lines().find(|l| l.contains("RLIMIT_NOFILE") && l.contains("hard=64"));
    assert!(figure.is_some(), "the bridge logs the limit it runs under:\n{log}");
    assert!(log.contains("too low"), "the bridge warns that the limit lowers its cap:\n{log}");
    let cap = logged_cap(&log);
    assert!((1..64).contains(&cap), "the cap fits in 64 descriptors: {cap}");

    // Idle excess: each newcomer displaces the oldest; the CLI answers.
    let mut flood = Vec::new();
    for _ in 0..cap + 2 {
        flood.push(Raw::connect(&bridge.socket).await);
    }
    assert_ok(&flood[cap + 1].health().await, "the last newcomer");
    assert!(flood[0].recv().await.is_none() && flood[1].recv().await.is_none(), "the two oldest gave way");
    assert_cli_ok(&cli(&wrapper, &bridge.socket, &["tasks", "list"]).await, "the CLI under a limit of 64");
    drop(flood);
    poll_until("the flood's connections are closed", ANSWER_WITHIN, || accepted(&bridge.socket) == 0).await;

    // Busy excess: every place holds a request in progress (a long poll on a task waiting for
    // a human), so a newcomer and the CLI are answered BRIDGE_BUSY, at once, and closed.
    let task_id = bridge.submit("approval:make").await;
    bridge.wait_status(&task_id, "waiting_for_approval").await;
    let mut busy = Vec::new();
    for i in 0..cap {
        let mut raw = Raw::connect(&bridge.socket).await;
        // The long poll rides behind a health check: once that is answered, the bridge has the
        // long poll in its buffer and is answering it.
        raw.send(format!("{}\n{}\n", health_line("h"), long_poll_line(&format!("poll{i}"), &task_id)).as_bytes()).await;
        assert_ok(&raw.recv().await, "the health check before a long poll");
        busy.push(raw);
    }
    let mut newcomer = Raw::connect(&bridge.socket).await;
    assert_refused(&newcomer.recv().await, "BRIDGE_BUSY", "a newcomer when every connection is busy");
    assert!(newcomer.recv().await.is_none(), "the refused newcomer is closed");
    let out = cli(&wrapper, &bridge.socket, &["tasks", "list"]).await;
    assert_cli_refused(&out, "the CLI when every connection is busy");

    // The long polls end on their own (nothing changed), and the CLI is served again.
    for raw in &mut busy {
        let answer = raw.recv().await;
        assert_ok(&answer, "a long poll");
        assert_eq!(answer.unwrap()["result"]["status"], "waiting_for_approval");
    }
    assert_cli_ok(&cli(&wrapper, &bridge.socket, &["tasks", "list"]).await, "the CLI once the long polls ended");
}

/// The descriptor numbers a process has open.
fn open_fds(pid: u32) -> BTreeSet<u32> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the bridge's descriptors")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The lowest descriptor number a process has free: with the soft limit there, no new
/// descriptor fits.
fn lowest_free_fd(pid: u32) -> u32 {
    let fds = open_fds(pid);
    (0..).find(|n| !fds.contains(n)).expect("a free number")
}

/// A process's CPU time so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the bridge's stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..].split_whitespace().collect();
    // utime and stime are the 14th and 15th fields; 11th and 12th after the comm.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn set_soft_nofile(pid: u32, soft: u64) {
    let out = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:"))
        .output()
        .expect("run prlimit (util-linux)");
    assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn with_no_descriptor_left_a_newcomer_is_answered_at_once_or_served_in_an_idle_ones_place() {
    let bridge = TestBridge::start().await;
    let pid = bridge.pid().expect("the bridge runs");
    // The bridge started under this process's hard limit and raised its soft limit to it.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();

    // With no connection to close, the reserve descriptor answers newcomers at once.
    poll_until("the start-up connections are closed", ANSWER_WITHIN, || accepted(&bridge.socket) == 0).await;
    let fds = open_fds(pid);
    let lowest_free = lowest_free_fd(pid);
    // (stdin and stdout are /dev/null too.)
    let reserve = fds
        .iter()
        .copied()
        .filter(|&fd| fd > 2)
        .find(|fd| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|p| p == Path::new("/dev/null")));
    let reserve = reserve.unwrap_or_else(|| panic!("the bridge holds a reserve descriptor on /dev/null: {fds:?}"));
    assert!(reserve < lowest_free, "the reserve ({reserve}) is among the first descriptors ({fds:?})");
    // From now on no new descriptor fits under the soft limit.
    set_soft_nofile(pid, u64::from(lowest_free));
    let (ticks, started) = (cpu_ticks(pid), Instant::now());
    let out = cli(&e2e::bridge_bin(), &bridge.socket, &["tasks", "list"]).await;
    assert_cli_refused(&out, "the CLI with no descriptor left");
    let mut raw = Raw::connect(&bridge.socket).await;
    let refusal = raw.recv().await;
    assert_refused(&refusal, "BRIDGE_BUSY", "a raw connection with no descriptor left");
    let message = refusal.as_ref().unwrap()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("file descriptor"), "the refusal says why: {message}");
    // A client that keeps knocking for a second costs the bridge next to no CPU.
    // (The pause paces the knocks: a spinning accept loop would burn ~100 ticks a second.)
    while started.elapsed() < Duration::from_secs(1) {
        let mut knock = Raw::connect(&bridge.socket).await;
        assert_refused(&knock.recv().await, "BRIDGE_BUSY", "a knock with no descriptor left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let used = cpu_ticks(pid) - ticks;
    let wall = started.elapsed();
    e2e::measured(format_args!("{used} CPU ticks in {wall:?} of refusals with no descriptor left"));
    assert!(used < 40, "the bridge spins with no descriptor left: {used} ticks in {wall:?}");
    assert!(bridge.log().contains("no file descriptor left"), "the shortage is logged:\n{}", bridge.log());
    set_soft_nofile(pid, hard);
    let out = cli(&e2e::bridge_bin(), &bridge.socket, &["tasks", "list"]).await;
    assert_cli_ok(&out, "the CLI once descriptors are back");
    assert!(bridge.log().contains("file descriptors are available again"), "{}", bridge.log());

    // Idle connections give their descriptors up to a newcomer: the CLI is served. (Each is
    // answered once, so the bridge is done opening files for it; they hold the lowest free
    // numbers, below the limit set next.)
    poll_until("the CLI's connection is closed", ANSWER_WITHIN, || accepted(&bridge.socket) == 0).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut raw = Raw::connect(&bridge.socket).await;
        assert_ok(&raw.health().await, "an idle connection's first request");
        idle.push(raw);
    }
    set_soft_nofile(pid, u64::from(lowest_free_fd(pid)));
    let out = cli(&e2e::bridge_bin(), &bridge.socket, &["tasks", "list"]).await;
    assert_cli_ok(&out, "the CLI with no descriptor left but idle connections to close");
    for raw in &mut idle {
        assert!(raw.recv().await.is_none(), "an idle connection gave its descriptor up");
    }
    set_soft_nofile(pid, hard);
}
