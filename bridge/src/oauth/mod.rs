//! OAuth access tokens on `/mcp-oauth`: the bridge as a resource server for the operator's
//! identity provider (MCP authorization, RFC 9728, RFC 8707, RFC 9068). It never issues tokens.
//!
//! A JWT is accepted only when its header names an asymmetric algorithm this bridge allows
//! (RS*, PS*, ES256, ES384, EdDSA: never `none`, never HS*), its signature verifies with one
//! of the IdP's published keys ([`keys`]), `iss` is the configured issuer exactly, `aud`
//! contains this resource, `exp` has not passed and `nbf` has (with the configured leeway),
//! and its subject maps to a role ([`claims`]). An opaque token is accepted only through the
//! IdP's introspection endpoint when one is configured (RFC 7662). Anything else is a
//! [`Refused`] with a reason: the caller sees it as `UNAUTHENTICATED`, the audit row keeps it.
//!
//! A verified JWT's holder is remembered by the token's SHA-256 until its `exp`, or
//! [`REMEMBER_SECONDS`] at most, so a client polling with one token pays for one signature
//! check, not one per call; a refusal is never remembered.

use std::collections::HashMap;
use std::sync::Mutex;

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::config::Role;
use crate::config::oauth::OAuthConfig;

pub mod claims;
mod http;
mod introspect;
pub mod keys;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_fuzz;

pub use http::Http;

/// The algorithms a token may be signed with.
pub const ACCEPTED_ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The longest token looked at, in bytes.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// How long a verified token's holder is remembered at most, in seconds.
pub const REMEMBER_SECONDS: i64 = 300;
/// The most verified tokens remembered.
const MAX_REMEMBERED: usize = 4096;

