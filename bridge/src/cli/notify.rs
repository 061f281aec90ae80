//! `agent-bridge notify …`: the notification targets and their deliveries, and a test
//! notification to one target (socket calls on surface `cli` as the local operator).

use clap::Subcommand;
use serde_json::json;

use super::call::{Failure, call, listing, s, show};
use bridge_proto::client::Client;

/// `agent-bridge notify …`
#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send a test notification to target NN (one attempt) and say how it went.
    Test {
        /// The target's number, 01 to 08 (SERVERFS_NOTIFY_NN_URL).
        target: String,
    },
    /// Show the targets, their figures and the newest deliveries.
    List {
        /// At most this many deliveries.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// Parses `NN` (`1` to `8`, with or without a leading zero).
fn target_number(text: &str) -> Result<u8, Failure> {
    match text.parse::<u8>() {
        Ok(n) if (1..=crate::config::keys::NOTIFY_COUNT).contains(&n) && text.len() <= 2 => Ok(n),
        _ => Err(Failure::Usage(format!("{text:?} is not a target number: use 01 to 08"))),
    }
}

pub(super) async fn notify(client: &Client, command: NotifyCommand, json_mode: bool) -> Result<(), Failure> {
    match command {
        NotifyCommand::Test { target } => {
            let n = target_number(&target)?;
            let v = call(client, "admin_notify_test", json!({ "target": n })).await?;
            show(json_mode, &v, |v| {
                let status =
                    v["http_status"].as_u64().map(|c| format!("HTTP {c}")).unwrap_or_else(|| "no answer".into());
                if v["delivered"] == true {
                    format!(
                        "target {n:02} ({}): delivered, {status} in {} ms, id {}",
                        s(&v["kind"]),
                        s(&v["latency_ms"]),
                        s(&v["message_id"])
                    )
                } else {
                    format!(
                        "target {n:02} ({}): NOT delivered: {} ({status}, {} ms)",
                        s(&v["kind"]),
                        s(&v["error"]),
                        s(&v["latency_ms"])
                    )
                }
            });
            if v["delivered"] != true {
                return Err(Failure::Quiet);
            }
        }
        NotifyCommand::List { limit } => {
            let v = call(client, "admin_list_notifications", json!({ "limit": limit.clamp(1, 500) })).await?;
            show(json_mode, &v, |v| {
                let targets = listing(
                    &v["targets"],
                    &[
                        ("NN", "/target"),
                        ("KIND", "/kind"),
                        ("URL", "/url"),
                        ("DELIVERED", "/delivered"),
                        ("PENDING", "/pending"),
                        ("GIVEN UP", "/given_up"),
                        ("LAST OK", "/last_ok_at"),
                        ("FAILING SINCE", "/failing_since"),
                    ],
                );
                let deliveries = listing(
                    &v["deliveries"],
                    &[
                        ("MESSAGE", "/message_id"),
                        ("NN", "/target"),
                        ("EVENT", "/event"),
                        ("TASK", "/task_id"),
                        ("STATE", "/state"),
                        ("TRIES", "/attempts"),
                        ("LAST", "/last_status"),
                        ("ERROR", "/last_error"),
                    ],
                );
                format!("{targets}\n\n{deliveries}")
            });
        }
    }
    Ok(())
}
