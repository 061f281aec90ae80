//! A task's job: what its runner owns, how the provider part ended, and the two helpers the
//! runner and the ending share (a checked transition that announces itself, a lifecycle event).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Control, Inner};
use crate::config::RuntimeName;
use crate::lease::Lease;
use crate::model::{Profile, TaskStatus};
use crate::provider::snapshot::Baseline;
use crate::store::StoreError;
use crate::store::events::NewEvent;
use crate::store::tasks::{TaskRow, TransitionFields};

/// Everything a runner owns.
pub(super) struct Job {
    pub inner: Arc<Inner>,
    pub task: TaskRow,
    pub runtime: RuntimeName,
    pub cwd: PathBuf,
    pub profile: Profile,
    pub prompt: String,
    pub model: Option<String>,
    pub resume_session: Option<String>,
    pub lease: Option<Lease>,
    /// The key of the recovery guard a writer published (the workdir's alias, or its branch's).
    pub guard_key: String,
    /// A worktree task's worktree.
    pub worktree: Option<super::worktree::WorktreeJob>,
    /// The workdir's root (a writer task's change set covers all of it).
    pub workdir_root: PathBuf,
    /// A writer task's baseline, or why none could be taken (`None`: not a writer, or the
    /// task ended before it started).
    pub baseline: Option<Result<Baseline, String>>,
    pub cancel: CancellationToken,
    pub control: mpsc::Receiver<Control>,
}

/// How the provider part ended.
pub(super) enum Ending {
    /// Someone else already made the task terminal (cancel, shutdown, a timer of ours).
    AlreadyTerminal,
    Completed(String),
    Failed {
        code: &'static str,
        message: String,
    },
    Interrupted {
        code: &'static str,
        message: String,
    },
}

/// Moves a task through a checked transition at the clock's now, then tells its watchers.
pub(super) async fn transition(
    inner: &Inner,
    task_id: &str,
    to: TaskStatus,
    fields: TransitionFields,
) -> Result<TaskRow, StoreError> {
    let now = inner.clock.now_ms();
    let id = task_id.to_owned();
    let result = inner.store.call(move |s| s.transition(&id, to, fields, now)).await;
    inner.changes.notify(task_id);
    result
}

/// A lifecycle event for a transition.
pub(super) fn lifecycle(event_type: &str, payload: Value) -> Option<NewEvent> {
    Some(NewEvent::new(event_type, payload))
}
