//! Recovery: retention GC, proof-based clearing of recovery guards, startup reconciliation of
//! tasks a previous bridge left behind, and orderly shutdown.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Inner, TaskService, results};
use crate::error::code;
use crate::model::{ResultStorage, TaskStatus};
use crate::provider::cgroup;
use crate::provider::procfs::{marker_pids, namespace_pids, sandbox_processes};
use crate::provider::supervise::{NamespaceProof, ProofMaterial, any_exits, leader_alive, unproven_pids};
use crate::store::events::NewEvent;
use crate::store::guards::GuardRow;
use crate::store::tasks::TransitionFields;

/// Serializes proof material for the guard: the leader, the marker and, for a task that ran
/// in the sandbox, its PID namespace (the proof that applies).
pub fn proof_json(m: &ProofMaterial) -> String {
    let mut v = json!({ "pid": m.pid, "start_ticks": m.start_ticks, "marker": m.marker, "containment": "none" });
    if let Some(ns) = &m.namespace {
        v["containment"] = "bubblewrap".into();
        v["pid_ns"] = ns.pid_ns.into();
        v["init_pid"] = ns.init_pid.into();
        v["init_start_ticks"] = ns.init_start_ticks.into();
    }
    if let Some(dir) = &m.cgroup {
        v["cgroup"] = dir.display().to_string().into();
    }
    v.to_string()
}

/// Reads the proof material a guard recorded; `None` when this bridge cannot read it.
pub fn parse_proof(text: &str) -> Option<ProofMaterial> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let namespace = match v.get("containment").and_then(Value::as_str) {
        None | Some("none") => None,
        Some("bubblewrap") => Some(NamespaceProof {
            pid_ns: v.get("pid_ns")?.as_u64()?,
            init_pid: i32::try_from(v.get("init_pid")?.as_i64()?).ok()?,
            init_start_ticks: v.get("init_start_ticks").and_then(Value::as_u64),
        }),
        // A proof this bridge cannot read is no proof.
        Some(_) => return None,
    };
    let cgroup = match v.get("cgroup") {
        None | Some(Value::Null) => None,
        Some(Value::String(dir)) if dir.starts_with('/') => Some(std::path::PathBuf::from(dir)),
        Some(_) => return None,
    };
    Some(ProofMaterial {
        pid: i32::try_from(v.get("pid")?.as_i64()?).ok()?,
        start_ticks: v.get("start_ticks").and_then(|t| t.as_u64()),
        marker: v.get("marker")?.as_str()?.to_owned(),
        namespace,
        cgroup,
    })
}

/// Whether the provider behind a guard is proven stopped: its leader (same pid and start
/// time) is gone, its cgroup (where it had one) is empty, no process is left in its PID
/// namespace (when it ran in the sandbox) and no process carries its task marker. Unreadable proof material is not a proof. Blocking
/// (reads `/proc`).
pub fn provider_stopped(guard: &GuardRow) -> bool {
    let material = match &guard.proof_json {
        Some(text) => match parse_proof(text) {
            Some(m) if m.marker == guard.task_id => Some(m),
            _ => return false,
        },
        None => None,
    };
    let cgroup_empty = material.as_ref().and_then(|m| m.cgroup.as_deref()).is_none_or(|d| !cgroup::populated(d));
    cgroup_empty && unproven_pids(material.as_ref(), &guard.task_id).is_empty()
}

