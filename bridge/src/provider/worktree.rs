//! Worktrees: the bridge's own git makes a worktree task's branch and worktree (outside the
//! repository, under the state directory), puts what the agent left on the branch once it has
//! stopped, and removes the worktree.
//!
//! Every run is [`super::gitrun`]'s: a fixed script in the task sandbox, hooks off, no network.
//! Its view holds the user's checkout read-only and the repository's git directory read-write
//! except its `config` and `hooks`, which stay read-only. The task itself never writes the
//! repository: its view ([`TreeGit`]) has the git directory read-only but for its own worktree
//! entry, and the objects it creates go to a private object directory. Its commits are made on a
//! detached `HEAD`; at the end they are copied into the repository by `index-pack` (which checks
//! every object's name against its content), checked to be complete, and only then is the
//! branch moved, from the tip it had when the task started (a branch someone else moved
//! meanwhile is left alone and the worktree kept).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::gitrun::{Failed, GitRun};
use super::sandbox::Containment;
use super::tether::SpawnKind;
pub use super::view::TreeGit;
use crate::store::worktrees::BranchSize;

/// How long one run may take (a checkout of a large repository takes a while).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// The script of every run (`sh -c`); paths and values come in the environment.
const SCRIPT: &str = include_str!("worktree.sh");

/// What a script's failed step was doing, by its exit code.
pub(super) type StepNames = fn(Option<i32>) -> &'static str;

/// What a failed step of the script was doing.
fn step(code: Option<i32>) -> &'static str {
    match code {
        Some(20) => "entering the repository",
        Some(21) => "finding the base commit",
        Some(22) => "creating the branch (a branch of that name exists)",
        Some(24) => "finding the branch",
        Some(25) => "adding the worktree",
        Some(26) => "listing the files .worktreeinclude names",
        Some(27) => "initialising the submodules (only https and ssh URLs are fetched)",
        Some(30) => "adding the task's files",
        Some(31) => "committing the task's files",
        Some(32) => "reading the worktree's HEAD",
        Some(33) => "copying the task's commits into the repository",
        Some(34) => "checking the task's commits (objects are missing)",
        Some(35) => "moving the branch (it was moved by someone else meanwhile)",
        Some(36) => "moving the branch (the task's HEAD does not descend from where the branch was)",
        Some(37) => "deleting the empty branch",
        Some(40 | 41) => "removing the worktree",
        _ => "an unexpected exit",
    }
}

/// Who the bridge's own commits are by (what an agent left, merge and squash commits).
pub(super) const IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "agent-bridge"),
    ("GIT_AUTHOR_EMAIL", "agent-bridge@localhost"),
    ("GIT_COMMITTER_NAME", "agent-bridge"),
    ("GIT_COMMITTER_EMAIL", "agent-bridge@localhost"),
];

/// [`repo_of`] off the reactor, or why not.
pub(super) async fn repo_at(top: &Path) -> Result<Repo, WorktreeError> {
    let t = top.to_owned();
    tokio::task::spawn_blocking(move || repo_of(&t))
        .await
        .ok()
        .flatten()
        .ok_or_else(|| WorktreeError::new("the workdir is no longer a git work tree"))
}

/// A checkout's repository: where its git directories are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The checkout's top (the workdir's root).
    pub top: PathBuf,
    /// The repository's common git directory (objects, refs, config, `worktrees/`).
    pub common: PathBuf,
}

/// The repository of the checkout whose top is `top`, if `top` is the top of a git work tree
/// (its `.git` is a directory, or a `gitdir:` file). Blocking.
#[expect(clippy::disallowed_methods, reason = "blocking by contract: its callers run it on a blocking thread")]
pub fn repo_of(top: &Path) -> Option<Repo> {
    let top = top.canonicalize().ok()?;
    let dotgit = top.join(".git");
    let meta = std::fs::symlink_metadata(&dotgit).ok()?;
    let gitdir = if meta.is_dir() {
        dotgit
    } else if meta.is_file() {
        let text = std::fs::read_to_string(&dotgit).ok().filter(|t| t.len() < 4096)?;
        top.join(text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim())
    } else {
        return None;
    };
    let gitdir = gitdir.canonicalize().ok()?;
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(text) if !text.trim().is_empty() => gitdir.join(text.trim()).canonicalize().ok()?,
        _ => gitdir,
    };
    (common.join("objects").is_dir() && common.join("refs").is_dir()).then_some(Repo { top, common })
}

