//! The data `calls` reads: terminal tasks seeded into the bridge's store through its own API
//! before the bridge starts (on tmpfs when there is one, then copied in: the store commits with
//! `synchronous=FULL`, and four commits a task on a disk would take minutes for 100,000), and the
//! reference's SQLite file with the same task ids and about the same fields.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use agent_bridge::model::{ResultStorage, TaskStatus};
use agent_bridge::store::events::NewEvent;
use agent_bridge::store::tasks::{NewTask, ResultFields, TransitionFields};
use agent_bridge::store::{DB_FILE, Store};

/// The id of the `i`th seeded task (the shape the bridge's ids have: `agt_` and hex).
pub fn task_id(i: usize) -> String {
    format!("agt_{i:032x}")
}

/// What a finished task said: a few sentences, as a short agent answer is.
const FINAL_RESPONSE: &str = "Done. I read src/lib.rs and src/config.rs, found the two places where the \
     timeout was parsed twice, and made the second one reuse the first's value. The tests pass \
     (cargo test: 214 passed). No other file changed.";

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The manifest a submit freezes, in its canonical shape (no host path).
fn manifest(id: &str, principal: &str, deadline_at: i64) -> String {
    json!({
        "containment": "none",
        "continue_from_task_id": null,
        "correlation_id": format!("bench-{id}"),
        "deadline_at": deadline_at,
        "idempotency_key": format!("key-{id}"),
        "limits": { "max_events_per_task": 10000, "max_final_response_bytes": 262144, "task_timeout_seconds": 7200 },
        "model": null,
        "path": "src",
        "principal": principal,
        "profile": "workspace-write",
        "prompt_sha256": "9f2c1e7a54b1d0c3e8a6f4b2d9c7e5a3b1f0d8c6e4a2b0f9d7c5e3a1b9f7d5c3",
        "runtime": "fake",
        "runtime_version": "fake 1.0.0",
        "workdir": { "alias": "repo", "mode": "workspace-write", "read_only": false, "runtimes": ["fake"] },
    })
    .to_string()
}

/// Seeds `tasks` succeeded tasks of `principal` into the store of `state_dir` (which must not
/// hold one yet), through the store's API: inserted, started, running, succeeded with an inline
/// result, three lifecycle events each, and `extra_events` agent messages on every hundredth.
/// Returns how long it took.
pub fn bridge_store(state_dir: &Path, principal: &str, tasks: usize, extra_events: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    // tmpfs when the machine has one: the commits are then not flushed to a disk one by one.
    let scratch = match Path::new("/dev/shm").is_dir() {
        true => tempfile::Builder::new().prefix("calls-seed-").tempdir_in("/dev/shm"),
        false => tempfile::Builder::new().prefix("calls-seed-").tempdir(),
    }
    .context("a scratch directory for the store")?;
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o700))
        .context("chmod the scratch directory")?;
    {
        let store = Store::open(scratch.path()).context("open the scratch store")?;
        let now = now_ms();
        for i in 0..tasks {
            seed_task(&store, &task_id(i), principal, now - 60_000, if i % 100 == 0 { extra_events } else { 0 })
                .with_context(|| format!("seed task {i}"))?;
        }
        // Each ending recorded a notification fact. The measured bridge has no notification
        // target: they are routed to nobody here, as its worker would do at start.
        agent_bridge::notify::route::route_pending(&store, &[], &mut Default::default())
            .context("route the seeded notification facts")?;
    }
    // The store is closed: its WAL is checkpointed into the file. Copied whole (mode 0600 kept).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .with_context(|| format!("create {}", state_dir.display()))?;
    for suffix in ["", "-wal"] {
        let from = scratch.path().join(format!("{DB_FILE}{suffix}"));
        if from.exists() {
            std::fs::copy(&from, state_dir.join(format!("{DB_FILE}{suffix}")))
                .with_context(|| format!("copy {} into {}", from.display(), state_dir.display()))?;
        }
    }
    Ok(started.elapsed())
}

