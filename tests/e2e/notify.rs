//! Outbound notifications end to end: the real bridge delivers to a local receiver
//! (`tests/notify/receiver.py`, started by `e2e::receiver`) that verifies Standard Webhooks
//! signatures with the reference library and checks the ntfy and Slack shapes. One signed
//! delivery per event, in order, with no host path or prompt text in summary mode; retries keep
//! the webhook-id; pending rows survive a `kill -9`; ntfy and Slack payloads are accepted; a
//! flood of 1,000 finished tasks is delivered once each to one receiver while, for another that
//! is dead, it piles up in the store (not in memory). The venv comes from
//! `.ci/install-node-tools`; in CI (`CI=true`) a missing one fails, elsewhere each test says
//! loudly that it is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, Surface};
use e2e::receiver::{Receiver, SECRET, summary};
use e2e::{Options, TestBridge, poll_until_async};

/// The board's public address in these tests: every link must start with it.
const BOARD: &str = "https://board.example.test/ab";

/// A `.env` with target `slot` of `kind` at `url` (and a secret, an event list, … in `extra`).
fn target(options: Options, slot: u8, kind: &str, url: &str, extra: &[&str]) -> Options {
    let mut options = options
        .with(&format!("SERVERFS_NOTIFY_{slot:02}_URL={url}"))
        .with(&format!("SERVERFS_NOTIFY_{slot:02}_KIND={kind}"));
    for line in extra {
        options = options.with(&format!("SERVERFS_NOTIFY_{slot:02}_{line}"));
    }
    options
}

/// Options for a bridge whose target 01 is a webhook at `url`, signed with [`SECRET`].
fn webhook(url: &str, extra: &[&str]) -> Options {
    let mut lines = vec![format!("SECRET={SECRET}")];
    lines.extend(extra.iter().map(|l| (*l).to_owned()));
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    target(Options::default().with(&format!("SERVERFS_BOARD_PUBLIC_URL={BOARD}")), 1, "webhook", url, &lines)
}

/// The records that arrived at `path`.
fn at<'a>(records: &'a [Value], path: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["path"] == path).collect()
}

/// A record's body as JSON.
fn body(record: &Value) -> Value {
    let text = record["body"].as_str().expect("a body");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("a body that is not JSON ({e}): {text}"))
}

/// A record's `webhook-id` header.
fn webhook_id(record: &Value) -> String {
    record["headers"]["webhook-id"].as_str().unwrap_or_else(|| panic!("no webhook-id: {record}")).to_owned()
}

/// The records at `path` whose body has `type`.
fn of_type<'a>(records: &'a [Value], path: &str, event: &str) -> Vec<&'a Value> {
    at(records, path).into_iter().filter(|r| body(r)["type"] == event).collect()
}

/// `admin_list_notifications` as the local operator.
async fn notifications(b: &TestBridge, limit: Option<u64>) -> Value {
    let args = limit.map_or_else(|| json!({}), |l| json!({ "limit": l }));
    b.call("admin_list_notifications", args).await.expect("admin_list_notifications")
}

/// The summary row of target `slot` in `admin_list_notifications`.
fn target_row(list: &Value, slot: u64) -> Value {
    list["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["target"] == slot)
        .unwrap_or_else(|| panic!("no target {slot}: {list:#}"))
        .clone()
}

/// Asserts that no body names a host path of the bridge or carries `secret_text`.
fn assert_nothing_leaks(b: &TestBridge, records: &[&Value], secret_text: &str) {
    let root = b.root().display().to_string();
    for r in records {
        let text = r["body"].as_str().unwrap_or_default();
        assert!(!text.contains(&root), "a body names the host path {root}: {text}");
        assert!(!text.contains(&b.repo.display().to_string()), "a body names the workdir's path: {text}");
        assert!(!text.contains(secret_text), "a body carries the prompt text {secret_text:?} in summary mode: {text}");
    }
}

/// The checks every Standard Webhooks delivery passes: headers, and the receiver's verdict.
fn assert_signed_delivery(r: &Value) {
    let h = &r["headers"];
    assert_eq!(r["verified"], true, "the reference library verified the signature: {r}");
    assert!(h["content-type"].as_str().is_some_and(|c| c.starts_with("application/json")), "{h}");
    // The plan says `msg_` and 26 characters; any URL-safe id of at least that much is taken.
    let id = webhook_id(r);
    assert!(
        id.starts_with("msg_") && id.len() >= 30 && id[4..].bytes().all(|c| c.is_ascii_alphanumeric()),
        "webhook-id is msg_ and 26 or more letters and digits: {id}"
    );
    let ts: f64 = h["webhook-timestamp"].as_str().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{h}"));
    let received = r["received_at"].as_f64().expect("received_at");
    assert!((ts - received).abs() < 60.0, "webhook-timestamp {ts} is the attempt's time ({received})");
    assert!(h["webhook-signature"].as_str().is_some_and(|s| s.starts_with("v1,")), "{h}");
    assert!(h["user-agent"].as_str().is_some_and(|u| u.starts_with("agent-bridge/")), "{h}");
}

fn rfc3339(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.len() >= 20 && s.as_bytes()[4] == b'-' && s.as_bytes()[10] == b'T')
}

