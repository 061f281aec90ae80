//! A writer task's change set against a real bridge (in the task sandbox where the machine
//! has one), with the fake runtime acting as the agent through `exec:`: what it added and
//! edited, with line counts, a diff that `git apply` takes back onto the baseline, the user's
//! repository untouched, a plain directory, and an agent that plants git config to be run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use e2e::{TestBridge, event_types};

/// Runs git in `dir` with no user or system config; its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file under `dir` and its bytes.
pub(crate) fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            if entry.file_type().expect("type").is_dir() {
                stack.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(dir).expect("inside").to_owned();
                all.insert(rel, std::fs::read(entry.path()).expect("read"));
            }
        }
    }
    all
}

/// The whole diff, read back in small chunks.
pub(crate) async fn read_diff(b: &TestBridge, id: &str, path: Option<&str>) -> String {
    let mut text = String::new();
    let mut offset = 0;
    loop {
        let mut args = json!({ "task_id": id, "offset_bytes": offset, "max_bytes": 97 });
        if let Some(p) = path {
            args["path"] = json!(p);
        }
        let chunk = b.call("read_agent_task_diff", args).await.expect("read_agent_task_diff");
        text.push_str(chunk["text"].as_str().expect("text"));
        offset = chunk["next_offset_bytes"].as_u64().expect("next");
        if chunk["eof"] == true {
            return text;
        }
    }
}

