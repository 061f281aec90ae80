//! The notification outbox: rows written in the transaction of the state change they report
//! (so a committed change always has its notifications, and a rolled-back one never does),
//! read back by the one delivery worker, and the single-use action links they carry.
//!
//! The store knows which targets want which event ([`Routes`], set once at start) and records
//! neutral facts (ids, alias, runtime, status, a title without prompt text, and with
//! `DETAILS=full` the request's payload); `crate::notify` renders them per format.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::tasks::{TaskRow, get_task_in};
use super::{Store, StoreError};
use crate::config::notify::NotifyEvent;
use crate::model::TaskStatus;

/// How long a notification is retried.
pub const RETRY_FOR_MS: i64 = 24 * 3600 * 1000;
/// The largest `details` object kept with a notification.
const MAX_DETAILS_BYTES: usize = 8 * 1024;

/// Which targets want which events, and where links point.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// The targets in use.
    pub targets: Vec<Route>,
}

/// One target, as the store sees it.
#[derive(Debug, Clone)]
pub struct Route {
    /// Slot number.
    pub slot: u8,
    /// The events it gets.
    pub events: Vec<NotifyEvent>,
    /// `DETAILS=full`.
    pub full: bool,
}

/// A stored notification.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// Row id (delivery order).
    pub outbox_id: i64,
    /// `msg_…`: the `webhook-id`, the same on every attempt.
    pub message_id: String,
    /// Target slot.
    pub target: u8,
    /// The event's wire name (`notify.test` for a test).
    pub event_type: String,
    /// The task, if any.
    pub task_id: Option<String>,
    /// The plan, if any.
    pub plan_id: Option<String>,
    /// The neutral facts (JSON).
    pub facts_json: String,
    /// The single-use action link's board path, until delivered.
    pub action_url: Option<String>,
    /// `pending`, `delivered` or `given_up`.
    pub state: String,
    /// Attempts so far.
    pub attempts: i64,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the next attempt (pending rows).
    pub next_attempt_at: i64,
    /// Unix ms after which it is not retried.
    pub give_up_at: i64,
    /// The last attempt's HTTP status.
    pub last_status: Option<i64>,
    /// The last attempt's failure.
    pub last_error: Option<String>,
    /// The last attempt's latency.
    pub last_latency_ms: Option<i64>,
    /// Unix ms.
    pub delivered_at: Option<i64>,
}

const COLUMNS: &str = "outbox_id, message_id, target, event_type, task_id, plan_id, facts_json, action_url, state, \
    attempts, created_at, next_attempt_at, give_up_at, last_status, last_error, last_latency_ms, delivered_at";

fn row_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
    Ok(OutboxRow {
        outbox_id: r.get(0)?,
        message_id: r.get(1)?,
        target: r.get(2)?,
        event_type: r.get(3)?,
        task_id: r.get(4)?,
        plan_id: r.get(5)?,
        facts_json: r.get(6)?,
        action_url: r.get(7)?,
        state: r.get(8)?,
        attempts: r.get(9)?,
        created_at: r.get(10)?,
        next_attempt_at: r.get(11)?,
        give_up_at: r.get(12)?,
        last_status: r.get(13)?,
        last_error: r.get(14)?,
        last_latency_ms: r.get(15)?,
        delivered_at: r.get(16)?,
    })
}

/// How one attempt went.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Unix ms when it started.
    pub at: i64,
    /// The HTTP status, when an answer came.
    pub http_status: Option<u16>,
    /// How long it took.
    pub latency_ms: i64,
    /// What went wrong (`None`: delivered).
    pub error: Option<String>,
}

/// Delivery figures of one target.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetStats {
    /// Slot.
    pub target: u8,
    /// Rows delivered.
    pub delivered: i64,
    /// Rows still being tried.
    pub pending: i64,
    /// Rows given up.
    pub given_up: i64,
    /// Unix ms of the last delivery.
    pub last_ok_at: Option<i64>,
    /// Unix ms of the first failed attempt since the last delivery.
    pub failing_since: Option<i64>,
    /// Unix ms of the last failed attempt since the last delivery.
    pub last_failure_at: Option<i64>,
}

