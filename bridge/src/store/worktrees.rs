//! Worktree tasks: one row per task that works in a git worktree of its own — its branch, where
//! the branch started, where this task found and left it, and what became of it.
//!
//! The row is written with the task (in `insert_task`'s transaction) and moves through
//! [`WorktreeState`] as the runner creates the worktree, the task ends and a human merges or
//! discards the branch. A task whose branch still holds unmerged work is never deleted by
//! retention (its row is how the branch is found, merged or discarded).

use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError};
pub use crate::model::WorktreeState;

/// The row written with a worktree task.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWorktree {
    /// The branch the task works on.
    pub branch: String,
    /// The task that made the branch (itself, or the first of its continuations or plan steps).
    pub origin_task_id: String,
    /// What the branch starts from, as the caller named it (`HEAD` by default).
    pub base_ref: String,
}

/// A stored worktree row.
#[derive(Debug, Clone, PartialEq)]
pub struct WorktreeRow {
    /// The task.
    pub task_id: String,
    /// Its workdir.
    pub workdir_alias: String,
    /// Its branch.
    pub branch: String,
    /// The task that made the branch.
    pub origin_task_id: String,
    /// What the branch started from, as named.
    pub base_ref: String,
    /// The commit the branch started at.
    pub base_commit: Option<String>,
    /// The branch's tip when this task started.
    pub start_commit: Option<String>,
    /// The branch's tip when this task ended.
    pub head_commit: Option<String>,
    /// Whether the checkout had changes the task did not see.
    pub base_dirty: Option<bool>,
    /// What became of it.
    pub state: WorktreeState,
    /// Why, for `kept` and `failed`.
    pub reason: Option<String>,
    /// What the branch holds beyond its base when this task ended.
    pub size: Option<BranchSize>,
    /// The commit the user's branch got when the branch was merged.
    pub merged_commit: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

/// What a branch holds beyond its base: commits, and the diff's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BranchSize {
    /// Commits on the branch that its base does not have.
    pub ahead: u64,
    /// Files that differ from the base.
    pub files_changed: u64,
    /// Lines added.
    pub lines_added: u64,
    /// Lines removed.
    pub lines_removed: u64,
}

const COLUMNS: &str = "task_id, workdir_alias, branch, origin_task_id, base_ref, base_commit, start_commit, \
    head_commit, base_dirty, state, reason, created_at, updated_at, ahead, files_changed, lines_added, lines_removed, \
    merged_commit";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WorktreeRow> {
    let state: String = r.get(9)?;
    Ok(WorktreeRow {
        task_id: r.get(0)?,
        workdir_alias: r.get(1)?,
        branch: r.get(2)?,
        origin_task_id: r.get(3)?,
        base_ref: r.get(4)?,
        base_commit: r.get(5)?,
        start_commit: r.get(6)?,
        head_commit: r.get(7)?,
        base_dirty: r.get(8)?,
        state: WorktreeState::parse(&state).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Text, format!("state {state:?}").into())
        })?,
        reason: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        size: match r.get::<_, Option<i64>>(13)? {
            Some(ahead) => Some(BranchSize {
                ahead: ahead.max(0) as u64,
                files_changed: r.get::<_, Option<i64>>(14)?.unwrap_or(0).max(0) as u64,
                lines_added: r.get::<_, Option<i64>>(15)?.unwrap_or(0).max(0) as u64,
                lines_removed: r.get::<_, Option<i64>>(16)?.unwrap_or(0).max(0) as u64,
            }),
            None => None,
        },
        merged_commit: r.get(17)?,
    })
}

/// Writes a worktree task's row (inside `insert_task`'s transaction).
pub(super) fn insert_in(
    tx: &Connection,
    task_id: &str,
    workdir_alias: &str,
    new: &NewWorktree,
    now: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO worktrees (task_id, workdir_alias, branch, origin_task_id, base_ref, state, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'preparing', ?6, ?6)",
        params![task_id, workdir_alias, new.branch, new.origin_task_id, new.base_ref, now],
    )?;
    Ok(())
}

/// A task's worktree row, on `conn`.
pub(super) fn get_in(conn: &Connection, task_id: &str) -> Result<Option<WorktreeRow>, StoreError> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM worktrees WHERE task_id = ?1"))?
        .query_row([task_id], from_row)
        .optional()?)
}

