//! The verifier against a real HTTP identity provider stand-in on 127.0.0.1 (the harness's
//! `StandinIdp`: metadata and a JWKS over HTTP/1.1, its requests counted), with tokens signed by the
//! committed test keys in `testdata/` (test-only keys, never used anywhere else). The
//! end-to-end suite runs the same checks against the real `oidc-provider`.

use std::sync::Arc;
use std::time::Duration;

use e2e::idp::StandinIdp as Idp;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::*;
use crate::config::oauth::OAuthConfig;

const RSA: &[u8] = include_bytes!("testdata/rsa.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("testdata/rsa.pub.pem");
const EC: &[u8] = include_bytes!("testdata/ec.pem");
const ED: &[u8] = include_bytes!("testdata/ed25519.pem");
pub(super) const RESOURCE: &str = "https://front.example/mcp-oauth";

/// A signing key, its JWK with a key id.
fn key(pem: &[u8], alg: Algorithm, kid: &str) -> (EncodingKey, Value) {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(pem),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem),
        _ => EncodingKey::from_ed_pem(pem),
    }
    .unwrap();
    let mut jwk = serde_json::to_value(Jwk::from_encoding_key(&key, alg).unwrap()).unwrap();
    jwk["kid"] = json!(kid);
    jwk["use"] = json!("sig");
    (key, jwk)
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn sign(key: &EncodingKey, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// Unpadded base64url (the JOSE encoding), for tokens made by hand.
pub(super) fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The settings the tests start from: `issuer`, [`RESOURCE`], role scopes only, 30 s leeway.
pub(super) fn config(issuer: &str) -> OAuthConfig {
    OAuthConfig {
        issuer: issuer.to_owned(),
        resource: RESOURCE.into(),
        jwks_url: None,
        scopes: vec!["agent-bridge:operator".into()],
        role_prefix: "agent-bridge:".into(),
        role_claim: None,
        admins: vec![],
        operators: vec![],
        viewers: vec![],
        workdirs: None,
        leeway_seconds: 30,
        introspection: None,
    }
}

struct Setup {
    idp: Arc<Idp>,
    issuer: String,
    verifier: Verifier,
    rsa: EncodingKey,
    _server: tokio::task::JoinHandle<()>,
}

impl Setup {
    fn claims(&self, sub: &str) -> Value {
        json!({
            "iss": self.issuer, "aud": RESOURCE, "sub": sub, "exp": now() + 300, "iat": now(),
            "scope": "openid agent-bridge:operator", "email": format!("{sub}@example.test"),
        })
    }

    fn token(&self, claims: &Value) -> String {
        sign(&self.rsa, Algorithm::RS256, Some("rsa-1"), claims)
    }

    async fn check(&self, token: &str) -> Result<Holder, Refused> {
        self.verifier.authenticate(Some(&format!("Bearer {token}"))).await
    }
}

/// An IdP with RFC 8414 metadata and a JWKS of the three test keys (plus an encryption key
/// and a symmetric one, which must be ignored).
async fn setup() -> Setup {
    let idp = Arc::new(Idp::default());
    let (issuer, server) = idp.serve().await;
    let (rsa, rsa_jwk) = key(RSA, Algorithm::RS256, "rsa-1");
    let (_, ec_jwk) = key(EC, Algorithm::ES256, "ec-1");
    let (_, ed_jwk) = key(ED, Algorithm::EdDSA, "ed-1");
    let mut enc = rsa_jwk.clone();
    enc["use"] = json!("enc");
    enc["kid"] = json!("enc-1");
    let oct = json!({"kty": "oct", "k": b64(RSA_PUBLIC), "kid": "oct-1", "alg": "HS256"});
    idp.publish(&issuer, &[rsa_jwk, ec_jwk, ed_jwk, enc, oct]);
    let config = OAuthConfig { admins: vec!["boss".into()], ..config(&issuer) };
    let verifier = Verifier::new(config, Http::new(true).unwrap());
    Setup { idp, issuer, verifier, rsa, _server: server }
}

#[tokio::test]
async fn a_valid_token_of_each_algorithm_names_its_holder() {
    let s = setup().await;
    let holder = s.check(&s.token(&s.claims("alice"))).await.expect("a valid RS256 token");
    assert_eq!(
        holder,
        Holder { principal: "oauth:alice".into(), display: Some("alice@example.test".into()), role: Role::Operator }
    );
    let (ec, _) = key(EC, Algorithm::ES256, "ec-1");
    let (ed, _) = key(ED, Algorithm::EdDSA, "ed-1");
    let mut claims = s.claims("bob");
    claims["scope"] = json!("agent-bridge:viewer");
    let es = sign(&ec, Algorithm::ES256, Some("ec-1"), &claims);
    assert_eq!(s.check(&es).await.expect("ES256").role, Role::Viewer);
    let mut claims = s.claims("boss");
    claims["scope"] = json!("openid");
    let eddsa = sign(&ed, Algorithm::EdDSA, Some("ed-1"), &claims);
    assert_eq!(s.check(&eddsa).await.expect("EdDSA").role, Role::Admin, "a listed subject");
    // An audience list containing the resource, and a token naming no key (one RSA key fits).
    let mut claims = s.claims("carol");
    claims["aud"] = json!(["https://other.example", RESOURCE]);
    let no_kid = sign(&s.rsa, Algorithm::RS256, None, &claims);
    assert_eq!(s.check(&no_kid).await.expect("aud list, no kid").principal, "oauth:carol");
    assert_eq!(s.idp.hits("/jwks"), 1, "the keys were fetched once and cached");
}

#[tokio::test]
async fn every_kind_of_bad_token_is_refused_with_its_reason() {
    let s = setup().await;
    let good = s.claims("alice");
    let with = |patch: Value| {
        let mut c = good.clone();
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        s.token(&c)
    };
    let valid = s.token(&good);
    let (head, rest) = valid.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    let mut flipped = signature.as_bytes().to_vec();
    flipped[10] = if flipped[10] == b'A' { b'B' } else { b'A' };
    let bad_signature = format!("{head}.{payload}.{}", String::from_utf8(flipped).unwrap());
    let none = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
    // The classic confusion: HS256 "signed" with the RSA public key as the secret.
    let hs_header = Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::HS256) };
    let hs256 = jsonwebtoken::encode(&hs_header, &good, &EncodingKey::from_secret(RSA_PUBLIC).unwrap()).unwrap();
    let hs_oct = jsonwebtoken::encode(
        &Header { kid: Some("oct-1".into()), ..Header::new(Algorithm::HS256) },
        &good,
        &EncodingKey::from_secret(RSA_PUBLIC).unwrap(),
    )
    .unwrap();
    let mut other_payload = good.clone();
    other_payload["sub"] = json!("mallory");
    let swapped = format!("{head}.{}.{signature}", b64(other_payload.to_string().as_bytes()));
    let enc_kid = sign(&s.rsa, Algorithm::RS256, Some("enc-1"), &good);
    let cases: Vec<(&str, String, Refused)> = vec![
        ("expired beyond the leeway", with(json!({"exp": now() - 120})), Refused::Expired),
        ("not valid yet", with(json!({"nbf": now() + 600})), Refused::NotYetValid),
        ("another audience", with(json!({"aud": "https://front.example/mcp"})), Refused::Audience),
        ("another issuer", with(json!({"iss": "https://evil.example"})), Refused::Issuer),
        ("the issuer in an array (found by the fuzz target)", with(json!({"iss": [s.issuer]})), Refused::Issuer),
        ("no exp", with(json!({"exp": null})), Refused::MissingClaim("exp")),
        ("no aud", with(json!({"aud": null})), Refused::MissingClaim("aud")),
        ("no sub", with(json!({"sub": null})), Refused::MissingClaim("sub")),
        ("a subject with spaces", with(json!({"sub": "a b"})), Refused::Subject),
        ("a bad signature", bad_signature, Refused::Signature),
        ("another payload under the signature", swapped, Refused::Signature),
        ("alg none", none, Refused::Algorithm),
        ("HS256 with the public key", hs256, Refused::Algorithm),
        ("HS256 naming the JWKS's symmetric key", hs_oct, Refused::Algorithm),
        ("an encryption key's id", enc_kid, Refused::UnknownKey),
        ("an API key", "abk_0123456789abcdef".into(), Refused::Malformed),
        ("garbage with two dots", "a.b.c".into(), Refused::Malformed),
    ];
    for (what, token, expected) in cases {
        let refused = s.check(&token).await.expect_err(what);
        assert_eq!(refused, expected, "{what}");
    }
    let no_role = with(json!({"scope": "openid email"}));
    assert_eq!(s.check(&no_role).await.unwrap_err(), Refused::NoRole { principal: "oauth:alice".into() });
    assert_eq!(s.verifier.authenticate(None).await.unwrap_err(), Refused::Missing);
    let basic = s.verifier.authenticate(Some(&format!("Basic {valid}"))).await.unwrap_err();
    assert_eq!(basic, Refused::Malformed);
    // Within the leeway an expired token still passes.
    assert!(s.check(&with(json!({"exp": now() - 10}))).await.is_ok());
}

