//! Harness for the MCP front: starts the real `mcp-front` binary on 127.0.0.1 (a port the
//! kernel picks) against a test bridge's socket, and speaks raw HTTP/1.1 to it when a test
//! needs to see exact statuses and headers, or to misbehave on purpose.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The `mcp-front` executable under test: `MCP_FRONT_BIN`, or the one cargo built next to
/// this test binary (checked to be newer than its sources).
pub fn front_bin() -> PathBuf {
    static FRESH: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    crate::built_binary("mcp-front", "MCP_FRONT_BIN", crate::FRONT_SOURCES, &FRESH)
}

/// A running `mcp-front`, killed on drop.
pub struct TestFront {
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://ADDR/mcp`.
    pub url: String,
    dir: TempDir,
    child: Option<Child>,
}

impl TestFront {
    /// Starts a front for the bridge socket `socket` with extra command-line arguments, and
    /// waits (bounded) until it logs its address.
    pub async fn start(socket: &Path, args: &[&str]) -> TestFront {
        TestFront::start_bin(&front_bin(), socket, args).await
    }

    /// [`TestFront::start`] with an explicit executable (benchmarks pass cargo's own path).
    /// `--listen` among `args` replaces the default `127.0.0.1:0`.
    pub async fn start_bin(bin: &Path, socket: &Path, args: &[&str]) -> TestFront {
        TestFront::start_bin_with_env(bin, socket, args, &[]).await
    }

    /// [`TestFront::start_bin`] with extra process environment, set after the harness's own
    /// (`MCP_FRONT_LOG=debug`), so it may override it: a benchmark runs the front at the
    /// production level with `("MCP_FRONT_LOG", "info,rmcp=warn")`.
    pub async fn start_bin_with_env(bin: &Path, socket: &Path, args: &[&str], env: &[(&str, &str)]) -> TestFront {
        let dir = tempfile::Builder::new().prefix("ab-front-").tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("front.log")).expect("log file");
        let listen: &[&str] = if args.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
        let child = Command::new(bin)
            .args(listen)
            .arg("--bridge-socket")
            .arg(socket)
            .args(args)
            .env("MCP_FRONT_LOG", "debug")
            .env_remove("SERVERFS_MCP_LISTEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mcp-front");
        let mut front =
            TestFront { addr: "127.0.0.1:0".parse().expect("addr"), url: String::new(), dir, child: Some(child) };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(url) =
                front.log().lines().find_map(|l| l.split("url=").nth(1)).and_then(|rest| rest.split_whitespace().next())
            {
                front.url = url.to_owned();
                let authority = url.trim_start_matches("http://").trim_end_matches("/mcp");
                front.addr = authority.parse().expect("the front logs an IP:port");
                return front;
            }
            if let Some(status) = front.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("mcp-front exited before it listened ({status}):\n{}", front.log());
            }
            assert!(tokio::time::Instant::now() < deadline, "mcp-front did not listen in 20 s:\n{}", front.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The front's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("front.log")).unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the front is running");
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        tokio::task::spawn_blocking(move || child.wait().expect("wait for the front")).await.expect("join")
    }

    /// One HTTP/1.1 request to this front (see [`http`]).
    pub async fn http(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
        http(self.addr, method, path, headers, body).await
    }

    /// A POST of a JSON body to `/mcp` with the usual MCP headers plus `headers`.
    pub async fn post(&self, headers: &[(&str, &str)], body: &serde_json::Value) -> HttpReply {
        let mut all = vec![("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
        all.extend_from_slice(headers);
        self.http("POST", "/mcp", &all, body.to_string().as_bytes()).await
    }
}

impl Drop for TestFront {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpReply {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

impl HttpReply {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("not JSON ({e}), status {}: {}", self.status, String::from_utf8_lossy(&self.body))
        })
    }
}

/// Sends one request on a fresh connection (`Connection: close`, a `Host` of `addr` unless
/// `headers` names one) and reads the whole answer; bounded to 30 s.
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
    let work = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect to the front");
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            head.push_str(&format!("Host: {addr}\r\n"));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("send head");
        // The front may answer (413) and close before it reads a large body.
        let _ = stream.write_all(body).await;
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
        parse_reply(&raw)
    };
    tokio::time::timeout(Duration::from_secs(30), work).await.expect("the front answered within 30 s")
}

/// Parses a whole HTTP/1.1 answer (head and body, a chunked body decoded).
pub(crate) fn parse_reply(raw: &[u8]) -> HttpReply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    HttpReply { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..(start + size).min(data.len())]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}
