//! Worktree tasks against a real bridge and real git, the fake runtime acting as the agent
//! through `exec:`: two writers of one repository side by side, each on its own branch, the
//! user's checkout untouched; a hostile task that goes for the repository's config, hooks and
//! branches; the refusals at submit.

use std::path::Path;

use serde_json::{Value, json};

use crate::changes::{contents, git};
use e2e::{Options, TestBridge, code};

/// Makes the test bridge's `repo` workdir a git repository with one commit, and an uncommitted
/// edit and an untracked file of the user's.
pub fn repository(b: &TestBridge) {
    let r = &b.repo;
    git(r, &["init", "-q", "-b", "main"]);
    std::fs::write(r.join("README.md"), "the project\n").expect("readme");
    std::fs::write(r.join("src/lib.rs"), "pub fn f() {}\n").expect("lib");
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "first"]);
    std::fs::write(r.join("README.md"), "the project\nthe user's own edit\n").expect("edit");
    std::fs::write(r.join("notes.txt"), "the user's notes\n").expect("notes");
}

/// Everything of the checkout that a task must leave alone: its files (the user's edits
/// included), its `HEAD`, index and config, its hooks, and the branch it is on.
fn checkout_state(repo: &Path) -> (Vec<(std::path::PathBuf, Vec<u8>)>, String) {
    let keep = |p: &Path| {
        !p.starts_with(".git")
            || [".git/HEAD", ".git/index", ".git/config"].iter().any(|k| p == Path::new(k))
            || p.starts_with(".git/hooks")
    };
    let files = contents(repo).into_iter().filter(|(p, _)| keep(p)).collect();
    let main = git(repo, &["rev-parse", "refs/heads/main"]);
    (files, main)
}

fn isolation(task: &Value) -> &Value {
    &task["isolation"]
}

