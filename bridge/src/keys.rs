//! The API-key service: creating a key (its naming rules, the workdirs it may be limited to,
//! the secret shown once), listing and revoking keys, and the in-memory cache of active keys
//! that authentication (`registry::auth`) reads, reloaded whenever a key is created or revoked.
//! Only the SHA-256 of a secret is ever kept.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::clock::Clock;
use crate::config::{BridgeConfig, Role};
use crate::error::{ToolError, code};
use crate::model::Principal;
use crate::store::keys::KeyRow;
use crate::store::{Store, StoreError};

/// The SHA-256 of a secret (an API key's or a board token's), as stored.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// An active key, as authentication sees it.
#[derive(Debug, Clone)]
pub struct ActiveKey {
    /// `key_…`.
    pub key_id: String,
    /// The principal name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its workdir allowlist.
    pub workdirs: Option<Vec<String>>,
    hash: [u8; 32],
}

/// The active API keys, kept in memory and reloaded whenever a key is created or revoked;
/// indexed by the first 8 bytes of their SHA-256, so a call hashes its secret once, looks one
/// candidate up and compares it in constant time, however many keys there are. (Whether some
/// key's hash shares its first 8 bytes with the hash of a presented secret is all the lookup's
/// timing could tell, and it says nothing about any secret.)
#[derive(Debug, Clone, Default)]
pub struct KeyCache {
    keys: Arc<RwLock<HashMap<u64, Vec<Arc<ActiveKey>>>>>,
}

/// The index of a key hash: its first 8 bytes.
fn prefix(hash: &[u8; 32]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_le_bytes(first)
}

impl KeyCache {
    /// Reloads the active keys from the store (blocking).
    pub fn reload(&self, store: &Store) -> Result<(), StoreError> {
        let rows = store.list_keys()?;
        let mut active: HashMap<u64, Vec<Arc<ActiveKey>>> = HashMap::new();
        for k in rows.into_iter().filter(|k: &KeyRow| k.revoked_at.is_none()) {
            let key =
                ActiveKey { role: k.role, key_id: k.key_id, name: k.name, workdirs: k.workdirs, hash: k.key_sha256 };
            active.entry(prefix(&key.hash)).or_default().push(Arc::new(key));
        }
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = active;
        Ok(())
    }

    /// The active key whose secret this is: the candidates of its hash's index (one, all but
    /// always) are each compared in constant time, without an early exit.
    pub fn find(&self, secret: &str) -> Option<Arc<ActiveKey>> {
        let presented = hash_secret(secret);
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for key in keys.get(&prefix(&presented)).into_iter().flatten() {
            if bool::from(key.hash.ct_eq(&presented)) {
                found = Some(Arc::clone(key));
            }
        }
        found
    }
}

/// A key to create, as the caller asked for it.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// The name asked for (trimmed here).
    pub name: String,
    /// The role.
    pub role: Role,
    /// Restrict the key to these workdir aliases.
    pub workdirs: Option<Vec<String>>,
}

/// Creates, lists and revokes API keys; cheap to clone.
#[derive(Clone)]
pub struct KeyService {
    store: Arc<Store>,
    cache: KeyCache,
    clock: Clock,
    config: Arc<BridgeConfig>,
}

impl KeyService {
    /// The service over `store`, keeping `cache` (the one authentication reads) current.
    pub fn new(store: Arc<Store>, cache: KeyCache, clock: Clock, config: Arc<BridgeConfig>) -> KeyService {
        KeyService { store, cache, clock, config }
    }

    /// Creates a key and returns it with its secret (shown this once). The name is trimmed,
    /// may use letters, digits and `@ . _ -` only, and is none of the bridge's own principals
    /// (the local operator, the board's operator, the tunnel principal); every workdir named
    /// must exist (`WORKDIR_NOT_FOUND`); a live key's name is refused by the store, a revoked
    /// key's is taken over (the new key is the same principal: see
    /// [`Store::insert_key`](crate::store::Store::insert_key)).
    pub async fn create(&self, key: NewKey) -> Result<Value, ToolError> {
        let name = self.check_name(&key.name)?;
        if let Some(list) = &key.workdirs
            && let Some(unknown) = list.iter().find(|w| !self.config.workdirs.iter().any(|c| &c.alias == *w))
        {
            return Err(ToolError::new(code::WORKDIR_NOT_FOUND, format!("no workdir named {unknown:?}")));
        }
        let secret = crate::ids::api_key_secret();
        let row = KeyRow {
            key_id: crate::ids::key_id(),
            name,
            role: key.role,
            key_sha256: hash_secret(&secret),
            workdirs: key.workdirs,
            created_at: self.clock.now_ms(),
            last_used_at: None,
            revoked_at: None,
        };
        let (stored, cache) = (row.clone(), self.cache.clone());
        self.store
            .call(move |s| {
                s.insert_key(&stored)?;
                cache.reload(s)
            })
            .await?;
        Ok(
            json!({ "key_id": row.key_id, "name": row.name, "role": row.role.as_str(), "workdirs": row.workdirs, "secret": secret }),
        )
    }

