//! What a verified token's claims say about its holder: the subject, a name to show, and the
//! role the operator's mapping gives it (the highest one any source grants).
//!
//! Claims come from the identity provider, signed, but their shapes vary by IdP (`scope` as a
//! space-separated string, Entra's `scp`, `roles` and `groups` as arrays, Keycloak's nested
//! `realm_access.roles`): anything of another shape grants nothing, and nothing here panics.

use serde_json::{Map, Value};

use super::Refused;
use crate::config::Role;
use crate::config::oauth::OAuthConfig;

/// The longest subject accepted, in bytes.
pub const MAX_SUBJECT_BYTES: usize = 255;

/// The longest display name kept, in characters.
pub const MAX_DISPLAY_CHARS: usize = 64;

/// The token's `sub`: printable ASCII without spaces, at most [`MAX_SUBJECT_BYTES`].
pub fn subject(claims: &Map<String, Value>) -> Result<String, Refused> {
    let sub = claims.get("sub").and_then(Value::as_str).ok_or(Refused::MissingClaim("sub"))?;
    let usable = (1..=MAX_SUBJECT_BYTES).contains(&sub.len()) && sub.bytes().all(|b| b.is_ascii_graphic());
    if usable { Ok(sub.to_owned()) } else { Err(Refused::Subject) }
}

/// A name to show beside the subject: `email`, else `preferred_username`, in a safe shape
/// (at most [`MAX_DISPLAY_CHARS`] of `[A-Za-z0-9@._+-]`, anything else `_`).
pub fn display(claims: &Map<String, Value>) -> Option<String> {
    let raw = ["email", "preferred_username"].iter().find_map(|c| claims.get(*c).and_then(Value::as_str))?;
    let safe: String = raw
        .chars()
        .take(MAX_DISPLAY_CHARS)
        .map(|c| if c.is_ascii_alphanumeric() || "@._+-".contains(c) { c } else { '_' })
        .collect();
    (!safe.is_empty()).then_some(safe)
}

/// The scopes the token carries: `scope` (RFC 9068, space-separated) and `scp` (a string or
/// an array of strings, as Entra ID and Okta send it).
pub fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut scopes: Vec<&str> = claims.get("scope").and_then(Value::as_str).unwrap_or("").split(' ').collect();
    scopes.extend(strings(claims.get("scp")).into_iter().flat_map(|s| s.split(' ')));
    scopes.retain(|s| !s.is_empty());
    scopes
}

/// The strings of a claim value: a string, or the strings of an array (other items ignored).
fn strings(value: Option<&Value>) -> Vec<&str> {
    match value {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The values of the claim at a dotted path (`realm_access.roles`); a claim whose own name
/// has dots (`https://example.com/roles`) is found too, tried first.
pub fn claim_values<'a>(claims: &'a Map<String, Value>, path: &str) -> Vec<&'a str> {
    if let Some(value) = claims.get(path) {
        return strings(Some(value));
    }
    let mut parts = path.split('.');
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let mut value = claims.get(first);
    for part in parts {
        value = value.and_then(|v| v.get(part));
    }
    strings(value)
}

/// The role `<prefix><role>` names, if it names one.
fn prefixed_role(value: &str, prefix: &str) -> Option<Role> {
    value.strip_prefix(prefix).and_then(|rest| match rest {
        "viewer" => Some(Role::Viewer),
        "operator" => Some(Role::Operator),
        "admin" => Some(Role::Admin),
        _ => None,
    })
}

