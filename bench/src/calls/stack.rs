//! The targets of `calls` and the stack that serves them: every server started from a thread
//! pinned to the server CPU (so each runtime sizes itself to one core), then every thread of
//! this process moved to the load CPU, and each server's threads checked to be on the server CPU
//! only; one workload per target, built once; [`Stack::measure`] runs one target once.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::answers::Expect;
use crate::floors::{self, FIXED_REPLY};
use crate::load::{self, Plan, Transport, Workload};
use crate::report::Figures;
use crate::servers::{self, Bins, Ours, Server};
use crate::wire::{mcp_call, socket_call};
use crate::{Setup, cpu};

/// What `calls` can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Target {
    /// `tools/call get_agent_task` through the real mcp-front and agent-bridge.
    Ours,
    /// The same through another build of both (`--before-bridge-bin`, `--before-front-bin`):
    /// a before/after comparison in one run.
    Before,
    /// The same calls as `capabilities.call` lines straight on the bridge's socket.
    Bridge,
    /// The Python reference (mcp 2.3.0, stateless JSON responses, uvicorn, SQLite).
    Python,
    /// A fixed-reply axum server.
    HttpFloor,
    /// An NDJSON echo on a Unix socket.
    UdsFloor,
    /// A SQLite primary-key read, in process.
    SqliteFloor,
}

impl Target {
    /// Every target, in the table's order.
    pub const ALL: [Target; 7] = [
        Target::Ours,
        Target::Before,
        Target::Bridge,
        Target::Python,
        Target::HttpFloor,
        Target::UdsFloor,
        Target::SqliteFloor,
    ];

    /// The target's name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Target::Ours => "ours",
            Target::Before => "before",
            Target::Bridge => "bridge",
            Target::Python => "python",
            Target::HttpFloor => "http-floor",
            Target::UdsFloor => "uds-floor",
            Target::SqliteFloor => "sqlite-floor",
        }
    }
}

/// The servers of the chosen targets, started and pinned.
pub struct Stack {
    /// The bridge and the front, when `ours` or `bridge` is measured.
    pub ours: Option<Ours>,
    /// The other build's bridge and front, when `before` is measured.
    pub before: Option<Ours>,
    python: Option<Server>,
    http: Option<Server>,
    uds: Option<Server>,
    reference: Option<(TempDir, PathBuf)>,
    workloads: Vec<(Target, Workload)>,
    tasks: usize,
}

impl Stack {
    /// Starts what `targets` need over `tasks` seeded tasks, pinned as the module says.
    pub async fn start(setup: &Setup, targets: &[Target], tasks: usize) -> anyhow::Result<Stack> {
        let wants = |t: Target| targets.contains(&t);
        let bins = if wants(Target::Ours) || wants(Target::Bridge) { Some(setup.bins()?) } else { None };
        let before = if wants(Target::Before) { Some(setup.before_bins()?) } else { None };
        if wants(Target::Python) {
            servers::check_python(&setup.python)?;
        }
        cpu::check_layout(setup.server_cpu, setup.load_cpu)?;
        let reference = if wants(Target::Python) || wants(Target::SqliteFloor) {
            Some(servers::reference_db(tasks)?)
        } else {
            None
        };
        cpu::pin_this_thread(setup.server_cpu)?;
        let started = Self::spawn([bins.as_ref(), before.as_ref()], setup, &wants, tasks, reference).await;
        // Whatever happened, the load side leaves the server CPU.
        cpu::pin_every_thread(setup.load_cpu)?;
        let mut stack = started?;
        stack.check_pinned(setup.server_cpu)?;
        stack.workloads = targets.iter().filter_map(|&t| stack.workload(t).map(|w| (t, w))).collect();
        Ok(stack)
    }

    async fn spawn(
        [bins, before_bins]: [Option<&Bins>; 2],
        setup: &Setup,
        wants: &dyn Fn(Target) -> bool,
        tasks: usize,
        reference: Option<(TempDir, PathBuf)>,
    ) -> anyhow::Result<Stack> {
        let ours = match bins {
            Some(bins) => Some(Ours::start(bins, tasks, 20).await?),
            None => None,
        };
        let before = match before_bins {
            Some(bins) => Some(Ours::start(bins, tasks, 20).await?),
            None => None,
        };
        let python = match &reference {
            Some((_, db)) if wants(Target::Python) => Some(servers::python(&setup.python, db).await?),
            _ => None,
        };
        let http = if wants(Target::HttpFloor) { Some(servers::http_floor().await?) } else { None };
        let uds = if wants(Target::UdsFloor) { Some(servers::uds_floor().await?) } else { None };
        Ok(Stack { ours, before, python, http, uds, reference, workloads: Vec::new(), tasks })
    }

