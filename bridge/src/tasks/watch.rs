//! A change feed per task, so `get_agent_task` can long-poll without a busy loop, and one
//! pulse for every change of any task (plans waiting for a workdir and the board's live
//! updates listen to it).

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

impl Changes {
    /// Subscribes to the pulse that beats on every change of any task (or plan).
    pub fn subscribe_all(&self) -> watch::Receiver<u64> {
        self.pulse.subscribe()
    }

    /// Beats the pulse without naming a task (a plan changed).
    pub fn pulse(&self) {
        self.pulse.send_modify(|n| *n += 1);
    }

    /// Subscribes to a task's changes (subscribe *before* reading the task, so no change is
    /// missed between the read and the wait).
    pub fn subscribe(&self, task_id: &str) -> watch::Receiver<u64> {
        let mut map = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(task_id.to_owned()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Signals that a task's status or pending interaction changed.
    pub fn notify(&self, task_id: &str) {
        self.pulse();
        let mut map = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = map.get(task_id) {
            sender.send_modify(|n| *n += 1);
            if sender.receiver_count() == 0 {
                map.remove(task_id);
            }
        }
    }

    /// Drops feeds nobody listens to any more.
    pub fn prune(&self) {
        let mut map = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.receiver_count() > 0);
    }
}
