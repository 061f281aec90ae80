//! Calls made with a notification's action link (`/a/<token>` on the board): the link is the
//! credential, and it buys exactly one thing — showing and answering the one request it is
//! bound to, once, until that request expires.
//!
//! [`Registry::call_with_link`] goes through the same path as every other call (invariant 2):
//! the link is looked up by its token's SHA-256 (off the reactor), refused when unknown, used
//! or expired; only `get_agent_task` (of the link's task) and `respond_agent_approval` /
//! `answer_agent_question` (of the link's task and request) are allowed; then the caller is
//! the principal `link:<link_id>` (admin, so it sees a task someone else owns) and the call is
//! authorized, schema-validated, run and audited on surface `board` like any other, its
//! refusals included (named by the link when it is known). A successful answer marks the link
//! used.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use super::Registry;
use super::auth::AuthFailure;
use crate::config::Role;
use crate::error::{ToolError, code};
use crate::model::Principal;
use crate::notify::links::token_digest;
use crate::store::outbox::ActionLinkRow;
use bridge_proto::methods::{CallParams, ClientInfo, Surface};

/// The client name action-link calls are audited with.
pub const CLIENT: &str = "action-link";

/// The capabilities a link may call: (name, whether it answers the request).
const ALLOWED: &[(&str, bool)] =
    &[("get_agent_task", false), ("respond_agent_approval", true), ("answer_agent_question", true)];

/// What a call made with a link answered, with what the link is bound to.
#[derive(Debug, Clone)]
pub struct LinkAnswer {
    /// `lnk_…`.
    pub link_id: String,
    /// The link's task.
    pub task_id: String,
    /// The one request it answers.
    pub request_id: String,
    /// Unix ms after which the link is refused.
    pub expires_at: i64,
    /// The capability's answer.
    pub value: Value,
}

/// Whether `token` has the shape of an action link's token (`abl_` and 64 hex digits).
fn well_formed(token: &str) -> bool {
    token.strip_prefix("abl_").is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The audit principal of a link.
pub fn principal_name(link_id: &str) -> String {
    format!("link:{link_id}")
}

/// Decides whether `link` (the row the token names, if any) may call `name` with `arguments`
/// at `now`; fills in the link's task (and request) where the arguments leave them out.
/// Pure: every rule of a link is here.
fn admit(
    link: Option<&ActionLinkRow>,
    name: &str,
    arguments: &mut Map<String, Value>,
    now: i64,
) -> Result<Principal, AuthFailure> {
    let Some(link) = link else {
        return Err(ToolError::new(code::UNAUTHENTICATED, "this action link is unknown").into());
    };
    let refused = |code: &'static str, why: &str| AuthFailure {
        error: ToolError::new(code, why.to_owned()),
        audit_code: None,
        principal: Some(principal_name(&link.link_id)),
    };
    if link.used_at.is_some() {
        return Err(refused(code::REQUEST_ALREADY_RESOLVED, "this action link was already used"));
    }
    if now >= link.expires_at {
        return Err(refused(code::REQUEST_STALE, "this action link has expired with its request"));
    }
    let Some(&(_, answers)) = ALLOWED.iter().find(|(n, _)| *n == name) else {
        return Err(refused(code::UNKNOWN_TOOL, "an action link only shows and answers its own request"));
    };
    let mut bind = |key: &str, bound: &str, code: &'static str, what: &str| match arguments.get(key) {
        None => {
            arguments.insert(key.to_owned(), Value::String(bound.to_owned()));
            Ok(())
        }
        Some(Value::String(given)) if given == bound => Ok(()),
        Some(_) => Err(refused(code, &format!("this action link is for another {what}"))),
    };
    bind("task_id", &link.task_id, code::AGENT_TASK_NOT_FOUND, "task")?;
    if answers {
        bind("request_id", &link.request_id, code::REQUEST_NOT_FOUND, "request")?;
    }
    Ok(Principal {
        name: principal_name(&link.link_id),
        role: Role::Admin,
        workdirs: None,
        key_id: None,
        display: None,
    })
}

