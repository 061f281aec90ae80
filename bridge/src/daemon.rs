//! The daemon's life: refuse unsafe starts, take the instance lock, open the store, reconcile
//! what a previous bridge left, serve the socket, and shut down in order on SIGTERM/SIGINT.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use fs2::FileExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::BridgeConfig;
use crate::keys::{KeyCache, KeyService};
use crate::lease::Leases;
use crate::provider::Providers;
use crate::provider::env::BaseEnv;
use crate::registry::audit::AuditSink;
use crate::registry::auth::Auth;
use crate::registry::{Registry, Services};
use crate::server::{self, PeerPolicy};
use crate::store::Store;
use crate::tasks::TaskService;

/// The instance lock file inside the state directory.
pub const INSTANCE_LOCK: &str = "bridge.lock";

/// What start-up settles before the async runtime runs anything: the process refuses an
/// unsafe start, holds the instance lock, and has its store open (migrated), its lock
/// directory, its API keys and its own executable. All of it is blocking I/O, so it runs here,
/// on the main thread, and [`run`] is handed the result.
pub struct Prelude {
    config: BridgeConfig,
    uid: u32,
    gid: u32,
    descriptors: server::Descriptors,
    /// Held (locked) until the bridge has stopped.
    instance: File,
    store: Arc<Store>,
    leases: Leases,
    keys: KeyCache,
    self_exe: PathBuf,
}

