//! The error every capability returns: a stable `UPPER_SNAKE` code and a message for the
//! caller, and what kind of failure each code is. Messages never contain host paths, prompts
//! or secrets. Codes are written only through the constants of [`code`] (and
//! `bridge_proto::codes`), never as string literals.

use crate::model::InteractionKind;
use crate::store::StoreError;

/// Tool error codes (the ServerFS names where it had one).
pub mod code {
    pub use bridge_proto::codes::{INVALID_ARGUMENT, PEER_NOT_AUTHORIZED, UNAUTHENTICATED, UNKNOWN_TOOL};
    /// An unexpected internal failure (details are logged, not returned).
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
    /// Unknown workdir alias (or one outside the caller's allowlist).
    pub const WORKDIR_NOT_FOUND: &str = "WORKDIR_NOT_FOUND";
    /// The workdir's agent mode is disabled.
    pub const AGENT_DISABLED: &str = "AGENT_DISABLED";
    /// The runtime is not allowed on this workdir.
    pub const AGENT_RUNTIME_NOT_ALLOWED: &str = "AGENT_RUNTIME_NOT_ALLOWED";
    /// The profile exceeds the workdir's mode, or a continuation escalates it.
    pub const AGENT_PROFILE_NOT_ALLOWED: &str = "AGENT_PROFILE_NOT_ALLOWED";
    /// The runtime cannot start a task now.
    pub const AGENT_RUNTIME_UNAVAILABLE: &str = "AGENT_RUNTIME_UNAVAILABLE";
    /// The relative path is malformed or escapes the workdir.
    pub const INVALID_WORKDIR_PATH: &str = "INVALID_WORKDIR_PATH";
    /// The relative path does not exist.
    pub const WORKDIR_PATH_NOT_FOUND: &str = "WORKDIR_PATH_NOT_FOUND";
    /// Another writer holds the workdir.
    pub const WORKDIR_BUSY: &str = "WORKDIR_BUSY";
    /// A previous writer's stop is unproven; the workdir stays closed.
    pub const WORKDIR_RECOVERY_REQUIRED: &str = "WORKDIR_RECOVERY_REQUIRED";
    /// Unknown task, or one the caller does not own.
    pub const AGENT_TASK_NOT_FOUND: &str = "AGENT_TASK_NOT_FOUND";
    /// Too many active tasks.
    pub const AGENT_TASK_LIMIT_REACHED: &str = "AGENT_TASK_LIMIT_REACHED";
    /// The task is not running (steering).
    pub const AGENT_TASK_NOT_ACTIVE: &str = "AGENT_TASK_NOT_ACTIVE";
    /// The task is terminal (steering).
    pub const AGENT_TASK_TERMINAL: &str = "AGENT_TASK_TERMINAL";
    /// The task ran past its deadline.
    pub const AGENT_TASK_TIMED_OUT: &str = "AGENT_TASK_TIMED_OUT";
    /// The continuation source cannot be resumed.
    pub const AGENT_SESSION_NOT_RESUMABLE: &str = "AGENT_SESSION_NOT_RESUMABLE";
    /// The idempotency key was used with a different request.
    pub const AGENT_IDEMPOTENCY_CONFLICT: &str = "AGENT_IDEMPOTENCY_CONFLICT";
    /// The prompt is larger than 65536 bytes.
    pub const AGENT_PROMPT_TOO_LARGE: &str = "AGENT_PROMPT_TOO_LARGE";
    /// The steering message is larger than 65536 bytes.
    pub const AGENT_MESSAGE_TOO_LARGE: &str = "AGENT_MESSAGE_TOO_LARGE";
    /// An interaction went unanswered past its deadline.
    pub const AGENT_INTERACTION_TIMED_OUT: &str = "AGENT_INTERACTION_TIMED_OUT";
    /// The provider failed.
    pub const AGENT_PROVIDER_ERROR: &str = "AGENT_PROVIDER_ERROR";
    /// The provider's process ended without finishing its turn.
    pub const AGENT_PROVIDER_DISCONNECTED: &str = "AGENT_PROVIDER_DISCONNECTED";
    /// Reconciliation proved the provider stopped.
    pub const AGENT_PROVIDER_INACTIVE: &str = "AGENT_PROVIDER_INACTIVE";
    /// The result is larger than 8 MiB.
    pub const AGENT_RESULT_TOO_LARGE: &str = "AGENT_RESULT_TOO_LARGE";
    /// The result is inline (read it from the task) or its spool file is gone.
    pub const AGENT_RESULT_NOT_RETRIEVABLE: &str = "AGENT_RESULT_NOT_RETRIEVABLE";
    /// The task has no change set to read (not yet, or it could not be taken: the reason says).
    pub const AGENT_DIFF_NOT_AVAILABLE: &str = "AGENT_DIFF_NOT_AVAILABLE";
    /// The spool file could not be written or read safely.
    pub const AGENT_RESULT_STORAGE_ERROR: &str = "AGENT_RESULT_STORAGE_ERROR";
    /// The offset is past the end or inside a character.
    pub const INVALID_RESULT_OFFSET: &str = "INVALID_RESULT_OFFSET";
    /// `max_bytes` cannot hold the next character.
    pub const INVALID_RESULT_LIMIT: &str = "INVALID_RESULT_LIMIT";
    /// `SERVERFS_AGENT_SANDBOX=required` and the task sandbox cannot run on this machine.
    pub const AGENT_SANDBOX_UNAVAILABLE: &str = "AGENT_SANDBOX_UNAVAILABLE";
    /// `isolation: worktree` on a workdir that is not the top of a git work tree.
    pub const WORKDIR_NOT_A_GIT_REPOSITORY: &str = "WORKDIR_NOT_A_GIT_REPOSITORY";
    /// A worktree task's worktree could not be made (the message says which step failed).
    pub const WORKTREE_FAILED: &str = "WORKTREE_FAILED";
    /// The task has no branch to merge or discard (it worked in place, changed nothing, is
    /// still running, or its worktree is kept until its stop is proven).
    pub const AGENT_BRANCH_NOT_OPEN: &str = "AGENT_BRANCH_NOT_OPEN";
    /// A merge would touch files the user's checkout has uncommitted changes in.
    pub const WORKDIR_DIRTY: &str = "WORKDIR_DIRTY";
    /// The task's branch and the user's branch change the same lines: a merge needs a human.
    pub const MERGE_CONFLICT: &str = "MERGE_CONFLICT";
    /// A branch is not where the call expects it: the task's branch was moved since the task
    /// ended, the user's branch moved away from the task's base (for `ff_only`), or the
    /// checkout is on no branch.
    pub const BRANCH_MOVED: &str = "BRANCH_MOVED";
    /// Unknown request id on that task.
    pub const REQUEST_NOT_FOUND: &str = "REQUEST_NOT_FOUND";
    /// The request was already answered.
    pub const REQUEST_ALREADY_RESOLVED: &str = "REQUEST_ALREADY_RESOLVED";
    /// The request can no longer be answered.
    pub const REQUEST_STALE: &str = "REQUEST_STALE";
    /// The decision is not valid for this request.
    pub const INVALID_APPROVAL_DECISION: &str = "INVALID_APPROVAL_DECISION";
    /// The answers do not fit the question.
    pub const INVALID_QUESTION_ANSWER: &str = "INVALID_QUESTION_ANSWER";
    /// A granted permission was not requested.
    pub const PERMISSION_OUTSIDE_POLICY: &str = "PERMISSION_OUTSIDE_POLICY";
    /// The bridge was stopped while the task ran.
    pub const BRIDGE_SHUTDOWN: &str = "BRIDGE_SHUTDOWN";
    /// The bridge is shutting down and takes no new task.
    pub const BRIDGE_CLOSED: &str = bridge_proto::codes::BRIDGE_CLOSED;
    /// The socket is full of connections with a request in progress, or the bridge has no
    /// file descriptor left (answered at accept, then the connection is closed).
    pub const BRIDGE_BUSY: &str = bridge_proto::codes::BRIDGE_BUSY;
    /// A request line started but did not arrive whole within the bound.
    pub const REQUEST_TIMED_OUT: &str = bridge_proto::codes::REQUEST_TIMED_OUT;
    /// The bridge restarted while the task ran.
    pub const BRIDGE_RESTARTED: &str = "BRIDGE_RESTARTED";
    /// An API key name is taken.
    pub const KEY_NAME_TAKEN: &str = "KEY_NAME_TAKEN";
    /// No such API key.
    pub const KEY_NOT_FOUND: &str = "KEY_NOT_FOUND";
    /// Unknown plan, or one the caller does not own.
    pub const AGENT_PLAN_NOT_FOUND: &str = "AGENT_PLAN_NOT_FOUND";
    /// The plan no longer awaits approval (approve or reject came too late or twice).
    pub const PLAN_NOT_PENDING: &str = "PLAN_NOT_PENDING";
    /// Only a person at the bridge's machine (local CLI, board) approves or rejects a plan.
    pub const PLAN_APPROVAL_NOT_ALLOWED: &str = "PLAN_APPROVAL_NOT_ALLOWED";
    /// A plan's step was cancelled (the plan stopped with it).
    pub const AGENT_PLAN_STEP_CANCELLED: &str = "AGENT_PLAN_STEP_CANCELLED";
    /// A plan's step failed without an error code of its own.
    pub const AGENT_PLAN_STEP_FAILED: &str = "AGENT_PLAN_STEP_FAILED";