/// What is known about the provider behind a guard (blocking: reads `/proc`).
pub fn guard_proof(guard: &GuardRow) -> Value {
    // The same rule as `provider_stopped`, from one read of `/proc`, so the fields agree.
    let material = guard.proof_json.as_deref().and_then(parse_proof).filter(|m| m.marker == guard.task_id);
    let unreadable = guard.proof_json.is_some() && material.is_none();
    let leader = material.as_ref().map(|m| (m.pid, leader_alive(m)));
    let namespace = material.as_ref().and_then(|m| m.namespace);
    // Members of the recorded namespace count while it is still that namespace.
    let live_namespace = namespace.filter(NamespaceProof::may_hold_processes);
    let group = material.as_ref().and_then(|m| m.cgroup.clone());
    let markers = marker_pids(&guard.task_id);
    let sandbox: Vec<i32> =
        sandbox_processes().into_iter().filter(|(_, task)| *task == guard.task_id).map(|(pid, _)| pid).collect();
    let in_namespace = live_namespace.map(|n| namespace_pids(n.pid_ns)).unwrap_or_default();
    let in_cgroup = group.as_deref().filter(|d| cgroup::populated(d)).map(cgroup::pids);
    let leader_alive = leader.is_some_and(|(_, alive)| alive);
    let proven = !unreadable
        && !leader_alive
        && markers.is_empty()
        && sandbox.is_empty()
        && in_namespace.is_empty()
        && in_cgroup.is_none();
    let missing = if proven {
        None
    } else if unreadable {
        Some("the recorded proof material is unreadable or names another task".to_owned())
    } else if leader_alive {
        Some("the provider's process group leader still runs".to_owned())
    } else if let Some(pids) = &in_cgroup {
        Some(format!("the task's cgroup still holds {} process(es)", pids.len()))
    } else if !in_namespace.is_empty() {
        Some(format!("{} process(es) are still in the task's PID namespace", in_namespace.len()))
    } else if !sandbox.is_empty() {
        Some(format!("{} bwrap process(es) of the task's sandbox are still there", sandbox.len()))
    } else {
        Some(format!("{} process(es) still carry the task's marker AGENT_BRIDGE_TASK", markers.len()))
    };
    let proof = if group.is_some() {
        "cgroup"
    } else if namespace.is_some() {
        "pid_namespace"
    } else {
        "marker"
    };
    json!({
        "containment": if namespace.is_some() { "bubblewrap" } else { "none" },
        "proof": proof,
        "leader_pid": leader.map(|(pid, _)| pid),
        "leader_alive": leader.map(|(_, alive)| alive),
        "cgroup_processes": group.as_ref().map(|_| in_cgroup.clone().unwrap_or_default()),
        "namespace_processes": namespace.map(|_| in_namespace),
        "marker_processes": markers,
        "sandbox_processes": sandbox,
        "proven_stopped": proven,
        "missing": missing,
    })
}

/// Audit rows deleted per transaction by retention.
const AUDIT_BATCH: u32 = 1_000;
/// The most retention batches of audit rows in one pass.
const AUDIT_BATCHES: usize = 1_000;

impl Inner {
    /// Deletes terminal tasks past retention (and their spool files), then old audit rows.
    pub(super) async fn collect_garbage(&self) {
        let cutoff = self.clock.now_ms() - (self.config.limits.retention_hours as i64).saturating_mul(3_600_000);
        match self.store.call(move |s| s.delete_expired(cutoff)).await {
            Ok(deleted) => {
                let mut spooled = Vec::new();
                let mut all = Vec::new();
                for (task_id, storage) in deleted {
                    tracing::debug!(task_id, "retention removed a task");
                    if storage == Some(ResultStorage::Spool) {
                        spooled.push(task_id.clone());
                    }
                    all.push(task_id);
                }
                results::delete(self.config.state_dir.clone(), spooled).await;
                // A diff is spooled whatever the result was; removing an absent file is a no-op.
                super::diffs::delete(self.config.state_dir.clone(), all).await;
            }
            Err(e) => tracing::warn!(cause = %e, "retention pass failed"),
        }
        self.collect_audit().await;
    }

