//! What `calls` sends and how: the cycle of requests built once before the load (an MCP
//! `tools/call get_agent_task` over HTTP, or a `capabilities.call` line for the bridge's socket),
//! a lean HTTP/1.1 keep-alive client (one reused buffer, `Content-Length` or chunked answers,
//! `TCP_NODELAY`) and a lean NDJSON line client.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use bridge_proto::envelope::Request;
use bridge_proto::methods::{self, CallParams, McpPath, Surface};

use crate::seed::task_id;

/// The MCP revision the load speaks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The longest answer accepted.
const MAX_ANSWER: usize = 1 << 20;

/// One request of the cycle: its bytes on the wire and what its answer must echo.
pub struct Call {
    /// Everything sent: the HTTP head and body, or the line with its newline.
    pub wire: Vec<u8>,
    /// The JSON-RPC id (or the envelope's `request_id`, the same number as text).
    pub id: u64,
    /// The task asked for.
    pub task_id: String,
}

/// The JSON-RPC body of call `i`: `get_agent_task` of task `i`.
pub fn mcp_body(i: usize) -> Vec<u8> {
    json!({
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": { "name": "get_agent_task", "arguments": { "task_id": task_id(i) } },
    })
    .to_string()
    .into_bytes()
}

/// `POST /mcp` of call `i` to `addr`, with `authorization` (the whole header value) if any.
pub fn mcp_call(i: usize, addr: SocketAddr, authorization: Option<&str>) -> Call {
    let body = mcp_body(i);
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if let Some(value) = authorization {
        head.push_str(&format!("Authorization: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut wire = head.into_bytes();
    wire.extend_from_slice(&body);
    Call { wire, id: i as u64, task_id: task_id(i) }
}

/// The `capabilities.call` line of call `i` as the front sends it (surface `mcp`, path `/mcp`,
/// the caller's `Authorization` value as the credential).
pub fn socket_call(i: usize, authorization: &str) -> Call {
    let mut arguments = Map::new();
    arguments.insert("task_id".into(), Value::String(task_id(i)));
    let params = CallParams {
        credential: Some(authorization.to_owned()),
        surface: Surface::Mcp,
        path: McpPath::Keys,
        client: None,
        name: "get_agent_task".into(),
        arguments,
    };
    let Ok(Value::Object(params)) = serde_json::to_value(params) else { unreachable!("call parameters are an object") };
    let request = Request { request_id: i.to_string(), method: methods::CAPABILITIES_CALL.into(), params };
    Call { wire: request.to_line(), id: i as u64, task_id: task_id(i) }
}

/// One kept-alive HTTP/1.1 connection.
pub struct HttpConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// One HTTP answer, borrowed from the connection's buffer.
pub struct HttpAnswer<'a> {
    /// The status code.
    pub status: u16,
    /// The body (de-chunked).
    pub body: &'a [u8],
    /// Whether the server said `Connection: close`.
    pub closing: bool,
}

impl HttpConn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<HttpConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(HttpConn { stream, buf: Vec::with_capacity(16 * 1024) })
    }

    /// Sends one request (`wire`, head and body) and reads its whole answer.
    pub async fn exchange(&mut self, wire: &[u8]) -> Result<HttpAnswer<'_>, String> {
        self.stream.write_all(wire).await.map_err(|e| format!("send: {e}"))?;
        self.buf.clear();
        let head_end = loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                break at + 4;
            }
            self.fill().await?;
        };
        let (status, length, chunked, closing) = parse_head(&self.buf[..head_end])?;
        let body = match (length, chunked) {
            (Some(length), false) => {
                if length > MAX_ANSWER {
                    return Err(format!("a body of {length} bytes"));
                }
                while self.buf.len() < head_end + length {
                    self.fill().await?;
                }
                head_end..head_end + length
            }
            (None, true) => self.dechunk(head_end).await?,
            _ => {
                let head = String::from_utf8_lossy(&self.buf[..head_end]);
                return Err(format!("an answer with neither Content-Length nor a chunked body: {head:?}"));
            }
        };
        Ok(HttpAnswer { status, body: &self.buf[body], closing })
    }

    /// Reads a chunked body that starts at `start`, and moves the chunks' data together in the
    /// buffer; returns where the data lies.
    async fn dechunk(&mut self, start: usize) -> Result<std::ops::Range<usize>, String> {
        let (mut read, mut written) = (start, start);
        loop {
            let line_end = loop {
                if let Some(at) = find(&self.buf[read..], b"\r\n") {
                    break read + at;
                }
                self.fill().await?;
            };
            let size_text = std::str::from_utf8(&self.buf[read..line_end]).unwrap_or("");
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("a bad chunk size {size_text:?}"))?;
            if written - start + size > MAX_ANSWER {
                return Err("a chunked body over 1 MiB".into());
            }
            let data = line_end + 2;
            while self.buf.len() < data + size + 2 {
                self.fill().await?;
            }
            if &self.buf[data + size..data + size + 2] != b"\r\n" {
                return Err("a chunk without its CRLF".into());
            }
            self.buf.copy_within(data..data + size, written);
            written += size;
            read = data + size + 2;
            if size == 0 {
                return Ok(start..written);
            }
        }
    }

    async fn fill(&mut self) -> Result<(), String> {
        if self.buf.len() > MAX_ANSWER + 64 * 1024 {
            return Err("an answer over 1 MiB".into());
        }
        self.buf.reserve(8 * 1024);
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err("the server closed the connection mid-answer".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("read: {e}")),
        }
    }
}

