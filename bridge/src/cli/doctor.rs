//! `agent-bridge doctor`: what an operator needs to see before trusting the bridge — the
//! configuration's files and permissions, whether the bridge answers (or left a stale
//! socket), and each workdir's lease and recovery guard with what its proof of stop lacks.
//! It works with the bridge down too: then it reads the store read-only.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Exit, Target, output};
use crate::config::BridgeConfig;
use bridge_proto::client::Client;
use bridge_proto::methods::{self, CallParams, Surface};

struct Check {
    name: &'static str,
    level: &'static str,
    detail: String,
}

fn check(checks: &mut Vec<Check>, name: &'static str, level: &'static str, detail: impl Into<String>) {
    checks.push(Check { name, level, detail: detail.into() });
}

#[expect(clippy::disallowed_methods, reason = "a CLI command inspecting the state directory, off the daemon's reactor")]
fn dir_check(checks: &mut Vec<Check>, name: &'static str, dir: &Path) {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => match crate::files::check_private(dir, &meta, true) {
            Ok(()) => check(checks, name, "ok", format!("{} is private", dir.display())),
            Err(e) => check(checks, name, "fail", e),
        },
        Err(_) => {
            check(checks, name, "ok", format!("{} does not exist yet (created at the first start)", dir.display()))
        }
    }
}

