//! Task egress: each task runs in a network namespace of its own, whose only way out is this
//! proxy. Every agent gets a gate — a Unix socket of its own under `<state>/egress`, mounted
//! into its sandbox, where a relay inside the namespace (`provider::relay`) hands it the
//! connections its runtime makes to `HTTPS_PROXY` — and the gate lets through only what the
//! task's allowance names: its runtime's own endpoints, then `SERVERFS_AGENT_EGRESS_ALLOW`
//! (and the workdir's). Everything else is refused, logged, and reported to the task once per
//! destination (`egress.denied {host, port}`), so a caller sees why `npm install` failed.

pub mod allow;
mod proxy;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use allow::{Allow, Rule};

use crate::config::EgressMode;

/// The most connections one task's gate serves at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;
/// The most distinct destinations reported denied for one task (the log has the rest).
const MAX_REPORTED: usize = 100;

/// A destination a task was refused, for its event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The task.
    pub task_id: String,
    /// The host as the client named it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Why (no rule allows it, or it resolves only to a local address no rule names).
    pub why: &'static str,
}

/// Holds a gate's connections until released: an agent's first model request waits, with its
/// connection open, while the bridge still records the workdir's change-set baseline (the
/// model cannot have the agent write anything before it has answered). Clones share one
/// release; dropping every clone does not release it (the gate's end does).
#[derive(Debug, Clone, Default)]
pub struct Hold(CancellationToken);

impl Hold {
    /// A hold, not yet released.
    pub fn new() -> Hold {
        Hold::default()
    }

    /// Lets every held connection, and every later one, through.
    pub fn release(&self) {
        self.0.cancel();
    }

    /// Whether it was released.
    pub fn is_released(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// The egress settings and the gates' shared parts, decided at start.
#[derive(Debug, Clone)]
pub struct Egress {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    mode: EgressMode,
    dir: PathBuf,
    global: Vec<Rule>,
    per_workdir: Vec<(PathBuf, Vec<Rule>)>,
    denied: OnceLock<mpsc::UnboundedSender<Denied>>,
}

impl Egress {
    /// The egress of a bridge whose state lives in `state_dir`: `mode`, the global rules and
    /// each workdir's (by canonical root).
    pub fn new(
        mode: EgressMode,
        state_dir: &Path,
        global: Vec<Rule>,
        per_workdir: Vec<(PathBuf, Vec<Rule>)>,
    ) -> Egress {
        let inner = Inner { mode, dir: state_dir.join("egress"), global, per_workdir, denied: OnceLock::new() };
        Egress { inner: Arc::new(inner) }
    }

    /// The mode.
    pub fn mode(&self) -> EgressMode {
        self.inner.mode
    }

    /// Where refusals go (the task service's event writer); set once.
    pub fn report_to(&self, denied: mpsc::UnboundedSender<Denied>) {
        let _ = self.inner.denied.set(denied);
    }

    /// The operator's rules for a task in the workdir at `root` (global, then the workdir's).
    pub fn operator_rules(&self, root: Option<&Path>) -> Vec<Rule> {
        let mut rules = self.inner.global.clone();
        if let Some((_, own)) = root.and_then(|r| self.inner.per_workdir.iter().find(|(w, _)| w == r)) {
            rules.extend(own.iter().cloned());
        }
        rules
    }

    /// Opens `task_id`'s gate with `allow`: its socket is bound (0600, in a 0700 directory)
    /// before this returns, and it serves until the gate is dropped; with `hold`, a connection
    /// is accepted but served only once the hold is released. Must be called on the runtime.
    /// Blocking parts (the socket file) run off the reactor.
    #[expect(
        clippy::disallowed_methods,
        reason = "a gate's socket and its directory are made and removed on a blocking thread"
    )]
    pub async fn open(&self, task_id: &str, allow: Allow, hold: Option<Hold>) -> std::io::Result<Gate> {
        let (dir, path) = (self.inner.dir.clone(), self.inner.dir.join(format!("{task_id}.sock")));
        let p = path.clone();
        let listener = tokio::task::spawn_blocking(move || -> std::io::Result<std::os::unix::net::UnixListener> {
            crate::files::ensure_private_dir(&dir).map_err(std::io::Error::other)?;
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let listener = std::os::unix::net::UnixListener::bind(&p)?;
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .await
        .map_err(std::io::Error::other)??;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let cancel = CancellationToken::new();
        let serving = Serving {
            task_id: task_id.to_owned(),
            allow: Arc::new(allow),
            denied: self.inner.denied.get().cloned(),
            reported: Arc::new(Mutex::new(HashSet::new())),
            hold,
        };
        let task = tokio::spawn(serving.run(listener, cancel.clone()));
        Ok(Gate { path, cancel, task: Some(task) })
    }

    /// Removes the gates a previous bridge left (start-up: no task runs). Blocking.
    #[expect(
        clippy::disallowed_methods,
        reason = "a gate's socket and its directory are made and removed on a blocking thread"
    )]
    pub fn sweep(&self) {
        let _ = std::fs::remove_dir_all(&self.inner.dir);
    }
}

