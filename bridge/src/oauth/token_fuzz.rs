//! Fuzz target of OAuth access tokens (`fuzz/corpus/oauth/`): mutated headers and claims,
//! signed with the stand-in IdP's real key or carrying a made-up signature, through the whole
//! [`Verifier::authenticate`].
//!
//! Properties: nothing panics; a made-up signature is never accepted; an accepted token has an
//! accepted algorithm, the configured issuer exactly, the resource among its audiences, an
//! `exp` to come and no `nbf` to come (with the leeway), a usable subject that is its
//! principal, and a role some claim or the subject list grants.

use std::sync::Arc;

use jsonwebtoken::{Algorithm, EncodingKey};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::tests::{RESOURCE, b64, config};
use super::{Http, Verifier};
use crate::config::oauth::OAuthConfig;
use crate::mutate::{self, Corpus};

const KEY: &[u8] = include_bytes!("testdata/rsa.pem");

/// A case's token: its header and claims as written (mutated JSON is kept verbatim), signed
/// with the IdP's key when the case says `sign`, else with its own `signature`.
fn token(case: &Value, key: &EncodingKey) -> Option<(String, bool)> {
    let header = case.get("header")?;
    let claims = case.get("claims")?;
    let message = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    if case.get("sign") == Some(&Value::Bool(true)) {
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), key, Algorithm::RS256).ok()?;
        Some((format!("{message}.{signature}"), true))
    } else {
        let signature = case.get("signature").and_then(Value::as_str).unwrap_or("");
        Some((format!("{message}.{signature}"), false))
    }
}

fn check(
    case: &Value,
    accepted: &Result<super::Holder, super::Refused>,
    signed: bool,
    issuer: &str,
) -> Result<(), TestCaseError> {
    let Ok(holder) = accepted else {
        return Ok(());
    };
    prop_assert!(signed, "a made-up signature was accepted: {case}");
    let (header, claims) = (&case["header"], &case["claims"]);
    prop_assert_eq!(header["alg"].as_str(), Some("RS256"), "{}", case);
    prop_assert_eq!(claims["iss"].as_str(), Some(issuer), "{}", case);
    let aud_ok = match &claims["aud"] {
        Value::String(a) => a == RESOURCE,
        Value::Array(items) => items.iter().any(|a| a.as_str() == Some(RESOURCE)),
        _ => false,
    };
    prop_assert!(aud_ok, "accepted for another audience: {case}");
    let now = jsonwebtoken::get_current_timestamp() as f64;
    prop_assert!(claims["exp"].as_f64().is_some_and(|exp| exp + 30.0 > now), "accepted expired: {case}");
    prop_assert!(claims.get("nbf").is_none_or(|nbf| nbf.as_f64().is_some_and(|nbf| nbf - 30.0 <= now)), "{case}");
    let sub = claims["sub"].as_str().unwrap_or_default();
    prop_assert_eq!(&holder.principal, &format!("oauth:{sub}"));
    let spelled = format!("agent-bridge:{}", holder.role.as_str());
    prop_assert!(claims.to_string().contains(&spelled) || sub == "root", "{:?} from {case}", holder.role);
    Ok(())
}

#[test]
fn fuzz_oauth_token() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let key = EncodingKey::from_rsa_pem(KEY).expect("the test key");
    let idp = Arc::new(e2e::idp::StandinIdp::default());
    let (issuer, _server) = runtime.block_on(idp.serve());
    let mut jwk =
        serde_json::to_value(jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap()).unwrap();
    jwk["kid"] = json!("fuzz-1");
    idp.publish(&issuer, &[jwk]);
    let config =
        OAuthConfig { role_claim: Some("realm_access.roles".into()), admins: vec!["root".into()], ..config(&issuer) };
    let verifier = Verifier::new(config, Http::new(true).expect("a client"));
    let raw = Corpus::load("oauth", &["RS256", "HS256", "none", "agent-bridge:admin", "realm_access", "aud", "exp"]);
    let seeds = raw.seeds.iter().map(|s| String::from_utf8_lossy(s).replace("$ISSUER", &issuer).into_bytes()).collect();
    let corpus = Corpus::new(seeds, &[]);
    mutate::run("oauth", mutate::json_lines(&corpus), |line| {
        let Ok(case) = serde_json::from_slice::<Value>(&line) else {
            return Ok(());
        };
        let Some((token, signed)) = token(&case, &key) else {
            return Ok(());
        };
        let accepted = runtime.block_on(verifier.authenticate(Some(&format!("Bearer {token}"))));
        check(&case, &accepted, signed, &issuer)
    });
}