#[tokio::test]
async fn an_approval_task_sends_one_signed_request_then_one_finish_in_order_with_no_path_or_prompt() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let hook = "/webhook/hook";
    let b = TestBridge::start_with(webhook(&rx.url(hook), &[])).await;
    let marker = "notify-marker-7f3a";
    let id = b.submit(&format!("approval:{marker}")).await;
    let task = b.wait_status(&id, "waiting_for_approval").await;
    let rid = task["pending_request"]["request_id"].as_str().expect("a request").to_owned();

    let records = rx.wait_for(|r| !of_type(r, hook, "approval.requested").is_empty(), Duration::from_secs(20)).await;
    let requested = of_type(&records, hook, "approval.requested");
    let asked = body(requested[0]);
    assert_eq!(asked["schema_version"], 1, "{asked:#}");
    assert!(rfc3339(&asked["timestamp"]), "{asked:#}");
    let data = &asked["data"];
    assert_eq!(data["task_id"], id.as_str(), "{asked:#}");
    assert_eq!(data["plan_id"], Value::Null, "{asked:#}");
    assert_eq!(data["workdir"], "repo");
    assert_eq!(data["runtime"], "fake");
    assert_eq!(data["status"], "waiting_for_approval");
    assert_eq!(data["request_id"], rid.as_str());
    assert_eq!(data["request_kind"], "approval");
    assert!(rfc3339(&data["expires_at"]), "{asked:#}");
    assert!(data["title"].as_str().is_some_and(|t| !t.is_empty()), "{asked:#}");
    assert_eq!(data["links"]["board"], format!("{BOARD}/tasks/{id}"), "{asked:#}");
    let action = data["links"]["action"].as_str().expect("an action link");
    let token = action.strip_prefix(&format!("{BOARD}/a/")).unwrap_or_else(|| panic!("{action}"));
    // 32 random bytes (the plan: base64url, 43 characters; hex with a prefix is as strong).
    assert!(
        token.len() >= 43 && token.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
        "the action token carries 32 random bytes in URL-safe characters: {token}"
    );
    assert!(data.get("details").is_none(), "no details in summary mode: {asked:#}");

    b.call("respond_agent_approval", json!({ "task_id": id, "request_id": rid, "decision": "approve_once" }))
        .await
        .expect("approve");
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");
    let records = rx.wait_for(|r| !of_type(r, hook, "task.finished").is_empty(), Duration::from_secs(20)).await;

    // Exactly one delivery of each (no failure was scripted: one request each), the approval first.
    let deliveries = at(&records, hook);
    let types: Vec<String> = deliveries.iter().map(|r| body(r)["type"].as_str().unwrap_or("?").to_owned()).collect();
    assert_eq!(types, ["approval.requested", "task.finished"], "{}", summary(&records));
    let ids: BTreeSet<String> = deliveries.iter().map(|r| webhook_id(r)).collect();
    assert_eq!(ids.len(), 2, "one webhook-id per event: {}", summary(&records));
    for r in &deliveries {
        assert_signed_delivery(r);
        assert_eq!(r["status_answered"], 200);
    }
    let finished = body(deliveries[1]);
    assert_eq!(finished["data"]["task_id"], id.as_str());
    assert_eq!(finished["data"]["status"], "succeeded", "{finished:#}");
    assert_eq!(finished["data"]["links"]["board"], format!("{BOARD}/tasks/{id}"));
    assert!(finished["data"].get("request_id").is_none(), "{finished:#}");
    assert!(finished["data"]["links"].get("action").is_none(), "no action link on a finish: {finished:#}");
    assert_nothing_leaks(&b, &deliveries, marker);

    // The outbox agrees (once it has recorded the answers): the same two message ids,
    // delivered, one attempt each.
    let bridge = &b;
    poll_until_async("the outbox records both deliveries", Duration::from_secs(10), || async move {
        target_row(&notifications(bridge, None).await, 1)["delivered"] == 2
    })
    .await;
    let list = notifications(&b, None).await;
    let stored: BTreeMap<String, Value> = list["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| (d["message_id"].as_str().expect("message_id").to_owned(), d.clone()))
        .collect();
    assert_eq!(stored.keys().cloned().collect::<BTreeSet<_>>(), ids, "{list:#}");
    for d in stored.values() {
        assert_eq!(d["state"], "delivered", "{d}");
        assert_eq!(d["attempts"], 1, "{d}");
        assert_eq!(d["task_id"], id.as_str(), "{d}");
    }
    let row = target_row(&list, 1);
    assert_eq!((row["kind"].as_str(), &row["delivered"], &row["pending"]), (Some("webhook"), &json!(2), &json!(0)));
    let shown = row["url"].as_str().expect("url");
    assert!(!shown.contains("/webhook/hook"), "the target's URL is redacted to scheme://host/…: {shown}");
}