impl Registry {
    /// One call made with an action link's `token` (see the module documentation), on
    /// surface `board`, audited as `link:<link_id>`.
    pub async fn call_with_link(
        &self,
        token: &str,
        name: &str,
        mut arguments: Map<String, Value>,
    ) -> Result<LinkAnswer, ToolError> {
        let started = Instant::now();
        let services = &self.services;
        let now = services.clock.now_ms();
        let found = if well_formed(token) {
            let (store, token) = (Arc::clone(&services.store), token.to_owned());
            match store.call(move |s| s.find_action_link(&token_digest(&token))).await {
                Ok(found) => found,
                Err(e) => return Err(ToolError::internal("the action link cannot be read", e)),
            }
        } else {
            None
        };
        let resolved = admit(found.as_ref(), name, &mut arguments, now);
        let params = CallParams {
            credential: None,
            surface: Surface::Board,
            path: Default::default(),
            client: Some(ClientInfo { name: CLIENT.into(), version: None }),
            name: name.to_owned(),
            arguments,
        };
        let mut row = self.audit_row(&params);
        if let Some(link) = &found {
            // The row names the link's task, never one the caller put in the arguments.
            row.task_id = Some(link.task_id.clone());
        }
        let outcome = self.call_inner(params, resolved, &mut row).await;
        let answered = outcome.is_ok() && ALLOWED.iter().any(|(n, answers)| *n == name && *answers);
        let value = self.finish(row, outcome, None, started)?.into_value();
        let Some(link) = found else {
            return Err(ToolError::new(code::INTERNAL_ERROR, "an action link call succeeded without a link"));
        };
        if answered {
            let (store, id) = (Arc::clone(&services.store), link.link_id.clone());
            match store.call(move |s| s.use_action_link(&id, now)).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(link_id = link.link_id, "an action link was used twice at once"),
                Err(e) => tracing::error!(cause = %e, link_id = link.link_id, "cannot mark an action link used"),
            }
        }
        Ok(LinkAnswer {
            link_id: link.link_id,
            task_id: link.task_id,
            request_id: link.request_id,
            expires_at: link.expires_at,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn link(used_at: Option<i64>) -> ActionLinkRow {
        ActionLinkRow {
            link_id: "lnk_0011223344556677".into(),
            task_id: "agt_a".into(),
            request_id: "req_a".into(),
            expires_at: 10_000,
            used_at,
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        let Value::Object(map) = v else { panic!("an object") };
        map
    }

    #[test]
    fn a_link_calls_only_its_own_request_until_used_or_expired() {
        let live = link(None);
        let mut a = args(json!({ "full_request": true }));
        let p = admit(Some(&live), "get_agent_task", &mut a, 9_999).expect("its task");
        assert_eq!((p.name.as_str(), p.role, p.key_id), ("link:lnk_0011223344556677", Role::Admin, None));
        assert_eq!(a["task_id"], "agt_a", "the link's task is filled in");
        assert!(!a.contains_key("request_id"), "get_agent_task takes no request id");
        let mut a = args(json!({ "decision": "approve_once" }));
        admit(Some(&live), "respond_agent_approval", &mut a, 0).expect("its request");
        assert_eq!((a["task_id"].as_str(), a["request_id"].as_str()), (Some("agt_a"), Some("req_a")));

        let refused = |link: Option<&ActionLinkRow>, name: &str, a: Value, now: i64| {
            admit(link, name, &mut args(a), now).expect_err("refused")
        };
        let f = refused(None, "get_agent_task", json!({}), 0);
        assert_eq!((f.error.code, f.principal), (code::UNAUTHENTICATED, None));
        let cases = [
            (link(Some(5)), "get_agent_task", json!({}), 0, code::REQUEST_ALREADY_RESOLVED),
            (live.clone(), "get_agent_task", json!({}), 10_000, code::REQUEST_STALE),
            (live.clone(), "cancel_agent_task", json!({}), 0, code::UNKNOWN_TOOL),
            (live.clone(), "admin_list_tasks", json!({}), 0, code::UNKNOWN_TOOL),
            (live.clone(), "get_agent_task", json!({ "task_id": "agt_b" }), 0, code::AGENT_TASK_NOT_FOUND),
            (live.clone(), "get_agent_task", json!({ "task_id": 7 }), 0, code::AGENT_TASK_NOT_FOUND),
            (
                live.clone(),
                "answer_agent_question",
                json!({ "task_id": "agt_a", "request_id": "req_b" }),
                0,
                code::REQUEST_NOT_FOUND,
            ),
            (live.clone(), "respond_agent_approval", json!({ "task_id": "agt_b" }), 0, code::AGENT_TASK_NOT_FOUND),
        ];
        for (l, name, a, now, want) in cases {
            let f = refused(Some(&l), name, a.clone(), now);
            assert_eq!(f.error.code, want, "{name} {a} at {now}");
            assert_eq!(f.principal.as_deref(), Some("link:lnk_0011223344556677"), "a known link is named");
        }
    }

    #[test]
    fn only_well_formed_tokens_are_looked_up() {
        assert!(well_formed(&format!("abl_{}", "0a".repeat(32))));
        for bad in ["", "abl_", "abb_00", &format!("abl_{}", "0".repeat(63)), &format!("abl_{}", "g".repeat(64))] {
            assert!(!well_formed(bad), "{bad}");
        }
    }
}
