//! Action links on the real bridge's board: a notification's `/a/<token>` shows
//! its one request with no login and answers it once (the task goes on), behind the form's
//! CSRF field; a second use, a use after the request expired, a link used for another task's
//! request, and the token anywhere else on the board are refused; every use is audited on
//! surface `board` as `link:lnk_…`. Under `SERVERFS_BOARD_PUBLIC_URL` the notification's link
//! starts with it and the board takes that host and its origin. Also: `/notifications` shows
//! the target. The webhook target is a closed loopback port (or, for the public URL, a socket
//! here that answers 503), so the rows stay pending and keep their links.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};

use e2e::browser::{Browser, HttpResponse, browser_or_skip, http, screenshot_dir};
use e2e::{Options, TestBridge, poll_until};

/// A valid Standard Webhooks secret (32 bytes).
const SECRET: &str = "whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
const FORM: &str = "application/x-www-form-urlencoded";

/// Options with webhook target 01 at `url`.
pub(crate) fn webhook(options: Options, url: &str) -> Options {
    options
        .with(&format!("SERVERFS_NOTIFY_01_URL={url}"))
        .with("SERVERFS_NOTIFY_01_KIND=webhook")
        .with(&format!("SERVERFS_NOTIFY_01_SECRET={SECRET}"))
}

