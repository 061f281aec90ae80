//! Identity, policy and audit against a real bridge process: what each role sees,
//! hidden tools answering like missing ones, credentials, ownership, workdir allowlists, the
//! audit trail and what it must never hold, key management from the CLI, and tunnel mode.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use bridge_proto::methods::Surface;
use e2e::{Options, TestBridge, code, error_of, poll_until};

const WRITE_TOOLS: [&str; 5] =
    ["submit_agent_task", "respond_agent_approval", "answer_agent_question", "send_agent_message", "cancel_agent_task"];
const ADMIN_MCP_TOOLS: [&str; 2] = ["admin_list_tasks", "admin_read_audit_log"];
const LOCAL_ONLY_TOOLS: [&str; 3] = ["admin_create_api_key", "admin_list_api_keys", "admin_revoke_api_key"];
const NO_SUCH_TASK: &str = "agt_00000000000000000000000000000000";

/// The tools of a `capabilities.list` answer, by name.
fn tools(list: &Value) -> Vec<&Value> {
    list["tools"].as_array().expect("tools").iter().collect()
}

fn names(list: &Value) -> BTreeSet<String> {
    tools(list).iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

/// A refusal with the tool's name abstracted away, to compare two refusals structurally.
fn shape(result: &Result<Value, bridge_proto::client::CallError>, name: &str) -> (String, String) {
    let (code, message) = error_of(result);
    (code, message.replace(name, "<name>"))
}

fn submit_args(workdir: &str, prompt: &str) -> Value {
    json!({ "runtime": "fake", "workdir": workdir, "prompt": prompt })
}

#[tokio::test]
async fn a_viewer_sees_no_write_tool_and_a_hidden_tool_answers_like_a_missing_one() {
    let bridge = TestBridge::start().await;
    let viewer = bridge.create_key("viewer-1", "viewer").await;
    let list = bridge.list_mcp(Some(&viewer)).await.expect("list");
    assert_eq!(list["principal"], json!({ "name": "viewer-1", "role": "viewer" }));
    let visible = names(&list);
    assert!(visible.contains("whoami") && visible.contains("get_agent_task"), "{visible:?}");
    for hidden in WRITE_TOOLS.iter().chain(&ADMIN_MCP_TOOLS).chain(&LOCAL_ONLY_TOOLS) {
        assert!(!visible.contains(*hidden), "a viewer must not see {hidden}: {visible:?}");
    }
    for tool in tools(&list) {
        assert_eq!((tool["min_role"].as_str(), tool["scope"].as_str()), (Some("viewer"), Some("read")), "{tool:#}");
    }

    // A hidden tool answers exactly like one that does not exist, whatever the arguments.
    let valid = submit_args("repo", "complete:x");
    for args in [json!({}), valid.clone(), json!({ "bogus": 1 })] {
        let hidden = bridge.call_mcp(Some(&viewer), "submit_agent_task", args.clone()).await;
        let missing = bridge.call_mcp(Some(&viewer), "no_such_tool", args.clone()).await;
        assert_eq!(error_of(&hidden), ("UNKNOWN_TOOL".to_owned(), "unknown tool: submit_agent_task".to_owned()));
        assert_eq!(shape(&hidden, "submit_agent_task"), shape(&missing, "no_such_tool"), "arguments {args}");
    }
    for hidden in WRITE_TOOLS.iter().chain(&ADMIN_MCP_TOOLS).chain(&LOCAL_ONLY_TOOLS) {
        let answer = bridge.call_mcp(Some(&viewer), hidden, json!({})).await;
        assert_eq!(error_of(&answer), ("UNKNOWN_TOOL".to_owned(), format!("unknown tool: {hidden}")));
    }
    assert_eq!(bridge.db_count("SELECT COUNT(*) FROM tasks"), 0);
}

#[tokio::test]
async fn operators_see_operator_tools_and_mcp_admins_never_see_key_management() {
    let bridge = TestBridge::start().await;
    let operator = bridge.create_key("op-1", "operator").await;
    let admin = bridge.create_key("admin-1", "admin").await;

    let visible = names(&bridge.list_mcp(Some(&operator)).await.expect("operator list"));
    for tool in WRITE_TOOLS {
        assert!(visible.contains(tool), "an operator sees {tool}: {visible:?}");
    }
    assert!(visible.iter().all(|t| !t.starts_with("admin_")), "an operator sees no admin tool: {visible:?}");
    let call = bridge.call_mcp(Some(&operator), "admin_list_tasks", json!({})).await;
    assert_eq!(shape(&call, "admin_list_tasks"), ("UNKNOWN_TOOL".to_owned(), "unknown tool: <name>".to_owned()));

    let list = bridge.list_mcp(Some(&admin)).await.expect("admin list");
    let visible = names(&list);
    for tool in WRITE_TOOLS.iter().chain(&ADMIN_MCP_TOOLS) {
        assert!(visible.contains(*tool), "an MCP admin sees {tool}: {visible:?}");
    }
    for tool in LOCAL_ONLY_TOOLS {
        assert!(!visible.contains(tool), "{tool} exists on local surfaces only: {visible:?}");
        let call = bridge.call_mcp(Some(&admin), tool, json!({ "name": "sneaky", "role": "admin" })).await;
        assert_eq!(error_of(&call), ("UNKNOWN_TOOL".to_owned(), format!("unknown tool: {tool}")));
    }
    assert!(bridge.call_mcp(Some(&admin), "admin_list_tasks", json!({})).await.is_ok());
    assert!(bridge.call_mcp(Some(&admin), "admin_read_audit_log", json!({})).await.is_ok());
    // Nothing was created by the refused calls: the keys are still the two made above.
    assert_eq!(bridge.db_count("SELECT COUNT(*) FROM api_keys"), 2);
    // The same tools exist for the local operator.
    let local = names(&bridge.list_on(Surface::Cli, None).await.expect("local list"));
    for tool in LOCAL_ONLY_TOOLS {
        assert!(local.contains(tool), "the local operator sees {tool}: {local:?}");
    }
}

#[tokio::test]
async fn bad_missing_and_revoked_credentials_are_unauthenticated() {
    let bridge = TestBridge::start().await;
    let secret = bridge.create_key("revoke-me", "operator").await;
    let good = format!("Bearer {secret}");
    assert_eq!(
        bridge.call_on(Surface::Mcp, Some(&good), "whoami", json!({})).await.expect("whoami")["principal"],
        "revoke-me"
    );
    assert!(bridge.list_on(Surface::Mcp, Some(&good)).await.is_ok());

    let out = bridge.cli(&["keys", "revoke", "revoke-me"]);
    assert!(out.status.success(), "keys revoke failed: {}", String::from_utf8_lossy(&out.stderr));

    let credentials: [(&str, Option<&str>); 5] = [
        ("missing", None),
        ("empty", Some("")),
        ("unknown key", Some("Bearer wrong")),
        ("not a bearer", Some("Basic abc")),
        ("revoked key", Some(good.as_str())),
    ];
    for (what, credential) in credentials {
        assert_eq!(
            code(&bridge.list_on(Surface::Mcp, credential).await),
            "UNAUTHENTICATED",
            "list with a {what} credential"
        );
        for name in ["whoami", "submit_agent_task", "no_such_tool"] {
            let call = bridge.call_on(Surface::Mcp, credential, name, submit_args("repo", "complete:x")).await;
            assert_eq!(code(&call), "UNAUTHENTICATED", "{name} with a {what} credential");
        }
    }
    assert_eq!(bridge.db_count("SELECT COUNT(*) FROM tasks"), 0);
}

#[tokio::test]
async fn another_principals_task_answers_like_a_missing_one() {
    let bridge = TestBridge::start().await;
    let alice = bridge.create_key("alice", "operator").await;
    let bob = bridge.create_key("bob", "operator").await;
    let admin = bridge.create_key("boss", "admin").await;
    let submitted =
        bridge.call_mcp(Some(&alice), "submit_agent_task", submit_args("repo", "wait:30")).await.expect("submit");
    let id = submitted["task_id"].as_str().expect("task_id").to_owned();
    bridge.wait_for(&id, |t| t["status"] == "running").await;

    let probes = [
        ("get_agent_task", json!({ "task_id": "ID" })),
        ("read_agent_task_events", json!({ "task_id": "ID" })),
        ("read_agent_task_result", json!({ "task_id": "ID" })),
        ("send_agent_message", json!({ "task_id": "ID", "message": "stop that" })),
        ("cancel_agent_task", json!({ "task_id": "ID" })),
    ];
    for (tool, template) in &probes {
        let with = |task: &str| {
            let mut args = template.clone();
            args["task_id"] = json!(task);
            args
        };
        let theirs = bridge.call_mcp(Some(&bob), tool, with(&id)).await;
        let nobodys = bridge.call_mcp(Some(&bob), tool, with(NO_SUCH_TASK)).await;
        assert_eq!(code(&theirs), "AGENT_TASK_NOT_FOUND", "{tool}");
        assert_eq!(error_of(&theirs), error_of(&nobodys), "{tool} must not tell another's task from a missing one");
    }
    // Bob's cancel and message did nothing.
    let task =
        bridge.call_mcp(Some(&alice), "get_agent_task", json!({ "task_id": id })).await.expect("alice sees her task");
    assert_eq!(task["status"], "running");
    let events =
        bridge.call_mcp(Some(&alice), "read_agent_task_events", json!({ "task_id": id })).await.expect("events");
    assert!(!events.to_string().contains("stop that"), "bob's message reached the task: {events:#}");

    let seen_by_admin =
        bridge.call_mcp(Some(&admin), "get_agent_task", json!({ "task_id": id })).await.expect("an admin key sees it");
    assert_eq!(seen_by_admin["owner"], "alice");
    let seen_locally =
        bridge.call("get_agent_task", json!({ "task_id": id })).await.expect("the local operator sees it");
    assert_eq!(seen_locally["owner"], "alice");

    bridge.call_mcp(Some(&alice), "cancel_agent_task", json!({ "task_id": id })).await.expect("alice cancels");
    poll_until("the writer lease is released", Duration::from_secs(20), || bridge.lease_is_free(1)).await;
}

#[tokio::test]
async fn a_workdir_allowlist_hides_the_other_workdirs() {
    let bridge = TestBridge::start().await;
    let key = bridge.create_key_for("docs-only", "operator", &["docs"]).await;
    let listed = bridge.call_mcp(Some(&key), "list_workdirs", json!({})).await.expect("list_workdirs");
    let aliases: Vec<&str> =
        listed["workdirs"].as_array().expect("workdirs").iter().map(|w| w["alias"].as_str().expect("alias")).collect();
    assert_eq!(aliases, ["docs"]);
    // Without the allowlist both are listed (the filter is what hides `repo`).
    let all = bridge.call("list_workdirs", json!({})).await.expect("local list_workdirs");
    assert_eq!(all["workdirs"].as_array().expect("workdirs").len(), 2);

    let outside = bridge.call_mcp(Some(&key), "submit_agent_task", submit_args("repo", "complete:x")).await;
    let missing = bridge.call_mcp(Some(&key), "submit_agent_task", submit_args("nowhere", "complete:x")).await;
    assert_eq!(code(&outside), "WORKDIR_NOT_FOUND");
    assert_eq!(
        shape(&outside, "repo"),
        shape(&missing, "nowhere"),
        "a workdir outside the allowlist answers like a missing one"
    );
    assert_eq!(bridge.db_count("SELECT COUNT(*) FROM tasks"), 0);

    let mut inside = submit_args("docs", "complete:fine");
    inside["profile"] = json!("review");
    let ok = bridge.call_mcp(Some(&key), "submit_agent_task", inside).await.expect("docs is allowed");
    let id = ok["task_id"].as_str().expect("task_id").to_owned();
    assert_eq!(bridge.wait_terminal(&id).await["status"], "succeeded");
}

/// One expected audit row.
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    surface: String,
    principal: Option<String>,
    capability: String,
    outcome: String,
    error_code: Option<String>,
    task_id: Option<String>,
}

