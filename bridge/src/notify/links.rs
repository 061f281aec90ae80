//! Where a notification points: the board page of what it reports, and a request's single-use
//! action link, minted here (a random `abl_` token, a `lnk_` id) and stored by the store only as
//! the token's SHA-256.
//!
//! Links are minted when a fact is routed, one per target, not in the change's transaction: the
//! message that carries a link is written in the same transaction as the link's digest, so no
//! message is ever visible without its link, and the request itself needs no link to be
//! answered (the board and the MCP tools answer it without one).

use sha2::{Digest, Sha256};

use crate::ids::{hex, random_bytes};
use crate::store::facts::Fact;
use crate::store::outbox::NewActionLink;

/// The board page (a path; the sender puts the board's address in front) a fact's
/// notification links to.
pub fn board_page(fact: &Fact) -> String {
    match fact {
        // A worktree task's work waits on its branch: the link goes to the branch's card on the
        // task page (its diff and the merge and discard forms).
        Fact::TaskEnded(ended) => {
            let anchor = if super::format::branch_waits(ended) { "#branch" } else { "" };
            format!("/tasks/{}{anchor}", ended.task.task_id)
        }
        Fact::RequestOpened(opened) => format!("/tasks/{}", opened.task.task_id),
        Fact::PlanAwaitsApproval(plan) => format!("/plans/{}", plan.plan_id),
        Fact::GuardKept(_) => "/workdirs".into(),
    }
}

/// The board page of a test notification.
pub const TEST_PAGE: &str = "/notifications";

/// A new action link that answers `request_id` of `task_id` until `expires_at`.
pub fn mint(task_id: &str, request_id: &str, expires_at: i64) -> NewActionLink {
    let token = format!("abl_{}", hex(&random_bytes::<32>()));
    NewActionLink {
        link_id: format!("lnk_{}", hex(&random_bytes::<8>())),
        token_sha256: token_digest(&token),
        task_id: task_id.to_owned(),
        request_id: request_id.to_owned(),
        expires_at,
        path: format!("/a/{token}"),
    }
}

/// The SHA-256 (hex) an action link's token is stored and looked up as.
pub fn token_digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_link_carries_its_token_only_in_its_path() {
        let a = mint("agt_1", "req_1", 50_000);
        let b = mint("agt_1", "req_1", 50_000);
        assert_ne!(a.path, b.path, "one token per link");
        let token = a.path.strip_prefix("/a/").expect("a board path");
        assert!(token.starts_with("abl_") && token.len() == 68, "{token}");
        assert_eq!(a.token_sha256, token_digest(token));
        assert!(!a.token_sha256.contains(&token[4..]), "only the digest is kept apart from the path");
        assert!(a.link_id.starts_with("lnk_"));
        assert_eq!((a.task_id.as_str(), a.request_id.as_str(), a.expires_at), ("agt_1", "req_1", 50_000));
    }
}
