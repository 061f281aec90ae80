//! The API-key capabilities, on the operator's own surfaces only: each parses its arguments
//! and calls the key service, which owns the naming rules and the key cache.

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{Annotations, Scope};
use super::shared::{NoArgs, local};
use super::{CallCtx, Capability};
use crate::config::Role;
use crate::keys::NewKey;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum RoleArg {
    Viewer,
    Operator,
    Admin,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateKeyArgs {
    /// A unique name; tasks created with the key belong to it.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// `viewer`, `operator` or `admin`.
    role: RoleArg,
    /// Restrict the key to these workdir aliases.
    workdirs: Option<Vec<String>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RevokeKeyArgs {
    /// The key's name or id.
    name: String,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Operator => Role::Operator,
            RoleArg::Admin => Role::Admin,
        }
    }
}

/// The API-key capabilities, in `tools/list` order.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            local(
                "admin_create_api_key",
                Scope::Write,
                "Creates an API key and shows its secret once.",
                Annotations { read_only: false, destructive: false, idempotent: false, open_world: false },
            ),
            |ctx: CallCtx, a: CreateKeyArgs| async move {
                ctx.services.keys.create(NewKey { name: a.name, role: a.role.into(), workdirs: a.workdirs }).await
            },
        ),
        Capability::new(
            local("admin_list_api_keys", Scope::Read, "Lists the API keys (never their secrets).", Annotations::READ),
            |ctx: CallCtx, _: NoArgs| async move { ctx.services.keys.list().await },
        ),
        Capability::new(
            local(
                "admin_revoke_api_key",
                Scope::Write,
                "Revokes an API key by name or id; repeating the call is safe.",
                Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
            ),
            |ctx: CallCtx, a: RevokeKeyArgs| async move { ctx.services.keys.revoke(&a.name).await },
        ),
    ]
}
