//! Who gets what: each fact the store recorded becomes one message per configured target that
//! wants its event, in the targets' order — with the fact's wording (`format.rs`), its board
//! page and, for a request, an action link of its own (`links.rs`), and the request's details
//! for `DETAILS=full` targets only. A fact no target wants is deleted with no message.
//!
//! [`route_pending`] runs on a store thread, called by the delivery worker before each
//! dispatch; facts are routed in the order they happened, so a task's messages to a target are
//! written, and go out, in that order.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{format, links};
use crate::config::notify::{Details, NotifyEvent, NotifyTarget};
use crate::ids::{hex, random_bytes};
use crate::model::{InteractionKind, TaskStatus};
use crate::store::facts::{Fact, TaskFacts};
use crate::store::outbox::{MessageKind, NewMessage};
use crate::store::{Store, StoreError};

/// How long a notification is retried.
pub const RETRY_FOR_MS: i64 = 24 * 3600 * 1000;
/// The largest `details` object kept with a notification.
const MAX_DETAILS_BYTES: usize = 8 * 1024;
/// Facts routed in one transaction.
const BATCH: u32 = 200;

/// The event a fact is for the targets' subscriptions (`None`: no target hears of it).
pub fn event(fact: &Fact) -> Option<NotifyEvent> {
    match fact {
        Fact::TaskEnded(ended) => match ended.task.status {
            TaskStatus::Succeeded | TaskStatus::Cancelled => Some(NotifyEvent::TaskFinished),
            TaskStatus::Failed | TaskStatus::Interrupted => Some(NotifyEvent::TaskFailed),
            TaskStatus::Queued
            | TaskStatus::Starting
            | TaskStatus::Running
            | TaskStatus::WaitingForApproval
            | TaskStatus::WaitingForQuestion => None,
        },
        Fact::RequestOpened(opened) => Some(match opened.kind {
            InteractionKind::Approval => NotifyEvent::ApprovalRequested,
            InteractionKind::Question => NotifyEvent::QuestionRequested,
        }),
        Fact::PlanAwaitsApproval(_) => Some(NotifyEvent::PlanPendingApproval),
        Fact::GuardKept(_) => Some(NotifyEvent::WorkdirRecoveryRequired),
    }
}

/// The messages of one fact that happened at `created_at`: one per target of `targets` that
/// wants it.
pub fn messages(fact: &Fact, created_at: i64, targets: &[NotifyTarget]) -> Vec<NewMessage> {
    let Some(event) = event(fact) else { return Vec::new() };
    let wanting: Vec<&NotifyTarget> = targets.iter().filter(|t| t.wants(event)).collect();
    if wanting.is_empty() {
        return Vec::new();
    }
    let summary = summary(fact, event);
    let details = details(fact).map(|d| bounded(&d));
    let (subject, order_key) = keys(fact);
    // A kept guard's message names no plan, though its task may be a step of one.
    let plan_id = match fact {
        Fact::GuardKept(_) => None,
        Fact::TaskEnded(_) | Fact::RequestOpened(_) | Fact::PlanAwaitsApproval(_) => fact.plan_id().map(str::to_owned),
    };
    wanting
        .into_iter()
        .map(|target| {
            let mut facts = summary.clone();
            if target.details == Details::Full
                && let Some(details) = &details
            {
                facts["details"] = details.clone();
            }
            let link = match fact {
                Fact::RequestOpened(opened) => {
                    Some(links::mint(&opened.task.task_id, &opened.request_id, opened.expires_at))
                }
                Fact::TaskEnded(_) | Fact::PlanAwaitsApproval(_) | Fact::GuardKept(_) => None,
            };
            NewMessage {
                message_id: message_id(),
                target: target.slot,
                kind: MessageKind::Event(event),
                dedupe_key: format!("{}:{subject}:{}", event.as_str(), target.slot),
                order_key: order_key.to_owned(),
                task_id: fact.task_id().map(str::to_owned),
                plan_id: plan_id.clone(),
                request_id: fact.request_id().map(str::to_owned),
                facts_json: facts.to_string(),
                link,
                created_at,
                give_up_at: created_at + RETRY_FOR_MS,
            }
        })
        .collect()
}

/// What makes a fact's message unique (with its event and target), and the key its messages
/// keep their order by.
fn keys(fact: &Fact) -> (&str, &str) {
    match fact {
        Fact::TaskEnded(ended) => (&ended.task.task_id, &ended.task.task_id),
        Fact::RequestOpened(opened) => (&opened.request_id, &opened.task.task_id),
        Fact::PlanAwaitsApproval(plan) => (&plan.plan_id, &plan.plan_id),
        Fact::GuardKept(kept) => (&kept.task_id, &kept.task_id),
    }
}

