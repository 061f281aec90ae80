//! The Unix socket: binding safely, accepting connections, and serving them until shutdown.
//!
//! The socket's directory must be private to the bridge user (created 0700 when missing) and
//! the socket itself is 0600 — or, when the allowed peer is another user, 0750 and 0660 in the
//! peer's group, so a container of that group can connect. A file already at the path is replaced only when it is a socket
//! of ours that nobody answers on (provably dead) and the bridge holds the instance lock; a
//! live socket or any other file is never removed (`SOCKET_PATH_IN_USE`).
//!
//! Serving is bounded: at most [`SocketLimits::max_connections`] connections (a newcomer at the
//! cap displaces an idle one, see `slots`, or is answered `BRIDGE_BUSY`), a request line must
//! arrive whole within [`SocketLimits::line`] of its first byte, an idle connection is closed
//! after [`SocketLimits::idle`], and so is one that leaves an answer unread for
//! [`SocketLimits::write`]. When `accept` finds no descriptor left, idle connections are
//! closed to free some; with none to close, the reserve descriptor is spent to answer the
//! newcomer `BRIDGE_BUSY` (see `nofile`), so a client is never left waiting and the loop never
//! spins.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::registry::Registry;
use crate::registry::auth::Peer;
use bridge_proto::codes;
use bridge_proto::envelope::{ErrorBody, Response};
use slots::{Slot, Table};

mod conn;
mod nofile;
mod slots;

use nofile::Reserve;
pub use nofile::{Budget, Descriptors};

/// How many idle connections are closed at once when descriptors run out.
const EVICT_WHEN_STARVED: usize = 8;

/// The socket server's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketLimits {
    /// Connections open at once (admitted peers; a refused peer is answered and closed).
    pub max_connections: usize,
    /// The longest a request line may take once its first byte has arrived.
    pub line: Duration,
    /// The longest a connection may stay idle between requests.
    pub idle: Duration,
    /// The longest an answer may wait for the client to read it (then the connection closes).
    pub write: Duration,
}

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Something lives at the path (`SOCKET_PATH_IN_USE`).
    #[error("{code}: {0}", code = bridge_proto::codes::SOCKET_PATH_IN_USE)]
    InUse(String),
    /// The directory is unsafe or the bind failed.
    #[error("{0}")]
    Other(String),
}

/// Binds the socket at `path` (see the module docs for the rules). With `shared_gid`, the
/// socket is 0660 and its directory 0750, both in that group, for a peer of another user (a
/// container) that belongs to it; otherwise both are private to the bridge user.
#[expect(clippy::disallowed_methods, reason = "blocking by design: the daemon calls it in spawn_blocking")]
pub fn bind(path: &Path, shared_gid: Option<u32>) -> Result<UnixListener, BindError> {
    let dir = path.parent().ok_or_else(|| BindError::Other(format!("{} has no parent directory", path.display())))?;
    match shared_gid {
        Some(gid) => crate::files::ensure_shared_dir(dir, gid).map_err(BindError::Other)?,
        None => crate::files::ensure_private_dir(dir).map_err(BindError::Other)?,
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() || meta.uid() != nix::unistd::geteuid().as_raw() {
                return Err(BindError::InUse(format!(
                    "{} exists and is not a socket of this user; remove it yourself",
                    path.display()
                )));
            }
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(BindError::InUse(format!("another process answers on {}", path.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // Dead socket: remove it if it is still the same inode.
                    let again = std::fs::symlink_metadata(path).map_err(|e| BindError::Other(e.to_string()))?;
                    if again.ino() != meta.ino() {
                        return Err(BindError::InUse(format!("{} changed while it was checked", path.display())));
                    }
                    std::fs::remove_file(path)
                        .map_err(|e| BindError::Other(format!("cannot remove the stale socket: {e}")))?;
                    tracing::info!(path = %path.display(), "replaced a stale socket");
                }
                Err(e) => {
                    return Err(BindError::InUse(format!("cannot tell whether {} is alive: {e}", path.display())));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BindError::Other(format!("cannot inspect {}: {e}", path.display()))),
    }
    let listener =
        UnixListener::bind(path).map_err(|e| BindError::Other(format!("cannot bind {}: {e}", path.display())))?;
    if let Some(gid) = shared_gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(|e| BindError::Other(format!("cannot give {} to group {gid}: {e}", path.display())))?;
    }
    let mode = if shared_gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| BindError::Other(format!("cannot restrict {}: {e}", path.display())))?;
    Ok(listener)
}

