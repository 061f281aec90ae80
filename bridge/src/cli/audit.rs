//! `agent-bridge audit`: the audit log, newest first, through `admin_read_audit_log` on surface
//! `cli`. A coalesced row (calls that failed authentication, one row per source and minute)
//! shows how many calls it stands for in `CALLS`.

use clap::Args;
use serde_json::{Value, json};

use super::call::{Failure, call, listing, show};
use bridge_proto::client::Client;

/// `agent-bridge audit …`
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only rows of this principal.
    #[arg(long)]
    principal: Option<String>,
    /// Only rows of this capability (`*` for the names no tool has).
    #[arg(long)]
    capability: Option<String>,
    /// Only this outcome: ok, denied, invalid or error.
    #[arg(long)]
    outcome: Option<String>,
    /// Only rows about this task.
    #[arg(long)]
    task: Option<String>,
    /// Rows older than this audit id (the cursor the previous page printed).
    #[arg(long)]
    before: Option<u64>,
    /// At most this many rows (1 to 500).
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

/// Prints one page of the audit log.
pub(super) async fn audit(client: &Client, a: AuditArgs, json_mode: bool) -> Result<(), Failure> {
    let args = json!({
        "principal": a.principal, "capability": a.capability, "outcome": a.outcome, "task_id": a.task,
        "before_audit_id": a.before, "limit": a.limit,
    });
    let v = call(client, "admin_read_audit_log", args).await?;
    show(json_mode, &v, render);
    Ok(())
}

fn render(v: &Value) -> String {
    let mut text = listing(
        &v["rows"],
        &[
            ("ID", "/audit_id"),
            ("AT", "/at"),
            ("SURFACE", "/surface"),
            ("PRINCIPAL", "/principal"),
            ("CAPABILITY", "/capability"),
            ("OUTCOME", "/outcome"),
            ("CODE", "/error_code"),
            ("CALLS", "/count"),
            ("TASK", "/task_id"),
            ("CLIENT", "/client"),
        ],
    );
    if let Some(next) = v["next_before_audit_id"].as_i64() {
        text.push_str(&format!("\nolder rows: --before {next}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coalesced_row_shows_its_count() {
        let v = json!({ "rows": [
            { "audit_id": 9, "at": "t", "surface": "mcp", "principal": null, "capability": "*", "outcome": "denied",
              "error_code": "UNAUTHENTICATED", "count": 2000, "task_id": null, "client": null },
        ], "next_before_audit_id": 9 });
        let text = render(&v);
        let row = text.lines().nth(1).expect("a row");
        assert!(row.contains("2000") && row.contains("UNAUTHENTICATED"), "{text}");
        assert!(text.lines().next().expect("header").contains("CALLS"), "{text}");
        assert!(text.ends_with("--before 9"), "{text}");
    }
}
