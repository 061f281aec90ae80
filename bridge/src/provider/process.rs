//! Starting a provider child: [`spawn`] decides what a task's child gets — its command line
//! (inside the task sandbox when the machine runs it, [`super::sandbox`]), its environment with
//! the marker `AGENT_BRIDGE_TASK=<task_id>`, its egress gate, its cgroup and private `/tmp` —
//! and has [`super::spawner`] start it in its own process group, tied to the bridge before it
//! executes anything ([`super::tether`]). A sandbox's init and PID namespace are read from
//! bwrap and recorded for the stop's proof; the started child is handed to
//! [`super::supervise`], which stops it and proves it gone.
//!
//! What a spawn made before it failed (the private `/tmp`, the cgroup, the leader) is undone
//! by guards, whichever way it fails: an error, or the caller going away mid-spawn.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use super::sandbox::{INFO_FD, SECCOMP_FD, Wrap};
use super::spawner::{Launch, MARKER_VAR, Started};
use super::supervise::{Sandboxed, Supervised};
use super::tether::{SANDBOX_VAR, SpawnKind, TestHook, test_hook};
use crate::config::EgressMode;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Absolute program path.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<OsString>,
    /// Working directory (the task's resolved cwd).
    pub cwd: PathBuf,
    /// The complete environment (nothing else is inherited); the marker is added.
    pub env: Vec<(OsString, OsString)>,
    /// The task id written into [`MARKER_VAR`].
    pub task_id: String,
    /// The task sandbox to start the child in (`None`: uncontained, e.g. a version probe).
    pub sandbox: Option<super::sandbox::Containment>,
    /// In the sandbox: the task's workdir root and whether the child may write it (see
    /// [`Containment::wrap`](super::sandbox::Containment::wrap)).
    pub workdir: Option<(PathBuf, bool)>,
    /// In the sandbox, for a worktree task's child (whose `workdir` is its worktree): what it
    /// holds of the repository, and the checkout whose policy applies.
    pub git: Option<super::view::TreeGit>,
    /// In the sandbox: more paths the child reads.
    pub read: Vec<PathBuf>,
    /// In the sandbox: more paths the child writes (its runtime's home, a session store).
    pub write: Vec<PathBuf>,
    /// In the sandbox, with `SERVERFS_AGENT_EGRESS=proxy`: the runtime's own endpoints, to
    /// which the operator's rules are added for the child's egress gate; `None`: no network at
    /// all (a snapshot's git).
    pub egress: Option<Vec<crate::egress::Rule>>,
    /// What the child is for (whether it dies with the bridge: [`SpawnKind::dies_with_bridge`]).
    pub kind: SpawnKind,
    /// Holds the child's egress gate until released (see [`crate::egress::Hold`]). A hold
    /// needs a gate: a spawn given one without a proxy gate to apply it to is refused, so a
    /// caller relying on it never runs unheld.
    pub hold: Option<crate::egress::Hold>,
    /// The child runs beside the task's own process (the change-set baseline while the agent
    /// starts): it joins the task's cgroup and carries its marker and sandbox variable, so
    /// every proof about the task covers it and a restart's sweep finds it, but it owns none
    /// of them — its stop ends its own sandbox (PID namespace) and leaves the task's cgroup
    /// and other marked processes alone. Its `/tmp` is a tmpfs of its own. Needs the sandbox.
    pub beside: bool,
}

/// A started child and its pipes.
pub struct Spawned {
    /// The supervised leader.
    pub process: Supervised,
    /// Its stdin.
    pub stdin: ChildStdin,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
}

/// What a spawn has made on the host before its child runs: the sandbox's private `/tmp` and
/// the task's cgroup. Dropped before it is disarmed, it removes them (an empty cgroup at once;
/// one a child already entered is killed and removed on the runtime).
#[derive(Debug, Default)]
struct Made {
    private_tmp: Option<PathBuf>,
    cgroup: Option<PathBuf>,
}

impl Made {
    /// Keeps what was made: the cgroup goes to the supervisor, the private `/tmp` with the
    /// sandbox.
    fn disarm(mut self) -> Option<PathBuf> {
        self.private_tmp = None;
        self.cgroup.take()
    }