#[tokio::test]
async fn a_failing_receiver_gets_the_same_webhook_id_until_it_answers_2xx() {
    let Some(rx) = Receiver::start(SECRET, &[("hook", 3)]).await else { return };
    let hook = "/webhook/hook";
    let options = webhook(&rx.url(hook), &["EVENTS=task.finished"]).with("SERVERFS_NOTIFY_RETRY_BASE_MS=100");
    let b = TestBridge::start_with(options).await;
    let id = b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": "complete:retry me" })).await;
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");

    let records =
        rx.wait_for(|r| at(r, hook).iter().any(|x| x["status_answered"] == 200), Duration::from_secs(30)).await;
    let attempts = at(&records, hook);
    let statuses: Vec<&Value> = attempts.iter().map(|r| &r["status_answered"]).collect();
    assert_eq!(statuses, [&json!(500), &json!(500), &json!(500), &json!(200)], "{}", summary(&records));
    let ids: BTreeSet<String> = attempts.iter().map(|r| webhook_id(r)).collect();
    assert_eq!(ids.len(), 1, "one webhook-id across the retries: {}", summary(&records));
    let bodies: BTreeSet<&str> = attempts.iter().map(|r| r["body"].as_str().unwrap_or_default()).collect();
    assert_eq!(bodies.len(), 1, "the same body on every attempt");
    for r in &attempts {
        assert_signed_delivery(r);
        assert_eq!(body(r)["data"]["task_id"], id.as_str());
    }
    // Backoff: 100 ms doubling, ±20 % jitter; a gap is the delay plus the request's own time.
    let at_s: Vec<f64> = attempts.iter().map(|r| r["received_at"].as_f64().expect("received_at")).collect();
    for (i, pair) in at_s.windows(2).enumerate() {
        let least = 0.8 * 0.1 * f64::from(1u32 << i);
        assert!(
            pair[1] - pair[0] >= least,
            "retry {} came {:.3} s after the last, before {least:.3} s",
            i + 1,
            pair[1] - pair[0]
        );
    }
    e2e::measured(format_args!("4 attempts over {:.3} s", at_s[3] - at_s[0]));

    let bridge = &b;
    poll_until_async("the outbox records the delivery", Duration::from_secs(10), || async move {
        target_row(&notifications(bridge, None).await, 1)["delivered"] == 1
    })
    .await;
    let list = notifications(&b, None).await;
    let d = &list["deliveries"][0];
    assert_eq!(d["message_id"], ids.first().unwrap().as_str(), "{list:#}");
    assert_eq!(d["state"], "delivered", "{d}");
    assert_eq!(d["attempts"], 4, "{d}");
    assert_eq!(d["last_status"], 200, "{d}");
    assert_eq!(at(&rx.records(), hook).len(), 4, "no attempt after the 2xx: {}", summary(&rx.records()));
}

