//! Audit under floods against a real bridge: a flood of bad keys is a few rows
//! whose counts add up to every call, while every real call keeps its own row; audit rows past
//! `SERVERFS_AGENT_AUDIT_RETENTION_DAYS` go at the retention GC and a bad value refuses to
//! start; a hostile client name is stored in a safe, bounded shape.

use std::time::Duration;

use serde_json::{Value, json};

use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, ClientInfo, Surface};
use e2e::{Options, TestBridge, code};

/// One `capabilities.call` on the MCP surface with a credential and a client name.
async fn call_as(
    client: &Client,
    key: Option<&str>,
    name: &str,
    args: Value,
    client_name: &str,
    version: Option<&str>,
) -> Result<Value, CallError> {
    let Value::Object(arguments) = args else { panic!("arguments must be an object") };
    let params = CallParams {
        credential: key.map(|k| format!("Bearer {k}")),
        surface: Surface::Mcp,
        path: Default::default(),
        client: Some(ClientInfo { name: client_name.to_owned(), version: version.map(str::to_owned) }),
        name: name.to_owned(),
        arguments,
    };
    let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
    client.call(methods::CAPABILITIES_CALL, params).await
}

/// Reads the whole audit log through the tool (which flushes the writer first).
async fn audit_rows(b: &TestBridge) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut args = json!({ "limit": 500 });
        if let Some(id) = before {
            args["before_audit_id"] = json!(id);
        }
        let page = b.call("admin_read_audit_log", args).await.expect("read the audit log");
        rows.extend(page["rows"].as_array().expect("rows").iter().cloned());
        match page["next_before_audit_id"].as_i64() {
            Some(id) => before = Some(id),
            None => return rows,
        }
    }
}

