//! Authentication: from a surface, a peer and a credential to a [`Principal`].
//!
//! API keys are compared by their SHA-256 against every active key, in constant time and
//! without an early exit, so timing tells nothing about which key (if any) almost matched.
//! The local operator is the bridge's own uid on the CLI surface; the MCP surface never gets
//! that right, whoever the peer is, because the front usually runs as the same user. The
//! board surface is the board inside this process: it authenticates with a random credential
//! that never leaves the process, so no socket client can claim the board surface.
//!
//! On the `mcp` surface the front says which path a call came on: `/mcp` takes API keys (or
//! tunnel mode), `/mcp-oauth` takes only access tokens of the configured identity provider,
//! checked by [`crate::oauth::Verifier`]; neither path takes the other's credential.
//!
//! A person reaches the board with a board token (`agent-bridge board token`): this module
//! issues them (only their hash is stored), checks a presented one against every live token in
//! constant time, opens the board session it buys ([`Sessions`]) and, when the tokens are
//! revoked, ends every session with them. A one-time login link's token (`board token --once`)
//! is kept in memory only, like the sessions: it opens one session and is used up; a restarted
//! bridge forgets it.

use std::sync::{Arc, Mutex};

use subtle::ConstantTimeEq;

use super::sessions::Sessions;
use crate::config::{McpAuth, McpAuthMode};
use crate::error::{ToolError, code};
use crate::keys::{KeyCache, hash_secret};
use crate::model::Principal;
use crate::oauth::Verifier;
use crate::provider::peers::TaskOrigin;
use crate::store::Store;
use crate::store::board::BoardTokenRow;
use bridge_proto::methods::{McpPath, Surface};

/// The connecting process, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Set when the peer is one of the bridge's task processes (decided once per connection):
    /// such a peer is refused on every surface (`PEER_NOT_AUTHORIZED`).
    pub in_task: Option<TaskOrigin>,
}

impl Peer {
    /// A peer that is not inside any task.
    pub fn outside(uid: u32, gid: u32) -> Peer {
        Peer { uid, gid, in_task: None }
    }
}

/// Resolves principals.
#[derive(Clone)]
pub struct Auth {
    mcp: McpAuth,
    keys: KeyCache,
    own_uid: u32,
    /// The board's in-process credential (random per bridge process).
    board: Arc<str>,
    /// The sessions board tokens opened.
    sessions: Sessions,
    /// The OAuth token verifier, when `/mcp-oauth` is configured.
    oauth: Option<Arc<Verifier>>,
    /// The one-time login links not yet used.
    links: Arc<Mutex<Vec<LoginLink>>>,
}

/// A one-time login link's token hash and when it expires (Unix ms).
type LoginLink = ([u8; 32], i64);

/// Most one-time login links kept at once (the oldest go first).
const MAX_LOGIN_LINKS: usize = 16;

/// A refused credential: what the caller is told and, for an OAuth token, what the audit row
/// keeps (the reason's code, and the principal a valid token with no role would have been).
#[derive(Debug)]
pub struct AuthFailure {
    /// The error the caller gets.
    pub error: ToolError,
    /// The audit row's code, when more precise than the error's.
    pub audit_code: Option<&'static str>,
    /// The principal the audit row names, when the credential identified one.
    pub principal: Option<String>,
}

impl From<ToolError> for AuthFailure {
    fn from(error: ToolError) -> AuthFailure {
        AuthFailure { error, audit_code: None, principal: None }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("mcp", &self.mcp).field("own_uid", &self.own_uid).finish_non_exhaustive()
    }
}

impl Auth {
    /// An authenticator with the MCP auth settings, the key cache and the bridge's own uid.
    pub fn new(mcp: McpAuth, keys: KeyCache, own_uid: u32) -> Auth {
        let board = format!("board {}", crate::ids::hex(&crate::ids::random_bytes::<32>()));
        Auth {
            mcp,
            keys,
            own_uid,
            board: board.into(),
            sessions: Sessions::default(),
            oauth: None,
            links: Arc::default(),
        }
    }

