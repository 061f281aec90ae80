//! What a `get_agent_task` long-poll waits for, and the wait itself.
//!
//! A caller that waits is waiting for something it must act on: the task's end, or a request
//! it may answer. So a wait ends early only when the task becomes terminal or its pending
//! request differs from the one it had when the wait began — one appears (the task starts
//! waiting for an approval or a question), it goes (answered, expired, withdrawn) or another
//! replaces it. `queued → starting → running`, events and usage reports never end a wait. A
//! task that is already terminal answers at once; a task that already has a pending request
//! waits until that request is resolved or replaced (its request is in every answer, so a
//! caller that answers it needs no wait, and one that waits for a person is not made to poll
//! in a loop). Otherwise the wait ends at its deadline, with the task as it is then.

use serde_json::value::RawValue;

use super::TaskService;
use super::views::MAX_WAIT_SECONDS;
use crate::error::ToolError;
use crate::model::{Principal, TaskStatus};

/// What one long-poll waits for, fixed when it begins: the task's end, or a pending request
/// other than the one it had then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Awaited {
    pending: Option<String>,
}

impl Awaited {
    /// What a wait that begins on a task in `status` with `pending` waits for; `None` when the
    /// task has ended, so the call answers at once.
    pub(super) fn begin(status: TaskStatus, pending: Option<&str>) -> Option<Awaited> {
        (!status.is_terminal()).then(|| Awaited { pending: pending.map(str::to_owned) })
    }

    /// Whether the task, now in `status` with `pending`, ends the wait.
    pub(super) fn reached(&self, status: TaskStatus, pending: Option<&str>) -> bool {
        status.is_terminal() || pending != self.pending.as_deref()
    }
}

impl TaskService {
    /// `get_agent_task` with `wait_seconds > 0`: the view once the task reaches what the wait
    /// waits for ([`Awaited`]), the deadline passes or the bridge shuts down. Only a task the
    /// principal may see is watched, and the watch ends with the call, however it ends.
    pub(super) async fn long_poll(
        &self,
        principal: &Principal,
        task_id: &str,
        wait_seconds: u64,
        full: bool,
    ) -> Result<Box<RawValue>, ToolError> {
        let inner = &self.inner;
        inner.visible_task(principal, task_id).await?;
        let mut changes = inner.changes.watch(task_id);
        let (row, view) = self.view(principal, task_id, full).await?;
        let Some(awaited) = Awaited::begin(row.status, row.pending_request_id.as_deref()) else {
            return Ok(view);
        };
        let wait_ms = i64::try_from(wait_seconds.min(MAX_WAIT_SECONDS) * 1_000).unwrap_or(0);
        let deadline_ms = inner.clock.now_ms() + wait_ms;
        let until = inner.clock.instant_at(deadline_ms);
        loop {
            tokio::select! {
                changed = changes.changed() => if !changed { break },
                _ = tokio::time::sleep_until(until) => break,
                _ = inner.shutdown.cancelled() => break,
            }
            let row = inner.visible_task(principal, task_id).await?;
            if awaited.reached(row.status, row.pending_request_id.as_deref()) {
                break;
            }
        }
        Ok(self.view(principal, task_id, full).await?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    const ACTIVE: [TaskStatus; 3] = [Queued, Starting, Running];
    const ENDED: [TaskStatus; 4] = [Succeeded, Failed, Cancelled, Interrupted];

    #[test]
    fn an_ended_task_answers_at_once_and_any_other_waits() {
        for status in ENDED {
            assert_eq!(Awaited::begin(status, None), None, "{status:?}");
        }
        for status in ACTIVE {
            assert!(Awaited::begin(status, None).is_some(), "{status:?}");
        }
        assert!(Awaited::begin(WaitingForApproval, Some("req_1")).is_some(), "waits for the request to be resolved");
    }

    #[test]
    fn starting_to_run_does_not_end_a_wait_but_an_end_or_a_request_does() {
        let awaited = Awaited::begin(Queued, None).unwrap();
        for status in ACTIVE {
            assert!(!awaited.reached(status, None), "{status:?} is not what a caller waits for");
        }
        for status in ENDED {
            assert!(awaited.reached(status, None), "{status:?} ends the wait");
        }
        assert!(awaited.reached(WaitingForApproval, Some("req_1")), "an approval appeared");
        assert!(awaited.reached(WaitingForQuestion, Some("req_2")), "a question appeared");
    }

    #[test]
    fn a_pending_request_ends_a_wait_when_it_goes_or_is_replaced() {
        let awaited = Awaited::begin(WaitingForApproval, Some("req_1")).unwrap();
        assert!(!awaited.reached(WaitingForApproval, Some("req_1")), "the same request, unanswered");
        assert!(awaited.reached(Running, None), "answered, expired or withdrawn");
        assert!(awaited.reached(WaitingForQuestion, Some("req_2")), "replaced by another request");
        assert!(awaited.reached(Interrupted, None), "the task ended");
    }
}