    /// An OAuth token is neither a JWT this resource can verify nor one it can introspect.
    /// This and the other `OAUTH_*` reasons are audit codes: the caller sees `UNAUTHENTICATED`.
    pub const OAUTH_TOKEN_MALFORMED: &str = "OAUTH_TOKEN_MALFORMED";
    /// An OAuth token is an ID token, not an access token (a `nonce` claim, or a header `typ`
    /// other than `at+jwt` or `JWT`); audit only.
    pub const OAUTH_NOT_AN_ACCESS_TOKEN: &str = "OAUTH_NOT_AN_ACCESS_TOKEN";
    /// An OAuth token's algorithm is not an accepted asymmetric one (`none`, HS*, …); audit only.
    pub const OAUTH_ALGORITHM_REFUSED: &str = "OAUTH_ALGORITHM_REFUSED";
    /// An OAuth token names a key the identity provider does not publish; audit only.
    pub const OAUTH_UNKNOWN_KEY: &str = "OAUTH_UNKNOWN_KEY";
    /// The identity provider's keys could not be fetched and none are cached; audit only.
    pub const OAUTH_KEYS_UNAVAILABLE: &str = "OAUTH_KEYS_UNAVAILABLE";
    /// An OAuth token's signature does not verify; audit only.
    pub const OAUTH_BAD_SIGNATURE: &str = "OAUTH_BAD_SIGNATURE";
    /// An OAuth token's `exp` has passed; audit only.
    pub const OAUTH_TOKEN_EXPIRED: &str = "OAUTH_TOKEN_EXPIRED";
    /// An OAuth token's `nbf` has not come; audit only.
    pub const OAUTH_TOKEN_NOT_YET_VALID: &str = "OAUTH_TOKEN_NOT_YET_VALID";
    /// An OAuth token's `iss` is not the configured issuer; audit only.
    pub const OAUTH_WRONG_ISSUER: &str = "OAUTH_WRONG_ISSUER";
    /// An OAuth token's `aud` does not contain this resource; audit only.
    pub const OAUTH_WRONG_AUDIENCE: &str = "OAUTH_WRONG_AUDIENCE";
    /// An OAuth token lacks `exp`, `iss`, `aud` or `sub`; audit only.
    pub const OAUTH_MISSING_CLAIM: &str = "OAUTH_MISSING_CLAIM";
    /// An OAuth token's `sub` is not usable as a principal name; audit only.
    pub const OAUTH_BAD_SUBJECT: &str = "OAUTH_BAD_SUBJECT";
    /// A valid OAuth token whose subject the mapping gives no role; audit only.
    pub const OAUTH_NO_ROLE: &str = "OAUTH_NO_ROLE";
    /// Introspection says an opaque token is not active; audit only.
    pub const OAUTH_TOKEN_INACTIVE: &str = "OAUTH_TOKEN_INACTIVE";
    /// The identity provider's introspection could not be asked; audit only.
    pub const OAUTH_INTROSPECTION_FAILED: &str = "OAUTH_INTROSPECTION_FAILED";

