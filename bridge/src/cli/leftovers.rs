//! `doctor`'s account of task sandboxes that outlived their bridge: which are left now, by
//! task, and what the bridge's start stopped of them — asked of the bridge while it runs, read
//! from `/proc` and the store (read-only) while it is down.

use serde_json::{Value, json};

use crate::config::BridgeConfig;
use crate::provider::leftovers::{self, Scope};
use crate::store::Store;
use crate::store::audit::AuditFilter;
use crate::tasks::RECONCILE_CAPABILITY;

/// What `doctor` shows: the leftovers now (by task) and the stops the bridge made.
pub struct Account {
    /// `[{task_id, processes, found_by}]`.
    pub leftovers: Value,
    /// The running bridge's start (`{at, sandboxes: [...]}`), or the stops recorded in the
    /// audit log (`[{at, task_id, outcome}]`) while it is down.
    pub reconciled: Value,
}

/// From the running bridge's `admin_workdir_status`.
pub fn from_status(status: &Value) -> Account {
    Account { leftovers: status["leftover_sandboxes"].clone(), reconciled: status["reconciled_at_start"].clone() }
}

/// While the bridge is down: the sandbox processes of the store's tasks and the namespaces and
/// cgroups its guards recorded, and the last stops of the audit log.
pub fn from_files(config: &BridgeConfig) -> Result<Account, String> {
    if !config.state_dir.join(crate::store::DB_FILE).exists() {
        return Ok(Account { leftovers: json!([]), reconciled: json!([]) });
    }
    let store = Store::open_read_only(&config.state_dir).map_err(|e| e.to_string())?;
    let proofs: Vec<_> = store
        .list_guards()
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter_map(|g| Some((g.task_id.clone(), crate::tasks::recovery::parse_proof(g.proof_json.as_deref()?)?)))
        .collect();
    let is_ours = |task: &str| store.get_task(task).ok().flatten().is_some();
    let found = leftovers::find(&Scope {
        is_ours: &is_ours,
        active: &[],
        proofs: &proofs,
        // The doctor's own cgroup is not the bridge's: the groups the guards recorded count.
        cgroups: None,
        state_dir: &config.state_dir,
        started_before: None,
    });
    let filter = AuditFilter { capability: Some(RECONCILE_CAPABILITY.to_owned()), ..Default::default() };
    let stops = store.read_audit(&filter, None, 10).map_err(|e| e.to_string())?;
    let stops: Vec<Value> = stops
        .iter()
        .map(|r| json!({ "at": crate::clock::rfc3339(r.at), "task_id": r.task_id, "outcome": r.outcome.as_str() }))
        .collect();
    Ok(Account { leftovers: found.iter().map(leftovers::Leftover::to_json).collect(), reconciled: Value::Array(stops) })
}

/// The checks to show: `(name, level, detail)`.
pub fn checks(account: &Account, live: bool) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    let left = account.leftovers.as_array().cloned().unwrap_or_default();
    for l in &left {
        let (n, how) = (l["processes"].as_array().map_or(0, Vec::len), list(&l["found_by"]));
        let next = if live { "a restart of the bridge stops them" } else { "the next start of the bridge stops them" };
        out.push((
            "leftover sandbox",
            "warn",
            format!(
                "task {}: {n} process(es) of its sandbox outlived their bridge (found by {how}): {next}",
                l["task_id"]
            ),
        ));
    }
    if left.is_empty() {
        out.push(("leftover sandboxes", "ok", "no task sandbox outlived its bridge".to_owned()));
    }
    match &account.reconciled {
        Value::Object(start) => {
            let done = start["sandboxes"].as_array().cloned().unwrap_or_default();
            for s in &done {
                let (level, what) = if s["stopped"] == true { ("ok", "stopped") } else { ("fail", "could not stop") };
                out.push((
                    "reconciliation",
                    level,
                    format!(
                        "at the start ({}) the bridge {what} {} process(es) of task {}'s sandbox (found by {})",
                        start["at"].as_str().unwrap_or("?"),
                        s["processes"],
                        s["task_id"],
                        list(&s["found_by"])
                    ),
                ));
            }
            if done.is_empty() {
                out.push((
                    "reconciliation",
                    "ok",
                    "the bridge's start found no sandbox left by a previous bridge".into(),
                ));
            }
        }
        Value::Array(stops) if !stops.is_empty() => {
            let shown: Vec<String> = stops
                .iter()
                .map(|s| format!("{} task {} {}", s["at"].as_str().unwrap_or("?"), s["task_id"], s["outcome"]))
                .collect();
            out.push((
                "reconciliation",
                "ok",
                format!("the bridge's last stops of leftover sandboxes: {}", shown.join("; ")),
            ));
        }
        _ => {}
    }
    out
}

fn list(v: &Value) -> String {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()
}