    /// The same, taking `/mcp-oauth` tokens with `verifier`.
    pub fn with_oauth(mut self, verifier: Arc<Verifier>) -> Auth {
        self.oauth = Some(verifier);
        self
    }

    /// The OAuth verifier, when `/mcp-oauth` is configured.
    pub fn oauth(&self) -> Option<&Arc<Verifier>> {
        self.oauth.as_ref()
    }

    /// The credential the in-process board calls the registry with (never sent anywhere).
    pub fn board_credential(&self) -> &str {
        &self.board
    }

    /// The key cache.
    pub fn keys(&self) -> &KeyCache {
        &self.keys
    }

    /// The board's sessions (a request's cookie is looked up here).
    pub fn board_sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Issues a board token that can log in for `valid_hours`; returns its row and its secret
    /// (shown this once: only the hash is stored).
    pub async fn issue_board_token(
        &self,
        store: &Arc<Store>,
        valid_hours: u32,
        now: i64,
    ) -> Result<(BoardTokenRow, String), ToolError> {
        let secret = crate::ids::board_token_secret();
        let row = BoardTokenRow {
            token_id: crate::ids::board_token_id(),
            token_sha256: hash_secret(&secret),
            created_at: now,
            expires_at: now + i64::from(valid_hours) * 3_600_000,
            revoked_at: None,
        };
        let stored = row.clone();
        store.call(move |s| s.insert_board_token(&stored)).await?;
        Ok((row, secret))
    }

    /// Issues the token of a one-time login link, usable once within `valid_hours`; returns
    /// it and when it expires. Only its hash is kept, in memory.
    pub fn issue_login_link(&self, valid_hours: u32, now: i64) -> (String, i64) {
        let secret = crate::ids::board_token_secret();
        let expires_at = now + i64::from(valid_hours) * 3_600_000;
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        links.retain(|(_, expires)| *expires > now);
        if links.len() >= MAX_LOGIN_LINKS {
            links.remove(0);
        }
        links.push((hash_secret(&secret), expires_at));
        (secret, expires_at)
    }

    /// Revokes every board token and one-time login link and ends every board session;
    /// returns how many were live.
    pub async fn revoke_board_tokens(&self, store: &Arc<Store>, now: i64) -> Result<usize, ToolError> {
        let revoked = store.call(move |s| s.revoke_board_tokens(now)).await?;
        let links = {
            let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
            let live = links.iter().filter(|(_, expires)| *expires > now).count();
            links.clear();
            live
        };
        self.sessions.end_all();
        Ok(revoked + links)
    }

    /// Uses up the one-time login link whose token hashes to `hash`, if one is live at `now`
    /// (compared with every live link in constant time).
    fn use_login_link(&self, hash: &[u8; 32], now: i64) -> bool {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        links.retain(|(_, expires)| *expires > now);
        let mut found = None;
        for (i, (link, _)) in links.iter().enumerate() {
            if bool::from(link.ct_eq(hash)) {
                found = Some(i);
            }
        }
        found.map(|i| links.remove(i)).is_some()
    }

