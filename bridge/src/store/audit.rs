//! Audit rows: one per capability call, written in batches by the audit writer; the calls
//! that failed authentication are coalesced into one row per source and minute with a count
//! (see `registry::audit`). Rows older than the audit retention are deleted in bounded batches.

use rusqlite::params;

use super::{Store, StoreError};
use crate::config::Role;
use crate::model::AuditOutcome;

/// One audit row. It never holds prompts, answers, message text, host paths or keys.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// Assigned by the store (0 before insertion).
    pub audit_id: i64,
    /// Unix ms.
    pub at: i64,
    /// `mcp`, `cli` or `board`.
    pub surface: String,
    /// The principal, when authenticated.
    pub principal: Option<String>,
    /// The principal's role.
    pub role: Option<Role>,
    /// The capability name as called (even if it does not exist).
    pub capability: String,
    /// `read` or `write`, when the capability exists.
    pub scope: Option<String>,
    /// How the call ended.
    pub outcome: AuditOutcome,
    /// The error code, unless `ok`.
    pub error_code: Option<String>,
    /// How long the call took.
    pub duration_us: i64,
    /// The task the call concerned.
    pub task_id: Option<String>,
    /// The plan the call concerned.
    pub plan_id: Option<String>,
    /// The client's self-reported name (and version), in a safe shape.
    pub client_name: Option<String>,
    /// How many calls this row stands for: 1, or more for a coalesced row.
    pub count: i64,
}

/// Filters for [`Store::read_audit`].
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only this principal.
    pub principal: Option<String>,
    /// Only this capability.
    pub capability: Option<String>,
    /// Only this outcome.
    pub outcome: Option<AuditOutcome>,
    /// Only this task.
    pub task_id: Option<String>,
}

const COLUMNS: &str = "audit_id, at, surface, principal, role, capability, scope, outcome, error_code, \
    duration_us, task_id, plan_id, client_name, call_count";

const INSERT: &str = "INSERT INTO audit_log (at, surface, principal, role, capability, scope, outcome, error_code, \
    duration_us, task_id, plan_id, client_name, call_count, coalesce_key) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

impl Store {
    /// Inserts a batch of audit rows in one transaction.
    pub fn insert_audit(&self, rows: &[AuditRow]) -> Result<(), StoreError> {
        let rows: Vec<(Option<String>, AuditRow)> = rows.iter().map(|r| (None, r.clone())).collect();
        self.write_audit(&rows, &[])
    }

    /// Writes `rows` in order and marks the keys in `used` used (at the latest of their
    /// times), in one transaction, relaxed ([`Store::write_relaxed`]: these rows describe
    /// calls already answered). A row with a coalescing key whose key already has a row adds
    /// its count to that row (and keeps the longer duration); otherwise it becomes that key's
    /// row. A row without a key is inserted as it is.
    pub fn write_audit(&self, rows: &[(Option<String>, AuditRow)], used: &[(String, i64)]) -> Result<(), StoreError> {
        self.write_relaxed(|tx| {
            Store::touch_keys_in(tx, used)?;
            let upsert = format!(
                "{INSERT} ON CONFLICT(coalesce_key) WHERE coalesce_key IS NOT NULL DO UPDATE SET \
                 call_count = call_count + excluded.call_count, duration_us = max(duration_us, excluded.duration_us)"
            );
            for (key, r) in rows {
                let mut stmt = tx.prepare_cached(if key.is_some() { &upsert } else { INSERT })?;
                stmt.execute(params![
                    r.at,
                    r.surface,
                    r.principal,
                    r.role,
                    r.capability,
                    r.scope,
                    r.outcome,
                    r.error_code,
                    r.duration_us,
                    r.task_id,
                    r.plan_id,
                    r.client_name,
                    r.count.max(1),
                    key
                ])?;
            }
            Ok(())
        })
    }

    /// Deletes at most `limit` audit rows older than `cutoff` (Unix ms), oldest first, in one
    /// short transaction; returns how many went. A pass with nothing to do takes no write lock.
    pub fn delete_audit_before(&self, cutoff: i64, limit: u32) -> Result<usize, StoreError> {
        let due: bool = self.read(|c| {
            Ok(c.prepare_cached("SELECT EXISTS (SELECT 1 FROM audit_log WHERE at < ?1)")?
                .query_row([cutoff], |r| r.get(0))?)
        })?;
        if !due {
            return Ok(0);
        }
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM audit_log WHERE audit_id IN \
                 (SELECT audit_id FROM audit_log WHERE at < ?1 ORDER BY at LIMIT ?2)",
                params![cutoff, limit],
            )?)
        })
    }

    /// Reads audit rows newest first, before the cursor `before_id` (exclusive) when given.
    pub fn read_audit(
        &self,
        filter: &AuditFilter,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRow>, StoreError> {
        self.read(|c| {
            let mut sql = format!("SELECT {COLUMNS} FROM audit_log WHERE 1=1");
            let mut args: Vec<rusqlite::types::Value> = Vec::new();
            let outcome = filter.outcome.map(|o| o.as_str().to_owned());
            for (column, value) in [
                ("principal", &filter.principal),
                ("capability", &filter.capability),
                ("outcome", &outcome),
                ("task_id", &filter.task_id),
            ] {
                if let Some(v) = value {
                    args.push(v.clone().into());
                    sql.push_str(&format!(" AND {column} = ?{}", args.len()));
                }
            }
            if let Some(before) = before_id {
                args.push(before.into());
                sql.push_str(&format!(" AND audit_id < ?{}", args.len()));
            }
            sql.push_str(&format!(" ORDER BY audit_id DESC LIMIT {limit}"));
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
                Ok(AuditRow {
                    audit_id: r.get(0)?,
                    at: r.get(1)?,
                    surface: r.get(2)?,
                    principal: r.get(3)?,
                    role: r.get(4)?,
                    capability: r.get(5)?,
                    scope: r.get(6)?,
                    outcome: r.get(7)?,
                    error_code: r.get(8)?,
                    duration_us: r.get(9)?,
                    task_id: r.get(10)?,
                    plan_id: r.get(11)?,
                    client_name: r.get(12)?,
                    count: r.get(13)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
