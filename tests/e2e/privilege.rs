//! Least privilege: what a hostile task can no longer do, tried from inside a task
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

/// A bridge laid out in the operator's home, as `deployment/install.sh` lays it out: `$HOME`
/// is the test's directory, holding the bridge's state, socket, locks and `.env` (the checkout
/// it was installed from), both workdirs, another repository, and the secrets an operator has:
/// an SSH key, cloud credentials, both runtimes' credentials, `~/.claude.json` with an MCP key,
/// a shell profile, a user unit, the install's `current` link.
async fn bridge_in_a_home(options: Options) -> TestBridge {
    let mut b = TestBridge::prepare(options);
    let home = b.root();
    for (path, text) in HOME_FILES {
        let file = home.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, text).expect("write");
    }
    std::fs::write(b.docs.join("notes.md"), "another workdir's notes\n").expect("docs");
    let release = home.join(".local/share/agent-bridge/releases/r1");
    std::fs::create_dir_all(&release).expect("release");
    std::os::unix::fs::symlink(&release, home.join(".local/share/agent-bridge/current")).expect("current");
    b.set_var("HOME", &home.display().to_string());
    b.spawn().await;
    b
}

/// The operator's files (relative to `$HOME`) a task must never read.
const HOME_FILES: &[(&str, &str)] = &[
    (".ssh/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n"),
    (".aws/credentials", "[default]\naws_secret_access_key = secret\n"),
    (".claude.json", "{\"mcpServers\":{\"agent-bridge\":{\"headers\":{\"Authorization\":\"Bearer secret\"}}}}\n"),
    (".codex/auth.json", "{\"OPENAI_API_KEY\":\"secret\"}\n"),
    (".claude/.credentials.json", "{\"claudeAiOauth\":{\"accessToken\":\"secret\"}}\n"),
    (".bashrc", "# the operator's shell\n"),
    (".config/systemd/user/agent-bridge.service", "[Service]\nExecStart=/bin/true\n"),
    ("src/other-repo/README", "another repository\n"),
];

/// Runs `script` (sh) in a fake task of `b` in workdir `workdir` with `profile`; its output.
async fn script_in_task(b: &TestBridge, workdir: &str, profile: &str, script: &str) -> String {
    let dir = if workdir == "docs" { &b.docs } else { &b.repo };
    let name = format!("probe-{}.sh", crate::leftovers::PAUSE_MS ^ dir.as_os_str().len() as u64);
    std::fs::write(dir.join(&name), script).expect("script");
    let id = b.submit_ok(json!({ "workdir": workdir, "profile": profile, "prompt": format!("exec:sh {name}") })).await;
    let end = b.wait_terminal(&id).await;
    assert_eq!(end["status"], "succeeded", "{end:#}");
    end["final_response"].as_str().expect("final_response").to_owned()
}

/// Every secret an operator keeps in the home directory, the `.env` the bridge came from,
/// another workdir and another repository: none of it is in a task's view. The control: the
/// same reads from the operator's shell succeed.
#[tokio::test]
async fn a_task_reads_none_of_the_operators_secrets_nor_another_workdir() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = bridge_in_a_home(Options::default()).await;
    let home = b.root();
    let mut targets: Vec<std::path::PathBuf> = HOME_FILES.iter().map(|(p, _)| home.join(p)).collect();
    targets.push(b.env_file.clone());
    targets.push(b.docs.join("notes.md"));
    // Each read reports by its number (the output's host paths are redacted).
    let script: String = targets
        .iter()
        .enumerate()
        .map(|(i, t)| format!("cat '{}' >/dev/null 2>&1 && echo 'read {i}' || echo 'denied {i}'\n", t.display()))
        .collect();
    let text = script_in_task(&b, "repo", "workspace-write", &script).await;
    for (i, target) in targets.iter().enumerate() {
        assert!(
            text.contains(&format!("denied {i}\n")) || text.ends_with(&format!("denied {i}")),
            "a task read {target:?}:\n{text}"
        );
        assert!(std::fs::read(target).is_ok(), "the operator reads {target:?}");
    }
    // The home as a task sees it: nothing but what its view holds (its workdir, and the path to
    // the fake runtime's session store).
    let text = script_in_task(&b, "repo", "workspace-write", &format!("ls -A '{}'\n", home.display())).await;
    let seen: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(seen, ["repo", "state"], "the home as a task sees it: {text}");
}

