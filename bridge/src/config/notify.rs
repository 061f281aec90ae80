//! The notification settings: the `SERVERFS_NOTIFY_NN_*` targets, the retry base and the
//! board's public URL that action links point at, read strictly from `.env` and re-checked on a
//! loaded config.
//!
//! A target is in use when its URL is set. Its URL is `https://` (`http://` only to a loopback
//! host), without credentials or fragment; a webhook needs a Standard Webhooks secret
//! (`whsec_` and the base64 of 24 to 64 bytes); the other keys of an unused target must be empty
//! or their default.

use base64::Engine as _;
use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::keys::{NOTIFY_COUNT, notify_key};
use super::oauth::is_allowed_url;
use super::values::{Reader, shown, split_list};

/// Where notifications go and how they are retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The targets in use, in slot order.
    #[serde(default)]
    pub targets: Vec<NotifyTarget>,
    /// The first retry delay in ms (`SERVERFS_NOTIFY_RETRY_BASE_MS`, 5000).
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// The board as the operator reaches it from elsewhere (`SERVERFS_BOARD_PUBLIC_URL`),
    /// without a trailing slash; links use the local board when unset.
    #[serde(default)]
    pub board_public_url: Option<String>,
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig { targets: Vec::new(), retry_base_ms: default_retry_base_ms(), board_public_url: None }
    }
}

fn default_retry_base_ms() -> u64 {
    5000
}

/// The longest first retry delay.
const MAX_RETRY_BASE_MS: u64 = 600_000;

/// One target.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTarget {
    /// Its slot number, 1 to 8.
    pub slot: u8,
    /// Where it is sent.
    pub url: String,
    /// The format.
    pub kind: NotifyKind,
    /// The events it gets.
    pub events: Vec<NotifyEvent>,
    /// The webhook's signing secret, or ntfy's access token.
    #[serde(default)]
    pub secret: Option<String>,
    /// How much a notification says.
    #[serde(default)]
    pub details: Details,
}

impl std::fmt::Debug for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyTarget")
            .field("slot", &self.slot)
            .field("url", &redacted_url(&self.url))
            .field("kind", &self.kind)
            .field("events", &self.events)
            .field("details", &self.details)
            .finish_non_exhaustive()
    }
}

impl NotifyTarget {
    /// Whether the target gets `event`.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.events.contains(&event)
    }
}

/// A URL as it may be shown: scheme and host only (a Slack or ntfy URL's path is its secret).
pub fn redacted_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let path = if u.path().len() > 1 { "/…" } else { "" };
            format!("{}://{}{port}{path}", u.scheme(), u.host_str().unwrap_or(""))
        }
        Err(_) => "(invalid URL)".into(),
    }
}

/// A target's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyKind {
    /// Standard Webhooks: signed JSON.
    Webhook,
    /// An ntfy topic.
    Ntfy,
    /// A Slack incoming webhook.
    Slack,
}

impl NotifyKind {
    /// The `.env` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Webhook => "webhook",
            NotifyKind::Ntfy => "ntfy",
            NotifyKind::Slack => "slack",
        }
    }

    fn parse(text: &str) -> Option<NotifyKind> {
        match text.to_ascii_lowercase().as_str() {
            "webhook" => Some(NotifyKind::Webhook),
            "ntfy" => Some(NotifyKind::Ntfy),
            "slack" => Some(NotifyKind::Slack),
            _ => None,
        }
    }
}

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NotifyEvent {
    /// A task waits for an approval.
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    /// A task waits for an answer.
    #[serde(rename = "question.requested")]
    QuestionRequested,
    /// A task succeeded or was cancelled.
    #[serde(rename = "task.finished")]
    TaskFinished,
    /// A task failed or was interrupted.
    #[serde(rename = "task.failed")]
    TaskFailed,
    /// A plan waits for a human's approval on the board.
    #[serde(rename = "plan.pending_approval")]
    PlanPendingApproval,
    /// A workdir stays closed: its writer's stop is not proven.
    #[serde(rename = "workdir.recovery_required")]
    WorkdirRecoveryRequired,
}

