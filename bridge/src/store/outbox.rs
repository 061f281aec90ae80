//! The notification outbox: the messages the notifier routed from the recorded facts (one per
//! target), their delivery attempts, and the single-use action links they carry.
//!
//! A message is written by [`Store::route_facts`] in the transaction that deletes its fact (or,
//! for `notify test`, by [`Store::insert_message`]); the store keeps what the notifier decided
//! — target, kind, the facts JSON the formats render, the link — and only tracks its delivery.
//! A link's token is stored only as the SHA-256 the notifier computed, and the link itself
//! stays on its message only until the message is delivered or given up.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError};
use crate::config::notify::NotifyEvent;

/// Where a message is in its delivery: the `state` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Still being tried.
    Pending,
    /// A target answered 2xx.
    Delivered,
    /// Not tried again (out of time, a test's one attempt, or the target was removed).
    GivenUp,
}

crate::model::wire_names!(DeliveryState, "notification state" {
    Pending => "pending",
    Delivered => "delivered",
    GivenUp => "given_up",
});

/// What a message announces: the `event_type` column (the webhook's `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// One of the events targets subscribe to.
    Event(NotifyEvent),
    /// `notify test`.
    Test,
}

impl MessageKind {
    /// What the values are, for error messages.
    pub const WHAT: &'static str = "notification kind";

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Event(event) => event.as_str(),
            MessageKind::Test => "notify.test",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<MessageKind> {
        match text {
            "notify.test" => Some(MessageKind::Test),
            _ => NotifyEvent::parse(text).map(MessageKind::Event),
        }
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message to one target, as the notifier decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// `msg_…`: the `webhook-id`, the same on every attempt.
    pub message_id: String,
    /// Target slot.
    pub target: u8,
    /// What it announces.
    pub kind: MessageKind,
    /// A second message with this key is not written.
    pub dedupe_key: String,
    /// Pending messages of one target and order key go out in order.
    pub order_key: String,
    /// The task, if any.
    pub task_id: Option<String>,
    /// The plan, if any.
    pub plan_id: Option<String>,
    /// The request, if any.
    pub request_id: Option<String>,
    /// What the formats render (JSON).
    pub facts_json: String,
    /// Its single-use action link, if it carries one.
    pub link: Option<NewActionLink>,
    /// Unix ms: the change it reports (due at once).
    pub created_at: i64,
    /// Unix ms after which it is not retried.
    pub give_up_at: i64,
}

/// A single-use action link, as the notifier minted it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewActionLink {
    /// `lnk_…` (named in the audit log).
    pub link_id: String,
    /// The SHA-256 (hex) of its token: all the store keeps of it.
    pub token_sha256: String,
    /// The task.
    pub task_id: String,
    /// The one request it may answer.
    pub request_id: String,
    /// Unix ms: the request's expiry.
    pub expires_at: i64,
    /// The board path with the token (`/a/abl_…`), kept on the message until it is delivered
    /// or given up.
    pub path: String,
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
    /// What it announces (`event_type`).
    pub kind: MessageKind,
    /// The task, if any.
    pub task_id: Option<String>,
    /// The plan, if any.
    pub plan_id: Option<String>,
    /// The neutral facts (JSON).
    pub facts_json: String,
    /// The single-use action link's board path, until delivered.
    pub action_url: Option<String>,
    /// Where it is in its delivery.
    pub state: DeliveryState,
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
        kind: r.get(3)?,
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

/// Writes `message` (and its action link) unless its dedupe key exists; whether it was written.
pub(super) fn insert_in(tx: &Connection, message: &NewMessage) -> Result<bool, StoreError> {
    let exists: Option<i64> = tx
        .prepare_cached("SELECT 1 FROM notify_outbox WHERE dedupe_key = ?1")?
        .query_row([&message.dedupe_key], |r| r.get(0))
        .optional()?;
    if exists.is_some() {
        return Ok(false);
    }
    if let Some(link) = &message.link {
        tx.prepare_cached(
            "INSERT INTO action_links (link_id, token_sha256, task_id, request_id, target, created_at, \
             expires_at, used_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
        )?
        .execute(params![
            link.link_id,
            link.token_sha256,
            link.task_id,
            link.request_id,
            message.target,
            message.created_at,
            link.expires_at
        ])?;
    }
    tx.prepare_cached(
        "INSERT INTO notify_outbox (message_id, dedupe_key, target, event_type, order_key, task_id, plan_id, \
         request_id, facts_json, action_url, state, created_at, next_attempt_at, give_up_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13)",
    )?
    .execute(params![
        message.message_id,
        message.dedupe_key,
        message.target,
        message.kind,
        message.order_key,
        message.task_id,
        message.plan_id,
        message.request_id,
        message.facts_json,
        message.link.as_ref().map(|l| &l.path),
        DeliveryState::Pending,
        message.created_at,
        message.give_up_at,
    ])?;
    Ok(true)
}

impl Store {
    /// Wakes the delivery worker when a write added outbox rows (called after the commit).
    pub fn outbox_signal(&self) -> &tokio::sync::Notify {
        &self.outbox_wake
    }

    /// Writes one message outside any fact (`notify test`); whether it was written (not a
    /// duplicate). Wakes the delivery worker.
    pub fn insert_message(&self, message: &NewMessage) -> Result<bool, StoreError> {
        self.write(|tx| {
            let written = insert_in(tx, message)?;
            self.outbox_written();
            Ok(written)
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
                (None, _) => (DeliveryState::Delivered, attempt.at),
                (Some(_), Some(at)) => (DeliveryState::Pending, at),
                (Some(_), None) => (DeliveryState::GivenUp, attempt.at),
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

    /// The action link whose token has this SHA-256 (hex), if any (used or not).
    pub fn find_action_link(&self, token_sha256: &str) -> Result<Option<ActionLinkRow>, StoreError> {
        self.read(|c| {
            Ok(c.prepare_cached(
                "SELECT link_id, task_id, request_id, expires_at, used_at FROM action_links WHERE token_sha256 = ?1",
            )?
            .query_row([token_sha256], |r| {
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