    /// Undoes it all, waiting for the cgroup to empty (bounded, as the stop's).
    async fn undo(mut self) {
        if let Some(tmp) = self.private_tmp.take() {
            let _ = tokio::task::spawn_blocking(move || super::sandbox::remove_private_tmp(&tmp)).await;
        }
        if let Some(dir) = self.cgroup.take() {
            let _ = super::cgroup::kill_and_remove(&dir).await;
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Some(tmp) = self.private_tmp.take() {
            super::sandbox::remove_private_tmp(&tmp);
        }
        if let Some(dir) = self.cgroup.take() {
            super::cgroup::remove_tree(&dir);
            // Still there: a child entered it. Killed and removed on the runtime, if there is one.
            if dir.exists()
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                runtime.spawn(async move { super::cgroup::kill_and_remove(&dir).await });
            }
        }
    }
}

/// Starts `spec` in a new process group with a decided environment, inside the task sandbox
/// when the spec names one. Must be called on a runtime worker thread, never from
/// `spawn_blocking`: a sandbox dies with the thread that forked it (`--die-with-parent`).
pub async fn spawn(spec: SpawnSpec) -> std::io::Result<Spawned> {
    let (gate, own_loopback) = open_gate(&spec).await?;
    // The sandbox's command line and the task's cgroup are prepared off the reactor (they
    // touch the filesystem); the fork itself stays on this worker thread.
    let (wrap, made, joins) = match spec.sandbox.clone() {
        Some(containment) => {
            let view = super::sandbox::ViewRequest {
                program: spec.program.clone(),
                cwd: spec.cwd.clone(),
                workdir: spec.workdir.clone(),
                git: spec.git.clone(),
                read: spec.read.clone(),
                write: spec.write.clone(),
                gate: gate.as_ref().map(|g| g.path().to_owned()),
                task_tmp: !spec.beside,
            };
            let (task_id, env, beside) = (spec.task_id.clone(), spec.env.clone(), spec.beside);
            tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                let wrap = containment.wrap(&task_id, &env, &view)?;
                let cgroup = containment.cgroups().map(|c| c.create(&task_id)).transpose()?;
                // A child beside the task's own makes nothing of its own: the task owns both.
                Ok(match beside {
                    true => (wrap, Made::default(), cgroup),
                    false => {
                        let private_tmp = wrap.as_ref().and_then(|w| w.private_tmp.clone());
                        (wrap, Made { private_tmp, cgroup: cgroup.clone() }, cgroup)
                    }
                })
            })
            .await
            .map_err(std::io::Error::other)??
        }
        None => (None, Made::default(), None),
    };
    if spec.beside && wrap.is_none() {
        // Its stop's only proof is its sandbox's PID namespace.
        return Err(std::io::Error::other("a child beside the task's own needs the task sandbox"));
    }
    let untethered = test_hook(spec.kind) == Some(TestHook::Untethered);
    let (program, args) = command_line(&spec, wrap.as_ref(), untethered);
    let mut pass = Vec::new();
    let info = match &wrap {
        Some(_) => {
            let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
            pass.push((write, INFO_FD));
            Some(read)
        }
        None => None,
    };
    if wrap.as_ref().is_some_and(|w| w.seccomp) {
        pass.push((super::seccomp::program_pipe()?, SECCOMP_FD));
    }
    let Started { mut leader, stdin, stdout, mut stderr } = super::spawner::start(Launch {
        program,
        args,
        cwd: spec.cwd.clone(),
        env: environment(&spec, wrap.as_ref(), own_loopback),
        tether: spec.kind.dies_with_bridge(wrap.is_some()).then_some(spec.kind),
        pass,
        cgroup: joins,
    })?;
    let sandbox = match (wrap, info) {
        (Some(w), Some(read)) => match read_info(read).await {
            Some(info) => Some(Sandboxed::started(info, w.private_tmp)),
            None => {
                // bwrap said nothing: the sandbox did not start. Its own words are on stderr.
                let _ = tokio::time::timeout(Duration::from_secs(5), leader.child().wait()).await;
                let mut why = String::new();
                use tokio::io::AsyncReadExt;
                let _ = tokio::time::timeout(Duration::from_secs(1), stderr.read_to_string(&mut why)).await;
                // The whole group: a sandbox init that bwrap cloned and never released
                // is in it, blocked, and would never end by itself.
                leader.abandon().await;
                made.undo().await;
                let why: String = why.trim().chars().take(400).collect();
                return Err(std::io::Error::other(format!("the task sandbox did not start: {why}")));
            }
        },
        _ => None,
    };
    let cgroup = made.disarm();
    super::peers::register(leader.pid(), &spec.task_id, sandbox.as_ref().map(Sandboxed::namespace));
    let mut process = Supervised::new(leader, spec.task_id, sandbox, cgroup, gate);
    if spec.beside {
        process.beside();
    }
    Ok(Spawned { process, stdin, stdout, stderr })
}

