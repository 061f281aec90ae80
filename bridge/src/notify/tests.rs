//! Tests of the delivery worker against a real HTTP receiver on 127.0.0.1 and a real SQLite
//! store: facts routed and sent, the same message id on every retry, a signature that verifies,
//! rows resent by a new worker after a stop, facts recorded while no worker ran routed by the
//! next, and a test notification's single attempt.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tokio_util::sync::CancellationToken;

use super::{Notifier, backoff_ms, format};
use crate::clock::Clock;
use crate::config::BridgeConfig;
use crate::model::TaskStatus;
use crate::store::Store;
use crate::store::events::NewEvent;
use crate::store::outbox::DeliveryState;
use crate::store::tasks::TransitionFields;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver got: (path, webhook-id, webhook-timestamp, webhook-signature, body).
type Got = Arc<Mutex<Vec<(String, String, String, String, String)>>>;

/// A receiver that answers 500 to the first `fail` requests, then 200; `/dead` always 503.
async fn receiver(fail: usize) -> (String, Got) {
    let got: Got = Arc::default();
    let seen = Arc::clone(&got);
    let app = Router::new().route(
        "/{*path}",
        post(move |uri: axum::http::Uri, headers: HeaderMap, body: String| {
            let seen = Arc::clone(&seen);
            async move {
                let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                let mut list = seen.lock().unwrap();
                list.push((
                    uri.path().to_owned(),
                    h("webhook-id"),
                    h("webhook-timestamp"),
                    h("webhook-signature"),
                    body,
                ));
                if uri.path() == "/dead" || list.len() <= fail {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = bridge_httpd::Server {
        name: "receiver",
        limits: bridge_httpd::Limits::BOARD,
        style: bridge_httpd::Style::Text,
    };
    tokio::spawn(bridge_httpd::serve(listener, app, server, CancellationToken::new()));
    (format!("http://{addr}"), got)
}

fn config(root: &std::path::Path, url: &str) -> BridgeConfig {
    let env = format!(
        "SERVERFS_NOTIFY_01_URL={url}\nSERVERFS_NOTIFY_01_KIND=webhook\nSERVERFS_NOTIFY_01_SECRET={SECRET}\n\
         SERVERFS_NOTIFY_RETRY_BASE_MS=100\nSERVERFS_BOARD_PUBLIC_URL=https://phone.example\n\
         SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true\n"
    );
    crate::tasks::testing::config(root, "fake", &env)
}

fn finish_task(store: &Store, id: &str) {
    let new = crate::store::tests::new_task(id, None);
    store.insert_task(&new, 100, None, &NewEvent::new("task.submitted", serde_json::json!({}))).expect("insert");
    let now = Clock::System.now_ms();
    for to in [TaskStatus::Starting, TaskStatus::Running, TaskStatus::Succeeded] {
        store.transition(id, to, TransitionFields::default(), now).expect("transition");
    }
}

fn start(config: BridgeConfig) -> (Arc<Store>, Notifier, CancellationToken, tokio::task::JoinHandle<()>) {
    let store = Arc::new(Store::open(&config.state_dir).expect("store"));
    let notifier = Notifier::new(Arc::clone(&store), Arc::new(config), Clock::System, Arc::new(OnceLock::new()))
        .expect("notifier");
    let stop = CancellationToken::new();
    let worker = tokio::spawn(notifier.clone().run(stop.clone()));
    (store, notifier, stop, worker)
}

async fn wait_for(got: &Got, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().len() < n {
        assert!(tokio::time::Instant::now() < deadline, "only {} requests arrived", got.lock().unwrap().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_failing_receiver_gets_the_same_signed_message_until_it_accepts_it() {
    let (base, got) = receiver(3).await;
    let root = tempfile::tempdir().expect("tempdir");
    let (store, _notifier, stop, worker) = start(config(root.path(), &format!("{base}/hook")));
    finish_task(&store, "agt_1");
    wait_for(&got, 4).await;
    let requests = got.lock().unwrap().clone();
    assert!(requests.iter().all(|r| r.1 == requests[0].1 && r.4 == requests[0].4), "one id, one body: {requests:?}");
    for (_, id, ts, signature, body) in &requests {
        let ts: i64 = ts.parse().expect("timestamp");
        assert_eq!(&format::sign(SECRET, id, ts, body).expect("sign"), signature);
    }
    let body: serde_json::Value = serde_json::from_str(&requests[0].4).expect("json");
    assert_eq!(body["type"], "task.finished");
    assert_eq!(body["data"]["links"]["board"], "https://phone.example/tasks/agt_1");
    // Recorded: four attempts, delivered, and no fifth request.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let row = store.get_notification(&requests[0].1).expect("read").expect("row");
        if row.state == DeliveryState::Delivered {
            assert_eq!(row.attempts, 4);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not recorded: {row:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    worker.await.expect("worker");
    assert_eq!(got.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn rows_left_pending_by_a_stopped_worker_are_sent_by_the_next() {
    let (base, got) = receiver(0).await;
    let root = tempfile::tempdir().expect("tempdir");
    let (store, _n, stop, worker) = start(config(root.path(), &format!("{base}/dead")));
    finish_task(&store, "agt_1");
    finish_task(&store, "agt_2");
    wait_for(&got, 2).await;
    stop.cancel();
    worker.await.expect("worker");
    let pending: Vec<String> = store
        .recent_notifications(10)
        .expect("rows")
        .into_iter()
        .filter(|r| r.state == DeliveryState::Pending)
        .map(|r| r.message_id)
        .collect();
    assert_eq!(pending.len(), 2, "both wait for a retry");
    drop(store);
    // The operator fixes the URL and restarts: the same messages arrive.
    let (store, _n, stop, worker) = start(config(root.path(), &format!("{base}/hook")));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let delivered: Vec<String> =
            got.lock().unwrap().iter().filter(|r| r.0 == "/hook").map(|r| r.1.clone()).collect();
        if delivered.len() >= 2 {
            let mut expected = pending.clone();
            expected.sort();
            let mut delivered = delivered;
            delivered.sort();
            assert_eq!(delivered, expected);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not resent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    worker.await.expect("worker");
    drop(store);
}

#[tokio::test]
async fn a_test_notification_is_tried_once_and_reported() {
    let (base, got) = receiver(0).await;
    let root = tempfile::tempdir().expect("tempdir");
    let (_store, notifier, stop, worker) = start(config(root.path(), &format!("{base}/dead")));
    let report = notifier.test(1).await.expect("test");
    assert_eq!(report["delivered"], false);
    assert_eq!(report["http_status"], 500);
    assert!(notifier.test(2).await.is_err(), "an unconfigured target is refused");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(got.lock().unwrap().len(), 1, "no retry of a test");
    stop.cancel();
    worker.await.expect("worker");
}

#[test]
fn the_delay_doubles_within_its_jitter_and_stops_at_an_hour() {
    for attempt in 1..=40 {
        let d = backoff_ms(1_000, attempt);
        let raw = (1_000i64 << (attempt - 1).min(30)).min(3_600_000);
        assert!(d >= raw * 8 / 10 && d <= raw * 12 / 10, "attempt {attempt}: {d} vs {raw}");
    }
}

/// A listener on 127.0.0.1 that accepts connections and never answers (abort the task to
/// close them).
async fn hanging_listener() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = hang.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = hang.accept().await {
            open.push(conn);
        }
    });
    (addr, held)
}

#[tokio::test]
async fn a_target_that_hangs_delays_only_its_own_rows() {
    let (base, got) = receiver(0).await;
    let (hang_addr, held) = hanging_listener().await;
    let root = tempfile::tempdir().expect("tempdir");
    let env = format!(
        "SERVERFS_NOTIFY_01_URL=http://{hang_addr}/hook\nSERVERFS_NOTIFY_01_KIND=webhook\nSERVERFS_NOTIFY_01_SECRET={SECRET}\n\
         SERVERFS_NOTIFY_02_URL={base}/hook\nSERVERFS_NOTIFY_02_KIND=webhook\nSERVERFS_NOTIFY_02_SECRET={SECRET}\n\
         SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true\n"
    );
    let (store, _n, stop, worker) = start(crate::tasks::testing::config(root.path(), "fake", &env));
    for i in 0..12 {
        finish_task(&store, &format!("agt_{i}"));
    }
    // Twelve rows per target; the hanging one holds at most its own two slots.
    let started = tokio::time::Instant::now();
    wait_for(&got, 12).await;
    assert!(started.elapsed() < Duration::from_secs(8), "the healthy target waited for the hanging one");
    let stopping = tokio::time::Instant::now();
    stop.cancel();
    worker.await.expect("worker");
    assert!(stopping.elapsed() < Duration::from_secs(5), "a hanging send does not hold the shutdown");
    let pending = store
        .recent_notifications(50)
        .expect("rows")
        .iter()
        .filter(|r| r.target == 1 && r.state == DeliveryState::Pending)
        .count();
    assert_eq!(pending, 12, "the hanging target's rows wait, none lost");
    held.abort();
}

#[tokio::test]
async fn a_backlog_of_a_hanging_target_ahead_in_due_order_does_not_hide_another_targets_row() {
    let (base, got) = receiver(0).await;
    let (hang_addr, held) = hanging_listener().await;
    let root = tempfile::tempdir().expect("tempdir");
    let env = format!(
        "SERVERFS_NOTIFY_01_URL=http://{hang_addr}/hook\nSERVERFS_NOTIFY_01_KIND=webhook\nSERVERFS_NOTIFY_01_SECRET={SECRET}\n\
         SERVERFS_NOTIFY_01_EVENTS=task.finished\n\
         SERVERFS_NOTIFY_02_URL={base}/hook\nSERVERFS_NOTIFY_02_KIND=webhook\nSERVERFS_NOTIFY_02_SECRET={SECRET}\n\
         SERVERFS_NOTIFY_02_EVENTS=task.failed\nSERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true\n"
    );
    let config = crate::tasks::testing::config(root.path(), "fake", &env);
    // The backlog a restart finds: twenty rows of the hanging target, all due before the one
    // row of the healthy target (more than one fetch's worth of rows).
    let store = Store::open(&config.state_dir).expect("store");
    for i in 0..20 {
        finish_task(&store, &format!("agt_{i}"));
    }
    let new = crate::store::tests::new_task("agt_failed", None);
    store.insert_task(&new, 100, None, &NewEvent::new("task.submitted", serde_json::json!({}))).expect("insert");
    let now = Clock::System.now_ms();
    for to in [TaskStatus::Starting, TaskStatus::Failed] {
        store.transition("agt_failed", to, TransitionFields::default(), now).expect("transition");
    }
    drop(store);
    let (store, _n, stop, worker) = start(config);
    wait_for(&got, 1).await;
    // The healthy row went out while the hanging target's first attempts (10 s each) were
    // still open: none of its rows has an attempt recorded yet.
    let rows = store.recent_notifications(50).expect("rows");
    let hanging: Vec<_> = rows.iter().filter(|r| r.target == 1).collect();
    assert_eq!(hanging.len(), 20);
    assert!(hanging.iter().all(|r| r.attempts == 0 && r.state == DeliveryState::Pending), "{hanging:?}");
    let body = got.lock().unwrap()[0].4.clone();
    assert!(body.contains("\"task.failed\"") && body.contains("agt_failed"), "{body}");
    stop.cancel();
    worker.await.expect("worker");
    held.abort();
}