/// Why a worktree step failed: caller-safe text (no host path) and git's own line for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeError {
    /// What failed, for the caller.
    pub message: String,
}

impl WorktreeError {
    fn of(failed: Failed, step: StepNames) -> WorktreeError {
        match failed.code {
            None => WorktreeError { message: failed.said },
            code => WorktreeError { message: format!("git failed while {}", step(code)) },
        }
    }

    pub(super) fn new(message: &str) -> WorktreeError {
        WorktreeError { message: message.to_owned() }
    }
}

/// What [`Worktrees::create`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The commit the branch started at.
    pub base_commit: String,
    /// The branch's tip the task starts from.
    pub start_commit: String,
    /// Whether the checkout had changes (or untracked files) the task does not see.
    pub base_dirty: bool,
    /// The worktree (the task's tree).
    pub tree: PathBuf,
    /// What the task's sandbox holds of the repository.
    pub git: TreeGit,
    /// The ignored files `.worktreeinclude` named that were copied in.
    pub included: super::worktree_include::Included,
    /// How the submodules' initialisation went (`None`: the repository has none).
    pub submodules: Option<Result<(), String>>,
}

/// A branch to work on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A new branch from a ref the caller named (`HEAD` by default).
    New {
        /// The ref.
        base_ref: String,
    },
    /// The branch exists (a continuation, a plan's later step); it started at `base_commit`.
    Existing {
        /// The commit the branch started at.
        base_commit: String,
    },
}

/// How a task's work ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The branch's tip now (the base commit when nothing was done: the branch is gone).
    pub head: String,
    /// Whether the branch was deleted because it holds nothing beyond its base.
    pub deleted: bool,
    /// What the branch holds beyond its base.
    pub size: BranchSize,
}

/// Makes, finishes and removes worktrees (git found once, at startup).
#[derive(Debug, Clone)]
pub struct Worktrees {
    git: Option<PathBuf>,
    containment: Containment,
    /// `<state>/worktrees`: one worktree per task, named by its id.
    root: PathBuf,
    /// `<state>/worktree-objects`: each task's private object directory.
    objects: PathBuf,
    /// One lock per repository (its common git directory): the bridge's administrative git
    /// runs on one repository (worktree add and remove, branch moves) one at a time.
    locks: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<PathBuf, std::sync::Arc<tokio::sync::Mutex<()>>>>>,
}

impl Worktrees {
    /// Worktrees under `state_dir`, made with `git` under `containment`.
    pub fn new(git: Option<PathBuf>, containment: Containment, state_dir: &Path) -> Worktrees {
        Worktrees {
            git,
            containment,
            root: state_dir.join("worktrees"),
            objects: state_dir.join("worktree-objects"),
            locks: Default::default(),
        }
    }

    /// A task's worktree.
    pub fn tree_of(&self, task_id: &str) -> PathBuf {
        self.root.join(task_id)
    }

    /// A task's private object directory.
    pub fn objects_of(&self, task_id: &str) -> PathBuf {
        self.objects.join(task_id)
    }

    /// What the task's sandbox holds of `repo` for its worktree.
    pub fn tree_git(&self, task_id: &str, repo: &Repo) -> TreeGit {
        TreeGit {
            checkout: repo.top.clone(),
            common: repo.common.clone(),
            entry: repo.common.join("worktrees").join(task_id),
            objects: self.objects_of(task_id),
        }
    }

    fn git(&self) -> Result<&Path, WorktreeError> {
        self.git.as_deref().ok_or_else(|| WorktreeError::new("git is not installed on the bridge's PATH"))
    }

    /// One run of the script on `repo`: the checkout read-only, the git directory read-write
    /// but its config and hooks, the worktrees' directory and the task's private objects.
    pub(super) async fn run(
        &self,
        task_id: &str,
        repo: &Repo,
        phase: &str,
        env: Vec<(OsString, OsString)>,
    ) -> Result<String, WorktreeError> {
        self.run_script(task_id, repo, (SCRIPT, phase, step), env, false).await
    }