/// A child that may reach the network through the proxy gets its gate first (the sandbox
/// mounts it): the gate, and whether the namespace's loopback stays the task's own (no rule
/// sends loopback names to the host's).
async fn open_gate(spec: &SpawnSpec) -> std::io::Result<(Option<crate::egress::Gate>, bool)> {
    match (&spec.sandbox, &spec.egress) {
        (Some(c), Some(own)) if c.contained() && c.network_mode() == EgressMode::Proxy => {
            let mut rules = own.clone();
            let policy_root = match &spec.git {
                Some(git) => Some(git.checkout.as_path()),
                None => spec.workdir.as_ref().map(|(root, _)| root.as_path()),
            };
            rules.extend(c.egress().operator_rules(policy_root));
            let allow = crate::egress::Allow::new(rules);
            let own_loopback = !allow.names_loopback();
            Ok((Some(c.egress().open(&spec.task_id, allow, spec.hold.clone()).await?), own_loopback))
        }
        _ if spec.hold.is_some() => Err(std::io::Error::other("a held start needs the task's egress gate")),
        _ => Ok((None, false)),
    }
}

/// The program and arguments that start `spec`: the program itself, or bwrap with the
/// sandbox's arguments (without `--die-with-parent` when the test hook leaves the child
/// `untethered`), then the relay when the sandbox has a gate, then the program.
fn command_line(spec: &SpawnSpec, wrap: Option<&Wrap>, untethered: bool) -> (PathBuf, Vec<OsString>) {
    let Some(w) = wrap else { return (spec.program.clone(), spec.args.clone()) };
    // Inside the sandbox only the task's own processes carry the marker (bwrap's pair is
    // the leader and the namespace's init, proven by pid and by namespace); bwrap's pair
    // carries the sandbox variable instead, which bwrap unsets for the program.
    let base = w.args[..w.args.len() - 1].iter().filter(|a| !untethered || *a != "--die-with-parent");
    let mut args: Vec<OsString> = base.cloned().collect();
    args.extend(["--unsetenv".into(), SANDBOX_VAR.into()]);
    match &w.relay {
        // The relay runs first and sets the marker for the runtime alone.
        Some(relay) => {
            // The relay's own allocator settings, unless the runtime was given some: then the
            // relay runs with those (the runtime's environment is the spec's, unchanged).
            let own_malloc_conf = !spec.env.iter().any(|(k, _)| k == "MALLOC_CONF");
            if own_malloc_conf {
                args.extend(["--setenv", "MALLOC_CONF", super::relay::MALLOC_CONF].map(OsString::from));
            }
            args.extend(["--".into(), relay.clone().into_os_string()]);
            args.extend(["sandbox-exec", "--gate", super::relay::GATE, "--marker"].map(OsString::from));
            args.push(format!("{MARKER_VAR}={}", spec.task_id).into());
            if own_malloc_conf {
                args.extend(["--unset", "MALLOC_CONF"].map(OsString::from));
            }
            args.extend(["--".into(), spec.program.clone().into_os_string()]);
        }
        None => {
            args.extend(["--setenv".into(), MARKER_VAR.into(), spec.task_id.clone().into()]);
            args.extend(["--".into(), spec.program.clone().into_os_string()]);
        }
    }
    args.extend(spec.args.iter().cloned());
    (w.bwrap.clone(), args)
}

