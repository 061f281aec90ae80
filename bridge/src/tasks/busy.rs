//! What a `WORKDIR_BUSY` says: which task holds the workdir (or its branch), in what state and
//! since when, and — when it waits for a human — that an answer frees it and by when at most.

use std::sync::Arc;

use super::Inner;
use crate::clock::rfc3339;
use crate::error::{ToolError, code};
use crate::model::{Principal, TaskStatus};

/// A `WORKDIR_BUSY` for the writer slot `guard_key` (a workdir alias, or `alias@branch`);
/// `what` names it for the caller (`workdir "api"`, `branch … of workdir "api"`). The holder
/// is read from the slot's recovery guard; when there is none yet (the holder is between its
/// lease and its guard, a few milliseconds), the error says only that the slot is busy. The
/// holder is named only to a `viewer` who may see it (its owner, or an operator); anyone else
/// learns its state and since when, not which task it is.
pub(super) async fn busy(inner: &Arc<Inner>, viewer: &Principal, guard_key: &str, what: &str) -> ToolError {
    let key = guard_key.to_owned();
    let holder = inner
        .store
        .call(move |s| {
            let Some(guard) = s.get_guard(&key)? else { return Ok(None) };
            let Some(task) = s.get_task(&guard.task_id)? else { return Ok(None) };
            let pending = match &task.pending_request_id {
                Some(id) => s.get_interaction(id)?,
                None => None,
            };
            Ok(Some((task, pending)))
        })
        .await
        .ok()
        .flatten();
    let Some((task, pending)) = holder else {
        return ToolError::new(code::WORKDIR_BUSY, format!("{what} is busy with another writer"));
    };
    let since = match task.status {
        TaskStatus::Queued | TaskStatus::Starting => task.created_at,
        _ => pending.as_ref().map(|p| p.created_at).or(task.started_at).unwrap_or(task.created_at),
    };
    let sees = viewer.sees_everything() || viewer.name == task.principal;
    let holder = if sees { format!("task {}", task.task_id) } else { "another caller's task".to_owned() };
    let mut message = format!("{what} is busy: {holder} holds it ({} since {})", task.status.as_str(), rfc3339(since));
    match (task.status, &pending) {
        (TaskStatus::WaitingForApproval | TaskStatus::WaitingForQuestion, Some(p)) => {
            let kind = if task.status == TaskStatus::WaitingForApproval { "an approval" } else { "an answer" };
            let request = if sees { format!(" (request {})", p.request_id) } else { String::new() };
            message.push_str(&format!(
                "; it waits for {kind} from a human{request} and holds it until that is given or expires at {}",
                rfc3339(p.expires_at.min(task.deadline_at))
            ));
        }
        _ => message.push_str(&format!("; its deadline is {}", rfc3339(task.deadline_at))),
    }
    ToolError::new(code::WORKDIR_BUSY, message)
}
