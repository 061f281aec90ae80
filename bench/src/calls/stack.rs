//! The targets of `calls` and the stack that serves them: every server started from a thread
//! pinned to the server CPU (so each runtime sizes itself to one core), then every thread of
//! this process moved to the load CPU, and each server's threads checked to be on the server CPU
//! only; one workload per target, built once; [`Stack::measure`] runs one target once. Other
//! builds of front and bridge (`--variant`, `before`) run beside ours as [`Subject::Variant`]s,
//! seeded, loaded and measured alike.

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
    pub const ALL: [Target; 6] =
        [Target::Ours, Target::Bridge, Target::Python, Target::HttpFloor, Target::UdsFloor, Target::SqliteFloor];

    /// The target's name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Target::Ours => "ours",
            Target::Bridge => "bridge",
            Target::Python => "python",
            Target::HttpFloor => "http-floor",
            Target::UdsFloor => "uds-floor",
            Target::SqliteFloor => "sqlite-floor",
        }
    }
}

/// What one run measures: a target, or another build of front and bridge (by its place among
/// the stack's variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// One of the targets.
    Target(Target),
    /// Another build of ours, measured like ours.
    Variant(usize),
}

impl From<Target> for Subject {
    fn from(target: Target) -> Subject {
        Subject::Target(target)
    }
}

/// The servers of the chosen targets, started and pinned.
pub struct Stack {
    /// The bridge and the front, when `ours` or `bridge` is measured.
    pub ours: Option<Ours>,
    /// Other builds' bridge and front, by name, in the order given.
    pub variants: Vec<(String, Ours)>,
    python: Option<Server>,
    http: Option<Server>,
    uds: Option<Server>,
    reference: Option<(TempDir, PathBuf)>,
    workloads: Vec<(Subject, Workload)>,
    tasks: usize,
}

impl Stack {
    /// Starts what `targets` need over `tasks` seeded tasks, pinned as the module says.
    pub async fn start(setup: &Setup, targets: &[Target], tasks: usize) -> anyhow::Result<Stack> {
        Self::start_with(setup, targets, &[], tasks).await
    }

    /// [`Stack::start`], and each of `variants` (a name and another build's binaries) beside ours.
    pub async fn start_with(
        setup: &Setup,
        targets: &[Target],
        variants: &[(String, Bins)],
        tasks: usize,
    ) -> anyhow::Result<Stack> {
        let wants = |t: Target| targets.contains(&t);
        let bins = if wants(Target::Ours) || wants(Target::Bridge) { Some(setup.bins()?) } else { None };
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
        let started = Self::spawn(bins.as_ref(), variants, setup, &wants, tasks, reference).await;
        // Whatever happened, the load side leaves the server CPU.
        cpu::pin_every_thread(setup.load_cpu)?;
        let mut stack = started?;
        stack.check_pinned(setup.server_cpu)?;
        let subjects =
            targets.iter().map(|&t| Subject::Target(t)).chain((0..stack.variants.len()).map(Subject::Variant));
        stack.workloads = subjects.filter_map(|s| stack.workload(s).map(|w| (s, w))).collect();
        Ok(stack)
    }

    async fn spawn(
        bins: Option<&Bins>,
        variant_bins: &[(String, Bins)],
        setup: &Setup,
        wants: &dyn Fn(Target) -> bool,
        tasks: usize,
        reference: Option<(TempDir, PathBuf)>,
    ) -> anyhow::Result<Stack> {
        let ours = match bins {
            Some(bins) => Some(Ours::start(bins, tasks, 20).await?),
            None => None,
        };
        let mut variants = Vec::new();
        for (name, bins) in variant_bins {
            variants.push((name.clone(), Ours::start(bins, tasks, 20).await?));
        }
        let python = match &reference {
            Some((_, db)) if wants(Target::Python) => Some(servers::python(&setup.python, db).await?),
            _ => None,
        };
        let http = if wants(Target::HttpFloor) { Some(servers::http_floor().await?) } else { None };
        let uds = if wants(Target::UdsFloor) { Some(servers::uds_floor().await?) } else { None };
        Ok(Stack { ours, variants, python, http, uds, reference, workloads: Vec::new(), tasks })
    }

    /// The subject's name in the table.
    pub fn name(&self, subject: Subject) -> String {
        match subject {
            Subject::Target(t) => t.name().to_owned(),
            Subject::Variant(i) => self.variants.get(i).map_or_else(|| format!("variant {i}"), |(n, _)| n.clone()),
        }
    }

    /// The bridge and front serving `subject`, when it is ours or a variant.
    fn stack_of(&self, subject: Subject) -> Option<&Ours> {
        match subject {
            Subject::Target(Target::Ours | Target::Bridge) => self.ours.as_ref(),
            Subject::Variant(i) => self.variants.get(i).map(|(_, ours)| ours),
            Subject::Target(_) => None,
        }
    }

    /// The processes serving `subject`, by name (none for the in-process SQLite floor).
    pub fn processes(&self, subject: impl Into<Subject>) -> anyhow::Result<Vec<(&'static str, u32)>> {
        let subject = subject.into();
        let server = |s: &Option<Server>| s.as_ref().map(Server::pid).context("the server is not running");
        let target = match subject {
            Subject::Variant(_) => Target::Ours,
            Subject::Target(t) => t,
        };
        let ours = || self.stack_of(subject).with_context(|| format!("{} is not running", self.name(subject)));
        Ok(match target {
            Target::Ours => vec![("bridge", ours()?.bridge_pid()?), ("front", ours()?.front_pid()?)],
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
        let variants = (0..self.variants.len()).map(Subject::Variant);
        for subject in Target::ALL.into_iter().map(Subject::Target).chain(variants) {
            for (name, pid) in self.processes(subject).unwrap_or_default() {
                if seen.insert(pid) {
                    cpu::check_pinned(name, pid, cpu)?;
                }
            }
        }
        Ok(())
    }

    fn workload(&self, subject: Subject) -> Option<Workload> {
        let n = self.tasks;
        let target = match subject {
            Subject::Variant(_) => Target::Ours,
            Subject::Target(t) => t,
        };
        let (transport, calls, expect) = match target {
            Target::Ours => {
                let ours = self.stack_of(subject)?;
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

    /// Runs `subject` (a target or a variant) once by `plan`.
    pub async fn measure(&self, setup: &Setup, subject: impl Into<Subject>, plan: Plan) -> anyhow::Result<Figures> {
        let subject = subject.into();
        let name = self.name(subject);
        if subject == Subject::Target(Target::SqliteFloor) {
            let (_, db) = self.reference.as_ref().context("the reference's file was not seeded")?;
            let sample = floors::sqlite_floor(db, self.tasks, plan.warmup, plan.duration, &setup.meter())?;
            return Ok(Figures::of(&name, &["load thread"], &sample, true));
        }
        let Some((_, workload)) = self.workloads.iter().find(|(s, _)| *s == subject) else {
            bail!("{name} was not started");
        };
        let processes = self.processes(subject)?;
        let pids: Vec<u32> = processes.iter().map(|(_, pid)| *pid).collect();
        let names: Vec<&str> = processes.iter().map(|(name, _)| *name).collect();
        let sample =
            load::run(workload, &pids, &setup.meter(), plan).await.with_context(|| format!("the {name} run"))?;
        Ok(Figures::of(&name, &names, &sample, false))
    }
}
