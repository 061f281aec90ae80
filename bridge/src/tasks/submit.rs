//! Submission: policy checks, retry-safe idempotency, the writer lease and recovery guard,
//! the immutable manifest, and the hand-off to a runner. Never waits for the provider.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::manifest::{self, ManifestInput, Submission};
use super::{Active, Inner, MAX_TEXT_BYTES, TaskService, job, paths, runner, worktree};
use crate::config::{AgentMode, RuntimeName, Workdir};
use crate::error::{ToolError, code};
use crate::lease::LeaseError;
use crate::model::{Principal, Profile};
use crate::store::events::NewEvent;
use crate::store::guards::guard_key;
use crate::store::tasks::{Inserted, NewGuard, NewTask, TaskRow};

/// A validated `submit_agent_task` call.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// Runtime name.
    pub runtime: RuntimeName,
    /// Workdir alias.
    pub workdir: String,
    /// The objective.
    pub prompt: String,
    /// Relative cwd.
    pub path: String,
    /// Profile.
    pub profile: Profile,
    /// Requested model.
    pub model: Option<String>,
    /// Where the task works (`None`: the workdir's setting).
    pub isolation: Option<crate::model::Isolation>,
    /// For a worktree task: what its new branch starts from (`None`: `HEAD`).
    pub base_ref: Option<String>,
    /// Continuation source.
    pub continue_from_task_id: Option<String>,
    /// Caller metadata.
    pub correlation_id: Option<String>,
    /// Retry key.
    pub idempotency_key: Option<String>,
}

/// Checks an opaque caller string: at most `max` UTF-8 bytes and no control characters.
fn check_opaque(param: &str, value: &Option<String>, max: usize) -> Result<(), ToolError> {
    if let Some(v) = value {
        if v.len() > max {
            return Err(ToolError::invalid(param, format!("must be at most {max} UTF-8 bytes")));
        }
        if v.chars().any(char::is_control) {
            return Err(ToolError::invalid(param, "must not contain control characters"));
        }
    }
    Ok(())
}

fn handle(row: &TaskRow, replay: bool, retention_hours: u64) -> Value {
    json!({
        "task_id": row.task_id,
        "status": row.status.as_str(),
        "correlation_id": row.correlation_id,
        "idempotency_key": row.idempotency_key,
        "created_at": crate::clock::rfc3339(row.created_at),
        "updated_at": crate::clock::rfc3339(row.updated_at),
        // How long the finished task stays readable (MCP Tasks' `ttlMs`).
        "retention_ms": retention_hours.saturating_mul(3_600_000),
        "idempotent_replay": replay,
    })
}

/// Returns the retained task when the fingerprint matches, the conflict otherwise.
fn replay(row: TaskRow, fingerprint: &str, retention_hours: u64) -> Result<Value, ToolError> {
    if row.request_fingerprint.as_deref() == Some(fingerprint) {
        Ok(handle(&row, true, retention_hours))
    } else {
        Err(ToolError::from(crate::store::StoreError::IdempotencyConflict))
    }
}