impl NotifyEvent {
    /// Every event, in the order `.env.example` lists them.
    pub const ALL: [NotifyEvent; 6] = [
        NotifyEvent::ApprovalRequested,
        NotifyEvent::QuestionRequested,
        NotifyEvent::TaskFinished,
        NotifyEvent::TaskFailed,
        NotifyEvent::PlanPendingApproval,
        NotifyEvent::WorkdirRecoveryRequired,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::ApprovalRequested => "approval.requested",
            NotifyEvent::QuestionRequested => "question.requested",
            NotifyEvent::TaskFinished => "task.finished",
            NotifyEvent::TaskFailed => "task.failed",
            NotifyEvent::PlanPendingApproval => "plan.pending_approval",
            NotifyEvent::WorkdirRecoveryRequired => "workdir.recovery_required",
        }
    }

    /// Parses a wire name (exact).
    pub fn parse(text: &str) -> Option<NotifyEvent> {
        NotifyEvent::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// How much a notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Details {
    /// Titles and kinds only.
    #[default]
    Summary,
    /// Also the approval's command or the question's text.
    Full,
}

/// Checks a Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 bytes.
pub fn check_webhook_secret(text: &str) -> Result<Vec<u8>, String> {
    let Some(encoded) = text.strip_prefix("whsec_") else {
        return Err("must start with whsec_ (a Standard Webhooks secret: whsec_ and base64)".into());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "is not whsec_ followed by standard base64".to_owned())?;
    if !(24..=64).contains(&bytes.len()) {
        return Err(format!("decodes to {} bytes; use 24 to 64 random bytes", bytes.len()));
    }
    Ok(bytes)
}

/// Checks a target or public URL: absolute, allowed by [`is_allowed_url`], no credentials or
/// fragment.
fn check_url(text: &str, query_allowed: bool) -> Result<Url, String> {
    match Url::parse(text) {
        Err(e) => Err(format!("is not an absolute URL ({e})")),
        Ok(url) if !is_allowed_url(&url) => {
            Err("must be https:// (http:// only to 127.0.0.1, ::1 or localhost)".into())
        }
        Ok(url) if !url.username().is_empty() || url.password().is_some() => Err("must not carry credentials".into()),
        Ok(url) if url.fragment().is_some() || (!query_allowed && url.query().is_some()) => {
            Err(if query_allowed { "must have no fragment" } else { "must have no query or fragment" }.into())
        }
        Ok(url) => Ok(url),
    }
}

/// Reads the notification settings; `None` when something was refused.
pub(super) fn read(reader: &mut Reader<'_>) -> Option<NotifyConfig> {
    let key = "SERVERFS_NOTIFY_RETRY_BASE_MS";
    let retry_base_ms = reader.positive(key, MAX_RETRY_BASE_MS);
    if let Some(ms) = retry_base_ms.filter(|ms| *ms < 100) {
        reader.refuse(key, format!("{ms} ms is below the least delay, 100 ms"));
    }
    let key = "SERVERFS_BOARD_PUBLIC_URL";
    let public = match reader.effective(key) {
        None => Some(None),
        Some(text) => match check_url(text, false) {
            Ok(url) => Some(Some(url.as_str().trim_end_matches('/').to_owned())),
            Err(problem) => {
                reader.refuse(key, format!("{} {problem}", shown(key, text)));
                None
            }
        },
    };
    let mut ok = true;
    let mut targets = Vec::new();
    for slot in 1..=NOTIFY_COUNT {
        match read_target(reader, slot) {
            Ok(Some(t)) => targets.push(t),
            Ok(None) => {}
            Err(()) => ok = false,
        }
    }
    let retry_base_ms = retry_base_ms.filter(|ms| *ms >= 100)?;
    (ok).then_some(())?;
    Some(NotifyConfig { targets, retry_base_ms, board_public_url: public? })
}

