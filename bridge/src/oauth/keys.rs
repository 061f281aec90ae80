//! The identity provider's signing keys: found through its metadata (RFC 8414, then OpenID
//! discovery), fetched only from the configured issuer's origin (or the configured JWKS URL),
//! cached, and refreshed when a token names a key the cache lacks.
//!
//! Every fetch has a bounded time and size, follows no redirect and is single-flight: callers
//! that need a refresh while one runs wait for it instead of starting their own. A refresh is
//! tried at most once per [`MIN_REFRESH_INTERVAL`], so a flood of tokens with invented key ids
//! cannot turn the bridge into a load generator against the IdP. When the IdP is down, the
//! cached keys keep serving the tokens they sign.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use reqwest::Url;
use serde_json::Value;

use super::Refused;
use super::http::Http;

/// The least time between two refreshes.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Keys older than this are refreshed on the next use (the old ones serve if that fails).
pub const MAX_KEY_AGE: Duration = Duration::from_secs(15 * 60);
/// The whole refresh (metadata and keys) gets at most this long.
pub const REFRESH_BUDGET: Duration = Duration::from_secs(5);
/// The most keys kept from one JWKS.
const MAX_KEYS: usize = 64;

/// One usable verification key.
struct Key {
    kid: Option<String>,
    /// The algorithms it may verify (its family, narrowed by its `alg` and curve).
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

#[derive(Default)]
struct KeySet {
    keys: Vec<Arc<Key>>,
    fetched_at: Option<Instant>,
}

/// The cache and how to refill it.
pub struct KeyStore {
    http: Http,
    issuer: String,
    jwks_url: Option<String>,
    current: RwLock<Arc<KeySet>>,
    /// Held while refreshing; holds when the last refresh was tried.
    refresh: tokio::sync::Mutex<Option<Instant>>,
    /// [`MIN_REFRESH_INTERVAL`], shorter in tests.
    min_refresh_interval: Duration,
}

impl KeyStore {
    /// A store for `issuer`'s keys (at `jwks_url` when given, else at its metadata's
    /// `jwks_uri`); nothing is fetched until a token needs a key.
    pub fn new(http: Http, issuer: String, jwks_url: Option<String>) -> KeyStore {
        KeyStore {
            http,
            issuer,
            jwks_url,
            current: RwLock::default(),
            refresh: tokio::sync::Mutex::new(None),
            min_refresh_interval: MIN_REFRESH_INTERVAL,
        }
    }

    /// Lets refreshes follow each other after `interval` (tests).
    #[cfg(test)]
    pub(super) fn set_min_refresh_interval(&mut self, interval: Duration) {
        self.min_refresh_interval = interval;
    }

    fn snapshot(&self) -> Arc<KeySet> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The key that verifies a token signed with `alg` under `kid`.
    pub async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, Refused> {
        let seen = self.snapshot();
        let found = find(&seen, kid, alg);
        let stale = seen.fetched_at.is_none_or(|at| at.elapsed() > MAX_KEY_AGE);
        if let Some(key) = &found {
            // Old keys still verify: one caller refreshes them, the others do not wait for it.
            if !stale || self.refresh.try_lock().is_err() {
                return Ok(key.key.clone());
            }
        }
        let outcome = self.refresh(&seen).await;
        let now = self.snapshot();
        match (find(&now, kid, alg), outcome) {
            (Some(key), _) => Ok(key.key.clone()),
            (None, Err(why)) if now.keys.is_empty() => Err(Refused::KeysUnavailable(why)),
            (None, _) => Err(Refused::UnknownKey),
        }
    }