/// Two writer tasks of one repository, in worktrees, run at the same time (both `running` at
/// once, no `WORKDIR_BUSY`) and end with two branches, each holding its own commit; the
/// user's checkout — its branch, `HEAD`, index, working tree with the user's uncommitted edit
/// — is byte-identical afterwards.
#[tokio::test]
async fn two_writers_of_one_repository_work_side_by_side_on_their_own_branches() {
    let barrier = tempfile::tempdir().expect("barrier");
    let shared = barrier.path().canonicalize().expect("canonical");
    let b =
        TestBridge::start_with(Options::default().with(&format!("SERVERFS_AGENT_SANDBOX_WRITE={}", shared.display())))
            .await;
    repository(&b);
    let before = checkout_state(&b.repo);
    // Each writes its own file, says it is ready, and waits for the test's go.
    let script = |name: &str| {
        format!(
            "exec:echo {name} > {name}.txt && touch {dir}/ready-{name} && while [ ! -e {dir}/go ]; do sleep 0.05; done",
            dir = shared.display()
        )
    };
    let one = b.submit_ok(json!({ "prompt": script("one"), "isolation": "worktree" })).await;
    let two = b.submit_ok(json!({ "prompt": script("two"), "isolation": "worktree" })).await;
    for id in [&one, &two] {
        b.wait_status(id, "running").await;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(shared.join("ready-one").exists() && shared.join("ready-two").exists()) {
        assert!(tokio::time::Instant::now() < deadline, "the tasks never got ready:\n{}", b.log());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Both are running at this moment.
    for id in [&one, &two] {
        assert_eq!(b.get(id).await["status"], "running");
    }
    std::fs::write(shared.join("go"), "").expect("go");
    let mut branches = Vec::new();
    for (id, name) in [(&one, "one"), (&two, "two")] {
        let t = b.wait_terminal(id).await;
        assert_eq!(t["status"], "succeeded", "{t:#}");
        let iso = isolation(&t);
        assert_eq!(iso["mode"], "worktree", "{t:#}");
        assert_eq!(iso["state"], "open", "{t:#}");
        assert_eq!(iso["base_dirty"], true, "the user's edit was not seen by the task");
        let branch = iso["branch"].as_str().expect("branch").to_owned();
        assert!(branch.starts_with("agent/"), "{branch}");
        assert_eq!(t["changes"]["files_changed"], 1, "{t:#}");
        assert_eq!(t["changes"]["files"][0]["path"], format!("{name}.txt"), "{t:#}");
        // The branch holds exactly its own commit, on top of the user's, by agent-bridge.
        let log = git(&b.repo, &["log", "--format=%an|%s", &format!("main..{branch}")]);
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.starts_with("agent-bridge|agent-bridge: task "), "{log}");
        let files = git(&b.repo, &["diff", "--name-only", &format!("main...{branch}")]);
        assert_eq!(files.trim(), format!("{name}.txt"));
        assert_eq!(iso["head_commit"].as_str(), Some(git(&b.repo, &["rev-parse", &branch]).trim()));
        assert!(!t["final_response"].as_str().unwrap_or_default().contains(&b.root().display().to_string()));
        branches.push(branch);
    }
    assert_ne!(branches[0], branches[1]);
    assert_eq!(checkout_state(&b.repo), before, "the user's checkout changed");
    // Nothing of the worktrees is left: git knows only the checkout.
    let worktrees = git(&b.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    git(&b.repo, &["fsck", "--no-dangling"]);
}

/// A hostile task in a worktree goes for the repository's config and hooks (which would run in
/// the user's checkout), the user's branch and the checkout itself: the mount refuses every
/// write; its own commits work and reach its branch.
#[tokio::test]
async fn a_hostile_worktree_task_cannot_touch_the_repository_or_the_checkout() {
    let b = TestBridge::start().await;
    if !crate::containment::sandbox_available() {
        return;
    }
    repository(&b);
    let before = checkout_state(&b.repo);
    let git_dir = b.repo.join(".git");
    let script = format!(
        r#"cfg='{g}/config'; hook='{g}/hooks/post-checkout'; top='{top}'
(echo '[core] fsmonitor = evil' >> "$cfg") 2>/dev/null && echo 'wrote config' || echo 'denied config'
(printf '#!/bin/sh\necho evil\n' > "$hook") 2>/dev/null && echo 'wrote hook' || echo 'denied hook'
(echo evil >> "$top/README.md") 2>/dev/null; ls "$top" 2>/dev/null | grep -q notes.txt && echo 'sees checkout' || echo 'no checkout'
git update-ref refs/heads/main HEAD 2>/dev/null && echo 'moved main' || echo 'denied main'
git config core.hooksPath /tmp 2>/dev/null && echo 'set hooksPath' || echo 'denied hooksPath'
echo mine > own.txt && git add own.txt && git -c user.name=agent -c user.email=a@x commit -qm 'the agent' && echo 'committed'
"#,
        g = git_dir.display(),
        top = b.repo.display()
    );
    std::fs::write(b.repo.join("attack.sh"), &script).expect("script");
    git(&b.repo, &["add", "attack.sh"]);
    git(&b.repo, &["commit", "-qm", "the attack script"]);
    let before_main = git(&b.repo, &["rev-parse", "main"]);
    let id = b.submit_ok(json!({ "prompt": "exec:sh attack.sh", "isolation": "worktree" })).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let said = t["final_response"].as_str().unwrap_or_default();
    for denied in ["denied config", "denied hook", "no checkout", "denied main", "denied hooksPath", "committed"] {
        assert!(said.contains(denied), "{denied}: {said}");
    }
    let (files, _) = checkout_state(&b.repo);
    let (before_files, _) = before;
    let changed: Vec<_> = files
        .iter()
        .filter(|(p, bytes)| {
            !p.starts_with(".git/index") && before_files.iter().find(|(q, _)| q == p).map(|(_, b)| b) != Some(bytes)
        })
        .map(|(p, _)| p.clone())
        .collect();
    assert!(changed.is_empty() || changed == [Path::new("attack.sh")], "changed: {changed:?}");
    assert_eq!(git(&b.repo, &["rev-parse", "main"]), before_main, "the user's branch moved");
    assert!(!git(&b.repo, &["config", "--list", "--local"]).contains("fsmonitor"));
    assert!(!git_dir.join("hooks/post-checkout").exists());
    // Its own commit, and nothing else, is on its branch.
    let branch = isolation(&t)["branch"].as_str().expect("branch").to_owned();
    let log = git(&b.repo, &["log", "--format=%an|%s", &format!("main..{branch}")]);
    assert_eq!(log.lines().collect::<Vec<_>>(), ["agent|the agent"], "{log}");
    git(&b.repo, &["fsck", "--no-dangling"]);
}

/// The refusals, before anything is made: a workdir that is not a git work tree, a review
/// task in a worktree, a base ref that could be read as an option, one that does not exist.
#[tokio::test]
async fn worktree_submissions_are_checked_before_anything_is_made() {
    let b = TestBridge::start().await;
    let r = b.submit_args(json!({ "prompt": "complete:x", "isolation": "worktree" })).await;
    assert_eq!(code(&r), "WORKDIR_NOT_A_GIT_REPOSITORY", "{r:?}");
    repository(&b);
    let r =
        b.submit_args(json!({ "workdir": "docs", "profile": "review", "prompt": "x", "isolation": "worktree" })).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r:?}");
    let r = b.submit_args(json!({ "prompt": "x", "isolation": "worktree", "base_ref": "--upload-pack=evil" })).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r:?}");
    let r = b.submit_args(json!({ "prompt": "x", "isolation": "in_place", "base_ref": "main" })).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r:?}");
    assert!(git(&b.repo, &["branch", "--list", "agent/*"]).trim().is_empty(), "nothing was made");
    // A base that does not exist: the task fails, naming the step; no branch is left.
    let id =
        b.submit_ok(json!({ "prompt": "complete:x", "isolation": "worktree", "base_ref": "no-such-branch" })).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"]["code"], "WORKTREE_FAILED", "{t:#}");
    assert!(t["error"]["message"].as_str().unwrap_or_default().contains("base commit"), "{t:#}");
    assert_eq!(isolation(&t)["state"], "failed");
    assert!(git(&b.repo, &["branch", "--list", "agent/*"]).trim().is_empty());
    // A task that changes nothing leaves no branch; the same key replays it.
    let args = json!({ "prompt": "complete:nothing", "isolation": "worktree", "idempotency_key": "k1" });
    let id = b.submit_ok(args.clone()).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(isolation(&t)["state"], "empty", "{t:#}");
    assert!(git(&b.repo, &["branch", "--list", "agent/*"]).trim().is_empty());
    assert_eq!(b.submit_ok(args).await, id);
    let r = b.submit_args(json!({ "prompt": "complete:nothing", "idempotency_key": "k1" })).await;
    assert_eq!(code(&r), "AGENT_IDEMPOTENCY_CONFLICT", "the isolation is part of the fingerprint: {r:?}");
    assert_eq!(t["manifest"]["isolation"]["mode"], "worktree", "{t:#}");
}