#[tokio::test]
async fn invented_keys_do_not_flood_the_idp_and_a_published_one_is_fetched() {
    let mut s = setup().await;
    assert!(s.check(&s.token(&s.claims("alice"))).await.is_ok());
    assert_eq!(s.idp.hits("/jwks"), 1);
    // A flood of tokens naming keys nobody published: no fetch within the interval.
    for i in 0..50 {
        let token = sign(&s.rsa, Algorithm::RS256, Some(&format!("invented-{i}")), &s.claims("alice"));
        assert_eq!(s.check(&token).await.unwrap_err(), Refused::UnknownKey);
    }
    assert_eq!(s.idp.hits("/jwks"), 1, "at most one fetch per interval");
    // One token string throughout: a token made a second later is a different token.
    let alice = s.token(&s.claims("alice"));
    assert!(s.check(&alice).await.is_ok(), "the cached keys keep working");
    // The IdP rotates: a token naming the new key makes the bridge fetch once it may.
    s.verifier.keys.set_min_refresh_interval(Duration::ZERO);
    let (_, mut rotated) = key(RSA, Algorithm::RS256, "rsa-2");
    rotated["kid"] = json!("rsa-2");
    s.idp.set("/jwks", 200, &json!({"keys": [rotated]}));
    let token = sign(&s.rsa, Algorithm::RS256, Some("rsa-2"), &s.claims("alice"));
    assert!(s.check(&token).await.is_ok(), "the rotated key was fetched");
    assert_eq!(s.idp.hits("/jwks"), 2);
    // A token verified before stands until its exp (at most 5 min); a new one under a key
    // the IdP withdrew does not.
    assert!(s.check(&alice).await.is_ok(), "remembered");
    let old = sign(&s.rsa, Algorithm::RS256, Some("rsa-1"), &s.claims("dave"));
    assert_eq!(s.check(&old).await.unwrap_err(), Refused::UnknownKey, "a key the IdP withdrew is gone");
}

