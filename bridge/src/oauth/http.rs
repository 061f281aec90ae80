//! The HTTP client the bridge reaches its identity provider with: rustls (ring) with the
//! system's roots, no redirects, bounded connect and total times, bounded bodies, and only
//! `https://` or loopback `http://` URLs.

use std::time::Duration;

use reqwest::Url;
use serde_json::Value;

use crate::config::oauth::is_allowed_url;

/// The longest answer read from the IdP.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// The connect time-out of one request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The whole time of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A shared client; cheap to clone.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    /// A client; `loopback_only` (a test IdP on 127.0.0.1) also ignores proxy settings.
    pub fn new(loopback_only: bool) -> anyhow::Result<Http> {
        // The first to install wins; the bridge uses no other provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("agent-bridge/", env!("CARGO_PKG_VERSION")));
        if loopback_only {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| anyhow::anyhow!("cannot build the OAuth HTTP client: {e}"))?;
        Ok(Http { client })
    }

    /// GETs `url` and parses its JSON object; `Err` says what went wrong, for the logs.
    pub async fn get_json(&self, url: &str) -> Result<Value, String> {
        let url = checked(url)?;
        let request = self.client.get(url.clone()).header("accept", "application/json");
        read_json(&url, request.send().await).await
    }

    /// POSTs a form with HTTP Basic client credentials and parses the JSON object answered.
    pub async fn post_form(
        &self,
        url: &str,
        user: &str,
        password: &str,
        form: &[(&str, &str)],
    ) -> Result<Value, String> {
        let url = checked(url)?;
        let request = self
            .client
            .post(url.clone())
            .basic_auth(user, Some(password))
            .header("accept", "application/json")
            .form(form);
        read_json(&url, request.send().await).await
    }
}

fn checked(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !is_allowed_url(&parsed) {
        return Err(format!("{url} is neither https:// nor loopback http://"));
    }
    Ok(parsed)
}

async fn read_json(url: &Url, sent: reqwest::Result<reqwest::Response>) -> Result<Value, String> {
    let mut response = sent.map_err(|e| format!("{url}: {}", describe(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {}", describe(&e)))? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(format!("{url} answered more than {MAX_BODY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(format!("{url} did not answer a JSON object")),
        Err(e) => Err(format!("{url} did not answer JSON: {e}")),
    }
}

/// A request error in a few words (reqwest's own chains can be long and repeat the URL).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        text
    }
}