    /// Every key, revoked ones included, oldest first (never a secret or its hash).
    pub async fn list(&self) -> Result<Value, ToolError> {
        let keys = self.store.call(|s| s.list_keys()).await?;
        let keys: Vec<Value> = keys
            .iter()
            .map(|k| {
                json!({
                    "key_id": k.key_id,
                    "name": k.name,
                    "role": k.role.as_str(),
                    "workdirs": k.workdirs,
                    "created_at": crate::clock::rfc3339(k.created_at),
                    "last_used_at": k.last_used_at.map(crate::clock::rfc3339),
                    "revoked_at": k.revoked_at.map(crate::clock::rfc3339),
                })
            })
            .collect();
        Ok(json!({ "keys": keys }))
    }

    /// Revokes the key with this name or id (`KEY_NOT_FOUND` when there is none); revoking a
    /// revoked key is safe and keeps its first revocation time.
    pub async fn revoke(&self, name_or_id: &str) -> Result<Value, ToolError> {
        let (now, cache, name) = (self.clock.now_ms(), self.cache.clone(), name_or_id.to_owned());
        let revoked = self
            .store
            .call(move |s| {
                let row = s.revoke_key(&name, now)?;
                cache.reload(s)?;
                Ok(row)
            })
            .await?;
        let row =
            revoked.ok_or_else(|| ToolError::new(code::KEY_NOT_FOUND, format!("no API key named {name_or_id:?}")))?;
        Ok(json!({ "key_id": row.key_id, "name": row.name, "revoked_at": row.revoked_at.map(crate::clock::rfc3339) }))
    }

    /// The trimmed name, if it is one a key may have.
    fn check_name(&self, asked: &str) -> Result<String, ToolError> {
        let name = asked.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "@._-".contains(c)) {
            return Err(ToolError::invalid("name", "may use letters, digits and @ . _ - only"));
        }
        let reserved = [Principal::local_operator().name, Principal::board_operator().name];
        if reserved.iter().any(|r| r == name) || name == self.config.mcp_auth.tunnel_principal {
            return Err(ToolError::invalid("name", "is reserved"));
        }
        Ok(name.to_owned())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;

    /// A key service over a real store in a temporary directory, with one workdir (`repo`)
    /// and the tunnel principal `robot`.
    fn service(root: &std::path::Path) -> KeyService {
        let config = crate::tasks::testing::config(root, "codex", "SERVERFS_MCP_TUNNEL_PRINCIPAL=robot\n");
        let store = Arc::new(Store::open(&config.state_dir).unwrap());
        KeyService::new(store, KeyCache::default(), Clock::System, Arc::new(config))
    }

    fn key(name: &str) -> NewKey {
        NewKey { name: name.to_owned(), role: Role::Operator, workdirs: None }
    }

    fn refusal(result: Result<Value, ToolError>) -> (&'static str, String) {
        let e = result.expect_err("refused");
        (e.code, e.message)
    }

    #[tokio::test]
    async fn key_names_follow_the_rules() {
        let dir = tempfile::tempdir().unwrap();
        let keys = service(dir.path());
        let made = keys.create(key("  ci.bot-1@example_x  ")).await.unwrap();
        assert_eq!(made["name"], "ci.bot-1@example_x", "trimmed");
        assert_eq!(made["role"], "operator");
        for bad in ["", "   ", "a b", "name/slash", "ünïcode", "semi;colon"] {
            let (code, message) = refusal(keys.create(key(bad)).await);
            assert_eq!(code, code::INVALID_ARGUMENT, "{bad:?}");
            assert!(message.contains("letters, digits"), "{bad:?}: {message}");
        }
        for reserved in ["operator@local", "operator@board", "robot", " robot "] {
            let (code, message) = refusal(keys.create(key(reserved)).await);
            assert_eq!(code, code::INVALID_ARGUMENT, "{reserved:?}");
            assert!(message.contains("reserved"), "{reserved:?}: {message}");
        }
        let (code, _) = refusal(keys.create(key("ci.bot-1@example_x")).await);
        assert_eq!(code, code::KEY_NAME_TAKEN);
        let listed = keys.list().await.unwrap();
        let names: Vec<&str> = listed["keys"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["ci.bot-1@example_x"], "no refused name was stored");
    }