    /// Every code of this module and of `bridge_proto::codes`, so tests can cover them all
    /// (a test checks that no constant is missing here).
    pub const ALL: &[&str] = &[
        INTERNAL_ERROR,
        WORKDIR_NOT_FOUND,
        AGENT_DISABLED,
        AGENT_RUNTIME_NOT_ALLOWED,
        AGENT_PROFILE_NOT_ALLOWED,
        AGENT_RUNTIME_UNAVAILABLE,
        INVALID_WORKDIR_PATH,
        WORKDIR_PATH_NOT_FOUND,
        WORKDIR_BUSY,
        WORKDIR_RECOVERY_REQUIRED,
        AGENT_TASK_NOT_FOUND,
        AGENT_TASK_LIMIT_REACHED,
        AGENT_TASK_NOT_ACTIVE,
        AGENT_TASK_TERMINAL,
        AGENT_TASK_TIMED_OUT,
        AGENT_SESSION_NOT_RESUMABLE,
        AGENT_IDEMPOTENCY_CONFLICT,
        AGENT_PROMPT_TOO_LARGE,
        AGENT_MESSAGE_TOO_LARGE,
        AGENT_INTERACTION_TIMED_OUT,
        AGENT_PROVIDER_ERROR,
        AGENT_PROVIDER_DISCONNECTED,
        AGENT_PROVIDER_INACTIVE,
        AGENT_RESULT_TOO_LARGE,
        AGENT_RESULT_NOT_RETRIEVABLE,
        AGENT_DIFF_NOT_AVAILABLE,
        AGENT_RESULT_STORAGE_ERROR,
        INVALID_RESULT_OFFSET,
        INVALID_RESULT_LIMIT,
        AGENT_SANDBOX_UNAVAILABLE,
        WORKDIR_NOT_A_GIT_REPOSITORY,
        WORKTREE_FAILED,
        AGENT_BRANCH_NOT_OPEN,
        WORKDIR_DIRTY,
        MERGE_CONFLICT,
        BRANCH_MOVED,
        REQUEST_NOT_FOUND,
        REQUEST_ALREADY_RESOLVED,
        REQUEST_STALE,
        INVALID_APPROVAL_DECISION,
        INVALID_QUESTION_ANSWER,
        PERMISSION_OUTSIDE_POLICY,
        BRIDGE_SHUTDOWN,
        BRIDGE_RESTARTED,
        KEY_NAME_TAKEN,
        KEY_NOT_FOUND,
        AGENT_PLAN_NOT_FOUND,
        PLAN_NOT_PENDING,
        PLAN_APPROVAL_NOT_ALLOWED,
        AGENT_PLAN_STEP_CANCELLED,
        AGENT_PLAN_STEP_FAILED,
        OAUTH_TOKEN_MALFORMED,
        OAUTH_NOT_AN_ACCESS_TOKEN,
        OAUTH_ALGORITHM_REFUSED,
        OAUTH_UNKNOWN_KEY,
        OAUTH_KEYS_UNAVAILABLE,
        OAUTH_BAD_SIGNATURE,
        OAUTH_TOKEN_EXPIRED,
        OAUTH_TOKEN_NOT_YET_VALID,
        OAUTH_WRONG_ISSUER,
        OAUTH_WRONG_AUDIENCE,
        OAUTH_MISSING_CLAIM,
        OAUTH_BAD_SUBJECT,
        OAUTH_NO_ROLE,
        OAUTH_TOKEN_INACTIVE,
        OAUTH_INTROSPECTION_FAILED,
        proto::OAUTH_NOT_CONFIGURED,
        proto::INVALID_REQUEST,
        proto::REQUEST_TOO_LARGE,
        proto::RESPONSE_TOO_LARGE,
        proto::PROTOCOL_VERSION_UNSUPPORTED,
        proto::METHOD_NOT_FOUND,
        proto::PEER_NOT_AUTHORIZED,
        proto::BRIDGE_PROTOCOL_ERROR,
        proto::BRIDGE_CLOSED,
        proto::BRIDGE_BUSY,
        proto::REQUEST_TIMED_OUT,
        proto::SOCKET_PATH_IN_USE,
        proto::UNAUTHENTICATED,
        proto::UNKNOWN_TOOL,
        proto::INVALID_ARGUMENT,
        proto::AGENT_BRIDGE_UNAVAILABLE,
        proto::AGENT_BRIDGE_PROTOCOL_ERROR,
    ];

