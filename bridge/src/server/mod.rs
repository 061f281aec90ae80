//! The Unix socket: binding safely, accepting connections, and serving them until shutdown.
//!
//! The socket's directory must be private to the bridge user (created 0700 when missing) and
//! the socket itself is 0600 — or, when the allowed peer is another user, 0750 and 0660 in the
//! peer's group, so a container of that group can connect. A file already at the path is replaced only when it is a socket
//! of ours that nobody answers on (provably dead) and the bridge holds the instance lock; a
//! live socket or any other file is never removed (`SOCKET_PATH_IN_USE`).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::registry::Registry;
use crate::registry::auth::Peer;

mod conn;

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Something lives at the path (`SOCKET_PATH_IN_USE`).
    #[error("SOCKET_PATH_IN_USE: {0}")]
    InUse(String),
    /// The directory is unsafe or the bind failed.
    #[error("{0}")]
    Other(String),
}

/// Binds the socket at `path` (see the module docs for the rules). With `shared_gid`, the
/// socket is 0660 and its directory 0750, both in that group, for a peer of another user (a
/// container) that belongs to it; otherwise both are private to the bridge user.
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
) {
    let connections = TaskTracker::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let registry = Arc::clone(&registry);
                    let stop = shutdown.child_token();
                    connections.spawn(conn::handle(stream, registry, policy, stop));
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(&socket_path);
    connections.close();
    if tokio::time::timeout(std::time::Duration::from_secs(30), connections.wait()).await.is_err() {
        tracing::warn!("connections still open after 30 s; closing");
    }
}

impl PeerPolicy {
    /// Whether a peer may talk to the bridge.
    pub fn allows(&self, peer: &Peer) -> bool {
        peer.uid == self.uid && peer.gid == self.gid
    }
}
