//! What a task leaves behind, against a real bridge: results (inline and spooled), events,
//! the manifest, failures, and host-path redaction everywhere.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use e2e::{Options, TestBridge, code, poll_until};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads a spooled result chunk by chunk, checking every chunk's bounds; returns the text.
async fn read_all(b: &TestBridge, id: &str, max_bytes: u64) -> String {
    let mut out = String::new();
    let mut offset = 0u64;
    loop {
        let chunk = b
            .call("read_agent_task_result", json!({ "task_id": id, "offset_bytes": offset, "max_bytes": max_bytes }))
            .await
            .unwrap_or_else(|e| panic!("chunk at {offset} (max {max_bytes}): {e}"));
        let text = chunk["text"].as_str().expect("text");
        assert_eq!(chunk["offset_bytes"], offset);
        assert!(text.len() as u64 <= max_bytes, "chunk of {} bytes for max_bytes {max_bytes}", text.len());
        assert!(!text.is_empty(), "an empty chunk before the end at {offset}");
        let next = chunk["next_offset_bytes"].as_u64().expect("next_offset_bytes");
        assert_eq!(next, offset + text.len() as u64, "the chunk covers exactly the bytes it returns");
        let eof = chunk["eof"] == true;
        // A chunk that could have held the next character must have taken it (the cut is only
        // ever the partial character at the end).
        assert!(eof || max_bytes - (text.len() as u64) < 4, "chunk too short: {} of {max_bytes}", text.len());
        out.push_str(text);
        offset = next;
        if eof {
            assert_eq!(offset, chunk["size_bytes"].as_u64().unwrap());
            return out;
        }
    }
}

#[tokio::test]
async fn spooled_results_are_read_back_exactly_in_utf8_safe_chunks() {
    let b = TestBridge::start().await;
    let id = b.submit("big:300000").await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["result"]["storage"], "spool", "{:#}", t["result"]);
    assert_eq!(t["result"]["size_bytes"], 300_000);
    assert_eq!(t["result"]["retrievable"], true);
    assert_eq!(t["final_response_truncated"], true);
    let preview = t["final_response"].as_str().expect("preview");
    assert!(!preview.is_empty() && preview.len() <= 65_536, "preview of {} bytes", preview.len());
    let sha = t["result"]["sha256"].as_str().expect("sha256").to_owned();

    // Chunk ends fall inside characters for all of these sizes. (Tiny sizes are read in
    // full on a smaller result below: 7-byte chunks of 300 kB would be 43 000 calls.)
    for max in [1000u64, 4096, 65_536] {
        let text = read_all(&b, &id, max).await;
        assert_eq!(text.len(), 300_000, "max_bytes {max}");
        assert_eq!(sha256_hex(text.as_bytes()), sha, "max_bytes {max}");
        assert!(text.starts_with(preview), "the preview is a prefix of the result");
    }
    let text = read_all(&b, &id, 65_536).await;
    let (i, c) = text.char_indices().find(|(_, c)| c.len_utf8() == 4).expect("a 4-byte character");
    for inside in 1..c.len_utf8() {
        let r = b
            .call("read_agent_task_result", json!({ "task_id": id, "offset_bytes": i + inside, "max_bytes": 100 }))
            .await;
        assert_eq!(code(&r), "INVALID_RESULT_OFFSET", "offset {} inside {c:?}", i + inside);
    }
    let past =
        b.call("read_agent_task_result", json!({ "task_id": id, "offset_bytes": 300_001, "max_bytes": 100 })).await;
    assert_eq!(code(&past), "INVALID_RESULT_OFFSET");
    // A chunk too small for the next character is refused rather than split.
    let tiny = b.call("read_agent_task_result", json!({ "task_id": id, "offset_bytes": i, "max_bytes": 3 })).await;
    assert_eq!(code(&tiny), "INVALID_RESULT_LIMIT");
    let exact = b
        .call("read_agent_task_result", json!({ "task_id": id, "offset_bytes": i, "max_bytes": 4 }))
        .await
        .expect("one character");
    assert_eq!(exact["text"], c.to_string());

    let spool = b.state_dir.join("results").join(format!("{id}.txt"));
    let mode = std::fs::metadata(&spool).expect("spool file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "spool file mode {mode:o}");
    let dir_mode = std::fs::metadata(spool.parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o077, 0, "spool directory mode {dir_mode:o}");
    let events = b.all_events(&id).await;
    let spooled = events.iter().find(|e| e["event_type"] == "task.result_spooled").expect("task.result_spooled");
    assert_eq!(spooled["payload"], json!({ "size_bytes": 300_000, "sha256": sha }));

    // An inline result is not retrievable in chunks.
    b.writer_idle().await;
    let small = b.submit("complete:small").await;
    let s = b.wait_terminal(&small).await;
    assert_eq!(s["result"]["storage"], "inline");
    assert_eq!(s["result"]["retrievable"], false);
    assert_eq!(s["final_response_truncated"], false);
    assert_eq!(s["result"]["sha256"], sha256_hex(b"small"));
    let r = b.call("read_agent_task_result", json!({ "task_id": small })).await;
    assert_eq!(code(&r), "AGENT_RESULT_NOT_RETRIEVABLE");
}

