//! The task service: submission, execution, interactions, reads, cancellation and retention.
//!
//! It owns the in-memory side of every active task (its cancellation token and the channel
//! to its runner) and delegates everything durable to the store. One runner task per active
//! task drives the provider; all runners are tracked and drained at shutdown.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{BridgeConfig, RuntimeName, Workdir};
use crate::error::{ToolError, code};
use crate::lease::Leases;
use crate::model::Principal;
use crate::provider::Providers;
use crate::store::Store;
use crate::store::tasks::TaskRow;

pub mod accounting;
mod busy;
pub mod changes;
pub mod diffs;
mod ending;
mod event_page;
mod handback;
mod interact;
pub use interact::Answer;
mod job;
mod leftovers;
pub use leftovers::{BRIDGE_PRINCIPAL, BRIDGE_SURFACE, RECONCILE_CAPABILITY};
mod long_poll;
#[cfg(test)]
mod long_poll_tests;
pub mod manifest;
pub mod paths;
pub mod recovery;
pub mod redact;
pub mod results;
mod retrying;
mod runner;
mod status;
mod submit;
pub mod task_view;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod timer_tests;
mod views;
pub mod watch;
mod worktree;

pub use submit::{SubmitRequest, resolve_cwd};

/// Largest prompt, steering message and interaction payload, in UTF-8 bytes.
pub const MAX_TEXT_BYTES: usize = 65_536;
/// Largest event payload, in bytes of JSON.
pub const MAX_EVENT_BYTES: usize = 65_536;
/// How long a provider interrupt may take before cleanup goes on without it.
pub const INTERRUPT_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// A message from a caller to a task's runner.
#[derive(Debug)]
enum Control {
    Approval { request_id: String, decision: String, granted_permission_ids: Vec<String> },
    Answers { request_id: String, answers: serde_json::Value },
    Steer(String),
}

/// The in-memory handle of an active task.
#[derive(Debug)]
struct Active {
    cancel: CancellationToken,
    control: mpsc::Sender<Control>,
    runtime: RuntimeName,
    /// The workdir whose writer lease this task holds, if it is a writer.
    writes: Option<String>,
}

/// Everything the service needs, shared by its handle and the runners.
struct Inner {
    config: Arc<BridgeConfig>,
    store: Arc<Store>,
    clock: Clock,
    providers: Providers,
    leases: Leases,
    changes: watch::Changes,
    active: Mutex<HashMap<String, Active>>,
    submit_lock: tokio::sync::Mutex<()>,
    cancel_lock: tokio::sync::Mutex<()>,
    /// One merge or discard at a time (each answers what the one before it did).
    hand_back_lock: tokio::sync::Mutex<()>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Tasks whose guard a watcher waits to clear (one watcher per guard).
    watched_guards: Mutex<std::collections::HashSet<String>>,
    /// Set once the bridge stops: submissions are refused from then on.
    closing: std::sync::atomic::AtomicBool,
    /// What the start-up's reconciliation stopped of the previous bridge's sandboxes.
    reconciled: Mutex<Option<serde_json::Value>>,
    home: Option<PathBuf>,
}

/// The task service handle.
#[derive(Clone)]
pub struct TaskService {
    inner: Arc<Inner>,
}

impl TaskService {
    /// Builds the service. `shutdown` is the root token: cancelled when the bridge stops.
    pub fn new(
        config: Arc<BridgeConfig>,
        store: Arc<Store>,
        clock: Clock,
        providers: Providers,
        leases: Leases,
        shutdown: CancellationToken,
        home: Option<PathBuf>,
    ) -> TaskService {
        let service = TaskService {
            inner: Arc::new(Inner {
                config,
                store,
                clock,
                providers,
                leases,
                changes: watch::Changes::default(),
                active: Mutex::new(HashMap::new()),
                submit_lock: tokio::sync::Mutex::new(()),
                cancel_lock: tokio::sync::Mutex::new(()),
                hand_back_lock: tokio::sync::Mutex::new(()),
                tracker: TaskTracker::new(),
                shutdown,
                closing: std::sync::atomic::AtomicBool::new(false),
                watched_guards: Mutex::new(std::collections::HashSet::new()),
                reconciled: Mutex::new(None),
                home,
            }),
        };
        service.report_egress();
        service
    }