/// Runs the doctor; exit 0 when nothing fails, 1 otherwise.
#[expect(clippy::disallowed_methods, reason = "a CLI command inspecting the state directory, off the daemon's reactor")]
pub fn run(target: Target, config: Result<BridgeConfig, String>) -> ExitCode {
    let config = match config {
        Ok(c) => c,
        Err(message) => {
            output::error(&message);
            return Exit::Config.into();
        }
    };
    let socket = target.socket.clone().unwrap_or_else(|| config.socket_path.clone());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            output::error(&format!("cannot start the async runtime: {e}"));
            return Exit::Failure.into();
        }
    };
    let mut checks = Vec::new();
    dir_check(&mut checks, "state directory", &config.state_dir);
    dir_check(&mut checks, "lock directory", &config.lock_dir);
    for file in ["bridge.sqlite3", "bridge.sqlite3-wal", "bridge.sqlite3-shm"] {
        let path = config.state_dir.join(file);
        if let Ok(meta) = std::fs::symlink_metadata(&path)
            && let Err(e) = crate::files::check_private(&path, &meta, false)
        {
            check(&mut checks, "database files", "fail", e);
        }
    }
    let client = Client::new(&socket, Duration::from_secs(10));
    let health = runtime.block_on(client.call(methods::BRIDGE_HEALTH, Map::new()));
    let live = match (&health, std::fs::symlink_metadata(&socket)) {
        (Ok(h), _) => {
            check(
                &mut checks,
                "bridge",
                "ok",
                format!(
                    "answers on {} (version {}, {} active task(s))",
                    socket.display(),
                    h["version"].as_str().unwrap_or("?"),
                    h["active_tasks"]
                ),
            );
            true
        }
        (Err(_), Ok(meta)) if meta.file_type().is_socket() => {
            check(
                &mut checks,
                "bridge",
                "warn",
                format!("{} is a stale socket: nothing answers; the next start replaces it", socket.display()),
            );
            false
        }
        (Err(_), Ok(_)) => {
            check(
                &mut checks,
                "bridge",
                "fail",
                format!("{} exists and is not a socket: the bridge cannot start until it is removed", socket.display()),
            );
            false
        }
        (Err(_), Err(_)) => {
            check(&mut checks, "bridge", "warn", format!("not running (no socket at {})", socket.display()));
            false
        }
    };
    let containment = match &health {
        Ok(h) => h["containment"].clone(),
        // The bridge is down: the same check, from this shell's environment.
        Err(_) => {
            match crate::provider::sandbox::Containment::detect(&config, &crate::provider::env::BaseEnv::capture()) {
                Ok(c) => c.operator_json(),
                Err(e) => json!({ "mode": config.sandbox.mode.as_str(), "contained": false, "refused": e }),
            }
        }
    };
    sandbox_check(&mut checks, &containment);
    match crate::provider::env::which("git", crate::provider::env::BaseEnv::capture().get("PATH")) {
        Some(git) => check(
            &mut checks,
            "change sets",
            "ok",
            format!("git at {}: writer tasks record what they changed", git.display()),
        ),
        None => check(
            &mut checks,
            "change sets",
            "warn",
            "git is not on PATH: writer tasks' change sets are not recorded (apt-get install git)",
        ),
    }
    let status = if live { runtime.block_on(status_from_bridge(&client)) } else { status_from_files(&config) };
    let branches = match &status {
        Ok(v) => v["agent_branches"].clone(),
        Err(_) => Value::Null,
    };
    let (workdirs, sandboxes) = match status {
        Ok(v) => {
            let sandboxes = match live {
                true => Ok(super::leftovers::from_status(&v)),
                false => super::leftovers::from_files(&config),
            };
            (v["workdirs"].clone(), sandboxes)
        }
        Err(e) => (Value::Array(Vec::new()), Err(e)),
    };
    let sandboxes = match sandboxes {
        Ok(account) => {
            for (name, level, detail) in super::leftovers::checks(&account, live) {
                check(&mut checks, name, level, detail);
            }
            json!({ "leftovers": account.leftovers, "reconciled": account.reconciled })
        }
        Err(e) => {
            check(&mut checks, "workdirs", "fail", e);
            Value::Null
        }
    };
    branch_checks(&mut checks, &workdirs, &branches);
    for w in workdirs.as_array().into_iter().flatten() {
        if w["state"] == "recovery_required" {
            let why = w["guard"]["proof"]["missing"].as_str().unwrap_or("the provider's stop is not proven").to_owned();
            check(
                &mut checks,
                "recovery guard",
                "fail",
                format!("workdir {} is closed for task {}: {why}", w["alias"], w["guard"]["task_id"]),
            );
        }
    }
    notify_check(&mut checks, &config, live.then_some(&client), &runtime);
    let healthy = !checks.iter().any(|c| c.level == "fail");
    if target.json {
        let checks: Vec<Value> =
            checks.iter().map(|c| json!({ "check": c.name, "level": c.level, "detail": c.detail })).collect();
        let report = json!({
            "healthy": healthy,
            "checks": checks,
            "workdirs": workdirs,
            "containment": containment,
            "view": view_of(&config),
            "sandboxes": sandboxes,
            "agent_branches": branches,
        });
        output::json(&report);
    } else {
        let mut lines: Vec<String> =
            checks.iter().map(|c| format!("[{:>4}] {}: {}", c.level, c.name, c.detail)).collect();
        lines.push(String::new());
        lines.push(output::listing(
            &workdirs,
            &[
                ("WORKDIR", "/alias"),
                ("MODE", "/agent_mode"),
                ("STATE", "/state"),
                ("LEASE HOLDER", "/lease_holder"),
                ("GUARD TASK", "/guard/task_id"),
            ],
        ));
        output::line(&lines.join("\n"));
    }
    if healthy { Exit::Ok.into() } else { Exit::Failure.into() }
}

/// What the operator added to tasks' views and network, from the configuration (paths shown:
/// this is the operator's own report).
fn view_of(config: &BridgeConfig) -> Value {
    let paths = |list: &[std::path::PathBuf]| list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
    json!({
        "read": paths(&config.sandbox.read),
        "write": paths(&config.sandbox.write),
        "egress": { "mode": config.sandbox.egress.as_str(), "allowed": config.sandbox.egress_allow },
        "workdirs": config.workdirs.iter().map(|w| json!({
            "alias": w.alias,
            "read": paths(&w.sandbox_read),
            "write": paths(&w.sandbox_write),
            "egress_allowed": w.egress_allow,
        })).collect::<Vec<_>>(),
    })
}

