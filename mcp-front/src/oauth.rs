//! What the front says about `/mcp-oauth` without deciding anything: the Protected Resource
//! Metadata document (RFC 9728) and the `WWW-Authenticate` challenge of a 401, both as the
//! bridge describes them (`oauth.metadata`), and 404 for both when the bridge takes no OAuth.
//!
//! `/mcp` never points at any of this: its 401 names a realm and nothing else, so a client
//! with a static key is not led into OAuth.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bridge_proto::client::CallError;
use bridge_proto::codes;
use bridge_proto::methods::{self, OauthMetadata};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value};

use crate::guard::{Guard, rpc_error};

/// Why the bridge's metadata is not at hand.
pub enum Unavailable {
    /// The bridge takes no OAuth tokens: `/mcp-oauth` does not exist.
    NotConfigured,
    /// The bridge did not answer, or answered something else.
    Bridge(String),
}

/// Asks the bridge for the resource's metadata.
pub async fn metadata(guard: &Guard) -> Result<OauthMetadata, Unavailable> {
    match guard.bridge().call(methods::OAUTH_METADATA, Map::new()).await {
        Ok(value) => {
            serde_json::from_value(value).map_err(|e| Unavailable::Bridge(format!("unreadable metadata: {e}")))
        }
        Err(CallError::Remote { code, .. }) if code == codes::OAUTH_NOT_CONFIGURED => Err(Unavailable::NotConfigured),
        Err(e) => Err(Unavailable::Bridge(format!("{}: {e}", e.code()))),
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp-oauth]`: the document, readable from any
/// origin (it is public), or 404.
pub async fn resource_metadata(State(guard): State<Arc<Guard>>, request: Request) -> Response {
    if !guard.host_allowed(request.headers()) {
        return rpc_error(StatusCode::FORBIDDEN, Value::Null, -32600, "Forbidden: the Host header is not allowed");
    }
    match metadata(&guard).await {
        Ok(metadata) => {
            let mut response = axum::Json(metadata.document).into_response();
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
            response
        }
        Err(Unavailable::NotConfigured) => not_found(),
        Err(Unavailable::Bridge(why)) => {
            tracing::warn!(cause = %why, "the bridge did not give the OAuth metadata");
            let mut response = (StatusCode::SERVICE_UNAVAILABLE, "the bridge is unavailable\n").into_response();
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            response
        }
    }
}

/// 404 for the OAuth paths of a bridge that takes no OAuth.
pub fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: this server takes no OAuth tokens\n").into_response()
}

/// The challenge of a refused `/mcp-oauth` call (RFC 6750 §3, RFC 9728 §5.1): the metadata's
/// URL and the scopes to ask for, and when a token was sent, `invalid_token` with the
/// bridge's reason. The parameters clients look for come first: some read the first match of
/// a name anywhere in the header, the reason's text included.
pub fn challenge(metadata: &OauthMetadata, token_sent: bool, reason: &str) -> HeaderValue {
    let mut value = format!(
        "Bearer resource_metadata=\"{}\", scope=\"{}\"",
        quoted_text(&metadata.resource_metadata),
        quoted_text(&metadata.scope)
    );
    if token_sent {
        value.push_str(&format!(", error=\"invalid_token\", error_description=\"{}\"", quoted_text(reason)));
    }
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// Text safe inside a quoted-string of a header: printable ASCII without `"` or `\`, clipped.
fn quoted_text(text: &str) -> String {
    text.chars().filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\').take(300).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn metadata() -> OauthMetadata {
        OauthMetadata {
            resource: "https://front.example/mcp-oauth".into(),
            resource_metadata: "https://front.example/.well-known/oauth-protected-resource/mcp-oauth".into(),
            scope: "agent-bridge:operator".into(),
            document: json!({}),
        }
    }

    #[test]
    fn the_challenge_names_the_metadata_and_the_reason_only_when_a_token_was_sent() {
        let none = challenge(&metadata(), false, "ignored");
        assert_eq!(
            none.to_str().unwrap(),
            "Bearer resource_metadata=\"https://front.example/.well-known/oauth-protected-resource/mcp-oauth\", \
             scope=\"agent-bridge:operator\""
        );
        let bad = challenge(&metadata(), true, "the token \"has\" expired\\\r\n\u{7f}é");
        let text = bad.to_str().unwrap();
        assert!(text.starts_with(none.to_str().unwrap()), "{text}");
        assert!(text.ends_with(", error=\"invalid_token\", error_description=\"the token has expired\""), "{text}");
    }
}
