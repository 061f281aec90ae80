//! Handing back worktree tasks' branches against a real bridge and real git: a fast-forward
//! merge into the user's branch, a merge commit, refusals that change nothing (a branch that
//! cannot be fast-forwarded, a conflict, the user's uncommitted edit in the way), discards, and
//! every call repeated.

use serde_json::{Value, json};

use crate::changes::{contents, git};
use crate::worktrees::repository;
use e2e::{TestBridge, code};

/// Runs a worktree task to its end and returns its id and view.
async fn finished(b: &TestBridge, prompt: &str) -> (String, Value) {
    let id = b.submit_ok(json!({ "prompt": prompt, "isolation": "worktree" })).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["isolation"]["state"], "open", "{t:#}");
    (id, t)
}

/// The checkout's files (its `.git` aside) and the user's branch.
fn snapshot(b: &TestBridge) -> (Vec<(std::path::PathBuf, Vec<u8>)>, String) {
    let files = contents(&b.repo).into_iter().filter(|(p, _)| !p.starts_with(".git")).collect();
    (files, git(&b.repo, &["rev-parse", "main"]))
}

fn branch_exists(b: &TestBridge, t: &Value) -> bool {
    let branch = t["isolation"]["branch"].as_str().expect("branch");
    !git(&b.repo, &["branch", "--list", branch]).trim().is_empty()
}

