//! Change-set snapshots: git, run inside the task sandbox on a private object store and a
//! private index, records a workdir's tree before a writer task and diffs it afterwards.
//!
//! The user's repository is never written: git runs with `GIT_DIR` set to a directory of the
//! bridge's own (`<state>/changes/<task>/git`), so neither the repository's config (hooks,
//! fsmonitor, filters, external diff drivers an agent could have planted) nor its index, refs
//! or stash are used or touched. In a git work tree the repository's objects are an alternate
//! (read-only use: what is already stored is not stored twice) and its index seeds the private
//! one (unchanged files are not hashed again); its `info/exclude` is honoured. Outside git the
//! same private store holds the baseline's contents. Every run is bounded in time, its outputs
//! in size, and the private store in bytes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::gitrun::{Failed, GitRun};
use super::sandbox::Containment;
use super::tether::SpawnKind;

/// The largest unified diff kept (a longer one is cut, and says so).
pub const PATCH_LIMIT: usize = 8 * 1024 * 1024;
/// Why no change set is recorded when the private directory is not the one the baseline made.
const REPLACED: &str = "the snapshot directory was replaced since the baseline: nothing in it is trusted";

/// A directory's device and inode (the path itself not followed). Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))
}

/// The largest file list read back (name-status and numstat, each).
const LIST_LIMIT: u64 = 4 * 1024 * 1024;
/// How long one snapshot run may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// The most a private store may hold; a larger baseline is dropped (not recorded).
pub const STORE_LIMIT: u64 = 1024 * 1024 * 1024;

/// The script each run executes (`sh -c`): no caller data is ever part of it; paths come in
/// the environment.
///
/// Files are added with `core.bigFileThreshold=1`: git then streams every new blob into one
/// pack instead of writing a compressed file per blob. For 10,000 small files that is about
/// four times faster and thirty times smaller (bench/README.md, `tasks start`). Only the adds
/// use it: a diff treats blobs above the threshold as binary, so the diffs keep the default.
const SCRIPT: &str = r#"set -u
cd "$AB_ROOT" || exit 20
add() { git -c core.bigFileThreshold=1 add -A; }
case "$1" in
baseline)
  if [ -n "${AB_SEED_INDEX:-}" ] && [ -f "$AB_SEED_INDEX" ] && [ ! -L "$AB_SEED_INDEX" ]; then
    cp -- "$AB_SEED_INDEX" "$GIT_INDEX_FILE" 2>/dev/null || rm -f -- "$GIT_INDEX_FILE"
  fi
  if [ -n "${AB_SINCE:-}" ]; then
    # A fresh worktree: the baseline is its branch's base commit, and the index its checkout
    # just wrote only spares the end run from hashing what did not change.
    git rev-parse --verify --quiet "$AB_SINCE^{tree}" > "$AB_DIR/base" || exit 16
  else
    add 2>/dev/null || { rm -f -- "$GIT_INDEX_FILE"; add; } || exit 10
    git write-tree > "$AB_DIR/base" || exit 11
  fi ;;
end)
  add || exit 10
  git write-tree > "$AB_DIR/end" || exit 11
  read -r base < "$AB_DIR/base" || exit 12
  read -r end < "$AB_DIR/end" || exit 12
  git diff-tree -r -M -z --name-status "$base" "$end" > "$AB_DIR/status" || exit 13
  git diff-tree -r -M -z --numstat "$base" "$end" > "$AB_DIR/numstat" || exit 14
  git diff-tree -r -M -p --no-ext-diff --no-textconv --no-color "$base" "$end" | head -c "$AB_PATCH_LIMIT" > "$AB_DIR/patch" || exit 15 ;;
*) exit 2 ;;
esac
"#;

/// How a baseline was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// In a git work tree: the repository's objects and index helped.
    Git,
    /// Outside git: a private store of the workdir's contents.
    Tree,
}

impl Method {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Git => "git",
            Method::Tree => "tree",
        }
    }
}