#[tokio::test]
async fn pending_notifications_survive_a_kill_and_go_out_with_their_ids_after_the_restart() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let (dead, live) = ("/dead/hook", "/webhook/hook");
    let options = webhook(&rx.url(dead), &["EVENTS=task.finished"]).with("SERVERFS_NOTIFY_RETRY_BASE_MS=100");
    let mut b = TestBridge::start_with(options).await;
    let mut tasks = BTreeSet::new();
    for n in 0..3 {
        let id =
            b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": format!("complete:{n}") })).await;
        assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");
        tasks.insert(id);
    }
    // Each row has been tried (503) at least once: its id is known and it is still pending.
    let records = rx
        .wait_for(
            |r| at(r, dead).iter().map(|x| webhook_id(x)).collect::<BTreeSet<_>>().len() == 3,
            Duration::from_secs(20),
        )
        .await;
    let tried: BTreeSet<String> = at(&records, dead).iter().map(|r| webhook_id(r)).collect();
    let list = notifications(&b, None).await;
    let stored: BTreeSet<String> = list["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .inspect(|d| assert_eq!(d["state"], "pending", "{d}"))
        .map(|d| d["message_id"].as_str().expect("message_id").to_owned())
        .collect();
    assert_eq!(stored, tried, "the outbox holds the ids that were tried: {list:#}");
    assert_eq!(target_row(&list, 1)["pending"], 3, "{list:#}");

    b.crash().await;
    let env = std::fs::read_to_string(&b.env_file).expect("read .env");
    assert!(env.contains(&rx.url(dead)));
    std::fs::write(&b.env_file, env.replace(&rx.url(dead), &rx.url(live))).expect("point the target at the receiver");
    b.spawn().await;

    let records = rx.wait_for(|r| at(r, live).len() >= 3, Duration::from_secs(30)).await;
    let delivered = at(&records, live);
    let ids: Vec<String> = delivered.iter().map(|r| webhook_id(r)).collect();
    assert_eq!(
        ids.iter().cloned().collect::<BTreeSet<_>>(),
        stored,
        "the stored ids, after the restart: {}",
        summary(&records)
    );
    assert_eq!(ids.len(), 3, "each once: {}", summary(&records));
    let finished: BTreeSet<String> =
        delivered.iter().map(|r| body(r)["data"]["task_id"].as_str().expect("task_id").to_owned()).collect();
    assert_eq!(finished, tasks);
    for r in &delivered {
        assert_signed_delivery(r);
        assert_eq!(r["status_answered"], 200);
    }
    let b = &b;
    poll_until_async("the outbox shows all three delivered", Duration::from_secs(10), || async move {
        let row = target_row(&notifications(b, None).await, 1);
        row["delivered"] == 3 && row["pending"] == 0
    })
    .await;
}