    /// Logs in with a presented board token: one live at `now` (not revoked, not expired),
    /// compared with every live token in constant time, opens a session for the browser that
    /// sent `user_agent` and returns its id (the cookie); the session ends with the token at
    /// the latest. A one-time login link's token opens a session of its own length and is
    /// used up. Anything else, an unreadable store included, is `UNAUTHENTICATED`.
    pub async fn board_login(
        &self,
        store: &Arc<Store>,
        presented: &str,
        now: i64,
        user_agent: &str,
    ) -> Result<String, ToolError> {
        let hash = hash_secret(presented);
        let tokens = store.call(move |s| s.live_board_tokens(now)).await.unwrap_or_default();
        let mut matched = None;
        for t in &tokens {
            if bool::from(t.token_sha256.ct_eq(&hash)) {
                matched = Some(t.expires_at);
            }
        }
        if matched.is_none() && !presented.is_empty() && self.use_login_link(&hash, now) {
            matched = Some(now + super::sessions::SESSION_MS);
        }
        match matched.filter(|_| !presented.is_empty()) {
            Some(expires_at) => Ok(self.sessions.open(now, expires_at, user_agent)),
            None => Err(ToolError::new(code::UNAUTHENTICATED, "the board token is unknown, used, expired or revoked")),
        }
    }

    /// Who is calling, or `UNAUTHENTICATED`.
    pub async fn resolve(
        &self,
        credential: Option<&str>,
        surface: Surface,
        path: McpPath,
        peer: &Peer,
    ) -> Result<Principal, AuthFailure> {
        if let Some(origin) = &peer.in_task {
            let which = origin.task_id.as_deref().map(|t| format!(" {t}")).unwrap_or_default();
            return Err(ToolError::new(
                code::PEER_NOT_AUTHORIZED,
                format!("a process of agent task{which} may not use the bridge socket ({})", origin.evidence),
            )
            .into());
        }
        if path == McpPath::Oauth {
            return self.resolve_oauth(credential, surface).await;
        }
        Ok(self.resolve_local(credential, surface, peer)?)
    }

    /// A `/mcp-oauth` caller: only the `mcp` surface, only an access token the verifier accepts.
    async fn resolve_oauth(&self, credential: Option<&str>, surface: Surface) -> Result<Principal, AuthFailure> {
        let unauthenticated = |why: String| ToolError::new(code::UNAUTHENTICATED, why);
        let Some(verifier) = self.oauth.as_ref().filter(|_| surface == Surface::Mcp) else {
            let why = if surface == Surface::Mcp {
                "this bridge takes no OAuth tokens (SERVERFS_MCP_OAUTH_ISSUER is unset)"
            } else {
                "only the mcp surface takes OAuth tokens"
            };
            return Err(unauthenticated(why.into()).into());
        };
        match verifier.authenticate(credential).await {
            Ok(holder) => Ok(Principal {
                name: holder.principal,
                role: holder.role,
                workdirs: verifier.config().workdirs.clone(),
                key_id: None,
                display: holder.display,
            }),
            Err(refused) => {
                // Debug only: a flood of bad tokens must not flood the log (the audit log counts them).
                tracing::debug!(reason = refused.audit_code(), "refused an OAuth token: {refused}");
                let principal = match &refused {
                    crate::oauth::Refused::NoRole { principal } => Some(principal.clone()),
                    _ => None,
                };
                Err(AuthFailure {
                    error: unauthenticated(refused.to_string()),
                    audit_code: Some(refused.audit_code()),
                    principal,
                })
            }
        }
    }

