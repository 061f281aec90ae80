//! Schema migrations: an append-only list applied against `PRAGMA user_version`.
//!
//! Never edit or remove a migration that has shipped; add a new one. Each migration is
//! additive (new tables, new nullable columns, new indexes) so older rows stay readable and no
//! value is ever fabricated for them.

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Migration 1: the core tables.
const V1_CORE: &str = r#"
CREATE TABLE tasks (
    task_id               TEXT PRIMARY KEY,
    principal             TEXT NOT NULL,
    runtime               TEXT NOT NULL,
    workdir_alias         TEXT NOT NULL,
    relative_cwd          TEXT NOT NULL,
    profile               TEXT NOT NULL,
    requested_model       TEXT,
    status                TEXT NOT NULL,
    created_at            INTEGER NOT NULL,
    started_at            INTEGER,
    updated_at            INTEGER NOT NULL,
    completed_at          INTEGER,
    deadline_at           INTEGER NOT NULL,
    continue_from_task_id TEXT,
    correlation_id        TEXT,
    native_session_id     TEXT,
    final_response        TEXT,
    result_storage        TEXT,
    result_size_bytes     INTEGER,
    result_sha256         TEXT,
    manifest_json         TEXT NOT NULL,
    manifest_sha256       TEXT NOT NULL,
    error_code            TEXT,
    error_message         TEXT,
    pending_request_id    TEXT,
    event_count           INTEGER NOT NULL DEFAULT 0,
    events_dropped        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tasks_by_status ON tasks(status);
CREATE INDEX tasks_by_created ON tasks(created_at);

CREATE TABLE events (
    event_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      TEXT NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    event_type   TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX events_by_task ON events(task_id, event_id);

CREATE TABLE interactions (
    request_id      TEXT PRIMARY KEY,
    task_id         TEXT NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    kind            TEXT NOT NULL,
    status          TEXT NOT NULL,
    payload_json    TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    resolved_at     INTEGER,
    resolution_json TEXT
);
CREATE INDEX interactions_by_task ON interactions(task_id, status);

CREATE TABLE api_keys (
    key_id        TEXT PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    role          TEXT NOT NULL,
    key_sha256    BLOB NOT NULL UNIQUE,
    workdirs_json TEXT,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
);

CREATE TABLE audit_log (
    audit_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    surface     TEXT NOT NULL,
    principal   TEXT,
    role        TEXT,
    capability  TEXT NOT NULL,
    scope       TEXT,
    outcome     TEXT NOT NULL,
    error_code  TEXT,
    duration_us INTEGER NOT NULL,
    task_id     TEXT,
    client_name TEXT
);
CREATE INDEX audit_by_at ON audit_log(at);

CREATE TABLE recovery_guards (
    workdir_alias TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL,
    runtime       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
"#;

/// Migration 2: retry-safe submission. Existing rows keep NULL keys and
/// fingerprints; the partial unique index allows any number of NULLs.
const V2_IDEMPOTENCY: &str = r#"
ALTER TABLE tasks ADD COLUMN idempotency_key TEXT;
ALTER TABLE tasks ADD COLUMN request_fingerprint TEXT;
CREATE UNIQUE INDEX tasks_by_idempotency_key
    ON tasks(principal, idempotency_key) WHERE idempotency_key IS NOT NULL;
"#;

/// Migration 3: what a later process needs to re-check a provider's stop (the process
/// group leader, its start time, and the marker its descendants carry), plus the plan id
/// column of audit rows.
const V3_PROOF: &str = r#"
ALTER TABLE recovery_guards ADD COLUMN proof_json TEXT;
ALTER TABLE audit_log ADD COLUMN plan_id TEXT;
"#;

/// Migration 4: human-approved plans and the board's login tokens.
///
/// Purely additive: three new tables and their indexes; no existing row changes. The seed's
/// backfill (every plan that existed before the approval gate counts as approved) has nothing
/// to touch here, because no plan existed before this migration; its rule lives on in the
/// service: a plan the local operator files is approved at creation. Tasks from before keep
/// belonging to no plan.
///
/// `plans.created_by` is the provenance the board shows (`created by <principal>`), with the
/// surface it came through; `principal` is the owner (the same name today, kept apart so
/// ownership and provenance can never be confused). `approved_at` is NULL until a human
/// approves. A step's `status` records the runner's intent before a task exists (`starting`),
/// so a restart can tell a step that may have run from one that never did.
const V4_PLANS: &str = r#"
CREATE TABLE plans (
    plan_id             TEXT PRIMARY KEY,
    principal           TEXT NOT NULL,
    created_by          TEXT NOT NULL,
    created_surface     TEXT NOT NULL,
    title               TEXT NOT NULL,
    runtime             TEXT NOT NULL,
    workdir_alias       TEXT NOT NULL,
    relative_cwd        TEXT NOT NULL,
    profile             TEXT NOT NULL,
    status              TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    approved_at         INTEGER,
    approved_by         TEXT,
    rejected_at         INTEGER,
    rejected_by         TEXT,
    rejection_reason    TEXT,
    completed_at        INTEGER,
    wait_code           TEXT,
    error_code          TEXT,
    error_message       TEXT,
    correlation_id      TEXT,
    idempotency_key     TEXT,
    request_fingerprint TEXT
);
CREATE UNIQUE INDEX plans_by_idempotency_key
    ON plans(principal, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX plans_by_status ON plans(status, created_at);

CREATE TABLE plan_steps (
    plan_id      TEXT NOT NULL REFERENCES plans(plan_id) ON DELETE CASCADE,
    position     INTEGER NOT NULL CHECK (position >= 1),
    title        TEXT NOT NULL CHECK (length(trim(title)) > 0),
    prompt       TEXT NOT NULL CHECK (length(trim(prompt)) > 0),
    status       TEXT NOT NULL,
    task_id      TEXT,
    started_at   INTEGER,
    completed_at INTEGER,
    PRIMARY KEY (plan_id, position)
);
CREATE INDEX plan_steps_by_task ON plan_steps(task_id) WHERE task_id IS NOT NULL;

CREATE TABLE board_tokens (
    token_id     TEXT PRIMARY KEY,
    token_sha256 BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
"#;

/// Migration 5: audit rows under floods.
///
/// `call_count` is how many calls a row stands for: 1 for every row written before (each was
/// one call), more for a coalesced row of unauthenticated calls. `coalesce_key` names such a
/// row's source and minute (see `registry::audit`) so later calls of the same minute add to
/// it with an UPSERT; it is NULL for every other row, and the partial unique index allows any
/// number of NULLs. Purely additive: no existing row changes meaning.
const V5_AUDIT_COUNTS: &str = r#"
ALTER TABLE audit_log ADD COLUMN call_count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE audit_log ADD COLUMN coalesce_key TEXT;
CREATE UNIQUE INDEX audit_by_coalesce_key ON audit_log(coalesce_key) WHERE coalesce_key IS NOT NULL;
"#;

/// Migration 6: the notification outbox, its delivery attempts and action links.
///
/// A row of `notify_outbox` is one notification to one target, written in the transaction of
/// the state change it reports; `dedupe_key` makes a second write of the same fact a no-op.
/// `action_url` holds a single-use action link until the row is delivered or given up (only the
/// link's SHA-256 is in `action_links`). New tables only.
const V6_NOTIFY: &str = r#"
CREATE TABLE notify_outbox (
    outbox_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id       TEXT NOT NULL UNIQUE,
    dedupe_key       TEXT NOT NULL UNIQUE,
    target           INTEGER NOT NULL,
    event_type       TEXT NOT NULL,
    order_key        TEXT NOT NULL,
    task_id          TEXT,
    plan_id          TEXT,
    request_id       TEXT,
    facts_json       TEXT NOT NULL,
    action_url       TEXT,
    state            TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    give_up_at       INTEGER NOT NULL,
    last_attempt_at  INTEGER,
    last_status      INTEGER,
    last_error       TEXT,
    last_latency_ms  INTEGER,
    delivered_at     INTEGER
);
CREATE INDEX notify_pending ON notify_outbox(target, order_key, outbox_id) WHERE state = 'pending';
CREATE INDEX notify_due ON notify_outbox(next_attempt_at, outbox_id) WHERE state = 'pending';
CREATE INDEX notify_by_created ON notify_outbox(created_at);
CREATE TABLE notify_attempts (
    outbox_id   INTEGER NOT NULL REFERENCES notify_outbox(outbox_id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    http_status INTEGER,
    latency_ms  INTEGER NOT NULL,
    error       TEXT,
    PRIMARY KEY (outbox_id, attempt)
);
CREATE INDEX notify_attempts_by_at ON notify_attempts(at);
CREATE TABLE action_links (
    link_id      TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    task_id      TEXT NOT NULL,
    request_id   TEXT NOT NULL,
    target       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
);
CREATE INDEX action_links_by_task ON action_links(task_id);
"#;

/// Migration 7: review and accounting. A task's title (the first line of its prompt,
/// shortened), its token usage and cost as the runtime reported them (NULL: nothing reported,
/// never a made-up zero), and its change set: one row per task, deleted with it. The diff is
/// inline up to the spool threshold, else in a private spool file the row names by size and
/// hash; `index_json` holds each file's byte span in it.
const V7_ACCOUNTING: &str = r#"
ALTER TABLE tasks ADD COLUMN title TEXT;
ALTER TABLE tasks ADD COLUMN usage_input_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN usage_cached_input_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN usage_cache_write_input_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN usage_output_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN usage_reasoning_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN usage_cost_usd REAL;
ALTER TABLE tasks ADD COLUMN usage_model TEXT;
CREATE TABLE task_changes (
    task_id         TEXT PRIMARY KEY REFERENCES tasks(task_id) ON DELETE CASCADE,
    status          TEXT NOT NULL,
    reason          TEXT,
    method          TEXT,
    files_changed   INTEGER NOT NULL DEFAULT 0,
    lines_added     INTEGER NOT NULL DEFAULT 0,
    lines_removed   INTEGER NOT NULL DEFAULT 0,
    truncated       INTEGER NOT NULL DEFAULT 0,
    summary_json    TEXT,
    index_json      TEXT,
    diff_storage    TEXT,
    diff_text       TEXT,
    diff_size_bytes INTEGER NOT NULL DEFAULT 0,
    diff_sha256     TEXT,
    created_at      INTEGER NOT NULL
);
"#;

/// Migration 8: worktree tasks. One row per task that works in a git worktree of its
/// own: its branch (shared by its continuations and a plan's steps), where the branch started,
/// where the task found and left it, and what became of it. New table only; tasks from before
/// worked in place and have no row.
const V8_WORKTREES: &str = r#"
CREATE TABLE worktrees (
    task_id        TEXT PRIMARY KEY REFERENCES tasks(task_id) ON DELETE CASCADE,
    workdir_alias  TEXT NOT NULL,
    branch         TEXT NOT NULL,
    origin_task_id TEXT NOT NULL,
    base_ref       TEXT NOT NULL,
    base_commit    TEXT,
    start_commit   TEXT,
    head_commit    TEXT,
    base_dirty     INTEGER,
    state          TEXT NOT NULL,
    reason         TEXT,
    ahead          INTEGER,
    files_changed  INTEGER,
    lines_added    INTEGER,
    lines_removed  INTEGER,
    merged_commit  TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX worktrees_by_branch ON worktrees(workdir_alias, branch);
CREATE INDEX worktrees_by_state ON worktrees(state);
ALTER TABLE plans ADD COLUMN isolation TEXT;
"#;

/// Migration 9: the notifier's facts. A row is one change (a task ended, a request opened, a
/// plan awaits approval, a workdir stays closed), written in the change's transaction with what
/// its wording needs (`data_json`, typed by `kind`); the delivery worker routes it into
/// `notify_outbox` rows, one per target that wants it, and deletes it in that transaction. New
/// table only: outbox rows from before are messages already routed and go out as they are.
const V9_NOTIFY_FACTS: &str = r#"
CREATE TABLE notify_facts (
    fact_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    task_id    TEXT,
    plan_id    TEXT,
    request_id TEXT,
    data_json  TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"#;

/// Every migration, in order; `user_version` is the number applied.
pub(super) const MIGRATIONS: &[&str] = &[
    V1_CORE,
    V2_IDEMPOTENCY,
    V3_PROOF,
    V4_PLANS,
    V5_AUDIT_COUNTS,
    V6_NOTIFY,
    V7_ACCOUNTING,
    V8_WORKTREES,
    V9_NOTIFY_FACTS,
];

/// Applies the missing migrations in one exclusive transaction.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    migrate_to(conn, MIGRATIONS.len())
}

/// Applies migrations up to `target` (tests use this to build an old database).
pub(super) fn migrate_to(conn: &mut Connection, target: usize) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew { found: current, known });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().take(target).skip(current as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test opens its own SQLite connection")]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test opens its own SQLite connection")]
    fn a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        assert!(matches!(migrate(&mut conn), Err(StoreError::TooNew { found: 99, .. })));
    }
}
