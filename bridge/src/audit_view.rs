//! The audit log as the administrator reads it: one page of rows, newest first, filtered,
//! after a cursor, each row in its wire shape. Reading only; `registry::audit` is the writer
//! (flush it first to see the rows of calls just made).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::Role;
use crate::error::ToolError;
use crate::model::AuditOutcome;
use crate::store::Store;
use crate::store::audit::{AuditFilter, AuditRow};

/// Which rows to read.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only rows of this principal.
    pub principal: Option<String>,
    /// Only rows of this capability.
    pub capability: Option<String>,
    /// Only rows with this outcome.
    pub outcome: Option<AuditOutcome>,
    /// Only rows about this task.
    pub task_id: Option<String>,
    /// Page cursor: rows older than this id.
    pub before_audit_id: Option<u64>,
    /// At most this many rows.
    pub limit: u32,
}

/// One page: `{"rows": [...], "next_before_audit_id": id | null}`; the cursor is set when the
/// page is full, so a caller pages until it is null.
pub async fn page(store: &Arc<Store>, query: AuditQuery) -> Result<Value, ToolError> {
    let filter = AuditFilter {
        principal: query.principal,
        capability: query.capability,
        outcome: query.outcome,
        task_id: query.task_id,
    };
    let before = query.before_audit_id.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
    let limit = query.limit;
    let rows = store.call(move |s| s.read_audit(&filter, before, limit)).await?;
    let next = if rows.len() as u32 == limit { rows.last().map(|r| r.audit_id) } else { None };
    let rows: Vec<Value> = rows.iter().map(row_json).collect();
    Ok(json!({ "rows": rows, "next_before_audit_id": next }))
}

/// A row in its wire shape.
fn row_json(r: &AuditRow) -> Value {
    json!({
        "audit_id": r.audit_id,
        "at": crate::clock::rfc3339(r.at),
        "surface": r.surface,
        "principal": r.principal,
        "role": r.role.map(Role::as_str),
        "capability": r.capability,
        "scope": r.scope,
        "outcome": r.outcome.as_str(),
        "error_code": r.error_code,
        "duration_us": r.duration_us,
        "task_id": r.task_id,
        "plan_id": r.plan_id,
        "client": r.client_name,
        "count": r.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at: i64, principal: &str, outcome: AuditOutcome) -> AuditRow {
        AuditRow {
            audit_id: 0,
            at,
            surface: "cli".into(),
            principal: Some(principal.into()),
            role: Some(Role::Admin),
            capability: "whoami".into(),
            scope: Some("read".into()),
            outcome,
            error_code: None,
            duration_us: 7,
            task_id: None,
            plan_id: None,
            client_name: Some("test/1".into()),
            count: 1,
        }
    }

    fn query(limit: u32) -> AuditQuery {
        AuditQuery { limit, ..AuditQuery::default() }
    }

    #[tokio::test]
    async fn pages_follow_the_cursor_until_it_is_null() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("state")).unwrap());
        let rows: Vec<AuditRow> = (1..=5).map(|at| row(at * 1000, "alice", AuditOutcome::Ok)).collect();
        store.insert_audit(&rows).unwrap();
        let mut seen = Vec::new();
        let mut before = None;
        for _ in 0..4 {
            let page = page(&store, AuditQuery { before_audit_id: before, ..query(2) }).await.unwrap();
            seen.extend(page["rows"].as_array().unwrap().iter().map(|r| r["at"].as_str().unwrap().to_owned()));
            match page["next_before_audit_id"].as_u64() {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        let expected: Vec<String> = (1..=5).rev().map(|s| crate::clock::rfc3339(s * 1000)).collect();
        assert_eq!(seen, expected, "newest first, every row once");
        // A full last page still has a cursor; the page after it is empty and has none.
        let full = page(&store, query(5)).await.unwrap();
        let next = full["next_before_audit_id"].as_u64().expect("a full page has a cursor");
        let after = page(&store, AuditQuery { before_audit_id: Some(next), ..query(5) }).await.unwrap();
        assert_eq!(after, json!({ "rows": [], "next_before_audit_id": null }));
    }

    #[tokio::test]
    async fn filters_and_the_row_shape() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("state")).unwrap());
        store
            .insert_audit(&[
                row(1000, "alice", AuditOutcome::Ok),
                row(2000, "bob", AuditOutcome::Denied),
                row(3000, "alice", AuditOutcome::Error),
            ])
            .unwrap();
        let alice = page(&store, AuditQuery { principal: Some("alice".into()), ..query(10) }).await.unwrap();
        assert_eq!(alice["rows"].as_array().unwrap().len(), 2);
        let denied = page(&store, AuditQuery { outcome: Some(AuditOutcome::Denied), ..query(10) }).await.unwrap();
        let rows = denied["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        let mut one = rows[0].clone();
        assert!(one["audit_id"].as_i64().is_some_and(|id| id > 0));
        one["audit_id"] = json!(0);
        assert_eq!(
            one,
            json!({
                "audit_id": 0, "at": crate::clock::rfc3339(2000), "surface": "cli", "principal": "bob",
                "role": "admin", "capability": "whoami", "scope": "read", "outcome": "denied",
                "error_code": null, "duration_us": 7, "task_id": null, "plan_id": null,
                "client": "test/1", "count": 1,
            })
        );
        assert_eq!(denied["next_before_audit_id"], Value::Null, "a page that is not full ends the log");
    }
}