/// What tasks run under: contained (ok), not contained (a warning; a failure when the mode is
/// `required`, since every task is then refused).
fn sandbox_check(checks: &mut Vec<Check>, containment: &Value) {
    let mode = containment["mode"].as_str().unwrap_or("?");
    let detail = containment["detail"].as_str().or(containment["refused"].as_str()).unwrap_or("no detail");
    let cgroup = if containment["cgroup"] == true { ", each in its own cgroup" } else { "" };
    if containment["contained"] == true && containment["seccomp"] != true {
        let why = containment["seccomp_detail"].as_str().unwrap_or("no detail");
        let level = if mode == "required" { "fail" } else { "warn" };
        check(
            checks,
            "sandbox",
            level,
            format!(
                "contained{cgroup}, but without the seccomp filter that keeps tasks from typing into a terminal: {why}"
            ),
        );
    } else if containment["contained"] == true {
        check(
            checks,
            "sandbox",
            "ok",
            format!(
                "contained: tasks run in the bubblewrap sandbox{cgroup}, in a session of their own, under a seccomp filter, with network {} (mode {mode})",
                match containment["egress"]["mode"].as_str() {
                    Some("proxy") => "through the egress proxy only",
                    Some("none") => "none",
                    _ => "shared with this machine (SERVERFS_AGENT_EGRESS=host)",
                }
            ),
        );
    } else if mode == "required" || containment["refused"].is_string() {
        check(checks, "sandbox", "fail", format!("not contained, and mode {mode} refuses every task: {detail}"));
    } else {
        check(
            checks,
            "sandbox",
            "warn",
            format!("not contained: tasks can reach the bridge's files and socket as your user ({detail})"),
        );
    }
}

async fn local_call(client: &Client, name: &str, arguments: Map<String, Value>) -> Result<Value, String> {
    let params = CallParams {
        credential: None,
        surface: Surface::Cli,
        path: Default::default(),
        client: None,
        name: name.into(),
        arguments,
    };
    let Ok(Value::Object(params)) = serde_json::to_value(params) else { return Err("bad parameters".into()) };
    client.call(methods::CAPABILITIES_CALL, params).await.map_err(|e| e.to_string())
}

async fn status_from_bridge(client: &Client) -> Result<Value, String> {
    local_call(client, "admin_workdir_status", Map::new()).await
}

/// A target that failed since its last delivery: (slot, failing since, pending rows, for an hour).
type Failing = (u8, Option<String>, i64, bool);

/// The notification targets: a warning for each one whose deliveries have failed for an hour
/// (from the bridge, or from the store while it is down).
fn notify_check(
    checks: &mut Vec<Check>,
    config: &BridgeConfig,
    client: Option<&Client>,
    runtime: &tokio::runtime::Runtime,
) {
    if config.notify.targets.is_empty() {
        return;
    }
    let now = crate::clock::Clock::System.now_ms();
    // (target, failing since, pending) per target that has failed since its last delivery.
    let failing: Result<Vec<Failing>, String> = match client {
        Some(client) => runtime
            .block_on(local_call(client, "admin_list_notifications", Map::from_iter([("limit".into(), json!(1))])))
            .map(|v| {
                v["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        let slot = t["target"].as_u64().unwrap_or(0) as u8;
                        (
                            slot,
                            t["failing_since"].as_str().map(str::to_owned),
                            t["pending"].as_i64().unwrap_or(0),
                            t["failing_for_an_hour"] == true,
                        )
                    })
                    .collect()
            }),
        None if !config.state_dir.join(crate::store::DB_FILE).exists() => Ok(Vec::new()),
        None => crate::store::Store::open_read_only(&config.state_dir)
            .and_then(|s| s.notification_stats())
            .map(|stats| {
                stats
                    .into_iter()
                    .filter(|s| s.pending > 0 || s.given_up > 0)
                    .map(|s| {
                        let long = s.failing_for(crate::notify::FAILING_WARN_MS, now);
                        (s.target, s.failing_since.map(crate::clock::rfc3339), s.pending, long)
                    })
                    .collect()
            })
            .map_err(|e| e.to_string()),
    };
    match failing {
        Err(e) => check(checks, "notifications", "warn", format!("cannot read the deliveries: {e}")),
        Ok(list) => {
            let mut warned = false;
            for (slot, since, pending, long) in list {
                if !long {
                    continue;
                }
                warned = true;
                let target = config.notify.targets.iter().find(|t| t.slot == slot);
                let what = target.map_or_else(String::new, |t| {
                    format!(" ({} to {})", t.kind.as_str(), crate::config::notify::redacted_url(&t.url))
                });
                check(
                    checks,
                    "notifications",
                    "warn",
                    format!(
                        "target {slot:02}{what} has failed since {}; {pending} notification(s) wait: `agent-bridge notify test {slot:02}`",
                        since.unwrap_or_default()
                    ),
                );
            }
            if !warned {
                let n = config.notify.targets.len();
                check(checks, "notifications", "ok", format!("{n} target(s), none failing for an hour"));
            }
        }
    }
}