#[tokio::test]
async fn with_the_idp_down_cached_keys_serve_and_an_unknown_key_is_refused_at_once() {
    let mut s = setup().await;
    assert!(s.check(&s.token(&s.claims("alice"))).await.is_ok());
    s._server.abort();
    let _ = (&mut s._server).await;
    assert!(s.check(&s.token(&s.claims("alice"))).await.is_ok(), "the cached key still verifies");
    let unknown = sign(&s.rsa, Algorithm::RS256, Some("rotated"), &s.claims("alice"));
    let answered = tokio::time::timeout(Duration::from_secs(20), s.check(&unknown)).await;
    assert_eq!(answered.expect("an answer, not a hang").unwrap_err(), Refused::UnknownKey);
}

#[tokio::test]
async fn discovery_must_name_the_issuer_and_keep_the_keys_on_its_origin() {
    let s = setup().await;
    s.idp.set(
        "/.well-known/oauth-authorization-server",
        200,
        &json!({"issuer": "https://evil.example", "jwks_uri": format!("{}/jwks", s.issuer)}),
    );
    let refused = s.check(&s.token(&s.claims("alice"))).await.unwrap_err();
    assert!(matches!(refused, Refused::KeysUnavailable(ref why) if why.contains("another issuer")), "{refused:?}");

    // OpenID discovery is the fallback, and a jwks_uri elsewhere is refused.
    let s = setup().await;
    s.idp.set("/.well-known/oauth-authorization-server", 404, &json!({}));
    s.idp.set(
        "/.well-known/openid-configuration",
        200,
        &json!({"issuer": s.issuer, "jwks_uri": "https://keys.elsewhere.example/jwks"}),
    );
    let refused = s.check(&s.token(&s.claims("alice"))).await.unwrap_err();
    assert!(matches!(refused, Refused::KeysUnavailable(ref why) if why.contains("origin")), "{refused:?}");
    assert_eq!(s.idp.hits("/.well-known/openid-configuration"), 1);

    let s = setup().await;
    s.idp.set("/.well-known/oauth-authorization-server", 404, &json!({}));
    s.idp.set(
        "/.well-known/openid-configuration",
        200,
        &json!({"issuer": s.issuer, "jwks_uri": format!("{}/jwks", s.issuer)}),
    );
    assert!(s.check(&s.token(&s.claims("alice"))).await.is_ok(), "OpenID discovery");
}

