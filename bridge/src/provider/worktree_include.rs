//! `.worktreeinclude` (Claude Code's format: gitignore patterns at the repository's root): the
//! ignored files it names — a `.env`, a local config — are copied from the user's checkout into
//! a new worktree, which git alone would leave without them. Bounded in count and bytes;
//! only regular files are copied, and never through a symbolic link on either side.

use std::path::{Component, Path, PathBuf};

use super::worktree::{Repo, Worktrees};

/// The most files copied into one worktree.
pub const MAX_FILES: usize = 1000;
/// The most bytes copied into one worktree.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// What was copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Included {
    /// Files copied.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Files named but not copied: not a regular file, behind a link, or past a bound.
    pub skipped: usize,
    /// A bound was reached (files past it were not copied).
    pub cut: bool,
    /// Why nothing could be listed, if so.
    pub failed: Option<String>,
}

/// A relative path git listed, if it is one (no `..`, no root, nothing under `.git`).
fn relative(entry: &[u8]) -> Option<PathBuf> {
    let path = PathBuf::from(std::str::from_utf8(entry).ok()?);
    let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
    let in_git = path.components().next().is_some_and(|c| c.as_os_str() == ".git");
    (plain && !in_git && !path.as_os_str().is_empty()).then_some(path)
}

/// Whether every directory from `root` down to `path`'s parent is a real directory (no link).
#[expect(clippy::disallowed_methods, reason = "the files are copied on a blocking thread, away from the reactor")]
fn no_link_between(root: &Path, path: &Path) -> bool {
    let mut at = root.to_path_buf();
    let Some(parent) = path.parent() else { return true };
    for part in parent.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            _ => return false,
        }
    }
    true
}

/// Copies `listed` (NUL-separated paths, a last one without its NUL being cut) from `top`
/// into `tree`, within the bounds. Blocking.
#[expect(clippy::disallowed_methods, reason = "the files are copied on a blocking thread, away from the reactor")]
fn copy(top: &Path, tree: &Path, listed: &[u8]) -> Included {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut done = Included::default();
    let complete = listed.last().is_none_or(|b| *b == 0);
    let entries: Vec<&[u8]> = listed.split(|b| *b == 0).filter(|e| !e.is_empty()).collect();
    let whole = if complete { entries.len() } else { entries.len().saturating_sub(1) };
    done.cut = !complete || whole > MAX_FILES;
    for entry in &entries[..whole.min(MAX_FILES)] {
        let Some(rel) = relative(entry) else {
            done.skipped += 1;
            continue;
        };
        let (src, dst) = (top.join(&rel), tree.join(&rel));
        let meta = match std::fs::symlink_metadata(&src) {
            Ok(m) if m.is_file() => m,
            _ => {
                done.skipped += 1;
                continue;
            }
        };
        if done.bytes + meta.len() > MAX_BYTES {
            done.cut = true;
            done.skipped += 1;
            continue;
        }
        if !no_link_between(top, &rel) || !no_link_between(tree, &rel) {
            done.skipped += 1;
            continue;
        }
        let copied = (|| -> std::io::Result<u64> {
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // No link, and no wait on a FIFO swapped in since the check.
            let flags = nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits();
            let mut from = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(&src)?;
            let mut to = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .mode(meta.permissions().mode() & 0o777)
                .open(&dst)?;
            std::io::copy(&mut std::io::Read::take(&mut from, MAX_BYTES), &mut to)
        })();
        match copied {
            Ok(n) => {
                done.files += 1;
                done.bytes += n;
            }
            Err(_) => done.skipped += 1,
        }
    }
    done
}

impl Worktrees {
    /// Copies into `tree` the ignored files of `repo`'s checkout that its `.worktreeinclude`
    /// names (nothing when it has none).
    pub(super) async fn include(&self, task_id: &str, repo: &Repo, tree: &Path) -> Included {
        let env = vec![("AB_MAX".into(), (MAX_FILES + 1).to_string().into())];
        let listed = match self.run(task_id, repo, "include", env).await {
            Ok(listed) => listed.into_bytes(),
            Err(e) => return Included { failed: Some(e.message), ..Included::default() },
        };
        if listed.is_empty() {
            return Included::default();
        }
        let (top, tree) = (repo.top.clone(), tree.to_owned());
        tokio::task::spawn_blocking(move || copy(&top, &tree, &listed)).await.unwrap_or_else(|_| Included {
            failed: Some("the files could not be copied".into()),
            ..Included::default()
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "the tests set up their own files and processes")]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_outside_git_are_taken() {
        assert_eq!(relative(b".env"), Some(PathBuf::from(".env")));
        assert_eq!(relative(b"config/local.toml"), Some(PathBuf::from("config/local.toml")));
        for bad in [&b"../x"[..], b"/etc/passwd", b".git/config", b"a/../../b", b"", b"\xff"] {
            assert_eq!(relative(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn files_are_copied_within_bounds_and_never_through_a_link() {
        let (top, tree, outside) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (top, tree) = (top.path(), tree.path());
        std::fs::write(top.join(".env"), "SECRET=1\n").unwrap();
        std::fs::create_dir(top.join("conf")).unwrap();
        std::fs::write(top.join("conf/local"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", top.join("link")).unwrap();
        // A tracked link in the worktree must not carry a copy outside it.
        std::os::unix::fs::symlink(outside.path(), tree.join("out")).unwrap();
        std::fs::create_dir(top.join("out")).unwrap();
        std::fs::write(top.join("out/x"), "y").unwrap();
        let done = copy(top, tree, b".env\0conf/local\0link\0out/x\0../escape\0");
        assert_eq!((done.files, done.skipped, done.cut), (2, 3, false), "{done:?}");
        assert_eq!(std::fs::read_to_string(tree.join(".env")).unwrap(), "SECRET=1\n");
        assert!(!outside.path().join("x").exists(), "nothing is written through a link");
        // A list cut in the middle of a path drops that path and says so.
        let done = copy(top, tempfile::tempdir().unwrap().path(), b".env\0conf/lo");
        assert_eq!((done.files, done.cut), (1, true));
        // Past the count bound, nothing more is copied.
        let many: Vec<u8> = (0..MAX_FILES + 5).flat_map(|i| format!("f{i}\0").into_bytes()).collect();
        let done = copy(top, tempfile::tempdir().unwrap().path(), &many);
        assert!(done.cut && done.files == 0 && done.skipped == MAX_FILES, "{done:?}");
    }
}
