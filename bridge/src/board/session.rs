//! Board sessions: a random id in an HttpOnly, SameSite=Strict cookie, and a CSRF token per
//! session that every form posts back. Sessions live in memory only: a restarted bridge asks
//! for a fresh login, and revoking the board's tokens ends them all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subtle::ConstantTimeEq;

/// How long a session lasts after login.
pub const SESSION_MS: i64 = 12 * 3_600_000;
/// Most sessions kept at once (the oldest go first).
const MAX_SESSIONS: usize = 64;

/// One logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token every form must carry.
    pub csrf: String,
    /// Unix ms after which the session is over.
    pub expires_at: i64,
}

/// The live sessions; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    map: Arc<Mutex<HashMap<String, Session>>>,
}

impl Sessions {
    /// Opens a session; returns its id (the cookie value).
    pub fn open(&self, now: i64, token_expires_at: i64) -> String {
        let id = crate::ids::hex(&crate::ids::random_bytes::<32>());
        let session = Session {
            csrf: crate::ids::hex(&crate::ids::random_bytes::<32>()),
            expires_at: (now + SESSION_MS).min(token_expires_at),
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.expires_at > now);
        while map.len() >= MAX_SESSIONS {
            let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires_at).map(|(k, _)| k.clone()) else { break };
            map.remove(&oldest);
        }
        map.insert(id.clone(), session);
        id
    }

    /// The live session with this id (compared in constant time).
    pub fn get(&self, id: &str, now: i64) -> Option<Session> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for (key, session) in map.iter() {
            if bool::from(key.as_bytes().ct_eq(id.as_bytes())) && session.expires_at > now {
                found = Some(session.clone());
            }
        }
        found
    }

    /// Ends one session.
    pub fn close(&self, id: &str) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// Ends every session.
    pub fn end_all(&self) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// Whether a posted CSRF token is the session's (constant time).
pub fn csrf_matches(session: &Session, presented: &str) -> bool {
    bool::from(session.csrf.as_bytes().ct_eq(presented.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_end() {
        let sessions = Sessions::default();
        let id = sessions.open(1_000, i64::MAX);
        let s = sessions.get(&id, 2_000).expect("live");
        assert!(csrf_matches(&s, &s.csrf) && !csrf_matches(&s, "nope") && !csrf_matches(&s, ""));
        assert!(sessions.get(&id, 1_000 + SESSION_MS).is_none(), "expired");
        assert!(sessions.get("other", 2_000).is_none());
        let short = sessions.open(1_000, 5_000);
        assert!(sessions.get(&short, 5_000).is_none(), "never outlives its token");
        sessions.end_all();
        assert!(sessions.get(&id, 2_000).is_none());
    }
}
