//! A raw HTTP/1.1 keep-alive client for the front and the checks that an answer is well-formed:
//! an expected status, a complete body, JSON-RPC 2.0 with `result` or `error`, a tool result
//! whose text is its structured content.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The protocol revision the load speaks (the legacy era: plain JSON-RPC, no `_meta`).
const PROTOCOL_VERSION: &str = "2025-06-18";

/// The longest answer head accepted, and the longest body.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The longest any exchange may take: a 25 s long poll plus the front's 30 s bridge time-out,
/// with room to spare. Longer is "no answer", a failure.
pub const EXCHANGE_LIMIT: Duration = Duration::from_secs(75);

/// One HTTP answer: the e2e harness's own type (status, lowercased headers, whole body).
pub use e2e::front::HttpReply as Reply;

/// How one request on a kept-alive connection ended.
#[derive(Debug)]
pub enum Exchange {
    /// A whole answer.
    Answer(Reply),
    /// The server closed (or reset) the connection before a single byte of answer: the
    /// keep-alive race (a request sent as the server times the connection out), retried on a
    /// new connection.
    ClosedBeforeAnswer,
}

/// One keep-alive connection to the front.
pub struct Conn {
    stream: BufReader<TcpStream>,
    addr: SocketAddr,
    /// Set when the server said `Connection: close`.
    closing: bool,
}

impl Conn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream: BufReader::new(stream), addr, closing: false })
    }

    /// The connection itself (whatever was buffered is dropped).
    pub fn into_stream(self) -> TcpStream {
        self.stream.into_inner()
    }

    /// Whether the server announced that it closes this connection.
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// POSTs a JSON-RPC body to `/mcp` with `authorization` (a whole header value, or none),
    /// bounded by [`EXCHANGE_LIMIT`]. `Err` is a malformed or missing answer.
    pub async fn post(&mut self, authorization: Option<&str>, body: &[u8]) -> Result<Exchange, String> {
        match tokio::time::timeout(EXCHANGE_LIMIT, self.exchange(authorization, body)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer in {} s", EXCHANGE_LIMIT.as_secs())),
        }
    }

    async fn exchange(&mut self, authorization: Option<&str>, body: &[u8]) -> Result<Exchange, String> {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\n\
             Content-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(value) = authorization {
            head.push_str(&format!("Authorization: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        if self.stream.get_mut().write_all(&request).await.is_err() {
            return Ok(Exchange::ClosedBeforeAnswer);
        }
        let mut status_line = String::new();
        match self.stream.read_line(&mut status_line).await {
            Ok(0) | Err(_) if status_line.is_empty() => return Ok(Exchange::ClosedBeforeAnswer),
            Ok(_) => {}
            Err(e) => return Err(format!("connection broke in the status line: {e}")),
        }
        let status = parse_status(&status_line)?;
        let mut headers = Vec::new();
        let mut head_len = status_line.len();
        loop {
            let mut line = String::new();
            match self.stream.read_line(&mut line).await {
                Ok(0) => return Err("connection closed inside the answer's head".to_owned()),
                Ok(n) => head_len += n,
                Err(e) => return Err(format!("connection broke inside the answer's head: {e}")),
            }
            if head_len > MAX_HEAD {
                return Err(format!("an answer head longer than {MAX_HEAD} bytes"));
            }
            if line == "\r\n" {
                break;
            }
            let Some((name, value)) = line.trim_end_matches("\r\n").split_once(':') else {
                return Err(format!("a header line without a colon: {line:?}"));
            };
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let mut reply = Reply { status, headers, body: Vec::new() };
        self.closing = reply.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        reply.body = self.read_body(&reply).await?;
        Ok(Exchange::Answer(reply))
    }

    async fn read_body(&mut self, reply: &Reply) -> Result<Vec<u8>, String> {
        if reply.header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            return self.read_chunked().await;
        }
        if let Some(length) = reply.header("content-length") {
            let length: usize = length.parse().map_err(|_| format!("a bad Content-Length {length:?}"))?;
            if length > MAX_BODY {
                return Err(format!("a body of {length} bytes"));
            }
            let mut body = vec![0; length];
            self.stream.read_exact(&mut body).await.map_err(|e| format!("the body ended early: {e}"))?;
            return Ok(body);
        }
        if self.closing {
            let mut body = Vec::new();
            (&mut self.stream).take(MAX_BODY as u64).read_to_end(&mut body).await.map_err(|e| e.to_string())?;
            return Ok(body);
        }
        Ok(Vec::new())
    }

    async fn read_chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let mut size_line = String::new();
            self.stream.read_line(&mut size_line).await.map_err(|e| format!("chunk size: {e}"))?;
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| format!("a bad chunk size {size_line:?}"))?;
            if body.len() + size > MAX_BODY {
                return Err("a chunked body over the limit".to_owned());
            }
            let mut chunk = vec![0; size + 2];
            self.stream.read_exact(&mut chunk).await.map_err(|e| format!("a chunk ended early: {e}"))?;
            if !chunk.ends_with(b"\r\n") {
                return Err("a chunk without its CRLF".to_owned());
            }
            if size == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
}

