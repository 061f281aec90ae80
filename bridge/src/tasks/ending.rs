//! How a runner ends: it releases what the task held (the writer lease always, the recovery
//! guard only on proof), then persists the ending it observed — the result inline or spooled,
//! a failure, an interruption — unless someone else already made the task terminal.

use std::sync::Arc;

use serde_json::json;

use super::job::{Ending, Job, lifecycle, transition};
use super::redact::Redactor;
use super::{Inner, changes, diffs, results};
use crate::lease::Lease;
use crate::model::{ResultStorage, TaskStatus};
use crate::provider::procfs::marker_pids;
use crate::provider::snapshot::{self, Baseline};
use crate::provider::supervise::StopProof;
use crate::store::StoreError;
use crate::store::events::NewEvent;
use crate::store::tasks::TransitionFields;

/// Releases what the task held — the writer lease always (the provider's cleanup is over),
/// the guard only on proof — and then persists how the task ended, so a caller who sees a
/// terminal state finds the workdir already free. (A task someone else made terminal, e.g. a
/// cancel, keeps its state; its lease is released only now, after cleanup.)
pub(super) async fn finish(job: Job, ending: Ending, proof: Option<StopProof>, redactor: &Redactor) {
    let Job { inner, task, lease, guard_key, worktree, baseline, .. } = job;
    let task_id = task.task_id.clone();
    let proven = match &proof {
        Some(p) => p.proven(),
        None => {
            let id = task_id.clone();
            tokio::task::spawn_blocking(move || marker_pids(&id).is_empty()).await.unwrap_or(false)
        }
    };
    // The change set is taken before the lease goes: no other writer can have touched it.
    if let Some(baseline) = baseline {
        record_changes(&inner, &task_id, baseline, redactor).await;
    }
    // A worktree task's work goes on its branch (the change set above read its worktree).
    if let Some(wt) = &worktree {
        super::worktree::finish(&inner, &task_id, wt, proven).await;
    }
    release(&inner, &task_id, &guard_key, lease, proven, proof.as_ref()).await;
    // The provider can add no event any more: the count is final. The marker goes before the
    // terminal event this runner writes, so a reader who reads up to the terminal state has
    // seen it.
    let id = task_id.clone();
    if let Ok(Some(row)) = inner.store.call(move |s| s.get_task(&id)).await
        && row.events_dropped > 0
    {
        let event = NewEvent::new("events.dropped", json!({ "count": row.events_dropped }));
        let (tid, now) = (task_id.clone(), inner.clock.now_ms());
        let _ = inner.store.call(move |s| s.append_event(&tid, &event, None, now)).await;
    }
    persist(&inner, &task_id, ending, redactor).await;
    inner.active.lock().unwrap_or_else(|p| p.into_inner()).remove(&task_id);
    inner.changes.notify(&task_id);
    inner.collect_garbage().await;
}

/// Computes and stores a writer task's change set against its baseline (or why there is
/// none), with its event; the private snapshot directory goes afterwards.
async fn record_changes(inner: &Arc<Inner>, task_id: &str, baseline: Result<Baseline, String>, redactor: &Redactor) {
    let (state_dir, threshold) = (inner.config.state_dir.clone(), inner.config.limits.result_spool_threshold_bytes);
    let closing = inner.closing.load(std::sync::atomic::Ordering::SeqCst);
    let changes = match &baseline {
        Err(why) => changes::not_recorded(redactor.text(why), None),
        // A shutdown is bounded: no git run is started during one.
        Ok(b) if closing => {
            changes::not_recorded("the bridge was shutting down when the task ended".into(), Some(b.method))
        }
        Ok(b) => match inner.providers.snapshots().change_set(task_id, b).await {
            Err(why) => changes::not_recorded(redactor.text(&why), Some(b.method)),
            Ok(raw) => {
                let (id, r, method) = (task_id.to_owned(), redactor.clone(), b.method);
                tokio::task::spawn_blocking(move || match changes::parse(&raw, &r) {
                    Ok(set) => changes::recorded(&state_dir, &id, &set, method, threshold)
                        .unwrap_or_else(|e| changes::not_recorded(e.message, Some(method))),
                    Err(why) => changes::not_recorded(format!("git's output could not be read: {why}"), Some(method)),
                })
                .await
                .unwrap_or_else(|_| changes::not_recorded("the change set could not be computed".into(), Some(method)))
            }
        },
    };
    if let Ok(b) = baseline {
        let dir = b.dir;
        let _ = tokio::task::spawn_blocking(move || snapshot::remove(&dir)).await;
    }
    let event = match changes.status {
        "recorded" => NewEvent::new(
            "changes.recorded",
            json!({
                "files_changed": changes.files_changed,
                "added": changes.added,
                "removed": changes.removed,
                "truncated": changes.truncated,
            }),
        ),
        _ => NewEvent::new("changes.not_recorded", json!({ "reason": changes.reason })),
    };
    let spooled = changes.diff_storage == Some(ResultStorage::Spool);
    let (id, now) = (task_id.to_owned(), inner.clock.now_ms());
    let stored = inner.store.call(move |s| s.put_changes(&id, &changes, &event, now)).await;
    if let Err(e) = &stored {
        tracing::warn!(cause = %e, "cannot store the change set");
    }
    // Not stored (the task is gone, or already has one): its spool file goes too.
    if spooled && !matches!(stored, Ok(true)) {
        diffs::delete(inner.config.state_dir.clone(), vec![task_id.to_owned()]).await;
    }
}

