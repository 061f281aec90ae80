//! Tests of the worktrees with the real `git` (no sandbox here: the e2e suite runs them in it):
//! the user's checkout is left exactly as it was, the agent's commits and what it left reach the
//! branch through the private object directory, an empty branch goes, a branch moved meanwhile
//! is left alone, and a forged object never reaches the repository.
#![allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests drive git and the filesystem directly")]

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::config::SandboxMode;
use crate::provider::snapshot::tests::{contents, git, git_bin};

struct Fixture {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    worktrees: Worktrees,
}

fn fixture(bin: PathBuf) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("checkout");
    std::fs::create_dir(&top).unwrap();
    git(&top, &["init", "-q", "-b", "main"]);
    std::fs::write(top.join("README"), "hello\n").unwrap();
    std::fs::write(top.join(".gitignore"), "target/\n").unwrap();
    git(&top, &["add", "-A"]);
    git(&top, &["commit", "-qm", "first"]);
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let worktrees = Worktrees::new(Some(bin), Containment::none(SandboxMode::Off, "a unit test"), &state);
    Fixture { _tmp: tmp, top, worktrees }
}

/// git in the task's worktree as the agent runs it: its objects go to its private directory.
fn agent_git(tree: &Path, view: &TreeGit, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=agent", "-c", "user.email=a@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(tree)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .envs(view.env())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn new_branch() -> Start {
    Start::New { base_ref: "HEAD".into() }
}

#[tokio::test]
async fn a_task_works_on_its_branch_and_the_checkout_is_untouched() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin);
    // The user's own uncommitted state, which the task does not see.
    std::fs::write(f.top.join("README"), "hello\nuser's edit\n").unwrap();
    std::fs::write(f.top.join("notes.txt"), "untracked\n").unwrap();
    let before = contents(&f.top);
    let id = "agt_00000000000000000000000000000001";
    let made = f.worktrees.create(id, &f.top, "agent/000000000001", &new_branch()).await.unwrap();
    assert!(made.base_dirty, "the checkout had changes the task does not see");
    assert_eq!(made.base_commit, git(&f.top, &["rev-parse", "HEAD"]).trim());
    assert_eq!(made.start_commit, made.base_commit);
    assert_eq!(std::fs::read_to_string(made.tree.join("README")).unwrap(), "hello\n", "the committed state");
    assert!(!made.tree.join("notes.txt").exists());
    // The agent: one commit of its own, one file left uncommitted.
    std::fs::write(made.tree.join("a.txt"), "by the agent\n").unwrap();
    agent_git(&made.tree, &made.git, &["add", "a.txt"]);
    agent_git(&made.tree, &made.git, &["commit", "-qm", "agent's commit"]);
    std::fs::write(made.tree.join("b.txt"), "left uncommitted\n").unwrap();
    std::fs::create_dir(made.tree.join("target")).unwrap();
    std::fs::write(made.tree.join("target/build.o"), "ignored\n").unwrap();
    assert!(git(&f.top, &["cat-file", "-t", "HEAD"]).contains("commit"));
    let done = f
        .worktrees
        .finish(id, &f.top, "agent/000000000001", (&made.base_commit, &made.start_commit), "agent-bridge: task")
        .await
        .unwrap();
    assert!(!done.deleted);
    let log = git(&f.top, &["log", "--format=%an %s", "agent/000000000001"]);
    assert_eq!(log.lines().collect::<Vec<_>>(), ["agent-bridge agent-bridge: task", "agent agent's commit", "t first"]);
    let files = git(&f.top, &["ls-tree", "-r", "--name-only", "agent/000000000001"]);
    assert_eq!(files.lines().collect::<Vec<_>>(), [".gitignore", "README", "a.txt", "b.txt"]);
    // Everything the branch needs is in the repository itself (the private objects go next).
    git(&f.top, &["fsck", "--connectivity-only", "--no-dangling"]);
    f.worktrees.remove(id, &f.top).await.unwrap();
    assert!(!made.tree.exists() && !made.git.objects.exists() && !made.git.entry.exists());
    git(&f.top, &["fsck", "--no-dangling"]);
    assert_eq!(git(&f.top, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
    // The user's checkout: branch, HEAD, working tree, untracked file as they were.
    let after = contents(&f.top);
    let outside_git = |c: &std::collections::BTreeMap<PathBuf, Vec<u8>>| {
        c.iter().filter(|(p, _)| !p.starts_with(".git")).map(|(p, b)| (p.clone(), b.clone())).collect::<Vec<_>>()
    };
    assert_eq!(outside_git(&before), outside_git(&after));
    assert_eq!(before.get(Path::new(".git/HEAD")), after.get(Path::new(".git/HEAD")));
    assert_eq!(before.get(Path::new(".git/index")), after.get(Path::new(".git/index")));
}

#[tokio::test]
async fn a_task_that_changes_nothing_leaves_no_branch() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin);
    let id = "agt_00000000000000000000000000000002";
    let made = f.worktrees.create(id, &f.top, "agent/000000000002", &new_branch()).await.unwrap();
    assert!(!made.base_dirty);
    let done = f
        .worktrees
        .finish(id, &f.top, "agent/000000000002", (&made.base_commit, &made.start_commit), "m")
        .await
        .unwrap();
    assert!(done.deleted);
    assert_eq!(done.head, made.base_commit);
    assert!(git(&f.top, &["branch", "--list", "agent/*"]).trim().is_empty());
    f.worktrees.remove(id, &f.top).await.unwrap();
    assert!(!made.tree.exists());
}

