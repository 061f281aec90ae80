//! The socket protocol on the wire: raw lines against a real bridge, without the
//! client library, so that what the bridge accepts, answers and refuses is seen byte for byte.
//!
//! Every refused line carries an otherwise valid `submit_agent_task` call wherever the
//! envelope allows one, and the store's row counts are compared before and after: a bridge
//! that acted on a malformed line would create a task and fail the test.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use bridge_proto::MAX_LINE_BYTES;
use e2e::{Options, TestBridge};

/// How long any single answer may take before the test fails (a missing answer must not hang).
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// A raw connection: bytes out, lines in.
struct Raw {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Raw {
    async fn connect(bridge: &TestBridge) -> Raw {
        let stream = UnixStream::connect(&bridge.socket).await.expect("connect to the bridge socket");
        let (read, writer) = stream.into_split();
        Raw { reader: BufReader::new(read), writer }
    }

    /// Sends `line` and its newline.
    async fn send(&mut self, line: &[u8]) {
        self.writer.write_all(line).await.expect("send a line");
        self.writer.write_all(b"\n").await.expect("send a newline");
    }

    /// Reads one response line and checks its envelope.
    async fn recv(&mut self) -> Value {
        let mut line = Vec::new();
        let n = tokio::time::timeout(ANSWER_WITHIN, self.reader.read_until(b'\n', &mut line))
            .await
            .expect("the bridge answers within 20 s")
            .expect("read a response");
        assert!(n > 0, "the bridge closed the connection instead of answering");
        assert_eq!(
            line.last(),
            Some(&b'\n'),
            "a response is one newline-terminated line: {:?}",
            String::from_utf8_lossy(&line)
        );
        let value: Value = serde_json::from_slice(&line[..line.len() - 1])
            .unwrap_or_else(|e| panic!("a response is JSON ({e}): {:?}", String::from_utf8_lossy(&line)));
        check_envelope(&value);
        value
    }

    /// Sends a line and reads its answer.
    async fn ask(&mut self, line: &[u8]) -> Value {
        self.send(line).await;
        self.recv().await
    }

    /// Asserts that `bridge.health` is answered on this connection (it is still usable).
    async fn assert_usable(&mut self, id: &str) {
        let v = self.ask(envelope(id, "bridge.health", json!({})).as_bytes()).await;
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["request_id"], id, "{v}");
        assert_eq!(v["result"]["status"], "ok", "{v}");
    }

    /// Asserts that the bridge closed the connection: the next read ends the stream.
    async fn assert_closed(&mut self) {
        assert_closed(&mut self.reader).await;
    }
}

/// The next read gives end-of-stream. A reset counts as closed too: Linux reports
/// `ECONNRESET` instead of EOF when the bridge closes with bytes of ours still unread,
/// which is exactly the case after an oversized line.
async fn assert_closed(reader: &mut BufReader<OwnedReadHalf>) {
    let mut rest = Vec::new();
    match tokio::time::timeout(ANSWER_WITHIN, reader.read_to_end(&mut rest)).await {
        Ok(Ok(_)) => assert!(
            rest.is_empty(),
            "expected the connection to be closed, got more bytes: {:?}",
            String::from_utf8_lossy(&rest)
        ),
        Ok(Err(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "expected a closed connection, got {e}")
        }
        Err(_) => panic!("the bridge kept the connection open"),
    }
}

/// Exactly `{request_id, ok: true, result}` or `{request_id, ok: false, error: {code, message}}`.
fn check_envelope(v: &Value) {
    let Value::Object(map) = v else { panic!("a response is a JSON object: {v}") };
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    match map.get("ok") {
        Some(Value::Bool(true)) => assert_eq!(keys, ["ok", "request_id", "result"], "{v}"),
        Some(Value::Bool(false)) => {
            assert_eq!(keys, ["error", "ok", "request_id"], "{v}");
            let Value::Object(error) = &map["error"] else { panic!("error is an object: {v}") };
            let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["code", "message"], "{v}");
            assert!(error["code"].is_string() && error["message"].is_string(), "{v}");
        }
        _ => panic!("ok is a boolean: {v}"),
    }
    assert!(map["request_id"].is_string() || map["request_id"].is_null(), "{v}");
}