/// The child's whole environment, in order (a later entry of a name wins): the spec's, the
/// task's git settings, the marker (or, for bwrap, the sandbox variable) and, behind a gate,
/// the proxy settings that lead to the relay.
fn environment(spec: &SpawnSpec, wrap: Option<&Wrap>, own_loopback: bool) -> Vec<(OsString, OsString)> {
    let mut env = spec.env.clone();
    if let Some(git) = &spec.git {
        // The task's git writes its objects to its private directory, never the repository's.
        env.extend(git.env());
    }
    match wrap {
        Some(_) => env.push((SANDBOX_VAR.into(), spec.task_id.clone().into())),
        None => env.push((MARKER_VAR.into(), spec.task_id.clone().into())),
    }
    if wrap.is_some_and(|w| w.relay.is_some()) {
        // The runtime's way out: the relay on the namespace's loopback (upper and lower case:
        // curl reads only the latter for http).
        let proxy = OsString::from(format!("http://{}", super::relay::LISTEN));
        for var in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"] {
            env.push((var.into(), proxy.clone()));
        }
        // The namespace's loopback is the task's own (a dev server it starts, its tests): reached
        // directly, unless a rule sends loopback names to the host's, which only the proxy can.
        if own_loopback {
            for var in ["NO_PROXY", "no_proxy"] {
                env.push((var.into(), "localhost,127.0.0.1,::1".into()));
            }
        }
    }
    env
}

/// Reads bwrap's information (bounded: 10 s), or `None` when it closed the pipe without it.
async fn read_info(read: OwnedFd) -> Option<super::sandbox::SandboxInfo> {
    use tokio::io::AsyncReadExt;
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read).ok()?;
    let mut text = Vec::new();
    let mut limited = (&mut pipe).take(64 * 1024);
    tokio::time::timeout(Duration::from_secs(10), limited.read_to_end(&mut text)).await.ok()?.ok()?;
    super::sandbox::parse_info(std::str::from_utf8(&text).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(env: Vec<(OsString, OsString)>) -> SpawnSpec {
        SpawnSpec {
            program: "/usr/bin/codex".into(),
            args: vec!["app-server".into()],
            cwd: "/w".into(),
            env,
            task_id: "agt_1".into(),
            sandbox: None,
            workdir: None,
            git: None,
            read: Vec::new(),
            write: Vec::new(),
            egress: None,
            kind: SpawnKind::Probe,
            hold: None,
            beside: false,
        }
    }

    fn wrap() -> Wrap {
        Wrap {
            bwrap: "/usr/bin/bwrap".into(),
            args: vec!["--die-with-parent".into(), "--".into()],
            private_tmp: Some("/t".into()),
            seccomp: false,
            relay: Some("/bin/agent-bridge".into()),
        }
    }

    fn words(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|a| a.to_str().expect("UTF-8")).collect()
    }

    #[test]
    fn the_relay_alone_gets_its_allocator_settings() {
        let (program, args) = command_line(&spec(Vec::new()), Some(&wrap()), false);
        assert_eq!(program, PathBuf::from("/usr/bin/bwrap"));
        let relay = format!("{MARKER_VAR}=agt_1");
        assert_eq!(
            words(&args),
            [
                "--die-with-parent",
                "--unsetenv",
                SANDBOX_VAR,
                "--setenv",
                "MALLOC_CONF",
                super::super::relay::MALLOC_CONF,
                "--",
                "/bin/agent-bridge",
                "sandbox-exec",
                "--gate",
                super::super::relay::GATE,
                "--marker",
                &relay,
                "--unset",
                "MALLOC_CONF",
                "--",
                "/usr/bin/codex",
                "app-server",
            ]
        );
    }

    #[test]
    fn a_runtime_given_allocator_settings_keeps_them() {
        let own = spec(vec![("MALLOC_CONF".into(), "narenas:2".into())]);
        let (_, args) = command_line(&own, Some(&wrap()), true);
        let args = words(&args);
        assert!(!args.contains(&"--setenv") && !args.contains(&"--unset"), "{args:?}");
        assert!(!args.contains(&"--die-with-parent"), "untethered: {args:?}");
        assert_eq!(args[args.len() - 3..], ["--", "/usr/bin/codex", "app-server"]);
    }
}
