//! Writer leases: an exclusive `flock` per workdir (and per worktree branch) on a lock file in
//! the bridge's lock dir.
//!
//! A lease is held for a `workspace-write` task from submit until its provider's cleanup is
//! over. The kernel releases it if the bridge dies, which is why the persistent recovery guard
//! exists beside it. Taking a lease never waits: a held lock is `WORKDIR_BUSY`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fs2::FileExt;

/// The lock directory.
#[derive(Debug, Clone)]
pub struct Leases {
    dir: PathBuf,
}

/// A held writer lease; dropping it releases the lock.
#[derive(Debug)]
pub struct Lease {
    file: File,
    slot: u8,
}

/// Why a lease could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another holder has it.
    #[error("the workdir is busy with another writer")]
    Busy,
    /// The lock file could not be opened.
    #[error("cannot open the lock file {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl Leases {
    /// Opens (creating 0700 if missing) the lock directory; refuses a non-private one.
    pub fn open(dir: &Path) -> Result<Leases, String> {
        crate::files::ensure_private_dir(dir)?;
        Ok(Leases { dir: dir.to_owned() })
    }

    /// The lock file of a workdir slot.
    pub fn path(&self, slot: u8) -> PathBuf {
        self.dir.join(format!("{slot:02}.lock"))
    }

    /// Takes the lease of `slot` without waiting (blocking file I/O: call off the reactor).
    pub fn try_acquire(&self, slot: u8) -> Result<Lease, LeaseError> {
        self.take(self.path(slot), slot)
    }

    /// Takes the lease of a worktree branch of `slot`, named by the task that made the branch
    /// (an `agt_` id: its continuations and a plan's steps share it), without waiting. A
    /// workdir's worktree branches and its in-place writer never exclude each other.
    pub fn try_acquire_branch(&self, slot: u8, origin_task_id: &str) -> Result<Lease, LeaseError> {
        let name: String = origin_task_id.chars().filter(char::is_ascii_alphanumeric).take(40).collect();
        self.take(self.dir.join(format!("{slot:02}-{name}.lock")), slot)
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "the writer lock is taken before the runtime or on a blocking thread (its callers use spawn_blocking)"
    )]
    fn take(&self, path: PathBuf, slot: u8) -> Result<Lease, LeaseError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_CLOEXEC.bits())
            .open(&path)
            .map_err(|source| LeaseError::Io { path: path.clone(), source })?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(()) => Ok(Lease { file, slot }),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(LeaseError::Busy),
            Err(e) if e.raw_os_error() == Some(nix::libc::EWOULDBLOCK) => Err(LeaseError::Busy),
            Err(source) => Err(LeaseError::Io { path, source }),
        }
    }

    /// Whether `slot` is free right now (takes and drops the lease).
    pub fn is_free(&self, slot: u8) -> bool {
        self.try_acquire(slot).is_ok()
    }
}

impl Lease {
    /// The slot this lease holds.
    pub fn slot(&self) -> u8 {
        self.slot
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = FileExt::unlock(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_release() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        let leases = Leases::open(&locks).unwrap();
        let first = leases.try_acquire(1).unwrap();
        assert!(matches!(leases.try_acquire(1), Err(LeaseError::Busy)));
        assert!(leases.try_acquire(2).is_ok(), "slots do not conflict");
        drop(first);
        assert!(leases.try_acquire(1).is_ok());
    }

    #[test]
    fn a_branch_lease_excludes_only_its_branch() {
        let dir = tempfile::tempdir().unwrap();
        let leases = Leases::open(&dir.path().join("locks")).unwrap();
        let in_place = leases.try_acquire(1).unwrap();
        let branch = leases.try_acquire_branch(1, "agt_0123").unwrap();
        assert!(matches!(leases.try_acquire_branch(1, "agt_0123"), Err(LeaseError::Busy)));
        assert!(leases.try_acquire_branch(1, "agt_4567").is_ok(), "another branch of the same workdir");
        assert!(leases.try_acquire_branch(1, "../../x").is_ok(), "a name is only letters and digits");
        drop((in_place, branch));
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn a_broad_lock_dir_is_refused_and_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        std::fs::create_dir(&locks).unwrap();
        std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = Leases::open(&locks).unwrap_err();
        assert!(err.contains("0755"), "{err}");
        let mode = std::fs::metadata(&locks).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
    }
}
