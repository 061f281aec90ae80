//! Recovery guards: one persistent record per workdir while a writer task's provider may
//! still be alive. A guard is cleared only on proof that the provider stopped.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

/// A stored guard.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardRow {
    /// The protected workdir.
    pub workdir_alias: String,
    /// The writer task.
    pub task_id: String,
    /// Its runtime.
    pub runtime: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// What a later process needs to re-check the stop (JSON), once the provider started.
    pub proof_json: Option<String>,
}

/// The key of a guard: the workdir's alias for a task in place, `alias@branch` for a worktree
/// task (an alias never holds `@`), so writers of one repository's branches are guarded apart.
pub fn guard_key(workdir_alias: &str, branch: Option<&str>) -> String {
    match branch {
        Some(branch) => format!("{workdir_alias}@{branch}"),
        None => workdir_alias.to_owned(),
    }
}

impl GuardRow {
    /// The workdir it protects.
    pub fn alias(&self) -> &str {
        self.workdir_alias.split_once('@').map_or(&self.workdir_alias, |(alias, _)| alias)
    }

    /// The branch it protects, for a worktree task's guard.
    pub fn branch(&self) -> Option<&str> {
        self.workdir_alias.split_once('@').map(|(_, branch)| branch)
    }
}

const COLUMNS: &str = "workdir_alias, task_id, runtime, created_at, updated_at, proof_json";

fn guard_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GuardRow> {
    Ok(GuardRow {
        workdir_alias: r.get(0)?,
        task_id: r.get(1)?,
        runtime: r.get(2)?,
        created_at: r.get(3)?,
        updated_at: r.get(4)?,
        proof_json: r.get(5)?,
    })
}

impl Store {
    /// The guard on a workdir, if any.
    pub fn get_guard(&self, workdir_alias: &str) -> Result<Option<GuardRow>, StoreError> {
        self.read(|c| {
            Ok(c.query_row(
                &format!("SELECT {COLUMNS} FROM recovery_guards WHERE workdir_alias = ?1"),
                [workdir_alias],
                guard_from_row,
            )
            .optional()?)
        })
    }

    /// Every guard.
    pub fn list_guards(&self) -> Result<Vec<GuardRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare(&format!("SELECT {COLUMNS} FROM recovery_guards ORDER BY workdir_alias"))?;
            let rows = stmt.query_map([], guard_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Records the proof material of the guard held by `task_id`.
    pub fn set_guard_proof(&self, task_id: &str, proof_json: &str, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE recovery_guards SET proof_json = ?2, updated_at = ?3 WHERE task_id = ?1",
                params![task_id, proof_json, now],
            )?;
            Ok(())
        })
    }

    /// Clears the guard on `workdir_alias` if it still names `task_id`; returns whether it did.
    pub fn clear_guard(&self, workdir_alias: &str, task_id: &str) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM recovery_guards WHERE workdir_alias = ?1 AND task_id = ?2",
                params![workdir_alias, task_id],
            )?;
            Ok(n == 1)
        })
    }
}
