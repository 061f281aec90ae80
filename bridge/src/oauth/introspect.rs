//! RFC 7662 introspection of opaque access tokens: the IdP says whether a token is active and
//! what it carries; the bridge still checks `aud` (required), `iss` (when given), `exp`
//! (required) and `nbf` itself. An active answer is remembered for at most [`REMEMBER`] (never
//! past `exp`), keyed by the token's SHA-256, so a caller's polling does not become one
//! introspection per call; a refusal is never remembered. At most [`MAX_IN_FLIGHT`]
//! introspections run at once (past that a token is refused at once), so a flood of made-up
//! opaque tokens cannot turn the bridge into a load generator against the IdP; a failure is
//! logged at most once per [`WARN_EVERY`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Http, Refused};
use crate::config::oauth::{Introspection, OAuthConfig};

/// How long an active answer is reused at most.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// The most introspection requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// The least time between two warnings about failed introspections.
pub const WARN_EVERY: Duration = Duration::from_secs(30);
/// The most answers remembered.
const MAX_REMEMBERED: usize = 4096;

/// Active answers by the SHA-256 of their token, with when they were given.
type Remembered = HashMap<[u8; 32], (Instant, Map<String, Value>)>;

pub struct Introspector {
    http: Http,
    settings: Introspection,
    remembered: Mutex<Remembered>,
    in_flight: tokio::sync::Semaphore,
    last_warning: Mutex<Option<Instant>>,
}

impl Introspector {
    pub fn new(http: Http, settings: Introspection) -> Introspector {
        Introspector {
            http,
            settings,
            remembered: Mutex::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            last_warning: Mutex::default(),
        }
    }

    /// The claims of an active token issued for this resource.
    pub async fn introspect(&self, token: &str, config: &OAuthConfig, now: i64) -> Result<Map<String, Value>, Refused> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(claims) = self.recall(&digest)
            && check_times(&claims, config, now).is_ok()
        {
            return Ok(claims);
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Refused::IntrospectionFailed(format!("{MAX_IN_FLIGHT} introspections are in flight already")));
        };
        let form = [("token", token), ("token_type_hint", "access_token")];
        let s = &self.settings;
        let answer = tokio::time::timeout(
            super::keys::REFRESH_BUDGET,
            self.http.post_form(&s.url, &s.client_id, &s.client_secret, &form),
        )
        .await
        .unwrap_or_else(|_| Err("no answer in time".into()))
        .map_err(|why| {
            self.warn(&why);
            Refused::IntrospectionFailed(why)
        })?;
        let Value::Object(claims) = answer else {
            return Err(Refused::IntrospectionFailed("the answer is not an object".into()));
        };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(Refused::Inactive);
        }
        if let Some(iss) = claims.get("iss")
            && iss.as_str() != Some(config.issuer.as_str())
        {
            return Err(Refused::Issuer);
        }
        let aud_ok = match claims.get("aud") {
            Some(Value::String(a)) => *a == config.resource,
            Some(Value::Array(items)) => items.iter().any(|a| a.as_str() == Some(config.resource.as_str())),
            None => return Err(Refused::MissingClaim("aud")),
            _ => false,
        };
        if !aud_ok {
            return Err(Refused::Audience);
        }
        check_times(&claims, config, now)?;
        self.remember(digest, &claims);
        Ok(claims)
    }

    fn warn(&self, why: &str) {
        let mut last = self.last_warning.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(cause = %why, "token introspection failed (said once per 30 s at most)");
        }
    }

    fn recall(&self, digest: &[u8; 32]) -> Option<Map<String, Value>> {
        let remembered = self.remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        remembered.get(digest).filter(|(at, _)| at.elapsed() < REMEMBER).map(|(_, claims)| claims.clone())
    }

    fn remember(&self, digest: [u8; 32], claims: &Map<String, Value>) {
        let mut remembered = self.remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, (at, _)| at.elapsed() < REMEMBER);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(digest, (Instant::now(), claims.clone()));
    }
}

/// `exp` (required) has not passed and `nbf` (when given) has, both with the leeway.
fn check_times(claims: &Map<String, Value>, config: &OAuthConfig, now: i64) -> Result<(), Refused> {
    let leeway = config.leeway_seconds as i64;
    let exp = claims.get("exp").and_then(Value::as_i64).ok_or(Refused::MissingClaim("exp"))?;
    if exp + leeway <= now {
        return Err(Refused::Expired);
    }
    if claims.get("nbf").and_then(Value::as_i64).is_some_and(|nbf| nbf - leeway > now) {
        return Err(Refused::NotYetValid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_in_flight_cap_a_token_is_refused_without_asking_the_idp() {
        let settings = Introspection {
            url: "http://127.0.0.1:9/introspect".into(),
            client_id: "c".into(),
            client_secret: "s".into(),
        };
        let introspector = Introspector::new(Http::new(true).unwrap(), settings);
        let config = crate::oauth::tests::config("http://127.0.0.1:9");
        let held = introspector.in_flight.acquire_many(MAX_IN_FLIGHT as u32).await.unwrap();
        let refused = introspector.introspect("opaque-token", &config, 0).await.unwrap_err();
        assert!(matches!(&refused, Refused::IntrospectionFailed(why) if why.contains("in flight")), "{refused:?}");
        drop(held);
        // With room again it does ask (here: nobody answers on port 9).
        let refused = introspector.introspect("opaque-token", &config, 0).await.unwrap_err();
        assert!(matches!(&refused, Refused::IntrospectionFailed(why) if !why.contains("in flight")), "{refused:?}");
    }
}
