//! The runner: one tracked tokio task per active task. It starts the provider, records its
//! events, turns its requests into pending interactions, relays answers and steering, enforces
//! the task and interaction deadlines with one timer each, and on any ending stops the
//! provider with proof before it releases the writer lease and, on proof, the guard.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::job::{Ending, Job, lifecycle, transition};
use super::redact::Redactor;
use super::{Control, INTERRUPT_BOUND, Inner, MAX_EVENT_BYTES, MAX_TEXT_BYTES, recovery, results};
use crate::error::code;
use crate::model::{InteractionKind, TaskStatus};
use crate::provider::supervise::StopProof;
use crate::provider::{ProviderCommand, ProviderEvent, Session, StartSpec, TurnOutcome};
use crate::store::events::NewEvent;
use crate::store::interactions::NewInteraction;
use crate::store::tasks::TransitionFields;

/// Why a request the runtime resolved itself can no longer be answered here.
pub(super) const WITHDRAWN: &str = "the runtime resolved this request itself (answered elsewhere, e.g. in Codex \
    Remote Control, or withdrawn by the agent): nothing was sent for it from here";

/// The pending interaction this runner relays.
struct Pending {
    request_id: String,
    native_id: String,
    kind: InteractionKind,
    expires_at: i64,
}

pub(super) async fn run(mut job: Job) {
    let tree = job.worktree.as_ref().map(|_| job.inner.providers.worktrees().tree_of(&job.task.task_id));
    let redactor = job.inner.redactor_in(&job.task.workdir_alias, tree.as_deref());
    let (ending, proof) = drive(&mut job, &redactor).await;
    super::ending::finish(job, ending, proof, &redactor).await;
}

async fn drive(job: &mut Job, redactor: &Redactor) -> (Ending, Option<StopProof>) {
    let inner = Arc::clone(&job.inner);
    let task_id = job.task.task_id.clone();
    if job.cancel.is_cancelled() {
        return (Ending::AlreadyTerminal, None);
    }
    let started = TransitionFields {
        event: lifecycle("task.started", json!({ "runtime": job.runtime.as_str() })),
        ..Default::default()
    };
    if transition(&inner, &task_id, TaskStatus::Starting, started).await.is_err() {
        return (Ending::AlreadyTerminal, None);
    }
    if let Some(wt) = job.worktree.as_mut() {
        if let Err(message) = super::worktree::create(&inner, &task_id, wt).await {
            return (Ending::Failed { code: code::WORKTREE_FAILED, message: redactor.text(&message) }, None);
        }
        let tree = wt.created.as_ref().map(|c| c.tree.clone()).unwrap_or_default();
        let (t, rel) = (tree.clone(), wt.path.clone());
        let cwd = tokio::task::spawn_blocking(move || super::paths::resolve(&t, &rel))
            .await
            .unwrap_or_else(|e| Err(crate::error::ToolError::internal("path resolution failed", e)));
        match cwd {
            Ok(cwd) => job.cwd = cwd,
            Err(e) => return (Ending::Failed { code: e.code, message: format!("{} on its branch", e.message) }, None),
        }
        job.workdir_root = tree;
        if job.cancel.is_cancelled() {
            return (Ending::AlreadyTerminal, None);
        }
    }
    // The baseline is taken while the writer lease is held and before the agent acts: before
    // it starts, or, for a real CLI in a gated sandbox, while it starts, its egress gate
    // holding its first model request until the baseline is on record.
    let dir = crate::provider::snapshot::snapshot_dir(&inner.config.state_dir, &task_id);
    // A worktree task's change set is its branch's whole change: from the branch's base.
    let since = job.worktree.as_ref().and_then(|w| w.created.as_ref()).map(|c| c.base_commit.clone());
    let writes = job.lease.is_some();
    let beside = writes && inner.providers.starts_beside_baseline(job.runtime);
    if writes && !beside {
        let taken =
            inner.providers.snapshots().baseline(&task_id, &job.workdir_root, &dir, since.as_deref(), false).await;
        job.baseline = Some(noted(taken));
        if job.cancel.is_cancelled() {
            return (Ending::AlreadyTerminal, None);
        }
    }
    let hold = beside.then(crate::egress::Hold::new);
    let spec = StartSpec {
        task_id: task_id.clone(),
        cwd: job.cwd.clone(),
        workdir: job.workdir_root.clone(),
        profile: job.profile,
        prompt: std::mem::take(&mut job.prompt),
        model: job.model.clone(),
        resume_session: job.resume_session.clone(),
        git: job.worktree.as_ref().and_then(|w| w.created.as_ref()).map(|c| c.git.clone()),
        hold: hold.clone(),
    };
    // On a task of its own (tracked, drained at shutdown): the agent's spawn, which forks on
    // this task's thread, never waits for the baseline's.
    let baseline = beside.then(|| {
        let (i, id, root) = (Arc::clone(&inner), task_id.clone(), job.workdir_root.clone());
        let (dir, since) = (dir.clone(), since.clone());
        let run = async move { i.providers.snapshots().baseline(&id, &root, &dir, since.as_deref(), true).await };
        inner.tracker.spawn(tracing::Instrument::instrument(run, tracing::Span::current()))
    });
    let started = inner.providers.start(job.runtime, spec).await;
    if let Ok(session) = &started
        && writes
    {
        // Recorded at once, before a baseline beside the agent ends: a crash from here on
        // finds the agent by its guard.
        let proof = recovery::proof_json(&session.proof_material());
        let (id, now) = (task_id.clone(), inner.clock.now_ms());
        if let Err(e) = inner.store.call(move |s| s.set_guard_proof(&id, &proof, now)).await {
            tracing::warn!(cause = %e, "cannot record the provider in the recovery guard");
        }
    }
    if let Some(baseline) = baseline {
        let taken = baseline.await.unwrap_or_else(|_| Err("the baseline's run ended abnormally".to_owned()));
        job.baseline = Some(noted(taken));
    }
    if let Some(hold) = &hold {
        hold.release();
    }
    let mut session = match started {
        Ok(session) => session,
        Err(e) => return (Ending::Failed { code: e.code, message: redactor.text(&e.message) }, None),
    };
    if transition(&inner, &task_id, TaskStatus::Running, TransitionFields::default()).await.is_err() {
        interrupt(&inner, &task_id, &mut session, redactor).await;
        return (Ending::AlreadyTerminal, Some(session.stop(Duration::from_secs(2)).await));
    }
    let ending = relay(job, &mut session, redactor).await;
    let proof = session.stop(Duration::from_secs(2)).await;
    (ending, Some(proof))
}