    /// One run of `script` at `phase` on `repo`, serialized with every other on it; the
    /// checkout is writable only when `write_checkout` (a merge into it).
    pub(super) async fn run_script(
        &self,
        task_id: &str,
        repo: &Repo,
        (script, phase, step): (&'static str, &str, StepNames),
        env: Vec<(OsString, OsString)>,
        write_checkout: bool,
    ) -> Result<String, WorktreeError> {
        let git = self.git()?;
        // Submodules are fetched over https and ssh only, never file, ext or git://.
        let network = phase == "submodules";
        let mut settings = vec![("user.useConfigOnly", OsString::from("false"))];
        if network {
            settings.push(("protocol.https.allow", "always".into()));
            settings.push(("protocol.ssh.allow", "always".into()));
        }
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            std::sync::Arc::clone(locks.entry(repo.common.clone()).or_default())
        };
        let _serial = lock.lock().await;
        let mut env = env;
        env.push(("HOME".into(), "/tmp".into()));
        env.push(("AB_TASK".into(), task_id.into()));
        env.push(("AB_TOP".into(), repo.top.clone().into()));
        env.push(("AB_TREE".into(), self.tree_of(task_id).into()));
        env.push(("AB_PRIVATE".into(), self.objects_of(task_id).into()));
        let run = GitRun {
            git,
            task_id,
            script,
            phase,
            cwd: &repo.top,
            env,
            settings,
            workdir: Some((repo.top.clone(), write_checkout)),
            read: vec![repo.common.join("config"), repo.common.join("hooks"), self.objects_of(task_id)],
            write: vec![repo.common.clone(), self.root.clone()],
            kind: SpawnKind::Worktree,
            limit: RUN_LIMIT,
            network,
            beside: false,
        };
        let out = super::gitrun::run(&self.containment, run).await.map_err(|f| WorktreeError::of(f, step))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Makes `task_id`'s worktree of the checkout `top`, detached at the tip of `branch` (made
    /// from `start` first when it is new), and its private object directory.
    #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
    pub async fn create(
        &self,
        task_id: &str,
        top: &Path,
        branch: &str,
        start: &Start,
    ) -> Result<Created, WorktreeError> {
        let (t, root, objects) = (top.to_owned(), self.root.clone(), self.objects_of(task_id));
        let repo = tokio::task::spawn_blocking(move || -> Result<Repo, WorktreeError> {
            let repo = repo_of(&t).ok_or_else(|| WorktreeError::new("the workdir is no longer a git work tree"))?;
            crate::files::ensure_private_dir(&root)
                .map_err(|_| WorktreeError::new("the worktrees' directory cannot be made"))?;
            if let Some(parent) = objects.parent() {
                crate::files::ensure_private_dir(parent)
                    .map_err(|_| WorktreeError::new("the private objects' directory cannot be made"))?;
            }
            let _ = std::fs::remove_dir_all(&objects);
            crate::files::ensure_private_dir(&objects)
                .map_err(|_| WorktreeError::new("the private objects' directory cannot be made"))?;
            std::fs::create_dir_all(objects.join("info"))
                .map_err(|_| WorktreeError::new("the private objects' directory cannot be made"))?;
            std::fs::create_dir_all(objects.join("pack"))
                .map_err(|_| WorktreeError::new("the private objects' directory cannot be made"))?;
            Ok(repo)
        })
        .await
        .map_err(|_| WorktreeError::new("the worktree could not be prepared"))??;
        let mut env: Vec<(OsString, OsString)> = vec![("AB_BRANCH".into(), branch.into())];
        match start {
            Start::New { base_ref } => {
                env.push(("AB_NEW".into(), "1".into()));
                env.push(("AB_BASE".into(), base_ref.into()));
            }
            Start::Existing { base_commit } => {
                env.push(("AB_NEW".into(), "0".into()));
                env.push(("AB_BASE".into(), base_commit.into()));
            }
        }
        let out = self.run(task_id, &repo, "create", env).await?;
        let field = |name: &str| {
            out.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).map(str::to_owned).filter(|v| is_hex(v))
        };
        let (Some(base_commit), Some(start_commit)) = (field("base"), field("start")) else {
            return Err(WorktreeError::new("git did not say where the worktree starts"));
        };
        let base_dirty = out.lines().any(|l| l == "dirty 1");
        let tree = self.tree_of(task_id);
        let included = self.include(task_id, &repo, &tree).await;
        let t = tree.clone();
        let submodules = match tokio::task::spawn_blocking(move || t.join(".gitmodules").is_file()).await {
            Ok(true) => {
                Some(self.run(task_id, &repo, "submodules", Vec::new()).await.map(|_| ()).map_err(|e| e.message))
            }
            _ => None,
        };
        Ok(Created {
            base_commit,
            start_commit,
            base_dirty,
            tree,
            git: self.tree_git(task_id, &repo),
            included,
            submodules,
        })
    }