fn read_target(reader: &mut Reader<'_>, slot: u8) -> Result<Option<NotifyTarget>, ()> {
    let [url_key, kind_key, events_key, secret_key, details_key] =
        ["URL", "KIND", "EVENTS", "SECRET", "DETAILS"].map(|s| notify_key(slot, s));
    let url_text = reader.raw(&url_key);
    if url_text.is_empty() {
        let mut clean = true;
        for key in [&kind_key, &events_key, &secret_key] {
            if !reader.raw(key).is_empty() {
                reader.refuse(
                    key,
                    format!("target {slot:02} has no URL, so this has no effect: set {url_key} or clear it"),
                );
                clean = false;
            }
        }
        if !reader.raw(&details_key).is_empty() && !reader.raw(&details_key).eq_ignore_ascii_case("summary") {
            reader.refuse(
                &details_key,
                format!("target {slot:02} has no URL, so this has no effect: set {url_key} or clear it"),
            );
            clean = false;
        }
        return if clean { Ok(None) } else { Err(()) };
    }
    let mut ok = true;
    let url = match check_url(url_text, true) {
        Ok(u) => Some(u),
        Err(problem) => {
            reader.refuse(&url_key, format!("{} {problem}", shown(&url_key, url_text)));
            ok = false;
            None
        }
    };
    let kind_text = reader.raw(&kind_key);
    let kind = match NotifyKind::parse(kind_text) {
        Some(k) => Some(k),
        None if kind_text.is_empty() => {
            reader.refuse(&kind_key, format!("{url_key} is set: say what it is (webhook, ntfy or slack)"));
            None
        }
        None => {
            reader.refuse(&kind_key, format!("{} is not webhook, ntfy or slack", shown(&kind_key, kind_text)));
            None
        }
    };
    let events_text = reader.raw(&events_key);
    let mut events = Vec::new();
    if events_text.trim().is_empty() {
        events = NotifyEvent::ALL.to_vec();
    } else {
        for name in split_list(events_text) {
            match NotifyEvent::parse(&name) {
                Some(e) if !events.contains(&e) => events.push(e),
                Some(_) => {}
                None => {
                    let all: Vec<&str> = NotifyEvent::ALL.iter().map(|e| e.as_str()).collect();
                    reader.refuse(&events_key, format!("{name:?} is not an event; use some of {}", all.join(", ")));
                    ok = false;
                }
            }
        }
    }
    let details = match reader.effective(&details_key).unwrap_or("summary").to_ascii_lowercase().as_str() {
        "summary" => Some(Details::Summary),
        "full" => Some(Details::Full),
        other => {
            reader.refuse(&details_key, format!("{other:?} is not summary or full"));
            None
        }
    };
    let secret_text = reader.raw(&secret_key);
    let secret = (!secret_text.is_empty()).then(|| secret_text.to_owned());
    match (kind, &secret) {
        (Some(NotifyKind::Webhook), None) => {
            reader.refuse(
                &secret_key,
                "a webhook target needs a signing secret: whsec_ and the base64 of 24 to 64 random bytes",
            );
            ok = false;
        }
        (Some(NotifyKind::Webhook), Some(s)) => {
            if let Err(problem) = check_webhook_secret(s) {
                reader.refuse(&secret_key, format!("the secret {problem}"));
                ok = false;
            }
        }
        (Some(NotifyKind::Slack), Some(_)) => {
            reader.refuse(&secret_key, "a Slack incoming webhook has no secret (its URL is the secret): clear it");
            ok = false;
        }
        (Some(NotifyKind::Ntfy), Some(s)) if !s.bytes().all(|b| b.is_ascii_graphic()) => {
            reader.refuse(&secret_key, "an ntfy access token is printable ASCII without spaces");
            ok = false;
        }
        _ => {}
    }
    if let (Some(NotifyKind::Ntfy), Some(u)) = (kind, &url)
        && ntfy_topic(u).is_none()
    {
        reader.refuse(&url_key, "an ntfy URL names its topic: https://ntfy.example/TOPIC");
        ok = false;
    }
    match (ok, url, kind, details) {
        (true, Some(url), Some(kind), Some(details)) => {
            Ok(Some(NotifyTarget { slot, url: url.to_string(), kind, events, secret, details }))
        }
        _ => Err(()),
    }
}

