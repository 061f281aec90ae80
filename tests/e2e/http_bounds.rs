//! The bounds of both HTTP servers (`httpd/`), on the real front and the real board: a half
//! head is cut off after the header timeout, an idle keep-alive connection after the idle
//! timeout (not the header one), a stalled body gets 408, a head past 16 KiB gets 431; past
//! the connection cap a new connection is answered 503 + `Retry-After` and closed while the
//! open ones still work, past the in-flight cap (long polls holding it) a request gets 503 +
//! `Retry-After`; the front logs its raised descriptor limit; and the board serves on a Unix
//! socket (0600) for `ssh -L`.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::{Instant, timeout};

use e2e::front::TestFront;
use e2e::{Options, TestBridge};

/// One answer read off a kept-alive connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one answer with a `Content-Length` body (every answer these servers write here).
async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S) -> Answer {
    let work = async {
        let mut raw = Vec::new();
        let mut byte = [0u8; 1];
        while !raw.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.expect("read the head");
            assert!(n > 0, "the connection closed before a whole head: {:?}", String::from_utf8_lossy(&raw));
            raw.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&raw).into_owned();
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let mut answer = Answer { status, head, body: String::new() };
        let length: usize = answer.header("content-length").and_then(|v| v.parse().ok()).expect("a Content-Length");
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.expect("read the body");
        answer.body = String::from_utf8_lossy(&body).into_owned();
        answer
    };
    timeout(Duration::from_secs(30), work).await.expect("an answer within 30 s")
}