impl Expect {
    fn of(r: &Value) -> Expect {
        let text = |k: &str| r[k].as_str().map(str::to_owned);
        Expect {
            surface: text("surface").expect("surface"),
            principal: text("principal"),
            capability: text("capability").expect("capability"),
            outcome: text("outcome").expect("outcome"),
            error_code: text("error_code"),
            task_id: text("task_id"),
        }
    }
}

#[tokio::test]
async fn every_call_is_audited_and_the_audit_never_holds_prompts_messages_or_keys() {
    const PROMPT_MARKER: &str = "PROMPTMARKER-3b9f0c1d";
    const STEER_MARKER: &str = "STEERMARKER-e41a77c2";
    let bridge = TestBridge::start().await;
    let mut expected: Vec<Expect> = Vec::new();
    let row = |surface: &str,
               principal: Option<&str>,
               capability: &str,
               outcome: &str,
               error_code: Option<&str>,
               task_id: Option<&str>| Expect {
        surface: surface.to_owned(),
        principal: principal.map(str::to_owned),
        capability: capability.to_owned(),
        outcome: outcome.to_owned(),
        error_code: error_code.map(str::to_owned),
        task_id: task_id.map(str::to_owned),
    };
    let me = Some("auditor");

    let secret = bridge.create_key("auditor", "operator").await;
    expected.push(row("cli", Some("operator@local"), "admin_create_api_key", "ok", None, None));
    let key = Some(secret.as_str());

    bridge.call_mcp(key, "whoami", json!({})).await.expect("whoami");
    expected.push(row("mcp", me, "whoami", "ok", None, None));

    let unknown = bridge.call_mcp(key, "no_such_tool", json!({})).await;
    assert_eq!(code(&unknown), "UNKNOWN_TOOL");
    expected.push(row("mcp", me, "no_such_tool", "denied", Some("UNKNOWN_TOOL"), None));

    let invalid = bridge
        .call_mcp(
            key,
            "submit_agent_task",
            json!({ "runtime": "fake", "workdir": "repo", "prompt": PROMPT_MARKER, "bogus": 1 }),
        )
        .await;
    assert_eq!(code(&invalid), "INVALID_ARGUMENT");
    expected.push(row("mcp", me, "submit_agent_task", "invalid", Some("INVALID_ARGUMENT"), None));

    // A wrong credential that contains the real secret: what was presented is never recorded.
    let near_miss = format!("Bearer {secret}-typo");
    let unauthenticated = bridge.call_on(Surface::Mcp, Some(&near_miss), "whoami", json!({})).await;
    assert_eq!(code(&unauthenticated), "UNAUTHENTICATED");
    expected.push(row("mcp", None, "whoami", "denied", Some("UNAUTHENTICATED"), None));

    let missing = bridge.call_mcp(key, "get_agent_task", json!({ "task_id": NO_SUCH_TASK })).await;
    assert_eq!(code(&missing), "AGENT_TASK_NOT_FOUND");
    expected.push(row("mcp", me, "get_agent_task", "error", Some("AGENT_TASK_NOT_FOUND"), Some(NO_SUCH_TASK)));

    let mut review = submit_args("repo", &format!("complete:{PROMPT_MARKER}"));
    review["profile"] = json!("review");
    let marked = bridge.call_mcp(key, "submit_agent_task", review).await.expect("submit the marked prompt");
    let marked_id = marked["task_id"].as_str().expect("task_id").to_owned();
    expected.push(row("mcp", me, "submit_agent_task", "ok", None, Some(&marked_id)));

    let waiting = bridge.call_mcp(key, "submit_agent_task", submit_args("repo", "wait:30")).await.expect("submit wait");
    let waiting_id = waiting["task_id"].as_str().expect("task_id").to_owned();
    expected.push(row("mcp", me, "submit_agent_task", "ok", None, Some(&waiting_id)));

    // Long-poll as the key (every poll is a call, and audited).
    for id in [&marked_id, &waiting_id] {
        loop {
            let t =
                bridge.call_mcp(key, "get_agent_task", json!({ "task_id": id, "wait_seconds": 5 })).await.expect("get");
            expected.push(row("mcp", me, "get_agent_task", "ok", None, Some(id)));
            if t["terminal"] == true || (id == &waiting_id && t["status"] == "running") {
                break;
            }
        }
    }
    let marked_task = bridge.call("get_agent_task", json!({ "task_id": marked_id })).await.expect("get marked");
    expected.push(row("cli", Some("operator@local"), "get_agent_task", "ok", None, Some(&marked_id)));
    assert_eq!(marked_task["final_response"], PROMPT_MARKER, "the marker reached the agent");

    let steered =
        bridge.call_mcp(key, "send_agent_message", json!({ "task_id": waiting_id, "message": STEER_MARKER })).await;
    steered.expect("steer the waiting task");
    expected.push(row("mcp", me, "send_agent_message", "ok", None, Some(&waiting_id)));
    // The message reaches the agent (it echoes it as an event); no event announces that to a
    // caller, so poll the event page, a bounded number of times.
    let mut echoed = false;
    for _ in 0..250 {
        let page = bridge
            .call_mcp(key, "read_agent_task_events", json!({ "task_id": waiting_id, "limit": 500 }))
            .await
            .expect("events");
        expected.push(row("mcp", me, "read_agent_task_events", "ok", None, Some(&waiting_id)));
        if page.to_string().contains(STEER_MARKER) {
            echoed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(echoed, "the steering message never reached the agent");

    bridge.call_mcp(key, "cancel_agent_task", json!({ "task_id": waiting_id })).await.expect("cancel");
    expected.push(row("mcp", me, "cancel_agent_task", "ok", None, Some(&waiting_id)));

    let log = bridge.call("admin_read_audit_log", json!({ "limit": 500 })).await.expect("read the audit log");
    let rows = log["rows"].as_array().expect("rows");
    let actual: Vec<Expect> = rows.iter().rev().map(Expect::of).collect();
    assert_eq!(actual.len(), expected.len(), "one audit row per call:\n{log:#}");
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a, e, "audit row {i}");
    }
    for r in rows {
        let role = r["role"].as_str();
        match r["principal"].as_str() {
            Some("auditor") => assert_eq!(role, Some("operator")),
            Some("operator@local") => assert_eq!(role, Some("admin")),
            None => assert_eq!(role, None),
            other => panic!("unexpected principal {other:?}"),
        }
    }

    // What the audit must never hold: prompts, message text, key secrets, host paths.
    let forbidden = [
        PROMPT_MARKER.to_owned(),
        STEER_MARKER.to_owned(),
        secret.clone(),
        secret.trim_start_matches("abk_").to_owned(),
        bridge.repo.display().to_string(),
        bridge.state_dir.display().to_string(),
    ];
    let text = log.to_string();
    for f in &forbidden {
        assert!(!text.contains(f.as_str()), "admin_read_audit_log holds {f:?}");
    }
    let db = bridge.db();
    let mut stmt = db.prepare("SELECT * FROM audit_log").expect("audit_log");
    let columns = stmt.column_count();
    let mut stored = stmt.query([]).expect("query");
    let mut count = 0;
    while let Some(r) = stored.next().expect("row") {
        count += 1;
        for c in 0..columns {
            let cell = match r.get_ref(c).expect("cell") {
                rusqlite::types::ValueRef::Null => String::new(),
                rusqlite::types::ValueRef::Integer(i) => i.to_string(),
                rusqlite::types::ValueRef::Real(f) => f.to_string(),
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                    String::from_utf8_lossy(t).into_owned()
                }
            };
            for f in &forbidden {
                assert!(!cell.contains(f.as_str()), "the audit_log table holds {f:?} in column {c}");
            }
        }
    }
    assert!(count >= expected.len(), "the audit_log table has {count} rows");
}