    /// Deletes audit rows older than the audit retention, [`AUDIT_BATCH`] rows per short
    /// transaction so a huge table never holds the store's write lock for long; at most
    /// [`AUDIT_BATCHES`] batches a pass (the next pass goes on).
    async fn collect_audit(&self) {
        let days = self.config.limits.audit_retention_days as i64;
        let cutoff = self.clock.now_ms().saturating_sub(days.saturating_mul(86_400_000));
        let mut total = 0;
        for _ in 0..AUDIT_BATCHES {
            match self.store.call(move |s| s.delete_audit_before(cutoff, AUDIT_BATCH)).await {
                Ok(n) => {
                    total += n;
                    if n < AUDIT_BATCH as usize {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "audit retention pass failed");
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        if total > 0 {
            tracing::info!(rows = total, days, "audit retention removed old rows");
        }
    }

    /// Clears `guard` if its provider is proven stopped, interrupting its task with `code`
    /// when that task is still non-terminal. Returns whether the guard is gone.
    pub(super) async fn try_clear_guard(self: &Arc<Self>, guard: &GuardRow, interrupt_code: &'static str) -> bool {
        let g = guard.clone();
        let stopped = tokio::task::spawn_blocking(move || provider_stopped(&g)).await.unwrap_or(false);
        if !stopped {
            tracing::warn!(
                task_id = guard.task_id,
                workdir = guard.workdir_alias,
                "provider stop not proven; guard kept until its processes are gone"
            );
            let (alias, id, now) = (guard.workdir_alias.clone(), guard.task_id.clone(), self.clock.now_ms());
            if let Err(e) = self.store.call(move |s| s.record_guard_kept(&alias, &id, now)).await {
                tracing::warn!(cause = %e, "cannot write the recovery notification");
            }
            self.watch_guard(guard.clone(), interrupt_code);
            return false;
        }
        let now = self.clock.now_ms();
        let task_id = guard.task_id.clone();
        let fields = TransitionFields {
            error_code: Some(interrupt_code.to_owned()),
            error_message: Some("the provider is proven stopped; the task cannot continue".into()),
            event: Some(NewEvent::new("task.interrupted", json!({ "error_code": interrupt_code }))),
            ..Default::default()
        };
        let id = task_id.clone();
        // Only a non-terminal task moves; a terminal one keeps its state.
        let _ = self.store.call(move |s| s.transition(&id, TaskStatus::Interrupted, fields, now)).await;
        self.changes.notify(&task_id);
        let (alias, id) = (guard.workdir_alias.clone(), task_id.clone());
        // Deleting nothing means no guard names this task any more: its runner cleared it
        // since `guard` was read. That guard is gone all the same.
        let cleared = self.store.call(move |s| s.clear_guard(&alias, &id)).await.is_ok();
        if cleared && guard.branch().is_some() {
            // Its worktree's work goes on its branch now that nothing can still write it.
            super::worktree::recover(self, &task_id).await;
        }
        cleared
    }

    /// Watches the processes that keep `guard` from its proof (through pidfds, no polling) and
    /// clears it as soon as they are all gone. One watcher per guard; it ends with the bridge.
    /// Unreadable proof material is never watched: that guard stays for the operator.
    pub(super) fn watch_guard(self: &Arc<Self>, guard: GuardRow, interrupt_code: &'static str) {
        let material = match guard.proof_json.as_deref().map(parse_proof) {
            Some(None) => return,
            Some(Some(m)) => Some(m),
            None => None,
        };
        if !self.watched_guards.lock().unwrap_or_else(|p| p.into_inner()).insert(guard.task_id.clone()) {
            return;
        }
        let inner = Arc::clone(self);
        self.tracker.spawn(async move {
            loop {
                let (m, id) = (material.clone(), guard.task_id.clone());
                let pids =
                    tokio::task::spawn_blocking(move || unproven_pids(m.as_ref(), &id)).await.unwrap_or_default();
                if pids.is_empty() {
                    break;
                }
                tokio::select! {
                    _ = any_exits(&pids) => {}
                    _ = inner.shutdown.cancelled() => return,
                }
            }
            inner.watched_guards.lock().unwrap_or_else(|p| p.into_inner()).remove(&guard.task_id);
            if inner.try_clear_guard(&guard, interrupt_code).await {
                tracing::info!(
                    task_id = guard.task_id,
                    workdir = guard.workdir_alias,
                    "guard cleared: its processes are gone"
                );
            }
        });
    }

    /// Persists `interrupted/BRIDGE_SHUTDOWN` for a task the stopping bridge leaves behind;
    /// a task that is already terminal keeps its state.
    pub(super) async fn interrupt_for_shutdown(&self, task_id: &str) {
        let now = self.clock.now_ms();
        let id = task_id.to_owned();
        let fields = TransitionFields {
            error_code: Some(code::BRIDGE_SHUTDOWN.to_owned()),
            error_message: Some("the bridge was stopped while the task was active".into()),
            event: Some(NewEvent::new("task.interrupted", json!({ "error_code": code::BRIDGE_SHUTDOWN }))),
            ..Default::default()
        };
        let _ = self.store.call(move |s| s.transition(&id, TaskStatus::Interrupted, fields, now)).await;
        self.changes.notify(task_id);
    }
}

impl TaskService {
    /// Startup: retention GC, then every task a previous bridge left non-terminal is marked
    /// `interrupted/BRIDGE_RESTARTED` (never re-run), then what its sandboxes left is stopped
    /// where it is provably theirs (`leftovers`), then every guard is re-checked and cleared
    /// only on proof.
    pub async fn reconcile_at_startup(&self) -> Result<(), crate::store::StoreError> {
        let inner = &self.inner;
        inner.collect_garbage().await;
        let stranded = inner.store.call(|s| s.active_tasks()).await?;
        for task in stranded {
            let now = inner.clock.now_ms();
            let id = task.task_id.clone();
            let fields = TransitionFields {
                error_code: Some(code::BRIDGE_RESTARTED.to_owned()),
                error_message: Some(
                    "the bridge restarted while the task was active; continue it with a new task".into(),
                ),
                event: Some(NewEvent::new(
                    "task.reconciled",
                    json!({ "status": "interrupted", "error_code": code::BRIDGE_RESTARTED }),
                )),
                ..Default::default()
            };
            inner.store.call(move |s| s.transition(&id, TaskStatus::Interrupted, fields, now)).await?;
            tracing::info!(task_id = task.task_id, "interrupted a task left active by a previous bridge");
        }
        // What the previous bridge's sandboxes left goes before the guards are re-checked:
        // their proof then holds.
        self.stop_leftovers_at_start().await;
        for guard in inner.store.call(|s| s.list_guards()).await? {
            if inner.try_clear_guard(&guard, code::BRIDGE_RESTARTED).await {
                tracing::info!(workdir = guard.workdir_alias, "cleared a recovery guard on proof");
            }
        }
        super::worktree::sweep_at_start(inner).await;
        Ok(())
    }

    /// Orderly shutdown: every active task is persisted `interrupted/BRIDGE_SHUTDOWN`, its
    /// runner is cancelled, the runners are drained (each bounds its provider stop), and what
    /// any sandbox left is stopped.
    pub async fn shutdown(&self, bound: Duration) {
        let inner = &self.inner;
        {
            // Under the submit lock: no submission is half-way through when the bridge closes,
            // and every later one is refused, so no runner starts after this list is taken.
            let _serial = inner.submit_lock.lock().await;
            inner.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let active: Vec<(String, tokio_util::sync::CancellationToken)> = inner
            .active
            .lock()
            .map(|a| a.iter().map(|(id, t)| (id.clone(), t.cancel.clone())).collect())
            .unwrap_or_default();
        for (task_id, cancel) in active {
            inner.interrupt_for_shutdown(&task_id).await;
            cancel.cancel();
        }
        inner.tracker.close();
        if tokio::time::timeout(bound, inner.tracker.wait()).await.is_err() {
            tracing::warn!("some task runners did not finish within the shutdown bound");
        }
        // The way out: nothing a task started stays behind the bridge (an unproven stop, a
        // runner past the bound); the next start then finds its guards proven.
        inner.stop_leftovers(super::leftovers::Moment::Shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::store::tasks::TransitionFields;
    use crate::tasks::TaskService;

    fn service(root: &std::path::Path) -> TaskService {
        service_with(root, Clock::System)
    }

    fn service_with(root: &std::path::Path, clock: Clock) -> TaskService {
        crate::tasks::testing::service(root, clock, "")
    }

    /// Retention on a paused clock: nothing goes before 168 h; after, the whole unit of an
    /// unguarded terminal task goes (row, events, spool file, idempotency key) and nothing else.
    #[tokio::test(start_paused = true)]
    async fn retention_removes_whole_units_after_the_retention_and_nothing_else() {
        use crate::store::tasks::{NewGuard, NewTask};
        let dir = tempfile::tempdir().unwrap();
        let service = service_with(dir.path(), Clock::following_tokio());
        let inner = &service.inner;
        let now = inner.clock.now_ms();
        let task = |id: &str, key: &str| NewTask {
            task_id: id.into(),
            principal: "p".into(),
            runtime: "fake".into(),
            workdir_alias: "repo".into(),
            relative_cwd: String::new(),
            profile: "review".into(),
            requested_model: None,
            created_at: now,
            deadline_at: now + 1_000,
            continue_from_task_id: None,
            correlation_id: None,
            idempotency_key: Some(key.into()),
            request_fingerprint: Some("f".into()),
            manifest_json: "{}".into(),
            manifest_sha256: "x".into(),
            title: None,
        };
        let submitted = NewEvent::new("task.submitted", json!({}));
        let (spooled, guarded, active) = (crate::ids::task_id(), crate::ids::task_id(), crate::ids::task_id());
        let store = &inner.store;
        store.insert_task(&task(&spooled, "k1"), 9, None, &submitted).unwrap();
        store
            .insert_task(
                &task(&guarded, "k2"),
                9,
                Some(&NewGuard { workdir_alias: "repo".into(), worktree: None }),
                &submitted,
            )
            .unwrap();
        store.insert_task(&task(&active, "k3"), 9, None, &submitted).unwrap();
        let result =
            crate::tasks::results::store(&inner.config.state_dir, &spooled, &"x".repeat(300_000), 1_000).unwrap();
        assert_eq!(result.storage, ResultStorage::Spool);
        for id in [&spooled, &guarded] {
            store.transition(id, TaskStatus::Starting, TransitionFields::default(), now).unwrap();
            store.transition(id, TaskStatus::Running, TransitionFields::default(), now).unwrap();
        }
        let done = TransitionFields { result: Some(result), ..Default::default() };
        store.transition(&spooled, TaskStatus::Succeeded, done, now).unwrap();
        store.transition(&guarded, TaskStatus::Failed, TransitionFields::default(), now).unwrap();
        let spool_file = inner.config.state_dir.join(format!("results/{spooled}.txt"));
        assert!(spool_file.exists());

        tokio::time::advance(Duration::from_secs(167 * 3600)).await;
        inner.collect_garbage().await;
        assert!(store.get_task(&spooled).unwrap().is_some(), "kept within the retention");

        tokio::time::advance(Duration::from_secs(2 * 3600)).await;
        inner.collect_garbage().await;
        assert!(store.get_task(&spooled).unwrap().is_none(), "gone after the retention");
        assert!(store.read_events(&spooled, 0, 10).unwrap().is_empty(), "with its events");
        assert!(!spool_file.exists(), "with its spool file");
        assert!(store.find_by_idempotency_key("p", "k1").unwrap().is_none(), "its key is free again");
        assert!(store.get_task(&guarded).unwrap().is_some(), "a task a guard names survives");
        assert!(store.get_task(&active).unwrap().is_some(), "a non-terminal task survives");
    }

    /// Submit reads the guard, then the task's runner (whose provider is proven stopped)
    /// clears it before submit tries to: the guard is gone, not "recovery required".
    #[tokio::test]
    async fn a_guard_its_runner_cleared_meanwhile_counts_as_gone() {
        let dir = tempfile::tempdir().unwrap();
        let service = service(dir.path());
        let read_earlier = GuardRow {
            workdir_alias: "repo".into(),
            task_id: crate::ids::task_id(),
            runtime: "fake".into(),
            created_at: 0,
            updated_at: 0,
            proof_json: None,
        };
        assert!(service.inner.try_clear_guard(&read_earlier, code::AGENT_PROVIDER_INACTIVE).await);
    }
}