    /// A caller of the board, the CLI or `/mcp`.
    fn resolve_local(&self, credential: Option<&str>, surface: Surface, peer: &Peer) -> Result<Principal, ToolError> {
        let credential = credential.map(str::trim).filter(|c| !c.is_empty());
        match surface {
            Surface::Board => {
                let presented = credential.unwrap_or("").as_bytes();
                return if bool::from(presented.ct_eq(self.board.as_bytes())) {
                    Ok(Principal::board_operator())
                } else {
                    Err(ToolError::new(code::UNAUTHENTICATED, "the board surface is the board's own"))
                };
            }
            Surface::Cli if credential.is_none() && peer.uid == self.own_uid => return Ok(Principal::local_operator()),
            Surface::Mcp if self.mcp.mode == McpAuthMode::None => {
                return Ok(Principal {
                    name: self.mcp.tunnel_principal.clone(),
                    // Never above operator, whatever a hand-edited config says.
                    role: self.mcp.tunnel_role.min(crate::config::Role::Operator),
                    workdirs: None,
                    key_id: None,
                    display: None,
                });
            }
            _ => {}
        }
        let unauthenticated = |why: &str| ToolError::new(code::UNAUTHENTICATED, why.to_owned());
        let credential =
            credential.ok_or_else(|| unauthenticated("a credential is required: send Authorization: Bearer <key>"))?;
        let secret = match credential.split_once(char::is_whitespace) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => return Err(unauthenticated("the credential must be of the form 'Bearer <key>'")),
        };
        let key = self.keys.find(secret).ok_or_else(|| unauthenticated("the key is unknown or revoked"))?;
        Ok(Principal {
            name: key.name.clone(),
            role: key.role,
            workdirs: key.workdirs.clone(),
            key_id: Some(key.key_id.clone()),
            display: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/133";

    fn setup() -> (tempfile::TempDir, Arc<Store>, Auth) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("state")).unwrap());
        (dir, store, Auth::new(McpAuth::default(), KeyCache::default(), 4242))
    }

    #[tokio::test]
    async fn a_live_board_token_opens_a_session_until_revoked() {
        let (_dir, store, auth) = setup();
        let (row, secret) = auth.issue_board_token(&store, 2, 1_000).await.unwrap();
        assert_eq!(row.expires_at, 1_000 + 2 * 3_600_000);
        assert_ne!(row.token_sha256, [0; 32]);
        let id = auth.board_login(&store, &secret, 2_000, UA).await.expect("a live token logs in");
        let session = auth.board_sessions().get(&id, 3_000, UA, true).expect("the session is open");
        assert_eq!(session.expires_at, row.expires_at, "a session never outlives its token");
        for (presented, at) in [("", 2_000), ("not the token", 2_000), (secret.as_str(), row.expires_at)] {
            let refused = auth.board_login(&store, presented, at, UA).await.expect_err("refused");
            assert_eq!(refused.code, code::UNAUTHENTICATED, "{presented:?} at {at}");
        }
        assert_eq!(auth.revoke_board_tokens(&store, 4_000).await.unwrap(), 1);
        assert!(auth.board_sessions().get(&id, 4_001, UA, true).is_none(), "revoking ended the session");
        let refused = auth.board_login(&store, &secret, 4_001, UA).await.expect_err("a revoked token");
        assert_eq!(refused.code, code::UNAUTHENTICATED);
    }

    #[tokio::test]
    async fn a_login_link_logs_in_once_and_not_after_it_expires_or_is_revoked() {
        let (_dir, store, auth) = setup();
        let (secret, expires_at) = auth.issue_login_link(1, 1_000);
        assert_eq!(expires_at, 1_000 + 3_600_000);
        let id = auth.board_login(&store, &secret, 2_000, UA).await.expect("the link logs in");
        let session = auth.board_sessions().get(&id, 3_000, UA, true).expect("the session is open");
        assert_eq!(session.expires_at, 2_000 + crate::registry::sessions::SESSION_MS, "the session's own length");
        let again = auth.board_login(&store, &secret, 2_001, UA).await.expect_err("a used link");
        assert_eq!(again.code, code::UNAUTHENTICATED);

        let (revoked, _) = auth.issue_login_link(1, 4_000);
        assert!(auth.board_sessions().get(&id, 5_000, UA, true).is_some(), "the session is still open");
        assert_eq!(auth.revoke_board_tokens(&store, 5_000).await.unwrap(), 1, "the live link is revoked");
        assert!(auth.board_sessions().get(&id, 5_001, UA, true).is_none(), "revoking ended the session");
        auth.board_login(&store, &revoked, 5_001, UA).await.expect_err("a revoked link");

        let (late, expires_at) = auth.issue_login_link(1, 6_000);
        auth.board_login(&store, &late, expires_at, UA).await.expect_err("an expired link");
    }
}
