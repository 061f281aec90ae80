//! The task sandbox: every provider child in its own user, mount, PID and cgroup namespaces,
//! started through Debian's `bubblewrap` (`bwrap`), unprivileged.
//!
//! Inside, the host filesystem is the same at the same paths, except that the bridge's private
//! directories (state, socket, locks, the rendered config and `provider.env`), the user's
//! session sockets (`$XDG_RUNTIME_DIR`, screen's directory) and the operator's
//! `SERVERFS_AGENT_SANDBOX_HIDE` paths are replaced by empty read-only directories (an empty
//! file for a file), and `/tmp` is a fresh per-task directory. The child is the tree of its own
//! PID namespace's init: when the sandbox ends, or the bridge dies (`--die-with-parent`), the
//! kernel kills every process in it, whatever they did to their session or environment.
//!
//! [`Containment::detect`] decides once, at startup, whether this machine can run the sandbox
//! (`SERVERFS_AGENT_SANDBOX=auto|required|off`); the decision is shown by `doctor`,
//! `list_agent_runtimes`, each task's manifest and the board.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::env::BaseEnv;
use super::spawner::run_bounded;
use super::view::{Access, Mounts, SystemEntry};
use crate::config::{BridgeConfig, SandboxMode};

/// What a task runs under, decided once at startup.
#[derive(Debug, Clone)]
pub struct Containment {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    mode: SandboxMode,
    /// The bubblewrap executable and its version, when the sandbox works here.
    bwrap: Option<(PathBuf, String)>,
    /// Why the seccomp filter does not load here (`None`: it does, or there is no sandbox).
    seccomp_refused: Option<String>,
    /// Why a sandbox cannot have a network namespace of its own here (`None`: it can, or
    /// there is no sandbox, or the operator chose the host's network).
    network_refused: Option<String>,
    /// Why there is no sandbox (operator-facing; may name host paths, never sent to MCP).
    reason: Option<String>,
    /// What to replace by empty directories (existing, canonical).
    hidden: Vec<PathBuf>,
    /// Where each task's private `/tmp` is created.
    tmp_root: PathBuf,
    /// `<state>/worktrees`: worktree tasks' trees, the one part of the state directory a
    /// task may work in (its own tree only).
    worktrees: PathBuf,
    /// The configured workdirs (canonical): no operator path may show one.
    workdirs: Vec<PathBuf>,
    /// The system part of every view (decided at start).
    system: Vec<SystemEntry>,
    /// `SERVERFS_AGENT_SANDBOX_READ` and `_WRITE`, checked at start.
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    /// Each workdir's own `SANDBOX_READ` and `_WRITE`.
    workdir_paths: Vec<WorkdirPaths>,
    /// The bridge's home directory (canonical): never shown whole.
    home: Option<PathBuf>,
    /// Where task cgroups are made, when cgroup v2 is delegated to the bridge (not with
    /// `SERVERFS_AGENT_SANDBOX=off`, which keeps the first wave's behaviour).
    cgroups: Option<super::cgroup::Cgroups>,
    /// This bridge's instance name (its state directory's digest), in its helpers' markers.
    instance: String,
    /// Where tasks' network traffic may go, and their gates.
    egress: crate::egress::Egress,
    /// The first program of a sandbox with a gate (`agent-bridge sandbox-exec`): this binary.
    relay: Option<PathBuf>,
}

/// One workdir's own additions to its tasks' view.
#[derive(Debug, Clone)]
struct WorkdirPaths {
    root: PathBuf,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
}

/// How to start one child inside the sandbox.
#[derive(Debug, Clone)]
pub struct Wrap {
    /// The bwrap executable.
    pub bwrap: PathBuf,
    /// bwrap's arguments up to and including `--`; the program and its arguments follow.
    pub args: Vec<OsString>,
    /// The task's private `/tmp` on the host, removed once the task's stop is proven; `None`
    /// for a child beside the task's own, whose `/tmp` is a tmpfs of its own.
    pub private_tmp: Option<PathBuf>,
    /// bwrap loads the seccomp filter from [`SECCOMP_FD`] (`--seccomp`).
    pub seccomp: bool,
    /// With an egress gate mounted: the relay program to run first (`sandbox-exec`).
    pub relay: Option<PathBuf>,
}