const FLOOD: usize = 2_000;
const CALLERS: usize = 40;
const REAL: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_keys_is_a_few_counted_rows_and_every_real_call_keeps_its_row() {
    let b = TestBridge::start().await;
    let real = b.create_key("flood-real", "operator").await;
    // 40 callers at once, 50 bad calls each: varied keys (and none), client names and
    // capability names, as a flood would; one caller in four also makes a real call.
    let started = std::time::Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..CALLERS {
        let client = Client::new(&b.socket, Duration::from_secs(60));
        let real = real.clone();
        callers.spawn(async move {
            let mut real_done = 0;
            for i in 0..FLOOD / CALLERS {
                let n = c * (FLOOD / CALLERS) + i;
                let key = format!("abk_bad{n}");
                let key = (!n.is_multiple_of(7)).then_some(key.as_str());
                let name = match n % 3 {
                    0 => "whoami".to_owned(),
                    1 => "get_agent_task".to_owned(),
                    _ => format!("no_such_tool_{n}"),
                };
                let r = call_as(&client, key, &name, json!({}), &format!("flooder-{n}"), Some("6.6.6")).await;
                assert_eq!(code(&r), "UNAUTHENTICATED", "bad call {n}");
                if c % 2 == 0 && i % 10 == 0 && real_done < REAL / (CALLERS / 2) {
                    let who = call_as(&client, Some(&real), "whoami", json!({}), &format!("real-{c}"), None)
                        .await
                        .expect("a real call amid the flood");
                    assert_eq!(who["principal"], "flood-real");
                    real_done += 1;
                }
            }
            real_done
        });
    }
    let mut real_calls = 0;
    while let Some(done) = callers.join_next().await {
        real_calls += done.expect("a caller");
    }
    assert_eq!(real_calls, REAL);
    e2e::measured(format_args!("{FLOOD} bad-key calls and {REAL} real ones took {:?}", started.elapsed()));

    let rows = audit_rows(&b).await;
    let flood: Vec<&Value> = rows.iter().filter(|r| r["principal"].is_null()).collect();
    let counted: i64 = flood.iter().map(|r| r["count"].as_i64().expect("every row has a count")).sum();
    assert_eq!(counted, FLOOD as i64, "every bad call is counted exactly once: {flood:#?}");
    // Sources: surface `mcp`, capability `whoami`, `get_agent_task` or `*` (a name no tool
    // has), code UNAUTHENTICATED: three a minute, whatever the keys and client names.
    let minutes: std::collections::BTreeSet<i64> = b
        .db()
        .prepare("SELECT DISTINCT at / 60000 FROM audit_log WHERE principal IS NULL")
        .expect("sql")
        .query_map([], |r| r.get(0))
        .expect("query")
        .map(|m| m.expect("minute"))
        .collect();
    e2e::measured(format_args!(
        "{FLOOD} bad-key calls from {CALLERS} callers: {} audit row(s) over {} minute(s)",
        flood.len(),
        minutes.len()
    ));
    assert!(
        flood.len() <= 3 * minutes.len(),
        "{} flood rows over {} minute(s): {flood:#?}",
        flood.len(),
        minutes.len()
    );
    let capabilities: std::collections::BTreeSet<&str> =
        flood.iter().map(|r| r["capability"].as_str().expect("capability")).collect();
    assert_eq!(capabilities.into_iter().collect::<Vec<_>>(), ["*", "get_agent_task", "whoami"]);
    for r in &flood {
        assert_eq!((r["surface"].as_str(), r["error_code"].as_str()), (Some("mcp"), Some("UNAUTHENTICATED")));
        assert!(r["client"].as_str().is_none_or(|c| c.starts_with("flooder-")), "{r:#}");
    }
    // The CLI shows the count of each coalesced row.
    let out = b.cli(&["audit", "--capability", "*", "--limit", "500"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "agent-bridge audit: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().next().is_some_and(|h| h.contains("CALLS")), "{text}");
    for r in flood.iter().filter(|r| r["capability"] == "*") {
        let id = r["audit_id"].to_string();
        let line =
            text.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_else(|| panic!("row {id}: {text}"));
        let count = r["count"].to_string();
        assert!(line.split_whitespace().any(|w| w == count), "row {id} shows its count: {line}");
    }
    // The store holds no more than that either.
    assert_eq!(b.db_count("SELECT COUNT(*) FROM audit_log WHERE principal IS NULL"), flood.len() as i64);

    // Every real call has its own row, count 1, with its client name.
    let mine: Vec<&Value> = rows.iter().filter(|r| r["principal"] == "flood-real").collect();
    assert_eq!(mine.len(), REAL, "one row per real call: {mine:#?}");
    for r in &mine {
        assert_eq!(
            (r["capability"].as_str(), r["outcome"].as_str(), r["count"].as_i64()),
            (Some("whoami"), Some("ok"), Some(1))
        );
        assert!(r["client"].as_str().is_some_and(|c| c.starts_with("real-")), "{r:#}");
    }
}

#[tokio::test]
async fn audit_rows_past_the_retention_go_at_the_gc_and_younger_ones_stay() {
    let mut b = TestBridge::start_with(Options::default().with("SERVERFS_AGENT_AUDIT_RETENTION_DAYS=2")).await;
    for _ in 0..6 {
        b.call("whoami", json!({})).await.expect("whoami");
    }
    let bad = b.call_mcp(Some("abk_nope"), "whoami", json!({})).await;
    assert_eq!(code(&bad), "UNAUTHENTICATED");
    let before = audit_rows(&b).await;
    let ids: Vec<i64> = before.iter().map(|r| r["audit_id"].as_i64().expect("id")).collect();
    assert!(ids.len() >= 7, "{before:#?}");
    b.stop().await;
    // The bridge is down for a while: half the rows (the flood's among them) become three
    // days old, one becomes a day old.
    let (old, young) = ids.split_at(ids.len() / 2);
    {
        let db = rusqlite::Connection::open(b.state_dir.join("bridge.sqlite3")).expect("open the store");
        for id in old {
            db.execute("UPDATE audit_log SET at = at - 3 * 86400000 WHERE audit_id = ?1", [id]).expect("age a row");
        }
        db.execute("UPDATE audit_log SET at = at - 86400000 WHERE audit_id = ?1", [young[0]]).expect("age a row");
        let flood = db
            .execute("UPDATE audit_log SET at = at - 3 * 86400000 WHERE principal IS NULL AND at > 0", [])
            .expect("age the flood row");
        assert_eq!(flood, 1, "the bad call's row");
    }
    b.spawn().await;
    let db = b.db();
    let present = |id: i64| -> bool {
        db.query_row("SELECT COUNT(*) FROM audit_log WHERE audit_id = ?1", [id], |r| r.get::<_, i64>(0)).expect("count")
            == 1
    };
    for id in old {
        assert!(!present(*id), "row {id} is past the retention and must be gone");
    }
    for id in young.iter().filter(|id| !old.contains(id)) {
        let flood: i64 = db
            .query_row("SELECT COUNT(*) FROM audit_log WHERE audit_id = ?1 AND principal IS NULL", [id], |r| r.get(0))
            .expect("count");
        assert_eq!(present(*id), flood == 0, "row {id}: a young row stays, the aged flood row goes");
    }
    assert_eq!(b.db_count("SELECT COUNT(*) FROM audit_log WHERE principal IS NULL"), 0);
}

#[tokio::test]
async fn a_bad_audit_retention_refuses_to_start_and_names_the_key() {
    let b = TestBridge::prepare(Options::default());
    let base = std::fs::read_to_string(&b.env_file).expect("env");
    for (bad, why) in [
        ("0", "at least 1"),
        ("-1", "not a positive whole number"),
        ("x", "not a positive whole number"),
        ("1.5", "not a positive whole number"),
        ("3651", "at most 3650"),
    ] {
        let file = b.root().join("bad.env");
        std::fs::write(&file, format!("{base}SERVERFS_AGENT_AUDIT_RETENTION_DAYS={bad}\n")).expect("env");
        let out = b.serve_until_exit(Some(&file), Duration::from_secs(30)).await;
        assert_eq!(out.status.code(), Some(2), "SERVERFS_AGENT_AUDIT_RETENTION_DAYS={bad} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().find(|l| l.contains("SERVERFS_AGENT_AUDIT_RETENTION_DAYS"));
        assert!(line.is_some_and(|l| l.contains(why)), "{bad}: names the key and why ({why}): {stderr}");
    }
}

#[tokio::test]
async fn a_hostile_client_name_is_stored_safe_and_bounded() {
    let b = TestBridge::start().await;
    let key = b.create_key("named", "operator").await;
    let client = b.client();
    let hostile = format!("evil\u{1b}[2J\r\n<script>alert(\"x\")</script>\u{0}\u{85}{}", "A".repeat(10 * 1024));
    let who = call_as(&client, Some(&key), "whoami", json!({}), &hostile, Some("1.0\u{7}<b>")).await;
    who.expect("the call itself succeeds");
    // The same name on a call that fails authentication.
    let bad = call_as(&client, Some("abk_bad"), "whoami", json!({}), &hostile, None).await;
    assert_eq!(code(&bad), "UNAUTHENTICATED");
    let rows = audit_rows(&b).await;
    let names: Vec<String> = rows
        .iter()
        .filter(|r| r["capability"] == "whoami")
        .map(|r| r["client"].as_str().expect("a client name is kept").to_owned())
        .collect();
    assert_eq!(names.len(), 2, "{rows:#?}");
    let stored: Vec<String> = {
        let db = b.db();
        let mut stmt = db.prepare("SELECT client_name FROM audit_log WHERE capability = 'whoami'").expect("sql");
        stmt.query_map([], |r| r.get(0)).expect("query").map(|n| n.expect("name")).collect()
    };
    for name in names.iter().chain(&stored) {
        assert!(name.chars().count() <= 64, "bounded: {} chars", name.chars().count());
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || " ._()+:@/-".contains(c)),
            "only the safe set: {name:?}"
        );
        assert!(name.starts_with("evil__2J___script_alert(_x_)_/script_"), "{name:?}");
    }
}