    /// The providers (for runtime listings).
    pub fn providers(&self) -> &Providers {
        &self.inner.providers
    }

    /// The configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.inner.config
    }

    /// Number of tasks with a live runner.
    pub fn active_count(&self) -> usize {
        self.inner.active.lock().map(|a| a.len()).unwrap_or(0)
    }

    /// The pulse that beats on every change of any task: a state, a pending request, a lease
    /// let go (plans waiting for a workdir and the board's live updates follow it).
    pub fn pulse(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe_all()
    }

    /// Beats the pulse for a change outside tasks (a plan filed, approved, rejected, ended).
    pub fn announce(&self) {
        self.inner.changes.pulse();
    }

    /// Waits, without polling, until the task is terminal and returns it; `None` when `stop`
    /// fires first or the task no longer exists. (A re-read every minute is the only timer,
    /// a safety net for a change nobody announced.)
    pub async fn wait_terminal(&self, task_id: &str, stop: &CancellationToken) -> Result<Option<TaskRow>, ToolError> {
        let mut changes = self.inner.changes.watch(task_id);
        loop {
            let id = task_id.to_owned();
            let Some(row) = self.inner.store.call(move |s| s.get_task(&id)).await? else { return Ok(None) };
            if row.status.is_terminal() {
                return Ok(Some(row));
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
                _ = stop.cancelled() => return Ok(None),
            }
        }
    }
}

impl Inner {
    /// A workdir by alias, if the principal may use it.
    fn workdir(&self, principal: &Principal, alias: &str) -> Result<&Workdir, ToolError> {
        self.config
            .workdirs
            .iter()
            .find(|w| w.alias == alias && principal.may_use_workdir(&w.alias))
            .ok_or_else(|| ToolError::new(code::WORKDIR_NOT_FOUND, format!("no workdir named {alias:?}")))
    }

    /// Reads a task the principal may see; anything else is `AGENT_TASK_NOT_FOUND`.
    async fn visible_task(&self, principal: &Principal, task_id: &str) -> Result<TaskRow, ToolError> {
        if !crate::ids::looks_like(task_id, "agt_") {
            return Err(ToolError::task_not_found());
        }
        let id = task_id.to_owned();
        let row = self.store.call(move |s| s.get_task(&id)).await?;
        match row {
            Some(row) if principal.sees_everything() || row.principal == principal.name => Ok(row),
            _ => Err(ToolError::task_not_found()),
        }
    }

    /// The redactor for a task's workdir: its own root becomes `<workdir>`, and the other
    /// workdirs, the state directory and the home directory are hidden too.
    fn redactor(&self, alias: &str) -> redact::Redactor {
        self.redactor_in(alias, None)
    }

    /// The redactor for a task that works in `tree` (its worktree) rather than in its workdir:
    /// the tree becomes `<workdir>`, and the checkout is hidden with the rest.
    fn redactor_in(&self, alias: &str, tree: Option<&std::path::Path>) -> redact::Redactor {
        let mut others: Vec<&std::path::Path> = vec![&self.config.state_dir, &self.config.lock_dir];
        if let Some(home) = &self.home {
            others.push(home);
        }
        let own = self.config.workdirs.iter().find(|w| w.alias == alias);
        others.extend(
            self.config.workdirs.iter().filter(|w| w.alias != alias || tree.is_some()).map(|w| w.path.as_path()),
        );
        match (tree, own) {
            (Some(tree), _) => redact::Redactor::new(tree, &others),
            (None, Some(w)) => redact::Redactor::new(&w.path, &others),
            (None, None) => redact::Redactor::new(std::path::Path::new("/nonexistent-workdir"), &others),
        }
    }
}