/// Refused to start a task without the sandbox (`AGENT_SANDBOX_UNAVAILABLE`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// The namespaces every task sandbox starts in: its own user, PID and (where the kernel offers
/// it) cgroup namespaces and session, dying with the bridge. Its filesystem is a view built from
/// nothing ([`super::view`], [`Containment::wrap`]).
pub const BASE_FLAGS: &[&str] = &[
    "--unshare-user",
    "--unshare-pid",
    "--unshare-cgroup-try",
    "--die-with-parent",
    // A session of its own: no controlling terminal, so no `/dev/tty` of the operator's.
    "--new-session",
];

/// The descriptor bwrap writes its JSON information to (the sandbox's init pid and namespaces).
pub const INFO_FD: i32 = 3;
/// The descriptor bwrap reads the seccomp filter from (`--seccomp`, [`super::seccomp`]).
pub const SECCOMP_FD: i32 = 4;

const INSTALL_HINT: &str = "install Debian's bubblewrap (apt-get install bubblewrap) and restart the bridge";
const USERNS_HINT: &str = "unprivileged user namespaces are refused here: allow them (sysctl \
     kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 and later sysctl \
     kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile that lets bwrap use them) \
     and restart the bridge";

impl Containment {
    /// Decides whether tasks run in the sandbox: looks `bwrap` up on the bridge's `PATH` and
    /// starts one trivial sandbox to see that the kernel allows it. Blocking (runs a process,
    /// bounded to 10 s). Refuses a hidden path that would hide a workdir.
    pub fn detect(config: &BridgeConfig, base_env: &BaseEnv) -> Result<Containment, String> {
        let hidden = hidden_paths(config, base_env)?;
        let tmp_root = config.state_dir.join("tmp");
        let wants_network = config.sandbox.egress != crate::config::EgressMode::Host;
        let (bwrap, reason, seccomp_refused, network_refused) = match config.sandbox.mode {
            SandboxMode::Off => {
                (None, Some("SERVERFS_AGENT_SANDBOX=off: tasks run without a sandbox".to_owned()), None, None)
            }
            SandboxMode::Auto | SandboxMode::Required => match super::env::which("bwrap", base_env.get("PATH")) {
                None => (None, Some(format!("bwrap is not on the bridge's PATH: {INSTALL_HINT}")), None, None),
                Some(bin) => match try_sandbox(&bin) {
                    Ok(version) => {
                        let seccomp = try_seccomp(&bin).err();
                        let network = if wants_network { try_network(&bin).err() } else { None };
                        (Some((bin, version)), None, seccomp, network)
                    }
                    Err(why) => (None, Some(why), None, None),
                },
            },
        };
        let workdirs: Vec<PathBuf> =
            config.workdirs.iter().map(|w| w.path.canonicalize().unwrap_or_else(|_| w.path.clone())).collect();
        let home = base_env.get("HOME").map(PathBuf::from).and_then(|h| h.canonicalize().ok());
        let (read, write, workdir_paths) = operator_paths(config, &hidden, &workdirs, home.as_deref())?;
        let system = super::view::system();
        let egress = egress_of(config, &workdirs);
        let relay = std::env::current_exe().ok().and_then(|e| e.canonicalize().ok());
        let cgroups = match config.sandbox.mode {
            SandboxMode::Off => None,
            SandboxMode::Auto | SandboxMode::Required => super::cgroup::Cgroups::detect(&config.state_dir),
        };
        let instance = super::cgroup::instance_name(&config.state_dir);
        let inner = Inner {
            mode: config.sandbox.mode,
            bwrap,
            seccomp_refused,
            network_refused,
            reason,
            hidden,
            tmp_root,
            worktrees: config.state_dir.join("worktrees"),
            workdirs,
            system,
            read,
            write,
            workdir_paths,
            home,
            cgroups,
            instance,
            egress,
            relay,
        };
        Ok(Containment { inner: Arc::new(inner) })
    }

    /// No sandbox, for tests of the layers above (says why).
    pub fn none(mode: SandboxMode, reason: &str) -> Containment {
        Containment {
            inner: Arc::new(Inner {
                mode,
                bwrap: None,
                seccomp_refused: None,
                network_refused: None,
                reason: Some(reason.to_owned()),
                hidden: Vec::new(),
                tmp_root: std::env::temp_dir(),
                worktrees: PathBuf::from("/nonexistent-worktrees"),
                workdirs: Vec::new(),
                system: Vec::new(),
                read: Vec::new(),
                write: Vec::new(),
                workdir_paths: Vec::new(),
                home: None,
                egress: crate::egress::Egress::new(
                    crate::config::EgressMode::Host,
                    &std::env::temp_dir(),
                    Vec::new(),
                    Vec::new(),
                ),
                relay: None,
                cgroups: None,
                instance: "none".to_owned(),
            }),
        }
    }

