//! Leftover sandboxes at the bridge's start and on its way out: found and stopped through
//! [`crate::provider::leftovers`] when provably this bridge's, each stop recorded on its task
//! (a `sandbox.reconciled` event) and in the audit log, and the start's account kept for
//! `admin_workdir_status` and `doctor`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::recovery::parse_proof;
use super::{Inner, TaskService};
use crate::error::code;
use crate::model::AuditOutcome;
use crate::provider::leftovers::{self, Leftover, Scope};
use crate::provider::supervise::ProofMaterial;
use crate::store::audit::AuditRow;
use crate::store::events::NewEvent;

/// The audit capability of a stop the bridge made on its own, at start or on its way out.
pub const RECONCILE_CAPABILITY: &str = "reconcile_sandbox";
/// The surface and principal of those audit rows: the bridge itself, no caller.
pub const BRIDGE_SURFACE: &str = "bridge";
/// See [`BRIDGE_SURFACE`].
pub const BRIDGE_PRINCIPAL: &str = "agent-bridge";

/// When the bridge looks for leftovers, which decides what counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moment {
    /// At start: processes older than the bridge, its helpers' too.
    Start,
    /// While it runs: the tasks it is not running (not its helpers, which may be running).
    Now,
    /// On its way out: everything (nothing of it runs any more).
    Shutdown,
}

impl Moment {
    fn as_str(self) -> &'static str {
        match self {
            Moment::Start => "start",
            Moment::Now => "now",
            Moment::Shutdown => "shutdown",
        }
    }
}

impl Inner {
    /// The leftover sandboxes at `when`, found as the module says.
    pub(super) async fn find_leftovers(&self, when: Moment) -> Vec<Leftover> {
        let started_before = match when {
            Moment::Start => crate::provider::procfs::start_ticks(std::process::id() as i32),
            Moment::Now | Moment::Shutdown => None,
        };
        let guards = self.store.call(|s| s.list_guards()).await.unwrap_or_default();
        let proofs: Vec<(String, ProofMaterial)> =
            guards.iter().filter_map(|g| Some((g.task_id.clone(), parse_proof(g.proof_json.as_deref()?)?))).collect();
        // Which of the tasks the sandbox variable names are this bridge's (its store's).
        let named = tokio::task::spawn_blocking(crate::provider::procfs::sandbox_processes).await.unwrap_or_default();
        let named: Vec<String> = named.into_iter().map(|(_, task)| task).collect::<HashSet<_>>().into_iter().collect();
        let ours: HashSet<String> = self
            .store
            .call(move |s| Ok(named.into_iter().filter(|id| s.get_task(id).ok().flatten().is_some()).collect()))
            .await
            .unwrap_or_default();
        let active: Vec<String> = match when {
            Moment::Shutdown => Vec::new(),
            Moment::Start | Moment::Now => self.active.lock().map(|a| a.keys().cloned().collect()).unwrap_or_default(),
        };
        let helpers = when != Moment::Now;
        let containment = self.providers.containment().clone();
        let cgroups = containment.cgroups().cloned();
        let state_dir = self.config.state_dir.clone();
        tokio::task::spawn_blocking(move || {
            // A task of its store, or a helper of its own (a model listing in the sandbox).
            let is_ours = |task: &str| ours.contains(task) || (helpers && containment.is_own_helper(task));
            leftovers::find(&Scope {
                is_ours: &is_ours,
                active: &active,
                proofs: &proofs,
                cgroups: cgroups.as_ref(),
                state_dir: &state_dir,
                started_before,
            })
        })
        .await
        .unwrap_or_default()
    }