    /// Refreshes the keys unless another caller did since `seen` was read, or the last try
    /// (successful or not) was less than [`MIN_REFRESH_INTERVAL`] ago. `Err` says why the keys could not be fetched.
    async fn refresh(&self, seen: &Arc<KeySet>) -> Result<(), String> {
        let mut last_try = self.refresh.lock().await;
        if !Arc::ptr_eq(seen, &self.snapshot()) {
            return Ok(());
        }
        if last_try.is_some_and(|at| at.elapsed() < self.min_refresh_interval) {
            return Err("the last fetch failed moments ago; not retried yet".into());
        }
        *last_try = Some(Instant::now());
        let fetched = match tokio::time::timeout(REFRESH_BUDGET, self.fetch()).await {
            Ok(fetched) => fetched,
            Err(_) => Err(format!("no answer within {} s", REFRESH_BUDGET.as_secs())),
        };
        match fetched {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "fetched the identity provider's signing keys");
                let set = Arc::new(KeySet { keys, fetched_at: Some(Instant::now()) });
                *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = set;
                Ok(())
            }
            Err(why) => {
                tracing::warn!(cause = %why, "cannot fetch the identity provider's signing keys; the cached ones stay");
                Err(why)
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<Arc<Key>>, String> {
        let jwks_url = match &self.jwks_url {
            Some(url) => url.clone(),
            None => self.discover_jwks_uri().await?,
        };
        let jwks = self.http.get_json(&jwks_url).await?;
        let Some(items) = jwks.get("keys").and_then(Value::as_array) else {
            return Err("the JWKS has no keys array".into());
        };
        let keys: Vec<Arc<Key>> = items.iter().filter_map(usable_key).take(MAX_KEYS).map(Arc::new).collect();
        if keys.is_empty() {
            return Err("the JWKS holds no usable signing key".into());
        }
        Ok(keys)
    }

    /// `jwks_uri` from the issuer's metadata: RFC 8414's well-known name first, then OpenID
    /// discovery's. The document must name the configured issuer exactly, and its `jwks_uri`
    /// must be on the issuer's origin.
    async fn discover_jwks_uri(&self) -> Result<String, String> {
        let issuer = Url::parse(&self.issuer).map_err(|e| format!("the issuer is not a URL: {e}"))?;
        let path = issuer.path().trim_end_matches('/');
        let origin = issuer.origin().ascii_serialization();
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ];
        let mut failures = Vec::new();
        for url in &candidates {
            match self.http.get_json(url).await {
                Ok(doc) => {
                    if doc.get("issuer").and_then(Value::as_str) != Some(self.issuer.as_str()) {
                        failures.push(format!("{url} names another issuer"));
                        continue;
                    }
                    let Some(jwks) = doc.get("jwks_uri").and_then(Value::as_str) else {
                        failures.push(format!("{url} has no jwks_uri"));
                        continue;
                    };
                    let same_origin = Url::parse(jwks).is_ok_and(|u| u.origin().ascii_serialization() == origin);
                    if !same_origin {
                        return Err(format!(
                            "the metadata's jwks_uri is not on the issuer's origin ({origin}); \
                             set SERVERFS_MCP_OAUTH_JWKS_URL if that is meant"
                        ));
                    }
                    return Ok(jwks.to_owned());
                }
                Err(why) => failures.push(why),
            }
        }
        Err(format!("no usable authorization server metadata: {}", failures.join("; ")))
    }
}

/// The cached key for `kid` and `alg`: the one with that id, or, for a token naming no key,
/// the only key that can verify `alg`.
fn find(set: &KeySet, kid: Option<&str>, alg: Algorithm) -> Option<Arc<Key>> {
    let mut fitting = set.keys.iter().filter(|k| k.algorithms.contains(&alg));
    match kid {
        Some(kid) => fitting.find(|k| k.kid.as_deref() == Some(kid)).cloned(),
        None => {
            let first = fitting.next()?;
            fitting.next().is_none().then(|| Arc::clone(first))
        }
    }
}

/// A JWKS entry as a verification key, or `None` for one that is not (an encryption key, a
/// symmetric key, a malformed one, an algorithm outside the accepted ones).
fn usable_key(value: &Value) -> Option<Key> {
    let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let mut algorithms: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => {
            super::ACCEPTED_ALGORITHMS.iter().copied().filter(|a| a.family() == AlgorithmFamily::Rsa).collect()
        }
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => vec![Algorithm::EdDSA],
        // Symmetric keys never verify anything here: a public JWKS cannot hold a secret.
        _ => return None,
    };
    if let Some(declared) = jwk.common.key_algorithm {
        let declared = accepted_algorithm(declared)?;
        algorithms.retain(|a| *a == declared);
    }
    if algorithms.is_empty() {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key { kid: jwk.common.key_id, algorithms, key })
}

/// The signing algorithm a JWK's `alg` names, if it is one this bridge accepts.
fn accepted_algorithm(alg: KeyAlgorithm) -> Option<Algorithm> {
    let name = format!("{alg:?}");
    super::ACCEPTED_ALGORITHMS.iter().copied().find(|a| format!("{a:?}") == name)
}