/// Splits an ntfy topic URL into the server's root URL and the topic (the last path segment:
/// letters, digits, `_` and `-`, 1 to 64).
pub fn ntfy_topic(url: &Url) -> Option<(String, String)> {
    let path = url.path().trim_end_matches('/');
    let (root, topic) = path.rsplit_once('/')?;
    let ok =
        (1..=64).contains(&topic.len()) && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok || url.query().is_some() {
        return None;
    }
    let mut base = url.clone();
    base.set_path(&format!("{root}/"));
    Some((base.to_string(), topic.to_owned()))
}

/// Re-checks a loaded config's notification settings (a JSON config is not read through
/// [`read`]).
pub(super) fn check_rules(config: &super::BridgeConfig, refusals: &mut super::env::Refusals) {
    let notify = &config.notify;
    if !(100..=MAX_RETRY_BASE_MS).contains(&notify.retry_base_ms) {
        refusals.push(Some("notify.retry_base_ms"), format!("must be 100 to {MAX_RETRY_BASE_MS}"));
    }
    if let Some(url) = &notify.board_public_url
        && check_url(url, false).is_err()
    {
        refusals.push(Some("notify.board_public_url"), "must be an https:// URL (http:// only to a loopback host)");
    }
    let mut seen = Vec::new();
    for t in &notify.targets {
        let field = format!("notify.targets[{}]", t.slot);
        if !(1..=NOTIFY_COUNT).contains(&t.slot) || seen.contains(&t.slot) {
            refusals.push(Some(&field), format!("slot {} is not a free slot between 1 and {NOTIFY_COUNT}", t.slot));
        }
        seen.push(t.slot);
        match check_url(&t.url, true) {
            Err(problem) => refusals.push(Some(&field), format!("url {problem}")),
            Ok(u) if t.kind == NotifyKind::Ntfy && ntfy_topic(&u).is_none() => {
                refusals.push(Some(&field), "an ntfy url names its topic")
            }
            Ok(_) => {}
        }
        if t.events.is_empty() {
            refusals.push(Some(&field), "has no events");
        }
        match (t.kind, &t.secret) {
            (NotifyKind::Webhook, None) => refusals.push(Some(&field), "a webhook needs a secret"),
            (NotifyKind::Webhook, Some(s)) => {
                if let Err(problem) = check_webhook_secret(s) {
                    refusals.push(Some(&field), format!("secret {problem}"));
                }
            }
            (NotifyKind::Slack, Some(_)) => refusals.push(Some(&field), "a Slack target has no secret"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_secrets_follow_the_standard() {
        let good = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
        assert_eq!(check_webhook_secret(&good).expect("good").len(), 32);
        assert!(check_webhook_secret("secret").unwrap_err().contains("whsec_"));
        assert!(check_webhook_secret("whsec_!!!").unwrap_err().contains("base64"));
        let short = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode([7u8; 8]));
        assert!(check_webhook_secret(&short).unwrap_err().contains("8 bytes"));
    }

    #[test]
    fn ntfy_urls_split_into_root_and_topic() {
        let url = Url::parse("https://ntfy.sh/agent-alerts").expect("url");
        assert_eq!(ntfy_topic(&url), Some(("https://ntfy.sh/".into(), "agent-alerts".into())));
        let url = Url::parse("http://127.0.0.1:9/ntfy/topic_1").expect("url");
        assert_eq!(ntfy_topic(&url), Some(("http://127.0.0.1:9/ntfy/".into(), "topic_1".into())));
        assert_eq!(ntfy_topic(&Url::parse("https://ntfy.sh/").expect("url")), None);
        assert_eq!(ntfy_topic(&Url::parse("https://ntfy.sh/a b").expect("url")), None);
    }

    #[test]
    fn shown_urls_keep_no_path() {
        assert_eq!(redacted_url("https://hooks.slack.com/services/T0/B0/secret"), "https://hooks.slack.com/…");
        assert_eq!(redacted_url("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
    }
}