#[tokio::test]
async fn keys_create_prints_only_the_secret_and_keys_list_never_shows_it() {
    let bridge = TestBridge::start().await;
    let out = bridge.cli(&["keys", "create", "--name", "cli-made", "--role", "operator"]);
    assert!(out.status.success(), "keys create failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "the secret must be the only line on stdout: {stdout:?}");
    let secret = lines[0].trim();
    assert!(secret.len() >= 43, "a key carries at least 32 random bytes: {secret:?}");

    let who =
        bridge.call_mcp(Some(secret), "whoami", json!({})).await.expect("the printed secret works as a Bearer key");
    assert_eq!((who["principal"].as_str(), who["role"].as_str()), (Some("cli-made"), Some("operator")));

    for args in [&["keys", "list", "--json"][..], &["keys", "list"][..]] {
        let out = bridge.cli(args);
        assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        let listed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(listed.contains("cli-made"), "{args:?} lists the key: {listed}");
        assert!(!listed.contains(secret), "{args:?} shows the secret");
        assert!(!listed.contains(secret.trim_start_matches("abk_")), "{args:?} shows the secret's random part");
    }
    let json_list: Value =
        serde_json::from_slice(&bridge.cli(&["keys", "list", "--json"]).stdout).expect("keys list --json is JSON");
    assert_eq!(json_list["keys"].as_array().expect("keys").len(), 1);
}

#[tokio::test]
async fn tunnel_mode_maps_every_mcp_caller_to_the_configured_principal() {
    let bridge = TestBridge::start_with(
        Options::default()
            .with("SERVERFS_MCP_AUTH=none")
            .with("SERVERFS_MCP_TUNNEL_PRINCIPAL=chatgpt")
            .with("SERVERFS_MCP_TUNNEL_ROLE=operator"),
    )
    .await;
    let who = bridge.call_mcp(None, "whoami", json!({})).await.expect("a credential-less call works in tunnel mode");
    assert_eq!(
        (who["principal"].as_str(), who["role"].as_str(), who["surface"].as_str()),
        (Some("chatgpt"), Some("operator"), Some("mcp"))
    );

    let list = bridge.list_mcp(None).await.expect("list");
    let visible = names(&list);
    assert!(visible.contains("submit_agent_task"), "{visible:?}");
    assert!(visible.iter().all(|t| !t.starts_with("admin_")), "tunnel operator sees no admin tool: {visible:?}");
    assert_eq!(code(&bridge.call_mcp(None, "admin_list_tasks", json!({})).await), "UNKNOWN_TOOL");

    let submitted =
        bridge.call_mcp(None, "submit_agent_task", submit_args("repo", "complete:via tunnel")).await.expect("submit");
    let id = submitted["task_id"].as_str().expect("task_id").to_owned();
    let done = bridge.wait_terminal(&id).await;
    assert_eq!((done["status"].as_str(), done["owner"].as_str()), (Some("succeeded"), Some("chatgpt")));
    let mine = bridge.call_mcp(None, "get_agent_task", json!({ "task_id": id })).await.expect("its own task");
    assert_eq!(mine["final_response"], "via tunnel");
}

#[tokio::test]
async fn the_mcp_surface_never_gets_local_operator_rights() {
    let bridge = TestBridge::start().await;
    // Same uid as the bridge, no credential: the local operator on the CLI surface…
    let local = bridge.call("whoami", json!({})).await.expect("local whoami");
    assert_eq!((local["principal"].as_str(), local["role"].as_str()), (Some("operator@local"), Some("admin")));
    // …and nobody on the MCP (or board) surface.
    assert_eq!(code(&bridge.list_mcp(None).await), "UNAUTHENTICATED");
    for name in ["whoami", "admin_list_tasks", "admin_create_api_key"] {
        assert_eq!(code(&bridge.call_mcp(None, name, json!({})).await), "UNAUTHENTICATED", "mcp {name}");
        assert_eq!(
            code(&bridge.call_on(Surface::Board, None, name, json!({})).await),
            "UNAUTHENTICATED",
            "board {name}"
        );
    }
    assert_eq!(code(&bridge.list_on(Surface::Board, None).await), "UNAUTHENTICATED");
}