/// A baseline taken for a task: where its private store is and how it was taken.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The private directory (`<state>/changes/<task>`).
    pub dir: PathBuf,
    /// The workdir root it describes.
    pub root: PathBuf,
    /// How it was taken.
    pub method: Method,
    /// The repository's `info/exclude`, found when the baseline was taken (the end run uses
    /// the same file, whatever the agent did to `.git` meanwhile).
    exclude: Option<PathBuf>,
    /// The repository's paths git reads outside the workdir (a linked worktree's objects,
    /// index and excludes), mounted read-only in the snapshot's sandbox.
    outside: Vec<PathBuf>,
    /// The private directory's device and inode when it was made: it is trusted, before the
    /// diff runs and before its outputs are read, only while it is still that directory.
    identity: Option<(u64, u64)>,
}

/// What the end run produced, read back within bounds.
#[derive(Debug, Clone, Default)]
pub struct RawChangeSet {
    /// `git diff-tree -z --name-status` output.
    pub status: Vec<u8>,
    /// `git diff-tree -z --numstat` output.
    pub numstat: Vec<u8>,
    /// The unified diff, at most [`PATCH_LIMIT`] bytes.
    pub patch: Vec<u8>,
    /// The diff was longer than [`PATCH_LIMIT`].
    pub patch_cut: bool,
    /// A file list was longer than its bound (the lists are then unusable).
    pub list_cut: bool,
}

/// Takes and diffs snapshots (git found once, at startup, on the bridge's `PATH`).
#[derive(Debug, Clone)]
pub struct Snapshots {
    git: Option<PathBuf>,
    containment: Containment,
}

/// The private snapshot directory of a task.
pub fn snapshot_dir(state_dir: &Path, task_id: &str) -> PathBuf {
    state_dir.join("changes").join(task_id)
}

impl Snapshots {
    /// Snapshots with `git` (when found) under `containment`.
    pub fn new(git: Option<PathBuf>, containment: Containment) -> Snapshots {
        Snapshots { git, containment }
    }

    /// Records the baseline of the workdir at `root` for `task_id` in `dir` (created here,
    /// private); with `since`, the change set counts from that commit's tree instead (a
    /// worktree task's base: its branch's whole change). With `beside`, its git runs beside
    /// the task's agent, which starts meanwhile ([`SpawnSpec::beside`](super::process::SpawnSpec::beside):
    /// the task sandbox is needed, and the caller keeps the agent from acting until this
    /// returns, its egress gate held: [`crate::egress::Hold`]). Errors are the reason no
    /// change set will be recorded (operator-safe text: no host path).
    pub async fn baseline(
        &self,
        task_id: &str,
        root: &Path,
        dir: &Path,
        since: Option<&str>,
        beside: bool,
    ) -> Result<Baseline, String> {
        let git = self.git.clone().ok_or("git is not installed on the bridge's PATH")?;
        let (d, r) = (dir.to_owned(), root.to_owned());
        let (root, repo, identity) = tokio::task::spawn_blocking(move || {
            let (root, repo) = prepare(&d, &r)?;
            Ok::<_, String>((root, repo, identity(&d)))
        })
        .await
        .map_err(|_| "the snapshot directory could not be prepared".to_owned())??;
        let method = if repo.is_some() { Method::Git } else { Method::Tree };
        let seed = repo.as_ref().map(|r| r.index.clone());
        let exclude = repo.as_ref().map(|r| r.exclude.clone());
        let outside: Vec<PathBuf> = repo
            .iter()
            .flat_map(|r| [r.objects.clone(), r.index.clone(), r.exclude.clone()])
            .filter(|p| !p.starts_with(&root) && p.exists())
            .collect();
        let taken =
            self.run(&git, task_id, (&root, &outside), dir, ("baseline", since, beside), seed, exclude.clone()).await;
        if let Err(e) = taken {
            let d = dir.to_owned();
            let _ = tokio::task::spawn_blocking(move || remove(&d)).await;
            return Err(e);
        }
        let d = dir.to_owned();
        let size = tokio::task::spawn_blocking(move || dir_size(&d.join("git").join("objects"))).await.unwrap_or(0);
        if size > STORE_LIMIT {
            let d = dir.to_owned();
            let _ = tokio::task::spawn_blocking(move || remove(&d)).await;
            return Err(format!("the workdir's baseline is larger than {} MiB", STORE_LIMIT >> 20));
        }
        Ok(Baseline { dir: dir.to_owned(), root, method, exclude, outside, identity })
    }

