//! Review and accounting rows: the usage a runtime reported for a task, the task's change set
//! (its outline, file index and diff, or why there is none), and usage totals over a filter.

use rusqlite::{Connection, OptionalExtension, params};

use super::tasks::{HUMAN_WAIT_SQL, TaskFilter, filter_sql};
use super::{Store, StoreError};
use crate::model::{ResultStorage, Usage};

/// A change set to store (or the reason there is none).
#[derive(Debug, Clone, Default)]
pub struct NewChanges {
    /// `recorded` or `not_recorded`.
    pub status: &'static str,
    /// Why it was not recorded (redacted).
    pub reason: Option<String>,
    /// How it was taken: `git` or `manifest`.
    pub method: Option<String>,
    /// Files changed.
    pub files_changed: i64,
    /// Lines added.
    pub added: i64,
    /// Lines removed.
    pub removed: i64,
    /// The diff was cut at its bound.
    pub truncated: bool,
    /// The public summary (JSON).
    pub summary_json: Option<String>,
    /// Each file's byte span in the diff (JSON).
    pub index_json: Option<String>,
    /// Where the diff is kept (`None`: no diff).
    pub diff_storage: Option<ResultStorage>,
    /// The inline diff.
    pub diff_text: Option<String>,
    /// The whole diff's size in bytes.
    pub diff_size_bytes: i64,
    /// Its SHA-256.
    pub diff_sha256: Option<String>,
}

/// A stored change set.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangesRow {
    /// `recorded` or `not_recorded`.
    pub status: String,
    /// Why it was not recorded.
    pub reason: Option<String>,
    /// The public summary (JSON).
    pub summary_json: Option<String>,
    /// Each file's byte span in the diff (JSON).
    pub index_json: Option<String>,
    /// Where the diff is kept.
    pub diff_storage: Option<ResultStorage>,
    /// The inline diff.
    pub diff_text: Option<String>,
    /// The whole diff's size in bytes.
    pub diff_size_bytes: i64,
    /// Its SHA-256.
    pub diff_sha256: Option<String>,
    /// The diff was cut at its bound.
    pub truncated: bool,
}

/// What a task view shows of a change set: its status, why it was not recorded, and its
/// public summary (never the diff).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangesSummary {
    /// `recorded` or `not_recorded`.
    pub status: String,
    /// Why it was not recorded.
    pub reason: Option<String>,
    /// The public summary (JSON).
    pub summary_json: Option<String>,
}

/// A task's change-set summary, if it has a change set.
pub(super) fn changes_summary_in(c: &Connection, task_id: &str) -> Result<Option<ChangesSummary>, StoreError> {
    Ok(c.prepare_cached("SELECT status, reason, summary_json FROM task_changes WHERE task_id = ?1")?
        .query_row([task_id], |r| Ok(ChangesSummary { status: r.get(0)?, reason: r.get(1)?, summary_json: r.get(2)? }))
        .optional()?)
}

/// Usage summed over tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageTotals {
    /// Tasks counted.
    pub tasks: i64,
    /// Tasks that reported usage.
    pub reported: i64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Cached input tokens.
    pub cached_input_tokens: i64,
    /// Cache-write input tokens.
    pub cache_write_input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Reasoning tokens (where reported).
    pub reasoning_tokens: i64,
    /// Cost in USD over the tasks that reported one (`None`: none did).
    pub cost_usd: Option<f64>,
    /// Run time (start to end, or to now while running).
    pub wall_ms: i64,
    /// Time spent waiting for a human.
    pub human_wait_ms: i64,
}

/// How [`Store::usage_totals`] groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TotalsBy {
    /// One line over everything.
    All,
    /// Per owner.
    Principal,
    /// Per workdir.
    Workdir,
}

/// The most groups a totals answer lists.
pub const MAX_GROUPS: u32 = 100;

fn totals_select(now_param: usize) -> String {
    format!(
        "COUNT(*), COUNT(usage_input_tokens), COALESCE(SUM(usage_input_tokens), 0), \
         COALESCE(SUM(usage_cached_input_tokens), 0), COALESCE(SUM(usage_cache_write_input_tokens), 0), \
         COALESCE(SUM(usage_output_tokens), 0), COALESCE(SUM(usage_reasoning_tokens), 0), SUM(usage_cost_usd), \
         COALESCE(SUM(CASE WHEN started_at IS NULL THEN 0 ELSE MAX(0, COALESCE(completed_at, ?{now_param}) - started_at) END), 0), \
         COALESCE(SUM({HUMAN_WAIT_SQL}), 0)"
    )
}