/// A loopback port nothing listens on (connect is refused).
pub(crate) fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A board token and the board's address (`127.0.0.1:port`).
fn board_token(b: &TestBridge) -> (String, String) {
    let out = b.cli(&["board", "token", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let addr = v["login_url"].as_str().expect("login url").trim_start_matches("http://").trim_end_matches("/login");
    (v["token"].as_str().expect("token").to_owned(), addr.to_owned())
}

/// Logs in; returns the `Cookie` header value.
fn login(addr: &str, token: &str) -> String {
    let origin = format!("http://{addr}");
    let r = http(addr, "POST", "/login", &[("Origin", &origin), ("Content-Type", FORM)], &format!("token={token}"));
    assert_eq!(r.status, 303, "{}", r.body);
    r.header("set-cookie").expect("a cookie").split(';').next().unwrap().to_owned()
}

/// The board path (`/a/abl_…`) of the action link the approval notification of `task` carries.
pub(crate) async fn link_of(b: &TestBridge, task: &str) -> String {
    link_for(b, task, "approval.requested").await
}

/// The board path of the action link of `task`'s `event` notification.
async fn link_for(b: &TestBridge, task: &str, event: &str) -> String {
    let read = || -> Option<String> {
        b.db()
            .query_row(
                "SELECT action_url FROM notify_outbox WHERE event_type = ?2 AND task_id = ?1",
                [task, event],
                |r| r.get::<_, Option<String>>(0),
            )
            .ok()
            .flatten()
    };
    poll_until("the notification's action link", Duration::from_secs(10), || read().is_some()).await;
    let path = read().unwrap();
    assert!(path.starts_with("/a/abl_") && path.len() == "/a/abl_".len() + 64, "{path}");
    path
}

/// The value of the first field `name` of a page's form.
fn field(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page.find(&marker).unwrap_or_else(|| panic!("no {name} field in {page}")) + marker.len();
    page[at..].split('"').next().unwrap_or_default().to_owned()
}

/// A POST of `body` to `path` from the board's own origin (under `host`, with `origin`).
fn post(addr: &str, host: &str, origin: &str, path: &str, body: &str) -> HttpResponse {
    http(addr, "POST", path, &[("Host", host), ("Origin", origin), ("Content-Type", FORM)], body)
}

/// The answer of an approval form: its CSRF field, task and request, and `decision`.
fn approve_body(page: &str, decision: &str) -> String {
    format!(
        "csrf={}&task_id={}&request_id={}&decision={decision}",
        field(page, "csrf"),
        field(page, "task_id"),
        field(page, "request_id")
    )
}

/// Every audit row (the tool flushes the writer first).
async fn audit(b: &TestBridge) -> Vec<Value> {
    let v = b.call("admin_read_audit_log", json!({ "limit": 500 })).await.expect("audit log");
    v["rows"].as_array().expect("rows").clone()
}

/// The audit rows of link principals on `task` with `outcome`, as (capability, error code).
fn link_rows(rows: &[Value], task: &str, outcome: &str) -> Vec<(String, String)> {
    rows.iter()
        .filter(|r| r["principal"].as_str().is_some_and(|p| p.starts_with("link:lnk_")))
        .filter(|r| r["task_id"] == task && r["outcome"] == outcome)
        .inspect(|r| assert_eq!((r["surface"].as_str(), r["client"].as_str()), (Some("board"), Some("action-link"))))
        .map(|r| (r["capability"].as_str().unwrap_or("").to_owned(), r["error_code"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test]
async fn an_action_link_approves_its_request_once_and_opens_nothing_else() {
    let b =
        TestBridge::start_with(webhook(Options::default(), &format!("http://127.0.0.1:{}/hook", closed_port()))).await;
    let (board, addr) = board_token(&b);
    let origin = format!("http://{addr}");
    let task = b.submit("approval:publish the release notes").await;
    b.wait_status(&task, "waiting_for_approval").await;
    let link = link_of(&b, &task).await;
    let token = link.trim_start_matches("/a/");

    // The page: the whole request, one form, no navigation, no cookie, nothing cached.
    let page = http(&addr, "GET", &link, &[], "");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Run `publish the release notes`") && page.body.contains(&task), "{}", page.body);
    assert!(page.body.contains(&format!("<form method=\"post\" action=\"{token}\">")), "{}", page.body);
    for absent in ["<nav", "href=\"/", "Log out", "/static/board.js"] {
        assert!(!page.body.contains(absent), "the link page shows {absent}: {}", page.body);
    }
    assert_eq!(page.header("set-cookie"), None);
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert_eq!(page.header("referrer-policy"), Some("same-origin"));
    assert_eq!(field(&page.body, "task_id"), task);

    // Without the form's CSRF field, or with another, nothing happens.
    let body = approve_body(&page.body, "approve_once");
    let without = body.split('&').skip(1).collect::<Vec<_>>().join("&");
    assert_eq!(post(&addr, &addr, &origin, &link, &without).status, 403);
    assert_eq!(post(&addr, &addr, &origin, &link, &format!("csrf={}&{without}", "0".repeat(64))).status, 403);
    assert_eq!(post(&addr, &addr, "http://evil.example", &link, &body).status, 403, "a foreign origin");
    assert_eq!(b.get(&task).await["status"], "waiting_for_approval");

    // Another task's link, used for this task's request: refused, and this task still waits.
    let other = b.submit_ok(json!({ "workdir": "docs", "profile": "review", "prompt": "approval:read it" })).await;
    b.wait_status(&other, "waiting_for_approval").await;
    let other_link = link_of(&b, &other).await;
    let other_page = http(&addr, "GET", &other_link, &[], "").body;
    let crossed = format!(
        "csrf={}&task_id={task}&request_id={}&decision=approve_once",
        field(&other_page, "csrf"),
        field(&page.body, "request_id")
    );
    let r = post(&addr, &addr, &origin, &other_link, &crossed);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(b.get(&task).await["status"], "waiting_for_approval");

    // The token anywhere else gives nothing: every other page still wants a session.
    for page in ["/".to_owned(), format!("/tasks/{task}"), "/notifications".to_owned()] {
        let cookie = format!("ab_board={token}");
        let query = format!("{page}?token={token}");
        let bearer = format!("Bearer {token}");
        for (path, headers) in [
            (page.as_str(), vec![("Cookie", cookie.as_str())]),
            (query.as_str(), vec![]),
            (page.as_str(), vec![("Authorization", bearer.as_str())]),
        ] {
            let r = http(&addr, "GET", path, &headers, "");
            assert_eq!((r.status, r.header("location")), (303, Some("/login")), "{path} {headers:?}");
        }
    }
    assert_eq!(http(&addr, "GET", &format!("{link}/x"), &[], "").status, 404);

    // Approved once: the task goes on; the same link again is refused, GET and POST.
    let done = post(&addr, &addr, &origin, &link, &body);
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Approved — the task goes on"), "{}", done.body);
    let t = b.wait_status(&task, "succeeded").await;
    assert_eq!(t["final_response"], "approval=approve_once");
    assert_eq!(post(&addr, &addr, &origin, &link, &body).status, 403, "a second use");
    assert_eq!(http(&addr, "GET", &link, &[], "").status, 403, "a used link shows nothing");
    let unknown = format!("/a/abl_{}", "0".repeat(64));
    assert_eq!(http(&addr, "GET", &unknown, &[], "").status, 403);
    assert_eq!(b.get(&other).await["status"], "waiting_for_approval", "the other link's task still waits");

    // Audited on surface `board` as the link, its uses and its refusals.
    let rows = audit(&b).await;
    let ok = link_rows(&rows, &task, "ok");
    assert!(ok.contains(&("get_agent_task".into(), String::new())), "{ok:?}");
    assert!(ok.contains(&("respond_agent_approval".into(), String::new())), "{ok:?}");
    let denied = link_rows(&rows, &task, "denied");
    assert!(denied.contains(&("respond_agent_approval".into(), "REQUEST_ALREADY_RESOLVED".into())), "{denied:?}");
    assert!(denied.contains(&("get_agent_task".into(), "REQUEST_ALREADY_RESOLVED".into())), "{denied:?}");
    let crossed = link_rows(&rows, &other, "denied");
    assert!(crossed.contains(&("respond_agent_approval".into(), "AGENT_TASK_NOT_FOUND".into())), "{crossed:?}");
    assert_eq!(b.db_count("SELECT COUNT(*) FROM action_links WHERE used_at IS NOT NULL"), 1);

    // The board shows the target and its deliveries.
    let cookie = login(&addr, &board);
    let n = http(&addr, "GET", "/notifications", &[("Cookie", &cookie)], "");
    assert_eq!(n.status, 200, "{}", n.body);
    for shown in ["<tr data-target=\"1\"", "webhook", "http://127.0.0.1", "approval.requested", &task] {
        assert!(n.body.contains(shown), "/notifications lacks {shown}: {}", n.body);
    }
    assert!(n.body.contains("href=\"/notifications\">Notifications"), "the navigation entry");
}

#[tokio::test]
async fn an_action_link_expires_with_its_request() {
    let options = webhook(Options::default(), &format!("http://127.0.0.1:{}/hook", closed_port()))
        .with("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=2");
    let b = TestBridge::start_with(options).await;
    let (_, addr) = board_token(&b);
    let task = b.submit("approval:wait too long").await;
    b.wait_status(&task, "waiting_for_approval").await;
    let link = link_of(&b, &task).await;
    let page = http(&addr, "GET", &link, &[], "");
    assert_eq!(page.status, 200, "{}", page.body);
    let body = approve_body(&page.body, "approve_once");
    b.wait_status(&task, "interrupted").await;
    let origin = format!("http://{addr}");
    let r = post(&addr, &addr, &origin, &link, &body);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("REQUEST_STALE"), "{}", r.body);
    assert_eq!(http(&addr, "GET", &link, &[], "").status, 403);
    let denied = link_rows(&audit(&b).await, &task, "denied");
    assert!(denied.contains(&("respond_agent_approval".into(), "REQUEST_STALE".into())), "{denied:?}");
    assert_eq!(b.db_count("SELECT COUNT(*) FROM action_links WHERE used_at IS NOT NULL"), 0);
}

/// Accepts one request on `listener`, answers 503 (so the row stays pending with its link) and
/// returns the request's body.
fn one_webhook(listener: TcpListener) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = stream.read(&mut buf).expect("read");
            assert!(n > 0, "the request ended early");
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some(split) = text.find("\r\n\r\n") {
                let length = text[..split]
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if raw.len() >= split + 4 + length {
                    let _ = stream.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    return text[split + 4..].to_owned();
                }
            }
        }
    })
}