/// What the runner learnt when it made the worktree.
#[derive(Debug, Clone, PartialEq)]
pub struct WorktreeStarted {
    /// The commit the branch started at.
    pub base_commit: String,
    /// The branch's tip now.
    pub start_commit: String,
    /// Whether the checkout had changes the task does not see.
    pub base_dirty: bool,
}

impl Store {
    /// A task's worktree row, if it is a worktree task.
    pub fn get_worktree(&self, task_id: &str) -> Result<Option<WorktreeRow>, StoreError> {
        self.read(|c| get_in(c, task_id))
    }

    /// Every row of a branch, newest first (its continuations and plan steps).
    pub fn branch_rows(&self, workdir_alias: &str, branch: &str) -> Result<Vec<WorktreeRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees WHERE workdir_alias = ?1 AND branch = ?2 ORDER BY created_at DESC, rowid DESC"
            ))?;
            let rows = stmt.query_map([workdir_alias, branch], from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Every row still holding work (`preparing`, `active`, `open`, `kept`), oldest first.
    pub fn worktrees_holding_work(&self) -> Result<Vec<WorktreeRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees WHERE state IN ('preparing','active','open','kept') ORDER BY created_at, rowid"
            ))?;
            let rows = stmt.query_map([], from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Records that the worktree exists.
    pub fn worktree_started(&self, task_id: &str, started: &WorktreeStarted, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE worktrees SET state = 'active', base_commit = ?2, start_commit = ?3, base_dirty = ?4, \
                 updated_at = ?5 WHERE task_id = ?1 AND state = 'preparing'",
                params![task_id, started.base_commit, started.start_commit, started.base_dirty, now],
            )?;
            Ok(())
        })
    }

    /// Moves a worktree row to `state` (with its head, reason and size when given) if it is in
    /// one of `from`; returns whether it did.
    #[expect(clippy::too_many_arguments, reason = "one row's columns, each named at the call")]
    pub fn set_worktree_state(
        &self,
        task_id: &str,
        from: &[WorktreeState],
        state: WorktreeState,
        head_commit: Option<&str>,
        reason: Option<&str>,
        size: Option<BranchSize>,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            let current: Option<String> = tx
                .query_row("SELECT state FROM worktrees WHERE task_id = ?1", [task_id], |r| r.get(0))
                .optional()?;
            let Some(current) = current.as_deref().and_then(WorktreeState::parse) else { return Ok(false) };
            if !from.contains(&current) {
                return Ok(false);
            }
            let size = size.map(|z| [z.ahead, z.files_changed, z.lines_added, z.lines_removed].map(|n| n as i64));
            tx.execute(
                "UPDATE worktrees SET state = ?2, head_commit = COALESCE(?3, head_commit), reason = ?4, updated_at = ?5, \
                 ahead = COALESCE(?6, ahead), files_changed = COALESCE(?7, files_changed), \
                 lines_added = COALESCE(?8, lines_added), lines_removed = COALESCE(?9, lines_removed) \
                 WHERE task_id = ?1",
                params![
                    task_id,
                    state.as_str(),
                    head_commit,
                    reason,
                    now,
                    size.map(|z| z[0]),
                    size.map(|z| z[1]),
                    size.map(|z| z[2]),
                    size.map(|z| z[3])
                ],
            )?;
            Ok(true)
        })
    }

    /// Records that a branch was merged (`merged_commit` is what the user's branch got) or
    /// discarded: every row of the branch that still held its work moves to `state`. Returns
    /// how many rows moved.
    pub fn hand_back(
        &self,
        workdir_alias: &str,
        branch: &str,
        state: WorktreeState,
        merged_commit: Option<&str>,
        now: i64,
    ) -> Result<usize, StoreError> {
        self.write(|tx| {
            let moved = tx.execute(
                "UPDATE worktrees SET state = ?3, merged_commit = ?4, updated_at = ?5 \
                 WHERE workdir_alias = ?1 AND branch = ?2 AND state IN ('open','empty','kept')",
                params![workdir_alias, branch, state.as_str(), merged_commit, now],
            )?;
            Ok(moved)
        })
    }

    /// The agent branches neither merged nor discarded: the newest row of each branch whose
    /// work is `open` or `kept`, oldest branch first.
    pub fn agent_branches(&self) -> Result<Vec<WorktreeRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees w WHERE state IN ('open','kept') AND NOT EXISTS \
                 (SELECT 1 FROM worktrees n WHERE n.workdir_alias = w.workdir_alias AND n.branch = w.branch \
                  AND n.rowid > w.rowid) ORDER BY created_at, rowid"
            ))?;
            let rows = stmt.query_map([], from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
