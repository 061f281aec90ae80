//! The audit writer: one row per capability call, batched into group commits off the request
//! path. A write failure is logged and never fails a call.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::store::Store;
use crate::store::audit::AuditRow;

const QUEUE: usize = 16_384;
const BATCH: usize = 512;

enum Msg {
    Row(Box<AuditRow>, Option<String>),
    Flush(oneshot::Sender<()>),
}

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<Msg>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("audit message")
    }
}

impl AuditSink {
    /// Starts the writer on `tracker`; it drains and stops when `shutdown` is cancelled.
    pub fn start(store: Arc<Store>, tracker: &TaskTracker, shutdown: CancellationToken) -> AuditSink {
        let (tx, rx) = mpsc::channel(QUEUE);
        tracker.spawn(writer(store, rx, shutdown));
        AuditSink { tx }
    }

    /// Queues a row; `key_id` marks the key as used. Never blocks or fails the caller.
    pub fn record(&self, row: AuditRow, key_id: Option<String>) {
        if let Err(e) = self.tx.try_send(Msg::Row(Box::new(row), key_id)) {
            tracing::error!(cause = %e, "audit queue is full or closed; a row was lost");
        }
    }

    /// Waits until every row queued before this call is written.
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }
}

async fn writer(store: Arc<Store>, mut rx: mpsc::Receiver<Msg>, shutdown: CancellationToken) {
    loop {
        let first = tokio::select! {
            msg = rx.recv() => msg,
            _ = shutdown.cancelled() => { rx.close(); rx.recv().await }
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(msg) => batch.push(msg),
                Err(_) => break,
            }
        }
        let mut rows = Vec::new();
        let mut used = Vec::new();
        let mut acks = Vec::new();
        for msg in batch {
            match msg {
                Msg::Row(row, key) => {
                    if let Some(key) = key {
                        used.push((key, row.at));
                    }
                    rows.push(*row);
                }
                Msg::Flush(ack) => acks.push(ack),
            }
        }
        if !rows.is_empty() {
            let count = rows.len();
            let result = store
                .call(move |s| {
                    s.insert_audit(&rows)?;
                    s.touch_keys(&used)
                })
                .await;
            if let Err(e) = result {
                tracing::error!(cause = %e, count, "cannot write audit rows");
            }
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}