/// One task's open gate; dropping it closes the gate and removes its socket.
#[derive(Debug)]
pub struct Gate {
    path: PathBuf,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gate {
    /// The gate's socket on the host (mounted into the task's sandbox).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Gate {
    #[expect(
        clippy::disallowed_methods,
        reason = "a gate's socket and its directory are made and removed on a blocking thread"
    )]
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a gate's accept loop holds.
struct Serving {
    task_id: String,
    allow: Arc<Allow>,
    denied: Option<mpsc::UnboundedSender<Denied>>,
    reported: Arc<Mutex<HashSet<(String, u16)>>>,
    hold: Option<Hold>,
}

impl Serving {
    async fn run(self, listener: tokio::net::UnixListener, cancel: CancellationToken) {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let permit = tokio::select! {
                _ = cancel.cancelled() => break,
                permit = Arc::clone(&slots).acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            };
            let stream = tokio::select! {
                _ = cancel.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(cause = %e, "the egress gate cannot accept");
                        break;
                    }
                },
            };
            let (allow, task_id) = (Arc::clone(&self.allow), self.task_id.clone());
            let (denied, reported) = (self.denied.clone(), Arc::clone(&self.reported));
            let hold = self.hold.clone();
            connections.spawn(async move {
                if let Some(hold) = hold {
                    hold.0.cancelled().await;
                }
                let outcome = proxy::serve(stream, &allow).await;
                drop(permit);
                record(&task_id, outcome, denied.as_ref(), &reported);
            });
            while connections.try_join_next().is_some() {}
        }
        connections.abort_all();
    }
}

/// Logs a connection's outcome; a refusal is reported to the task once per destination.
fn record(
    task_id: &str,
    outcome: proxy::Outcome,
    denied: Option<&mpsc::UnboundedSender<Denied>>,
    reported: &Mutex<HashSet<(String, u16)>>,
) {
    match outcome {
        proxy::Outcome::Relayed { host, port } => tracing::debug!(task_id, host, port, "egress relayed"),
        proxy::Outcome::Denied { host, port, why } => {
            tracing::info!(task_id, host, port, why, "egress denied");
            let mut seen = reported.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() < MAX_REPORTED
                && seen.insert((host.clone(), port))
                && let Some(tx) = denied
            {
                let _ = tx.send(Denied { task_id: task_id.to_owned(), host, port, why });
            }
        }
        proxy::Outcome::Unreachable { host, port } => {
            tracing::info!(task_id, host, port, "egress destination unreachable")
        }
        proxy::Outcome::Invalid(why) => tracing::debug!(task_id, why, "egress request refused"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A held gate accepts a connection and answers nothing until the hold is released; then
    /// it serves it as usual (here: refuses a malformed request with its 400).
    #[tokio::test]
    async fn a_held_gate_serves_nothing_until_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let egress = Egress::new(EgressMode::Proxy, dir.path(), Vec::new(), Vec::new());
        let hold = Hold::new();
        let gate = egress.open("agt_held", Allow::new(Vec::new()), Some(hold.clone())).await.expect("open");
        let mut client = tokio::net::UnixStream::connect(gate.path()).await.expect("connect");
        client.write_all(b"NOT A REQUEST\r\n\r\n").await.expect("write");
        let mut answer = Vec::new();
        let early = tokio::time::timeout(Duration::from_millis(300), client.read_buf(&mut answer)).await;
        assert!(early.is_err(), "a held gate answered: {:?}", String::from_utf8_lossy(&answer));
        assert!(!hold.is_released());
        hold.release();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .expect("the released gate answers")
            .expect("read");
        assert!(answer.starts_with(b"HTTP/1.1 400"), "{:?}", String::from_utf8_lossy(&answer));
    }
}
