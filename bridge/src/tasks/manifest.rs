//! The immutable execution manifest frozen at submit, and the idempotency fingerprint.
//!
//! Both are canonical JSON (keys sorted, compact, non-ASCII kept) hashed with SHA-256, so the
//! same inputs always give the same bytes.

use serde_json::{Value, json};

use super::results::sha256_hex;
use crate::clock::rfc3339;
use crate::config::{Limits, Workdir};

/// Canonical JSON text of a value (`serde_json` objects keep keys sorted).
pub fn canonical(v: &Value) -> String {
    v.to_string()
}

/// The semantic inputs of a submission.
#[derive(Debug, Clone)]
pub struct Submission<'a> {
    /// Runtime name.
    pub runtime: &'a str,
    /// Workdir alias.
    pub workdir: &'a str,
    /// Normalized relative path.
    pub path: &'a str,
    /// Profile wire name.
    pub profile: &'a str,
    /// The exact prompt.
    pub prompt: &'a str,
    /// Requested model.
    pub model: Option<&'a str>,
    /// Continuation source.
    pub continue_from_task_id: Option<&'a str>,
    /// Caller metadata.
    pub correlation_id: Option<&'a str>,
    /// The isolation the caller asked for (`None`: the workdir's).
    pub isolation: Option<&'a str>,
    /// The ref a worktree task's branch starts from, as the caller named it.
    pub base_ref: Option<&'a str>,
}

/// SHA-256 of the canonical submission; the raw prompt is represented only by its hash. The
/// isolation and base ref count only when the caller gave them (a submission without them
/// keeps the fingerprint it had before they existed).
pub fn fingerprint(s: &Submission<'_>) -> String {
    let mut doc = json!({
        "runtime": s.runtime,
        "workdir": s.workdir,
        "path": s.path,
        "profile": s.profile,
        "prompt_sha256": sha256_hex(s.prompt.as_bytes()),
        "model": s.model,
        "continue_from_task_id": s.continue_from_task_id,
        "correlation_id": s.correlation_id,
    });
    for (key, value) in [("isolation", s.isolation), ("base_ref", s.base_ref)] {
        if let Some(value) = value {
            doc[key] = json!(value);
        }
    }
    sha256_hex(canonical(&doc).as_bytes())
}

/// Everything the manifest records.
#[derive(Debug)]
pub struct ManifestInput<'a> {
    /// The submission.
    pub submission: &'a Submission<'a>,
    /// The runtime's version at submit.
    pub runtime_version: Option<&'a str>,
    /// What the task runs under: `bubblewrap` (the task sandbox) or `none`.
    pub containment: &'a str,
    /// What the sandbox gives it (view, network, filter), without a host path.
    pub sandbox: &'a Value,
    /// The workdir's policy.
    pub workdir: &'a Workdir,
    /// Effective limits.
    pub limits: &'a Limits,
    /// Who submitted.
    pub principal: &'a str,
    /// The retry key.
    pub idempotency_key: Option<&'a str>,
    /// Unix ms.
    pub deadline_at: i64,
    /// Where the task works: `{mode}`, and for a worktree its branch and base ref.
    pub isolation: &'a Value,
}

/// Builds the manifest and returns `(canonical JSON, SHA-256)`. Never contains a host path.
pub fn build(m: &ManifestInput<'_>) -> (String, String) {
    let w = m.workdir;
    let mut runtimes: Vec<&str> = w.runtimes.iter().map(|r| r.as_str()).collect();
    runtimes.sort_unstable();
    let policy = json!({
        "alias": w.alias,
        "slot": w.slot,
        "read_only": w.read_only,
        "agent_mode": w.agent_mode.as_str(),
        "agent_runtimes": runtimes,
    });
    let doc = json!({
        // Version 2, as in ServerFS: the manifest records the requested model.
        "schema_version": 2,
        "bridge_version": env!("CARGO_PKG_VERSION"),
        "protocol_version": bridge_proto::PROTOCOL_VERSION,
        "runtime": { "name": m.submission.runtime, "version": m.runtime_version },
        "workspace": { "alias": w.alias, "slot": w.slot, "relative_cwd": m.submission.path, "profile": m.submission.profile },
        "policy": {
            "read_only": w.read_only,
            "agent_mode": w.agent_mode.as_str(),
            "policy_sha256": sha256_hex(canonical(&policy).as_bytes()),
        },
        "model": { "requested": m.submission.model },
        "containment": m.containment,
        "isolation": m.isolation,
        "sandbox": m.sandbox,
        "limits": {
            "task_timeout_seconds": m.limits.task_timeout_seconds,
            "interaction_timeout_seconds": m.limits.interaction_timeout_seconds,
            "max_active_tasks": m.limits.max_active_tasks,
            "retention_hours": m.limits.retention_hours,
            "result_spool_threshold_bytes": m.limits.result_spool_threshold_bytes,
            "event_idle_timeout_seconds": m.limits.event_idle_timeout_seconds,
        },
        "continuation": { "from_task_id": m.submission.continue_from_task_id },
        "correlation_id": m.submission.correlation_id,
        "idempotency_key": m.idempotency_key,
        "submitted_by": m.principal,
        "deadline_at": rfc3339(m.deadline_at),
    });
    let text = canonical(&doc);
    let sha = sha256_hex(text.as_bytes());
    (text, sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub<'a>(prompt: &'a str, path: &'a str) -> Submission<'a> {
        Submission {
            runtime: "fake",
            workdir: "w",
            path,
            profile: "workspace-write",
            prompt,
            model: None,
            continue_from_task_id: None,
            correlation_id: Some("c"),
            isolation: None,
            base_ref: None,
        }
    }

    #[test]
    fn fingerprint_changes_with_every_field() {
        let base = fingerprint(&sub("p", ""));
        assert_eq!(base, fingerprint(&sub("p", "")));
        assert_ne!(base, fingerprint(&sub("q", "")));
        assert_ne!(base, fingerprint(&sub("p", "x")));
        let mut s = sub("p", "");
        s.correlation_id = None;
        assert_ne!(base, fingerprint(&s));
        let mut s = sub("p", "");
        s.model = Some("m");
        assert_ne!(base, fingerprint(&s));
        let mut s = sub("p", "");
        s.isolation = Some("worktree");
        assert_ne!(base, fingerprint(&s));
        let mut s = sub("p", "");
        s.base_ref = Some("main");
        assert_ne!(base, fingerprint(&s));
    }

    #[test]
    fn a_submission_without_isolation_keeps_its_earlier_fingerprint() {
        // Computed by the fingerprint before isolation existed.
        assert_eq!(fingerprint(&sub("p", "")), "7393ce51cdc89d0979cf15aa05e6047ae5a16fbc732e339d27b9254c2ba5ec85");
    }

    #[test]
    fn canonical_json_sorts_keys() {
        assert_eq!(canonical(&json!({"b": 1, "a": {"d": 2, "c": "é"}})), r#"{"a":{"c":"é","d":2},"b":1}"#);
    }
}