impl TaskService {
    /// `submit_agent_task`: returns `queued` (or the retained task for a replayed key) at once.
    pub async fn submit(&self, principal: &Principal, req: SubmitRequest) -> Result<Value, ToolError> {
        let inner = &self.inner;
        if req.prompt.len() > MAX_TEXT_BYTES {
            return Err(ToolError::new(
                code::AGENT_PROMPT_TOO_LARGE,
                format!("the prompt is larger than {MAX_TEXT_BYTES} bytes"),
            ));
        }
        if req.prompt.trim().is_empty() {
            return Err(ToolError::invalid("prompt", "must not be empty"));
        }
        check_opaque("idempotency_key", &req.idempotency_key, 256)?;
        if req.idempotency_key.as_deref() == Some("") {
            return Err(ToolError::invalid("idempotency_key", "must not be empty"));
        }
        check_opaque("correlation_id", &req.correlation_id, 256)?;
        check_opaque("model", &req.model, 512)?;

        let (workdir, path) = self.check_target(principal, &req.workdir, req.runtime, req.profile, &req.path)?;
        let isolation = req.isolation.map(|i| i.as_str());
        let submission = Submission {
            runtime: req.runtime.as_str(),
            workdir: &workdir.alias,
            path: &path,
            profile: req.profile.as_str(),
            prompt: &req.prompt,
            model: req.model.as_deref(),
            continue_from_task_id: req.continue_from_task_id.as_deref(),
            correlation_id: req.correlation_id.as_deref(),
            isolation,
            base_ref: req.base_ref.as_deref(),
        };
        let fingerprint = manifest::fingerprint(&submission);

        // Lookup 1: a retry never takes a lease, probes a runtime or touches the provider.
        if let Some(key) = &req.idempotency_key {
            let (p, k) = (principal.name.clone(), key.clone());
            if let Some(row) = inner.store.call(move |s| s.find_by_idempotency_key(&p, &k)).await? {
                return replay(row, &fingerprint, inner.config.limits.retention_hours);
            }
        }

        let containment = inner.providers.containment();
        containment.check_required().map_err(|e| ToolError::new(code::AGENT_SANDBOX_UNAVAILABLE, e.0))?;
        let info = inner.providers.probe(req.runtime).await;
        if !info.available {
            return Err(ToolError::new(
                code::AGENT_RUNTIME_UNAVAILABLE,
                format!(
                    "runtime {} is unavailable: {}",
                    req.runtime.as_str(),
                    info.detail.as_deref().unwrap_or("no detail")
                ),
            ));
        }
        inner.providers.check_prompt(req.runtime, &req.prompt).map_err(|e| ToolError::new(code::AGENT_DISABLED, e))?;
        let (resume_session, prior_worktree) = match &req.continue_from_task_id {
            Some(prior) => {
                let session = self.check_continuation(principal, prior, &req).await?;
                let id = prior.clone();
                (Some(session), inner.store.call(move |s| s.get_worktree(&id)).await?)
            }
            None => (None, None),
        };
        let task_id = crate::ids::task_id();
        let placement = worktree::decide(inner, &workdir, &req, &task_id, prior_worktree.as_ref())?;
        if placement.is_some() {
            worktree::check_repository(&workdir).await?;
        }
        let cwd = resolve_cwd(&workdir, &path).await?;

        inner.collect_garbage().await;

        let _critical = inner.submit_lock.lock().await;
        if inner.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ToolError::new(
                code::BRIDGE_CLOSED,
                "the bridge is shutting down; retry with the same idempotency_key once it is back",
            ));
        }
        // Lookup 2, under the submit critical section, before any lease or row.
        if let Some(key) = &req.idempotency_key {
            let (p, k) = (principal.name.clone(), key.clone());
            if let Some(row) = inner.store.call(move |s| s.find_by_idempotency_key(&p, &k)).await? {
                return replay(row, &fingerprint, inner.config.limits.retention_hours);
            }
        }
        let writer = req.profile == Profile::WorkspaceWrite;
        // An in-place writer holds the workdir; a worktree task holds its branch.
        let guard_key = guard_key(&workdir.alias, placement.as_ref().map(|p| p.branch.as_str()));
        let lease = if writer {
            inner.reconcile_guard(principal, &guard_key).await?;
            Some(
                inner
                    .take_lease(
                        principal,
                        &workdir,
                        placement.as_ref().map(|p| (p.branch.as_str(), p.origin_task_id.as_str())),
                    )
                    .await?,
            )
        } else {
            None
        };

        let now = inner.clock.now_ms();
        let deadline_at = now + (inner.config.limits.task_timeout_seconds as i64).saturating_mul(1000);
        let sandbox = containment.manifest_json(&workdir, req.profile == Profile::WorkspaceWrite);
        let isolation_json = match &placement {
            Some(p) => json!({ "mode": "worktree", "branch": p.branch, "base_ref": p.base_ref }),
            None => json!({ "mode": "in_place" }),
        };
        let (manifest_json, manifest_sha256) = manifest::build(&ManifestInput {
            submission: &submission,
            runtime_version: info.version.as_deref(),
            containment: containment.kind(),
            sandbox: &sandbox,
            workdir: &workdir,
            limits: &inner.config.limits,
            principal: &principal.name,
            idempotency_key: req.idempotency_key.as_deref(),
            deadline_at,
            isolation: &isolation_json,
        });
        let new = NewTask {
            task_id: task_id.clone(),
            principal: principal.name.clone(),
            runtime: req.runtime.as_str().to_owned(),
            workdir_alias: workdir.alias.clone(),
            relative_cwd: path.clone(),
            profile: req.profile.as_str().to_owned(),
            requested_model: req.model.clone(),
            created_at: now,
            deadline_at,
            continue_from_task_id: req.continue_from_task_id.clone(),
            correlation_id: req.correlation_id.clone(),
            idempotency_key: req.idempotency_key.clone(),
            request_fingerprint: req.idempotency_key.as_ref().map(|_| fingerprint.clone()),
            manifest_json,
            manifest_sha256,
            title: super::accounting::title_of(&req.prompt).map(|t| inner.redactor(&workdir.alias).text(&t)),
        };
        let guard = writer.then(|| NewGuard {
            workdir_alias: guard_key.clone(),
            worktree: placement.as_ref().map(worktree::Placement::new_row),
        });
        let event = NewEvent::new(
            "task.submitted",
            json!({ "runtime": new.runtime, "workdir": new.workdir_alias, "profile": new.profile }),
        );
        let max_active = inner.config.limits.max_active_tasks;
        let inserted = {
            let new = new.clone();
            inner.store.call(move |s| s.insert_task(&new, max_active, guard.as_ref(), &event)).await?
        };
        let row = match inserted {
            Inserted::Created(row) => row,
            Inserted::Existing(row) => return replay(row, &fingerprint, inner.config.limits.retention_hours),
        };

        let (control_tx, control_rx) = mpsc::channel(16);
        // Not a child of the shutdown token: at shutdown the terminal state is persisted
        // first, and only then is each runner cancelled (`TaskService::shutdown`).
        let cancel = tokio_util::sync::CancellationToken::new();
        inner.active.lock().unwrap_or_else(|p| p.into_inner()).insert(
            row.task_id.clone(),
            Active {
                cancel: cancel.clone(),
                control: control_tx,
                runtime: req.runtime,
                writes: (writer && placement.is_none()).then(|| workdir.alias.clone()),
            },
        );
        let job = job::Job {
            inner: Arc::clone(inner),
            task: row.clone(),
            runtime: req.runtime,
            cwd,
            profile: req.profile,
            prompt: req.prompt,
            model: req.model,
            resume_session,
            lease,
            guard_key,
            worktree: placement.map(|placement| worktree::WorktreeJob {
                placement,
                checkout: workdir.path.clone(),
                path: path.clone(),
                created: None,
            }),
            workdir_root: workdir.path.clone(),
            baseline: None,
            cancel,
            control: control_rx,
        };
        // Every log line of the runner and of its provider's I/O tasks carries the task (the
        // span is at error level so that it is on whatever the log level lets through).
        let span = tracing::error_span!(
            "task",
            task_id = %row.task_id,
            runtime = req.runtime.as_str(),
            workdir = %workdir.alias
        );
        inner.tracker.spawn(tracing::Instrument::instrument(runner::run(job), span));
        Ok(handle(&row, false, inner.config.limits.retention_hours))
    }

    /// The policy checks of a submission, creating nothing: the workdir exists and the
    /// principal may use it, agents are enabled there, the runtime is allowed, the profile fits
    /// the workdir's mode, and the relative path is well formed. Returns the workdir and the
    /// normalized path. `submit_agent_plan` runs the same checks before it stores a plan.
    pub fn check_target(
        &self,
        principal: &Principal,
        alias: &str,
        runtime: RuntimeName,
        profile: Profile,
        path: &str,
    ) -> Result<(Workdir, String), ToolError> {
        let workdir = self.inner.workdir(principal, alias)?.clone();
        if workdir.agent_mode == AgentMode::Disabled {
            return Err(ToolError::new(
                code::AGENT_DISABLED,
                format!("agents are disabled on workdir {:?}", workdir.alias),
            ));
        }
        if !workdir.runtimes.contains(&runtime) {
            return Err(ToolError::new(
                code::AGENT_RUNTIME_NOT_ALLOWED,
                format!("runtime {} is not allowed on workdir {:?}", runtime.as_str(), workdir.alias),
            ));
        }
        let mode_allows = match profile {
            Profile::Review => true,
            Profile::WorkspaceWrite => workdir.agent_mode == AgentMode::WorkspaceWrite && !workdir.read_only,
        };
        if !mode_allows {
            return Err(ToolError::new(
                code::AGENT_PROFILE_NOT_ALLOWED,
                format!(
                    "profile {} is not allowed on workdir {:?} (mode {})",
                    profile.as_str(),
                    workdir.alias,
                    workdir.agent_mode.as_str()
                ),
            ));
        }
        let path = paths::normalize(path)?;
        Ok((workdir, path))
    }

    /// Checks a continuation source and returns the native session to resume.
    async fn check_continuation(
        &self,
        principal: &Principal,
        prior_id: &str,
        req: &SubmitRequest,
    ) -> Result<String, ToolError> {
        let prior = self.inner.visible_task(principal, prior_id).await?;
        let not_resumable = |why: &str| ToolError::new(code::AGENT_SESSION_NOT_RESUMABLE, why.to_owned());
        if prior.runtime != req.runtime.as_str() {
            return Err(not_resumable("a continuation must use the same runtime as the task it continues"));
        }
        if prior.workdir_alias != req.workdir {
            return Err(not_resumable("a continuation must use the same workdir as the task it continues"));
        }
        if !prior.status.is_terminal() {
            return Err(not_resumable("the task to continue has not finished yet"));
        }
        if prior.profile == Profile::Review.as_str() && req.profile == Profile::WorkspaceWrite {
            return Err(ToolError::new(
                code::AGENT_PROFILE_NOT_ALLOWED,
                "a review task cannot be continued as workspace-write",
            ));
        }
        prior.native_session_id.ok_or_else(|| not_resumable("the task to continue has no session to resume"))
    }
}

