//! RFC 7662 introspection of opaque access tokens: the IdP says whether a token is active and
//! what it carries; the bridge still checks `aud` (required), `iss` (when given), `exp`
//! (required) and `nbf` itself. An active answer is remembered for at most [`REMEMBER`] (never
//! past `exp`), keyed by the token's SHA-256, so a caller's polling does not become one
//! introspection per call; a refusal is never remembered.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Http, Refused};
use crate::config::oauth::{Introspection, OAuthConfig};

/// How long an active answer is reused at most.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// The most answers remembered.
const MAX_REMEMBERED: usize = 4096;

/// Active answers by the SHA-256 of their token, with when they were given.
type Remembered = HashMap<[u8; 32], (Instant, Map<String, Value>)>;

pub struct Introspector {
    http: Http,
    settings: Introspection,
    remembered: Mutex<Remembered>,
}

impl Introspector {
    pub fn new(http: Http, settings: Introspection) -> Introspector {
        Introspector { http, settings, remembered: Mutex::default() }
    }

    /// The claims of an active token issued for this resource.
    pub async fn introspect(&self, token: &str, config: &OAuthConfig, now: i64) -> Result<Map<String, Value>, Refused> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(claims) = self.recall(&digest)
            && check_times(&claims, config, now).is_ok()
        {
            return Ok(claims);
        }
        let form = [("token", token), ("token_type_hint", "access_token")];
        let s = &self.settings;
        let answer = tokio::time::timeout(
            super::keys::REFRESH_BUDGET,
            self.http.post_form(&s.url, &s.client_id, &s.client_secret, &form),
        )
        .await
        .map_err(|_| Refused::IntrospectionFailed("no answer in time".into()))?
        .map_err(|why| {
            tracing::warn!(cause = %why, "token introspection failed");
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
