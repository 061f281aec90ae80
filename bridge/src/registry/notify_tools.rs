//! The operator's notification capabilities (local surfaces only): the targets with their
//! recent deliveries, and a test notification to one target.

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{Annotations, Scope};
use super::shared::local;
use super::{CallCtx, Capability};

fn default_limit() -> u32 {
    50
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// At most this many recent deliveries.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 500))]
    limit: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TestArgs {
    /// The target's number (the NN of SERVERFS_NOTIFY_NN_URL).
    #[schemars(range(min = 1, max = 8))]
    target: u8,
}

/// The notification capabilities, in `tools/list` order.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            local(
                "admin_list_notifications",
                Scope::Read,
                "Lists the notification targets with their delivery figures, and the newest deliveries with their attempt count and last outcome.",
                Annotations::READ,
            ),
            |ctx: CallCtx, a: ListArgs| async move { ctx.services.notify.overview(a.limit).await },
        ),
        Capability::new(
            local(
                "admin_notify_test",
                Scope::Write,
                "Sends a test notification to one target (one attempt, no retry) and reports how it went.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: true },
            ),
            |ctx: CallCtx, a: TestArgs| async move { ctx.services.notify.test(a.target).await },
        ),
    ]
}