#[tokio::test]
async fn branches_are_merged_or_discarded_and_a_refusal_changes_nothing() {
    let b = TestBridge::start().await;
    repository(&b);
    let readme_edit = std::fs::read(b.repo.join("README.md")).expect("readme");
    let (a, ta) = finished(&b, "exec:echo from-a > a.txt").await;
    let (c, tc) = finished(&b, "exec:echo from-c > a.txt").await;
    let (d, td) = finished(&b, "exec:echo from-d > d.txt").await;
    let (e, te) = finished(&b, "exec:echo agent >> README.md").await;
    assert_eq!(ta["isolation"]["size"]["commits"], 1, "{ta:#}");
    assert_eq!(ta["isolation"]["size"]["files_changed"], 1, "{ta:#}");

    // A fast-forward: the user's branch gets the task's commit, the checkout gets its file,
    // the user's own uncommitted edit and untracked file stay; the branch goes.
    let m = b.call("merge_agent_task", json!({ "task_id": a })).await.expect("merge");
    assert_eq!(m["already_merged"], false, "{m:#}");
    assert_eq!(m["into"], "main");
    assert_eq!(m["merged_commit"], ta["isolation"]["head_commit"], "fast-forward to the task's own commit");
    assert_eq!(git(&b.repo, &["rev-parse", "main"]).trim(), m["merged_commit"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(b.repo.join("a.txt")).expect("a.txt"), "from-a\n");
    assert_eq!(std::fs::read(b.repo.join("README.md")).expect("readme"), readme_edit, "the user's edit");
    assert!(b.repo.join("notes.txt").exists(), "the user's untracked file");
    assert!(!branch_exists(&b, &ta), "a merged branch is deleted");
    // Repeated: the same answer, nothing moves.
    let again = b.call("merge_agent_task", json!({ "task_id": a })).await.expect("merge again");
    assert_eq!(
        (again["already_merged"].clone(), again["merged_commit"].clone()),
        (json!(true), m["merged_commit"].clone())
    );
    assert_eq!(b.get(&a).await["isolation"]["state"], "merged");

    // The user's branch moved: ff_only is refused, a conflicting merge is refused, and
    // neither changes the checkout or any branch.
    let before = snapshot(&b);
    let r = b.call("merge_agent_task", json!({ "task_id": c })).await;
    assert_eq!(code(&r), "BRANCH_MOVED", "{r:?}");
    let r = b.call("merge_agent_task", json!({ "task_id": c, "strategy": "merge" })).await;
    assert_eq!(code(&r), "MERGE_CONFLICT", "{r:?}");
    assert!(format!("{r:?}").contains("a.txt"), "the conflict names the file: {r:?}");
    assert_eq!(snapshot(&b), before, "a refused merge changed the checkout");
    assert!(branch_exists(&b, &tc));
    assert!(git(&b.repo, &["status", "--porcelain"]).lines().all(|l| !l.starts_with("UU")), "no conflict left");

    // A merge commit for a branch that touches other files.
    let m = b.call("merge_agent_task", json!({ "task_id": d, "strategy": "merge" })).await.expect("merge d");
    let parents = git(&b.repo, &["rev-list", "--parents", "-n", "1", "main"]);
    assert_eq!(parents.split_whitespace().count(), 3, "a merge commit has two parents: {parents}");
    assert_eq!(git(&b.repo, &["rev-parse", "main"]).trim(), m["merged_commit"].as_str().unwrap());
    assert!(b.repo.join("d.txt").exists() && b.repo.join("a.txt").exists());
    assert!(!branch_exists(&b, &td));

    // The task's branch writes README.md, which the user has edited: refused, nothing changes.
    let before = snapshot(&b);
    let r = b.call("merge_agent_task", json!({ "task_id": e, "strategy": "squash" })).await;
    assert_eq!(code(&r), "WORKDIR_DIRTY", "{r:?}");
    assert!(format!("{r:?}").contains("README.md"), "{r:?}");
    assert_eq!(snapshot(&b), before);
    assert!(branch_exists(&b, &te));

    // Discard: the branch goes, a repeat says so, and a discarded branch cannot be merged.
    let x = b.call("discard_agent_task", json!({ "task_id": c })).await.expect("discard");
    assert_eq!(x["already_discarded"], false);
    assert!(!branch_exists(&b, &tc));
    let x = b.call("discard_agent_task", json!({ "task_id": c })).await.expect("discard again");
    assert_eq!(x["already_discarded"], true);
    let r = b.call("merge_agent_task", json!({ "task_id": c })).await;
    assert_eq!(code(&r), "AGENT_BRANCH_NOT_OPEN", "{r:?}");
    // The CLI discards too.
    let out = b.cli(&["tasks", "discard", &e]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("discarded"));
    assert!(!branch_exists(&b, &te));
    assert_eq!(b.get(&e).await["isolation"]["state"], "discarded");

    // An in-place task has no branch; a viewer may not merge; every call is audited.
    let in_place = b.submit_ok(json!({ "prompt": "complete:nothing" })).await;
    b.wait_terminal(&in_place).await;
    let r = b.call("merge_agent_task", json!({ "task_id": in_place })).await;
    assert_eq!(code(&r), "AGENT_BRANCH_NOT_OPEN", "{r:?}");
    let viewer = b.create_key("looker", "viewer").await;
    let r = b.call_mcp(Some(&viewer), "discard_agent_task", json!({ "task_id": d })).await;
    assert_eq!(code(&r), "UNKNOWN_TOOL", "{r:?}");
    let audit = b.call("admin_read_audit_log", json!({ "limit": 200 })).await.expect("audit");
    let text = audit.to_string();
    assert!(text.contains("merge_agent_task") && text.contains("discard_agent_task"), "{audit:#}");
    git(&b.repo, &["fsck", "--no-dangling"]);
}

/// The human's side: `doctor` lists the branches neither merged nor discarded with their
/// size, the board's workdirs page lists them, and a task's page merges or discards its
/// branch with a form (audited on surface `board`); afterwards nothing is listed.
#[tokio::test]
async fn doctor_and_the_board_list_open_branches_and_the_board_hands_them_back() {
    use crate::board::{csrf_of, login, token};
    use e2e::browser::http;
    let b = TestBridge::start().await;
    repository(&b);
    let (one, t1) = finished(&b, "exec:printf 'a\\nb\\n' > one.txt").await;
    let (two, t2) = finished(&b, "exec:echo two > two.txt").await;
    let (exit, report) = crate::doctor::doctor_json(&b);
    assert_eq!(exit, Some(0), "{report:#}");
    let listed = report["agent_branches"].as_array().expect("agent_branches");
    assert_eq!(listed.len(), 2, "{report:#}");
    assert_eq!(listed[0]["branch"], t1["isolation"]["branch"]);
    let size = &listed[0]["size"];
    assert_eq!((size["commits"].as_u64(), size["lines_added"].as_u64()), (Some(1), Some(2)));
    let text = String::from_utf8_lossy(&b.cli_env(&["doctor"]).stdout).into_owned();
    assert!(text.contains(&format!("agent-bridge tasks merge {one}")), "{text}");

    let (token, addr) = token(&b);
    let cookie = login(&addr, &token);
    let origin = format!("http://{addr}");
    let get = |path: &str| http(&addr, "GET", path, &[("Cookie", cookie.as_str())], "");
    let page = get("/workdirs");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Agent branches (2)"), "{}", page.body);
    assert!(page.body.contains(t2["isolation"]["branch"].as_str().unwrap()));
    let task_page = get(&format!("/tasks/{one}"));
    assert!(task_page.body.contains(&format!("action=\"/tasks/{one}/merge\"")), "{}", task_page.body);
    let csrf = csrf_of(&task_page.body);
    let form = [
        ("Cookie", cookie.as_str()),
        ("Origin", origin.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let r = http(&addr, "POST", &format!("/tasks/{one}/merge"), &form, &format!("csrf={csrf}&strategy=ff_only"));
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(b.get(&one).await["isolation"]["state"], "merged");
    assert!(b.repo.join("one.txt").exists());
    // The other branch cannot be fast-forwarded any more: the refusal page says why; then it
    // is discarded.
    let r = http(&addr, "POST", &format!("/tasks/{two}/merge"), &form, &format!("csrf={csrf}&strategy=ff_only"));
    assert_eq!(r.status, 409, "the checkout's branch moved: {}", r.body);
    assert!(r.body.contains("BRANCH_MOVED"), "{}", r.body);
    let r = http(&addr, "POST", &format!("/tasks/{two}/discard"), &form, &format!("csrf={csrf}&confirm=true"));
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(b.get(&two).await["isolation"]["state"], "discarded");
    let log = b.call("admin_read_audit_log", json!({ "capability": "merge_agent_task" })).await.unwrap();
    assert!(log["rows"].as_array().unwrap().iter().any(|r| r["surface"] == "board"), "{log:#}");
    assert!(get("/workdirs").body.contains("Agent branches (0)"));
    let (_, report) = crate::doctor::doctor_json(&b);
    assert_eq!(report["agent_branches"], json!([]), "{report:#}");
}

/// A continuation of a worktree task goes on with its branch: its change set is the branch's
/// whole change (from the branch's base), and the branch is handed back through the newest
/// task only. A plan filed with `isolation: worktree` runs its steps on one branch, each
/// starting where the previous one ended.
#[tokio::test]
async fn continuations_and_plan_steps_share_one_branch() {
    let b = TestBridge::start().await;
    // A worktree plan on a workdir that is no git work tree (yet) is refused at once.
    let r = b
        .call(
            "submit_agent_plan",
            json!({ "workdir": "repo", "runtime": "fake", "title": "x", "isolation": "worktree",
                    "steps": [{ "title": "x", "prompt": "complete:x" }] }),
        )
        .await;
    assert_eq!(code(&r), "WORKDIR_NOT_A_GIT_REPOSITORY", "{r:?}");
    repository(&b);
    let (first, t1) = finished(&b, "exec:echo one > one.txt").await;
    let next = b
        .submit_ok(json!({ "prompt": "exec:echo two > two.txt && cat one.txt", "continue_from_task_id": first }))
        .await;
    let t2 = b.wait_terminal(&next).await;
    assert_eq!(t2["status"], "succeeded", "{t2:#}");
    assert_eq!(t2["isolation"]["branch"], t1["isolation"]["branch"], "{t2:#}");
    assert_eq!(t2["isolation"]["start_commit"], t1["isolation"]["head_commit"]);
    assert_eq!(t2["isolation"]["size"]["commits"], 2, "{t2:#}");
    let files: Vec<&str> =
        t2["changes"]["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(files, ["one.txt", "two.txt"], "the change set is base..branch: {t2:#}");
    let r = b.call("merge_agent_task", json!({ "task_id": first })).await;
    assert_eq!(code(&r), "BRANCH_MOVED", "{r:?}");
    assert!(format!("{r:?}").contains(&next), "the refusal names the newer task: {r:?}");
    b.call("merge_agent_task", json!({ "task_id": next })).await.expect("merge");
    assert_eq!(b.get(&first).await["isolation"]["state"], "merged", "every task of the branch is merged");

    let steps = json!([
        { "title": "one", "prompt": "exec:echo a > plan-a.txt" },
        { "title": "two", "prompt": "exec:cat plan-a.txt > plan-b.txt" },
    ]);
    let v = b
        .call(
            "submit_agent_plan",
            json!({ "workdir": "repo", "runtime": "fake", "title": "Two steps", "steps": steps, "isolation": "worktree" }),
        )
        .await
        .expect("plan");
    assert_eq!(v["isolation"], "worktree", "{v:#}");
    let plan = v["plan_id"].as_str().unwrap().to_owned();
    let mut p = Value::Null;
    for _ in 0..300 {
        p = b.call("get_agent_plan", json!({ "plan_id": plan })).await.expect("plan");
        if p["terminal"] == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(p["status"], "succeeded", "{p:#}");
    let last = p["steps"][1]["task_id"].as_str().expect("step 2's task").to_owned();
    let t = b.get(&last).await;
    let branch = t["isolation"]["branch"].as_str().expect("branch");
    assert_eq!(b.get(p["steps"][0]["task_id"].as_str().unwrap()).await["isolation"]["branch"], branch);
    let log = git(&b.repo, &["log", "--format=%s", &format!("main..{branch}")]);
    assert_eq!(log.lines().count(), 2, "one commit per step on one branch: {log}");
    assert_eq!(git(&b.repo, &["show", &format!("{branch}:plan-b.txt")]), "a\n", "step 2 started where step 1 ended");
    assert!(!b.repo.join("plan-a.txt").exists(), "the checkout is untouched");
}