/// Writes outside the task's workdir: the shell profile, a user unit, the install's `current`
/// link, another workdir. What a task writes in its home stays in its own empty one, gone
/// with it; another workdir is not there; nothing reaches the host. The task's own workdir is
/// writable.
#[tokio::test]
async fn a_task_writes_nowhere_but_its_workdir() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = bridge_in_a_home(Options::default()).await;
    let home = b.root();
    let script = format!(
        "(echo evil >> '{home}/.bashrc') >/dev/null 2>&1; echo 1
(mkdir -p '{home}/.config/systemd/user' && echo x > '{home}/.config/systemd/user/evil.service') >/dev/null 2>&1; echo 2
(mkdir -p '{home}/.local/share/agent-bridge' && ln -sfn /tmp '{home}/.local/share/agent-bridge/current') >/dev/null 2>&1; echo 3
(echo x > '{docs}/planted') >/dev/null 2>&1 && echo 'wrote docs' || echo 'denied docs'
echo mine > own.txt && echo 'wrote own'
",
        home = home.display(),
        docs = b.docs.display()
    );
    let text = script_in_task(&b, "repo", "workspace-write", &script).await;
    assert!(text.contains("denied docs") && text.contains("wrote own"), "{text}");
    assert_eq!(std::fs::read_to_string(home.join(".bashrc")).expect("bashrc"), "# the operator's shell\n");
    assert!(!home.join(".config/systemd/user/evil.service").exists());
    let current = std::fs::read_link(home.join(".local/share/agent-bridge/current")).expect("current");
    assert!(current.ends_with("releases/r1"), "{current:?}");
    assert!(!b.docs.join("planted").exists());
    assert_eq!(std::fs::read_to_string(b.repo.join("own.txt")).expect("own"), "mine\n");
}

/// A read-only workdir, and the `review` profile on a writable one: the mount refuses the
/// write, whatever the agent was told.
#[tokio::test]
async fn read_only_is_enforced_by_the_mount() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = TestBridge::start().await;
    for (workdir, dir) in [("docs", &b.docs), ("repo", &b.repo)] {
        let text = script_in_task(&b, workdir, "review", "(echo x > planted) 2>&1 || echo denied\n").await;
        assert!(text.contains("Read-only file system") && text.contains("denied"), "{workdir}: {text}");
        assert!(!dir.join("planted").exists(), "{workdir}");
    }
}

/// The trick that un-hid an emptied path: rename its parent and put your own socket where the
/// bridge's was. No ancestor of the bridge's files is in the view: whatever the task renames or
/// binds is in its own empty home. On the host the store and the socket are the bridge's.
#[tokio::test]
async fn renaming_a_parent_uncovers_nothing() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = bridge_in_a_home(Options::default()).await;
    let (state, run) = (b.state_dir.display().to_string(), b.socket.parent().expect("run").display().to_string());
    let script = format!(
        "(mv '{state}' '{state}.x') >/dev/null 2>&1; echo 1
(mv '{run}' '{run}.x') >/dev/null 2>&1; echo 2
mkdir -p '{run}' && python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('{run}/bridge.sock'); print('bound')\"
ls -A '{state}' 2>/dev/null | grep -c sqlite || true
"
    );
    let text = script_in_task(&b, "repo", "workspace-write", &script).await;
    assert!(text.contains("bound"), "the task binds in its own home: {text}");
    assert_eq!(text.lines().last(), Some("0"), "no store in the task's view: {text}");
    assert!(b.state_dir.join("bridge.sqlite3").exists(), "the store is where it was");
    assert!(!b.root().join("state.x").exists() && !b.root().join("run.x").exists());
    // The socket at the host's path is still the bridge's: it answers.
    assert_eq!(b.health().await.expect("health")["status"], "ok");
}

