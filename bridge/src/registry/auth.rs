//! Authentication: from a surface, a peer and a credential to a [`Principal`].
//!
//! API keys are compared by their SHA-256 against every active key, in constant time and
//! without an early exit, so timing tells nothing about which key (if any) almost matched.
//! The local operator is the bridge's own uid on the CLI surface; the MCP surface never gets
//! that right, whoever the peer is, because the front usually runs as the same user. The
//! board surface is the board inside this process: it authenticates with a random credential
//! that never leaves the process, so no socket client can claim the board surface.

use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{McpAuth, McpAuthMode, Role};
use crate::error::{ToolError, code};
use crate::model::Principal;
use crate::provider::peers::TaskOrigin;
use crate::store::Store;
use crate::store::keys::KeyRow;
use bridge_proto::methods::Surface;

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

#[derive(Debug, Clone)]
struct CachedKey {
    key_id: String,
    name: String,
    role: Role,
    workdirs: Option<Vec<String>>,
    hash: [u8; 32],
}

/// The active API keys, kept in memory and reloaded whenever a key is created or revoked.
#[derive(Debug, Clone, Default)]
pub struct KeyCache {
    keys: Arc<RwLock<Vec<CachedKey>>>,
}

impl KeyCache {
    /// Reloads the active keys from the store (blocking).
    pub fn reload(&self, store: &Store) -> Result<(), crate::store::StoreError> {
        let rows = store.list_keys()?;
        let active = rows
            .into_iter()
            .filter(|k: &KeyRow| k.revoked_at.is_none())
            .map(|k| CachedKey {
                role: k.role,
                key_id: k.key_id,
                name: k.name,
                workdirs: k.workdirs,
                hash: k.key_sha256,
            })
            .collect();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = active;
        Ok(())
    }

    fn find(&self, secret: &str) -> Option<CachedKey> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for key in keys.iter() {
            if bool::from(key.hash.ct_eq(&presented)) {
                found = Some(key.clone());
            }
        }
        found
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
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("mcp", &self.mcp).field("own_uid", &self.own_uid).finish_non_exhaustive()
    }
}

/// The SHA-256 of a key secret, as stored.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl Auth {
    /// An authenticator with the MCP auth settings, the key cache and the bridge's own uid.
    pub fn new(mcp: McpAuth, keys: KeyCache, own_uid: u32) -> Auth {
        let board = format!("board {}", crate::ids::hex(&crate::ids::random_bytes::<32>()));
        Auth { mcp, keys, own_uid, board: board.into() }
    }

    /// The credential the in-process board calls the registry with (never sent anywhere).
    pub fn board_credential(&self) -> &str {
        &self.board
    }

    /// The key cache.
    pub fn keys(&self) -> &KeyCache {
        &self.keys
    }

    /// Who is calling, or `UNAUTHENTICATED`.
    pub fn resolve(&self, credential: Option<&str>, surface: Surface, peer: &Peer) -> Result<Principal, ToolError> {
        if let Some(origin) = &peer.in_task {
            let which = origin.task_id.as_deref().map(|t| format!(" {t}")).unwrap_or_default();
            return Err(ToolError::new(
                code::PEER_NOT_AUTHORIZED,
                format!("a process of agent task{which} may not use the bridge socket ({})", origin.evidence),
            ));
        }
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
        Ok(Principal { name: key.name, role: key.role, workdirs: key.workdirs, key_id: Some(key.key_id) })
    }
}