fn seed_task(store: &Store, id: &str, principal: &str, at: i64, extra_events: usize) -> anyhow::Result<()> {
    let deadline_at = at + 7_200_000;
    let new = NewTask {
        task_id: id.to_owned(),
        principal: principal.to_owned(),
        runtime: "fake".into(),
        workdir_alias: "repo".into(),
        relative_cwd: "src".into(),
        profile: "workspace-write".into(),
        requested_model: None,
        created_at: at,
        deadline_at,
        continue_from_task_id: None,
        correlation_id: Some(format!("bench-{id}")),
        idempotency_key: Some(format!("key-{id}")),
        request_fingerprint: Some("4b7e2f0c9a1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f".into()),
        manifest_json: manifest(id, principal, deadline_at),
        manifest_sha256: "0d6e1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f3e4d5c6b7a8f9e0d".into(),
        title: Some("Reuse the parsed timeout in config".into()),
    };
    store.insert_task(&new, u32::MAX, None, &NewEvent::new("task.submitted", json!({})))?;
    store.transition(id, TaskStatus::Starting, TransitionFields::default(), at + 50)?;
    let started = NewEvent::new("task.started", json!({ "runtime": "fake" }));
    store.transition(
        id,
        TaskStatus::Running,
        TransitionFields { event: Some(started), ..Default::default() },
        at + 80,
    )?;
    let message = NewEvent::new("agent.message", json!({ "text": "a line of agent output" }));
    for _ in 0..extra_events {
        store.append_event(id, &message, Some(10_000), at + 1_000)?;
    }
    let result = ResultFields {
        final_response: FINAL_RESPONSE.to_owned(),
        storage: ResultStorage::Inline,
        size_bytes: FINAL_RESPONSE.len() as i64,
        sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
    };
    let completed = NewEvent::new("task.completed", json!({ "result_storage": "inline" }));
    let fields = TransitionFields { result: Some(result), event: Some(completed), ..Default::default() };
    store.transition(id, TaskStatus::Succeeded, fields, at + 45_000)?;
    Ok(())
}

/// Writes the reference's (and the SQLite floor's) file at `path`: one `tasks` table keyed by
/// `task_id`, in WAL mode, with `tasks` rows whose columns are the fields of our task view.
pub fn reference_db(path: &Path, principal: &str, tasks: usize) -> anyhow::Result<()> {
    let mut conn = rusqlite::Connection::open(path).with_context(|| format!("create {}", path.display()))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.execute_batch(
        "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, status TEXT NOT NULL, terminal INTEGER NOT NULL, \
         runtime TEXT NOT NULL, workdir TEXT NOT NULL, path TEXT NOT NULL, profile TEXT NOT NULL, model TEXT, \
         owner TEXT NOT NULL, created_at TEXT NOT NULL, started_at TEXT, updated_at TEXT NOT NULL, \
         completed_at TEXT, deadline_at TEXT NOT NULL, correlation_id TEXT, idempotency_key TEXT, \
         continue_from_task_id TEXT, error TEXT, final_response TEXT, result_storage TEXT, \
         result_size_bytes INTEGER, result_sha256 TEXT, event_count INTEGER NOT NULL, manifest TEXT NOT NULL, \
         manifest_sha256 TEXT NOT NULL, title TEXT)",
    )?;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO tasks VALUES (?1, 'succeeded', 1, 'fake', 'repo', 'src', 'workspace-write', NULL, ?2, \
             '2026-01-05T10:00:00.000Z', '2026-01-05T10:00:00.050Z', '2026-01-05T10:00:45.000Z', \
             '2026-01-05T10:00:45.000Z', '2026-01-05T12:00:00.000Z', ?3, ?4, NULL, NULL, ?5, 'inline', ?6, \
             'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 3, ?7, \
             '0d6e1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f3e4d5c6b7a8f9e0d', \
             'Reuse the parsed timeout in config')",
        )?;
        for i in 0..tasks {
            let id = task_id(i);
            insert.execute(rusqlite::params![
                id,
                principal,
                format!("bench-{id}"),
                format!("key-{id}"),
                FINAL_RESPONSE,
                FINAL_RESPONSE.len() as i64,
                manifest(&id, principal, 0),
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}