#[tokio::test]
async fn ntfy_and_slack_receive_payloads_of_their_documented_shapes() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let options = Options::default().with(&format!("SERVERFS_BOARD_PUBLIC_URL={BOARD}"));
    let options = target(options, 1, "ntfy", &rx.url("/ntfy/mytopic"), &["SECRET=tk_notify_test"]);
    let options = target(options, 2, "slack", &rx.url("/slack/chan"), &[]);
    let b = TestBridge::start_with(options).await;
    let marker = "notify-marker-91c2";
    let id = b.submit(&format!("approval:{marker}")).await;
    let task = b.wait_status(&id, "waiting_for_approval").await;
    let rid = task["pending_request"]["request_id"].as_str().expect("a request").to_owned();
    rx.wait_for(|r| !at(r, "/ntfy/").is_empty() && !at(r, "/slack/chan").is_empty(), Duration::from_secs(20)).await;
    b.call("respond_agent_approval", json!({ "task_id": id, "request_id": rid, "decision": "approve_once" }))
        .await
        .expect("approve");
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");
    let records =
        rx.wait_for(|r| at(r, "/ntfy/").len() >= 2 && at(r, "/slack/chan").len() >= 2, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 4, "two events to each target, nothing elsewhere: {}", summary(&records));

    let ntfy = at(&records, "/ntfy/");
    for r in &ntfy {
        assert_eq!(r["status_answered"], 200, "the ntfy shape check accepted it: {}", summary(&records));
        assert_eq!(r["headers"]["authorization"], "Bearer tk_notify_test", "{r}");
        let n = body(r);
        assert_eq!(n["topic"], "mytopic", "{n:#}");
        assert!(n["title"].as_str().is_some_and(|t| !t.is_empty()), "{n:#}");
        assert!(n["message"].as_str().is_some_and(|t| !t.is_empty()), "{n:#}");
        let click = n["click"].as_str().expect("a click link");
        assert!(click.starts_with(BOARD), "{n:#}");
        assert!(
            n["actions"]
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x["url"].as_str().is_some_and(|u| u.starts_with(BOARD)))),
            "{n:#}"
        );
    }
    let (first, second) = (body(ntfy[0]), body(ntfy[1]));
    assert_eq!(first["priority"], 4, "an approval is priority 4: {first:#}");
    assert_eq!(second["priority"], 3, "a finish is priority 3: {second:#}");
    assert!(first["actions"][0]["url"].as_str().is_some_and(|u| u.starts_with(&format!("{BOARD}/a/"))), "{first:#}");
    assert_eq!(second["click"], format!("{BOARD}/tasks/{id}"), "{second:#}");

    let slack = at(&records, "/slack/chan");
    for r in &slack {
        assert_eq!(r["status_answered"], 200, "the Block Kit check accepted it: {}", summary(&records));
        let s = body(r);
        assert!(s["text"].as_str().is_some_and(|t| !t.is_empty()), "a fallback text: {s:#}");
        let kinds: Vec<&str> =
            s["blocks"].as_array().expect("blocks").iter().filter_map(|b| b["type"].as_str()).collect();
        assert_eq!(kinds.first(), Some(&"header"), "{s:#}");
        let buttons: Vec<&str> = s["blocks"]
            .as_array()
            .expect("blocks")
            .iter()
            .filter(|b| b["type"] == "actions")
            .flat_map(|b| b["elements"].as_array().into_iter().flatten())
            .filter_map(|e| e["url"].as_str())
            .collect();
        assert!(!buttons.is_empty() && buttons.iter().all(|u| u.starts_with(BOARD)), "{s:#}");
    }
    let mut all: Vec<&Value> = ntfy;
    all.extend(slack);
    assert_nothing_leaks(&b, &all, marker);

    // `agent-bridge notify test NN` on each kind: one attempt the receiver's shape check
    // accepts (a Slack test message has only a title: no empty section, which Slack refuses).
    for (slot, path) in [("01", "/ntfy/"), ("02", "/slack/chan")] {
        let out = b.cli_env(&["notify", "test", slot]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "notify test {slot}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("target {slot}")) && text.contains("delivered, HTTP 200"), "{text}");
        let records = rx.records();
        let last = at(&records, path).into_iter().last().expect("the test notification arrived").clone();
        assert_eq!(last["status_answered"], 200, "{}", summary(&records));
        assert!(body(&last).to_string().contains("Test notification"), "{last}");
    }
    let out = b.cli_env(&["notify", "test", "03"]);
    assert!(!out.status.success(), "an unconfigured target is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("target 03 is not configured"), "{out:?}");
}

/// One `submit_agent_task` as the local operator, on a client of its own.
async fn submit_on(client: &Client, prompt: &str) -> Result<Value, CallError> {
    let Value::Object(arguments) =
        json!({ "runtime": "fake", "workdir": "docs", "profile": "review", "prompt": prompt })
    else {
        unreachable!()
    };
    let params = CallParams {
        credential: None,
        surface: Surface::Cli,
        path: Default::default(),
        client: None,
        name: "submit_agent_task".to_owned(),
        arguments,
    };
    let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
    client.call(methods::CAPABILITIES_CALL, params).await
}

/// The most tasks unfinished at once in the flood tests (the submitters wait for room).
const FLOOD_ACTIVE: &str = "SERVERFS_AGENT_MAX_ACTIVE_TASKS=64";

/// Submits `n` review `complete:` tasks on `docs` (eight submitters, each waiting for room when
/// the active-task cap refuses one) and waits until all of them, and every earlier task, are
/// terminal. Returns their ids.
async fn flood(b: &TestBridge, n: usize, label: &str) -> Vec<String> {
    let before = b.task_count() as usize;
    let next = Arc::new(AtomicUsize::new(0));
    let mut submitters = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let client = Client::new(&b.socket, Duration::from_secs(60));
        let next = Arc::clone(&next);
        let label = label.to_owned();
        submitters.spawn(async move {
            let mut ids = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return ids;
                }
                loop {
                    match submit_on(&client, &format!("complete:{label} {i}")).await {
                        Ok(v) => {
                            ids.push(v["task_id"].as_str().expect("task_id").to_owned());
                            break;
                        }
                        Err(e) if e.code() == "AGENT_TASK_LIMIT_REACHED" => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("submit {i}: {e}"),
                    }
                }
            }
        });
    }
    let mut ids = Vec::with_capacity(n);
    while let Some(part) = submitters.join_next().await {
        ids.extend(part.expect("a submitter"));
    }
    assert_eq!(ids.len(), n);
    let total = before + n;
    e2e::poll_until("every flooded task is terminal", Duration::from_secs(60), || {
        b.db_count("SELECT COUNT(*) FROM tasks WHERE completed_at IS NOT NULL") as usize == total
    })
    .await;
    ids
}