    /// The processes serving `target`, by name (none for the in-process SQLite floor).
    pub fn processes(&self, target: Target) -> anyhow::Result<Vec<(&'static str, u32)>> {
        let ours = || self.ours.as_ref().context("ours is not running");
        let before = || self.before.as_ref().context("before is not running");
        let server = |s: &Option<Server>| s.as_ref().map(Server::pid).context("the server is not running");
        Ok(match target {
            Target::Ours => vec![("bridge", ours()?.bridge_pid()?), ("front", ours()?.front_pid()?)],
            Target::Before => vec![("bridge", before()?.bridge_pid()?), ("front", before()?.front_pid()?)],
            Target::Bridge => vec![("bridge", ours()?.bridge_pid()?)],
            Target::Python => vec![("python", server(&self.python)?)],
            Target::HttpFloor => vec![("http-floor", server(&self.http)?)],
            Target::UdsFloor => vec![("uds-floor", server(&self.uds)?)],
            Target::SqliteFloor => Vec::new(),
        })
    }

    /// Fails unless every thread of every server is on `cpu` only.
    pub fn check_pinned(&self, cpu: usize) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for target in Target::ALL {
            for (name, pid) in self.processes(target).unwrap_or_default() {
                if seen.insert(pid) {
                    cpu::check_pinned(name, pid, cpu)?;
                }
            }
        }
        Ok(())
    }

    fn workload(&self, target: Target) -> Option<Workload> {
        let n = self.tasks;
        let (transport, calls, expect) = match target {
            Target::Ours | Target::Before => {
                let ours = if target == Target::Ours { self.ours.as_ref()? } else { self.before.as_ref()? };
                let addr = ours.front.addr;
                let calls = (0..n).map(|i| mcp_call(i, addr, Some(&ours.authorization))).collect();
                (Transport::Http(addr), calls, Expect::McpTask)
            }
            Target::Bridge => {
                let ours = self.ours.as_ref()?;
                let calls = (0..n).map(|i| socket_call(i, &ours.authorization)).collect();
                (Transport::Line(ours.bridge.socket.clone()), calls, Expect::Envelope)
            }
            // The reference takes no key, as the anchor it stands for has none.
            Target::Python => {
                let addr = self.python.as_ref()?.addr?;
                (Transport::Http(addr), (0..n).map(|i| mcp_call(i, addr, None)).collect(), Expect::McpTask)
            }
            // The floors get the very bytes ours gets (the key included, unread).
            Target::HttpFloor => {
                let addr = self.http.as_ref()?.addr?;
                let calls = (0..n).map(|i| mcp_call(i, addr, Some("Bearer floor"))).collect();
                (Transport::Http(addr), calls, Expect::Fixed(FIXED_REPLY.to_vec()))
            }
            Target::UdsFloor => {
                let socket = self.uds.as_ref()?.socket();
                (Transport::Line(socket), (0..n).map(|i| socket_call(i, "Bearer floor")).collect(), Expect::Echo)
            }
            Target::SqliteFloor => return None,
        };
        Some(Workload { transport, calls: Arc::new(calls), expect: Arc::new(expect) })
    }

    /// Runs `target` once by `plan`.
    pub async fn measure(&self, setup: &Setup, target: Target, plan: Plan) -> anyhow::Result<Figures> {
        if target == Target::SqliteFloor {
            let (_, db) = self.reference.as_ref().context("the reference's file was not seeded")?;
            let sample = floors::sqlite_floor(db, self.tasks, plan.warmup, plan.duration, &setup.meter())?;
            return Ok(Figures::of(target.name(), &["load thread"], &sample, true));
        }
        let Some((_, workload)) = self.workloads.iter().find(|(t, _)| *t == target) else {
            bail!("{} was not started", target.name());
        };
        let processes = self.processes(target)?;
        let pids: Vec<u32> = processes.iter().map(|(_, pid)| *pid).collect();
        let names: Vec<&str> = processes.iter().map(|(name, _)| *name).collect();
        let sample = load::run(workload, &pids, &setup.meter(), plan)
            .await
            .with_context(|| format!("the {} run", target.name()))?;
        Ok(Figures::of(target.name(), &names, &sample, false))
    }
}
