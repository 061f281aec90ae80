//! The bound on a provider that cannot reach its model service: Codex and Claude Code retry a
//! failed request on their own (Codex's "Reconnecting…", Claude Code's `api_retry`), for
//! minutes or, with some settings, without end. Each retry arrives as a `provider.error` that
//! will be retried; when nothing else has happened for
//! `SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS` since the first of them, the task fails with
//! `AGENT_RUNTIME_UNAVAILABLE` and the provider's last reason.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::provider::events;

/// Watches one turn's events for a run of retries with nothing in between.
pub(super) struct RetryWatch {
    limit: Duration,
    /// Since when the provider has been retrying, and its latest reason.
    retrying: Option<(Instant, String)>,
}

impl RetryWatch {
    /// A watch that gives a run of retries `limit` at most.
    pub fn new(limit: Duration) -> RetryWatch {
        RetryWatch { limit, retrying: None }
    }

    /// Takes one recorded event: a retried `provider.error` starts (or continues) the run,
    /// anything the agent did ends it. Warnings and non-retried errors change nothing.
    pub fn observe(&mut self, event_type: &str, payload: &Value) {
        match event_type {
            events::PROVIDER_ERROR if payload.get("will_retry").and_then(Value::as_bool) == Some(true) => {
                let why = payload.get("message").and_then(Value::as_str).unwrap_or("").to_owned();
                match &mut self.retrying {
                    Some((_, last)) => *last = why,
                    None => self.retrying = Some((Instant::now(), why)),
                }
            }
            events::PROVIDER_ERROR | events::PROVIDER_WARNING => {}
            _ => self.retrying = None,
        }
    }

    /// The agent did something that is not an event (asked a human): the run ends.
    pub fn progressed(&mut self) {
        self.retrying = None;
    }

    /// When the current run of retries exceeds the bound, if one is under way.
    pub fn deadline(&self) -> Option<Instant> {
        self.retrying.as_ref().map(|(since, _)| *since + self.limit)
    }

    /// The code and message of a turn that failed with `code` and `message`: when it failed
    /// during a run of retries, the provider gave up on an unreachable service
    /// (`AGENT_RUNTIME_UNAVAILABLE`); otherwise they stand.
    pub fn gave_up(&self, runtime: &str, code: &'static str, message: &str) -> (&'static str, String) {
        match &self.retrying {
            Some(_) if code == crate::error::code::AGENT_PROVIDER_ERROR => (
                crate::error::code::AGENT_RUNTIME_UNAVAILABLE,
                format!("the {runtime} runtime could not reach its model service and gave up: {message}"),
            ),
            _ => (code, message.to_owned()),
        }
    }

    /// Why the task fails once the bound is exceeded.
    pub fn message(&self, runtime: &str) -> String {
        let seconds = self.limit.as_secs();
        match self.retrying.as_ref().map(|(_, why)| why.as_str()).filter(|w| !w.is_empty()) {
            Some(why) => format!(
                "the {runtime} runtime could not reach its model service for {seconds} s \
                 (SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS); its last error: {why}"
            ),
            None => format!(
                "the {runtime} runtime could not reach its model service for {seconds} s \
                 (SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn retry(n: u32) -> Value {
        json!({ "message": format!("Reconnecting... {n}/5"), "will_retry": true })
    }

    /// On a paused clock: the bound counts from the first retry of a run, a later retry does
    /// not move it, and anything the agent does ends the run.
    #[tokio::test(start_paused = true)]
    async fn a_run_of_retries_is_bounded_from_its_first_and_progress_ends_it() {
        let mut watch = RetryWatch::new(Duration::from_secs(120));
        watch.observe(events::TURN_STARTED, &json!({}));
        assert_eq!(watch.deadline(), None);
        let first = Instant::now();
        watch.observe(events::PROVIDER_ERROR, &retry(1));
        tokio::time::advance(Duration::from_secs(30)).await;
        watch.observe(events::PROVIDER_ERROR, &retry(2));
        watch.observe(events::PROVIDER_WARNING, &json!({ "message": "slow" }));
        watch.observe(events::PROVIDER_ERROR, &json!({ "message": "fatal", "will_retry": false }));
        assert_eq!(watch.deadline(), Some(first + Duration::from_secs(120)));
        assert!(watch.message("codex").ends_with("its last error: Reconnecting... 2/5"), "{}", watch.message("codex"));
        watch.observe(events::AGENT_MESSAGE, &json!({ "text": "back" }));
        assert_eq!(watch.deadline(), None);
        watch.observe(events::PROVIDER_ERROR, &retry(1));
        assert_eq!(watch.deadline(), Some(Instant::now() + Duration::from_secs(120)));
        let (code, message) = watch.gave_up("codex", "AGENT_PROVIDER_ERROR", "stream disconnected");
        assert_eq!(code, "AGENT_RUNTIME_UNAVAILABLE");
        assert_eq!(message, "the codex runtime could not reach its model service and gave up: stream disconnected");
        watch.progressed();
        assert_eq!(watch.deadline(), None);
        let (code, message) = watch.gave_up("codex", "AGENT_PROVIDER_ERROR", "bad tool call");
        assert_eq!(
            (code, message.as_str()),
            ("AGENT_PROVIDER_ERROR", "bad tool call"),
            "no retries, no reclassification"
        );
    }
}
