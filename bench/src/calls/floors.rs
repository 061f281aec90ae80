//! The floors `calls` sets ours beside: what an HTTP call costs with nothing in it (a fixed-reply
//! axum router on the front's HTTP server, the hidden `serve-http-floor`), what a socket round trip costs (an NDJSON echo,
//! the hidden `serve-uds-floor`), and what reading one task costs (a SQLite primary-key read in
//! this process, on the load CPU).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::http::header::CONTENT_TYPE;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cpu::Meter;
use crate::load::Sample;
use crate::seed::task_id;

/// The HTTP floor's one answer: a small JSON-RPC tool result.
pub const FIXED_REPLY: &[u8] =
    br#"{"jsonrpc":"2.0","id":0,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}"#;

/// A multi-threaded runtime like the daemons' (sized by the CPU mask the process started with).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")
}

/// Says on stdout that the server is ready (`what`), for the process that started it.
fn ready(what: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{what}").and_then(|()| out.flush()).context("write to stdout")
}

/// `calls serve-http-floor`: `POST /mcp` answers [`FIXED_REPLY`] after reading the body: an
/// axum router on the HTTP server the front itself runs on (`bridge-httpd`, with the front's
/// bounds), so the floor is the front's HTTP layer with nothing in it.
pub fn serve_http_floor(listen: SocketAddr) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::post(|_body: axum::body::Bytes| async {
                ([(CONTENT_TYPE, "application/json")], FIXED_REPLY)
            }),
        );
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("bind {listen}"))?;
        ready(&listener.local_addr()?.to_string())?;
        let server = bridge_httpd::Server {
            name: "http-floor",
            limits: bridge_httpd::Limits::FRONT,
            style: bridge_httpd::Style::JsonRpc,
        };
        bridge_httpd::serve(listener, app, server, tokio_util::sync::CancellationToken::new()).await;
        Ok(())
    })
}

/// `calls serve-uds-floor`: every line read on a connection is written back, one task per
/// connection.
pub fn serve_uds_floor(socket: &Path) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let listener = tokio::net::UnixListener::bind(socket).with_context(|| format!("bind {}", socket.display()))?;
        ready("ready")?;
        loop {
            let (stream, _) = listener.accept().await.context("accept")?;
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let mut line = Vec::with_capacity(4096);
                loop {
                    line.clear();
                    match read.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if write.write_all(&line).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    })
}

/// The SQLite floor: `SELECT * FROM tasks WHERE task_id = ?` (a prepared statement, every
/// column read) over the `tasks` ids of the file at `db`, in turn, on this thread, for `warmup`
/// then `duration`. CPU is this thread's own (`/proc/thread-self/stat`) over the window.
pub fn sqlite_floor(
    db: &Path,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
    meter: &Meter,
) -> anyhow::Result<Sample> {
    let conn = rusqlite::Connection::open(db).with_context(|| format!("open {}", db.display()))?;
    let mut select = conn.prepare("SELECT * FROM tasks WHERE task_id = ?1")?;
    let columns = select.column_count();
    let ids: Vec<String> = (0..tasks).map(task_id).collect();
    let mut read = |id: &str| -> anyhow::Result<usize> {
        let mut rows = select.query([id])?;
        let row = rows.next()?.with_context(|| format!("task {id} is not in the reference's file"))?;
        let mut bytes = 0;
        for c in 0..columns {
            bytes += match row.get_ref(c)? {
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => t.len(),
                _ => 8,
            };
        }
        Ok(bytes)
    };
    let mut n = 0;
    let started = Instant::now();
    while started.elapsed() < warmup {
        read(&ids[n % ids.len()])?;
        n += 1;
    }
    let mut latencies = Vec::with_capacity(1 << 20);
    let before = meter.read(None)?;
    let opened = Instant::now();
    while opened.elapsed() < duration {
        let t = Instant::now();
        std::hint::black_box(read(&ids[n % ids.len()])?);
        latencies.push(t.elapsed().as_nanos() as u64);
        n += 1;
    }
    let wall = opened.elapsed();
    let after = meter.read(None)?;
    latencies.sort_unstable();
    Ok(Sample { calls: latencies.len() as u64, wall, cpu: meter.used(&before, &after), latencies })
}