#[tokio::test]
async fn behind_a_public_url_the_link_starts_with_it_and_its_origin_may_post() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = one_webhook(listener);
    let options = webhook(Options::default().with("SERVERFS_BOARD_PUBLIC_URL=https://phone.example"), &url);
    let b = TestBridge::start_with(options).await;
    let (_, addr) = board_token(&b);
    let task = b.submit("approval:ship it").await;
    b.wait_status(&task, "waiting_for_approval").await;
    let body = tokio::task::spawn_blocking(move || received.join().expect("the webhook arrived")).await.unwrap();
    let sent: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let action = sent["data"]["links"]["action"].as_str().unwrap_or_else(|| panic!("no action link: {sent:#}"));
    let link = link_of(&b, &task).await;
    assert_eq!(action, format!("https://phone.example{link}"));

    let public = [("Host", "phone.example")];
    let page = http(&addr, "GET", &link, &public, "");
    assert_eq!(page.status, 200, "{}", page.body);
    let form = approve_body(&page.body, "approve_once");
    assert_eq!(http(&addr, "GET", &link, &[("Host", "evil.example")], "").status, 421, "another host");
    for wrong in ["http://phone.example", &format!("http://{addr}"), "https://evil.example"] {
        assert_eq!(post(&addr, "phone.example", wrong, &link, &form).status, 403, "origin {wrong}");
    }
    assert_eq!(b.get(&task).await["status"], "waiting_for_approval");
    let done = post(&addr, "phone.example", "https://phone.example", &link, &form);
    assert_eq!(done.status, 200, "{}", done.body);
    b.wait_status(&task, "succeeded").await;

    // A login through the public (https) host gets a cookie the browser sends over TLS only; one
    // on the loopback board (plain HTTP) does not.
    let (token, _) = board_token(&b);
    let headers = [("Host", "phone.example"), ("Origin", "https://phone.example"), ("Content-Type", FORM)];
    let r = http(&addr, "POST", "/login", &headers, &format!("token={token}"));
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.header("set-cookie").is_some_and(|c| c.contains("; Secure")), "{:?}", r.header("set-cookie"));
    let (token, _) = board_token(&b);
    let origin = format!("http://{addr}");
    let r = http(&addr, "POST", "/login", &[("Origin", &origin), ("Content-Type", FORM)], &format!("token={token}"));
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.header("set-cookie").is_some_and(|c| !c.contains("Secure")), "{:?}", r.header("set-cookie"));
}