/// A baseline as taken; a failure is logged (the task goes on without a change set).
fn noted(
    taken: Result<crate::provider::snapshot::Baseline, String>,
) -> Result<crate::provider::snapshot::Baseline, String> {
    if let Err(why) = &taken {
        tracing::warn!(reason = %why, "no baseline for the change set");
    }
    taken
}

/// The main loop: provider events, caller controls, cancellation, the two deadlines and the
/// bounds on a silent or endlessly retrying provider.
async fn relay(job: &mut Job, session: &mut Session, redactor: &Redactor) -> Ending {
    let inner = Arc::clone(&job.inner);
    let task_id = job.task.task_id.clone();
    let deadline = inner.clock.instant_at(job.task.deadline_at);
    let commands = session.commands();
    let mut pending: Option<Pending> = None;
    let idle_limit = inner.config.limits.event_idle_timeout_seconds.map(Duration::from_secs);
    let mut last_event = tokio::time::Instant::now();
    let mut retries =
        super::retrying::RetryWatch::new(Duration::from_secs(inner.config.limits.provider_retry_timeout_seconds));
    loop {
        let expiry = pending
            .as_ref()
            .filter(|p| p.expires_at < job.task.deadline_at)
            .map(|p| inner.clock.instant_at(p.expires_at));
        // Provider silence counts only while nobody is waiting for a human.
        let idle_at = idle_limit.filter(|_| pending.is_none()).map(|limit| last_event + limit);
        let retry_at = retries.deadline();
        tokio::select! {
            biased;
            _ = job.cancel.cancelled() => {
                // A pending approval is answered "cancel" first, as the provider expects when
                // a human stops the task from the request itself.
                if let Some(p) = pending.take().filter(|p| p.kind == InteractionKind::Approval) {
                    let _ = commands
                        .send(ProviderCommand::Approval { native_id: p.native_id, decision: "cancel_task".into(), granted_permission_ids: vec![] })
                        .await;
                }
                interrupt(&inner, &task_id, session, redactor).await;
                return Ending::AlreadyTerminal;
            }
            _ = tokio::time::sleep_until(deadline) => {
                return timed_out(&inner, &task_id, session, redactor, code::AGENT_TASK_TIMED_OUT, None).await;
            }
            _ = async { tokio::time::sleep_until(expiry.unwrap_or(deadline)).await }, if expiry.is_some() => {
                let p = pending.take();
                return timed_out(&inner, &task_id, session, redactor, code::AGENT_INTERACTION_TIMED_OUT, p).await;
            }
            control = job.control.recv() => {
                let Some(control) = control else { continue };
                let command = match control {
                    Control::Approval { request_id, decision, granted_permission_ids } => {
                        match pending.take_if(|p| p.request_id == request_id) {
                            Some(p) => ProviderCommand::Approval { native_id: p.native_id, decision, granted_permission_ids },
                            None => continue,
                        }
                    }
                    Control::Answers { request_id, answers } => match pending.take_if(|p| p.request_id == request_id) {
                        Some(p) => ProviderCommand::Answers { native_id: p.native_id, answers },
                        None => continue,
                    },
                    Control::Steer(text) => ProviderCommand::Steer(text),
                };
                let _ = commands.send(command).await;
                // The human answered: the provider's silence is counted from now on.
                last_event = tokio::time::Instant::now();
            }
            _ = async { tokio::time::sleep_until(idle_at.unwrap_or(deadline)).await }, if idle_at.is_some() => {
                let seconds = idle_limit.map(|l| l.as_secs()).unwrap_or_default();
                return Ending::Failed {
                    code: code::AGENT_PROVIDER_DISCONNECTED,
                    message: format!("the provider sent nothing for {seconds} s (SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS)"),
                };
            }
            _ = async { tokio::time::sleep_until(retry_at.unwrap_or(deadline)).await }, if retry_at.is_some() => {
                return Ending::Failed { code: code::AGENT_RUNTIME_UNAVAILABLE, message: retries.message(job.runtime.as_str()) };
            }
            event = session.next_event() => {
                last_event = tokio::time::Instant::now();
                let Some(event) = event else {
                    let tail = redactor.text(&session.stderr_tail());
                    let last = tail.lines().last().unwrap_or("").chars().take(300).collect::<String>();
                    let message = if last.is_empty() {
                        "the provider exited before finishing its turn".to_owned()
                    } else {
                        format!("the provider exited before finishing its turn: {last}")
                    };
                    return Ending::Failed { code: code::AGENT_PROVIDER_DISCONNECTED, message };
                };
                // Provider events already waiting behind this one are stored with it, in one
                // transaction; the first other message is handled right after them.
                let mut next = Some(event);
                while let Some(event) = next.take() {
                    match event {
                        ProviderEvent::Session(id) => {
                            let (tid, now) = (task_id.clone(), inner.clock.now_ms());
                            if let Err(e) = inner.store.call(move |s| s.set_native_session(&tid, &id, now)).await {
                                tracing::warn!(cause = %e, "cannot record the native session");
                            }
                        }
                        ProviderEvent::Event { event_type, payload } => {
                            retries.observe(&event_type, &payload);
                            let mut batch = vec![(event_type, payload)];
                            while batch.len() < EVENT_BATCH {
                                match session.ready_event() {
                                    Some(ProviderEvent::Event { event_type, payload }) => {
                                        retries.observe(&event_type, &payload);
                                        batch.push((event_type, payload));
                                    }
                                    other => {
                                        next = other;
                                        break;
                                    }
                                }
                            }
                            record_provider_events(&inner, &task_id, redactor, batch).await;
                        }
                        ProviderEvent::Approval { native_id, payload } => {
                            retries.progressed();
                            pending = open(&inner, &task_id, redactor, InteractionKind::Approval, native_id, payload, job.task.deadline_at, &commands).await;
                        }
                        ProviderEvent::Question { native_id, payload } => {
                            retries.progressed();
                            pending = open(&inner, &task_id, redactor, InteractionKind::Question, native_id, payload, job.task.deadline_at, &commands).await;
                        }
                        ProviderEvent::Withdrawn { native_id } => {
                            if let Some(p) = pending.take_if(|p| p.native_id == native_id) {
                                let (tid, now) = (task_id.clone(), inner.clock.now_ms());
                                let _ = inner
                                    .store
                                    .call(move |s| s.abandon_interaction(&tid, &p.request_id, WITHDRAWN, now))
                                    .await;
                                inner.changes.notify(&task_id);
                            }
                        }
                        ProviderEvent::Usage(usage) => super::accounting::record_usage(&inner, &task_id, usage).await,
                        ProviderEvent::Finished(TurnOutcome::Completed(text)) => return Ending::Completed(text),
                        ProviderEvent::Finished(TurnOutcome::Failed { code, message }) => {
                            // A provider that gave up while retrying its model service failed for
                            // want of the service, whatever it calls that.
                            let (code, message) = retries.gave_up(job.runtime.as_str(), code, &message);
                            return Ending::Failed { code, message: redactor.text(&message) };
                        }
                        ProviderEvent::Finished(TurnOutcome::Interrupted) => {
                            return Ending::Interrupted {
                                code: code::AGENT_PROVIDER_ERROR,
                                message: "the provider interrupted the turn on its own".into(),
                            };
                        }
                    }
                }
            }
        }
    }
}

