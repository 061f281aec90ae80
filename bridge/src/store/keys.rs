//! API keys: only their SHA-256 is stored; the secret is shown once at creation.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Store, StoreError, is_unique_violation};
use crate::config::Role;

/// A stored API key (never the secret).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    /// `key_…`, public.
    pub key_id: String,
    /// Unique name; becomes the principal name.
    pub name: String,
    /// What the key may do.
    pub role: Role,
    /// SHA-256 of the secret.
    pub key_sha256: [u8; 32],
    /// Optional workdir allowlist (aliases).
    pub workdirs: Option<Vec<String>>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last authenticated call (updated in batches).
    pub last_used_at: Option<i64>,
    /// Unix ms; a revoked key authenticates nothing.
    pub revoked_at: Option<i64>,
}

fn key_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRow> {
    let hash: Vec<u8> = r.get(3)?;
    let workdirs: Option<String> = r.get(4)?;
    Ok(KeyRow {
        key_id: r.get(0)?,
        name: r.get(1)?,
        role: r.get(2)?,
        key_sha256: hash.try_into().map_err(|_| {
            rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Blob, "key hash is not 32 bytes".into())
        })?,
        workdirs: workdirs.and_then(|w| serde_json::from_str(&w).ok()),
        created_at: r.get(5)?,
        last_used_at: r.get(6)?,
        revoked_at: r.get(7)?,
    })
}

const COLUMNS: &str = "key_id, name, role, key_sha256, workdirs_json, created_at, last_used_at, revoked_at";

impl Store {
    /// Stores a new key; a name a live key has is [`StoreError::KeyNameTaken`]. A revoked
    /// key's name can be taken again: the revoked key keeps its row, renamed `NAME#KEY_ID` (a
    /// name no key can be given), and the new key, being the same principal, owns its tasks.
    pub fn insert_key(&self, key: &KeyRow) -> Result<(), StoreError> {
        let workdirs = key.workdirs.as_ref().map(|w| serde_json::Value::from(w.clone()).to_string());
        self.write(|tx| {
            tx.execute(
                "UPDATE api_keys SET name = name || '#' || key_id WHERE name = ?1 AND revoked_at IS NOT NULL",
                [&key.name],
            )?;
            tx.execute(
                &format!("INSERT INTO api_keys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL)"),
                params![key.key_id, key.name, key.role, key.key_sha256.as_slice(), workdirs, key.created_at],
            )
            .map_err(|e| if is_unique_violation(&e) { StoreError::KeyNameTaken(key.name.clone()) } else { e.into() })?;
            Ok(())
        })
    }

    /// Every key, revoked ones included, oldest first.
    pub fn list_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare(&format!("SELECT {COLUMNS} FROM api_keys ORDER BY created_at, key_id"))?;
            let rows = stmt.query_map([], key_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Revokes the key with this name or id; returns it, or `None` when no such key exists.
    pub fn revoke_key(&self, name_or_id: &str, now: i64) -> Result<Option<KeyRow>, StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE name = ?1 OR key_id = ?1",
                params![name_or_id, now],
            )?;
            Ok(tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM api_keys WHERE name = ?1 OR key_id = ?1"),
                    [name_or_id],
                    key_from_row,
                )
                .optional()?)
        })
    }

    /// Records when keys were last used (a batch of the audit writer, in its transaction):
    /// one update per key, at the latest of its times.
    pub(super) fn touch_keys_in(tx: &Transaction<'_>, used: &[(String, i64)]) -> Result<(), StoreError> {
        let mut latest: Vec<(&str, i64)> = Vec::new();
        for (key_id, at) in used {
            match latest.iter_mut().find(|(k, _)| *k == key_id) {
                Some(entry) => entry.1 = entry.1.max(*at),
                None => latest.push((key_id, *at)),
            }
        }
        let mut stmt = tx.prepare_cached(
            "UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?2) WHERE key_id = ?1",
        )?;
        for (key_id, at) in latest {
            stmt.execute(params![key_id, at])?;
        }
        Ok(())
    }
}