#[tokio::test]
async fn a_result_over_8_mib_fails_the_task() {
    let b = TestBridge::start().await;
    let id = b.submit("big:9000000").await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "AGENT_RESULT_TOO_LARGE");
    assert!(t["result"].is_null() && t["final_response"].is_null(), "{t:#}");
    assert!(!b.state_dir.join("results").join(format!("{id}.txt")).exists());
    let r = b.call("read_agent_task_result", json!({ "task_id": id })).await;
    assert_eq!(code(&r), "AGENT_RESULT_NOT_RETRIEVABLE");
    poll_until("the lease is released", Duration::from_secs(15), || b.lease_is_free(1)).await;
}

#[tokio::test]
async fn the_spool_threshold_is_configurable() {
    let b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES=1000")).await;
    let at = b.submit("big:1000").await;
    let t = b.wait_terminal(&at).await;
    assert_eq!(t["result"]["storage"], "inline", "exactly the threshold stays inline: {t:#}");
    assert_eq!(t["manifest"]["limits"]["result_spool_threshold_bytes"], 1000);
    b.writer_idle().await;
    let over = b.submit("big:2000").await;
    let t = b.wait_terminal(&over).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["result"]["storage"], "spool");
    assert!(t["final_response"].as_str().unwrap().len() <= 1000, "the preview respects the threshold");
    for max in [4u64, 5, 7, 64, 65_536] {
        let text = read_all(&b, &over, max).await;
        assert_eq!(text.len(), 2000, "max_bytes {max}");
        assert_eq!(sha256_hex(text.as_bytes()), t["result"]["sha256"].as_str().unwrap(), "max_bytes {max}");
    }
}

#[tokio::test]
async fn events_page_exactly_once_in_order_with_the_envelope() {
    let b = TestBridge::start().await;
    let id = b.submit_ok(json!({ "prompt": "events:50", "correlation_id": "corr-9" })).await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["status"], "succeeded", "{t:#}");
    assert_eq!(t["correlation_id"], "corr-9");
    assert_eq!(t["manifest"]["correlation_id"], "corr-9");

    let mut paged = Vec::new();
    let mut after = 0u64;
    loop {
        let page = b
            .call("read_agent_task_events", json!({ "task_id": id, "after_event_id": after, "limit": 7 }))
            .await
            .expect("page");
        assert_eq!(page["correlation_id"], "corr-9");
        let events = page["events"].as_array().unwrap().clone();
        assert!(events.len() <= 7);
        let next = page["next_after_event_id"].as_u64().unwrap();
        if events.is_empty() {
            assert_eq!(next, after, "an empty page keeps the cursor");
            break;
        }
        assert_eq!(next, events.last().unwrap()["event_id"].as_u64().unwrap());
        after = next;
        paged.extend(events);
    }
    let ids: Vec<u64> = paged.iter().map(|e| e["event_id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending and unique: {ids:?}");
    assert_eq!(paged, b.all_events(&id).await, "paging by 7 equals one big page");
    assert_eq!(paged.len() as u64, t["event_count"].as_u64().unwrap(), "every stored event, once");

    let messages: Vec<&str> = paged
        .iter()
        .filter(|e| e["event_type"] == "agent.message")
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=50).map(|i| format!("event {i} of 50")).collect();
    assert_eq!(messages, expected);

    let keys = ["correlation_id", "created_at", "event_id", "event_type", "payload", "schema_version", "task_id"];
    for e in &paged {
        let mut got: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        got.sort_unstable();
        assert_eq!(got, keys, "{e}");
        assert_eq!(e["schema_version"], 1);
        assert_eq!(e["task_id"], id.as_str());
        assert_eq!(e["correlation_id"], "corr-9");
        assert!(e["created_at"].as_str().is_some_and(|s| s.ends_with('Z')), "{e}");
        assert!(e["payload"].is_object(), "{e}");
    }
}