    use bridge_proto::codes as proto;
}

/// What kind of failure a code stands for: what the caller can do about it, and the board's
/// HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// What the call names does not exist, or the caller may not see it (the two look alike).
    NotFound,
    /// The request is malformed or out of bounds: the caller must change it.
    Invalid,
    /// The caller may not do this (credential, role, policy, workdir mode).
    Denied,
    /// The state of what the call names forbids it (already answered, terminal, taken).
    Conflict,
    /// Retry later: a workdir, the task cap or the socket is full.
    Busy,
    /// A part the call needs is not there: a runtime, the sandbox, the bridge itself.
    Unavailable,
    /// Why a task or plan stopped (recorded on it; not a refusal of the call).
    Stopped,
    /// Something went wrong inside the bridge or between front and bridge.
    Internal,
}

impl ErrorKind {
    /// The kind of `code`, or `None` for a string that is no code of the bridge.
    pub fn of(c: &str) -> Option<ErrorKind> {
        use bridge_proto::codes as proto;
        use code::*;
        Some(match c {
            WORKDIR_NOT_FOUND
            | WORKDIR_PATH_NOT_FOUND
            | AGENT_TASK_NOT_FOUND
            | REQUEST_NOT_FOUND
            | KEY_NOT_FOUND
            | AGENT_PLAN_NOT_FOUND
            | proto::METHOD_NOT_FOUND => ErrorKind::NotFound,
            INVALID_ARGUMENT
            | INVALID_WORKDIR_PATH
            | WORKDIR_NOT_A_GIT_REPOSITORY
            | AGENT_PROMPT_TOO_LARGE
            | AGENT_MESSAGE_TOO_LARGE
            | INVALID_RESULT_OFFSET
            | INVALID_RESULT_LIMIT
            | INVALID_APPROVAL_DECISION
            | INVALID_QUESTION_ANSWER
            | proto::INVALID_REQUEST
            | proto::REQUEST_TOO_LARGE
            | proto::PROTOCOL_VERSION_UNSUPPORTED
            | REQUEST_TIMED_OUT => ErrorKind::Invalid,
            // An unknown tool and a tool outside the caller's rights are one answer by design.
            UNAUTHENTICATED
            | PEER_NOT_AUTHORIZED
            | UNKNOWN_TOOL
            | AGENT_DISABLED
            | AGENT_RUNTIME_NOT_ALLOWED
            | AGENT_PROFILE_NOT_ALLOWED
            | PERMISSION_OUTSIDE_POLICY
            | PLAN_APPROVAL_NOT_ALLOWED
            | OAUTH_TOKEN_MALFORMED
            | OAUTH_NOT_AN_ACCESS_TOKEN
            | OAUTH_ALGORITHM_REFUSED
            | OAUTH_UNKNOWN_KEY
            | OAUTH_BAD_SIGNATURE
            | OAUTH_TOKEN_EXPIRED
            | OAUTH_TOKEN_NOT_YET_VALID
            | OAUTH_WRONG_ISSUER
            | OAUTH_WRONG_AUDIENCE
            | OAUTH_MISSING_CLAIM
            | OAUTH_BAD_SUBJECT
            | OAUTH_NO_ROLE
            | OAUTH_TOKEN_INACTIVE => ErrorKind::Denied,
            WORKDIR_RECOVERY_REQUIRED
            | AGENT_TASK_NOT_ACTIVE
            | AGENT_TASK_TERMINAL
            | AGENT_SESSION_NOT_RESUMABLE
            | AGENT_IDEMPOTENCY_CONFLICT
            | AGENT_RESULT_NOT_RETRIEVABLE
            | AGENT_DIFF_NOT_AVAILABLE
            | REQUEST_ALREADY_RESOLVED
            | REQUEST_STALE
            | KEY_NAME_TAKEN
            | PLAN_NOT_PENDING
            | AGENT_BRANCH_NOT_OPEN
            | WORKDIR_DIRTY
            | MERGE_CONFLICT
            | BRANCH_MOVED
            | proto::SOCKET_PATH_IN_USE => ErrorKind::Conflict,
            WORKDIR_BUSY | AGENT_TASK_LIMIT_REACHED | BRIDGE_BUSY => ErrorKind::Busy,
            AGENT_RUNTIME_UNAVAILABLE
            | AGENT_SANDBOX_UNAVAILABLE
            | BRIDGE_CLOSED
            | OAUTH_KEYS_UNAVAILABLE
            | OAUTH_INTROSPECTION_FAILED
            | proto::OAUTH_NOT_CONFIGURED
            | proto::AGENT_BRIDGE_UNAVAILABLE => ErrorKind::Unavailable,
            AGENT_TASK_TIMED_OUT
            | AGENT_INTERACTION_TIMED_OUT
            | AGENT_PROVIDER_ERROR
            | AGENT_PROVIDER_DISCONNECTED
            | AGENT_PROVIDER_INACTIVE
            | AGENT_RESULT_TOO_LARGE
            | AGENT_RESULT_STORAGE_ERROR
            | BRIDGE_SHUTDOWN
            | BRIDGE_RESTARTED
            | AGENT_PLAN_STEP_CANCELLED
            | AGENT_PLAN_STEP_FAILED
            | WORKTREE_FAILED => ErrorKind::Stopped,
            INTERNAL_ERROR
            | proto::RESPONSE_TOO_LARGE
            | proto::BRIDGE_PROTOCOL_ERROR
            | proto::AGENT_BRIDGE_PROTOCOL_ERROR => ErrorKind::Internal,
            _ => return None,
        })
    }
}

