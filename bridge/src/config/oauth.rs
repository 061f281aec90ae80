//! `SERVERFS_MCP_OAUTH_*` → [`OAuthConfig`]: the identity provider whose access tokens
//! `/mcp-oauth` takes, the resource they must be issued for, and how their subjects get a role.
//!
//! Every URL is `https://`, or `http://` on a loopback host (a test IdP on 127.0.0.1); none
//! carries credentials, a query or a fragment. The issuer and the resource come together or not
//! at all; the resource's path is `/mcp-oauth`, the path the front serves.

use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::values::{Reader, shown};

/// The path the front serves OAuth callers on; the resource URL must end with it.
pub const OAUTH_PATH: &str = "/mcp-oauth";

/// The largest exp/nbf leeway accepted, in seconds.
pub const MAX_LEEWAY_SECONDS: u64 = 300;

/// How `/mcp-oauth` callers are authenticated (`None` in [`super::BridgeConfig`]: not at all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// `SERVERFS_MCP_OAUTH_ISSUER`: the IdP's issuer, compared exactly with `iss`.
    pub issuer: String,
    /// `SERVERFS_MCP_OAUTH_RESOURCE`: the public URL of `/mcp-oauth`, the tokens' audience.
    pub resource: String,
    /// `SERVERFS_MCP_OAUTH_JWKS_URL`: where the keys are, instead of discovery's `jwks_uri`.
    pub jwks_url: Option<String>,
    /// `SERVERFS_MCP_OAUTH_SCOPES`: the scopes a client is told to ask for.
    pub scopes: Vec<String>,
    /// `SERVERFS_MCP_OAUTH_ROLE_PREFIX`: a scope or claim value `<prefix><role>` grants the role.
    pub role_prefix: String,
    /// `SERVERFS_MCP_OAUTH_ROLE_CLAIM`: a claim (a dotted path) whose values grant roles.
    pub role_claim: Option<String>,
    /// `SERVERFS_MCP_OAUTH_ADMINS`: subjects that are admins.
    pub admins: Vec<String>,
    /// `SERVERFS_MCP_OAUTH_OPERATORS`: subjects that are operators.
    pub operators: Vec<String>,
    /// `SERVERFS_MCP_OAUTH_VIEWERS`: subjects that are viewers.
    pub viewers: Vec<String>,
    /// `SERVERFS_MCP_OAUTH_WORKDIRS`: the workdir aliases OAuth principals may use (`None`: all).
    pub workdirs: Option<Vec<String>>,
    /// `SERVERFS_MCP_OAUTH_LEEWAY_SECONDS`: the clock skew allowed on `exp` and `nbf`.
    pub leeway_seconds: u64,
    /// RFC 7662 introspection of opaque tokens, when configured.
    pub introspection: Option<Introspection>,
}

/// `SERVERFS_MCP_OAUTH_INTROSPECTION_URL` and the client credentials it is called with.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Introspection {
    /// The introspection endpoint.
    pub url: String,
    /// `SERVERFS_MCP_OAUTH_CLIENT_ID`.
    pub client_id: String,
    /// `SERVERFS_MCP_OAUTH_CLIENT_SECRET`.
    pub client_secret: String,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection").field("url", &self.url).field("client_id", &self.client_id).finish()
    }
}

impl OAuthConfig {
    /// The URL of the resource's Protected Resource Metadata (RFC 9728 §3.1: the well-known
    /// name goes between the host and the path).
    pub fn metadata_url(&self) -> String {
        let origin = self.resource.strip_suffix(OAUTH_PATH).unwrap_or(&self.resource);
        format!("{origin}/.well-known/oauth-protected-resource{OAUTH_PATH}")
    }
}

