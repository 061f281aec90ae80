//! Board login tokens: only their SHA-256 is stored; the token is printed once by
//! `agent-bridge board token`.

use rusqlite::params;

use super::{Store, StoreError};

/// A stored board token (never the token itself).
#[derive(Debug, Clone, PartialEq)]
pub struct BoardTokenRow {
    /// `btk_…`, public.
    pub token_id: String,
    /// SHA-256 of the token.
    pub token_sha256: [u8; 32],
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms after which it logs nobody in.
    pub expires_at: i64,
    /// Unix ms; a revoked token logs nobody in.
    pub revoked_at: Option<i64>,
}

impl Store {
    /// Stores a new board token.
    pub fn insert_board_token(&self, row: &BoardTokenRow) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO board_tokens (token_id, token_sha256, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![row.token_id, row.token_sha256.as_slice(), row.created_at, row.expires_at],
            )?;
            Ok(())
        })
    }

    /// The tokens that can still log in at `now` (not revoked, not expired).
    pub fn live_board_tokens(&self, now: i64) -> Result<Vec<BoardTokenRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT token_id, token_sha256, created_at, expires_at, revoked_at FROM board_tokens \
                 WHERE revoked_at IS NULL AND expires_at > ?1",
            )?;
            let rows = stmt.query_map([now], |r| {
                let hash: Vec<u8> = r.get(1)?;
                Ok(BoardTokenRow {
                    token_id: r.get(0)?,
                    token_sha256: hash.try_into().map_err(|_| {
                        rusqlite::Error::FromSqlConversionFailure(
                            1,
                            rusqlite::types::Type::Blob,
                            "token hash is not 32 bytes".into(),
                        )
                    })?,
                    created_at: r.get(2)?,
                    expires_at: r.get(3)?,
                    revoked_at: r.get(4)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Revokes every board token; returns how many were live.
    pub fn revoke_board_tokens(&self, now: i64) -> Result<usize, StoreError> {
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE board_tokens SET revoked_at = ?1 WHERE revoked_at IS NULL AND expires_at > ?1",
                [now],
            )?)
        })
    }
}