#[tokio::test]
async fn a_person_answers_a_question_from_its_link_in_a_real_browser() {
    let Some((chromium, driver)) = browser_or_skip("action link browser test") else { return };
    let b =
        TestBridge::start_with(webhook(Options::default(), &format!("http://127.0.0.1:{}/hook", closed_port()))).await;
    let (_, addr) = board_token(&b);
    let task = b.submit("question:Ship the release today?").await;
    b.wait_status(&task, "waiting_for_question").await;
    let url = format!("http://{addr}{}", link_for(&b, &task, "question.requested").await);
    let shots = screenshot_dir();
    let run = tokio::task::spawn_blocking(move || {
        let browser = Browser::start(&chromium, &driver);
        browser.goto(&url);
        let yes = browser.wait_for("input[name='opt:q1'][value=yes]", Duration::from_secs(10));
        assert!(browser.source().contains("Ship the release today?"));
        // The stylesheet loads by its relative path.
        let rules = browser.script("return document.styleSheets.length && document.styleSheets[0].cssRules.length");
        assert!(rules.as_u64().is_some_and(|n| n > 0), "no stylesheet: {rules}");
        browser.screenshot(&shots.join("action-link-question.png"));
        browser.click(&yes);
        let text = browser.wait_for("textarea[name='text:q1']", Duration::from_secs(5));
        browser.type_into(&text, "after lunch");
        let send = browser.wait_for("form button.primary", Duration::from_secs(5));
        browser.click(&send);
        // The question's own page has a card too: wait for the answer's page itself.
        let page = browser.wait_text("Answered — the task goes on", Duration::from_secs(10));
        assert!(page.contains("Answered — the task goes on"), "{page}");
        browser.screenshot(&shots.join("action-link-answered.png"));
    });
    run.await.unwrap_or_else(|e| panic!("browser steps failed: {e}\n{}", b.log()));
    let t = b.wait_status(&task, "succeeded").await;
    let answer = t["final_response"].as_str().unwrap_or_default();
    assert!(answer.contains("yes") && answer.contains("after lunch"), "{t:#}");
}