    /// Diffs the workdir against its baseline; the outputs are read back within bounds.
    pub async fn change_set(&self, task_id: &str, baseline: &Baseline) -> Result<RawChangeSet, String> {
        let git = self.git.clone().ok_or("git is not installed on the bridge's PATH")?;
        let exclude = baseline.exclude.clone();
        let tree = (baseline.root.as_path(), baseline.outside.as_slice());
        let (dir, expected) = (baseline.dir.clone(), baseline.identity);
        let same = move |dir: &Path| expected.is_some() && identity(dir) == expected;
        let d = dir.clone();
        if !tokio::task::spawn_blocking(move || same(&d)).await.unwrap_or(false) {
            return Err(REPLACED.to_owned());
        }
        self.run(&git, task_id, tree, &baseline.dir, ("end", None, false), None, exclude).await?;
        tokio::task::spawn_blocking(move || -> Result<RawChangeSet, String> {
            if !same(&dir) {
                return Err(REPLACED.to_owned());
            }
            let (status, status_cut) = read_bounded(&dir.join("status"), LIST_LIMIT)?;
            let (numstat, numstat_cut) = read_bounded(&dir.join("numstat"), LIST_LIMIT)?;
            let (patch, patch_cut) = read_bounded(&dir.join("patch"), PATCH_LIMIT as u64)?;
            Ok(RawChangeSet { status, numstat, patch, patch_cut, list_cut: status_cut || numstat_cut })
        })
        .await
        .map_err(|_| "the change set could not be read back".to_owned())?
    }

    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        git: &Path,
        task_id: &str,
        (root, outside): (&Path, &[PathBuf]),
        dir: &Path,
        (phase, since, beside): (&str, Option<&str>, bool),
        seed_index: Option<PathBuf>,
        exclude: Option<PathBuf>,
    ) -> Result<(), String> {
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        let mut set = |k: &str, v: OsString| env.push((k.into(), v));
        set("HOME", dir.into());
        set("XDG_CONFIG_HOME", dir.into());
        set("GIT_DIR", dir.join("git").into());
        set("GIT_WORK_TREE", root.into());
        set("GIT_INDEX_FILE", dir.join("index").into());
        set("AB_ROOT", root.into());
        set("AB_DIR", dir.into());
        set("AB_PATCH_LIMIT", (PATCH_LIMIT + 1).to_string().into());
        if let Some(seed) = seed_index {
            set("AB_SEED_INDEX", seed.into());
        }
        if let Some(since) = since {
            set("AB_SINCE", since.into());
        }
        let excludes = exclude.map(PathBuf::into_os_string).unwrap_or_else(|| "/dev/null".into());
        let run = GitRun {
            git,
            task_id,
            script: SCRIPT,
            phase,
            cwd: root,
            env,
            settings: vec![("core.excludesFile", excludes)],
            // The workdir is only read: git writes the private store and index.
            workdir: Some((root.to_owned(), false)),
            read: outside.to_vec(),
            write: vec![dir.to_owned()],
            kind: if phase == "baseline" { SpawnKind::SnapshotBaseline } else { SpawnKind::SnapshotEnd },
            network: false,
            limit: RUN_LIMIT,
            beside,
        };
        match super::gitrun::run(&self.containment, run).await {
            Ok(_) => Ok(()),
            Err(Failed { code: None, said }) => Err(said),
            Err(Failed { code, said }) => {
                let said: String = said.chars().take(200).collect();
                Err(format!("git failed ({}, exit status: {}): {said}", step(code), code.unwrap_or(-1)))
            }
        }
    }
}