/// Verified tokens by their SHA-256: the holder and until when (Unix seconds) it stands.
type Verified = HashMap<[u8; 32], (Holder, i64)>;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No `Authorization: Bearer <token>`.
    #[error("an access token is required: send Authorization: Bearer <token> from your identity provider")]
    Missing,
    /// Not a JWS compact token (and no introspection to ask).
    #[error("the token is not a JWT access token this resource can verify")]
    Malformed,
    /// The header names an algorithm outside [`ACCEPTED_ALGORITHMS`].
    #[error("the token's signing algorithm is not accepted (RS256, ES256, EdDSA and their kin only)")]
    Algorithm,
    /// The header names a key the IdP does not publish.
    #[error("the token is signed with a key the identity provider does not publish")]
    UnknownKey,
    /// The IdP's keys could not be fetched and none are cached.
    #[error("the identity provider's signing keys cannot be fetched right now")]
    KeysUnavailable(String),
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` has passed.
    #[error("the token has expired")]
    Expired,
    /// `nbf` has not come yet.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another issuer")]
    Issuer,
    /// `aud` does not contain this resource.
    #[error("the token was issued for another resource (aud)")]
    Audience,
    /// A required claim is absent.
    #[error("the token lacks the {0} claim")]
    MissingClaim(&'static str),
    /// An ID token (a `nonce`, or a `typ` that is not an access token's), not an access token.
    #[error("the token is an ID token, not an access token")]
    NotAnAccessToken,
    /// `sub` is not usable as a principal name.
    #[error("the token's subject is not usable (printable ASCII without spaces, at most 255 bytes)")]
    Subject,
    /// A valid token whose subject the mapping gives no role.
    #[error("the token's subject has no role on this bridge")]
    NoRole {
        /// The principal it would have been.
        principal: String,
    },
    /// Introspection says the token is not active.
    #[error("the identity provider says the token is not active")]
    Inactive,
    /// Introspection could not be done.
    #[error("the identity provider could not be asked about the token")]
    IntrospectionFailed(String),
}

impl Refused {
    /// The reason's code in the audit row (the caller sees `UNAUTHENTICATED`).
    pub fn audit_code(&self) -> &'static str {
        use crate::error::code;
        match self {
            Refused::Missing => code::UNAUTHENTICATED,
            Refused::Malformed => code::OAUTH_TOKEN_MALFORMED,
            Refused::NotAnAccessToken => code::OAUTH_NOT_AN_ACCESS_TOKEN,
            Refused::Algorithm => code::OAUTH_ALGORITHM_REFUSED,
            Refused::UnknownKey => code::OAUTH_UNKNOWN_KEY,
            Refused::KeysUnavailable(_) => code::OAUTH_KEYS_UNAVAILABLE,
            Refused::Signature => code::OAUTH_BAD_SIGNATURE,
            Refused::Expired => code::OAUTH_TOKEN_EXPIRED,
            Refused::NotYetValid => code::OAUTH_TOKEN_NOT_YET_VALID,
            Refused::Issuer => code::OAUTH_WRONG_ISSUER,
            Refused::Audience => code::OAUTH_WRONG_AUDIENCE,
            Refused::MissingClaim(_) => code::OAUTH_MISSING_CLAIM,
            Refused::Subject => code::OAUTH_BAD_SUBJECT,
            Refused::NoRole { .. } => code::OAUTH_NO_ROLE,
            Refused::Inactive => code::OAUTH_TOKEN_INACTIVE,
            Refused::IntrospectionFailed(_) => code::OAUTH_INTROSPECTION_FAILED,
        }
    }
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The principal: `oauth:<sub>`.
    pub principal: String,
    /// A name to show (`email` or `preferred_username`), when the token has one.
    pub display: Option<String>,
    /// The role the mapping gives.
    pub role: Role,
}

/// Checks `/mcp-oauth` tokens for one configured identity provider.
pub struct Verifier {
    config: OAuthConfig,
    keys: keys::KeyStore,
    introspection: Option<introspect::Introspector>,
    verified: Mutex<Verified>,
}

impl Verifier {
    /// A verifier for `config`, reaching the IdP with `http`.
    pub fn new(config: OAuthConfig, http: Http) -> Verifier {
        let keys = keys::KeyStore::new(http.clone(), config.issuer.clone(), config.jwks_url.clone());
        let introspection = config.introspection.clone().map(|i| introspect::Introspector::new(http, i));
        Verifier { config, keys, introspection, verified: Mutex::default() }
    }

    /// The settings.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// The Protected Resource Metadata document (RFC 9728) of `/mcp-oauth`.
    pub fn metadata_document(&self) -> Value {
        json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "scopes_supported": self.config.scopes,
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": ACCEPTED_ALGORITHMS.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>(),
            "resource_name": "agent-bridge",
        })
    }

    /// Checks a presented `Authorization` value and says whom it speaks for.
    pub async fn authenticate(&self, credential: Option<&str>) -> Result<Holder, Refused> {
        let credential = credential.map(str::trim).filter(|c| !c.is_empty()).ok_or(Refused::Missing)?;
        let token = match credential.split_once(char::is_whitespace) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => return Err(Refused::Malformed),
        };
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Refused::Malformed);
        }
        if token.bytes().filter(|b| *b == b'.').count() != 2 {
            return match &self.introspection {
                Some(introspection) => self.holder(&introspection.introspect(token, &self.config, self.now()).await?),
                None => Err(Refused::Malformed),
            };
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(holder) = self.recall(&digest) {
            return Ok(holder);
        }
        let claims = self.verify_jwt(token).await?;
        let holder = self.holder(&claims)?;
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(0);
        self.remember(digest, &holder, exp.min(self.now() + REMEMBER_SECONDS));
        Ok(holder)
    }

    /// The holder of a token verified before and still within its time.
    fn recall(&self, digest: &[u8; 32]) -> Option<Holder> {
        let now = self.now();
        let verified = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        verified.get(digest).filter(|(_, until)| now < *until).map(|(holder, _)| holder.clone())
    }

    fn remember(&self, digest: [u8; 32], holder: &Holder, until: i64) {
        let now = self.now();
        let mut verified = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if verified.len() >= MAX_REMEMBERED {
            verified.retain(|_, (_, until)| now < *until);
            if verified.len() >= MAX_REMEMBERED {
                verified.clear();
            }
        }
        verified.insert(digest, (holder.clone(), until));
    }

    fn now(&self) -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    /// The claims of a JWT whose signature, issuer, audience and times all check.
    async fn verify_jwt(&self, token: &str) -> Result<Map<String, Value>, Refused> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            // `none`, HS* spelled oddly, or any name the JOSE crate does not know.
            jsonwebtoken::errors::ErrorKind::Json(_) => Refused::Algorithm,
            _ => Refused::Malformed,
        })?;
        if !ACCEPTED_ALGORITHMS.contains(&header.alg) {
            return Err(Refused::Algorithm);
        }
        let key = self.keys.key_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.leeway_seconds;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::InvalidSignature => Refused::Signature,
                K::ExpiredSignature => Refused::Expired,
                K::ImmatureSignature => Refused::NotYetValid,
                K::InvalidIssuer => Refused::Issuer,
                K::InvalidAudience => Refused::Audience,
                K::MissingRequiredClaim(c) => Refused::MissingClaim(match c.as_str() {
                    "exp" => "exp",
                    "iss" => "iss",
                    "aud" => "aud",
                    _ => "sub",
                }),
                K::InvalidAlgorithm | K::InvalidAlgorithmName => Refused::Algorithm,
                _ => Refused::Malformed,
            }
        })?;
        // The JOSE crate takes an array `iss` holding the issuer; RFC 7519 says one string.
        if data.claims.get("iss").and_then(Value::as_str) != Some(self.config.issuer.as_str()) {
            return Err(Refused::Issuer);
        }
        // An ID token is for the client that asked for it, never a bearer for a resource: one
        // with this resource in its audience (some providers put the client there) is refused
        // by its shape (RFC 9068's `typ`, OpenID's `nonce`).
        let typ_ok = header
            .typ
            .as_deref()
            .is_none_or(|t| ["at+jwt", "application/at+jwt", "jwt"].iter().any(|ok| t.eq_ignore_ascii_case(ok)));
        if !typ_ok || data.claims.contains_key("nonce") {
            return Err(Refused::NotAnAccessToken);
        }
        Ok(data.claims)
    }

    /// The holder of verified claims, or [`Refused::NoRole`].
    fn holder(&self, claims: &Map<String, Value>) -> Result<Holder, Refused> {
        let subject = claims::subject(claims)?;
        let principal = format!("oauth:{subject}");
        match claims::role_of(&self.config, claims, &subject) {
            Some(role) => Ok(Holder { principal, display: claims::display(claims), role }),
            None => Err(Refused::NoRole { principal }),
        }
    }
}
