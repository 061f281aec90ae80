//! A change feed per task, so `get_agent_task` can long-poll without a busy loop, and one
//! pulse for every change of any task (plans waiting for a workdir and the board's live
//! updates listen to it).
//!
//! A feed exists only while someone waits on it: a waiter holds a [`Watch`], whose drop
//! removes the feed when it was the last one, whichever way the wait ended (an answer, an
//! error, a dropped request). Only tasks the caller may see are ever watched (the view checks
//! shape and visibility first), so the map is bounded by the waiters on real tasks.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// Per-task change counters; a waiter subscribes, then re-reads the task on every bump.
#[derive(Debug)]
pub struct Changes {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    pulse: watch::Sender<u64>,
}

impl Default for Changes {
    fn default() -> Changes {
        Changes { senders: Mutex::new(HashMap::new()), pulse: watch::channel(0).0 }
    }
}

/// One waiter on one task's feed; dropping it removes the feed when nobody else waits.
#[derive(Debug)]
pub struct Watch<'a> {
    changes: &'a Changes,
    task_id: String,
    receiver: Option<watch::Receiver<u64>>,
}

impl Watch<'_> {
    /// Waits for the next change; `false` when the feed is gone (it never is while held).
    pub async fn changed(&mut self) -> bool {
        match &mut self.receiver {
            Some(receiver) => receiver.changed().await.is_ok(),
            None => false,
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut map = self.changes.senders.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.task_id).is_some_and(|s| s.receiver_count() == 0) {
            map.remove(&self.task_id);
        }
    }
}

impl Changes {
    /// Subscribes to the pulse that beats on every change of any task (or plan).
    pub fn subscribe_all(&self) -> watch::Receiver<u64> {
        self.pulse.subscribe()
    }

    /// Beats the pulse without naming a task (a plan changed).
    pub fn pulse(&self) {
        self.pulse.send_modify(|n| *n += 1);
    }

    /// Watches a task's changes (watch *before* reading the task, so no change is missed
    /// between the read and the wait). Call it only for a task the caller may see.
    pub fn watch(&self, task_id: &str) -> Watch<'_> {
        let mut map = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        let receiver = map.entry(task_id.to_owned()).or_insert_with(|| watch::channel(0).0).subscribe();
        Watch { changes: self, task_id: task_id.to_owned(), receiver: Some(receiver) }
    }

    /// Signals that a task's status or pending interaction changed.
    pub fn notify(&self, task_id: &str) {
        self.pulse();
        let map = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = map.get(task_id) {
            sender.send_modify(|n| *n += 1);
        }
    }

    /// How many tasks have a feed (someone waiting on them) right now.
    pub fn watched(&self) -> usize {
        self.senders.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_feed_lives_exactly_as_long_as_its_waiters() {
        let changes = Changes::default();
        let mut first = changes.watch("agt_01");
        let second = changes.watch("agt_01");
        assert_eq!(changes.watched(), 1);
        changes.notify("agt_01");
        assert!(first.changed().await, "a change reaches a waiter");
        drop(first);
        assert_eq!(changes.watched(), 1, "still watched by the second waiter");
        drop(second);
        assert_eq!(changes.watched(), 0, "the last waiter's drop removes the feed");
        changes.notify("agt_01");
        assert_eq!(changes.watched(), 0, "a change of an unwatched task creates nothing");
    }

    #[tokio::test]
    async fn a_wait_abandoned_midway_removes_its_feed() {
        let changes = Changes::default();
        let wait = async {
            let mut w = changes.watch("agt_02");
            w.changed().await
        };
        // The request is dropped while it waits (the caller went away, or a timeout fired).
        let outcome = tokio::time::timeout(std::time::Duration::from_millis(10), wait).await;
        assert!(outcome.is_err());
        assert_eq!(changes.watched(), 0);
    }
}
