//! One client connection of a task's egress proxy: an HTTP/1.1 request head — `CONNECT
//! host:port` (a tunnel, what HTTPS clients send) or a plain request in absolute form
//! (`GET http://host:port/path`) — checked against the task's allowance, resolved and checked
//! again by address, then relayed byte for byte. A refusal is `403` with a reason the client
//! can show, and is reported once per destination.
//!
//! The head is parsed with `httparse` (hyper's own parser) and nothing after it is interpreted:
//! a tunnel carries TLS the proxy cannot read, and a plain request goes out with `Connection:
//! close`, so a second request on the same connection still reaches the same checked host.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::allow::Allow;

/// The largest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its head, and a destination to resolve and accept.
const STEP_LIMIT: Duration = Duration::from_secs(10);
/// Headers a proxy consumes and never forwards.
const HOP_BY_HOP: &[&str] = &["proxy-connection", "proxy-authorization", "connection", "keep-alive"];

/// What happened to one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Relayed to `host:port`.
    Relayed { host: String, port: u16 },
    /// Refused: not allowed (or it resolves only to a place the allowance does not name).
    Denied { host: String, port: u16, why: &'static str },
    /// The request was not one a proxy serves, or the client went away.
    Invalid(String),
    /// Allowed, but the destination could not be reached.
    Unreachable { host: String, port: u16 },
}

/// A parsed request head: the destination, whether it is a tunnel, and the head to send on
/// (for a plain request).
struct Head {
    host: String,
    port: u16,
    tunnel: bool,
    forward: Vec<u8>,
}

/// Serves one client connection to the end.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut client: S, allow: &Allow) -> Outcome {
    let (head, rest) = match tokio::time::timeout(STEP_LIMIT, read_head(&mut client)).await {
        Ok(Ok(read)) => read,
        Ok(Err(why)) => return answer(&mut client, 400, &why, Outcome::Invalid(why.clone())).await,
        Err(_) => return Outcome::Invalid("the request head did not arrive in time".into()),
    };
    let Head { host, port, tunnel, forward } = match parse(&head) {
        Ok(h) => h,
        Err(why) => return answer(&mut client, 400, &why, Outcome::Invalid(why.clone())).await,
    };
    if !allow.permits(&host, port) {
        let why = "not allowed for this task";
        let text = format!(
            "agent-bridge egress: {host}:{port} is {why} (the operator allows hosts with SERVERFS_AGENT_EGRESS_ALLOW)"
        );
        return answer(&mut client, 403, &text, Outcome::Denied { host, port, why }).await;
    }
    let upstream = match tokio::time::timeout(STEP_LIMIT, connect(&host, port, allow)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(Refusal::Local)) => {
            let why = "a local address this task's allowance does not name";
            let text = format!("agent-bridge egress: {host}:{port} resolves to {why}");
            return answer(&mut client, 403, &text, Outcome::Denied { host, port, why }).await;
        }
        Ok(Err(Refusal::Unreachable(e))) => {
            let text = format!("agent-bridge egress: cannot reach {host}:{port}: {e}");
            return answer(&mut client, 502, &text, Outcome::Unreachable { host, port }).await;
        }
        Err(_) => {
            let text = format!("agent-bridge egress: {host}:{port} did not answer in time");
            return answer(&mut client, 504, &text, Outcome::Unreachable { host, port }).await;
        }
    };
    let mut upstream = upstream;
    let started = if tunnel {
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await
    } else {
        upstream.write_all(&forward).await
    };
    if started.is_ok() && upstream.write_all(&rest).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
    Outcome::Relayed { host, port }
}

/// Reads up to and including the blank line that ends the head; returns the head and what
/// came after it.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client.read(&mut chunk).await.map_err(|e| format!("cannot read the request: {e}"))?;
        if n == 0 {
            return Err("the client closed before its request was whole".into());
        }
        let start = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = start + end + 4;
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("the request head is over {MAX_HEAD} bytes"));
        }
    }
}

