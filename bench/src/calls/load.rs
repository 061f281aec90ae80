//! The load generator of `calls`: on this process's one runtime thread (pinned to the load CPU),
//! `connections` kept-alive connections each send the next request of the cycle as soon as the
//! last one is answered; after the warm-up the servers' CPU time is read and the window opens,
//! at its end it is read again. Only calls answered inside the window count; every answer is
//! checked ([`crate::answers`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::task::JoinSet;

use crate::answers::{Expect, FULL_EVERY, check};
use crate::cpu::{Meter, Used};
use crate::wire::{Call, HttpConn, LineConn};

/// How the requests travel.
#[derive(Debug, Clone)]
pub enum Transport {
    /// HTTP/1.1 to this address.
    Http(SocketAddr),
    /// Lines on this Unix socket.
    Line(PathBuf),
}

/// One target's load: where, what (the cycle of requests), and what the answers must be.
pub struct Workload {
    /// Where.
    pub transport: Transport,
    /// The requests, sent in turn and cycled.
    pub calls: Arc<Vec<Call>>,
    /// What every answer must be.
    pub expect: Arc<Expect>,
}

/// How much load, how long.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Concurrent kept-alive connections.
    pub connections: usize,
    /// Load before the window.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Calls answered inside the window.
    pub calls: u64,
    /// The window's length.
    pub wall: Duration,
    /// CPU time over the window: each server process's, and each CPU's busy time.
    pub cpu: Used,
    /// Each counted call's latency, in nanoseconds, sorted.
    pub latencies: Vec<u64>,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

struct Shared {
    phase: AtomicU8,
    next: AtomicUsize,
}

/// Runs `workload` by `plan`, reading the CPU time of `pids` and both CPUs at both ends of
/// the window.
pub async fn run(workload: &Workload, pids: &[u32], meter: &Meter, plan: Plan) -> anyhow::Result<Sample> {
    if workload.calls.is_empty() {
        bail!("no requests to send");
    }
    let shared = Arc::new(Shared { phase: AtomicU8::new(WARMUP), next: AtomicUsize::new(0) });
    let mut set = JoinSet::new();
    for _ in 0..plan.connections {
        let (shared, calls, expect) = (shared.clone(), workload.calls.clone(), workload.expect.clone());
        let conn = match &workload.transport {
            Transport::Http(addr) => Conn::Http {
                conn: HttpConn::connect(*addr).await.with_context(|| format!("connect to {addr}"))?,
                addr: *addr,
            },
            Transport::Line(path) => {
                Conn::Line(LineConn::connect(path).await.with_context(|| format!("connect to {}", path.display()))?)
            }
        };
        set.spawn(drive(shared, conn, calls, expect));
    }
    let started = Instant::now();
    until(&mut set, started + plan.warmup).await?;
    let before = meter.read(Some(pids))?;
    let opened = Instant::now();
    shared.phase.store(MEASURE, Ordering::Relaxed);
    until(&mut set, opened + plan.duration).await?;
    shared.phase.store(STOP, Ordering::Relaxed);
    let after = meter.read(Some(pids))?;
    let wall = opened.elapsed();
    let mut latencies = Vec::new();
    while let Some(joined) = set.join_next().await {
        latencies.extend(joined.context("a connection task")?.map_err(anyhow::Error::msg)?);
    }
    latencies.sort_unstable();
    Ok(Sample { calls: latencies.len() as u64, wall, cpu: meter.used(&before, &after), latencies })
}

/// Waits until `deadline`; a connection that ends before is a failure of the run.
async fn until(set: &mut JoinSet<Result<Vec<u64>, String>>, deadline: Instant) -> anyhow::Result<()> {
    let sleep = tokio::time::sleep_until(deadline.into());
    tokio::pin!(sleep);
    tokio::select! {
        () = &mut sleep => Ok(()),
        ended = set.join_next() => {
            set.abort_all();
            match ended {
                Some(Ok(Err(what))) => bail!("{what}"),
                Some(Err(e)) => bail!("a connection task failed: {e}"),
                Some(Ok(Ok(_))) | None => bail!("a connection ended before the run did"),
            }
        }
    }
}

impl Shared {
    /// The next request's index, or `None` once the window has closed.
    fn next(&self) -> Option<usize> {
        (self.phase.load(Ordering::Relaxed) != STOP).then(|| self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn counting(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == MEASURE
    }
}

/// One connection of the load.
enum Conn {
    Http { conn: HttpConn, addr: SocketAddr },
    Line(LineConn),
}

impl Conn {
    /// Sends `call` and checks its answer (whole when `full`), reconnecting when the server
    /// closed the connection; how long the exchange itself took.
    async fn call(&mut self, call: &Call, expect: &Expect, full: bool) -> Result<Duration, String> {
        let sent = Instant::now();
        let failed = |e: String| format!("call {}: {e}", call.id);
        match self {
            Conn::Http { conn, addr } => {
                let answer = conn.exchange(&call.wire).await.map_err(failed)?;
                let took = sent.elapsed();
                check(expect, call, Some(answer.status), answer.body, full)?;
                if answer.closing {
                    *conn = HttpConn::connect(*addr).await.map_err(|e| format!("reconnect to {addr}: {e}"))?;
                }
                Ok(took)
            }
            Conn::Line(conn) => {
                let answer = conn.exchange(&call.wire).await.map_err(failed)?;
                let took = sent.elapsed();
                check(expect, call, None, answer, full)?;
                Ok(took)
            }
        }
    }
}

async fn drive(
    shared: Arc<Shared>,
    mut conn: Conn,
    calls: Arc<Vec<Call>>,
    expect: Arc<Expect>,
) -> Result<Vec<u64>, String> {
    let mut latencies = Vec::with_capacity(1 << 16);
    while let Some(n) = shared.next() {
        let took = conn.call(&calls[n % calls.len()], &expect, full(n, calls.len())).await?;
        if shared.counting() {
            latencies.push(took.as_nanos() as u64);
        }
    }
    Ok(latencies)
}

/// Whether the `n`th request's answer is parsed whole: one in [`FULL_EVERY`], shifted by one
/// each time round the cycle, so every request of the cycle is parsed whole now and then.
fn full(n: usize, cycle: usize) -> bool {
    (n + n / cycle).is_multiple_of(FULL_EVERY)
}