fn parse_status(line: &str) -> Result<u16, String> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|s| s.parse::<u16>().ok())) {
        (Some("HTTP/1.1" | "HTTP/1.0"), Some(status)) if (100..600).contains(&status) => Ok(status),
        _ => Err(format!("a bad status line {line:?}")),
    }
}

/// A `tools/call` request body.
pub fn tool_call(id: u64, name: &str, arguments: Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } })
        .to_string()
        .into_bytes()
}

/// What a well-formed answer said.
#[derive(Debug)]
pub enum Outcome {
    /// A tool result: its structured content.
    Result(Value),
    /// A tool error: its code.
    ToolError(String),
    /// A JSON-RPC error: its code.
    RpcError(i64),
    /// A refusal before any tool ran: 401 (with `WWW-Authenticate`) or 503 (with `Retry-After`).
    Refused(u16),
}

impl Outcome {
    /// The label this outcome is counted under.
    pub fn label(&self) -> String {
        match self {
            Outcome::Result(_) => "ok".to_owned(),
            Outcome::ToolError(code) => code.clone(),
            Outcome::RpcError(code) => format!("jsonrpc {code}"),
            Outcome::Refused(status) => format!("http {status}"),
        }
    }
}

/// Checks a reply to the `tools/call` with JSON-RPC id `id`; `Err` says how it is malformed.
pub fn check_tool_reply(reply: &Reply, id: u64) -> Result<Outcome, String> {
    match reply.status {
        200 => {}
        401 if reply.header("www-authenticate").is_some() => return Ok(Outcome::Refused(401)),
        503 if reply.header("retry-after").is_some() => return Ok(Outcome::Refused(503)),
        status => return Err(format!("status {status}: {}", snippet(&reply.body))),
    }
    if !reply.header("content-type").is_some_and(|v| v.starts_with("application/json")) {
        return Err(format!("content type {:?}", reply.header("content-type")));
    }
    let message: Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("not JSON ({e}): {}", snippet(&reply.body)))?;
    if message["jsonrpc"] != "2.0" || message["id"] != json!(id) {
        return Err(format!("not the JSON-RPC 2.0 answer to id {id}: {}", snippet(&reply.body)));
    }
    match (message.get("result"), message.get("error")) {
        (Some(result), None) => check_tool_result(result),
        (None, Some(error)) => match (error["code"].as_i64(), error["message"].as_str()) {
            (Some(code), Some(_)) => Ok(Outcome::RpcError(code)),
            _ => Err(format!("a JSON-RPC error without code and message: {error}")),
        },
        _ => Err(format!("neither result nor error (or both): {}", snippet(&reply.body))),
    }
}

fn check_tool_result(result: &Value) -> Result<Outcome, String> {
    let text = result["content"][0]["text"].as_str().ok_or_else(|| format!("a tool result without text: {result}"))?;
    let structured = &result["structuredContent"];
    if !structured.is_object() {
        return Err(format!("a tool result without structured content: {result}"));
    }
    let parsed: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    match result["isError"].as_bool() {
        Some(false) if &parsed == structured => Ok(Outcome::Result(structured.clone())),
        Some(true) => match structured["error"]["code"].as_str() {
            Some(code) if text.starts_with(code) => Ok(Outcome::ToolError(code.to_owned())),
            _ => Err(format!("a tool error without its code: {result}")),
        },
        _ => Err(format!("a tool result whose text is not its structured content: {result}")),
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: body.to_string().into_bytes(),
        }
    }

    #[test]
    fn a_tool_result_and_a_tool_error_are_well_formed() {
        let ok = json!({ "status": "running" });
        let good = reply(
            200,
            json!({ "jsonrpc": "2.0", "id": 3, "result": { "content": [{ "type": "text", "text": ok.to_string() }], "structuredContent": ok, "isError": false } }),
        );
        assert!(matches!(check_tool_reply(&good, 3), Ok(Outcome::Result(_))));
        assert!(check_tool_reply(&good, 4).is_err(), "another id");
        let err = json!({ "error": { "code": "AGENT_TASK_NOT_FOUND", "message": "m" } });
        let tool_error = reply(
            200,
            json!({ "jsonrpc": "2.0", "id": 3, "result": { "content": [{ "type": "text", "text": "AGENT_TASK_NOT_FOUND: m" }], "structuredContent": err, "isError": true } }),
        );
        assert_eq!(check_tool_reply(&tool_error, 3).map(|o| o.label()), Ok("AGENT_TASK_NOT_FOUND".to_owned()));
    }

    #[test]
    fn malformed_answers_are_caught() {
        assert!(check_tool_reply(&reply(500, json!({})), 1).is_err());
        assert!(check_tool_reply(&reply(401, json!({})), 1).is_err(), "401 without WWW-Authenticate");
        assert!(check_tool_reply(&reply(200, json!({ "jsonrpc": "2.0", "id": 1 })), 1).is_err());
        let mismatch = json!({ "jsonrpc": "2.0", "id": 1, "result": { "content": [{ "type": "text", "text": "{}" }], "structuredContent": { "a": 1 }, "isError": false } });
        assert!(check_tool_reply(&reply(200, mismatch), 1).is_err());
        assert!(parse_status("HTTP/1.1 abc\r\n").is_err());
    }
}