/// Resolves a normalized relative path inside a workdir (it must exist), off the reactor.
pub async fn resolve_cwd(workdir: &Workdir, path: &str) -> Result<std::path::PathBuf, ToolError> {
    let (root, rel) = (workdir.path.clone(), path.to_owned());
    tokio::task::spawn_blocking(move || paths::resolve(&root, &rel))
        .await
        .map_err(|e| ToolError::internal("path resolution failed", e))?
}

impl Inner {
    /// Takes the writer lease of `workdir` (in place), or of a branch of it (`branch`, made by
    /// the task `origin`); `WORKDIR_BUSY` when another writer holds it.
    pub(super) async fn take_lease(
        self: &Arc<Self>,
        principal: &Principal,
        workdir: &Workdir,
        branch: Option<(&str, &str)>,
    ) -> Result<crate::lease::Lease, ToolError> {
        let (leases, slot) = (self.leases.clone(), workdir.slot);
        let origin = branch.map(|(_, origin)| origin.to_owned());
        let taken = tokio::task::spawn_blocking(move || match origin {
            Some(origin) => leases.try_acquire_branch(slot, &origin),
            None => leases.try_acquire(slot),
        })
        .await;
        match taken {
            Ok(Ok(lease)) => Ok(lease),
            Ok(Err(LeaseError::Busy)) => {
                let key = guard_key(&workdir.alias, branch.map(|(b, _)| b));
                let what = match branch {
                    Some((branch, _)) => format!("branch {branch} of workdir {:?}", workdir.alias),
                    None => format!("workdir {:?}", workdir.alias),
                };
                Err(super::busy::busy(self, principal, &key, &what).await)
            }
            Ok(Err(e)) => Err(ToolError::internal("cannot take the writer lease", e)),
            Err(e) => Err(ToolError::internal("cannot take the writer lease", e)),
        }
    }