    /// Once the task's agent has stopped: commits what it left (`--no-verify`, as
    /// `agent-bridge`, `message`), copies its commits into the repository, checks them and moves
    /// `branch` from `start` to them; deletes the branch when it holds nothing beyond `base`.
    pub async fn finish(
        &self,
        task_id: &str,
        top: &Path,
        branch: &str,
        (base, start): (&str, &str),
        message: &str,
    ) -> Result<Finished, WorktreeError> {
        let repo = repo_at(top).await?;
        let mut env: Vec<(OsString, OsString)> = vec![
            ("AB_BRANCH".into(), branch.into()),
            ("AB_BASE".into(), base.into()),
            ("AB_START".into(), start.into()),
            ("AB_MESSAGE".into(), message.into()),
        ];
        env.extend(IDENTITY.iter().map(|(k, v)| (k.into(), v.into())));
        let out = self.run(task_id, &repo, "finish", env).await?;
        let head = out
            .lines()
            .find_map(|l| l.strip_prefix("head "))
            .filter(|v| is_hex(v))
            .ok_or_else(|| WorktreeError::new("git did not say where the branch ends"))?;
        Ok(Finished { head: head.to_owned(), deleted: head == base, size: parse_size(&out) })
    }

    /// Forgets the worktrees of the checkout `top` whose directories are gone (`git worktree
    /// prune`); `run_id` names the run's sandbox.
    pub async fn prune(&self, run_id: &str, top: &Path) -> Result<(), WorktreeError> {
        match repo_at(top).await {
            Ok(repo) => self.run(run_id, &repo, "prune", Vec::new()).await.map(|_| ()),
            Err(_) => Ok(()),
        }
    }

    /// The task ids that have a worktree directory under the state directory.
    #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
    pub async fn trees(&self) -> Vec<String> {
        let root = self.root.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let mut out: Vec<String> = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str().filter(|n| crate::ids::looks_like(n, "agt_")).map(str::to_owned))
                .collect();
            out.sort();
            out
        });
        listed.await.unwrap_or_default()
    }

    /// Whether `task_id`'s worktree directory exists.
    pub async fn tree_exists(&self, task_id: &str) -> bool {
        let tree = self.tree_of(task_id);
        tokio::task::spawn_blocking(move || tree.is_dir()).await.unwrap_or(false)
    }

    /// Removes `task_id`'s worktree (its entry in the repository too) and its private objects.
    pub async fn remove(&self, task_id: &str, top: &Path) -> Result<(), WorktreeError> {
        if let Ok(repo) = repo_at(top).await {
            self.run(task_id, &repo, "remove", Vec::new()).await?;
        }
        let (tree, objects) = (self.tree_of(task_id), self.objects_of(task_id));
        tokio::task::spawn_blocking(move || {
            crate::files::remove_tree(&tree);
            crate::files::remove_tree(&objects);
        })
        .await
        .map_err(|_| WorktreeError::new("the worktree could not be removed"))?;
        Ok(())
    }
}

/// The `ahead` and `stat` lines of a finish run (zeros for what git did not say).
fn parse_size(out: &str) -> BranchSize {
    let line = |name: &str| out.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).unwrap_or("");
    let mut stat = line("stat").split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
    BranchSize {
        ahead: line("ahead").parse().unwrap_or(0),
        files_changed: stat.next().unwrap_or(0),
        lines_added: stat.next().unwrap_or(0),
        lines_removed: stat.next().unwrap_or(0),
    }
}

/// Whether `text` is a full object name (SHA-1 or SHA-256, lower-case hex).
pub(super) fn is_hex(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
#[path = "worktree_tests.rs"]
mod tests;
