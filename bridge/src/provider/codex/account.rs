//! What a short-lived `codex app-server` can tell without inference: the handshake every
//! helper child starts with, and whether Codex is logged in where its configuration needs it.

use std::time::Duration;

use serde_json::{Value, json};

use super::rpc::{Rpc, RpcError};

/// `initialize` then `initialized`, as every client of the app-server starts.
pub(super) async fn initialize(rpc: &Rpc, bound: Duration) -> Result<(), RpcError> {
    let init = json!({
        "clientInfo": { "name": "agent_bridge", "title": "agent-bridge", "version": env!("CARGO_PKG_VERSION") },
        "capabilities": { "experimentalApi": true },
    });
    rpc.call("initialize", init, bound).await?;
    rpc.notify("initialized", None);
    Ok(())
}

/// Why Codex is not logged in, from `account/read` (no token refresh, no inference): `Some`
/// when its configured model provider needs an OpenAI login (`requiresOpenaiAuth`) and it has
/// no account; `None` when it has one or needs none (a provider with its own key).
pub(super) async fn logged_out(rpc: &Rpc) -> Result<Option<String>, RpcError> {
    let bound = Duration::from_secs(10);
    initialize(rpc, bound).await?;
    let answer = rpc.call("account/read", json!({ "refreshToken": false }), bound).await?;
    Ok(why_logged_out(&answer))
}

/// The decision of [`logged_out`] on an `account/read` answer.
pub fn why_logged_out(answer: &Value) -> Option<String> {
    let needs_login = answer.get("requiresOpenaiAuth").and_then(Value::as_bool).unwrap_or(false);
    let has_account = answer.get("account").is_some_and(|a| !a.is_null());
    (needs_login && !has_account).then(|| {
        "not logged in: run `codex login` as the bridge's user (or configure a model provider with its own key)"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three answers seen from codex 0.171.0: no login with the default provider, a custom
    /// provider with `env_key`, and a ChatGPT login.
    #[test]
    fn only_a_provider_that_needs_a_login_and_has_none_is_logged_out() {
        let default = json!({"account": null, "userId": null, "requiresOpenaiAuth": true});
        assert!(why_logged_out(&default).is_some_and(|w| w.contains("codex login")));
        let own_key = json!({"account": null, "userId": null, "requiresOpenaiAuth": false});
        assert_eq!(why_logged_out(&own_key), None);
        let chatgpt = json!({"account": {"type": "chatgpt", "email": "a@b"}, "requiresOpenaiAuth": true});
        assert_eq!(why_logged_out(&chatgpt), None);
        assert_eq!(why_logged_out(&json!({})), None, "an answer it cannot read is not a refusal");
    }
}