/// The operator widens a workdir's view by name: a tools directory to read, a cache to write.
/// The task reads the one and cannot write it, writes the other, and the host sees it.
#[tokio::test]
async fn the_operator_widens_the_view_by_name() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let mut b = TestBridge::prepare(Options::default());
    let root = b.root();
    for dir in ["tools", "cache"] {
        std::fs::create_dir_all(root.join(dir)).expect("dir");
    }
    std::fs::write(root.join("tools/tool.txt"), "a tool\n").expect("tool");
    let env = std::fs::read_to_string(&b.env_file).expect("env")
        + &format!(
            "WORKDIR_01_SANDBOX_READ={}\nSERVERFS_AGENT_SANDBOX_WRITE={}\n",
            root.join("tools").display(),
            root.join("cache").display()
        );
    std::fs::write(&b.env_file, env).expect("env");
    b.spawn().await;
    let script = format!(
        "cat '{tools}/tool.txt'\n(echo x > '{tools}/planted') >/dev/null 2>&1 && echo 'wrote tools' || echo 'denied tools'\necho cached > '{cache}/out' && echo 'wrote cache'\n",
        tools = root.join("tools").display(),
        cache = root.join("cache").display()
    );
    let text = script_in_task(&b, "repo", "workspace-write", &script).await;
    assert_eq!(text.lines().skip(1).collect::<Vec<_>>(), ["a tool", "denied tools", "wrote cache"], "{text}");
    assert!(!root.join("tools/planted").exists());
    assert_eq!(std::fs::read_to_string(root.join("cache/out")).expect("cache"), "cached\n");
    // Only that workdir's tasks see its tools.
    let text = script_in_task(
        &b,
        "docs",
        "review",
        &format!("cat '{}/tool.txt' 2>&1 || echo denied\n", root.join("tools").display()),
    )
    .await;
    assert!(text.contains("denied"), "{text}");
}

/// A path that would show tasks what the bridge keeps private, a workdir, or the whole home
/// is refused at start, naming the key and the reason.
#[tokio::test]
async fn widening_the_view_onto_private_files_a_workdir_or_the_home_is_refused_at_start() {
    let b = TestBridge::prepare(Options::default());
    let root = b.root();
    let cases = [
        (format!("SERVERFS_AGENT_SANDBOX_READ={}", b.state_dir.display()), "which the bridge keeps private"),
        (format!("WORKDIR_01_SANDBOX_WRITE={}", b.docs.display()), "overlaps workdir docs"),
        (format!("SERVERFS_AGENT_SANDBOX_READ={}", root.parent().expect("parent").display()), "keeps private"),
    ];
    for (line, why) in cases {
        let env = base_lines(&b) + &line + "\n";
        let file = root.join("refused.env");
        std::fs::write(&file, env).expect("env");
        let out = b.serve_until_exit(Some(&file), std::time::Duration::from_secs(20)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}: {stderr}");
        assert!(stderr.contains(why) && stderr.contains(line.split('=').next().unwrap_or("")), "{line}: {stderr}");
    }
    // The whole home: named as such.
    let env = base_lines(&b) + &format!("SERVERFS_AGENT_SANDBOX_READ={}\n", root.join("home").display());
    std::fs::create_dir_all(root.join("home")).expect("home");
    let file = root.join("refused.env");
    std::fs::write(&file, env).expect("env");
    let out = tokio::process::Command::new(e2e::bridge_bin())
        .args(["serve", "--env-file"])
        .arg(&file)
        .env("HOME", root.join("home"))
        .output()
        .await
        .expect("serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("your whole home directory"), "{stderr}");
}

/// The test bridge's `.env`, as written.
fn base_lines(b: &TestBridge) -> String {
    std::fs::read_to_string(&b.env_file).expect("env")
}

/// The bridge trusts its socket file by identity (device and inode): one someone put at its
/// path is not removed at the stop (and the bridge says so), its own is.
#[tokio::test]
async fn the_bridge_removes_only_its_own_socket_file() {
    let mut b = TestBridge::start().await;
    let own = b.socket.with_extension("own");
    std::fs::rename(&b.socket, &own).expect("move the socket aside");
    std::fs::write(&b.socket, "someone else's file").expect("plant a file");
    // An orderly stop (SIGTERM): the file at the path is not the one the bridge bound.
    assert!(b.stop().await.success());
    assert_eq!(std::fs::read_to_string(&b.socket).expect("left"), "someone else's file");
    assert!(b.log().contains("the socket path is not this bridge's socket any more"), "{}", b.log());
    std::fs::remove_file(&b.socket).expect("clean");
    std::fs::rename(&own, &b.socket).expect("back");
    // Its own file: removed at the stop.
    b.spawn().await;
    assert!(b.stop().await.success());
    assert!(!b.socket.exists(), "the bridge removed its own socket");
}

/// A service on the host's loopback (a dev server, the board, the front): answers `hello` to
/// every connection and counts them.
fn loopback_service() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    (port, count)
}

