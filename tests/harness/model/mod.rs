//! Scripted model servers for the real CLIs: a small HTTP/1.1 server on 127.0.0.1 that
//! answers like the OpenAI Responses API (for Codex, [`responses`]) or the Anthropic Messages
//! API (for Claude Code, [`messages`]) and keeps a log of every request.
//!
//! Replies are chosen from the request alone (trigger words in the last user message, or a
//! tool result at the end of the conversation), so a resumed session or a retry needs no
//! server state. One request per connection (`Connection: close`); bodies may be sized or
//! chunked. Loopback only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub mod messages;
pub mod responses;

/// One logged request.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST`, `GET`, …
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`null` if it is not JSON).
    pub body: Value,
    /// When the whole request had arrived (the task benchmark times an agent's start by it).
    pub at: std::time::Instant,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// What to answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A JSON body with a status.
    Json(u16, Value),
    /// Server-sent events `(event, data)`, with a pause before each event.
    Sse(Vec<(String, Value)>, Duration),
}

type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A running scripted server; stops when dropped.
pub struct ModelServer {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Request>>>,
    accept: JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ModelServer {
    /// Starts a server that answers with `script`.
    pub async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let accept = tokio::spawn({
            let log = Arc::clone(&log);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, Arc::clone(&script), Arc::clone(&log)));
                }
            }
        });
        ModelServer { addr, log, accept }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().expect("request log").clone()
    }

    /// The model requests (POSTs whose path contains `needle`), in order.
    pub fn posts(&self, needle: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.method == "POST" && r.path.contains(needle)).collect()
    }
}

async fn serve(mut stream: TcpStream, script: Script, log: Arc<Mutex<Vec<Request>>>) {
    let Some(request) = read_request(&mut stream).await else { return };
    let reply = script(&request);
    if let Ok(mut log) = log.lock() {
        log.push(request);
    }
    let _ = write_reply(&mut stream, reply).await;
}

/// Reads one request (head, then a sized or chunked body), bounded to 64 MiB.
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 1 << 20 || read_more(stream, &mut buf).await? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut rest = buf.split_off(head_end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let body = if get("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        read_chunked(stream, rest).await?
    } else {
        let len: usize = get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
        if len > 64 << 20 {
            return None;
        }
        while rest.len() < len {
            if read_more(stream, &mut rest).await? == 0 {
                return None;
            }
        }
        rest.truncate(len);
        rest
    };
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Request { method, path, headers, body, at: std::time::Instant::now() })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 16384];
    let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await.ok()?.ok()?;
    buf.extend_from_slice(&chunk[..n]);
    Some(n)
}

async fn read_chunked(stream: &mut TcpStream, mut buf: Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            if read_more(stream, &mut buf).await? == 0 {
                return None;
            }
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            return Some(body);
        }
        while buf.len() < size + 2 {
            if read_more(stream, &mut buf).await? == 0 {
                return None;
            }
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
        if body.len() > 64 << 20 {
            return None;
        }
    }
}

async fn write_reply(stream: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Json(status, body) => {
            let body = body.to_string();
            let head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                if status < 300 { "OK" } else { "Error" },
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
        }
        Reply::Sse(events, pause) => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
            stream.write_all(head.as_bytes()).await?;
            for (event, data) in events {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                stream.write_all(format!("event: {event}\ndata: {data}\n\n").as_bytes()).await?;
                stream.flush().await?;
            }
        }
    }
    stream.shutdown().await
}

/// The text after `trigger` in `text` (to the end of its line), if `text` contains it.
pub fn after<'a>(text: &'a str, trigger: &str) -> Option<&'a str> {
    let start = text.find(trigger)? + trigger.len();
    Some(text[start..].lines().next().unwrap_or("").trim())
}

/// A 404 for anything the script does not know.
pub fn not_found() -> Reply {
    Reply::Json(404, json!({ "error": { "type": "not_found", "message": "the scripted server does not serve this" } }))
}
