//! A task's change set, around its provider: the baseline of its workdir before the provider
//! starts, and after the provider stopped — before the writer lease is released, so nobody
//! else has written since — the change set against it, stored with the task (or why there is
//! none). The baseline's private files are removed either way.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::Inner;
use super::redact::Redactor;
use crate::store::events::NewEvent;

/// Records the baseline of the workdir at `root`; `Err` says why there will be no change set.
pub(super) async fn take_baseline(
    inner: &Arc<Inner>,
    task_id: &str,
    root: &Path,
    redactor: &Redactor,
) -> Result<(), String> {
    let dir = crate::changes::baseline_dir(&inner.config.state_dir, task_id);
    let state_dir = inner.config.state_dir.clone();
    let parent = dir.parent().map(Path::to_path_buf);
    let made = tokio::task::spawn_blocking(move || match parent {
        Some(p) => crate::files::ensure_private_dir(&p).and_then(|()| crate::files::ensure_private_dir(&dir)),
        None => Err("no place for the baseline".to_owned()),
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let dir = crate::changes::baseline_dir(&state_dir, task_id);
    let taken = match made {
        Ok(()) => inner.providers.baseline(task_id, root, &dir).await,
        Err(e) => Err(format!("cannot create the baseline's private directory: {e}")),
    };
    if let Err(why) = &taken {
        remove_baseline(inner, task_id).await;
        tracing::info!(reason = %redactor.text(why), "no baseline: the task will have no change set");
    }
    taken.map_err(|why| redactor.text(&why))
}

/// Computes and stores the change set against the baseline (`None`: none was attempted, so
/// nothing is stored), then removes the baseline.
pub(super) async fn record(
    inner: &Arc<Inner>,
    task_id: &str,
    root: &Path,
    baseline: Option<Result<(), String>>,
    redactor: &Redactor,
) {
    let Some(baseline) = baseline else { return };
    let row = match baseline {
        Err(why) => super::diffs::not_recorded(why),
        Ok(()) => {
            let dir = crate::changes::baseline_dir(&inner.config.state_dir, task_id);
            match inner.providers.change_set(task_id, root, &dir).await {
                Ok(set) => {
                    let (state_dir, id, threshold) = (
                        inner.config.state_dir.clone(),
                        task_id.to_owned(),
                        inner.config.limits.result_spool_threshold_bytes,
                    );
                    tokio::task::spawn_blocking(move || super::diffs::recorded(&state_dir, &id, &set, threshold))
                        .await
                        .unwrap_or_else(|e| Err(crate::error::ToolError::internal("diff storage failed", e)))
                        .unwrap_or_else(|e| super::diffs::not_recorded(e.message))
                }
                Err(why) => super::diffs::not_recorded(redactor.text(&why)),
            }
        }
    };
    remove_baseline(inner, task_id).await;
    let event = if row.status == "recorded" {
        NewEvent::new(
            "changes.recorded",
            json!({ "files_changed": row.files_changed, "added": row.added, "removed": row.removed, "truncated": row.truncated }),
        )
    } else {
        NewEvent::new("changes.not_recorded", json!({ "reason": row.reason }))
    };
    let (tid, now) = (task_id.to_owned(), inner.clock.now_ms());
    if let Err(e) = inner.store.call(move |s| s.put_changes(&tid, &row, &event, now)).await {
        tracing::warn!(cause = %e, "cannot store the task's change set");
    }
}

async fn remove_baseline(inner: &Arc<Inner>, task_id: &str) {
    let (state_dir, id) = (inner.config.state_dir.clone(), task_id.to_owned());
    let _ = tokio::task::spawn_blocking(move || crate::changes::remove(&state_dir, &id)).await;
}