/// The bridge's resident memory, KiB (`VmRSS` of `/proc/PID/status`).
fn rss_kib(b: &TestBridge) -> u64 {
    let pid = b.pid().expect("the bridge runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Rows of target `slot` in `state`, counted in the store (read-only).
fn stored(b: &TestBridge, slot: u8, state: &str) -> i64 {
    assert!(state.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'), "{state}");
    b.db_count(&format!("SELECT COUNT(*) FROM notify_outbox WHERE target = {slot} AND state = '{state}'"))
}

/// The tasks before the baseline, the flood after it, and all of them.
const WARM_UP: usize = 100;
const FLOOD: usize = 1_000;
const TOTAL: usize = WARM_UP + FLOOD;

/// One bridge, two webhook targets for `task.finished`: 01 a live receiver, 02 a port nothing
/// listens on (every attempt refused at connect, retried from 1 s). After a warm-up of 100
/// tasks (the task machinery, the store's cache) the bridge's RSS is the baseline; then 1,000
/// more tasks. Target 01 gets every finish exactly once while 02 is failing beside it; 02's
/// 1,100 rows are all pending in the store, each tried, and the RSS stays within 1.5× of the
/// baseline: the backlog waits on disk, not in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_finishes_are_delivered_once_each_and_wait_in_the_store_for_a_dead_receiver() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let hook = "/webhook/flood";
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let options = webhook(&rx.url(hook), &["EVENTS=task.finished"]).with(FLOOD_ACTIVE);
    let options = target(
        options,
        2,
        "webhook",
        &format!("http://127.0.0.1:{dead}/webhook/dead"),
        &[&format!("SECRET={SECRET}"), "EVENTS=task.finished"],
    )
    .with("SERVERFS_NOTIFY_RETRY_BASE_MS=1000");
    let b = TestBridge::start_with(options).await;

    let mut ids = flood(&b, WARM_UP, "warm-up").await;
    rx.wait_for(|r| at(r, hook).len() >= WARM_UP, Duration::from_secs(30)).await;
    e2e::poll_until("the warm-up's rows pending for the dead target", Duration::from_secs(10), || {
        stored(&b, 2, "pending") == WARM_UP as i64
    })
    .await;
    let baseline = rss_kib(&b);

    let started = std::time::Instant::now();
    ids.extend(flood(&b, FLOOD, "flood").await);
    e2e::measured(format_args!("1,000 tasks submitted and finished in {:?}", started.elapsed()));
    let records = rx.wait_for(|r| at(r, hook).len() >= TOTAL, Duration::from_secs(60)).await;
    e2e::measured(format_args!("their 1,000 notifications delivered {:?} after the first submit", started.elapsed()));

    let deliveries = at(&records, hook);
    assert_eq!(deliveries.len(), TOTAL, "no retry, no duplicate: {}", summary(&records));
    let mut per_task: BTreeMap<String, usize> = BTreeMap::new();
    let mut webhook_ids = BTreeSet::new();
    for r in &deliveries {
        assert_eq!(r["status_answered"], 200, "{r}");
        assert_eq!(r["verified"], true, "{r}");
        webhook_ids.insert(webhook_id(r));
        let b = body(r);
        assert_eq!(b["type"], "task.finished");
        *per_task.entry(b["data"]["task_id"].as_str().expect("task_id").to_owned()).or_default() += 1;
    }
    assert_eq!(webhook_ids.len(), TOTAL, "one webhook-id per delivery");
    assert_eq!(per_task.keys().cloned().collect::<BTreeSet<_>>(), ids.iter().cloned().collect::<BTreeSet<_>>());
    assert!(per_task.values().all(|n| *n == 1), "each task's finish once");

    // The dead target's backlog: every row pending in the store, and the worker gets round
    // to all of them (the newest have been tried too), none lost or given up.
    e2e::poll_until("every row pending for the dead target", Duration::from_secs(20), || {
        stored(&b, 2, "pending") == TOTAL as i64
    })
    .await;
    e2e::poll_until("every dead row tried at least once", Duration::from_secs(30), || {
        b.db_count("SELECT COUNT(*) FROM notify_outbox WHERE target = 2 AND attempts = 0") == 0
    })
    .await;
    e2e::measured(format_args!("every dead row tried {:?} after the first submit", started.elapsed()));
    let after = rss_kib(&b);
    let ratio = after as f64 / baseline as f64;
    e2e::measured(format_args!("bridge RSS {baseline} KiB -> {after} KiB with {TOTAL} undelivered ({ratio:.3}x)"));
    assert!(
        ratio < 1.5,
        "the bridge's RSS grew {ratio:.2}x ({baseline} -> {after} KiB) with 1,000 more undelivered notifications"
    );
    assert_eq!((stored(&b, 2, "given_up"), stored(&b, 2, "delivered")), (0, 0));

    // The operator's view agrees.
    let bridge = &b;
    poll_until_async("the outbox counts every delivery to target 01", Duration::from_secs(10), || async move {
        target_row(&notifications(bridge, None).await, 1)["delivered"] == TOTAL as u64
    })
    .await;
    let list = notifications(&b, Some(500)).await;
    let (live, failing) = (target_row(&list, 1), target_row(&list, 2));
    assert_eq!((&live["pending"], &live["given_up"]), (&json!(0), &json!(0)), "{live}");
    assert_eq!((&failing["pending"], &failing["delivered"]), (&json!(TOTAL), &json!(0)), "{failing}");
    assert!(failing["failing_since"].is_string(), "{failing}");
    for d in list["deliveries"].as_array().expect("deliveries").iter().filter(|d| d["target"] == 2) {
        assert_eq!(d["state"], "pending", "{d}");
        assert!(d["last_error"].as_str().is_some_and(|e| !e.is_empty()), "a failed attempt says why: {d}");
    }
    assert_eq!(at(&rx.records(), hook).len(), TOTAL, "nothing is sent twice");
    assert!(b.health().await.is_ok(), "the bridge still answers");
}

#[tokio::test]
async fn a_target_of_every_event_gets_questions_failures_plans_and_closed_workdirs_with_full_details_and_no_path() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let hook = "/webhook/all";
    // EVENTS empty: all six. Without the sandbox, so that an orphan can outlive a killed bridge
    // and keep its workdir closed (the marker proof's own case, as in `orphans`).
    let options = webhook(&rx.url(hook), &["DETAILS=full"]).with("SERVERFS_AGENT_SANDBOX=off");
    let mut b = TestBridge::start_with(options).await;
    let (repo, docs) = (b.repo.display().to_string(), b.docs.display().to_string());

    // A question whose text names a host path: full details show the question, the path
    // rewritten relative to the workdir.
    let asked = b
        .submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": format!("question:Shall I tidy {docs}/qmarker.md") }))
        .await;
    b.wait_status(&asked, "waiting_for_question").await;
    let failed = b.submit("fail:the build broke").await;
    assert_eq!(b.wait_terminal(&failed).await["status"], "failed");
    // A plan filed by an MCP caller waits for a human: the target hears of it.
    let key = b.create_key("planner", "operator").await;
    let plan = b
        .call_mcp(
            Some(&key),
            "submit_agent_plan",
            json!({ "workdir": "docs", "runtime": "fake", "profile": "review", "title": "Tidy the docs",
                    "steps": [{ "title": "look", "prompt": "complete:plan-step-secret" }] }),
        )
        .await
        .expect("plan");
    let plan_id = plan["plan_id"].as_str().expect("plan id").to_owned();
    let records = rx
        .wait_for(
            |r| {
                !of_type(r, hook, "question.requested").is_empty()
                    && !of_type(r, hook, "task.failed").is_empty()
                    && !of_type(r, hook, "plan.pending_approval").is_empty()
            },
            Duration::from_secs(20),
        )
        .await;
    let question = body(of_type(&records, hook, "question.requested")[0]);
    let data = &question["data"];
    assert_eq!((data["task_id"].as_str(), data["request_kind"].as_str()), (Some(asked.as_str()), Some("question")));
    assert!(data["links"]["action"].as_str().is_some_and(|l| l.starts_with(&format!("{BOARD}/a/"))), "{question:#}");
    let details = data["details"].to_string();
    assert!(details.contains("qmarker.md"), "full details carry the question: {question:#}");
    let failure = body(of_type(&records, hook, "task.failed")[0]);
    assert_eq!(
        (failure["data"]["task_id"].as_str(), failure["data"]["status"].as_str()),
        (Some(failed.as_str()), Some("failed"))
    );
    let pending = body(of_type(&records, hook, "plan.pending_approval")[0]);
    assert_eq!(pending["data"]["plan_id"], plan_id.as_str(), "{pending:#}");
    assert_eq!(pending["data"]["links"]["board"], format!("{BOARD}/plans/{plan_id}"), "{pending:#}");
    b.call("cancel_agent_task", json!({ "task_id": asked })).await.expect("cancel");

    // A writer whose stop cannot be proven after a crash: the restarted bridge keeps the
    // workdir closed and says so once.
    let (orphaned, orphan) = b.crash_leaving_an_orphan(120).await;
    let _kill = KillOnDrop(orphan);
    b.spawn().await;
    let records =
        rx.wait_for(|r| !of_type(r, hook, "workdir.recovery_required").is_empty(), Duration::from_secs(20)).await;
    let closed = of_type(&records, hook, "workdir.recovery_required");
    assert_eq!(closed.len(), 1, "{}", summary(&records));
    let closed = body(closed[0]);
    assert_eq!(
        (closed["data"]["task_id"].as_str(), closed["data"]["workdir"].as_str()),
        (Some(orphaned.as_str()), Some("repo"))
    );

    let all = at(&records, hook);
    for r in &all {
        assert_signed_delivery(r);
    }
    // Full details never carry a host path, the step's prompt or the key.
    assert_nothing_leaks(&b, &all, "plan-step-secret");
    for r in &all {
        let text = r["body"].as_str().unwrap_or_default();
        assert!(!text.contains(&repo) && !text.contains(&docs) && !text.contains(&key), "{text}");
    }
}

/// Kills a stray test process when the test ends, whatever happens.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
    }
}