/// The facts every target gets: what the formats render and the webhook's `data` (no prompt,
/// no host path; links as board paths, which the sender makes absolute).
fn summary(fact: &Fact, event: NotifyEvent) -> Value {
    let mut facts = match fact {
        Fact::TaskEnded(ended) => {
            let mut facts = task_json(&ended.task);
            if let Some(branch) = &ended.branch {
                facts["branch"] = json!({ "name": branch.name, "state": branch.state.as_str() });
            }
            facts
        }
        Fact::RequestOpened(opened) => {
            let mut facts = task_json(&opened.task);
            facts["request_id"] = json!(opened.request_id);
            facts["request_kind"] = json!(opened.kind.as_str());
            facts["expires_at"] = json!(crate::clock::rfc3339(opened.expires_at));
            facts
        }
        Fact::PlanAwaitsApproval(plan) => json!({
            "plan_id": plan.plan_id,
            "workdir": plan.workdir,
            "runtime": plan.runtime,
            "profile": plan.profile,
            "status": plan.status.as_str(),
            "steps": plan.steps,
        }),
        Fact::GuardKept(kept) => match &kept.task {
            Some(task) => task_json(task),
            None => json!({ "task_id": kept.task_id, "workdir": kept.workdir }),
        },
    };
    facts["title"] = json!(format::title(fact));
    facts["event"] = json!(event.as_str());
    facts["links"] = json!({ "board": links::board_page(fact) });
    facts
}

fn task_json(task: &TaskFacts) -> Value {
    json!({
        "task_id": task.task_id,
        "plan_id": task.plan_id,
        "plan_step": task.plan_step,
        "workdir": task.workdir,
        "runtime": task.runtime,
        "profile": task.profile,
        "status": task.status.as_str(),
        "error_code": task.error_code,
    })
}

/// What `DETAILS=full` targets get besides: a request's payload, a plan's title and author.
fn details(fact: &Fact) -> Option<Value> {
    match fact {
        Fact::RequestOpened(opened) => opened.payload.clone(),
        Fact::PlanAwaitsApproval(plan) => Some(json!({ "plan_title": plan.title, "created_by": plan.created_by })),
        Fact::TaskEnded(_) | Fact::GuardKept(_) => None,
    }
}

/// A details object no larger than [`MAX_DETAILS_BYTES`]: past it, a marker replaces it.
fn bounded(details: &Value) -> Value {
    let size = details.to_string().len();
    if size <= MAX_DETAILS_BYTES { details.clone() } else { json!({ "truncated": true, "size_bytes": size }) }
}

fn message_id() -> String {
    format!("msg_{}", hex(&random_bytes::<16>()))
}

/// A test notification to one target: one attempt, no retry (it gives up when it is written).
pub fn test_message(target: u8, now: i64) -> NewMessage {
    let subject = format!("test-{}", hex(&random_bytes::<8>()));
    let facts = json!({
        "event": MessageKind::Test.as_str(),
        "target": target,
        "title": format::TEST_TITLE,
        "links": { "board": links::TEST_PAGE },
    });
    NewMessage {
        message_id: message_id(),
        target,
        kind: MessageKind::Test,
        dedupe_key: subject.clone(),
        order_key: subject,
        task_id: None,
        plan_id: None,
        request_id: None,
        facts_json: facts.to_string(),
        link: None,
        created_at: now,
        give_up_at: now,
    }
}

/// Routes every pending fact to `targets`, batch by batch; returns how many messages were
/// written. A fact that cannot be read is logged once, added to `unreadable` and left in the
/// store as it is (the others are routed past it).
pub fn route_pending(
    store: &Store,
    targets: &[NotifyTarget],
    unreadable: &mut BTreeSet<i64>,
) -> Result<usize, StoreError> {
    let mut written = 0;
    loop {
        let skip: Vec<i64> = unreadable.iter().copied().collect();
        let pending = store.pending_facts(&skip, BATCH)?;
        let fetched = pending.len();
        let mut routed = Vec::with_capacity(fetched);
        for stored in pending {
            match stored.fact {
                Ok(fact) => routed.push((stored.fact_id, messages(&fact, stored.created_at, targets))),
                Err(e) => {
                    tracing::error!(fact_id = stored.fact_id, cause = %e, "a notification fact cannot be read; it is kept and skipped");
                    unreadable.insert(stored.fact_id);
                }
            }
        }
        written += store.route_facts(&routed)?;
        if fetched < BATCH as usize {
            return Ok(written);
        }
    }
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