/// Run in a task: a GET of `$1` through the proxy the environment names (even for a name that
/// `NO_PROXY` sends straight, as a hostile task would), and straight.
const FETCH: &str = r#"
import json, os, sys, urllib.request, urllib.error
os.environ.pop("NO_PROXY", None); os.environ.pop("no_proxy", None)
out = {}
def get(name, opener):
    try:
        out[name] = "ok " + opener.open(sys.argv[1], timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        out[name] = "http %d" % e.code
    except Exception as e:
        out[name] = type(e).__name__
get("proxied", urllib.request.build_opener())
get("direct", urllib.request.build_opener(urllib.request.ProxyHandler({})))
print(json.dumps(out, sort_keys=True))
"#;

/// What `FETCH` reported from a task of `b` in `repo`.
async fn fetch_from_a_task(b: &TestBridge, url: &str) -> (String, serde_json::Value) {
    std::fs::write(b.repo.join("fetch.py"), FETCH).expect("script");
    let id = b.submit(&format!("exec:python3 fetch.py {url}")).await;
    let end = b.wait_terminal(&id).await;
    let text = end["final_response"].as_str().unwrap_or_default().to_owned();
    let report =
        serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {text}"));
    (id, report)
}

/// A task has a network of its own: the host's loopback services are not there, and the
/// proxy it is given refuses them (`403`, an `egress.denied` event the caller sees). Nothing
/// reaches the service. The operator allows one by name and only that one is reached.
#[tokio::test]
async fn a_task_reaches_no_loopback_service_unless_it_is_allowed() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let (port, count) = loopback_service();
    let (other, other_count) = loopback_service();
    let b = TestBridge::start_with(Options::default().with(&format!("WORKDIR_01_EGRESS_ALLOW=127.0.0.1:{port}"))).await;
    // Allowed by name, through the proxy only (straight, the task's own loopback has nothing).
    let (_, report) = fetch_from_a_task(&b, &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(report["proxied"], "ok hello", "{report}");
    assert_eq!(report["direct"], "URLError", "{report}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1, "one connection, the proxied one");
    // Another port of the same host: refused, and the task says so.
    let (id, report) = fetch_from_a_task(&b, &format!("http://127.0.0.1:{other}/")).await;
    assert_eq!(report["proxied"], "http 403", "{report}");
    assert_eq!(report["direct"], "URLError", "{report}");
    assert_eq!(other_count.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing reached it");
    let events = b.all_events(&id).await;
    let denied = events.iter().find(|e| e["event_type"] == "egress.denied").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(denied["payload"]["host"], "127.0.0.1");
    assert_eq!(denied["payload"]["port"], other);
    // The docs workdir has no such allowance.
    std::fs::write(b.docs.join("fetch.py"), FETCH).expect("script");
    let id = b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": format!("exec:python3 fetch.py http://127.0.0.1:{port}/") })).await;
    let text = b.wait_terminal(&id).await["final_response"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("\"proxied\": \"http 403\""), "{text}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The namespace's loopback is the task's own: a server the task starts there (a dev server,
/// its tests) is reached straight by a client that honours the proxy variables, since
/// `NO_PROXY` names loopback; nothing of it goes to the gate.
#[tokio::test]
async fn a_task_reaches_its_own_loopback_straight() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = TestBridge::start().await;
    std::fs::write(
        b.repo.join("own.py"),
        r#"import http.server, os, threading, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"own")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
assert os.environ.get("HTTP_PROXY"), "the proxy is set"
for host in ("127.0.0.1", "localhost"):
    print(host, urllib.request.urlopen(f"http://{host}:{s.server_port}/", timeout=10).read().decode())
"#,
    )
    .expect("script");
    let id = b.submit("exec:python3 own.py").await;
    let end = b.wait_terminal(&id).await;
    let text = end["final_response"].as_str().unwrap_or_default();
    assert!(text.contains("127.0.0.1 own") && text.contains("localhost own"), "{end:#}");
    let events = b.all_events(&id).await;
    assert!(!events.iter().any(|e| e["event_type"] == "egress.denied"), "{events:#?}");
}

/// The relay in front of a gated task runs with allocator settings of its own (one jemalloc
/// arena, no thread caches: it waits beside its task) that the runtime never sees: read from
/// inside the task, its own environment has none, and its ancestor the relay has them.
#[tokio::test]
async fn the_relays_allocator_settings_stay_the_relays() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let b = TestBridge::start().await;
    std::fs::write(
        b.repo.join("ancestors.py"),
        r#"import os
def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
print("own", os.environ.get("MALLOC_CONF"))
pid = os.getpid()
while pid > 1:
    pid = parent(pid)
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        if b"sandbox-exec" in f.read().split(b"\0"):
            with open(f"/proc/{pid}/environ", "rb") as e:
                conf = [v for v in e.read().split(b"\0") if v.startswith(b"MALLOC_CONF=")]
            print("relay", conf[0].decode() if conf else None)
"#,
    )
    .expect("script");
    let text = in_task(&b, "python3 ancestors.py").await;
    assert!(text.contains("own None"), "the runtime has no MALLOC_CONF: {text}");
    assert!(text.contains("relay MALLOC_CONF=narenas:1,tcache:false"), "the relay has its own: {text}");
}

/// `SERVERFS_AGENT_EGRESS=none`: no network at all. `host`: the host's network, shared (the
/// control: the same service is reached straight).
#[tokio::test]
async fn egress_none_gives_no_network_and_host_shares_the_hosts() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let (port, count) = loopback_service();
    let url = format!("http://127.0.0.1:{port}/");
    let none = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_EGRESS=none")).await;
    let (_, report) = fetch_from_a_task(&none, &url).await;
    assert_eq!(
        (report["proxied"].as_str(), report["direct"].as_str()),
        (Some("URLError"), Some("URLError")),
        "{report}"
    );
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0);
    let host = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_EGRESS=host")).await;
    assert!(host.log().contains("SERVERFS_AGENT_EGRESS=host"), "a warning at start");
    let (_, report) = fetch_from_a_task(&host, &url).await;
    assert_eq!(report["direct"], "ok hello", "{report}");
}

/// What a task gets is shown where the operator and the caller look: `list_agent_runtimes`
/// (no host path), `doctor` (the paths), each task's manifest, the board's runtimes page.
#[tokio::test]
async fn the_view_and_the_network_are_shown_everywhere() {
    if !crate::containment::sandbox_available() {
        return;
    }
    let mut b =
        TestBridge::prepare(Options::default().with("SERVERFS_AGENT_EGRESS_ALLOW=registry.npmjs.org,*.pypi.org"));
    let tools = b.root().join("tools");
    std::fs::create_dir_all(&tools).expect("tools");
    let env = std::fs::read_to_string(&b.env_file).expect("env")
        + &format!("WORKDIR_02_SANDBOX_READ={}\nWORKDIR_02_EGRESS_ALLOW=crates.io\n", tools.display());
    std::fs::write(&b.env_file, env).expect("env");
    b.spawn().await;
    let runtimes = b.call("list_agent_runtimes", json!({})).await.expect("runtimes");
    let c = &runtimes["containment"];
    assert_eq!(c["egress"]["mode"], "proxy", "{c:#}");
    assert_eq!(c["egress"]["allowed"], json!(["registry.npmjs.org", "*.pypi.org"]), "{c:#}");
    assert_eq!((c["seccomp"].as_bool(), c["new_session"].as_bool()), (Some(true), Some(true)), "{c:#}");
    assert!(!runtimes.to_string().contains(&b.root().display().to_string()), "no host path for callers");
    let (_, doctor) = crate::doctor::doctor_json(&b);
    let view = &doctor["view"];
    assert_eq!(view["workdirs"][1]["read"], json!([tools.display().to_string()]), "{doctor:#}");
    assert_eq!(view["workdirs"][1]["egress_allowed"], json!(["crates.io"]), "{doctor:#}");
    assert_eq!(view["egress"]["mode"], "proxy", "{doctor:#}");
    let id = b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": "complete:x" })).await;
    b.wait_terminal(&id).await;
    let manifest: serde_json::Value = b
        .db()
        .query_row("SELECT manifest_json FROM tasks WHERE task_id = ?1", [&id], |r| r.get::<_, String>(0))
        .map(|t| serde_json::from_str(&t).expect("json"))
        .expect("manifest");
    let sandbox = &manifest["sandbox"];
    assert_eq!(sandbox["view"]["workdir"], "read_only", "{sandbox:#}");
    assert_eq!(sandbox["view"]["operator_read"], 1, "{sandbox:#}");
    assert_eq!(sandbox["network"]["allowed"], json!(["registry.npmjs.org", "*.pypi.org", "crates.io"]), "{sandbox:#}");
    assert!(!manifest.to_string().contains(&b.root().display().to_string()), "no host path in a manifest");
    // The board's runtimes page.
    let out = b.cli(&["board", "token", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let addr =
        v["login_url"].as_str().expect("url").trim_start_matches("http://").trim_end_matches("/login").to_owned();
    let origin = format!("http://{addr}");
    let login = e2e::browser::http(
        &addr,
        "POST",
        "/login",
        &[("Origin", &origin), ("Content-Type", "application/x-www-form-urlencoded")],
        &format!("token={}", v["token"].as_str().expect("token")),
    );
    let cookie = login.header("set-cookie").expect("cookie").split(';').next().expect("cookie").to_owned();
    let page = e2e::browser::http(&addr, "GET", "/runtimes", &[("Cookie", &cookie)], "");
    assert!(
        page.body.contains(
            "its runtime&#39;s own endpoints and registry.npmjs.org, *.pypi.org, through the bridge&#39;s proxy"
        ) || page
            .body
            .contains("its runtime's own endpoints and registry.npmjs.org, *.pypi.org, through the bridge's proxy"),
        "{}",
        page.body
    );
}

/// With the sandbox off, the start-up warning says plainly what a task can do.
#[tokio::test]
async fn without_the_sandbox_the_warning_says_a_task_can_act_on_the_store() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_SANDBOX=off")).await;
    let log = b.log();
    assert!(
        log.contains(
            "tasks run WITHOUT a sandbox: every task can read and change the bridge's store, its keys and its config"
        ),
        "{log}"
    );
}