/// Opens an interaction for a provider request; on failure the provider gets a refusal so it
/// never waits forever.
#[allow(clippy::too_many_arguments)]
async fn open(
    inner: &Arc<Inner>,
    task_id: &str,
    redactor: &Redactor,
    kind: InteractionKind,
    native_id: String,
    mut payload: Value,
    deadline_at: i64,
    commands: &mpsc::Sender<ProviderCommand>,
) -> Option<Pending> {
    redactor.value(&mut payload);
    let problem = match kind {
        InteractionKind::Approval => super::interact::normalize_approval(&mut payload).err(),
        InteractionKind::Question => super::interact::check_question(&payload).err(),
    };
    let too_big = payload.to_string().len() > MAX_TEXT_BYTES;
    let why = match (problem, too_big) {
        (Some(why), _) => Some(format!("invalid {} from the provider: {why}", kind.as_str())),
        (None, true) => Some(format!("the {} is larger than {MAX_TEXT_BYTES} bytes", kind.as_str())),
        (None, false) => None,
    };
    if let Some(why) = why {
        refuse(inner, task_id, redactor, kind, native_id, why, commands).await;
        return None;
    }
    let now = inner.clock.now_ms();
    let timeout_ms = (inner.config.limits.interaction_timeout_seconds as i64).saturating_mul(1000);
    let new = NewInteraction {
        request_id: crate::ids::request_id(),
        kind,
        payload_json: payload.to_string(),
        expires_at: deadline_at.min(now + timeout_ms),
    };
    let (tid, n) = (task_id.to_owned(), new.clone());
    let opened = inner.store.call(move |s| s.open_interaction(&tid, &n, now)).await;
    inner.changes.notify(task_id);
    match opened {
        Ok(_) => Some(Pending { request_id: new.request_id, native_id, kind, expires_at: new.expires_at }),
        Err(e) => {
            refuse(
                inner,
                task_id,
                redactor,
                kind,
                native_id,
                format!("cannot open the {}: {e}", kind.as_str()),
                commands,
            )
            .await;
            None
        }
    }
}

