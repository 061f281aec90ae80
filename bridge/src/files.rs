//! Private files and directories: created owner-only, and existing ones checked, never
//! chmod-ed (an operator's broader permissions are refused with a message instead).

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` (and missing parents) with mode 0700 when missing; refuses an existing one
/// that is a symlink, not a directory, not owned by this user, or open to group or others.
#[expect(
    clippy::disallowed_methods,
    reason = "a synchronous helper, called before the runtime or on a blocking thread"
)]
pub fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => check_private(dir, &meta, true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create the directory {}: {e}", dir.display()))?;
            let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
            check_private(dir, &meta, true)
        }
        Err(e) => Err(format!("cannot inspect {}: {e}", dir.display())),
    }
}

/// Creates `dir` (mode 0750, group `gid`) when missing, for a socket shared with a peer of
/// another user in that group; an existing one must be owned by this user, carry that group
/// and give the group no write access and others nothing. Never chmods an existing directory.
#[expect(
    clippy::disallowed_methods,
    reason = "a synchronous helper, called before the runtime or on a blocking thread"
)]
pub fn ensure_shared_dir(dir: &Path, gid: u32) -> Result<(), String> {
    let created = match std::fs::symlink_metadata(dir) {
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .map_err(|e| format!("cannot create the directory {}: {e}", dir.display()))?;
            true
        }
        Err(e) => return Err(format!("cannot inspect {}: {e}", dir.display())),
    };
    if created {
        nix::unistd::chown(dir, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(|e| format!("cannot give {} to group {gid}: {e}", dir.display()))?;
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(format!("{} must be a real directory", dir.display()));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(format!("{} is owned by uid {}, not by the bridge user (uid {uid})", dir.display(), meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if meta.gid() != gid || mode & 0o027 != 0 || mode & 0o050 != 0o050 {
        return Err(format!(
            "{} must have group {gid} and mode 0750 for a shared socket (it has group {} and mode {mode:04o}); the bridge will not change it",
            dir.display(),
            meta.gid()
        ));
    }
    Ok(())
}

/// Checks that an existing file or directory is private to the bridge user.
pub fn check_private(path: &Path, meta: &std::fs::Metadata, want_dir: bool) -> Result<(), String> {
    let what = if want_dir { "directory" } else { "file" };
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symlink; the {what} must be real", path.display()));
    }
    if want_dir != meta.is_dir() {
        return Err(format!("{} is not a {what}", path.display()));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(format!("{} is owned by uid {}, not by the bridge user (uid {uid})", path.display(), meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        let want = if want_dir { "0700" } else { "0600" };
        return Err(format!(
            "{} has mode {mode:04o}; the bridge needs {want} and will not change it (chmod {want} it yourself)",
            path.display()
        ));
    }
    Ok(())
}

/// Removes the tree at `path` whatever a task did to it: a directory it made unreadable or
/// unwritable is made the owner's again (never following a symlink) and the removal retried.
/// Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "a synchronous helper, called before the runtime or on a blocking thread"
)]
pub fn remove_tree(path: &Path) {
    let first = match std::fs::remove_dir_all(path) {
        Ok(()) => return,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => e,
    };
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let is_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(cause = %e, first = %first, "cannot remove a task's directory");
    }
}
