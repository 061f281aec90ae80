//! Load through the front: `tools/call get_agent_task` over HTTP (keep-alive, one connection
//! per client) through the real `mcp-front` and `agent-bridge` at 1, 16 and 64 concurrent
//! clients, beside the same call on the bridge socket alone (one connection per client), with
//! the front's overhead as a ratio and its resident memory under that load; then the same call
//! on `/mcp` with an API key beside `/mcp-oauth` with an RS256 JWT access token (the stand-in
//! IdP's keys cached after the first call), with the bridge's CPU time per call for each: the
//! difference is what validating a token costs.
//!
//! Run: `cargo build --release -p agent-bridge && cargo bench -p mcp-front --bench front`.
//! Figures depend on the machine; compare the ratios of one run, not absolute numbers.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the front"
)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use bridge_proto::client::Connection;
use bridge_proto::methods::{self, CallParams, Surface};
use e2e::TestBridge;
use e2e::front::TestFront;

/// One keep-alive HTTP/1.1 connection to the front.
struct HttpClient {
    stream: BufReader<TcpStream>,
    head: String,
}

impl HttpClient {
    async fn connect(addr: SocketAddr, path: &str) -> HttpClient {
        let stream = TcpStream::connect(addr).await.expect("connect to the front");
        stream.set_nodelay(true).expect("nodelay");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        );
        HttpClient { stream: BufReader::new(stream), head }
    }

    /// Posts `body` with `Authorization: Bearer <credential>` and returns the response body.
    async fn post(&mut self, credential: &str, body: &[u8]) -> Vec<u8> {
        let request =
            format!("{}Authorization: Bearer {credential}\r\nContent-Length: {}\r\n\r\n", self.head, body.len());
        let inner = self.stream.get_mut();
        inner.write_all(request.as_bytes()).await.expect("send head");
        inner.write_all(body).await.expect("send body");
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.expect("read head");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().expect("content-length");
            }
        }
        let mut out = vec![0; length];
        self.stream.read_exact(&mut out).await.expect("read body");
        out
    }
}

struct Run {
    latencies: Vec<Duration>,
    wall: Duration,
}

async fn through_front(addr: SocketAddr, key: &str, clients: usize, calls: usize, task_id: &str) -> Run {
    through_path(addr, "/mcp", &[key.to_owned()], clients, calls, task_id).await
}

/// `clients` connections to `path`, each making `calls` calls, the credentials taken in turn.
async fn through_path(
    addr: SocketAddr,
    path: &str,
    credentials: &[String],
    clients: usize,
    calls: usize,
    task_id: &str,
) -> Run {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "get_agent_task", "arguments": { "task_id": task_id } } })
    .to_string();
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..clients {
        let (path, credentials, body) = (path.to_owned(), credentials.to_vec(), body.clone());
        handles.push(tokio::spawn(async move {
            let mut client = HttpClient::connect(addr, &path).await;
            let mut latencies = Vec::with_capacity(calls);
            for i in 0..calls {
                let credential = &credentials[(c * calls + i) % credentials.len()];
                let t = Instant::now();
                let reply = client.post(credential, body.as_bytes()).await;
                latencies.push(t.elapsed());
                let ok = b"\"isError\":false";
                assert!(
                    reply.windows(ok.len()).any(|w| w == ok),
                    "{}",
                    String::from_utf8_lossy(&reply[..reply.len().min(300)])
                );
            }
            latencies
        }));
    }
    collect(handles, started).await
}