/// Whether `url` may be fetched or named: `https`, or `http` to a loopback host.
pub fn is_allowed_url(url: &Url) -> bool {
    match (url.scheme(), url.host_str()) {
        ("https", Some(_)) => true,
        ("http", Some(host)) => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

/// Parses a URL key's value: absolute, allowed by [`is_allowed_url`], no credentials, query
/// or fragment.
fn read_url(reader: &mut Reader<'_>, key: &str) -> Option<Option<Url>> {
    let Some(text) = reader.effective(key) else {
        return Some(None);
    };
    let problem = match Url::parse(text) {
        Err(e) => format!("is not an absolute URL ({e})"),
        Ok(url) if !is_allowed_url(&url) => "must be https:// (http:// only to 127.0.0.1, ::1 or localhost)".into(),
        Ok(url) if !url.username().is_empty() || url.password().is_some() => "must not carry credentials".into(),
        Ok(url) if url.query().is_some() || url.fragment().is_some() => "must have no query or fragment".into(),
        Ok(url) => return Some(Some(url)),
    };
    reader.refuse(key, format!("{} {problem}", shown(key, text)));
    None
}

/// Whether a subject list entry or a role prefix is usable: printable ASCII, no spaces.
fn is_token_text(text: &str) -> bool {
    (1..=255).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic())
}

/// Reads the OAuth settings: `Some(None)` when `/mcp-oauth` is off, `None` when refused.
pub(super) fn read(reader: &mut Reader<'_>) -> Option<Option<OAuthConfig>> {
    let issuer = read_url(reader, "SERVERFS_MCP_OAUTH_ISSUER");
    let resource = read_url(reader, "SERVERFS_MCP_OAUTH_RESOURCE");
    let jwks_url = read_url(reader, "SERVERFS_MCP_OAUTH_JWKS_URL");
    let introspection_url = read_url(reader, "SERVERFS_MCP_OAUTH_INTROSPECTION_URL");
    let (issuer, resource, jwks_url, introspection_url) = (issuer?, resource?, jwks_url?, introspection_url?);
    let resource = match (issuer, resource) {
        (None, None) => {
            let dependent = [
                "SERVERFS_MCP_OAUTH_JWKS_URL",
                "SERVERFS_MCP_OAUTH_INTROSPECTION_URL",
                "SERVERFS_MCP_OAUTH_ROLE_CLAIM",
                "SERVERFS_MCP_OAUTH_ADMINS",
                "SERVERFS_MCP_OAUTH_OPERATORS",
                "SERVERFS_MCP_OAUTH_VIEWERS",
                "SERVERFS_MCP_OAUTH_WORKDIRS",
                "SERVERFS_MCP_OAUTH_CLIENT_ID",
                "SERVERFS_MCP_OAUTH_CLIENT_SECRET",
            ];
            let set: Vec<&str> = dependent.into_iter().filter(|k| !reader.raw(k).is_empty()).collect();
            for key in set {
                reader.refuse(key, "is set but SERVERFS_MCP_OAUTH_ISSUER is not: /mcp-oauth is off");
            }
            return Some(None);
        }
        (Some(_), Some(resource)) => resource,
        (Some(_), None) => {
            reader.refuse("SERVERFS_MCP_OAUTH_RESOURCE", "is required with SERVERFS_MCP_OAUTH_ISSUER: the public https:// URL of /mcp-oauth, the tokens' audience");
            return None;
        }
        (None, Some(_)) => {
            reader.refuse(
                "SERVERFS_MCP_OAUTH_ISSUER",
                "is required with SERVERFS_MCP_OAUTH_RESOURCE: the identity provider's issuer URL",
            );
            return None;
        }
    };
    let mut ok = true;
    if resource.path() != OAUTH_PATH {
        let message = format!("{:?} must end with the path {OAUTH_PATH}, the front's OAuth path", resource.as_str());
        reader.refuse("SERVERFS_MCP_OAUTH_RESOURCE", message);
        ok = false;
    }
    let scopes: Vec<String> = reader
        .effective("SERVERFS_MCP_OAUTH_SCOPES")
        .unwrap_or_default()
        .split([' ', ','])
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if scopes.is_empty() || !scopes.iter().all(|s| is_token_text(s) && !s.contains(['"', '\\'])) {
        reader.refuse(
            "SERVERFS_MCP_OAUTH_SCOPES",
            "must list scope names (printable, no quotes), separated by spaces or commas",
        );
        ok = false;
    }
    let role_prefix = reader.effective("SERVERFS_MCP_OAUTH_ROLE_PREFIX").unwrap_or_default().to_owned();
    if !is_token_text(&role_prefix) {
        reader.refuse("SERVERFS_MCP_OAUTH_ROLE_PREFIX", "must be printable text without spaces, such as agent-bridge:");
        ok = false;
    }
    let role_claim = reader.effective("SERVERFS_MCP_OAUTH_ROLE_CLAIM").map(str::to_owned);
    if let Some(claim) = &role_claim {
        let valid = claim.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'/'))
        });
        if !valid || claim.len() > 128 {
            reader.refuse(
                "SERVERFS_MCP_OAUTH_ROLE_CLAIM",
                format!("{claim:?} is not a claim name or a dotted path such as realm_access.roles"),
            );
            ok = false;
        }
    }
    let mut subjects = |key: &str| {
        let list = reader.list(key);
        if let Some(bad) = list.iter().find(|s| !is_token_text(s)) {
            reader.refuse(key, format!("{bad:?} is not a subject (printable, no spaces, at most 255 bytes)"));
            ok = false;
        }
        list
    };
    let (admins, operators, viewers) = (
        subjects("SERVERFS_MCP_OAUTH_ADMINS"),
        subjects("SERVERFS_MCP_OAUTH_OPERATORS"),
        subjects("SERVERFS_MCP_OAUTH_VIEWERS"),
    );
    let workdirs = reader.list("SERVERFS_MCP_OAUTH_WORKDIRS");
    let workdirs = if workdirs.is_empty() || workdirs.iter().any(|w| w == "*") { None } else { Some(workdirs) };
    let key = "SERVERFS_MCP_OAUTH_LEEWAY_SECONDS";
    let text = reader.effective(key).unwrap_or("30");
    let leeway_seconds = match text.parse::<u64>() {
        Ok(n) if n <= MAX_LEEWAY_SECONDS && text.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => {
            reader
                .refuse(key, format!("{} is not a number of seconds from 0 to {MAX_LEEWAY_SECONDS}", shown(key, text)));
            ok = false;
            0
        }
    };
    let client_id = reader.effective("SERVERFS_MCP_OAUTH_CLIENT_ID").map(str::to_owned);
    let client_secret = reader.effective("SERVERFS_MCP_OAUTH_CLIENT_SECRET").map(str::to_owned);
    let introspection = match (introspection_url, client_id, client_secret) {
        (Some(url), Some(client_id), Some(client_secret)) => {
            Some(Introspection { url: url.to_string(), client_id, client_secret })
        }
        (None, None, None) => None,
        _ => {
            let message = "SERVERFS_MCP_OAUTH_INTROSPECTION_URL, SERVERFS_MCP_OAUTH_CLIENT_ID and \
                           SERVERFS_MCP_OAUTH_CLIENT_SECRET are set together or not at all";
            reader.refuse("SERVERFS_MCP_OAUTH_INTROSPECTION_URL", message);
            ok = false;
            None
        }
    };
    // `iss` is compared exactly, so the issuer is kept as written (a trailing slash included);
    // the resource is its origin and the path, as a client spells it.
    let issuer = reader.effective("SERVERFS_MCP_OAUTH_ISSUER").unwrap_or_default().to_owned();
    ok.then(|| {
        Some(OAuthConfig {
            issuer,
            resource: format!("{}{}", resource.origin().ascii_serialization(), OAUTH_PATH),
            jwks_url: jwks_url.map(|u| u.to_string()),
            scopes,
            role_prefix,
            role_claim,
            admins,
            operators,
            viewers,
            workdirs,
            leeway_seconds,
            introspection,
        })
    })
}

