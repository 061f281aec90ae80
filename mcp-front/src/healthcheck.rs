//! `mcp-front healthcheck`: asks a running front's `/healthz` and says whether it is healthy.
//!
//! The front's image has no shell and no HTTP client, so a container health check runs the
//! front's own binary. The request is plain HTTP/1.1 on a fresh TCP connection, bounded in
//! time; the answer is healthy only when the status is 200 (the front answers and the bridge
//! behind it answers `bridge.health`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most of an answer read (`/healthz` answers a few hundred bytes).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// The address to ask for a front listening on `listen`: an unspecified IP (`0.0.0.0`, `::`)
/// is asked on the loopback address of the same family.
pub fn target(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// Asks `GET /healthz` on `addr` within `timeout`: `Ok(body)` for a 200, otherwise `Err` with
/// what went wrong (the status and body, or the connection error).
pub async fn check(addr: SocketAddr, timeout: Duration) -> Result<String, String> {
    match tokio::time::timeout(timeout, ask(addr)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer from http://{addr}/healthz within {} s", timeout.as_secs_f64())),
    }
}

async fn ask(addr: SocketAddr) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: mcp-front-healthcheck\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("cannot send to {addr}: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER_BYTES)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("cannot read the answer of {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code.is_empty() {
        return Err(format!("{addr} did not answer HTTP: {:?}", head.chars().take(80).collect::<String>()));
    }
    if code == "200" { Ok(body.trim().to_owned()) } else { Err(format!("{status}: {}", body.trim())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_address_is_asked_on_loopback() {
        let ask = |listen: &str| target(listen.parse().expect("addr")).to_string();
        assert_eq!(ask("0.0.0.0:8765"), "127.0.0.1:8765");
        assert_eq!(ask("[::]:8765"), "[::1]:8765");
        assert_eq!(ask("127.0.0.1:9000"), "127.0.0.1:9000");
        assert_eq!(ask("10.1.2.3:80"), "10.1.2.3:80");
    }

    #[tokio::test]
    async fn a_closed_port_is_unhealthy() {
        // Bind then drop, so the port is (almost certainly) closed.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
        let outcome = check(addr, Duration::from_secs(5)).await;
        assert!(outcome.as_ref().is_err_and(|e| e.contains("cannot connect")), "{outcome:?}");
    }

    #[tokio::test]
    async fn only_a_200_is_healthy() {
        for (answer, healthy) in [
            ("HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n{\"status\":\"ok\"}", true),
            ("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\n{}", false),
            ("SSH-2.0-OpenSSH\r\n", false),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr");
            let server = tokio::spawn(async move {
                let (mut conn, _) = listener.accept().await.expect("accept");
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                conn.write_all(answer.as_bytes()).await.expect("answer");
            });
            let outcome = check(addr, Duration::from_secs(5)).await;
            server.await.expect("server");
            assert_eq!(outcome.is_ok(), healthy, "{answer:?}: {outcome:?}");
        }
    }
}