/// Asserts a refusal with `code`, echoing `request_id` (or `null`).
fn assert_refused(v: &Value, code: &str, request_id: Option<&str>, what: &str) {
    assert_eq!(v["ok"], false, "{what}: {v}");
    assert_eq!(v["error"]["code"], code, "{what}: {v}");
    assert_eq!(v["request_id"], json!(request_id), "{what}: {v}");
}

/// A request line (no newline).
fn envelope(request_id: &str, method: &str, params: Value) -> String {
    json!({ "protocol_version": 1, "request_id": request_id, "method": method, "params": params }).to_string()
}

/// Parameters of a valid `capabilities.call` that submits a (review, so lease-free) fake task.
fn submit_params() -> Value {
    json!({
        "credential": null,
        "surface": "cli",
        "name": "submit_agent_task",
        "arguments": { "runtime": "fake", "workdir": "repo", "prompt": "complete:done", "profile": "review" },
    })
}

fn submit_json() -> String {
    submit_params().to_string()
}

/// `line` (a JSON object) padded with spaces before its closing brace to exactly `len` bytes.
fn padded(line: &str, len: usize) -> Vec<u8> {
    assert!(line.ends_with('}') && line.len() <= len);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&line.as_bytes()[..line.len() - 1]);
    out.resize(len - 1, b' ');
    out.push(b'}');
    assert_eq!(out.len(), len);
    out
}

