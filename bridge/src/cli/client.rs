//! The operator's client commands: each becomes one `capabilities.call` on surface `cli`
//! (or `bridge.health`), so the CLI has exactly the rights and audit trail of every surface.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::call::{Failure, call, listing, s, show};
pub use super::tasks::TasksCommand;
use super::{Exit, Target, output};
use bridge_proto::client::{CallError, Client};
use bridge_proto::methods;

/// `agent-bridge keys …`
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key; its secret is printed once, as the only line on stdout.
    Create {
        /// A unique name (becomes the owner of the key's tasks).
        #[arg(long)]
        name: String,
        /// viewer, operator or admin.
        #[arg(long)]
        role: String,
        /// Restrict the key to this workdir (repeatable).
        #[arg(long = "workdir")]
        workdirs: Vec<String>,
    },
    /// List keys (never their secrets).
    List,
    /// Revoke a key by name or id.
    Revoke {
        /// The key's name or id.
        name: String,
    },
}

/// `agent-bridge guards …`
#[derive(Debug, Subcommand)]
pub enum GuardsCommand {
    /// Show every workdir's lease and guard.
    List,
    /// Remove a workdir's guard without proof, after checking by hand that no process of its
    /// task runs (look for `AGENT_BRIDGE_TASK=<task id>` in /proc/*/environ). Audited.
    Clear {
        /// The workdir alias.
        workdir: String,
        /// Required: you take responsibility for the missing proof.
        #[arg(long)]
        force: bool,
    },
}

/// What to run.
#[derive(Debug)]
pub enum Action {
    /// Recovery guards.
    Guards(GuardsCommand),
    /// Key management.
    Keys(KeysCommand),
    /// Task commands.
    Tasks(TasksCommand),
    /// Plans.
    Plans(super::plans::PlansCommand),
    /// The board's login tokens.
    Board(super::plans::BoardCommand),
    /// Liveness.
    Health,
    /// The audit log.
    Audit(super::audit::AuditArgs),
    /// Notifications.
    Notify(super::notify::NotifyCommand),
}

/// Runs a client command against the bridge.
pub fn run(target: Target, action: Action) -> ExitCode {
    let socket = match socket_path(&target) {
        Ok(p) => p,
        Err(message) => {
            output::error(&message);
            return Exit::Config.into();
        }
    };
    let client = Client::new(socket, Duration::from_secs(60));
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            output::error(&format!("cannot start the async runtime: {e}"));
            return Exit::Failure.into();
        }
    };
    match runtime.block_on(execute(&client, action, target.json)) {
        Ok(()) => Exit::Ok.into(),
        Err(Failure::Usage(message)) => {
            output::error(&message);
            Exit::Config.into()
        }
        Err(Failure::Quiet) => Exit::Failure.into(),
        Err(Failure::Call(e)) => {
            output::error(&format!("{}: {}", e.code(), strip_code(&e)));
            match e {
                CallError::Unavailable(_) => Exit::Unavailable.into(),
                _ => Exit::Failure.into(),
            }
        }
    }
}

fn strip_code(e: &CallError) -> String {
    match e {
        CallError::Remote { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn socket_path(target: &Target) -> Result<PathBuf, String> {
    if let Some(socket) = &target.socket {
        return Ok(socket.clone());
    }
    if let Some(config) = &target.config {
        return crate::config::load_json(config).map(|c| c.socket_path).map_err(|e| e.to_string());
    }
    if let Some(env_file) = &target.env_file {
        return crate::config::env::from_env_file(env_file).map(|r| r.config.socket_path).map_err(|r| r.to_string());
    }
    crate::config::default_socket_path().map_err(|r| r.to_string())
}

async fn execute(client: &Client, action: Action, json_mode: bool) -> Result<(), Failure> {
    match action {
        Action::Health => {
            let v = client.call(methods::BRIDGE_HEALTH, Map::new()).await?;
            show(json_mode, &v, |v| {
                format!("ok: agent-bridge {} with {} active task(s)", s(&v["version"]), s(&v["active_tasks"]))
            });
        }
        Action::Keys(KeysCommand::Create { name, role, workdirs }) => {
            let workdirs = if workdirs.is_empty() { Value::Null } else { json!(workdirs) };
            let v = call(client, "admin_create_api_key", json!({ "name": name, "role": role, "workdirs": workdirs }))
                .await?;
            show(json_mode, &v, |v| s(&v["secret"]));
        }
        Action::Keys(KeysCommand::List) => {
            let v = call(client, "admin_list_api_keys", json!({})).await?;
            show(json_mode, &v, |v| {
                listing(
                    &v["keys"],
                    &[
                        ("NAME", "/name"),
                        ("ROLE", "/role"),
                        ("ID", "/key_id"),
                        ("WORKDIRS", "/workdirs"),
                        ("LAST USED", "/last_used_at"),
                        ("REVOKED", "/revoked_at"),
                    ],
                )
            });
        }
        Action::Keys(KeysCommand::Revoke { name }) => {
            let v = call(client, "admin_revoke_api_key", json!({ "name": name })).await?;
            show(json_mode, &v, |v| format!("revoked {} ({})", s(&v["name"]), s(&v["key_id"])));
        }
        Action::Tasks(command) => super::tasks::tasks(client, command, json_mode).await?,
        Action::Audit(args) => super::audit::audit(client, args, json_mode).await?,
        Action::Plans(command) => super::plans::plans(client, command, json_mode).await?,
        Action::Board(command) => super::plans::board(client, command, json_mode).await?,
        Action::Notify(command) => super::notify::notify(client, command, json_mode).await?,
        Action::Guards(GuardsCommand::List) => {
            let v = call(client, "admin_workdir_status", json!({})).await?;
            show(json_mode, &v, |v| {
                // A running task's own guard lacks no proof: its stop is not due yet.
                let mut rows = v["workdirs"].clone();
                for w in rows.as_array_mut().into_iter().flatten() {
                    if w["guard"]["running"] == true {
                        w["guard"]["proof"]["missing"] = json!("- (its task runs)");
                    }
                }
                listing(
                    &rows,
                    &[
                        ("WORKDIR", "/alias"),
                        ("STATE", "/state"),
                        ("LEASE HOLDER", "/lease_holder"),
                        ("GUARD TASK", "/guard/task_id"),
                        ("MISSING PROOF", "/guard/proof/missing"),
                    ],
                )
            });
        }
        Action::Guards(GuardsCommand::Clear { workdir, force }) => {
            if !force {
                return Err(Failure::Usage(
                    "clearing a guard without proof needs --force (check first that no process of its task runs)"
                        .into(),
                ));
            }
            let v = call(client, "admin_clear_guard", json!({ "workdir": workdir, "force": true })).await?;
            show(json_mode, &v, |v| {
                if v["cleared"] == true {
                    format!("cleared the guard of {} (task {})", s(&v["workdir"]), s(&v["task_id"]))
                } else {
                    format!("{}: {}", s(&v["workdir"]), s(&v["detail"]))
                }
            });
        }
    }
    Ok(())
}