/// Refuses a provider request it cannot relay, so the provider never waits forever.
async fn refuse(
    inner: &Arc<Inner>,
    task_id: &str,
    redactor: &Redactor,
    kind: InteractionKind,
    native_id: String,
    why: String,
    commands: &mpsc::Sender<ProviderCommand>,
) {
    tracing::warn!(reason = ?why, "refused a provider request");
    record(inner, task_id, redactor, "provider.warning", json!({ "message": why }), false).await;
    let command = match kind {
        InteractionKind::Approval => {
            ProviderCommand::Approval { native_id, decision: "deny".into(), granted_permission_ids: vec![] }
        }
        InteractionKind::Question => ProviderCommand::Answers { native_id, answers: json!([]) },
    };
    let _ = commands.send(command).await;
}

/// A deadline fired: persist `interrupted` first (reads agree at once), then interrupt the
/// provider within the bound.
async fn timed_out(
    inner: &Arc<Inner>,
    task_id: &str,
    session: &mut Session,
    redactor: &Redactor,
    error_code: &'static str,
    expired: Option<Pending>,
) -> Ending {
    if let Some(p) = &expired {
        let event =
            NewEvent::new("interaction.expired", json!({ "request_id": p.request_id, "kind": p.kind.as_str() }));
        let (tid, now) = (task_id.to_owned(), inner.clock.now_ms());
        let _ = inner.store.call(move |s| s.append_event(&tid, &event, None, now)).await;
    }
    let message = match error_code {
        code::AGENT_INTERACTION_TIMED_OUT => {
            "nobody answered the pending request in time (SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS)"
        }
        _ => "the task ran past its deadline (SERVERFS_AGENT_TASK_TIMEOUT_SECONDS)",
    };
    let fields = TransitionFields {
        error_code: Some(error_code.to_owned()),
        error_message: Some(message.to_owned()),
        event: lifecycle("task.interrupted", json!({ "error_code": error_code })),
        ..Default::default()
    };
    let _ = transition(inner, task_id, TaskStatus::Interrupted, fields).await;
    interrupt(inner, task_id, session, redactor).await;
    Ending::AlreadyTerminal
}