#[tokio::test]
async fn malformed_lines_are_refused_and_the_connection_stays_usable() {
    let bridge = TestBridge::start().await;
    let before = bridge.store_counts();
    let submit = submit_json();
    let mut utf8 = envelope(
        "m-utf8",
        "capabilities.call",
        json!({ "credential": null, "surface": "cli", "name": "submit_agent_task",
                "arguments": { "runtime": "fake", "workdir": "repo", "prompt": "complete:@@", "profile": "review" } }),
    )
    .into_bytes();
    let at = utf8.windows(2).position(|w| w == b"@@").expect("marker");
    utf8[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "not JSON (cut short)",
            format!(r#"{{"protocol_version":1,"request_id":"m-cut","method":"capabilities.call","params":{submit}"#).into_bytes(),
            None,
        ),
        ("not JSON (a word)", b"hello".to_vec(), None),
        ("an empty line", Vec::new(), None),
        ("NaN", format!(r#"{{"protocol_version":NaN,"request_id":"m-nan","method":"capabilities.call","params":{submit}}}"#).into_bytes(), None),
        ("a JSON array", format!("[{}]", envelope("m-array", "capabilities.call", submit_params())).into_bytes(), None),
        (
            "an extra top-level key",
            format!(r#"{{"protocol_version":1,"request_id":"m-extra","method":"capabilities.call","params":{submit},"priority":1}}"#).into_bytes(),
            Some("m-extra"),
        ),
        (
            "a missing key (params)",
            br#"{"protocol_version":1,"request_id":"m-no-params","method":"bridge.health"}"#.to_vec(),
            Some("m-no-params"),
        ),
        (
            "a missing key (protocol_version)",
            format!(r#"{{"request_id":"m-no-version","method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            Some("m-no-version"),
        ),
        (
            "protocol_version: true",
            format!(r#"{{"protocol_version":true,"request_id":"m-bool","method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            Some("m-bool"),
        ),
        (
            "protocol_version: \"1\"",
            format!(r#"{{"protocol_version":"1","request_id":"m-string","method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            Some("m-string"),
        ),
        (
            "protocol_version: 1.0",
            format!(r#"{{"protocol_version":1.0,"request_id":"m-float","method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            Some("m-float"),
        ),
        (
            "an empty request_id",
            format!(r#"{{"protocol_version":1,"request_id":"","method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            None,
        ),
        (
            "a numeric request_id",
            format!(r#"{{"protocol_version":1,"request_id":7,"method":"capabilities.call","params":{submit}}}"#).into_bytes(),
            None,
        ),
        (
            "params as an array",
            format!(r#"{{"protocol_version":1,"request_id":"m-params-array","method":"capabilities.call","params":[{submit}]}}"#).into_bytes(),
            Some("m-params-array"),
        ),
        ("invalid UTF-8", utf8, None),
        (
            "a duplicated key (same value twice)",
            format!(r#"{{"protocol_version":1,"request_id":"m-dup","method":"capabilities.call","method":"capabilities.call","params":{submit}}}"#)
                .into_bytes(),
            Some("m-dup"),
        ),
        (
            "a duplicated params key",
            format!(r#"{{"protocol_version":1,"request_id":"m-dup-params","method":"capabilities.call","params":{submit},"params":{submit}}}"#)
                .into_bytes(),
            Some("m-dup-params"),
        ),
    ];
    let mut raw = Raw::connect(&bridge).await;
    for (i, (what, line, echo)) in cases.iter().enumerate() {
        let v = raw.ask(line).await;
        assert_refused(&v, "INVALID_REQUEST", *echo, what);
        raw.assert_usable(&format!("h-{i}")).await;
    }
    assert_eq!(bridge.store_counts(), before, "a refused line changed the store");

    // The control: the same call in a valid envelope, on the same connection, does submit.
    let v = raw.ask(envelope("m-valid", "capabilities.call", submit_params()).as_bytes()).await;
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["result"]["task_id"].as_str().is_some_and(|id| id.starts_with("agt_")), "{v}");
    assert_eq!(bridge.count("tasks"), before[0].1 + 1);
}

#[tokio::test]
async fn wrong_version_unknown_method_and_bad_method_params_are_refused() {
    let bridge = TestBridge::start().await;
    let before = bridge.store_counts();
    let submit = submit_json();
    let mut raw = Raw::connect(&bridge).await;

    for (id, version) in [("v2", 2), ("v0", 0), ("v-big", 1_000_000)] {
        let line = format!(
            r#"{{"protocol_version":{version},"request_id":"{id}","method":"capabilities.call","params":{submit}}}"#
        );
        let v = raw.ask(line.as_bytes()).await;
        assert_refused(&v, "PROTOCOL_VERSION_UNSUPPORTED", Some(id), &format!("protocol_version {version}"));
    }
    raw.assert_usable("h-1").await;

    for method in ["capabilities.invoke", "task.submit", "CAPABILITIES.CALL", "bridge.health "] {
        let v = raw.ask(envelope("m-unknown", method, submit_params()).as_bytes()).await;
        assert_refused(&v, "METHOD_NOT_FOUND", Some("m-unknown"), method);
    }
    raw.assert_usable("h-2").await;

    let v = raw.ask(envelope("health-params", "bridge.health", json!({ "verbose": true })).as_bytes()).await;
    assert_refused(&v, "INVALID_REQUEST", Some("health-params"), "bridge.health with params");
    raw.assert_usable("h-3").await;

    let mut params = submit_params();
    params["priority"] = json!("high");
    let v = raw.ask(envelope("call-extra", "capabilities.call", params).as_bytes()).await;
    assert_refused(&v, "INVALID_REQUEST", Some("call-extra"), "capabilities.call with an extra key");
    let mut params = submit_params();
    params.as_object_mut().expect("object").remove("surface");
    let v = raw.ask(envelope("call-missing", "capabilities.call", params).as_bytes()).await;
    assert_refused(&v, "INVALID_REQUEST", Some("call-missing"), "capabilities.call without surface");
    let mut params = submit_params();
    params["arguments"] = json!([params["arguments"].clone()]);
    let v = raw.ask(envelope("call-args-array", "capabilities.call", params).as_bytes()).await;
    assert_refused(&v, "INVALID_REQUEST", Some("call-args-array"), "capabilities.call with arguments as an array");
    let v = raw
        .ask(
            envelope("list-extra", "capabilities.list", json!({ "credential": null, "surface": "cli", "name": "x" }))
                .as_bytes(),
        )
        .await;
    assert_refused(&v, "INVALID_REQUEST", Some("list-extra"), "capabilities.list with an extra key");
    raw.assert_usable("h-4").await;

    assert_eq!(bridge.store_counts(), before, "a refused request changed the store");
}

#[tokio::test]
async fn a_line_over_one_mebibyte_is_refused_and_closes_the_connection() {
    let bridge = TestBridge::start().await;
    let before = bridge.store_counts();
    let call = envelope("big", "capabilities.call", submit_params());

    // One byte over: refused with request_id null (the line is never parsed), then closed.
    let mut raw = Raw::connect(&bridge).await;
    let line = padded(&call, MAX_LINE_BYTES + 1);
    let mut writer = raw.writer;
    let sending = tokio::spawn(async move {
        // The bridge may close before it has read all of it; a failed write is expected then.
        let _ = writer.write_all(&line).await;
        let _ = writer.write_all(b"\n").await;
    });
    let mut reader = raw.reader;
    let v = recv_from(&mut reader).await;
    assert_refused(&v, "REQUEST_TOO_LARGE", None, "a line of 1 MiB + 1 byte");
    assert_closed(&mut reader).await;
    sending.await.expect("writer task");

    // A line that never ends: answered as soon as it passes the limit, without a newline.
    raw = Raw::connect(&bridge).await;
    let mut writer = raw.writer;
    let sending = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let _ = writer.write_all(b"{").await;
        for _ in 0..(MAX_LINE_BYTES / chunk.len() + 4) {
            if writer.write_all(&chunk).await.is_err() {
                break;
            }
        }
        writer
    });
    let mut reader = raw.reader;
    let v = recv_from(&mut reader).await;
    assert_refused(&v, "REQUEST_TOO_LARGE", None, "an endless line");
    assert_closed(&mut reader).await;
    drop(sending.await.expect("writer task"));
    assert_eq!(bridge.store_counts(), before, "an oversized line changed the store");

    // Exactly 1 MiB (newline excluded) is a normal request: the submit is answered and runs.
    let mut raw = Raw::connect(&bridge).await;
    let v = raw.ask(&padded(&call, MAX_LINE_BYTES)).await;
    assert_eq!(v["ok"], true, "a line of exactly 1 MiB is accepted: {v}");
    assert_eq!(v["request_id"], "big");
    assert!(v["result"]["task_id"].is_string(), "{v}");
    raw.assert_usable("after-big").await;
    assert_eq!(bridge.count("tasks"), before[0].1 + 1);
}

async fn recv_from(reader: &mut BufReader<OwnedReadHalf>) -> Value {
    let mut line = Vec::new();
    let n = tokio::time::timeout(ANSWER_WITHIN, reader.read_until(b'\n', &mut line))
        .await
        .expect("the bridge answers within 20 s")
        .expect("read a response");
    assert!(n > 0 && line.ends_with(b"\n"), "expected one response line, got {:?}", String::from_utf8_lossy(&line));
    let v: Value = serde_json::from_slice(&line[..n - 1]).expect("a JSON response");
    check_envelope(&v);
    v
}

#[tokio::test]
async fn responses_have_exactly_the_envelope_keys() {
    let bridge = TestBridge::start().await;
    let mut raw = Raw::connect(&bridge).await;
    let call = |name: &str, arguments: Value| json!({ "credential": null, "surface": "cli", "name": name, "arguments": arguments });
    let lines = [
        (envelope("k-health", "bridge.health", json!({})), true),
        (envelope("k-list", "capabilities.list", json!({ "credential": null, "surface": "cli" })), true),
        (envelope("k-whoami", "capabilities.call", call("whoami", json!({}))), true),
        (envelope("k-unknown-tool", "capabilities.call", call("no_such_tool", json!({}))), false),
        (envelope("k-invalid-arg", "capabilities.call", call("whoami", json!({ "x": 1 }))), false),
        (
            envelope(
                "k-unauthenticated",
                "capabilities.call",
                json!({ "credential": null, "surface": "mcp", "name": "whoami", "arguments": {} }),
            ),
            false,
        ),
        (envelope("k-method", "no.such.method", json!({})), false),
        ("{}".to_owned(), false),
        ("garbage".to_owned(), false),
    ];
    for (line, ok) in &lines {
        // `recv` checks the exact key sets of both shapes (and of `error`).
        let v = raw.ask(line.as_bytes()).await;
        assert_eq!(v["ok"], *ok, "{line} → {v}");
        if let Ok(Value::Object(request)) = serde_json::from_str::<Value>(line)
            && let Some(id) = request.get("request_id")
        {
            assert_eq!(&v["request_id"], id, "{line} → {v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_another_uid_gets_one_refusal_line_before_anything_is_read() {
    let other_uid = nix::unistd::geteuid().as_raw() + 1;
    let bridge =
        TestBridge::start_unready(Options::default().with(&format!("SERVERFS_AGENT_PEER_UID={other_uid}"))).await;

    // Send nothing at all: the refusal still comes, so it was decided before any read.
    let mut raw = Raw::connect(&bridge).await;
    let v = raw.recv().await;
    assert_refused(&v, "PEER_NOT_AUTHORIZED", None, "a peer with another uid");
    raw.assert_closed().await;

    // A request sent anyway is never answered: the only line is the refusal. (The write may
    // fail with EPIPE when the bridge has already closed: that is the refusal, too.)
    let mut raw = Raw::connect(&bridge).await;
    let _ = raw.writer.write_all(format!("{}\n", envelope("p-health", "bridge.health", json!({}))).as_bytes()).await;
    let v = raw.recv().await;
    assert_refused(&v, "PEER_NOT_AUTHORIZED", None, "a peer with another uid that sent a request");
    raw.assert_closed().await;

    // The client library and the CLI report the refusal, whether their request was sent
    // before the bridge closed or failed with EPIPE after (repeated: the order is a race).
    for _ in 0..5 {
        let err = bridge.health().await.expect_err("refused");
        assert_eq!(err.code(), "PEER_NOT_AUTHORIZED", "{err}");
    }
    for _ in 0..3 {
        let out = tokio::task::block_in_place(|| bridge.cli(&["health"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("PEER_NOT_AUTHORIZED: "), "{stderr}");
    }
    assert_eq!(bridge.count("tasks"), 0);
}

#[tokio::test]
async fn the_socket_is_private_to_the_bridge_user() {
    let bridge = TestBridge::start().await;
    let uid = nix::unistd::geteuid().as_raw();
    let socket = std::fs::symlink_metadata(&bridge.socket).expect("socket");
    assert!(socket.file_type().is_socket());
    assert_eq!(socket.permissions().mode() & 0o777, 0o600, "socket mode");
    assert_eq!(socket.uid(), uid);
    let dir = std::fs::symlink_metadata(bridge.socket.parent().expect("socket dir")).expect("socket dir");
    assert!(dir.is_dir());
    assert_eq!(dir.permissions().mode() & 0o777, 0o700, "socket directory mode");
    assert_eq!(dir.uid(), uid);
    let state = std::fs::symlink_metadata(&bridge.state_dir).expect("state dir");
    assert_eq!(state.permissions().mode() & 0o777, 0o700, "state directory mode");
}

#[tokio::test]
async fn a_regular_file_at_the_socket_path_is_never_removed() {
    let bridge = TestBridge::prepare(Options::default());
    let run = bridge.socket.parent().expect("socket dir");
    std::fs::create_dir(run).expect("socket dir");
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(&bridge.socket, "an operator's file\n").expect("plant a file");
    let before = std::fs::metadata(&bridge.socket).expect("file");

    let out = bridge.serve_until_exit(None, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve must refuse: {stderr}");
    assert!(stderr.contains("SOCKET_PATH_IN_USE"), "stderr names SOCKET_PATH_IN_USE:\n{stderr}");
    let after = std::fs::metadata(&bridge.socket).expect("the file is still there");
    assert!(after.is_file());
    assert_eq!(after.ino(), before.ino(), "the file was replaced");
    assert_eq!(std::fs::read_to_string(&bridge.socket).expect("read"), "an operator's file\n");
}

#[tokio::test]
async fn a_live_socket_of_another_process_is_never_removed() {
    let bridge = TestBridge::prepare(Options::default());
    let run = bridge.socket.parent().expect("socket dir");
    std::fs::create_dir(run).expect("socket dir");
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let listener = tokio::net::UnixListener::bind(&bridge.socket).expect("someone else's socket");

    let out = bridge.serve_until_exit(None, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve must refuse: {stderr}");
    assert!(stderr.contains("SOCKET_PATH_IN_USE"), "stderr names SOCKET_PATH_IN_USE:\n{stderr}");
    // The other process still owns its socket: a connection reaches it.
    let _client = UnixStream::connect(&bridge.socket).await.expect("the live socket still answers");
    tokio::time::timeout(ANSWER_WITHIN, listener.accept()).await.expect("accepted in time").expect("accept");
}

#[tokio::test]
async fn a_second_bridge_on_the_same_state_dir_refuses_to_start() {
    let bridge = TestBridge::start().await;
    let socket_before = std::fs::symlink_metadata(&bridge.socket).expect("socket").ino();

    // Same .env: same state dir and same (live) socket.
    let out = bridge.serve_until_exit(None, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second bridge must refuse: {stderr}");
    assert!(stderr.contains("another agent-bridge already runs"), "{stderr}");

    // Another socket directory, same state dir: the instance lock alone refuses it.
    let other_run = bridge.root().join("run2");
    let env = std::fs::read_to_string(&bridge.env_file).expect("env").replace(
        &format!("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={}", bridge.root().join("run").display()),
        &format!("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR={}", other_run.display()),
    );
    assert!(env.contains("run2"));
    let other_env = bridge.root().join("second.env");
    std::fs::write(&other_env, env).expect("write env");
    let out = bridge.serve_until_exit(Some(&other_env), Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second bridge must refuse: {stderr}");
    assert!(stderr.contains("another agent-bridge already runs"), "{stderr}");
    assert!(!other_run.join("bridge.sock").exists(), "the refused bridge bound a socket");

    // The first one is untouched and keeps working.
    assert_eq!(std::fs::symlink_metadata(&bridge.socket).expect("socket").ino(), socket_before);
    let id = bridge.submit("complete:still here").await;
    assert_eq!(bridge.wait_terminal(&id).await["status"], "succeeded");
}

#[tokio::test]
async fn a_stale_socket_left_by_a_killed_bridge_is_replaced() {
    let mut bridge = TestBridge::start().await;
    let id = bridge.submit("complete:before the crash").await;
    bridge.wait_terminal(&id).await;
    bridge.crash().await;

    let stale = std::fs::symlink_metadata(&bridge.socket).expect("SIGKILL leaves the socket file behind");
    assert!(stale.file_type().is_socket());
    let refused =
        std::os::unix::net::UnixStream::connect(&bridge.socket).expect_err("nobody listens on a stale socket");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    bridge.spawn().await;
    let fresh = std::fs::symlink_metadata(&bridge.socket).expect("socket");
    assert!(fresh.file_type().is_socket());
    // (Inode numbers are reused at once on tmpfs, so the log says whether it was replaced.)
    assert!(bridge.log().contains("replaced a stale socket"), "{}", bridge.log());
    assert_eq!(fresh.permissions().mode() & 0o777, 0o600);
    let task = bridge.call("get_agent_task", json!({ "task_id": id })).await.expect("the store survived");
    assert_eq!(task["status"], "succeeded");
}

#[tokio::test]
async fn a_state_dir_open_to_others_is_refused_and_left_alone() {
    let bridge = TestBridge::prepare(Options::default());
    std::fs::create_dir(&bridge.state_dir).expect("state dir");
    std::fs::set_permissions(&bridge.state_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755");

    let out = bridge.serve_until_exit(None, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve must refuse a 0755 state dir: {stderr}");
    assert!(stderr.contains("0755"), "the message names the mode:\n{stderr}");
    assert_eq!(
        std::fs::metadata(&bridge.state_dir).expect("state dir").permissions().mode() & 0o777,
        0o755,
        "the mode was changed"
    );
    assert_eq!(
        std::fs::read_dir(&bridge.state_dir).expect("read state dir").count(),
        0,
        "the refused bridge wrote into the state dir"
    );
    assert!(!bridge.socket.exists(), "the refused bridge bound a socket");
}

/// For a peer of another user, the socket is shared through the peer's group
/// (socket 0660, directory 0750, both in that group) instead of being private.
#[tokio::test]
async fn a_socket_for_another_user_is_shared_through_the_group() {
    use std::os::unix::fs::MetadataExt;
    let other_uid = nix::unistd::geteuid().as_raw() + 1;
    let gid = nix::unistd::getegid().as_raw();
    let bridge = TestBridge::start_unready(
        Options::default()
            .with(&format!("SERVERFS_AGENT_PEER_UID={other_uid}"))
            .with(&format!("SERVERFS_AGENT_PEER_GID={gid}")),
    )
    .await;
    let socket = std::fs::metadata(&bridge.socket).unwrap();
    let dir = std::fs::metadata(bridge.socket.parent().unwrap()).unwrap();
    assert_eq!(socket.mode() & 0o777, 0o660);
    assert_eq!(dir.mode() & 0o777, 0o750);
    assert_eq!((socket.gid(), dir.gid()), (gid, gid));
    // Our own uid is still not the allowed peer: the group opens the file, not the bridge.
    let mut raw = Raw::connect(&bridge).await;
    let v = raw.recv().await;
    assert_refused(&v, "PEER_NOT_AUTHORIZED", None, "the group grants the file, not the call");
}
