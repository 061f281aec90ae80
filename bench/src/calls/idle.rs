//! `calls --idle-connections N`: what a front holds for kept-alive connections that made one
//! call and went quiet. N connections are opened one after another, each makes one checked
//! `tools/call get_agent_task` and stays open; the front's RSS is read before the first and
//! again once all have been idle for [`SETTLE`] (longer than jemalloc's 10 s decay, after which
//! freed pages are handed back), then they are closed.

use std::time::Duration;

use anyhow::Context;

use crate::answers::{Expect, check};
use crate::cpu;
use crate::servers::Ours;
use crate::wire::{HttpConn, mcp_call};

/// How long the connections stay idle before the RSS is read.
pub const SETTLE: Duration = Duration::from_secs(12);

/// One front's RSS without and with the idle connections.
#[derive(Debug, Clone)]
pub struct IdleRss {
    /// The build's name (`ours`, a variant's).
    pub name: String,
    /// The front's `VmRSS` before the connections, KiB.
    pub before_kib: u64,
    /// The front's `VmRSS` with them idle, KiB.
    pub with_kib: u64,
}

/// Opens `connections` to the front of `ours`, one call each, and reads its RSS as the module
/// says.
pub async fn measure(name: &str, ours: &Ours, connections: usize) -> anyhow::Result<IdleRss> {
    let pid = ours.front_pid()?;
    let addr = ours.front.addr;
    let before_kib = cpu::rss_kib(pid)?;
    let mut open = Vec::with_capacity(connections);
    for i in 0..connections {
        let mut conn = HttpConn::connect(addr).await.with_context(|| format!("idle connection {i} to {addr}"))?;
        let call = mcp_call(i, addr, Some(&ours.authorization));
        let answer = conn.exchange(&call.wire).await.map_err(|e| anyhow::anyhow!("idle connection {i}: {e}"))?;
        check(&Expect::McpTask, &call, Some(answer.status), answer.body, true).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!answer.closing, "{name}'s front closed idle connection {i} after its call");
        open.push(conn);
    }
    tokio::time::sleep(SETTLE).await;
    let with_kib = cpu::rss_kib(pid)?;
    drop(open);
    Ok(IdleRss { name: name.to_owned(), before_kib, with_kib })
}