async fn on_socket(bridge: &TestBridge, key: &str, clients: usize, calls: usize, task_id: &str) -> Run {
    let Value::Object(arguments) = json!({ "task_id": task_id }) else { unreachable!() };
    let params = CallParams {
        credential: Some(format!("Bearer {key}")),
        surface: Surface::Mcp,
        path: Default::default(),
        client: None,
        name: "get_agent_task".into(),
        arguments,
    };
    let Ok(Value::Object(params)) = serde_json::to_value(params) else { unreachable!() };
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (socket, params): (_, Map<String, Value>) = (bridge.socket.clone(), params.clone());
        handles.push(tokio::spawn(async move {
            let mut conn = Connection::connect(&socket).await.expect("connect");
            let mut latencies = Vec::with_capacity(calls);
            for _ in 0..calls {
                let t = Instant::now();
                conn.call(methods::CAPABILITIES_CALL, params.clone()).await.expect("call");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    collect(handles, started).await
}

async fn collect(handles: Vec<tokio::task::JoinHandle<Vec<Duration>>>, started: Instant) -> Run {
    let mut latencies = Vec::new();
    for h in handles {
        latencies.extend(h.await.expect("client"));
    }
    latencies.sort();
    Run { latencies, wall: started.elapsed() }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn rate(r: &Run) -> f64 {
    r.latencies.len() as f64 / r.wall.as_secs_f64()
}

fn line(label: &str, clients: usize, r: &Run) -> String {
    format!(
        "{label:<14} clients {clients:>2}  calls {:>5}  p50 {:>8.1} µs  p99 {:>8.1} µs  {:>8.0} calls/s",
        r.latencies.len(),
        percentile(&r.latencies, 0.50).as_secs_f64() * 1e6,
        percentile(&r.latencies, 0.99).as_secs_f64() * 1e6,
        rate(r)
    )
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User plus system CPU time of a process so far (`/proc/PID/stat`, clock ticks of 10 ms).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_comm.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the command name.
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The RS256 test key the bridge's own OAuth tests use (a test-only key).
const TEST_KEY: &[u8] = include_bytes!("../../bridge/src/oauth/testdata/rsa.pem");

/// A front and bridge with `/mcp-oauth` on, trusting a stand-in IdP that publishes
/// [`TEST_KEY`]; returns them with `count` distinct tokens (by `jti`) for `oauth:bench`
/// (operator).
async fn oauth_stack(count: usize) -> (TestBridge, TestFront, Vec<String>, tokio::task::JoinHandle<()>) {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
    let idp = std::sync::Arc::new(e2e::idp::StandinIdp::default());
    let (issuer, server) = idp.serve().await;
    let key = EncodingKey::from_rsa_pem(TEST_KEY).expect("the test key");
    let mut jwk = serde_json::to_value(Jwk::from_encoding_key(&key, Algorithm::RS256).expect("jwk")).expect("jwk");
    jwk["kid"] = json!("bench-1");
    idp.publish(&issuer, &[jwk]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let resource = format!("http://127.0.0.1:{port}/mcp-oauth");
    let bridge = TestBridge::start_with(
        e2e::Options::default()
            .with(&format!("SERVERFS_MCP_OAUTH_ISSUER={issuer}"))
            .with(&format!("SERVERFS_MCP_OAUTH_RESOURCE={resource}")),
    )
    .await;
    let listen = format!("127.0.0.1:{port}");
    let front =
        TestFront::start_bin(env!("CARGO_BIN_EXE_mcp-front").as_ref(), &bridge.socket, &["--listen", &listen]).await;
    let now = jsonwebtoken::get_current_timestamp();
    let header = Header { kid: Some("bench-1".into()), ..Header::new(Algorithm::RS256) };
    let tokens = (0..count)
        .map(|jti| {
            let claims = json!({"iss": issuer, "aud": resource, "sub": "bench", "exp": now + 3600,
                                "scope": "agent-bridge:operator", "jti": jti});
            jsonwebtoken::encode(&header, &claims, &key).expect("sign")
        })
        .collect();
    (bridge, front, tokens, server)
}

/// A task of the caller's own through the front, finished.
async fn own_task(front: &TestFront, bridge: &TestBridge, path: &str, credential: &str) -> String {
    let mut client = HttpClient::connect(front.addr, path).await;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "submit_agent_task",
        "arguments": { "runtime": "fake", "workdir": "repo", "prompt": "complete:bench" } } });
    let reply: Value =
        serde_json::from_slice(&client.post(credential, body.to_string().as_bytes()).await).expect("JSON");
    let task_id = reply["result"]["structuredContent"]["task_id"].as_str().expect("a task id").to_owned();
    bridge.wait_terminal(&task_id).await;
    task_id
}

/// `/mcp` with a key beside `/mcp-oauth` with one token (remembered after its first check)
/// and with a new token each call (each one's signature checked), on one stack: latency, rate
/// and the bridge's CPU per call. The IdP's keys are cached after the first call.
async fn keys_beside_tokens() {
    const FRESH: usize = 2000;
    let (bridge, front, tokens, _idp) = oauth_stack(1 + 2 * FRESH).await;
    let key = bridge.create_key("bench", "operator").await;
    let bridge_pid = bridge.pid().expect("bridge pid");
    let key_task = own_task(&front, &bridge, "/mcp", &key).await;
    let token_task = own_task(&front, &bridge, "/mcp-oauth", &tokens[0]).await;
    let (key, one) = (vec![key], vec![tokens[0].clone()]);
    through_path(front.addr, "/mcp", &key, 4, 200, &key_task).await;
    through_path(front.addr, "/mcp-oauth", &one, 4, 200, &token_task).await;
    for (round, (clients, calls)) in [(1usize, FRESH), (16, FRESH / 16)].into_iter().enumerate() {
        // Tokens no earlier call used: every call of this run checks a signature.
        let fresh = tokens[1 + round * FRESH..1 + (round + 1) * FRESH].to_vec();
        let mut cpu = Vec::new();
        for (label, path, credentials, task) in [
            ("API key", "/mcp", &key, &key_task),
            ("JWT, one", "/mcp-oauth", &one, &token_task),
            ("JWT, each new", "/mcp-oauth", &fresh, &token_task),
        ] {
            let before = cpu_time(bridge_pid);
            let run = through_path(front.addr, path, credentials, clients, calls, task).await;
            let per_call = (cpu_time(bridge_pid) - before).as_secs_f64() * 1e6 / run.latencies.len() as f64;
            say(&format!("{}  bridge CPU {per_call:>6.1} µs/call", line(label, clients, &run)));
            cpu.push(per_call);
        }
        say(&format!(
            "  bridge CPU per call vs a key: a remembered token x{:.2} ({:+.1} µs), a new token x{:.2} ({:+.1} µs)",
            cpu[1] / cpu[0],
            cpu[1] - cpu[0],
            cpu[2] / cpu[0],
            cpu[2] - cpu[0]
        ));
    }
}

fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{text}");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let bridge = TestBridge::start().await;
        let front = TestFront::start_bin(env!("CARGO_BIN_EXE_mcp-front").as_ref(), &bridge.socket, &[]).await;
        let pid = front.pid().expect("front pid");
        let key = bridge.create_key("bench", "operator").await;
        let submitted = bridge
            .call_mcp(Some(&key), "submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": "complete:bench" }))
            .await
            .expect("submit");
        let task_id = submitted["task_id"].as_str().expect("task id").to_owned();
        bridge.wait_terminal(&task_id).await;
        let (idle, _) = rss_kib(pid);
        // Warm up both paths.
        through_front(front.addr, &key, 4, 200, &task_id).await;
        on_socket(&bridge, &key, 4, 200, &task_id).await;
        say(&format!("mcp-front RSS idle: {} KiB", idle));
        for (clients, calls) in [(1usize, 2000usize), (16, 250), (64, 80)] {
            let socket = on_socket(&bridge, &key, clients, calls, &task_id).await;
            let front_run = through_front(front.addr, &key, clients, calls, &task_id).await;
            let (rss, peak) = rss_kib(pid);
            say(&line("bridge socket", clients, &socket));
            say(&line("front + bridge", clients, &front_run));
            say(&format!(
                "  overhead: p50 x{:.2}, throughput x{:.2} of the socket alone; mcp-front RSS {rss} KiB (peak {peak} KiB)",
                percentile(&front_run.latencies, 0.5).as_secs_f64() / percentile(&socket.latencies, 0.5).as_secs_f64(),
                rate(&front_run) / rate(&socket),
            ));
        }
        keys_beside_tokens().await;
    });
}