/// `(path, status, added, removed)` of each changed file, sorted.
pub(crate) fn files(changes: &Value) -> Vec<(String, String, i64, i64)> {
    let mut v: Vec<_> = changes["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("path"), s("status"), f["added"].as_i64().unwrap(), f["removed"].as_i64().unwrap())
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_writer_task_reports_what_it_changed_and_leaves_the_users_repository_alone() {
    let b = TestBridge::start().await;
    let repo = b.repo.clone();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("edit.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(repo.join("keep.txt"), "keep\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    std::fs::write(repo.join("keep.txt"), "keep\nstashed\n").unwrap();
    git(&repo, &["stash", "-q"]);
    std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
    git(&repo, &["add", "staged.txt"]);
    let before_git = contents(&repo.join(".git"));
    let before_stash = git(&repo, &["stash", "list"]);
    let before_head = git(&repo, &["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"]);
    let baseline = b.root().join("baseline-copy");
    for (rel, bytes) in contents(&repo) {
        if !rel.starts_with(".git") {
            std::fs::create_dir_all(baseline.join(&rel).parent().unwrap()).unwrap();
            std::fs::write(baseline.join(rel), bytes).unwrap();
        }
    }

    // The agent adds one file and edits another; it also tries to see its own baseline.
    let changes_dir = b.state_dir.join("changes");
    let id = b
        .submit(&format!(
            "exec:printf 'new\\nfile\\n' > added.txt && printf 'one\\n2\\nthree\\n' > edit.txt && \
             ls -A {} 2>/dev/null | wc -l",
            changes_dir.display()
        ))
        .await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}\n{}", b.log());
    if t["manifest"]["containment"] == "bubblewrap" {
        assert!(t["final_response"].as_str().unwrap().ends_with("\n0"), "the agent saw the bridge's snapshots: {t:#}");
    }
    let changes = &t["changes"];
    assert_eq!(changes["status"], "recorded", "{changes:#}\n{}", b.log());
    assert_eq!(changes["method"], "git");
    assert_eq!(
        files(changes),
        [("added.txt".into(), "added".into(), 2, 0), ("edit.txt".into(), "modified".into(), 1, 1)],
        "{changes:#}"
    );
    assert_eq!((changes["files_changed"].as_i64(), changes["added"].as_i64()), (Some(2), Some(3)));
    assert_eq!(changes["truncated"], false);
    assert!(event_types(&b.all_events(&id).await).iter().any(|e| e == "changes.recorded"));

    // The diff, whole and per file, applies to the baseline.
    let diff = read_diff(&b, &id, None).await;
    assert_eq!(diff.len() as u64, changes["diff_size_bytes"].as_u64().unwrap());
    let edit = read_diff(&b, &id, Some("edit.txt")).await;
    assert!(edit.starts_with("diff --git a/edit.txt b/edit.txt") && edit.contains("-two\n+2\n"), "{edit}");
    assert!(!edit.contains("added.txt"), "{edit}");
    std::fs::write(baseline.join("patch.diff"), &diff).unwrap();
    let applied = Command::new("git").args(["apply", "patch.diff"]).current_dir(&baseline).output().unwrap();
    assert!(applied.status.success(), "git apply: {}", String::from_utf8_lossy(&applied.stderr));
    for name in ["added.txt", "edit.txt", "keep.txt", "staged.txt"] {
        assert_eq!(std::fs::read(baseline.join(name)).unwrap(), std::fs::read(repo.join(name)).unwrap(), "{name}");
    }

    // The user's repository: index, refs, stash, HEAD, config, objects: byte for byte.
    assert_eq!(contents(&repo.join(".git")), before_git, "the bridge wrote into the user's .git");
    assert_eq!(git(&repo, &["stash", "list"]), before_stash);
    assert_eq!(git(&repo, &["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"]), before_head);
    assert!(!changes_dir.join(&id).exists(), "the private snapshot stays after the task");

    // The list shows the outline; the CLI shows the diff.
    let list = b.call("admin_list_tasks", json!({})).await.expect("list");
    let row = list["tasks"].as_array().unwrap().iter().find(|r| r["task_id"] == id.as_str()).cloned().unwrap();
    assert_eq!((row["changes"]["files_changed"].as_i64(), row["changes"]["removed"].as_i64()), (Some(2), Some(1)));
    let out = b.cli(&["tasks", "diff", &id, "--path", "added.txt"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("+new\n+file"), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test]
async fn a_plain_directory_works_and_an_agents_planted_git_config_runs_nothing() {
    let b = TestBridge::start().await;
    std::fs::write(b.repo.join("a.txt"), "a\n").unwrap();
    std::fs::write(b.repo.join("gone.txt"), "x\ny\n").unwrap();
    let pwned = b.root().join("pwned");
    std::fs::create_dir(&pwned).unwrap();
    // The agent makes the workdir a repository with a hostile config, and a filter for every
    // file; the bridge's end snapshot must run none of it (nor may a later task's baseline).
    let plant = format!(
        "git init -q . && git config core.fsmonitor 'touch {p}/fsmonitor' && \
         git config filter.evil.clean 'touch {p}/filter' && git config filter.evil.required true && \
         git config diff.external 'touch {p}/external' && git config core.hooksPath {p} && \
         printf '* filter=evil\\n' > .gitattributes && printf 'b\\n' >> a.txt && rm gone.txt",
        p = pwned.display()
    );
    let id = b.submit(&format!("exec:{plant}")).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert!(t["final_response"].as_str().unwrap().starts_with("exit=0"), "{t:#}");
    let changes = &t["changes"];
    assert_eq!(changes["status"], "recorded", "{changes:#}\n{}", b.log());
    assert_eq!(changes["method"], "tree", "{changes:#}");
    assert_eq!(
        files(changes),
        [
            (".gitattributes".into(), "added".into(), 1, 0),
            ("a.txt".into(), "modified".into(), 1, 0),
            ("gone.txt".into(), "deleted".into(), 0, 2)
        ],
        "{changes:#}"
    );
    // The next writer task starts from a repository whose config is the agent's.
    let id = b.submit("exec:printf 'c\\n' >> a.txt").await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["changes"]["status"], "recorded", "{:#}", t["changes"]);
    assert_eq!(files(&t["changes"]), [("a.txt".into(), "modified".into(), 1, 0)]);
    let ran: Vec<_> = std::fs::read_dir(&pwned).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(ran.is_empty(), "the agent's git config ran: {ran:?}");

    // A review task takes no baseline: it reports read-only.
    let v = b
        .call(
            "submit_agent_task",
            json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": "complete:ok" }),
        )
        .await
        .expect("submit");
    let t = b.wait_terminal(v["task_id"].as_str().unwrap()).await;
    assert_eq!(t["changes"]["status"], "read_only", "{t:#}");
    assert_eq!(t["changes"]["files_changed"], 0);
}

/// A git repository with one commit (`edit.txt`, `keep.txt`), a stash entry and a staged file:
/// returns a copy of its work tree (the baseline, without `.git`) and the `.git` as it is.
pub(crate) fn repository_with_state(repo: &Path, copy: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("edit.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(repo.join("keep.txt"), "keep\n").unwrap();
    git(repo, &["add", "edit.txt", "keep.txt"]);
    git(repo, &["commit", "-qm", "first"]);
    std::fs::write(repo.join("keep.txt"), "keep\nstashed\n").unwrap();
    git(repo, &["stash", "-q"]);
    std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
    git(repo, &["add", "staged.txt"]);
    for (rel, bytes) in contents(repo) {
        if !rel.starts_with(".git") {
            std::fs::create_dir_all(copy.join(&rel).parent().unwrap()).unwrap();
            std::fs::write(copy.join(rel), bytes).unwrap();
        }
    }
    contents(&repo.join(".git"))
}

/// Applies the task's diff to `copy` with `git apply` and checks each of `names` then equals
/// the workdir's.
pub(crate) async fn applies(b: &TestBridge, id: &str, copy: &Path, repo: &Path, names: &[&str]) {
    let diff = read_diff(b, id, None).await;
    std::fs::write(copy.join("patch.diff"), &diff).unwrap();
    let applied = Command::new("git").args(["apply", "patch.diff"]).current_dir(copy).output().unwrap();
    assert!(applied.status.success(), "git apply: {}\n{diff}", String::from_utf8_lossy(&applied.stderr));
    for name in names {
        assert_eq!(std::fs::read(copy.join(name)).ok(), std::fs::read(repo.join(name)).ok(), "{name}");
    }
}