fn totals_from(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<UsageTotals> {
    Ok(UsageTotals {
        tasks: row.get(at)?,
        reported: row.get(at + 1)?,
        input_tokens: row.get(at + 2)?,
        cached_input_tokens: row.get(at + 3)?,
        cache_write_input_tokens: row.get(at + 4)?,
        output_tokens: row.get(at + 5)?,
        reasoning_tokens: row.get(at + 6)?,
        cost_usd: row.get(at + 7)?,
        wall_ms: row.get(at + 8)?,
        human_wait_ms: row.get(at + 9)?,
    })
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// Replaces a task's usage with the runtime's latest cumulative report.
    pub fn set_usage(&self, task_id: &str, usage: &Usage, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE tasks SET usage_input_tokens = ?2, usage_cached_input_tokens = ?3, \
                 usage_cache_write_input_tokens = ?4, usage_output_tokens = ?5, usage_reasoning_tokens = ?6, \
                 usage_cost_usd = ?7, usage_model = COALESCE(?8, usage_model), updated_at = ?9 WHERE task_id = ?1",
                params![
                    task_id,
                    as_i64(usage.input_tokens),
                    as_i64(usage.cached_input_tokens),
                    as_i64(usage.cache_write_input_tokens),
                    as_i64(usage.output_tokens),
                    usage.reasoning_tokens.map(as_i64),
                    usage.cost_usd.filter(|c| c.is_finite() && *c >= 0.0),
                    usage.model,
                    now,
                ],
            )?;
            Ok(())
        })
    }

    /// Stores a task's change set once, with its event in the same transaction; a second one
    /// for the same task is ignored (`false`).
    pub fn put_changes(
        &self,
        task_id: &str,
        c: &NewChanges,
        event: &super::events::NewEvent,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            let inserted = tx.execute(
                "INSERT OR IGNORE INTO task_changes (task_id, status, reason, method, files_changed, lines_added, \
                 lines_removed, truncated, summary_json, index_json, diff_storage, diff_text, diff_size_bytes, \
                 diff_sha256, created_at) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15 \
                 WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = ?1)",
                params![
                    task_id,
                    c.status,
                    c.reason,
                    c.method,
                    c.files_changed,
                    c.added,
                    c.removed,
                    c.truncated,
                    c.summary_json,
                    c.index_json,
                    c.diff_storage,
                    c.diff_text,
                    c.diff_size_bytes,
                    c.diff_sha256,
                    now,
                ],
            )?;
            if inserted == 1 {
                super::events::insert_event(tx, task_id, event, now)?;
            }
            Ok(inserted == 1)
        })
    }

    /// A task's stored change set.
    pub fn get_changes(&self, task_id: &str) -> Result<Option<ChangesRow>, StoreError> {
        self.read(|c| {
            Ok(c.prepare_cached(
                "SELECT status, reason, summary_json, index_json, diff_storage, diff_text, diff_size_bytes, \
                 diff_sha256, truncated FROM task_changes WHERE task_id = ?1",
            )?
            .query_row([task_id], |r| {
                Ok(ChangesRow {
                    status: r.get(0)?,
                    reason: r.get(1)?,
                    summary_json: r.get(2)?,
                    index_json: r.get(3)?,
                    diff_storage: r.get(4)?,
                    diff_text: r.get(5)?,
                    diff_size_bytes: r.get(6)?,
                    diff_sha256: r.get(7)?,
                    truncated: r.get(8)?,
                })
            })
            .optional()?)
        })
    }

    /// Usage summed over the tasks a filter selects (its cursor ignored), grouped; at most
    /// [`MAX_GROUPS`] groups, the busiest first.
    pub fn usage_totals(
        &self,
        filter: &TaskFilter,
        by: TotalsBy,
        now: i64,
    ) -> Result<Vec<(String, UsageTotals)>, StoreError> {
        self.read(|c| {
            let (clauses, mut args) = filter_sql(filter, false);
            args.push(now.into());
            let select = totals_select(args.len());
            let (key, group) = match by {
                TotalsBy::All => ("''", ""),
                TotalsBy::Principal => ("principal", " GROUP BY principal"),
                TotalsBy::Workdir => ("workdir_alias", " GROUP BY workdir_alias"),
            };
            let sql = format!(
                "SELECT {key}, {select} FROM tasks WHERE 1=1{clauses}{group} ORDER BY 2 DESC, 1 LIMIT {MAX_GROUPS}"
            );
            let mut stmt = c.prepare(&sql)?;
            let rows =
                stmt.query_map(rusqlite::params_from_iter(args), |r| Ok((r.get::<_, String>(0)?, totals_from(r, 1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Usage summed over a plan's step tasks.
    pub fn plan_usage(&self, plan_id: &str, now: i64) -> Result<UsageTotals, StoreError> {
        self.read(|c| {
            let sql = format!(
                "SELECT {} FROM tasks WHERE task_id IN (SELECT task_id FROM plan_steps WHERE plan_id = ?1 \
                 AND task_id IS NOT NULL)",
                totals_select(2)
            );
            Ok(c.prepare_cached(&sql)?.query_row(params![plan_id, now], |r| totals_from(r, 0))?)
        })
    }
}