/// A capability's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Stable code.
    pub code: &'static str,
    /// Caller-facing explanation.
    pub message: String,
}

impl ToolError {
    /// Builds an error.
    pub fn new(code: &'static str, message: impl Into<String>) -> ToolError {
        ToolError { code, message: message.into() }
    }

    /// An `INVALID_ARGUMENT` naming the parameter.
    pub fn invalid(param: &str, rule: impl std::fmt::Display) -> ToolError {
        ToolError::new(code::INVALID_ARGUMENT, format!("parameter '{param}' {rule}"))
    }

    /// The answer for a task the caller may not see (identical to a missing one).
    pub fn task_not_found() -> ToolError {
        ToolError::new(code::AGENT_TASK_NOT_FOUND, "no such task")
    }

    /// What kind of failure this is (`Internal` for a code the bridge does not know).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(self.code).unwrap_or(ErrorKind::Internal)
    }

    /// An internal failure: logged in full, returned without detail.
    pub fn internal(context: &str, err: impl std::fmt::Display) -> ToolError {
        tracing::error!(cause = %err, "{context}");
        ToolError::new(code::INTERNAL_ERROR, format!("{context}; see the bridge log"))
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> ToolError {
        match e {
            StoreError::TaskNotFound => ToolError::task_not_found(),
            StoreError::TaskLimitReached { limit } => ToolError::new(
                code::AGENT_TASK_LIMIT_REACHED,
                format!("{limit} tasks are already active (SERVERFS_AGENT_MAX_ACTIVE_TASKS); wait for one to finish"),
            ),
            StoreError::IdempotencyConflict => ToolError::new(
                code::AGENT_IDEMPOTENCY_CONFLICT,
                "this idempotency_key was already used for a different request",
            ),
            StoreError::GuardPresent { .. } => ToolError::new(
                code::WORKDIR_RECOVERY_REQUIRED,
                "a previous writer's stop on this workdir is not proven; see `agent-bridge doctor`",
            ),
            StoreError::RequestNotFound => ToolError::new(code::REQUEST_NOT_FOUND, "no such request on this task"),
            StoreError::RequestAlreadyResolved => {
                ToolError::new(code::REQUEST_ALREADY_RESOLVED, "this request was already answered")
            }
            StoreError::RequestStale | StoreError::RequestPending => {
                ToolError::new(code::REQUEST_STALE, "this request can no longer be answered")
            }
            StoreError::WrongKind { expected, actual } => {
                let c = match expected {
                    InteractionKind::Approval => code::INVALID_APPROVAL_DECISION,
                    InteractionKind::Question => code::INVALID_QUESTION_ANSWER,
                };
                ToolError::new(c, format!("request is a {actual}, not a {expected}"))
            }
            StoreError::PlanNotFound => ToolError::new(code::AGENT_PLAN_NOT_FOUND, "no such plan"),
            StoreError::InvalidPlanTransition { from, to } => {
                ToolError::new(code::PLAN_NOT_PENDING, format!("a {from} plan cannot become {to}"))
            }
            StoreError::KeyNameTaken(name) => {
                ToolError::new(code::KEY_NAME_TAKEN, format!("an API key named {name:?} already exists"))
            }
            other => ToolError::internal("store failure", other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the `pub const NAME: &str` items of a source file (a code's value is its
    /// name, which this checks for the literal ones).
    fn constants(source: &str) -> Vec<&str> {
        source
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const ")?.split_once(": &str = "))
            .map(|(name, value)| {
                let literal = value.trim_end_matches(';').trim_matches('"');
                assert!(value.starts_with("bridge_proto::") || literal == name, "{name} = {value}");
                name
            })
            .collect()
    }

    #[test]
    fn every_code_is_listed_once_and_has_a_kind() {
        let declared: Vec<&str> = constants(include_str!("error.rs"))
            .into_iter()
            .chain(constants(include_str!("../../proto/src/codes.rs")))
            .collect();
        assert!(declared.len() > 50, "the parse found the constants: {declared:?}");
        for name in &declared {
            assert!(code::ALL.contains(name), "{name} is missing from code::ALL");
        }
        let mut seen = std::collections::HashSet::new();
        for c in code::ALL {
            assert!(seen.insert(c), "{c} is listed twice");
            assert!(c.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'), "{c} is not UPPER_SNAKE");
            assert!(ErrorKind::of(c).is_some(), "{c} has no ErrorKind");
        }
        assert_eq!(ErrorKind::of("NO_SUCH_CODE"), None);
        assert_eq!(ToolError::new("NO_SUCH_CODE", "x").kind(), ErrorKind::Internal);
    }

    #[test]
    fn kinds_follow_the_codes_meaning() {
        assert_eq!(ToolError::task_not_found().kind(), ErrorKind::NotFound);
        assert_eq!(ToolError::invalid("x", "is bad").kind(), ErrorKind::Invalid);
        assert_eq!(ErrorKind::of(code::UNKNOWN_TOOL), Some(ErrorKind::Denied), "one answer with a forbidden tool");
        assert_eq!(ErrorKind::of(code::WORKDIR_BUSY), Some(ErrorKind::Busy));
        assert_eq!(ErrorKind::of(code::REQUEST_STALE), Some(ErrorKind::Conflict));
    }

    #[test]
    fn a_wrong_kind_of_request_names_the_decision_code() {
        let approval = ToolError::from(StoreError::WrongKind {
            expected: InteractionKind::Approval,
            actual: InteractionKind::Question,
        });
        assert_eq!(approval.code, code::INVALID_APPROVAL_DECISION);
        assert_eq!(approval.message, "request is a question, not a approval");
        let question = ToolError::from(StoreError::WrongKind {
            expected: InteractionKind::Question,
            actual: InteractionKind::Approval,
        });
        assert_eq!(question.code, code::INVALID_QUESTION_ANSWER);
    }
}