    #[tokio::test]
    async fn a_key_names_only_known_workdirs() {
        let dir = tempfile::tempdir().unwrap();
        let keys = service(dir.path());
        let asked = NewKey { workdirs: Some(vec!["repo".into(), "elsewhere".into()]), ..key("limited") };
        let (code, message) = refusal(keys.create(asked).await);
        assert_eq!(code, code::WORKDIR_NOT_FOUND);
        assert!(message.contains("elsewhere"), "{message}");
        let made = keys.create(NewKey { workdirs: Some(vec!["repo".into()]), ..key("limited") }).await.unwrap();
        assert_eq!(made["workdirs"], json!(["repo"]));
    }

    #[tokio::test]
    async fn creating_and_revoking_keep_the_cache_current() {
        let dir = tempfile::tempdir().unwrap();
        let keys = service(dir.path());
        let made = keys.create(NewKey { role: Role::Admin, ..key("alice") }).await.unwrap();
        let secret = made["secret"].as_str().unwrap();
        let active = keys.cache.find(secret).expect("the new key authenticates at once");
        assert_eq!((active.name.as_str(), active.role), ("alice", Role::Admin));
        assert!(keys.cache.find("not a secret").is_none());
        let listed = keys.list().await.unwrap();
        assert!(!listed.to_string().contains(secret), "a listing never shows a secret");
        // By id or by name; again is safe and keeps the first time.
        let first = keys.revoke(made["key_id"].as_str().unwrap()).await.unwrap();
        assert!(keys.cache.find(secret).is_none(), "a revoked key authenticates nothing at once");
        let again = keys.revoke("alice").await.unwrap();
        assert_eq!(first["revoked_at"], again["revoked_at"]);
        let (code, _) = refusal(keys.revoke("nobody").await);
        assert_eq!(code, code::KEY_NOT_FOUND);
    }

    #[tokio::test]
    async fn a_revoked_keys_name_is_taken_by_a_new_key_and_a_live_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let keys = service(dir.path());
        let first = keys.create(key("quickstart")).await.unwrap();
        let (code, _) = refusal(keys.create(key("quickstart")).await);
        assert_eq!(code, code::KEY_NAME_TAKEN, "a live key keeps its name");
        keys.revoke("quickstart").await.unwrap();
        let second = keys.create(key("quickstart")).await.unwrap();
        assert_ne!(first["key_id"], second["key_id"]);
        let found = keys.cache.find(second["secret"].as_str().unwrap()).expect("the new key authenticates");
        assert_eq!(found.name, "quickstart", "the same principal");
        assert!(keys.cache.find(first["secret"].as_str().unwrap()).is_none(), "the old secret stays revoked");
        let listed = keys.list().await.unwrap();
        let mut rows: Vec<(&str, bool)> = listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| (k["name"].as_str().unwrap(), k["revoked_at"].is_null()))
            .collect();
        rows.sort_unstable();
        let renamed = format!("quickstart#{}", first["key_id"].as_str().unwrap());
        assert_eq!(rows, [("quickstart", true), (renamed.as_str(), false)], "the revoked key keeps its row");
        // Revoking by name now reaches the live key only.
        keys.revoke("quickstart").await.unwrap();
        assert!(keys.cache.find(second["secret"].as_str().unwrap()).is_none());
        keys.create(key("quickstart")).await.expect("taken over a second time");
    }

    #[tokio::test]
    async fn among_many_keys_each_secret_finds_its_own_and_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let keys = service(dir.path());
        let mut secrets = Vec::new();
        for i in 0..300 {
            let made = keys.create(key(&format!("k{i}"))).await.unwrap();
            secrets.push((format!("k{i}"), made["secret"].as_str().unwrap().to_owned()));
        }
        for (name, secret) in &secrets {
            assert_eq!(keys.cache.find(secret).map(|k| k.name.clone()).as_deref(), Some(name.as_str()));
        }
        assert!(keys.cache.find("not-a-key").is_none());
        // A secret one character off is another hash: no candidate.
        let (_, first) = &secrets[0];
        let mut off = first.clone();
        off.push('x');
        assert!(keys.cache.find(&off).is_none());
        // Two keys whose hashes share an index are both found, each by its own secret.
        let (a, b) = (hash_secret("alpha"), hash_secret("beta"));
        let key = |name: &str, hash| {
            Arc::new(ActiveKey { key_id: name.into(), name: name.into(), role: Role::Viewer, workdirs: None, hash })
        };
        let shared = KeyCache::default();
        shared.keys.write().unwrap().insert(prefix(&a), vec![key("alpha", a), key("beta", b)]);
        assert_eq!(shared.find("alpha").map(|k| k.name.clone()).as_deref(), Some("alpha"));
        // "beta" hashes to another index: not found through alpha's bucket, as it must not be.
        assert!(shared.find("beta").is_none());
    }
}