/// The synchronous part of start-up, in order: root refusal, inherited descriptors made
/// close-on-exec, `RLIMIT_NOFILE` raised and the reserve opened, the state directory, the
/// instance lock, the child subreaper, the store, the lock directory, the API keys.
pub fn prepare(config: BridgeConfig) -> anyhow::Result<Prelude> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    if uid == 0 && !config.allow_root {
        bail!(
            "agent-bridge refuses to run as root: run it as the operator's own user (or set SERVERFS_AGENT_ALLOW_ROOT=true in a throwaway container)"
        );
    }
    #[cfg(debug_assertions)]
    if let Some(hook) = crate::config::test_spawn_hook() {
        let (kind, hook) = hook.map_err(anyhow::Error::msg).context("AGENT_BRIDGE_TEST_SPAWN")?;
        tracing::warn!(kind = kind.as_str(), ?hook, "a test hook changes how children of this kind start");
        crate::provider::tether::set_test_hook(kind, hook);
    }
    crate::provider::spawner::close_inherited_fds_on_exec();
    // Early, while descriptor numbers are low: the soft RLIMIT_NOFILE goes to the hard limit.
    let descriptors = server::Descriptors::prepare();
    crate::files::ensure_private_dir(&config.state_dir).map_err(anyhow::Error::msg).context("state directory")?;
    let lock_path = config.state_dir.join(INSTANCE_LOCK);
    #[expect(clippy::disallowed_methods, reason = "prepare runs before the runtime serves anything")]
    let instance = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| format!("cannot open the instance lock {}", lock_path.display()))?;
    // A crashed bridge's child caught between fork and exec holds a copy of the lock for a few
    // milliseconds: wait a moment before concluding another bridge runs.
    let mut attempts = 0;
    while instance.try_lock_exclusive().is_err() {
        attempts += 1;
        if attempts == 40 {
            bail!("another agent-bridge already runs with the state directory {}", config.state_dir.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    if let Err(e) = crate::provider::supervise::become_subreaper() {
        tracing::warn!(cause = %e, "cannot become a child subreaper; orphans of agents will be reparented to init");
    }
    let store = Arc::new(Store::open(&config.state_dir).context("cannot open the store")?);
    let leases = Leases::open(&config.lock_dir).map_err(anyhow::Error::msg).context("lock directory")?;
    let keys = KeyCache::default();
    keys.reload(&store).context("cannot load API keys")?;
    let self_exe = std::env::current_exe().context("cannot find the bridge executable")?;
    Ok(Prelude { config, uid, gid, descriptors, instance, store, leases, keys, self_exe })
}

/// Runs the daemon, from what [`prepare`] settled, until a signal stops it.
pub async fn run(prelude: Prelude) -> anyhow::Result<()> {
    let Prelude { config, uid, gid, descriptors, instance, store, leases, keys, self_exe } = prelude;
    let config = Arc::new(config);
    let shutdown = CancellationToken::new();
    let background = TaskTracker::new();
    let clock = Clock::System;
    let base_env = BaseEnv::capture();
    let home = base_env.get("HOME").map(std::path::PathBuf::from);
    let (detect_config, detect_env) = (Arc::clone(&config), base_env.clone());
    let containment =
        tokio::task::spawn_blocking(move || crate::provider::sandbox::Containment::detect(&detect_config, &detect_env))
            .await
            .context("the sandbox check did not finish")?
            .map_err(anyhow::Error::msg)
            .context("SERVERFS_AGENT_SANDBOX")?;
    // Whichever way `run` ends (an error, a panic unwinding), nothing stays in its task cgroups.
    // (Dropped before the instance lock: a next bridge's groups live in the same directory.)
    let exit_sweep = ExitSweep(containment.cgroups().cloned());
    if containment.contained() && containment.network_mode() == crate::config::EgressMode::Host {
        if containment.egress().mode() == crate::config::EgressMode::Host {
            tracing::warn!(
                "SERVERFS_AGENT_EGRESS=host: tasks share this machine's network, its loopback services (the board, the front) included"
            );
        } else {
            tracing::warn!(
                sandbox = %containment.operator_json(),
                "this machine gives a sandbox no network namespace of its own: tasks share its network, its loopback services included"
            );
        }
    }
    if containment.contained() {
        tracing::info!(sandbox = %containment.operator_json(), "tasks run in the bubblewrap sandbox");
    } else if config.sandbox.mode == crate::config::SandboxMode::Required {
        tracing::error!(sandbox = %containment.operator_json(), "SERVERFS_AGENT_SANDBOX=required and the sandbox cannot run: every task will be refused");
    } else {
        tracing::warn!(
            sandbox = %containment.operator_json(),
            "tasks run WITHOUT a sandbox: every task can read and change the bridge's store, its keys and its config, connect to its socket, and read and write everything your user can"
        );
    }
    // Finding the CLIs on PATH reads file metadata.
    let providers_config = Arc::clone(&config);
    let providers =
        tokio::task::spawn_blocking(move || Providers::new(&providers_config, self_exe, base_env, containment))
            .await
            .context("the runtime lookup did not finish")?;
    let tasks = TaskService::new(
        Arc::clone(&config),
        Arc::clone(&store),
        clock.clone(),
        providers,
        leases,
        shutdown.child_token(),
        home,
    );
    tasks.reconcile_at_startup().await.context("startup reconciliation failed")?;
    // No task runs yet, and every sandbox died with the previous bridge: their private /tmp
    // directories go.
    let state_dir = config.state_dir.clone();
    let cgroups = tasks.providers().containment().cgroups().cloned();
    let egress = tasks.providers().containment().egress().clone();
    let _ = tokio::task::spawn_blocking(move || {
        egress.sweep();
        crate::provider::sandbox::sweep_private_tmps(&state_dir, &[]);
        crate::provider::snapshot::sweep(&state_dir, &[]);
        if let Some(cgroups) = cgroups {
            cgroups.sweep_empty();
        }
    })
    .await;
    // After the tasks: every task a previous bridge left is interrupted by now, so a plan
    // whose step was in flight ends with it and no step is ever run twice.
    let plans =
        crate::plans::PlanService::new(Arc::clone(&store), tasks.clone(), clock.clone(), shutdown.child_token());
    let audit_stop = CancellationToken::new();
    let audit = AuditSink::start(Arc::clone(&store), &background, audit_stop.clone());
    let key_service = KeyService::new(Arc::clone(&store), keys.clone(), clock.clone(), Arc::clone(&config));
    let mut auth = Auth::new(config.mcp_auth.clone(), keys, uid);
    if let Some(oauth) = &config.oauth {
        let loopback = reqwest::Url::parse(&oauth.issuer).is_ok_and(|u| u.scheme() == "http");
        let http = crate::oauth::Http::new(loopback)?;
        tracing::info!(
            issuer = oauth.issuer,
            resource = oauth.resource,
            "/mcp-oauth takes this identity provider's tokens"
        );
        auth = auth.with_oauth(Arc::new(crate::oauth::Verifier::new(oauth.clone(), http)));
    }
    let board_addr = Arc::new(std::sync::OnceLock::new());
    let notifier =
        crate::notify::Notifier::new(Arc::clone(&store), Arc::clone(&config), clock.clone(), Arc::clone(&board_addr))?;
    let registry = Arc::new(Registry::new(Services {
        notify: notifier.clone(),
        tasks: tasks.clone(),
        plans: plans.clone(),
        keys: key_service,
        board_addr: Arc::clone(&board_addr),
        store: Arc::clone(&store),
        config: Arc::clone(&config),
        auth,
        audit: audit.clone(),
        clock,
    }));
    let policy =
        PeerPolicy { uid: config.allowed_peer_uid.unwrap_or(uid), gid: config.allowed_peer_gid.unwrap_or(gid) };
    // A peer of another user reaches the socket through the group; the bridge's own user
    // needs no group access.
    let shared_gid = (policy.uid != uid).then_some(policy.gid);
    let listener = bind(config.socket_path.clone(), shared_gid).await?;
    if config.mcp_auth.mode == crate::config::McpAuthMode::None {
        tracing::warn!(
            principal = config.mcp_auth.tunnel_principal,
            "tunnel mode: every MCP caller is one principal, unauthenticated"
        );
    }
    plans.start().await.map_err(|e| anyhow::anyhow!("{e}")).context("cannot resume the approved plans")?;
    // The board is a convenience: a bridge whose board address is taken still serves its socket.
    let board = start_board(&config, &registry, &board_addr, &shutdown).await;
    // The delivery worker stops after the tasks: their last transitions' rows are written by
    // then, and whatever it has not sent is sent by the next start.
    let notify_stop = CancellationToken::new();
    background.spawn(notifier.run(notify_stop.clone()));
    if !config.notify.targets.is_empty() {
        tracing::info!(targets = config.notify.targets.len(), "notifications are sent to the configured targets");
    }
    tracing::info!(socket = %config.socket_path.display(), workdirs = config.workdirs.len(), "agent-bridge is ready");

    let reaper = shutdown.clone();
    background.spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut children) = signal(SignalKind::child()) else {
            tracing::error!("cannot watch SIGCHLD; orphans reparented to the bridge stay zombies");
            return;
        };
        loop {
            tokio::select! {
                _ = children.recv() => {
                    let reaped = tokio::task::spawn_blocking(crate::provider::supervise::reap_orphans).await.unwrap_or(0);
                    if reaped > 0 {
                        tracing::debug!(reaped, "reaped orphaned descendants");
                    }
                }
                _ = reaper.cancelled() => return,
            }
        }
    });
    let signals = shutdown.clone();
    background.spawn(async move {
        tokio::select! {
            _ = wait_for_signal() => {
                tracing::info!("stopping: signal received");
                signals.cancel();
            }
            _ = signals.cancelled() => {}
        }
    });
    // Counting the open descriptors reads /proc.
    let max_active_tasks = config.limits.max_active_tasks;
    let budget = tokio::task::spawn_blocking(move || descriptors.socket_budget(max_active_tasks))
        .await
        .context("the descriptor count did not finish")?;
    let server =
        tokio::spawn(server::serve(listener, registry, policy, shutdown.clone(), config.socket_path.clone(), budget));
    shutdown.cancelled().await;
    // Plan runners stop first (a step in flight is interrupted with its task, and the plan
    // with it at the next start), then tasks stop while the server drains its open
    // connections: a slow client never delays the providers' stop.
    plans.shutdown(Duration::from_secs(5)).await;
    tasks.shutdown(Duration::from_secs(25)).await;
    notify_stop.cancel();
    if let Some(cgroups) = tasks.providers().containment().cgroups().cloned() {
        let _ = tokio::task::spawn_blocking(move || cgroups.remove_if_empty()).await;
    }
    if let Some(board) = board
        && let Err(e) = board.await
    {
        tracing::error!(cause = %e, "the board failed");
    }
    if let Err(e) = server.await {
        tracing::error!(cause = %e, "the socket server failed");
    }
    audit.flush().await;
    audit_stop.cancel();
    shutdown.cancel();
    background.close();
    background.wait().await;
    drop(exit_sweep);
    drop(instance);
    tracing::info!("agent-bridge stopped");
    Ok(())
}