/// The worktree branches: a branch whose task is gone but whose stop is not proven is closed
/// (a failure, as for a workdir); every branch neither merged nor discarded is listed with
/// its size and how to hand it back.
fn branch_checks(checks: &mut Vec<Check>, workdirs: &Value, branches: &Value) {
    for w in workdirs.as_array().into_iter().flatten() {
        for g in w["branch_guards"].as_array().into_iter().flatten() {
            if g["running"] != true && g["proof"]["proven_stopped"] != true {
                let why = g["proof"]["missing"].as_str().unwrap_or("the provider's stop is not proven");
                check(
                    checks,
                    "recovery guard",
                    "fail",
                    format!(
                        "branch {} of workdir {} is closed for task {}: {why}",
                        g["branch"], w["alias"], g["task_id"]
                    ),
                );
            }
        }
    }
    for b in branches.as_array().into_iter().flatten() {
        let z = &b["size"];
        let size = match z["commits"].as_u64() {
            Some(commits) => format!(
                "{commits} commit(s), {} file(s) +{} -{}",
                z["files_changed"], z["lines_added"], z["lines_removed"]
            ),
            None => "size unknown".to_owned(),
        };
        let (level, what) = match b["state"].as_str() {
            Some("kept") => ("warn", format!("its worktree is kept ({})", b["reason"].as_str().unwrap_or("?"))),
            _ => ("ok", "neither merged nor discarded".to_owned()),
        };
        check(
            checks,
            "agent branch",
            level,
            format!(
                "{} of workdir {} (task {}): {size}, {what}; `agent-bridge tasks merge {id}` or `agent-bridge tasks discard {id}`",
                b["branch"].as_str().unwrap_or("?"),
                b["workdir"].as_str().unwrap_or("?"),
                b["task_id"].as_str().unwrap_or("?"),
                id = b["task_id"].as_str().unwrap_or("?"),
            ),
        );
    }
}

/// The same view, from the files, while the bridge is down (no lease can be held then, but a
/// crashed bridge's providers may still run).
fn status_from_files(config: &BridgeConfig) -> Result<Value, String> {
    if !config.state_dir.join(crate::store::DB_FILE).exists() {
        let free = |w: &crate::config::Workdir| json!({ "alias": w.alias, "agent_mode": w.agent_mode.as_str(), "state": "free", "guard": null });
        return Ok(json!({ "workdirs": config.workdirs.iter().map(free).collect::<Vec<_>>() }));
    }
    let store = crate::store::Store::open_read_only(&config.state_dir).map_err(|e| e.to_string())?;
    let guards = store.list_guards().map_err(|e| e.to_string())?;
    let branches = store.agent_branches().map_err(|e| e.to_string())?;
    Ok(json!({
        "agent_branches": branches.iter().map(crate::tasks::task_view::branch_view).collect::<Vec<_>>(),
        "workdirs": Value::Array(
        config
            .workdirs
            .iter()
            .map(|w| {
                let guard = guards.iter().find(|g| g.workdir_alias == w.alias).map(|g| {
                    let status = store.get_task(&g.task_id).ok().flatten().map(|t| t.status.as_str());
                    json!({ "task_id": g.task_id, "runtime": g.runtime, "task_status": status, "proof": crate::tasks::recovery::guard_proof(g) })
                });
                let state = match &guard {
                    Some(g) if g["proof"]["proven_stopped"] != true => "recovery_required",
                    Some(_) => "guard_clearable",
                    None => "free",
                };
                json!({ "alias": w.alias, "agent_mode": w.agent_mode.as_str(), "state": state, "lease_holder": null, "guard": guard })
            })
            .collect(),
    ) }))
}