/// Releases the writer lease, and the guard (named by `guard_key`) when the stop is `proven`.
async fn release(
    inner: &Arc<Inner>,
    task_id: &str,
    guard_key: &str,
    lease: Option<Lease>,
    proven: bool,
    proof: Option<&StopProof>,
) {
    let Some(lease) = lease else { return };
    drop(lease);
    let task_id = task_id.to_owned();
    if proven {
        let (key, id) = (guard_key.to_owned(), task_id.clone());
        if let Err(e) = inner.store.call(move |s| s.clear_guard(&key, &id)).await {
            tracing::warn!(cause = %e, "cannot clear the recovery guard");
        }
    } else {
        tracing::warn!(?proof, "provider stop not proven; the workdir keeps its recovery guard");
        let (key, id, now) = (guard_key.to_owned(), task_id.clone(), inner.clock.now_ms());
        if let Err(e) = inner.store.call(move |s| s.record_guard_kept(&key, &id, now)).await {
            tracing::warn!(cause = %e, "cannot write the recovery notification");
        }
        let key = guard_key.to_owned();
        if let Ok(Some(guard)) = inner.store.call(move |s| s.get_guard(&key)).await
            && guard.task_id == task_id
        {
            inner.watch_guard(guard, crate::error::code::AGENT_PROVIDER_INACTIVE);
        }
    }
}

/// Persists an ending the runner itself observed.
async fn persist(inner: &Arc<Inner>, task_id: &str, ending: Ending, redactor: &Redactor) {
    match ending {
        Ending::AlreadyTerminal => {}
        Ending::Completed(text) => {
            let text = redactor.text(&text);
            let (state_dir, id, threshold) =
                (inner.config.state_dir.clone(), task_id.to_owned(), inner.config.limits.result_spool_threshold_bytes);
            let stored = tokio::task::spawn_blocking(move || results::store(&state_dir, &id, &text, threshold))
                .await
                .unwrap_or_else(|e| Err(crate::error::ToolError::internal("result storage failed", e)));
            match stored {
                Ok(result) => {
                    if result.storage == ResultStorage::Spool {
                        let event = NewEvent::new(
                            "task.result_spooled",
                            json!({ "size_bytes": result.size_bytes, "sha256": result.sha256 }),
                        );
                        let (tid, now) = (task_id.to_owned(), inner.clock.now_ms());
                        let _ = inner.store.call(move |s| s.append_event(&tid, &event, None, now)).await;
                    }
                    let fields = TransitionFields {
                        event: lifecycle(
                            "task.completed",
                            json!({ "result_storage": result.storage.as_str(), "result_size_bytes": result.size_bytes }),
                        ),
                        result: Some(result),
                        ..Default::default()
                    };
                    if transition(inner, task_id, TaskStatus::Succeeded, fields).await.is_err() {
                        // The task was cancelled or interrupted meanwhile: the late result is
                        // discarded, and so is its spool file.
                        results::delete(inner.config.state_dir.clone(), vec![task_id.to_owned()]).await;
                    }
                }
                Err(e) => fail(inner, task_id, e.code, e.message).await,
            }
        }
        Ending::Failed { code, message } => fail(inner, task_id, code, message).await,
        Ending::Interrupted { code, message } => {
            let fields = TransitionFields {
                error_code: Some(code.to_owned()),
                error_message: Some(message),
                event: lifecycle("task.interrupted", json!({ "error_code": code })),
                ..Default::default()
            };
            let _ = transition(inner, task_id, TaskStatus::Interrupted, fields).await;
        }
    }
}

/// Fails a task; an error while it waits for a human interrupts it instead (the transition
/// matrix has no `waiting_* → failed`).
async fn fail(inner: &Arc<Inner>, task_id: &str, error_code: &'static str, message: String) {
    let fields = |event: &str| TransitionFields {
        error_code: Some(error_code.to_owned()),
        error_message: Some(message.clone()),
        event: lifecycle(event, json!({ "error_code": error_code })),
        ..Default::default()
    };
    match transition(inner, task_id, TaskStatus::Failed, fields("task.failed")).await {
        Err(StoreError::InvalidTransition { from, .. }) if from.is_waiting() => {
            let _ = transition(inner, task_id, TaskStatus::Interrupted, fields("task.interrupted")).await;
        }
        _ => {}
    }
}