/// Parses a proxy request head.
fn parse(head: &[u8]) -> Result<Head, String> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("the request head is incomplete".into()),
        Err(e) => return Err(format!("the request head is not HTTP/1.1: {e}")),
    }
    let (method, target) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
    if method == "CONNECT" {
        let uri: http::Uri = target.parse().map_err(|_| format!("CONNECT needs host:port, got {target:?}"))?;
        let (host, port) = match (uri.host(), uri.port_u16()) {
            (Some(h), Some(p)) if uri.scheme().is_none() && uri.path_and_query().is_none() => (h, p),
            _ => return Err(format!("CONNECT needs host:port, got {target:?}")),
        };
        return Ok(Head { host: host.to_owned(), port, tunnel: true, forward: Vec::new() });
    }
    let uri: http::Uri = target.parse().map_err(|_| format!("{target:?} is not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("a proxy takes http:// URLs, or CONNECT for https; got {target:?}"));
    }
    let host = uri.host().ok_or_else(|| format!("{target:?} names no host"))?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forward = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for h in req.headers.iter().filter(|h| !HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n))) {
        forward.extend_from_slice(h.name.as_bytes());
        forward.extend_from_slice(b": ");
        forward.extend_from_slice(h.value);
        forward.extend_from_slice(b"\r\n");
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Head { host, port, tunnel: false, forward })
}

enum Refusal {
    Local,
    Unreachable(std::io::Error),
}

/// Resolves `host` and connects to the first address the allowance lets it reach.
async fn connect(host: &str, port: u16, allow: &Allow) -> Result<TcpStream, Refusal> {
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port)).await.map_err(Refusal::Unreachable)?.collect();
    let reachable: Vec<SocketAddr> = addrs.iter().copied().filter(|a| allow.reaches(host, port, &a.ip())).collect();
    if reachable.is_empty() {
        return Err(if addrs.is_empty() {
            Refusal::Unreachable(std::io::Error::other("the name resolves to no address"))
        } else {
            Refusal::Local
        });
    }
    let mut last = std::io::Error::other("no address");
    for addr in reachable {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(Refusal::Unreachable(last))
}

/// Answers the client with `status` and a one-line reason, and returns `outcome`.
async fn answer<S: AsyncWrite + Unpin>(client: &mut S, status: u16, text: &str, outcome: Outcome) -> Outcome {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        502 => "Bad Gateway",
        _ => "Gateway Timeout",
    };
    let body = format!("{text}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_and_a_plain_request_are_read_and_a_plain_one_goes_out_closed() {
        let h = parse(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n").expect("connect");
        assert_eq!((h.host.as_str(), h.port, h.tunnel), ("api.openai.com", 443, true));
        let h = parse(
            b"POST http://127.0.0.1:8080/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Authorization: secret\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
        )
        .expect("plain");
        assert_eq!((h.host.as_str(), h.port, h.tunnel), ("127.0.0.1", 8080, false));
        let out = String::from_utf8(h.forward).expect("text");
        assert!(out.starts_with("POST /v1/x?y=1 HTTP/1.1\r\n"), "{out}");
        assert!(out.contains("Content-Length: 2\r\n") && out.ends_with("Connection: close\r\n\r\n"), "{out}");
        assert!(!out.contains("Proxy-Authorization") && !out.contains("keep-alive"), "{out}");
        for bad in [
            &b"GET https://x.org/ HTTP/1.1\r\n\r\n"[..],
            b"GET /relative HTTP/1.1\r\n\r\n",
            b"CONNECT x.org HTTP/1.1\r\n\r\n",
            b"CONNECT http://x.org:443 HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01 tls\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?} was accepted", String::from_utf8_lossy(bad));
        }
    }

    proptest::proptest! {
        /// Whatever a client sends, the parser answers without panicking.
        #[test]
        fn any_head_is_answered(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse(&bytes);
        }
    }
}