/// The bridge is killed (SIGKILL) while a worktree task has committed part of its work and
/// left more uncommitted: after the restart the task is interrupted, its stop is proven, and
/// its branch holds both — the agent's commit and, committed by the bridge, what it left —
/// with the worktree gone and git knowing only the checkout; the branch then merges.
#[tokio::test]
async fn a_bridge_killed_during_a_worktree_task_leaves_its_branch_and_work_recoverable() {
    let barrier = tempfile::tempdir().expect("barrier");
    let shared = barrier.path().canonicalize().expect("canonical");
    let mut b =
        TestBridge::start_with(Options::default().with(&format!("SERVERFS_AGENT_SANDBOX_WRITE={}", shared.display())))
            .await;
    if !crate::containment::sandbox_available() {
        return;
    }
    repository(&b);
    let prompt = format!(
        "exec:echo one > one.txt && git add one.txt && git -c user.name=agent -c user.email=a@x commit -qm 'part one' \
         && echo two > two.txt && touch {dir}/ready && sleep 120",
        dir = shared.display()
    );
    let id = b.submit_ok(json!({ "prompt": prompt, "isolation": "worktree" })).await;
    e2e::poll_until("the task's first part", std::time::Duration::from_secs(30), || shared.join("ready").exists())
        .await;
    b.crash().await;
    b.spawn().await;
    let t = b.wait_for(&id, |t| t["isolation"]["state"] != "active").await;
    assert_eq!(t["status"], "interrupted", "{t:#}");
    assert_eq!(isolation(&t)["state"], "open", "{t:#}");
    let branch = isolation(&t)["branch"].as_str().expect("branch").to_owned();
    let log = git(&b.repo, &["log", "--format=%an|%s", &format!("main..{branch}")]);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].starts_with("agent-bridge|agent-bridge: task ") && lines[0].ends_with("(recovered)"), "{log}");
    assert_eq!(lines[1], "agent|part one");
    let files = git(&b.repo, &["diff", "--name-only", &format!("main...{branch}")]);
    assert_eq!(files.lines().collect::<Vec<_>>(), ["one.txt", "two.txt"]);
    let worktrees = git(&b.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    let events = b.call("read_agent_task_events", json!({ "task_id": id })).await.expect("events");
    assert!(events.to_string().contains("worktree.recovered"), "{events:#}");
    let m = b.call("merge_agent_task", json!({ "task_id": id })).await.expect("merge");
    assert_eq!(m["merged_commit"], isolation(&t)["head_commit"]);
    git(&b.repo, &["fsck", "--no-dangling"]);
}

