//! RFC 7662 introspection of opaque access tokens: the IdP says whether a token is active and
//! what it carries; the bridge still checks `aud` (required), `iss` (when given), `exp`
//! (required) and `nbf` itself. An active answer is remembered for at most [`REMEMBER`] (never
//! past `exp`), keyed by the token's SHA-256, so a caller's polling does not become one
//! introspection per call; the IdP's "not active" is remembered as long, so the same made-up
//! token is asked about once. At most [`MAX_IN_FLIGHT`] introspections run at once, so a flood
//! of made-up opaque tokens cannot turn the bridge into a load generator against the IdP; the
//! others wait their turn in arrival order (at most [`MAX_WAITING`] of them, each at most
//! [`WAIT_LIMIT`]), so a flood delays a valid new token behind it instead of getting it refused
//! the moment every slot is busy. A failure is logged at most once per [`WARN_EVERY`].

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
/// The most introspections waiting for a slot; past that a token is refused at once.
pub const MAX_WAITING: usize = 256;
/// How long an introspection waits for a slot.
pub const WAIT_LIMIT: Duration = Duration::from_secs(3);
/// The least time between two warnings about failed introspections.
pub const WARN_EVERY: Duration = Duration::from_secs(30);
/// The most answers remembered.
const MAX_REMEMBERED: usize = 4096;

/// Answers by the SHA-256 of their token, with when they were given: the claims of an active
/// token, or `None` for one the IdP said is not active.
type Remembered = HashMap<[u8; 32], (Instant, Option<Map<String, Value>>)>;

pub struct Introspector {
    http: Http,
    settings: Introspection,
    remembered: Mutex<Remembered>,
    in_flight: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
    last_warning: Mutex<Option<Instant>>,
}

impl Introspector {
    pub fn new(http: Http, settings: Introspection) -> Introspector {
        Introspector {
            http,
            settings,
            remembered: Mutex::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            last_warning: Mutex::default(),
        }
    }

    /// The claims of an active token issued for this resource.
    pub async fn introspect(&self, token: &str, config: &OAuthConfig, now: i64) -> Result<Map<String, Value>, Refused> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        match self.recall(&digest) {
            Some(Some(claims)) if check_times(&claims, config, now).is_ok() => return Ok(claims),
            Some(None) => return Err(Refused::Inactive),
            _ => {}
        }
        let _permit = self.slot().await?;
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
            self.remember(digest, None);
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
        self.remember(digest, Some(&claims));
        Ok(claims)
    }

    /// A slot to introspect in, waited for in arrival order (bounded in number and time).
    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Refused> {
        use std::sync::atomic::Ordering;
        if let Ok(permit) = self.in_flight.try_acquire() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Refused::IntrospectionFailed(format!("{MAX_WAITING} introspections wait already")));
        }
        let permit = tokio::time::timeout(WAIT_LIMIT, self.in_flight.acquire()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match permit {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Refused::IntrospectionFailed(format!(
                "no introspection slot within {} s ({MAX_IN_FLIGHT} in flight)",
                WAIT_LIMIT.as_secs()
            ))),
        }
    }

    fn warn(&self, why: &str) {
        let mut last = self.last_warning.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(cause = %why, "token introspection failed (said once per 30 s at most)");
        }
    }

    fn recall(&self, digest: &[u8; 32]) -> Option<Option<Map<String, Value>>> {
        let remembered = self.remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        remembered.get(digest).filter(|(at, _)| at.elapsed() < REMEMBER).map(|(_, claims)| claims.clone())
    }

    fn remember(&self, digest: [u8; 32], claims: Option<&Map<String, Value>>) {
        let mut remembered = self.remembered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, (at, _)| at.elapsed() < REMEMBER);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(digest, (Instant::now(), claims.cloned()));
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

    #[tokio::test(start_paused = true)]
    async fn past_the_in_flight_cap_a_token_waits_its_turn_then_is_refused_without_asking_the_idp() {
        let settings = Introspection {
            url: "http://127.0.0.1:9/introspect".into(),
            client_id: "c".into(),
            client_secret: "s".into(),
        };
        let introspector = Introspector::new(Http::new(true).unwrap(), settings);
        let config = crate::oauth::tests::config("http://127.0.0.1:9");
        let held = introspector.in_flight.acquire_many(MAX_IN_FLIGHT as u32).await.unwrap();
        let refused = introspector.introspect("opaque-token", &config, 0).await.unwrap_err();
        assert!(
            matches!(&refused, Refused::IntrospectionFailed(why) if why.contains("no introspection slot")),
            "{refused:?}"
        );
        drop(held);
        // With room again it does ask (here: nobody answers on port 9).
        let refused = introspector.introspect("opaque-token", &config, 0).await.unwrap_err();
        assert!(matches!(&refused, Refused::IntrospectionFailed(why) if !why.contains("slot")), "{refused:?}");
    }

    /// A flood of made-up opaque tokens holds every slot while the IdP takes its time to say
    /// "not active"; a valid new token that comes after it waits its turn and is accepted
    /// (it used to be refused the moment the slots were full). The same made-up token twice is
    /// asked about once.
    #[tokio::test]
    async fn a_flood_of_made_up_tokens_delays_a_valid_one_and_never_gets_it_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/introspect", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    while !String::from_utf8_lossy(&got).contains("token=") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&got).into_owned();
                    let body = if text.contains("token=valid-one") {
                        serde_json::json!({ "active": true, "aud": "https://bridge.example/mcp-oauth", "exp": 4_000_000_000u64, "sub": "alice", "scope": "agent-bridge:operator" }).to_string()
                    } else {
                        tokio::time::sleep(Duration::from_millis(150)).await;
                        "{\"active\":false}".to_owned()
                    };
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        let settings = Introspection { url, client_id: "c".into(), client_secret: "s".into() };
        let introspector = std::sync::Arc::new(Introspector::new(Http::new(true).unwrap(), settings));
        let mut config = crate::oauth::tests::config("http://127.0.0.1:9");
        config.resource = "https://bridge.example/mcp-oauth".into();
        let config = std::sync::Arc::new(config);
        let mut flood = tokio::task::JoinSet::new();
        for n in 0..48 {
            let (i, c) = (std::sync::Arc::clone(&introspector), std::sync::Arc::clone(&config));
            flood.spawn(async move { i.introspect(&format!("made-up-{n}"), &c, 0).await });
        }
        tokio::task::yield_now().await;
        let valid = introspector.introspect("valid-one", &config, 0).await;
        assert!(valid.is_ok(), "{valid:?}");
        while let Some(r) = flood.join_next().await {
            assert!(matches!(r.unwrap(), Err(Refused::Inactive)));
        }
        let before = asked.load(std::sync::atomic::Ordering::SeqCst);
        assert!(matches!(introspector.introspect("made-up-0", &config, 0).await, Err(Refused::Inactive)));
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            before,
            "a known made-up token is not asked about again"
        );
    }
}