    /// Stops every leftover sandbox (at the start, before the guards are re-checked, and on
    /// the way out, after the runners ended), and records each stop: an event on the task, an
    /// audit row, a warning in the log. Returns the account (one object per task).
    pub(super) async fn stop_leftovers(&self, when: Moment) -> Vec<Value> {
        let when_name = when.as_str();
        let mut account = Vec::new();
        for leftover in self.find_leftovers(when).await {
            let started = std::time::Instant::now();
            let is_task = crate::ids::looks_like(&leftover.task_id, "agt_");
            let left = leftovers::stop(&leftover).await;
            let found = leftover.pids();
            let stopped = left.is_empty();
            let entry = json!({
                "task_id": leftover.task_id,
                "when": when_name,
                "processes": found.len(),
                "found_by": leftover.found_by(),
                "stopped": stopped,
                "left": left,
            });
            if stopped {
                tracing::warn!(task_id = leftover.task_id, processes = found.len(), found_by = ?leftover.found_by(), when = when_name, "stopped what a task's sandbox left behind");
            } else {
                tracing::error!(
                    task_id = leftover.task_id,
                    ?left,
                    when = when_name,
                    "cannot stop what a task's sandbox left behind"
                );
            }
            let payload = json!({ "when": when_name, "processes": found.len(), "found_by": leftover.found_by(), "stopped": stopped });
            let event = NewEvent::new("sandbox.reconciled", payload);
            let now = self.clock.now_ms();
            let row = AuditRow {
                audit_id: 0,
                at: now,
                surface: BRIDGE_SURFACE.into(),
                principal: Some(BRIDGE_PRINCIPAL.into()),
                role: None,
                capability: RECONCILE_CAPABILITY.into(),
                scope: Some("write".into()),
                outcome: if stopped { AuditOutcome::Ok } else { AuditOutcome::Error },
                error_code: (!stopped).then(|| code::WORKDIR_RECOVERY_REQUIRED.to_owned()),
                duration_us: started.elapsed().as_micros().try_into().unwrap_or(i64::MAX),
                task_id: is_task.then(|| leftover.task_id.clone()),
                plan_id: None,
                client_name: None,
                count: 1,
            };
            let id = leftover.task_id.clone();
            // The registry's writer is not running yet at start-up (and no longer on the way
            // out): this row is the bridge's own, written with its event (a helper, such as a
            // model listing, has no task to hold one).
            let written = self
                .store
                .call(move |s| {
                    if is_task {
                        s.append_event(&id, &event, None, now)?;
                    }
                    s.insert_audit(&[row])
                })
                .await;
            if let Err(e) = written {
                tracing::warn!(cause = %e, "cannot record the stop of a leftover sandbox");
            }
            self.changes.notify(&leftover.task_id);
            account.push(entry);
        }
        account
    }
}

impl TaskService {
    /// Start-up: stops what the sandboxes of a previous bridge left (processes started before
    /// this one), and keeps the account for [`TaskService::reconciled_at_start`].
    pub(super) async fn stop_leftovers_at_start(&self) {
        let account = self.inner.stop_leftovers(Moment::Start).await;
        let report = json!({ "at": crate::clock::rfc3339(self.inner.clock.now_ms()), "sandboxes": account });
        *self.inner.reconciled.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
    }

    /// What the start-up's reconciliation stopped (`null` before it ran).
    pub fn reconciled_at_start(&self) -> Value {
        self.inner.reconciled.lock().map(|r| r.clone().unwrap_or(Value::Null)).unwrap_or(Value::Null)
    }

    /// The leftover sandboxes now, by task (none should outlive a start: one that does was
    /// left by this bridge's own tasks since, or could not be stopped).
    pub async fn leftover_sandboxes(&self) -> Vec<Value> {
        self.inner.find_leftovers(Moment::Now).await.iter().map(Leftover::to_json).collect()
    }

    /// Writes the egress gates' refusals into their tasks' event streams (`egress.denied
    /// {host, port, why}`), until the bridge stops.
    pub(super) fn report_egress(&self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<crate::egress::Denied>();
        self.inner.providers.containment().egress().report_to(tx);
        let inner = std::sync::Arc::clone(&self.inner);
        self.inner.tracker.spawn(async move {
            loop {
                let denied = tokio::select! {
                    _ = inner.shutdown.cancelled() => return,
                    denied = rx.recv() => match denied { Some(d) => d, None => return },
                };
                let event = NewEvent::new(
                    "egress.denied",
                    json!({ "host": denied.host, "port": denied.port, "reason": denied.why }),
                );
                let (id, now) = (denied.task_id.clone(), inner.clock.now_ms());
                if inner.store.call(move |s| s.append_event(&id, &event, None, now)).await.is_ok() {
                    inner.changes.notify(&denied.task_id);
                }
            }
        });
    }
}