    /// Lazy reconciliation at submit of a writer: a guard left by a task whose stop can now be
    /// proven is cleared (the task, if still non-terminal, is interrupted); otherwise the
    /// workdir (or the worktree branch: `alias` is the guard's key) stays closed with
    /// `WORKDIR_RECOVERY_REQUIRED`.
    pub(super) async fn reconcile_guard(self: &Arc<Self>, principal: &Principal, alias: &str) -> Result<(), ToolError> {
        let a = alias.to_owned();
        let Some(guard) = self.store.call(move |s| s.get_guard(&a)).await? else {
            return Ok(());
        };
        let live = self.active.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&guard.task_id);
        if live {
            let what = match alias.split_once('@') {
                Some((workdir, branch)) => format!("branch {branch} of workdir {workdir:?}"),
                None => format!("workdir {alias:?}"),
            };
            return Err(super::busy::busy(self, principal, alias, &what).await);
        }
        if self.try_clear_guard(&guard, crate::error::code::AGENT_PROVIDER_INACTIVE).await {
            Ok(())
        } else {
            Err(ToolError::new(
                code::WORKDIR_RECOVERY_REQUIRED,
                format!(
                    "workdir {alias:?} is closed: the stop of task {} is not proven; see `agent-bridge doctor`",
                    guard.task_id
                ),
            ))
        }
    }
}