/// Kills whatever is left in the bridge's task cgroups when dropped: the last thing `run`
/// does, on every way out (the orderly one has stopped every task by then, so it finds
/// nothing). A `SIGKILL` gives no way out: the next start's reconciliation does it then.
struct ExitSweep(Option<crate::provider::cgroup::Cgroups>);

impl Drop for ExitSweep {
    fn drop(&mut self) {
        if let Some(cgroups) = &self.0 {
            let killed = cgroups.kill_all();
            if !killed.is_empty() {
                tracing::warn!(tasks = ?killed, "killed what was left in task cgroups on the way out");
            }
        }
    }
}

/// Starts the board on its Unix socket (`SERVERFS_BOARD_SOCKET`) or its loopback address;
/// `None` (logged) when it cannot listen.
async fn start_board(
    config: &BridgeConfig,
    registry: &Arc<Registry>,
    board_addr: &std::sync::OnceLock<std::net::SocketAddr>,
    shutdown: &CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    use crate::board::{Board, Place};
    if let Some(path) = &config.board_socket {
        // The same rules as the bridge's own socket: a private directory, a stale socket
        // replaced, a live one or a foreign file refused, mode 0600.
        return match bind(path.clone(), None).await {
            Ok(listener) => {
                tracing::info!(socket = %path.display(), "the board is listening on a Unix socket");
                let board = Board::new(Arc::clone(registry), Place::Unix(path.clone()), shutdown.child_token());
                Some(tokio::spawn(crate::board::serve(listener, board)))
            }
            Err(e) => {
                tracing::error!(socket = %path.display(), cause = %e, "cannot listen for the board; running without it");
                None
            }
        };
    }
    match tokio::net::TcpListener::bind(config.board_addr).await.and_then(|l| Ok((l.local_addr()?, l))) {
        Ok((addr, listener)) => {
            let _ = board_addr.set(addr);
            tracing::info!(url = %format!("http://{addr}/"), "the board is listening");
            let board = Board::new(Arc::clone(registry), Place::Tcp(addr), shutdown.child_token());
            Some(tokio::spawn(crate::board::serve(listener, board)))
        }
        Err(e) => {
            tracing::error!(addr = %config.board_addr, cause = %e, "cannot listen for the board; running without it");
            None
        }
    }
}

/// Binds a Unix socket by [`server::bind`]'s rules, off the reactor (it inspects, connects
/// to and removes files).
async fn bind(path: PathBuf, shared_gid: Option<u32>) -> Result<tokio::net::UnixListener, server::BindError> {
    tokio::task::spawn_blocking(move || server::bind(&path, shared_gid))
        .await
        .unwrap_or_else(|e| Err(server::BindError::Other(format!("the socket bind did not finish: {e}"))))
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