/// `.worktreeinclude` brings the ignored files it names into the worktree (and no other
/// ignored file); a submodule whose URL is not https or ssh is not fetched (a `file://` one
/// here), and the task runs all the same, saying so in its `worktree.created` event.
#[tokio::test]
async fn worktreeinclude_copies_the_named_ignored_files_and_local_submodules_are_not_fetched() {
    let b = TestBridge::start().await;
    repository(&b);
    let r = &b.repo;
    std::fs::write(r.join(".gitignore"), ".env\nnode_modules/\n").expect("gitignore");
    std::fs::write(r.join(".worktreeinclude"), ".env\n").expect("include");
    std::fs::write(r.join(".env"), "TOKEN=local\n").expect("env");
    std::fs::create_dir_all(r.join("node_modules/dep")).expect("modules");
    std::fs::write(r.join("node_modules/dep/index.js"), "x").expect("dep");
    let other = tempfile::tempdir().expect("other");
    git(other.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(other.path().join("lib.txt"), "lib\n").expect("lib");
    git(other.path(), &["add", "-A"]);
    git(other.path(), &["commit", "-qm", "lib"]);
    let url = format!("file://{}", other.path().display());
    git(r, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", &url, "sub"]);
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "ignore, include, submodule"]);
    let id = b
        .submit_ok(json!({
            "prompt": "exec:cat .env; ls node_modules 2>/dev/null || echo no-modules; ls -A sub | wc -l",
            "isolation": "worktree",
        }))
        .await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let said = t["final_response"].as_str().unwrap_or_default();
    assert!(said.contains("TOKEN=local"), "the included .env: {said}");
    assert!(said.contains("no-modules"), "an ignored file not named is not copied: {said}");
    assert!(said.trim_end().ends_with('0'), "the file:// submodule is not fetched: {said}");
    let events = b.call("read_agent_task_events", json!({ "task_id": id })).await.expect("events");
    let created = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "worktree.created")
        .expect("worktree.created")
        .clone();
    assert_eq!(created["payload"]["included"]["files"], 1, "{created:#}");
    assert_eq!(created["payload"]["submodules"]["initialised"], false, "{created:#}");
    // The copy is the task's own: the branch never holds the ignored file.
    assert_eq!(isolation(&t)["state"], "empty", "{t:#}");
}

/// What a real CLI's worktree task must leave: its branch holding exactly `file` in one commit
/// by agent-bridge (the CLI does not commit), a change set of that file alone, no worktree
/// left, and the user's checkout — files, `HEAD`, index, stash — as it was (`before`).
pub(crate) fn assert_real_worktree_task(ws: &Path, t: &Value, file: &str, before: &[(std::path::PathBuf, Vec<u8>)]) {
    assert_eq!(t["status"], "succeeded", "{t:#}");
    let iso = isolation(t);
    assert_eq!((iso["mode"].as_str(), iso["state"].as_str()), (Some("worktree"), Some("open")), "{t:#}");
    assert_eq!(iso["base_dirty"], true, "the staged file of the user's was not seen: {t:#}");
    let branch = iso["branch"].as_str().expect("branch");
    let log = git(ws, &["log", "--format=%an|%s", &format!("main..{branch}")]);
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.starts_with("agent-bridge|agent-bridge: task "), "{log}");
    assert_eq!(git(ws, &["diff", "--name-only", &format!("main...{branch}")]).trim(), file);
    let files: Vec<&str> =
        t["changes"]["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(files, [file], "{t:#}");
    assert!(!ws.join(file).exists(), "the task wrote the checkout");
    assert_eq!(checkout_now(ws), before, "the user's checkout changed");
    let worktrees = git(ws, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
}

/// The checkout as [`assert_real_worktree_task`] compares it (refs, objects and logs aside:
/// the task's branch is written there).
pub(crate) fn checkout_now(ws: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    contents(ws)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".git/refs") && !p.starts_with(".git/objects") && !p.starts_with(".git/logs"))
        .collect()
}