/// Waits (bounded) until the peer closes the connection; returns how long that took. A reset
/// counts as closed.
async fn closed_within<S: AsyncRead + Unpin>(stream: &mut S, within: Duration) -> Duration {
    let start = Instant::now();
    let mut sink = [0u8; 1024];
    loop {
        match timeout(within.saturating_sub(start.elapsed()), stream.read(&mut sink)).await {
            Ok(Ok(0) | Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the connection was still open after {within:?}"),
        }
    }
}

/// Whether the connection is still open after `wait` (no byte, no close, in that time).
async fn still_open_after<S: AsyncRead + Unpin>(stream: &mut S, wait: Duration) -> bool {
    let mut sink = [0u8; 1];
    timeout(wait, stream.read(&mut sink)).await.is_err()
}

async fn send<S: AsyncWrite + Unpin>(stream: &mut S, text: &str) {
    stream.write_all(text.as_bytes()).await.expect("send");
}

fn get(path: &str, host: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

/// A front with short timeouts (header, body, idle in ms) and extra flags.
async fn front(bridge: &TestBridge, timeouts: &str, extra: &[&str]) -> TestFront {
    let mut args = vec!["--test-http-timeouts-ms", timeouts];
    args.extend_from_slice(extra);
    TestFront::start(&bridge.socket, &args).await
}

#[tokio::test]
async fn the_front_cuts_off_a_half_head_after_the_header_timeout_and_logs_its_descriptor_limit() {
    let bridge = TestBridge::start().await;
    let front = front(&bridge, "1000,60000,60000", &[]).await;
    let log = front.log();
    assert!(log.contains("RLIMIT_NOFILE raised") && log.contains("soft="), "{log}");
    let mut stream = TcpStream::connect(front.addr).await.expect("connect");
    send(&mut stream, &format!("POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Ty", front.addr)).await;
    let took = closed_within(&mut stream, Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(800), "closed before the header timeout: {took:?}");
    // A connection that never sends a byte is cut off the same way.
    let mut silent = TcpStream::connect(front.addr).await.expect("connect");
    closed_within(&mut silent, Duration::from_secs(10)).await;
    // And the front still serves.
    let mut fresh = TcpStream::connect(front.addr).await.expect("connect");
    send(&mut fresh, &get("/healthz", &front.addr.to_string(), "")).await;
    assert_eq!(read_answer(&mut fresh).await.status, 200);
}

/// `bridge_httpd::MAX_HEAD_BYTES`: the largest head either server reads.
const MAX_HEAD_BYTES: usize = 16 * 1024;

#[tokio::test]
async fn a_head_past_the_limit_is_answered_431_and_one_within_it_is_served() {
    let bridge = TestBridge::start().await;
    let front = front(&bridge, "10000,60000,60000", &[]).await;
    let host = front.addr.to_string();
    let within = format!("X-Padding: {}\r\n", "a".repeat(MAX_HEAD_BYTES - 1024));
    let mut stream = TcpStream::connect(front.addr).await.expect("connect");
    send(&mut stream, &get("/healthz", &host, &within)).await;
    assert_eq!(read_answer(&mut stream).await.status, 200, "a head within the limit");
    let past = format!("X-Padding: {}\r\n", "a".repeat(MAX_HEAD_BYTES + 1024));
    let mut stream = TcpStream::connect(front.addr).await.expect("connect");
    send(&mut stream, &get("/healthz", &host, &past)).await;
    let mut answer = Vec::new();
    let _ = timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await.expect("closed in time");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "a head past the limit: {answer}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_not_the_header_one() {
    let bridge = TestBridge::start().await;
    let host = |f: &TestFront| f.addr.to_string();
    // Idle 1 s: closed soon after its answer.
    let short = front(&bridge, "60000,60000,1000", &[]).await;
    let mut stream = TcpStream::connect(short.addr).await.expect("connect");
    send(&mut stream, &get("/healthz", &host(&short), "")).await;
    assert_eq!(read_answer(&mut stream).await.status, 200);
    let took = closed_within(&mut stream, Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(800), "closed before the idle timeout: {took:?}");
    // Header 1 s, idle 60 s: the idle spell is not cut at the header timeout (hyper's own
    // header timer would), and the connection serves its next request.
    let long = front(&bridge, "1000,60000,60000", &[]).await;
    let mut stream = TcpStream::connect(long.addr).await.expect("connect");
    send(&mut stream, &get("/healthz", &host(&long), "")).await;
    assert_eq!(read_answer(&mut stream).await.status, 200);
    assert!(still_open_after(&mut stream, Duration::from_millis(2500)).await, "idle closed at the header timeout");
    send(&mut stream, &get("/healthz", &host(&long), "")).await;
    assert_eq!(read_answer(&mut stream).await.status, 200);
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_closed() {
    let bridge = TestBridge::start().await;
    let front = front(&bridge, "60000,1000,60000", &[]).await;
    let mut stream = TcpStream::connect(front.addr).await.expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 200\r\n\r\n{{\"jsonrpc\":",
        front.addr
    );
    send(&mut stream, &head).await;
    let answer = read_answer(&mut stream).await;
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    let body: Value = serde_json::from_str(&answer.body).expect("a JSON-RPC error");
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("did not arrive in time")), "{body}");
    closed_within(&mut stream, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn past_the_connection_cap_a_new_connection_gets_503_and_the_open_ones_still_work() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &["--max-connections", "4"]).await;
    let host = front.addr.to_string();
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(front.addr).await.expect("connect");
        send(&mut stream, &get("/healthz", &host, "")).await;
        assert_eq!(read_answer(&mut stream).await.status, 200);
        open.push(stream);
    }
    let mut extra = TcpStream::connect(front.addr).await.expect("the fifth connection is accepted");
    send(&mut extra, &get("/healthz", &host, "")).await;
    let refused = read_answer(&mut extra).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    let body: Value = serde_json::from_str(&refused.body).expect("a JSON-RPC error");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("too many connections")), "{body}");
    closed_within(&mut extra, Duration::from_secs(5)).await;
    // The open connections are served as before.
    for stream in &mut open {
        send(stream, &get("/healthz", &host, "")).await;
        assert_eq!(read_answer(stream).await.status, 200);
    }
    // Once one closes, a new connection is served again (the slot frees when the front sees
    // the close: bounded poll).
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = TcpStream::connect(front.addr).await.expect("connect");
        send(&mut stream, &get("/healthz", &host, "Connection: close\r\n")).await;
        let answer = read_answer(&mut stream).await;
        if answer.status == 200 {
            break;
        }
        assert_eq!(answer.status, 503);
        assert!(Instant::now() < deadline, "no connection served after one closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn past_the_inflight_cap_a_request_gets_503_while_long_polls_hold_it() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &["--max-inflight-requests", "2"]).await;
    let key = bridge.create_key("poller", "operator").await;
    let auth = format!("Bearer {key}");
    let call = |name: &str, arguments: Value| json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
    let submit = call("submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": "wait:60" }));
    let submitted = front.post(&[("Authorization", &auth)], &submit).await.json();
    let task = submitted["result"]["structuredContent"]["task_id"].as_str().expect("a task id").to_owned();
    // Running, so nothing changes until the cancel below: each long poll holds its slot.
    bridge.wait_status(&task, "running").await;
    let poll = call("get_agent_task", json!({ "task_id": task, "wait_seconds": 20 }));
    let spawn_poller = || {
        let (addr, auth, poll) = (front.addr, auth.clone(), poll.to_string());
        tokio::spawn(async move {
            let headers = [
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ];
            e2e::front::http(addr, "POST", "/mcp", &headers, poll.as_bytes()).await
        })
    };
    let mut pollers = vec![spawn_poller(), spawn_poller()];
    // A probe is refused once both long polls hold the two slots; a poller that lost the race
    // to a probe (503) is started again, and none may end early.
    let deadline = Instant::now() + Duration::from_secs(15);
    let refused = loop {
        for poller in &mut pollers {
            if poller.is_finished() {
                let answer = std::mem::replace(poller, spawn_poller()).await.expect("join");
                assert_eq!(answer.status, 503, "a long poll ended early: {answer:?}");
            }
        }
        let answer = e2e::front::http(front.addr, "GET", "/healthz", &[], b"").await;
        if answer.status == 503 {
            assert!(answer.header("retry-after").is_some(), "{answer:?}");
            break answer;
        }
        assert!(Instant::now() < deadline, "no 503 while two long polls hold the cap: {answer:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let body = refused.json();
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("too many requests in flight")), "{body}");
    // Cancelling the task ends the long polls, and the front serves again.
    let cancel = call("cancel_agent_task", json!({ "task_id": task }));
    let _ = front.post(&[("Authorization", &auth)], &cancel).await;
    for poller in pollers {
        let answer = poller.await.expect("join");
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    assert_eq!(front.http("GET", "/healthz", &[], b"").await.status, 200);
}