/// The highest role the mapping grants `subject` with these claims, or `None`: a scope
/// `<prefix><role>`, a value `<prefix><role>` of the role claim, or the subject lists.
pub fn role_of(config: &OAuthConfig, claims: &Map<String, Value>, subject: &str) -> Option<Role> {
    let prefix = config.role_prefix.as_str();
    let from_scopes = scopes(claims).into_iter().filter_map(|s| prefixed_role(s, prefix));
    let from_claim = config
        .role_claim
        .as_deref()
        .map(|path| claim_values(claims, path))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| prefixed_role(v, prefix));
    let listed = [(Role::Admin, &config.admins), (Role::Operator, &config.operators), (Role::Viewer, &config.viewers)]
        .into_iter()
        .filter(|(_, subjects)| subjects.iter().any(|s| s == subject))
        .map(|(role, _)| role);
    from_scopes.chain(from_claim).chain(listed).max()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn config() -> OAuthConfig {
        OAuthConfig {
            role_claim: Some("realm_access.roles".into()),
            admins: vec!["root-person".into()],
            viewers: vec!["watcher".into()],
            ..crate::oauth::tests::config("https://idp.example")
        }
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn every_source_grants_and_the_highest_wins() {
        let c = config();
        let scoped = map(json!({"scope": "openid agent-bridge:viewer agent-bridge:operator"}));
        assert_eq!(role_of(&c, &scoped, "alice"), Some(Role::Operator));
        let entra = map(json!({"scp": "agent-bridge:viewer"}));
        assert_eq!(role_of(&c, &entra, "alice"), Some(Role::Viewer));
        let nested = map(json!({"realm_access": {"roles": ["offline", "agent-bridge:admin"]}}));
        assert_eq!(role_of(&c, &nested, "alice"), Some(Role::Admin));
        assert_eq!(role_of(&c, &scoped, "root-person"), Some(Role::Admin), "a listed subject is an admin");
        assert_eq!(role_of(&c, &map(json!({})), "watcher"), Some(Role::Viewer));
        assert_eq!(role_of(&c, &map(json!({"scope": "openid email"})), "alice"), None);
    }

    #[test]
    fn near_misses_grant_nothing() {
        let c = config();
        for claims in [
            json!({"scope": "agent-bridge:Admin agent-bridge:admins xagent-bridge:admin agent-bridge:"}),
            json!({"scope": ["agent-bridge:admin"]}),
            json!({"realm_access": {"roles": "agent-bridge:operator "}}),
            json!({"realm_access": ["agent-bridge:admin"]}),
            json!({"realm_access.roles": 7}),
            json!({"roles": ["agent-bridge:admin"]}),
        ] {
            assert_eq!(role_of(&c, &map(claims.clone()), "alice"), None, "{claims}");
        }
    }

    #[test]
    fn a_claim_named_with_dots_is_found_before_a_path() {
        let mut c = config();
        c.role_claim = Some("https://example.com/roles".into());
        let claims = map(json!({"https://example.com/roles": ["agent-bridge:operator"]}));
        assert_eq!(role_of(&c, &claims, "alice"), Some(Role::Operator));
    }

    #[test]
    fn subjects_and_display_names_are_kept_safe() {
        assert_eq!(subject(&map(json!({"sub": "auth0|6543"}))).unwrap(), "auth0|6543");
        assert!(matches!(subject(&map(json!({}))), Err(Refused::MissingClaim("sub"))));
        for bad in [json!(""), json!("two words"), json!("tab\there"), json!("é"), json!(42), json!("x".repeat(256))] {
            assert!(subject(&map(json!({ "sub": bad }))).is_err(), "{bad}");
        }
        let shown = display(&map(json!({"email": "a<script>@x.test\u{1b}[2J", "preferred_username": "bob"})));
        assert_eq!(shown.as_deref(), Some("a_script_@x.test__2J"));
        assert_eq!(display(&map(json!({"preferred_username": "bob"}))).as_deref(), Some("bob"));
        assert_eq!(display(&map(json!({"email": 3}))), None);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "(agent-bridge:)?(viewer|operator|admin|[a-z ]{0,8})".prop_map(Value::String),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("(scope|scp|roles|realm_access|sub|email|[a-z.]{1,6})", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever shape the claims have, nothing panics, and a granted role is one some
        /// source spells out exactly.
        #[test]
        fn any_claims_map_without_panicking(claims in prop::collection::btree_map(
            "(scope|scp|realm_access|sub|email|preferred_username|[a-z]{1,4})", json_value(), 0..6)
        ) {
            let claims: Map<String, Value> = claims.into_iter().collect();
            let c = config();
            let _ = subject(&claims);
            let _ = display(&claims);
            if let Some(role) = role_of(&c, &claims, "alice") {
                let spelled = format!("agent-bridge:{}", role.as_str());
                let text = Value::Object(claims.clone()).to_string();
                prop_assert!(text.contains(&spelled), "{role:?} granted by {text}");
            }
        }
    }
}