#[tokio::test]
async fn the_metadata_document_names_the_resource_and_its_issuer() {
    let s = setup().await;
    let doc = s.verifier.metadata_document();
    assert_eq!(doc["resource"], RESOURCE);
    assert_eq!(doc["authorization_servers"], json!([s.issuer]));
    assert_eq!(doc["scopes_supported"], json!(["agent-bridge:operator"]));
    assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    assert_eq!(
        s.verifier.config().metadata_url(),
        "https://front.example/.well-known/oauth-protected-resource/mcp-oauth"
    );
}

mod fuzz {
    //! Tokens from the outside, made up: the verifier answers each with a refusal and never
    //! panics (the IdP is unreachable, so no made-up token can be verified either).
    use proptest::prelude::*;

    use super::*;

    fn verifier() -> Verifier {
        let config = OAuthConfig { role_claim: Some("realm_access.roles".into()), ..config("http://127.0.0.1:9") };
        Verifier::new(config, Http::new(true).unwrap())
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9_-]{0,40}",
            prop::sample::select(vec!["none", "HS256", "RS256", "ES256", "EdDSA", "RS1", "", "rs256"])
                .prop_map(|alg| b64(format!(r#"{{"alg":"{alg}","kid":"k"}}"#).as_bytes())),
            any::<Vec<u8>>().prop_map(|bytes| b64(&bytes)),
            ".{0,20}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
        #[test]
        fn made_up_tokens_are_refused_without_panicking(
            scheme in prop::sample::select(vec!["Bearer", "bearer", "Basic", "", "Bearer  "]),
            parts in prop::collection::vec(segment(), 1..5),
        ) {
            static RUNTIME: std::sync::OnceLock<(tokio::runtime::Runtime, Verifier)> = std::sync::OnceLock::new();
            let (runtime, verifier) = RUNTIME.get_or_init(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                (runtime, verifier())
            });
            let credential = format!("{scheme} {}", parts.join("."));
            let outcome = runtime.block_on(verifier.authenticate(Some(&credential)));
            prop_assert!(outcome.is_err(), "{credential:?} was accepted");
        }
    }
}

/// An ID token is for the client that asked for it, not a bearer for this resource, even when
/// its audience holds the resource: refused by its `nonce` or a `typ` that is not an access
/// token's. The same claims as an access token (`at+jwt`, or `JWT`) pass.
#[tokio::test]
async fn an_id_token_is_not_an_access_token() {
    let s = setup().await;
    let mut id_token = s.claims("alice");
    id_token["nonce"] = json!("n-0S6_WzA2Mj");
    assert!(matches!(s.check(&s.token(&id_token)).await, Err(Refused::NotAnAccessToken)));
    let typed = |typ: &str| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("rsa-1".into());
        header.typ = Some(typ.to_owned());
        jsonwebtoken::encode(&header, &s.claims("alice"), &s.rsa).unwrap()
    };
    assert!(matches!(s.check(&typed("id+jwt")).await, Err(Refused::NotAnAccessToken)));
    assert!(matches!(s.check(&typed("logout+jwt")).await, Err(Refused::NotAnAccessToken)));
    for ok in ["at+jwt", "application/at+jwt", "JWT"] {
        assert_eq!(s.check(&typed(ok)).await.expect(ok).principal, "oauth:alice", "{ok}");
    }
    assert_eq!(Refused::NotAnAccessToken.audit_code(), crate::error::code::OAUTH_NOT_AN_ACCESS_TOKEN);
}