/// A board token from the CLI (the `--json` answer).
fn board_token(b: &TestBridge) -> Value {
    let out = b.cli(&["board", "token", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Logs in on the board over `stream`; returns the cookie.
async fn board_login<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, host: &str, token: &str) -> String {
    let body = format!("token={token}");
    let request = format!(
        "POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    send(stream, &request).await;
    let answer = read_answer(stream).await;
    assert_eq!(answer.status, 303, "{answer:?}");
    answer.header("set-cookie").expect("a cookie").split(';').next().expect("name=value").to_owned()
}

#[tokio::test]
async fn the_board_serves_on_a_unix_socket_for_any_local_port_and_refuses_a_foreign_host() {
    let dir = tempfile::Builder::new().prefix("ab-board-").tempdir().expect("temp dir");
    let socket = dir.path().canonicalize().expect("canonical").join("board/board.sock");
    let b =
        TestBridge::start_with(Options::default().with(&format!("SERVERFS_BOARD_SOCKET={}", socket.display()))).await;
    let mode = std::fs::metadata(&socket).expect("the board socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    let dir_mode = std::fs::metadata(socket.parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o077, 0, "directory mode {dir_mode:o}");
    assert!(b.log().contains("the board is listening on a Unix socket"), "{}", b.log());
    let v = board_token(&b);
    assert_eq!(v["board_socket"], socket.display().to_string(), "{v}");
    assert!(v["login_url"].is_null(), "no TCP board: {v}");
    let out = b.cli(&["board", "token"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("ssh -L 8080:{}", socket.display())), "{text}");

    let token = v["token"].as_str().expect("token");
    let mut stream = UnixStream::connect(&socket).await.expect("connect to the board socket");
    send(&mut stream, &get("/login", "localhost:12345", "")).await;
    let page = read_answer(&mut stream).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("name=\"token\""), "{}", page.body);
    let cookie = board_login(&mut stream, "localhost:12345", token).await;
    send(&mut stream, &get("/", "127.0.0.1:4444", &format!("Cookie: {cookie}\r\n"))).await;
    let home = read_answer(&mut stream).await;
    assert_eq!(home.status, 200, "{home:?}");
    assert!(home.body.contains("data-pulse"), "a logged-in page");
    for foreign in ["evil.example:12345", "localhost.evil.example:80", "127.0.0.2:12345"] {
        send(&mut stream, &get("/login", foreign, "")).await;
        assert_eq!(read_answer(&mut stream).await.status, 421, "Host {foreign}");
    }
    // A POST whose Origin is not http:// + its Host is refused.
    let request = "POST /logout HTTP/1.1\r\nHost: localhost:12345\r\nOrigin: http://localhost:9999\r\n\
                   Content-Length: 0\r\n\r\n";
    send(&mut stream, request).await;
    assert_eq!(read_answer(&mut stream).await.status, 403);
}

#[tokio::test]
async fn the_board_refuses_connections_and_long_polls_past_its_caps_and_cuts_off_a_half_head() {
    let b = TestBridge::start().await;
    let v = board_token(&b);
    let addr =
        v["login_url"].as_str().expect("url").trim_start_matches("http://").trim_end_matches("/login").to_owned();
    let mut first = TcpStream::connect(&addr).await.expect("connect");
    let cookie = board_login(&mut first, &addr, v["token"].as_str().expect("token")).await;
    let cookie_line = format!("Cookie: {cookie}\r\n");
    send(&mut first, &get("/live?since=none", &addr, &cookie_line)).await;
    let pulse = serde_json::from_str::<Value>(&read_answer(&mut first).await.body).expect("json")["pulse"].clone();
    // 64 long polls fill the in-flight cap; the next request is refused. A poll that lost the
    // race to a probe (503) is sent again; none may end early.
    let spawn_poll = || {
        let (addr, request) = (addr.clone(), get(&format!("/live?since={pulse}"), &addr, &cookie_line));
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            send(&mut stream, &request).await;
            read_answer(&mut stream).await
        })
    };
    let mut polls: Vec<_> = (0..64).map(|_| spawn_poll()).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        for poll in &mut polls {
            if poll.is_finished() {
                let answer = std::mem::replace(poll, spawn_poll()).await.expect("join");
                assert_eq!(answer.status, 503, "a long poll ended early: {answer:?}");
            }
        }
        send(&mut first, &get("/login", &addr, "")).await;
        let answer = read_answer(&mut first).await;
        if answer.status == 503 {
            assert_eq!(answer.header("retry-after"), Some("1"));
            assert!(answer.body.contains("too many requests in flight"), "{}", answer.body);
            break;
        }
        assert_eq!(answer.status, 200);
        assert!(Instant::now() < deadline, "no 503 with 64 long polls in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 66 connections are open; up to 128 are accepted, the next is refused.
    let mut idle = Vec::new();
    for _ in 0..(128 - 66) {
        idle.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut extra = TcpStream::connect(&addr).await.expect("accepted");
        send(&mut extra, &get("/login", &addr, "")).await;
        let answer = read_answer(&mut extra).await;
        // Until the last idle connection is counted, this one may be served (and then hold a slot).
        if answer.status == 503 && answer.header("connection") == Some("close") {
            assert_eq!(answer.header("retry-after"), Some("1"));
            closed_within(&mut extra, Duration::from_secs(5)).await;
            break;
        }
        idle.push(extra);
        assert!(Instant::now() < deadline, "no 503 past 128 connections");
    }
    // The silent connections were given a head's time (10 s) and are cut off.
    closed_within(&mut idle[0], Duration::from_secs(20)).await;
    for poll in polls {
        poll.abort();
    }
}