/// A worktree task's finish says its branch waits for a human, and its board link goes to the
/// branch's card on the task page (the diff, the merge and discard forms).
#[tokio::test]
async fn a_worktree_tasks_finish_names_its_branch_and_links_to_it() {
    let Some(rx) = Receiver::start(SECRET, &[]).await else { return };
    let hook = "/webhook/branch";
    let b = TestBridge::start_with(webhook(&rx.url(hook), &[])).await;
    crate::worktrees::repository(&b);
    let id = b.submit_ok(json!({ "prompt": "exec:echo x > x.txt", "isolation": "worktree" })).await;
    let t = b.wait_terminal(&id).await;
    let branch = t["isolation"]["branch"].as_str().expect("branch").to_owned();
    let records = rx.wait_for(|r| !of_type(r, hook, "task.finished").is_empty(), Duration::from_secs(20)).await;
    let finished = body(of_type(&records, hook, "task.finished")[0]);
    let data = &finished["data"];
    assert_eq!(data["branch"], json!({ "name": branch, "state": "open" }), "{finished:#}");
    assert!(data["title"].as_str().unwrap_or_default().contains(&branch), "{finished:#}");
    assert_eq!(data["links"]["board"], format!("{BOARD}/tasks/{id}#branch"), "{finished:#}");
}
