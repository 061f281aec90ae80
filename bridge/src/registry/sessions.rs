//! Board sessions, opened by a board token through [`Auth`](super::auth::Auth) (the one
//! authentication path): a random id in an HttpOnly, SameSite=Strict cookie, and a CSRF token
//! per session that every form posts back. Sessions live in memory only: a restarted bridge
//! asks for a fresh login, and revoking the board's tokens ends them all.
//!
//! A cookie alone is not enough on a shared host (cookies ignore ports: any local page on
//! 127.0.0.1 may receive it), so a session is also bound to the `User-Agent` that logged in
//! (a cookie replayed from another program is refused) and ends after [`IDLE_MS`] without a
//! request a person made (the page's own live-update poll does not count).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How long a session lasts after login.
pub const SESSION_MS: i64 = 12 * 3_600_000;
/// How long a session lasts without a page view or an action.
pub const IDLE_MS: i64 = 30 * 60_000;
/// Most sessions kept at once (the oldest go first).
const MAX_SESSIONS: usize = 64;

/// One logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token every form must carry.
    pub csrf: String,
    /// Unix ms after which the session is over.
    pub expires_at: i64,
    /// Unix ms of the last page view or action.
    pub last_seen: i64,
    /// SHA-256 of the `User-Agent` the login came with.
    agent: [u8; 32],
}

/// The live sessions; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    map: Arc<Mutex<HashMap<String, Session>>>,
}

fn agent_hash(user_agent: &str) -> [u8; 32] {
    Sha256::digest(user_agent.as_bytes()).into()
}

impl Sessions {
    /// Opens a session for the browser that sent `user_agent`; returns its id (the cookie).
    pub fn open(&self, now: i64, token_expires_at: i64, user_agent: &str) -> String {
        let id = crate::ids::hex(&crate::ids::random_bytes::<32>());
        let session = Session {
            csrf: crate::ids::hex(&crate::ids::random_bytes::<32>()),
            expires_at: (now + SESSION_MS).min(token_expires_at),
            last_seen: now,
            agent: agent_hash(user_agent),
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.is_live(now));
        while map.len() >= MAX_SESSIONS {
            let Some(oldest) = map.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| k.clone()) else { break };
            map.remove(&oldest);
        }
        map.insert(id.clone(), session);
        id
    }

    /// The live session with this id (compared in constant time), if `user_agent` is the one
    /// it logged in with. `touch` counts the request as activity (a page view, an action; not
    /// the live-update poll).
    pub fn get(&self, id: &str, now: i64, user_agent: &str, touch: bool) -> Option<Session> {
        let agent = agent_hash(user_agent);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for key in map.keys() {
            if bool::from(key.as_bytes().ct_eq(id.as_bytes())) {
                found = Some(key.clone());
            }
        }
        let key = found?;
        let session = map.get_mut(&key)?;
        if !session.is_live(now) {
            map.remove(&key);
            return None;
        }
        if !bool::from(session.agent.ct_eq(&agent)) {
            return None;
        }
        if touch {
            session.last_seen = now;
        }
        Some(session.clone())
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

impl Session {
    fn is_live(&self, now: i64) -> bool {
        self.expires_at > now && now - self.last_seen < IDLE_MS
    }
}

/// Whether a posted CSRF token is the session's (constant time).
pub fn csrf_matches(session: &Session, presented: &str) -> bool {
    bool::from(session.csrf.as_bytes().ct_eq(presented.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/131";

    #[test]
    fn sessions_expire_and_end() {
        let sessions = Sessions::default();
        let id = sessions.open(1_000, i64::MAX, UA);
        let s = sessions.get(&id, 2_000, UA, true).expect("live");
        assert!(csrf_matches(&s, &s.csrf) && !csrf_matches(&s, "nope") && !csrf_matches(&s, ""));
        assert!(sessions.get("other", 2_000, UA, true).is_none());
        let short = sessions.open(1_000, 5_000, UA);
        assert!(sessions.get(&short, 5_000, UA, true).is_none(), "never outlives its token");
        // Kept alive by use, it still ends 12 h after the login.
        let mut now = 2_000;
        while now < 1_000 + SESSION_MS - IDLE_MS {
            now += IDLE_MS / 2;
            assert!(sessions.get(&id, now, UA, true).is_some(), "in use at {now}");
        }
        assert!(sessions.get(&id, 1_000 + SESSION_MS, UA, true).is_none(), "expired");
        let other = sessions.open(1_000, i64::MAX, UA);
        sessions.end_all();
        assert!(sessions.get(&other, 2_000, UA, true).is_none());
    }

    #[test]
    fn a_session_is_bound_to_its_browser_and_ends_when_idle() {
        let sessions = Sessions::default();
        let id = sessions.open(0, i64::MAX, UA);
        assert!(sessions.get(&id, 10, "curl/8.5.0", true).is_none(), "a replayed cookie from another program");
        assert!(sessions.get(&id, 10, "", true).is_none());
        assert!(sessions.get(&id, 10, UA, true).is_some(), "the refusal did not end the real browser's session");
        // The live-update poll does not keep a session alive; a page view does.
        assert!(sessions.get(&id, IDLE_MS - 1, UA, false).is_some());
        assert!(sessions.get(&id, IDLE_MS + 10, UA, false).is_none(), "idle for 30 min since the last page view");
        let id = sessions.open(0, i64::MAX, UA);
        assert!(sessions.get(&id, IDLE_MS - 1, UA, true).is_some());
        assert!(sessions.get(&id, 2 * IDLE_MS - 2, UA, true).is_some(), "a page view renewed it");
    }
}