    /// Whether tasks run in the sandbox.
    pub fn contained(&self) -> bool {
        self.inner.bwrap.is_some()
    }

    /// `bubblewrap` or `none`: what a task's manifest records.
    pub fn kind(&self) -> &'static str {
        if self.contained() { "bubblewrap" } else { "none" }
    }

    /// Where task cgroups are made, when the bridge has a delegated cgroup v2.
    pub fn cgroups(&self) -> Option<&super::cgroup::Cgroups> {
        self.inner.cgroups.as_ref()
    }

    /// The marker of a helper child (not a task) that may run in the sandbox: it names this
    /// bridge's instance, so that a later start can tell its own helpers from another bridge's.
    pub fn helper_marker(&self, what: &str) -> String {
        format!("{what}-{}-{}", self.inner.instance, crate::ids::request_id())
    }

    /// Whether `marker` is one of [`Containment::helper_marker`]'s, by this bridge.
    pub fn is_own_helper(&self, marker: &str) -> bool {
        marker.split('-').rev().nth(1) == Some(self.inner.instance.as_str())
    }

    /// Where tasks' network traffic may go.
    pub fn egress(&self) -> &crate::egress::Egress {
        &self.inner.egress
    }

    /// The network tasks actually get: the configured mode, or the host's where this machine
    /// refuses a sandbox a network namespace of its own (with `auto`; `required` then refuses
    /// tasks instead).
    pub fn network_mode(&self) -> crate::config::EgressMode {
        match self.inner.network_refused {
            Some(_) => crate::config::EgressMode::Host,
            None => self.inner.egress.mode(),
        }
    }

    /// What a task of `workdir` gets from the sandbox, for its manifest (no host path): its
    /// view, its network and its filter.
    pub fn manifest_json(&self, workdir: &crate::config::Workdir, writable: bool) -> Value {
        if !self.contained() {
            return json!({ "contained": false });
        }
        let root = workdir.path.canonicalize().unwrap_or_else(|_| workdir.path.clone());
        let own = self.inner.workdir_paths.iter().find(|w| w.root == root);
        let count = |global: &[PathBuf], own: Option<&[PathBuf]>| global.len() + own.map_or(0, <[PathBuf]>::len);
        let mut allowed: Vec<String> =
            self.inner.egress.operator_rules(Some(&root)).iter().map(ToString::to_string).collect();
        allowed.dedup();
        json!({
            "contained": true,
            "view": {
                "workdir": if writable { "read_write" } else { "read_only" },
                "home": "private",
                "tmp": "private",
                "runtime_home": "read_write",
                "operator_read": count(&self.inner.read, own.map(|w| w.read.as_slice())),
                "operator_write": count(&self.inner.write, own.map(|w| w.write.as_slice())),
            },
            "network": {
                "mode": self.network_mode().as_str(),
                "runtime_endpoints": self.network_mode() == crate::config::EgressMode::Proxy,
                "allowed": allowed,
            },
            "seccomp": self.seccomp(),
            "new_session": true,
        })
    }

    /// The network tasks get: the mode and the hosts every task may reach beyond its runtime's
    /// own endpoints (`none` without the sandbox, which has no network of its own to give).
    fn egress_json(&self) -> Value {
        let mode = if self.contained() { self.network_mode().as_str() } else { "host" };
        let allowed: Vec<String> = self.inner.egress.operator_rules(None).iter().map(ToString::to_string).collect();
        json!({ "mode": mode, "allowed": allowed })
    }

    /// Whether tasks run under the seccomp filter.
    pub fn seccomp(&self) -> bool {
        self.contained() && self.inner.seccomp_refused.is_none()
    }

    /// The refusal for a new task, when the mode is `required` and the sandbox, or one of its
    /// layers, cannot run.
    pub fn check_required(&self) -> Result<(), Unavailable> {
        if self.inner.mode != SandboxMode::Required {
            return Ok(());
        }
        match (&self.inner.bwrap, &self.inner.seccomp_refused, &self.inner.network_refused) {
            (None, _, _) => Err(Unavailable(format!(
                "SERVERFS_AGENT_SANDBOX=required but the task sandbox cannot run on this machine: {}",
                caller_safe(self.inner.reason.as_deref().unwrap_or("unknown"))
            ))),
            (Some(_), Some(why), _) => Err(Unavailable(format!(
                "SERVERFS_AGENT_SANDBOX=required but the task sandbox's seccomp filter cannot load here: {}",
                caller_safe(why)
            ))),
            (Some(_), None, Some(why)) => Err(Unavailable(format!(
                "SERVERFS_AGENT_SANDBOX=required but the task sandbox cannot have a network namespace of its own here: {}",
                caller_safe(why)
            ))),
            (Some(_), None, None) => Ok(()),
        }
    }

    /// The operator's view (`doctor`, the board): may name host paths.
    pub fn operator_json(&self) -> Value {
        json!({
            "mode": self.inner.mode.as_str(),
            "kind": self.kind(),
            "contained": self.contained(),
            "bwrap": self.inner.bwrap.as_ref().map(|(p, _)| p.display().to_string()),
            "version": self.inner.bwrap.as_ref().map(|(_, v)| v.clone()),
            "detail": self.inner.reason,
            "cgroup": self.inner.cgroups.is_some(),
            "seccomp": self.seccomp(),
            "seccomp_detail": self.inner.seccomp_refused,
            "network_detail": self.inner.network_refused,
            "new_session": self.contained(),
            "egress": self.egress_json(),
            "view": {
                "read": self.inner.read.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "write": self.inner.write.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "workdirs": self.inner.workdir_paths.iter().filter(|w| !w.read.is_empty() || !w.write.is_empty()).map(|w| json!({
                    "root": w.root.display().to_string(),
                    "read": w.read.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "write": w.write.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            },
            "hidden": self.inner.hidden.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })
    }

    /// A caller's view (`list_agent_runtimes`): no host path.
    pub fn caller_json(&self) -> Value {
        json!({
            "mode": self.inner.mode.as_str(),
            "kind": self.kind(),
            "contained": self.contained(),
            "cgroup": self.inner.cgroups.is_some(),
            "seccomp": self.seccomp(),
            "new_session": self.contained(),
            "egress": self.egress_json(),
            "detail": self.inner.reason.as_deref().or(self.inner.seccomp_refused.as_deref()).map(caller_safe),
        })
    }

    /// How to start a child of `task_id` in the sandbox (`None` when uncontained), in a view
    /// built from nothing ([`super::view`]): the system, the child's `workdir` (read-write when
    /// its flag says so, else read-only) with the operator's paths for it, `read` and `write`
    /// (what the runtime itself needs: its home, a session store, a snapshot directory), what
    /// `program` needs, a private `/tmp` and an empty `$HOME`. A cwd inside one of the bridge's
    /// private paths is refused. Blocking (creates the private `/tmp`, reads the program).
    #[expect(
        clippy::disallowed_methods,
        reason = "blocking by contract: the spawn prepares the sandbox on a blocking thread"
    )]
    pub fn wrap(
        &self,
        task_id: &str,
        env: &[(OsString, OsString)],
        view: &ViewRequest,
    ) -> std::io::Result<Option<Wrap>> {
        let Some((bwrap, _)) = &self.inner.bwrap else { return Ok(None) };
        // A worktree lives under the state directory: only its own tree is the exception.
        let in_worktree = |cwd: &Path| {
            view.workdir
                .as_ref()
                .is_some_and(|(root, _)| root.parent() == Some(self.inner.worktrees.as_path()) && cwd.starts_with(root))
        };
        if let Ok(cwd) = view.cwd.canonicalize()
            && self.inner.hidden.iter().any(|h| cwd.starts_with(h))
            && !in_worktree(&cwd)
        {
            return Err(std::io::Error::other("the task's directory is one of the bridge's private paths"));
        }
        let private_tmp = match view.task_tmp {
            true => {
                let private_tmp = self.inner.tmp_root.join(task_id);
                crate::files::ensure_private_dir(&self.inner.tmp_root).map_err(std::io::Error::other)?;
                match std::fs::create_dir(&private_tmp) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                Some(private_tmp)
            }
            false => None,
        };
        let mut mounts = self.mounts(env, view);
        let relay = match (&view.gate, &self.inner.relay) {
            (Some(gate), Some(relay)) => {
                mounts.add_at(gate.clone(), PathBuf::from(super::relay::GATE));
                mounts.add(relay.clone(), Access::Read);
                Some(relay.clone())
            }
            _ => None,
        };
        let mut args: Vec<OsString> = BASE_FLAGS.iter().map(OsString::from).collect();
        if self.network_mode() != crate::config::EgressMode::Host {
            args.push("--unshare-net".into());
        }
        args.extend(super::view::args(&self.inner.system, private_tmp.as_deref(), &mounts, &self.inner.hidden));
        args.extend(["--chdir".into(), view.cwd.clone().into_os_string()]);
        args.extend(["--setenv".into(), "TMPDIR".into(), "/tmp".into()]);
        let seccomp = self.seccomp();
        if seccomp {
            args.extend(["--seccomp".into(), SECCOMP_FD.to_string().into()]);
        }
        args.extend(["--info-fd".into(), INFO_FD.to_string().into(), "--".into()]);
        Ok(Some(Wrap { bwrap: bwrap.clone(), args, private_tmp, seccomp, relay }))
    }

    /// What one child's view holds beyond the system part. Blocking (reads the program).
    fn mounts(&self, env: &[(OsString, OsString)], view: &ViewRequest) -> Mounts {
        let inner = &self.inner;
        let mut mounts = Mounts::default();
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        // The private, empty home (a runtime's own home and the operator's paths go into it).
        if let Some(home) = var("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h.components().count() > 1) {
            mounts.add(home, Access::Empty);
        }
        mounts.add(PathBuf::from("/var/tmp"), Access::Empty);
        // A runtime directory of its own, empty (the operator's session sockets live in theirs).
        if let Some(dir) =
            var("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_absolute() && d.components().count() > 1)
        {
            mounts.add(dir, Access::Empty);
        }
        let existing = |p: &PathBuf| p.canonicalize().ok();
        let refuse = |p: &Path| self.too_wide(p);
        for need in super::view::program_needs(&view.program, var("PATH").as_deref(), &refuse) {
            mounts.add(need, Access::Read);
        }
        let mut read: Vec<PathBuf> = inner.read.clone();
        let mut write: Vec<PathBuf> = inner.write.clone();
        if let Some((root, writable)) = &view.workdir {
            let policy_root = view.git.as_ref().map_or(root, |g| &g.checkout);
            if let Some(extra) = inner.workdir_paths.iter().find(|w| w.root == *policy_root) {
                read.extend(extra.read.iter().cloned());
                write.extend(extra.write.iter().cloned());
            }
            mounts.add(root.clone(), if *writable { Access::Write } else { Access::Read });
            match &view.git {
                // A worktree task's repository: readable, but for its own entry and its
                // private objects (its git writes nothing else of it).
                Some(git) => {
                    mounts.add(git.common.clone(), Access::Read);
                    mounts.add(git.entry.clone(), Access::Write);
                    mounts.add(git.objects.clone(), Access::Write);
                }
                // A linked worktree's repository lives outside it: git needs it as the tree does.
                None => {
                    if let Some(common) = linked_git_dir(root) {
                        mounts.add(common, if *writable { Access::Write } else { Access::Read });
                    }
                }
            }
        }
        read.extend(view.read.iter().cloned());
        write.extend(view.write.iter().cloned());
        for path in read.iter().filter_map(existing) {
            mounts.add(path, Access::Read);
        }
        for path in write.iter().filter_map(existing) {
            mounts.add(path, Access::Write);
        }
        mounts
    }

    /// Whether showing the tree `path` to a task would show more than it should: the home
    /// directory or an ancestor of it, a path the bridge keeps private, a workdir.
    fn too_wide(&self, path: &Path) -> bool {
        let overlaps = |other: &Path| path.starts_with(other) || other.starts_with(path);
        self.inner.home.as_deref().is_some_and(|h| h.starts_with(path))
            || self.inner.hidden.iter().any(|h| overlaps(h))
            || self.inner.workdirs.iter().any(|w| overlaps(w))
    }
}

/// What one sandboxed child's view is built from (see [`Containment::wrap`]).
#[derive(Debug, Clone, Default)]
pub struct ViewRequest {
    /// The program the sandbox runs.
    pub program: PathBuf,
    /// Its working directory (in the workdir, or one of `write`).
    pub cwd: PathBuf,
    /// The task's workdir root (canonical) and whether the task may write it.
    pub workdir: Option<(PathBuf, bool)>,
    /// For a worktree task: what it holds of the repository (its `workdir` is the worktree).
    pub git: Option<super::view::TreeGit>,
    /// More paths it reads (a repository's objects a snapshot uses).
    pub read: Vec<PathBuf>,
    /// More paths it writes (its runtime's home, a session store, a snapshot directory).
    pub write: Vec<PathBuf>,
    /// Its egress gate on the host, when it has one: mounted at [`super::relay::GATE`], with
    /// the relay run first.
    pub gate: Option<PathBuf>,
    /// Its `/tmp` is the task's private directory on the host (`true`), or a tmpfs of its own
    /// (a child beside the task's: bwrap's mount points for its own paths would otherwise
    /// appear in the agent's `/tmp`).
    pub task_tmp: bool,
}

/// The repository directory of a linked worktree (or submodule) whose top is `root`: its
/// `.git` is a `gitdir:` file naming a directory outside the tree. Blocking.
#[expect(clippy::disallowed_methods, reason = "called by wrap, on its blocking thread")]
fn linked_git_dir(root: &Path) -> Option<PathBuf> {
    let dotgit = root.join(".git");
    if !std::fs::symlink_metadata(&dotgit).ok()?.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&dotgit).ok().filter(|t| t.len() < 4096)?;
    let gitdir = root.join(text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim()).canonicalize().ok()?;
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(c) if !c.trim().is_empty() => gitdir.join(c.trim()).canonicalize().ok()?,
        _ => gitdir,
    };
    (!common.starts_with(root)).then_some(common)
}