/// The status, `Content-Length`, whether chunked and whether `Connection: close` of a head.
fn parse_head(head: &[u8]) -> Result<(u16, Option<usize>, bool, bool), String> {
    let head = std::str::from_utf8(head).map_err(|_| "an answer head that is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a bad status line in {head:?}"))?;
    let (mut length, mut chunked, mut closing) = (None, false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| format!("a bad Content-Length {value:?}"))?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            closing = value.eq_ignore_ascii_case("close");
        }
    }
    Ok((status, length, chunked, closing))
}

/// One connection speaking newline-delimited JSON.
pub struct LineConn {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl LineConn {
    /// Connects to the socket at `path`.
    pub async fn connect(path: &Path) -> std::io::Result<LineConn> {
        Ok(LineConn { stream: UnixStream::connect(path).await?, buf: Vec::with_capacity(16 * 1024) })
    }

    /// Sends one line (`wire`, newline included) and reads one line back (newline included).
    pub async fn exchange(&mut self, wire: &[u8]) -> Result<&[u8], String> {
        self.stream.write_all(wire).await.map_err(|e| format!("send: {e}"))?;
        self.buf.clear();
        let mut scanned = 0;
        loop {
            if let Some(at) = self.buf[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + at + 1;
                if end != self.buf.len() {
                    return Err("bytes after the answer line".into());
                }
                return Ok(&self.buf[..end]);
            }
            scanned = self.buf.len();
            if scanned > MAX_ANSWER {
                return Err("an answer line over 1 MiB".into());
            }
            self.buf.reserve(8 * 1024);
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Err("the server closed the connection mid-answer".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|&b| b == first) {
        let at = from + at;
        if haystack[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_finds_the_first_occurrence_only_when_whole() {
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"abcab", b"abd"), None);
        assert_eq!(find(b"\r\n\r\n", b"\r\n\r\n"), Some(0));
        assert_eq!(find(b"", b"a"), None);
    }

    #[test]
    fn requests_carry_their_id_and_task() {
        let call = mcp_call(7, "127.0.0.1:9".parse().expect("addr"), Some("Bearer k"));
        let text = String::from_utf8(call.wire).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head");
        assert!(head.contains("Authorization: Bearer k") && head.contains(&format!("Content-Length: {}", body.len())));
        let body: Value = serde_json::from_str(body).expect("json");
        assert_eq!(body["id"], 7);
        assert_eq!(body["params"]["arguments"]["task_id"], task_id(7));
        let line = socket_call(7, "Bearer k");
        let parsed = Request::parse(line.wire.strip_suffix(b"\n").expect("newline")).expect("a valid envelope");
        assert_eq!(parsed.request_id, "7");
        assert_eq!(parsed.params["arguments"]["task_id"], task_id(7));
    }
}