impl TargetStats {
    /// Whether the target's deliveries have failed for `span` ms by `now`: its first failure
    /// since its last delivery is that old, and either rows are still being retried or its
    /// failures since then span that long (one failed test notification, never retried, does
    /// not make a target failing for an hour; rows retried for a day and given up do, until a
    /// delivery succeeds).
    pub fn failing_for(&self, span: i64, now: i64) -> bool {
        let Some(first) = self.failing_since else { return false };
        let last = self.last_failure_at.unwrap_or(first);
        now - first >= span && (self.pending > 0 || last - first >= span)
    }
}

/// A stored action link.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionLinkRow {
    /// `lnk_…` (named in the audit log).
    pub link_id: String,
    /// The task.
    pub task_id: String,
    /// The one request it may answer.
    pub request_id: String,
    /// Unix ms: the interaction's expiry.
    pub expires_at: i64,
    /// Unix ms, once used.
    pub used_at: Option<i64>,
}

/// What a state change reports.
pub(super) struct Trigger<'a> {
    pub event: NotifyEvent,
    /// What makes the fact unique (a request, a task, a plan).
    pub subject: &'a str,
    /// Rows of one order key go out in order.
    pub order_key: &'a str,
    pub task_id: Option<&'a str>,
    pub plan_id: Option<&'a str>,
    /// The request an action link would answer, with its expiry.
    pub request: Option<(&'a str, i64)>,
    /// Facts every target gets.
    pub facts: Value,
    /// Added for `DETAILS=full` targets.
    pub details: Option<Value>,
    /// The board page (a path) the notification links to.
    pub page: String,
}

/// Writes one outbox row per target that wants `trigger.event`; a fact already written is
/// skipped. Called inside the state change's transaction.
pub(super) fn enqueue_in(store: &Store, tx: &Connection, trigger: Trigger<'_>, now: i64) -> Result<(), StoreError> {
    let routes = store.routes();
    let mut wrote = false;
    for route in routes.targets.iter().filter(|r| r.events.contains(&trigger.event)) {
        let dedupe = format!("{}:{}:{}", trigger.event.as_str(), trigger.subject, route.slot);
        let exists: Option<i64> = tx
            .prepare_cached("SELECT 1 FROM notify_outbox WHERE dedupe_key = ?1")?
            .query_row([&dedupe], |r| r.get(0))
            .optional()?;
        if exists.is_some() {
            continue;
        }
        let mut facts = trigger.facts.clone();
        facts["event"] = json!(trigger.event.as_str());
        // Links are stored as board paths; the sender puts the board's address in front.
        facts["links"] = json!({ "board": trigger.page });
        if route.full
            && let Some(details) = &trigger.details
        {
            facts["details"] = bounded(details);
        }
        let action_url = match trigger.request {
            Some((request_id, expires_at)) => {
                let token = format!("abl_{}", crate::ids::hex(&crate::ids::random_bytes::<32>()));
                let link_id = format!("lnk_{}", crate::ids::hex(&crate::ids::random_bytes::<8>()));
                tx.prepare_cached(
                    "INSERT INTO action_links (link_id, token_sha256, task_id, request_id, target, created_at, \
                     expires_at, used_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
                )?
                .execute(params![
                    link_id,
                    token_digest(&token),
                    trigger.task_id.unwrap_or_default(),
                    request_id,
                    route.slot,
                    now,
                    expires_at
                ])?;
                Some(format!("/a/{token}"))
            }
            None => None,
        };
        insert_row(
            tx,
            route.slot,
            trigger.event.as_str(),
            &dedupe,
            &trigger,
            &facts,
            action_url,
            now,
            now + RETRY_FOR_MS,
        )?;
        wrote = true;
    }
    if wrote {
        store.outbox_written();
    }
    Ok(())
}

#[expect(clippy::too_many_arguments, reason = "one row's columns")]
fn insert_row(
    tx: &Connection,
    target: u8,
    event_type: &str,
    dedupe: &str,
    trigger: &Trigger<'_>,
    facts: &Value,
    action_url: Option<String>,
    now: i64,
    give_up_at: i64,
) -> Result<(), StoreError> {
    let message_id = format!("msg_{}", crate::ids::hex(&crate::ids::random_bytes::<16>()));
    tx.prepare_cached(
        "INSERT INTO notify_outbox (message_id, dedupe_key, target, event_type, order_key, task_id, plan_id, \
         request_id, facts_json, action_url, state, created_at, next_attempt_at, give_up_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?11, ?12)",
    )?
    .execute(params![
        message_id,
        dedupe,
        target,
        event_type,
        trigger.order_key,
        trigger.task_id,
        trigger.plan_id,
        trigger.request.map(|(id, _)| id),
        facts.to_string(),
        action_url,
        now,
        give_up_at,
    ])?;
    Ok(())
}