/// How often the accept loop checks that its socket path still leads to its socket.
const IDENTITY_CHECK: Duration = Duration::from_secs(60);

/// A file's identity: its device and inode (the path itself not followed). Blocking.
#[expect(clippy::disallowed_methods, reason = "a stat, called from spawn_blocking")]
pub fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Who may connect.
#[derive(Debug, Clone, Copy)]
pub struct PeerPolicy {
    /// The allowed uid.
    pub uid: u32,
    /// The allowed gid.
    pub gid: u32,
}

/// Serves connections until `shutdown` is cancelled, then waits for open connections to
/// finish their current request.
pub async fn serve(
    listener: UnixListener,
    registry: Arc<Registry>,
    policy: PeerPolicy,
    shutdown: CancellationToken,
    socket_path: PathBuf,
    budget: Budget,
) {
    let Budget { limits, mut reserve } = budget;
    // The socket file this bridge bound, by identity: removed at the end only if it is still
    // that one, and checked now and then (a path that leads elsewhere is logged as an error).
    let path = socket_path.clone();
    let identity = tokio::task::spawn_blocking(move || file_identity(&path)).await.ok().flatten();
    let mut check = tokio::time::interval(IDENTITY_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut moved = false;
    let mut acceptor = Acceptor {
        table: Table::new(limits.max_connections),
        connections: TaskTracker::new(),
        registry,
        policy,
        limits,
        shutdown: shutdown.clone(),
        full: false,
    };
    let mut starved = false;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            _ = check.tick() => {
                let path = socket_path.clone();
                let now = tokio::task::spawn_blocking(move || file_identity(&path)).await.ok().flatten();
                let same = identity.is_some() && now == identity;
                if !same && !moved {
                    tracing::error!(path = %socket_path.display(), "the socket path no longer leads to this bridge's socket: clients that connect by it do not reach this bridge");
                }
                moved = !same;
                continue;
            }
        };
        match accepted {
            Ok((stream, _)) => {
                if starved {
                    tracing::info!("file descriptors are available again");
                    starved = false;
                }
                reserve.restore();
                acceptor.start(stream);
            }
            Err(e) if matches!(e.raw_os_error(), Some(nix::libc::EMFILE | nix::libc::ENFILE)) => {
                if !starved {
                    tracing::warn!(cause = %e, "no file descriptor left to accept a connection");
                    starved = true;
                }
                acceptor.starved(&listener, &mut reserve).await;
            }
            Err(e) => {
                tracing::warn!(cause = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
    let _ = tokio::task::spawn_blocking(move || {
        // Only the file this bridge bound: a file someone else put at the path stays.
        if identity.is_some() && file_identity(&socket_path) == identity {
            let _ = std::fs::remove_file(&socket_path);
        } else {
            tracing::warn!(path = %socket_path.display(), "the socket path is not this bridge's socket any more: left as it is");
        }
    })
    .await;
    acceptor.connections.close();
    if tokio::time::timeout(Duration::from_secs(30), acceptor.connections.wait()).await.is_err() {
        tracing::warn!("connections still open after 30 s; closing");
    }
}

/// What the accept loop needs to start a connection.
struct Acceptor {
    table: Arc<Table>,
    connections: TaskTracker,
    registry: Arc<Registry>,
    policy: PeerPolicy,
    limits: SocketLimits,
    shutdown: CancellationToken,
    /// Whether the last newcomer found every connection busy (logged once per episode).
    full: bool,
}

impl Acceptor {
    /// `accept` found no descriptor: the reserve takes the waiting connection, idle
    /// connections give their descriptors up for it, or else it is answered `BRIDGE_BUSY` at
    /// once; whatever happens, the accept loop never spins.
    async fn starved(&mut self, listener: &UnixListener, reserve: &mut Reserve) {
        // `accept` checks for a free descriptor before it looks for a connection, so there may
        // be none waiting: look once, never wait with the reserve spent.
        let waiting = if reserve.release() {
            std::future::poll_fn(|cx| Poll::Ready(listener.poll_accept(cx))).await
        } else {
            Poll::Ready(Err(std::io::Error::from_raw_os_error(nix::libc::EMFILE)))
        };
        match waiting {
            Poll::Pending => {
                reserve.restore();
            }
            Poll::Ready(Err(e)) => {
                // Still none (the system's table is full, or the reserve's number is above a
                // lowered limit): idle connections give theirs up, else wait a moment.
                tracing::debug!(cause = %e, "accept failed with the reserve descriptor");
                reserve.restore();
                if !self.free_idle().await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Poll::Ready(Ok((stream, _))) => {
                if self.free_idle().await {
                    reserve.restore();
                    self.start(stream);
                } else {
                    refuse(
                        stream,
                        "the bridge has no file descriptor left; try again shortly, or raise its RLIMIT_NOFILE",
                    );
                    reserve.restore();
                }
            }
        }
    }

    /// Closes the longest-idle connections to free their descriptors and waits (bounded) until
    /// they are closed; whether there was any.
    async fn free_idle(&self) -> bool {
        let closed = self.table.evict_idle(EVICT_WHEN_STARVED);
        if closed.is_empty() {
            return false;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), wait_all(closed)).await;
        true
    }

    /// Admits an accepted connection and spawns its task, or answers it `BRIDGE_BUSY`.
    fn start(&mut self, stream: UnixStream) {
        let Some(slot) = admit(&stream, &self.table, self.policy) else {
            if !self.full {
                tracing::warn!(
                    max_connections = self.table.cap(),
                    "every socket connection has a request in progress: refusing newcomers (BRIDGE_BUSY)"
                );
                self.full = true;
            }
            let why = format!(
                "the bridge serves {} connections, each with a request in progress; try again shortly",
                self.table.cap()
            );
            refuse(stream, &why);
            return;
        };
        self.full = false;
        let registry = Arc::clone(&self.registry);
        let stop = self.shutdown.child_token();
        self.connections.spawn(conn::handle(stream, registry, self.policy, stop, slot, self.limits));
    }
}

/// A place in the table for an allowed peer (`None`: the table is full of busy connections);
/// a peer the policy refuses never displaces anyone (its connection only carries the refusal).
fn admit(stream: &UnixStream, table: &Arc<Table>, policy: PeerPolicy) -> Option<Slot> {
    let allowed = stream.peer_cred().is_ok_and(|c| policy.allows(&Peer::outside(c.uid(), c.gid())));
    if allowed { table.admit() } else { Some(Slot::detached()) }
}

/// Answers a connection `BRIDGE_BUSY` without reading from it, and closes it.
fn refuse(stream: UnixStream, why: &str) {
    tracing::debug!("refused a connection: {why}");
    let line = Response::Err { request_id: None, error: ErrorBody::new(codes::BRIDGE_BUSY, why) }.to_line();
    // A new connection's send buffer takes one short line at once; a peer that cannot take it
    // loses it rather than holding the accept loop.
    let _ = stream.try_write(&line);
}

/// Completes when every token is cancelled.
async fn wait_all(tokens: Vec<CancellationToken>) {
    for token in tokens {
        token.cancelled().await;
    }
}

impl PeerPolicy {
    /// Whether a peer may talk to the bridge.
    pub fn allows(&self, peer: &Peer) -> bool {
        peer.uid == self.uid && peer.gid == self.gid
    }
}