/// Re-checks a loaded config's OAuth settings (a JSON config is not read through [`read`]):
/// the URLs' schemes, the resource's path, and workdir aliases that exist.
pub(super) fn check_rules(config: &super::BridgeConfig, refusals: &mut super::env::Refusals) {
    let Some(oauth) = &config.oauth else {
        return;
    };
    let introspection = oauth.introspection.as_ref().map(|i| i.url.as_str());
    for (field, url) in [
        ("oauth.issuer", Some(oauth.issuer.as_str())),
        ("oauth.resource", Some(oauth.resource.as_str())),
        ("oauth.jwks_url", oauth.jwks_url.as_deref()),
        ("oauth.introspection.url", introspection),
    ] {
        if let Some(url) = url
            && !Url::parse(url).is_ok_and(|u| is_allowed_url(&u))
        {
            refusals.push(Some(field), "must be an https:// URL (http:// only to a loopback host)");
        }
    }
    if !Url::parse(&oauth.resource).is_ok_and(|u| u.path() == OAUTH_PATH) {
        refusals.push(Some("oauth.resource"), format!("must end with the path {OAUTH_PATH}"));
    }
    for alias in oauth.workdirs.iter().flatten() {
        if !config.workdirs.iter().any(|w| w.alias == *alias) {
            refusals.push(Some("SERVERFS_MCP_OAUTH_WORKDIRS"), format!("{alias:?} is not a configured workdir alias"));
        }
    }
}