#[tokio::test]
async fn provider_failures_fail_the_task_and_release_everything() {
    let b = TestBridge::start().await;
    for (prompt, expected, message) in
        [("fail:boom", "AGENT_PROVIDER_ERROR", Some("boom")), ("crash", "AGENT_PROVIDER_DISCONNECTED", None)]
    {
        let id = b.submit(prompt).await;
        let t = b.wait_terminal(&id).await;
        assert_eq!(t["status"], "failed", "{prompt}: {t:#}");
        assert_eq!(t["error"]["code"], expected, "{prompt}");
        if let Some(m) = message {
            assert_eq!(t["error"]["message"], m);
        }
        let events = b.all_events(&id).await;
        let failed = events.iter().find(|e| e["event_type"] == "task.failed").expect("task.failed");
        assert_eq!(failed["payload"]["error_code"], expected);
        poll_until("the lease is released", Duration::from_secs(15), || b.lease_is_free(1)).await;
        poll_until("the guard is gone", Duration::from_secs(15), || b.guard_count() == 0).await;
        assert!(e2e::marker_pids(&id).is_empty());
    }
}

#[tokio::test]
async fn the_manifest_is_frozen_hashed_and_free_of_host_paths() {
    let mut b = TestBridge::start().await;
    let id = b
        .submit_ok(
            json!({ "prompt": "complete:m", "path": "src", "correlation_id": "c-11", "idempotency_key": "k-11" }),
        )
        .await;
    let t = b.wait_terminal(&id).await;
    let stored: String =
        b.db().query_row("SELECT manifest_json FROM tasks WHERE task_id = ?1", [&id], |r| r.get(0)).unwrap();
    assert_eq!(t["manifest_sha256"], sha256_hex(stored.as_bytes()));
    assert_eq!(t["manifest"].to_string(), stored, "the stored manifest is canonical JSON");
    let m = &t["manifest"];
    assert_eq!(m["schema_version"], 2, "the ServerFS manifest version that records the model");
    assert_eq!(m["model"]["requested"], Value::Null);
    assert_eq!(m["limits"]["task_timeout_seconds"], 7200);
    assert_eq!(m["limits"]["interaction_timeout_seconds"], 1800);
    assert_eq!(m["limits"]["max_active_tasks"], 4);
    assert_eq!(m["limits"]["retention_hours"], 168);
    assert_eq!(m["limits"]["result_spool_threshold_bytes"], 262_144);
    assert_eq!(m["deadline_at"], t["deadline_at"]);
    let (created, deadline): (i64, i64) = b
        .db()
        .query_row("SELECT created_at, deadline_at FROM tasks WHERE task_id = ?1", [&id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(deadline - created, 7_200_000);
    assert_eq!(
        m["workspace"],
        json!({ "alias": "repo", "slot": 1, "relative_cwd": "src", "profile": "workspace-write" })
    );
    assert_eq!(m["runtime"]["name"], "fake");
    assert_eq!(m["correlation_id"], "c-11");
    assert_eq!(m["idempotency_key"], "k-11");
    let root = b.root().display().to_string();
    assert!(!stored.contains(&root), "host path in the manifest: {stored}");

    // Frozen: a restart with other limits changes new manifests, never this one.
    b.stop().await;
    let mut env = std::fs::read_to_string(&b.env_file).unwrap();
    env.push_str("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=600\nSERVERFS_AGENT_MAX_ACTIVE_TASKS=3\n");
    std::fs::write(&b.env_file, env).unwrap();
    b.spawn().await;
    let same = b.get(&id).await;
    assert_eq!(same["manifest"], t["manifest"]);
    assert_eq!(same["manifest_sha256"], t["manifest_sha256"]);
    let newer = b.submit("complete:n").await;
    let n = b.wait_terminal(&newer).await;
    assert_eq!(n["manifest"]["limits"]["task_timeout_seconds"], 600);
    assert_eq!(n["manifest"]["limits"]["max_active_tasks"], 3);
    assert_eq!(n["manifest"]["deadline_at"], n["deadline_at"]);
}

/// Every place a host path could leak, as one JSON text.
async fn everything(b: &TestBridge, ids: &[&str]) -> String {
    let mut all = Vec::new();
    for id in ids {
        all.push(b.get(id).await);
        all.push(Value::Array(b.all_events(id).await));
    }
    all.push(b.call("admin_list_tasks", json!({})).await.expect("list"));
    all.push(b.call("list_workdirs", json!({})).await.expect("workdirs"));
    Value::Array(all).to_string()
}

#[tokio::test]
async fn host_paths_never_leave_the_bridge() {
    let b = TestBridge::start().await;
    let root = b.root().display().to_string();
    let repo = b.repo.display().to_string();
    let state = b.state_dir.display().to_string();

    let at_root = b.submit("cwd").await;
    let t = b.wait_terminal(&at_root).await;
    assert_eq!(t["final_response"], "<workdir>", "{t:#}");
    b.writer_idle().await;
    let in_src = b.submit_ok(json!({ "prompt": "cwd", "path": "src" })).await;
    let t = b.wait_terminal(&in_src).await;
    assert_eq!(t["final_response"], "<workdir>/src", "{t:#}");

    b.writer_idle().await;
    let said = b.submit(&format!("complete:wrote {repo}/src/lib.rs and {state}/bridge.sqlite3.")).await;
    let t = b.wait_terminal(&said).await;
    assert_eq!(t["final_response"], "wrote <workdir>/src/lib.rs and <host-path>/bridge.sqlite3.", "{t:#}");
    b.writer_idle().await;
    let failed = b.submit(&format!("fail:cannot open {repo}/src/x.rs")).await;
    let t = b.wait_terminal(&failed).await;
    assert_eq!(t["error"]["message"], "cannot open <workdir>/src/x.rs", "{t:#}");

    b.writer_idle().await;
    let asks = b.submit(&format!("approval:cat {repo}/secret")).await;
    let t = b.wait_status(&asks, "waiting_for_approval").await;
    assert_eq!(t["pending_request"]["payload"]["title"], "Run `cat <workdir>/secret`", "{t:#}");
    assert_eq!(t["pending_request"]["payload"]["command_display"], "cat <workdir>/secret");
    b.call(
        "respond_agent_approval",
        json!({ "task_id": asks, "request_id": t["pending_request"]["request_id"], "decision": "deny" }),
    )
    .await
    .expect("deny");
    b.wait_terminal(&asks).await;

    b.writer_idle().await;
    let missing = b.submit_args(json!({ "prompt": "cwd", "path": "no/such/dir" })).await;
    assert_eq!(code(&missing), "WORKDIR_PATH_NOT_FOUND");
    let e = missing.unwrap_err().to_string();
    assert!(!e.contains(&root), "{e}");

    let text = everything(&b, &[&at_root, &in_src, &said, &failed, &asks]).await;
    assert!(!text.contains(&root), "a host path left the bridge: {text}");
}

/// A task's text that names another workdir, the state directory or the lock directory shows
/// none of their host paths.
#[tokio::test]
async fn other_host_roots_are_hidden_too() {
    let b = TestBridge::start().await;
    for (path, label) in [(&b.docs, "docs"), (&b.state_dir, "state"), (&b.lock_dir, "locks")] {
        let id = b.submit_ok(json!({ "prompt": format!("complete:see {}/x for {label}", path.display()) })).await;
        let t = b.wait_terminal(&id).await;
        assert_eq!(t["final_response"], format!("see <host-path>/x for {label}"), "{t:#}");
        b.writer_idle().await;
    }
}