/// What a failed script step was doing.
fn step(code: Option<i32>) -> &'static str {
    match code {
        Some(10) => "adding the workdir's files",
        Some(11) => "writing the tree",
        Some(12) => "reading the baseline",
        Some(13 | 14) => "listing the changes",
        Some(15) => "writing the diff",
        Some(16) => "reading the branch's base commit",
        Some(20) => "entering the workdir",
        _ => "an unexpected exit",
    }
}

/// The user's repository, when the workdir root is a git work tree's top.
struct Repo {
    objects: PathBuf,
    index: PathBuf,
    exclude: PathBuf,
}

/// The git directories of a work tree whose top is `root`: `.git` as a directory, or as a
/// `gitdir:` file (a linked worktree or a submodule), with `commondir` followed. Only paths are
/// read here; the repository's files are read by git inside the sandbox.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn git_dirs(root: &Path) -> Option<Repo> {
    let dotgit = root.join(".git");
    let meta = std::fs::symlink_metadata(&dotgit).ok()?;
    let gitdir = if meta.is_dir() {
        dotgit
    } else if meta.is_file() {
        let text = small_file(&dotgit)?;
        let named = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        root.join(named)
    } else {
        return None;
    };
    let common = match small_file(&gitdir.join("commondir")) {
        Some(text) if !text.trim().is_empty() => gitdir.join(text.trim()),
        _ => gitdir.clone(),
    };
    Some(Repo {
        objects: common.join("objects"),
        index: gitdir.join("index"),
        exclude: common.join("info").join("exclude"),
    })
}

/// The text of a small regular file (not a symlink, a FIFO or a device: an agent may have
/// planted any of them), at most 4 KiB.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn small_file(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Creates the private directory and its empty repository (HEAD, refs, objects and, in a git
/// work tree, the alternate that names the repository's objects); returns the workdir's
/// canonical root. Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn prepare(dir: &Path, root: &Path) -> Result<(PathBuf, Option<Repo>), String> {
    let failed = |what: &str| format!("the snapshot directory could not be prepared ({what})");
    let root = root.canonicalize().map_err(|_| "the workdir cannot be resolved".to_owned())?;
    if let Some(parent) = dir.parent() {
        crate::files::ensure_private_dir(parent).map_err(|_| failed("parent"))?;
    }
    let _ = std::fs::remove_dir_all(dir);
    crate::files::ensure_private_dir(dir).map_err(|_| failed("directory"))?;
    let git = dir.join("git");
    std::fs::create_dir_all(git.join("objects").join("info")).map_err(|_| failed("objects"))?;
    std::fs::create_dir_all(git.join("refs")).map_err(|_| failed("refs"))?;
    std::fs::write(git.join("HEAD"), "ref: refs/heads/agent-bridge-snapshot\n").map_err(|_| failed("HEAD"))?;
    let repo = git_dirs(&root).filter(|r| r.objects.is_dir());
    if let Some(repo) = &repo {
        let mut line = repo.objects.clone().into_os_string();
        line.push("\n");
        std::fs::write(git.join("objects").join("info").join("alternates"), line.as_encoded_bytes())
            .map_err(|_| failed("alternates"))?;
    }
    Ok((root, repo))
}

/// Reads at most `limit` bytes of `path`; the flag says there was more. Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn read_bounded(path: &Path, limit: u64) -> Result<(Vec<u8>, bool), String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|_| "git left no output".to_owned())?;
    let mut buf = Vec::new();
    file.take(limit + 1).read_to_end(&mut buf).map_err(|_| "git's output could not be read".to_owned())?;
    let cut = buf.len() as u64 > limit;
    buf.truncate(limit as usize);
    Ok((buf, cut))
}

/// The bytes under `dir` (files only, symlinks not followed). Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Removes a task's private snapshot directory. Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the private snapshot directory is prepared and measured on a blocking thread"
)]
pub fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(cause = %e, "cannot remove a task's snapshot directory");
    }
}

/// Removes every task's snapshot directory but `keep`'s (start-up: no task is running, and a
/// baseline does not survive a restart). Blocking.
pub fn sweep(state_dir: &Path, keep: &[String]) {
    super::sandbox::sweep_task_dirs(&state_dir.join("changes"), keep, remove);
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
pub(super) mod tests;