/// What bwrap tells about a started sandbox (`--info-fd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxInfo {
    /// The sandbox's init, as a pid of the bridge's namespace.
    pub init_pid: i32,
    /// The sandbox's PID namespace (the inode of `/proc/<pid>/ns/pid`).
    pub pid_ns: u64,
}

/// Parses bwrap's `--info-fd` JSON.
pub fn parse_info(text: &str) -> Option<SandboxInfo> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    Some(SandboxInfo {
        init_pid: i32::try_from(v.get("child-pid")?.as_i64()?).ok().filter(|p| *p > 1)?,
        pid_ns: v.get("pid-namespace")?.as_u64()?,
    })
}

/// Removes a task's private `/tmp` (after its stop is proven). Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "blocking by contract: the stop calls it on a blocking thread, a failed spawn's guard and the start-up sweep directly"
)]
pub fn remove_private_tmp(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(cause = %e, "cannot remove a task's private /tmp");
    }
}

/// Removes the private `/tmp` of every task but `keep` (startup: no task is running). Blocking.
pub fn sweep_private_tmps(state_dir: &Path, keep: &[String]) {
    sweep_task_dirs(&state_dir.join("tmp"), keep, remove_private_tmp);
}

/// Calls `remove` on every entry of `parent` named like a task id, but `keep`'s. Blocking.
#[expect(clippy::disallowed_methods, reason = "blocking by contract: it runs at start, before anything is served")]
pub fn sweep_task_dirs(parent: &Path, keep: &[String], remove: fn(&Path)) {
    let Ok(dir) = std::fs::read_dir(parent) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| crate::ids::looks_like(n, "agt_") && !keep.iter().any(|k| k == n)) {
            remove(&entry.path());
        }
    }
}