/// A details object no larger than [`MAX_DETAILS_BYTES`]: past it, a marker replaces it.
fn bounded(details: &Value) -> Value {
    let size = details.to_string().len();
    if size <= MAX_DETAILS_BYTES { details.clone() } else { json!({ "truncated": true, "size_bytes": size }) }
}

/// The SHA-256 (hex) an action link's token is stored as.
pub fn token_digest(token: &str) -> String {
    crate::ids::hex(&Sha256::digest(token.as_bytes()))
}

/// The facts of a task every notification about it carries (no prompt, no host path).
pub(super) fn task_facts(tx: &Connection, task: &TaskRow) -> Result<Value, StoreError> {
    let plan: Option<(String, i64)> = tx
        .prepare_cached("SELECT plan_id, position FROM plan_steps WHERE task_id = ?1")?
        .query_row([&task.task_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(json!({
        "task_id": task.task_id,
        "plan_id": plan.as_ref().map(|p| &p.0),
        "plan_step": plan.as_ref().map(|p| p.1),
        "workdir": task.workdir_alias,
        "runtime": task.runtime,
        "profile": task.profile,
        "status": task.status.as_str(),
        "error_code": task.error_code,
    }))
}

/// The outbox row a terminal transition writes (`task.finished` or `task.failed`).
pub(super) fn on_terminal(store: &Store, tx: &Connection, task: &TaskRow, now: i64) -> Result<(), StoreError> {
    let (event, verb) = match task.status {
        TaskStatus::Succeeded => (NotifyEvent::TaskFinished, "succeeded"),
        TaskStatus::Cancelled => (NotifyEvent::TaskFinished, "was cancelled"),
        TaskStatus::Failed => (NotifyEvent::TaskFailed, "failed"),
        TaskStatus::Interrupted => (NotifyEvent::TaskFailed, "was interrupted"),
        _ => return Ok(()),
    };
    if store.routes().targets.is_empty() {
        return Ok(());
    }
    let mut facts = task_facts(tx, task)?;
    let code = task.error_code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
    let mut title = format!("{} task in {} {verb}{code}", task.runtime, task.workdir_alias);
    let mut page = format!("/tasks/{}", task.task_id);
    // A worktree task's work waits on its branch: the link goes to the branch's card on the
    // task page (its diff and the merge and discard forms).
    if let Some(w) = super::worktrees::get_in(tx, &task.task_id)? {
        facts["branch"] = json!({ "name": w.branch, "state": w.state.as_str() });
        if w.state == crate::model::WorktreeState::Open {
            title.push_str(&format!("; branch {} waits to be merged or discarded", w.branch));
            page.push_str("#branch");
        }
    }
    facts["title"] = json!(title);
    let plan_id = facts["plan_id"].as_str().map(str::to_owned);
    let trigger = Trigger {
        event,
        subject: &task.task_id,
        order_key: &task.task_id,
        task_id: Some(&task.task_id),
        plan_id: plan_id.as_deref(),
        request: None,
        facts,
        details: None,
        page,
    };
    enqueue_in(store, tx, trigger, now)
}

/// The outbox row an opened interaction writes, with an action link per target.
pub(super) fn on_interaction(
    store: &Store,
    tx: &Connection,
    task: &TaskRow,
    request: (&str, &str, i64),
    payload: &str,
    now: i64,
) -> Result<(), StoreError> {
    if store.routes().targets.is_empty() {
        return Ok(());
    }
    let (request_id, kind, expires_at) = request;
    let (event, title) = match kind {
        "approval" => (NotifyEvent::ApprovalRequested, "needs an approval"),
        _ => (NotifyEvent::QuestionRequested, "asks a question"),
    };
    let mut facts = task_facts(tx, task)?;
    facts["title"] = json!(format!("{} task in {} {title}", task.runtime, task.workdir_alias));
    facts["request_id"] = json!(request_id);
    facts["request_kind"] = json!(kind);
    facts["expires_at"] = json!(crate::clock::rfc3339(expires_at));
    let plan_id = facts["plan_id"].as_str().map(str::to_owned);
    let details = serde_json::from_str::<Value>(payload).ok();
    let trigger = Trigger {
        event,
        subject: request_id,
        order_key: &task.task_id,
        task_id: Some(&task.task_id),
        plan_id: plan_id.as_deref(),
        request: Some((request_id, expires_at)),
        facts,
        details,
        page: format!("/tasks/{}", task.task_id),
    };
    enqueue_in(store, tx, trigger, now)
}

/// The outbox row of a plan created for a human's approval.
pub(super) fn on_plan_pending(
    store: &Store,
    tx: &Connection,
    plan: &super::plans::PlanRow,
    steps: usize,
    now: i64,
) -> Result<(), StoreError> {
    if store.routes().targets.is_empty() {
        return Ok(());
    }
    let facts = json!({
        "plan_id": plan.plan_id,
        "workdir": plan.workdir_alias,
        "runtime": plan.runtime,
        "profile": plan.profile,
        "status": plan.status.as_str(),
        "steps": steps,
        "title": format!("A plan of {steps} steps for {} in {} waits for approval", plan.runtime, plan.workdir_alias),
    });
    let trigger = Trigger {
        event: NotifyEvent::PlanPendingApproval,
        subject: &plan.plan_id,
        order_key: &plan.plan_id,
        task_id: None,
        plan_id: Some(&plan.plan_id),
        request: None,
        facts,
        details: Some(json!({ "plan_title": plan.title, "created_by": plan.created_by })),
        page: format!("/plans/{}", plan.plan_id),
    };
    enqueue_in(store, tx, trigger, now)
}

impl Store {
    /// Sets the routes (once, at start, before anything is written).
    pub fn set_routes(&self, routes: Routes) {
        *self.routes.write().unwrap_or_else(|p| p.into_inner()) = std::sync::Arc::new(routes);
    }

    fn routes(&self) -> std::sync::Arc<Routes> {
        std::sync::Arc::clone(&self.routes.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Wakes the delivery worker when a write added outbox rows (called after the commit).
    pub fn outbox_signal(&self) -> &tokio::sync::Notify {
        &self.outbox_wake
    }

    /// Records that a workdir stays closed because `task_id`'s stop is unproven
    /// (`workdir.recovery_required`), once per guard, while the guard still names the task.
    pub fn notify_guard_kept(&self, workdir_alias: &str, task_id: &str, now: i64) -> Result<(), StoreError> {
        if self.routes().targets.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let guarded: Option<String> = tx
                .prepare_cached("SELECT task_id FROM recovery_guards WHERE workdir_alias = ?1")?
                .query_row([workdir_alias], |r| r.get(0))
                .optional()?;
            if guarded.as_deref() != Some(task_id) {
                return Ok(());
            }
            let mut facts = match get_task_in(tx, task_id)? {
                Some(task) => task_facts(tx, &task)?,
                None => json!({ "task_id": task_id, "workdir": workdir_alias }),
            };
            facts["title"] =
                json!(format!("Workdir {workdir_alias} stays closed: its last writer's stop is not proven"));
            let trigger = Trigger {
                event: NotifyEvent::WorkdirRecoveryRequired,
                subject: task_id,
                order_key: task_id,
                task_id: Some(task_id),
                plan_id: None,
                request: None,
                facts,
                details: None,
                page: "/workdirs".into(),
            };
            enqueue_in(self, tx, trigger, now)
        })
    }

    /// Writes a test notification to one target: one attempt, no retry. Returns its message id.
    pub fn enqueue_test_notification(&self, target: u8, now: i64) -> Result<String, StoreError> {
        self.write(|tx| {
            let subject = format!("test-{}", crate::ids::hex(&crate::ids::random_bytes::<8>()));
            let facts = json!({
                "event": "notify.test",
                "target": target,
                "title": "Test notification from agent-bridge",
                "links": { "board": "/notifications" },
            });
            let trigger = Trigger {
                event: NotifyEvent::TaskFinished,
                subject: &subject,
                order_key: &subject,
                task_id: None,
                plan_id: None,
                request: None,
                facts: facts.clone(),
                details: None,
                page: String::new(),
            };
            insert_row(tx, target, "notify.test", &subject, &trigger, &facts, None, now, now)?;
            let id: String =
                tx.query_row("SELECT message_id FROM notify_outbox WHERE dedupe_key = ?1", [&subject], |r| r.get(0))?;
            self.outbox_written();
            Ok(id)
        })
    }

    /// Up to `limit` pending rows due at `now` that are the oldest pending row of their target
    /// and order key (so a task's notifications go out in order), earliest first, leaving out
    /// the `busy` rows and the rows of the `skip` targets (those with no room in flight).
    pub fn due_notifications(
        &self,
        now: i64,
        limit: u32,
        busy: &[i64],
        skip: &[u8],
    ) -> Result<Vec<OutboxRow>, StoreError> {
        // Integers only, so the lists can be written into the statement.
        let list = |items: Vec<String>| items.join(",");
        let busy = list(busy.iter().map(i64::to_string).collect());
        let skip = list(skip.iter().map(u8::to_string).collect());
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM notify_outbox o INDEXED BY notify_due \
                 WHERE o.state = 'pending' AND o.next_attempt_at <= ?1 \
                 AND o.outbox_id NOT IN ({busy}) AND o.target NOT IN ({skip}) \
                 AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.state = 'pending' AND p.target = o.target \
                 AND p.order_key = o.order_key AND p.outbox_id < o.outbox_id) \
                 ORDER BY o.next_attempt_at, o.outbox_id LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![now, limit], row_from)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// When the next pending row that could go out is due (`None`: nothing pending).
    pub fn next_notification_due(&self) -> Result<Option<i64>, StoreError> {
        self.read(|c| {
            Ok(c.prepare_cached(
                "SELECT o.next_attempt_at FROM notify_outbox o INDEXED BY notify_due WHERE o.state = 'pending' \
                 AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.state = 'pending' AND p.target = o.target \
                 AND p.order_key = o.order_key AND p.outbox_id < o.outbox_id) \
                 ORDER BY o.next_attempt_at, o.outbox_id LIMIT 1",
            )?
            .query_row([], |r| r.get(0))
            .optional()?)
        })
    }

    /// Records an attempt: delivered, retried at `retry_at`, or (no `retry_at`) given up. A
    /// row no longer pending is left alone.
    pub fn record_attempt(&self, outbox_id: i64, attempt: &Attempt, retry_at: Option<i64>) -> Result<(), StoreError> {
        self.write(|tx| {
            let attempts: Option<i64> = tx
                .prepare_cached("SELECT attempts FROM notify_outbox WHERE outbox_id = ?1 AND state = 'pending'")?
                .query_row([outbox_id], |r| r.get(0))
                .optional()?;
            let Some(attempts) = attempts else { return Ok(()) };
            let number = attempts + 1;
            tx.prepare_cached(
                "INSERT INTO notify_attempts (outbox_id, attempt, at, http_status, latency_ms, error) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                outbox_id,
                number,
                attempt.at,
                attempt.http_status,
                attempt.latency_ms,
                attempt.error
            ])?;
            let (state, next) = match (&attempt.error, retry_at) {
                (None, _) => ("delivered", attempt.at),
                (Some(_), Some(at)) => ("pending", at),
                (Some(_), None) => ("given_up", attempt.at),
            };
            tx.prepare_cached(
                "UPDATE notify_outbox SET state = ?2, attempts = ?3, next_attempt_at = ?4, last_attempt_at = ?5, \
                 last_status = ?6, last_error = ?7, last_latency_ms = ?8, \
                 delivered_at = CASE WHEN ?2 = 'delivered' THEN ?5 ELSE delivered_at END, \
                 action_url = CASE WHEN ?2 = 'pending' THEN action_url ELSE NULL END WHERE outbox_id = ?1",
            )?
            .execute(params![
                outbox_id,
                state,
                number,
                next,
                attempt.at,
                attempt.http_status,
                attempt.error,
                attempt.latency_ms
            ])?;
            Ok(())
        })
    }

    /// Gives up every pending row of a target that is no longer configured.
    pub fn give_up_target(&self, target: u8, now: i64, why: &str) -> Result<usize, StoreError> {
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE notify_outbox SET state = 'given_up', last_error = ?3, last_attempt_at = ?2, action_url = NULL \
                 WHERE target = ?1 AND state = 'pending'",
                params![target, now, why],
            )?)
        })
    }

    /// One notification by message id.
    pub fn get_notification(&self, message_id: &str) -> Result<Option<OutboxRow>, StoreError> {
        self.read(|c| {
            Ok(c.prepare_cached(&format!("SELECT {COLUMNS} FROM notify_outbox WHERE message_id = ?1"))?
                .query_row([message_id], row_from)
                .optional()?)
        })
    }

    /// The newest notifications, newest first.
    pub fn recent_notifications(&self, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        self.read(|c| {
            let mut stmt =
                c.prepare_cached(&format!("SELECT {COLUMNS} FROM notify_outbox ORDER BY outbox_id DESC LIMIT ?1"))?;
            let rows = stmt.query_map([limit], row_from)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Delivery figures per target that has any row.
    pub fn notification_stats(&self) -> Result<Vec<TargetStats>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT target, SUM(state = 'delivered'), SUM(state = 'pending'), SUM(state = 'given_up'), \
                 MAX(delivered_at) FROM notify_outbox GROUP BY target ORDER BY target",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(TargetStats {
                    target: r.get(0)?,
                    delivered: r.get(1)?,
                    pending: r.get(2)?,
                    given_up: r.get(3)?,
                    last_ok_at: r.get(4)?,
                    failing_since: None,
                    last_failure_at: None,
                })
            })?;
            let mut stats: Vec<TargetStats> = rows.collect::<Result<_, _>>()?;
            let mut failures = c.prepare_cached(
                "SELECT MIN(a.at), MAX(a.at) FROM notify_attempts a JOIN notify_outbox o ON o.outbox_id = a.outbox_id \
                 WHERE o.target = ?1 AND a.error IS NOT NULL AND a.at > ?2",
            )?;
            for s in &mut stats {
                (s.failing_since, s.last_failure_at) =
                    failures.query_row(params![s.target, s.last_ok_at.unwrap_or(0)], |r| Ok((r.get(0)?, r.get(1)?)))?;
            }
            Ok(stats)
        })
    }

    /// Deletes delivered and given-up notifications (with their attempts) created before
    /// `cutoff`, at most `limit`.
    pub fn delete_old_notifications(&self, cutoff: i64, limit: u32) -> Result<usize, StoreError> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM notify_attempts WHERE outbox_id IN (SELECT outbox_id FROM notify_outbox \
                 WHERE state != 'pending' AND created_at < ?1 ORDER BY outbox_id LIMIT ?2)",
                params![cutoff, limit],
            )?;
            Ok(tx.execute(
                "DELETE FROM notify_outbox WHERE outbox_id IN (SELECT outbox_id FROM notify_outbox \
                 WHERE state != 'pending' AND created_at < ?1 ORDER BY outbox_id LIMIT ?2)",
                params![cutoff, limit],
            )?)
        })
    }

    /// The action link a presented token names, if any (used or not).
    pub fn find_action_link(&self, token: &str) -> Result<Option<ActionLinkRow>, StoreError> {
        let digest = token_digest(token);
        self.read(|c| {
            Ok(c.prepare_cached(
                "SELECT link_id, task_id, request_id, expires_at, used_at FROM action_links WHERE token_sha256 = ?1",
            )?
            .query_row([digest], |r| {
                Ok(ActionLinkRow {
                    link_id: r.get(0)?,
                    task_id: r.get(1)?,
                    request_id: r.get(2)?,
                    expires_at: r.get(3)?,
                    used_at: r.get(4)?,
                })
            })
            .optional()?)
        })
    }

    /// Marks an action link used; false when it already was (exactly one caller wins).
    pub fn use_action_link(&self, link_id: &str, now: i64) -> Result<bool, StoreError> {
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE action_links SET used_at = ?2 WHERE link_id = ?1 AND used_at IS NULL",
                params![link_id, now],
            )? == 1)
        })
    }
}