/// Asks the provider to stop its turn, once, and waits for the turn's end at most
/// [`INTERRUPT_BOUND`]; events that arrive meanwhile are still recorded.
async fn interrupt(inner: &Arc<Inner>, task_id: &str, session: &mut Session, redactor: &Redactor) {
    let _ = session.commands().send(ProviderCommand::Interrupt).await;
    let wait = async {
        while let Some(event) = session.next_event().await {
            match event {
                ProviderEvent::Event { event_type, payload } => {
                    record(inner, task_id, redactor, &event_type, payload, true).await;
                }
                ProviderEvent::Usage(usage) => super::accounting::record_usage(inner, task_id, usage).await,
                ProviderEvent::Finished(_) => return,
                _ => {}
            }
        }
    };
    if tokio::time::timeout(INTERRUPT_BOUND, wait).await.is_err() {
        tracing::warn!("the provider did not confirm the interrupt in time; stopping it");
    }
}

/// Records a provider or lifecycle event: redacted, bounded to [`MAX_EVENT_BYTES`], and (for
/// provider events) subject to the per-task cap.
async fn record(
    inner: &Arc<Inner>,
    task_id: &str,
    redactor: &Redactor,
    event_type: &str,
    payload: Value,
    capped: bool,
) {
    let event = provider_event(redactor, event_type, payload);
    let (tid, now) = (task_id.to_owned(), inner.clock.now_ms());
    let cap = capped.then_some(inner.config.limits.max_events_per_task);
    if let Err(e) = inner.store.call(move |s| s.append_event(&tid, &event, cap, now)).await {
        tracing::warn!(cause = %e, "cannot record an event");
    }
}

/// An event as stored: its type checked (else `provider.event`), its payload an object,
/// redacted and bounded.
fn provider_event(redactor: &Redactor, event_type: &str, mut payload: Value) -> NewEvent {
    let valid_type = event_type.len() <= 64
        && event_type.contains('.')
        && event_type.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    let event_type = if valid_type { event_type } else { "provider.event" };
    if !payload.is_object() {
        payload = json!({ "value": payload });
    }
    redactor.value(&mut payload);
    let text = payload.to_string();
    if text.len() > MAX_EVENT_BYTES {
        payload = bound_payload(&payload, &text);
    }
    NewEvent::new(event_type, payload)
}

/// The most provider events stored in one transaction.
const EVENT_BATCH: usize = 256;

/// Records provider events that arrived together (redacted, bounded, typed as [`record`]
/// does), in one transaction, under the per-task cap.
async fn record_provider_events(inner: &Arc<Inner>, task_id: &str, redactor: &Redactor, batch: Vec<(String, Value)>) {
    let events: Vec<NewEvent> =
        batch.into_iter().map(|(event_type, payload)| provider_event(redactor, &event_type, payload)).collect();
    let (tid, now, cap) = (task_id.to_owned(), inner.clock.now_ms(), inner.config.limits.max_events_per_task);
    if let Err(e) = inner.store.call(move |s| s.append_provider_events(&tid, &events, cap, now)).await {
        tracing::warn!(cause = %e, "cannot record the provider's events");
    }
}

/// Shrinks an oversized payload: a long `text` keeps a UTF-8-safe preview, anything else is
/// replaced by its size and hash.
fn bound_payload(payload: &Value, text: &str) -> Value {
    let sha256 = results::sha256_hex(text.as_bytes());
    if let Some(full) = payload.get("text").and_then(Value::as_str) {
        let mut keep = MAX_EVENT_BYTES / 2;
        loop {
            let preview = results::utf8_prefix(full, keep);
            let candidate = json!({
                "text": preview,
                "truncated": true,
                "size_bytes": full.len(),
                "sha256": results::sha256_hex(full.as_bytes()),
            });
            if candidate.to_string().len() <= MAX_EVENT_BYTES || keep == 0 {
                return candidate;
            }
            keep /= 2;
        }
    }
    json!({ "truncated": true, "size_bytes": text.len(), "sha256": sha256 })
}