/// A reason without host paths, for a caller.
fn caller_safe(reason: &str) -> String {
    reason
        .split_whitespace()
        .map(|w| if w.contains('/') && w.len() > 1 { "<path>" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A trivial sandbox as tasks get it (the namespaces, the system view, a private `/tmp`) running
/// `true`, with `extra` flags.
fn trial_args(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = BASE_FLAGS.iter().map(|f| f.to_string()).collect();
    let view = super::view::args(&super::view::system(), None, &Mounts::default(), &[]);
    args.extend(view.iter().map(|a| a.to_string_lossy().into_owned()));
    args.extend(extra.iter().map(|e| e.to_string()));
    args.extend(["--".to_owned(), "true".to_owned()]);
    args
}

/// The egress settings: the mode, the global rules and each workdir's (by canonical root; the
/// rules were checked when the configuration was read).
fn egress_of(config: &BridgeConfig, workdirs: &[PathBuf]) -> crate::egress::Egress {
    let rules = |texts: &[String]| texts.iter().filter_map(|t| crate::egress::Rule::parse(t).ok()).collect::<Vec<_>>();
    let per_workdir =
        config.workdirs.iter().zip(workdirs).map(|(w, root)| (root.clone(), rules(&w.egress_allow))).collect();
    crate::egress::Egress::new(
        config.sandbox.egress,
        &config.state_dir,
        rules(&config.sandbox.egress_allow),
        per_workdir,
    )
}

/// Starts one trivial sandbox with a network namespace of its own (what `proxy` and `none`
/// give tasks): `Ok` when the kernel allows it here.
fn try_network(bwrap: &Path) -> Result<(), String> {
    let args = trial_args(&["--unshare-net"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_bounded(bwrap, &args, Duration::from_secs(10), Vec::new()).map(|_| ()).map_err(|e| {
        format!("{} cannot give a sandbox a network namespace ({})", bwrap.display(), e.to_string().trim())
    })
}

/// The operator's `SANDBOX_READ` and `_WRITE` paths (global, then per workdir), each
/// canonical where it exists; refused when one would show a task what the bridge keeps
/// private (`hidden`), a workdir (its own included: a workdir is mounted as the task's profile
/// allows, never widened), or the whole home directory.
#[allow(clippy::type_complexity)]
fn operator_paths(
    config: &BridgeConfig,
    hidden: &[PathBuf],
    workdirs: &[PathBuf],
    home: Option<&Path>,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>, Vec<WorkdirPaths>), String> {
    let check = |key: &str, path: &PathBuf| -> Result<PathBuf, String> {
        let path = path.canonicalize().unwrap_or_else(|_| path.clone());
        let overlaps = |other: &Path| path.starts_with(other) || other.starts_with(&path);
        if let Some(private) = hidden.iter().find(|h| overlaps(h)) {
            return Err(format!(
                "{key}: {} would show tasks {}, which the bridge keeps private",
                path.display(),
                private.display()
            ));
        }
        if let Some((w, _)) = config.workdirs.iter().zip(workdirs).find(|(_, p)| overlaps(p)) {
            return Err(format!(
                "{key}: {} overlaps workdir {}: a workdir is mounted as its task's profile allows, never through this list",
                path.display(),
                w.alias
            ));
        }
        if home.is_some_and(|h| h.starts_with(&path)) {
            return Err(format!(
                "{key}: {} would show tasks your whole home directory; name what they need in it",
                path.display()
            ));
        }
        Ok(path)
    };
    let all = |key: &str, paths: &[PathBuf]| paths.iter().map(|p| check(key, p)).collect::<Result<Vec<_>, _>>();
    let read = all("SERVERFS_AGENT_SANDBOX_READ", &config.sandbox.read)?;
    let write = all("SERVERFS_AGENT_SANDBOX_WRITE", &config.sandbox.write)?;
    let mut per_workdir = Vec::new();
    for (w, root) in config.workdirs.iter().zip(workdirs) {
        let read = all(&crate::config::keys::slot_key(w.slot, "SANDBOX_READ"), &w.sandbox_read)?;
        let write = all(&crate::config::keys::slot_key(w.slot, "SANDBOX_WRITE"), &w.sandbox_write)?;
        per_workdir.push(WorkdirPaths { root: root.clone(), read, write });
    }
    Ok((read, write, per_workdir))
}

/// Starts one trivial sandbox with the flags tasks use; returns bwrap's version, or why the
/// sandbox cannot run here.
fn try_sandbox(bwrap: &Path) -> Result<String, String> {
    let version = run_bounded(bwrap, &["--version"], Duration::from_secs(10), Vec::new())
        .map_err(|e| format!("{} cannot be run: {e}; {INSTALL_HINT}", bwrap.display()))?;
    let args = trial_args(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_bounded(bwrap, &args, Duration::from_secs(10), Vec::new())
        .map_err(|e| format!("{} cannot start a sandbox ({}): {USERNS_HINT}", bwrap.display(), e.to_string().trim()))?;
    Ok(version.trim().trim_start_matches("bubblewrap").trim().to_owned())
}

/// Starts one trivial sandbox under the seccomp filter: `Ok` when bwrap loads it here.
fn try_seccomp(bwrap: &Path) -> Result<(), String> {
    if super::seccomp::program().is_none() {
        return Err(format!("no seccomp filter is built for {}", std::env::consts::ARCH));
    }
    let args = trial_args(&["--seccomp", &SECCOMP_FD.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let filter = super::seccomp::program_pipe()
        .map_err(|e| format!("{} cannot load the seccomp filter ({e})", bwrap.display()))?;
    run_bounded(bwrap, &args, Duration::from_secs(10), vec![(filter, SECCOMP_FD)])
        .map(|_| ())
        .map_err(|e| format!("{} cannot load the seccomp filter ({})", bwrap.display(), e.to_string().trim()))
}

/// The bridge's private paths and the user's session sockets, plus the operator's, that exist
/// here. Refuses one that is, or contains, a workdir (the task could not work).
fn hidden_paths(config: &BridgeConfig, base_env: &BaseEnv) -> Result<Vec<PathBuf>, String> {
    let mut wanted: Vec<(PathBuf, &str)> =
        vec![(config.state_dir.clone(), "the state directory"), (config.lock_dir.clone(), "the lock directory")];
    if let Some(dir) = config.socket_path.parent() {
        wanted.push((dir.to_owned(), "the socket directory"));
    }
    if let Some(file) = &config.config_file {
        wanted.push((file.clone(), "the rendered config"));
        if let Some(dir) = file.parent() {
            wanted.push((dir.join("provider.env"), "provider.env"));
        }
    }
    let home = base_env.get("HOME").map(PathBuf::from);
    if let Some(home) = &home {
        wanted.push((home.join(".config/agent-bridge"), "the installed config directory"));
    }
    let uid = nix::unistd::getuid().as_raw();
    match base_env.get("XDG_RUNTIME_DIR") {
        Some(dir) => wanted.push((PathBuf::from(dir), "$XDG_RUNTIME_DIR")),
        None => wanted.push((PathBuf::from(format!("/run/user/{uid}")), "the user's runtime directory")),
    }
    if let Some(dir) = base_env.get("SCREENDIR") {
        wanted.push((PathBuf::from(dir), "$SCREENDIR"));
    }
    if let Some(user) = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten() {
        wanted.push((PathBuf::from(format!("/run/screen/S-{}", user.name)), "screen's sockets"));
    }
    if let Some(dir) = base_env.get("TMUX_TMPDIR") {
        wanted.push((PathBuf::from(dir).join(format!("tmux-{uid}")), "tmux's sockets"));
    }
    for path in &config.sandbox.hide {
        wanted.push((path.clone(), "SERVERFS_AGENT_SANDBOX_HIDE"));
    }
    let mut hidden: Vec<PathBuf> = Vec::new();
    for (path, what) in wanted {
        // The bridge's own directories may not exist yet (the socket's is made at bind): they
        // are kept and hidden once they exist; anything else that does not exist is skipped.
        let own = what.starts_with("the state") || what.starts_with("the lock") || what.starts_with("the socket");
        let path = match path.canonicalize() {
            Ok(p) => p,
            Err(_) if own && path.is_absolute() => path,
            Err(_) => continue,
        };
        if path == Path::new("/") || home.as_deref().is_some_and(|h| path == h) {
            return Err(format!("the task sandbox would hide {} ({what}): name a narrower path", path.display()));
        }
        if let Some(w) = config.workdirs.iter().find(|w| w.path.canonicalize().is_ok_and(|p| p.starts_with(&path))) {
            return Err(format!(
                "the task sandbox would hide workdir {} inside {} ({what}); move one of them",
                w.alias,
                path.display()
            ));
        }
        if !hidden.contains(&path) {
            hidden.push(path);
        }
    }
    Ok(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bwrap_info_is_read_strictly() {
        let info = parse_info("{\n \"child-pid\": 1813,\n \"cgroup-namespace\": 1, \"pid-namespace\": 4026532176\n}");
        assert_eq!(info, Some(SandboxInfo { init_pid: 1813, pid_ns: 4026532176 }));
        assert_eq!(parse_info("{\"child-pid\": 1}"), None);
        assert_eq!(parse_info("{\"child-pid\": 1, \"pid-namespace\": 5}"), None, "pid 1 is never a sandbox's init");
        assert_eq!(parse_info("{\"child-pid\": -4, \"pid-namespace\": 5}"), None);
        assert_eq!(parse_info(""), None);
        assert_eq!(parse_info("{\"child-pid\": \"12\", \"pid-namespace\": 5}"), None);
    }

    #[test]
    fn reasons_shown_to_callers_name_no_path() {
        let shown = caller_safe("/usr/bin/bwrap cannot start a sandbox (bwrap: No permissions): allow them");
        assert!(!shown.contains("/usr"), "{shown}");
        assert!(shown.contains("cannot start a sandbox"), "{shown}");
    }
}