#[tokio::test]
async fn a_branch_moved_meanwhile_is_left_alone_and_an_existing_name_is_refused() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin);
    let id = "agt_00000000000000000000000000000003";
    let made = f.worktrees.create(id, &f.top, "agent/000000000003", &new_branch()).await.unwrap();
    let again =
        f.worktrees.create("agt_00000000000000000000000000000004", &f.top, "agent/000000000003", &new_branch()).await;
    assert!(again.unwrap_err().message.contains("a branch of that name exists"));
    std::fs::write(made.tree.join("a.txt"), "work\n").unwrap();
    // Someone moves the branch while the task works.
    git(&f.top, &["commit", "-q", "--allow-empty", "-m", "elsewhere"]);
    git(&f.top, &["branch", "-f", "agent/000000000003", "main"]);
    let moved = git(&f.top, &["rev-parse", "agent/000000000003"]);
    let err = f
        .worktrees
        .finish(id, &f.top, "agent/000000000003", (&made.base_commit, &made.start_commit), "m")
        .await
        .unwrap_err();
    assert!(err.message.contains("moved by someone else"), "{err:?}");
    assert_eq!(git(&f.top, &["rev-parse", "agent/000000000003"]), moved);
    assert!(made.tree.join("a.txt").exists(), "the worktree keeps the work");
}

#[tokio::test]
async fn a_forged_object_in_the_private_directory_never_reaches_the_branch() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin);
    let id = "agt_00000000000000000000000000000005";
    let made = f.worktrees.create(id, &f.top, "agent/000000000005", &new_branch()).await.unwrap();
    std::fs::write(made.tree.join("a.txt"), "one\n").unwrap();
    std::fs::write(made.tree.join("b.txt"), "two\n").unwrap();
    agent_git(&made.tree, &made.git, &["add", "-A"]);
    agent_git(&made.tree, &made.git, &["commit", "-qm", "agent's commit"]);
    // The agent swaps one blob's file for another's: its name no longer matches its content.
    let blob = |name: &str| agent_git(&made.tree, &made.git, &["rev-parse", &format!("HEAD:{name}")]).trim().to_owned();
    let path = |sha: &str| made.git.objects.join(&sha[..2]).join(&sha[2..]);
    let (a, b) = (blob("a.txt"), blob("b.txt"));
    std::fs::remove_file(path(&a)).unwrap();
    std::fs::copy(path(&b), path(&a)).unwrap();
    let err = f
        .worktrees
        .finish(id, &f.top, "agent/000000000005", (&made.base_commit, &made.start_commit), "m")
        .await
        .unwrap_err();
    assert!(err.message.contains("objects are missing") || err.message.contains("copying"), "{err:?}");
    assert_eq!(git(&f.top, &["rev-parse", "agent/000000000005"]).trim(), made.base_commit, "the branch did not move");
}
