//! Domain vocabulary shared by the store and the services: task, plan, step and interaction
//! states, profiles, interaction kinds, result storage, audit outcomes and principals, with
//! their wire names (which are also what the store keeps; see `store/columns.rs`).

use crate::config::Role;

/// Gives a wire-named enum `ALL` (declaration order), `as_str`, `parse` and `Display` (the wire
/// name); `WHAT` names the vocabulary in errors. The wire name is also the text the store keeps.
macro_rules! wire_names {
    ($ty:ident, $what:literal { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            /// What the values are, for error messages.
            pub const WHAT: &'static str = $what;

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            /// Parses a wire name.
            pub fn parse(s: &str) -> Option<$ty> {
                match s {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use wire_names;

/// Gives wire-named enums serde as their wire name, for the values the store keeps inside JSON
/// (the notification facts): an unknown name is an error naming the vocabulary, never a panic.
macro_rules! wire_serde {
    ($($ty:ty),+ $(,)?) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                <$ty>::parse(&text)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown {} {text:?}", <$ty>::WHAT)))
            }
        }
    )+};
}

wire_serde!(TaskStatus, PlanStatus, WorktreeState, InteractionKind);

/// A task's state. Terminal states have no outgoing transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Accepted; the provider has not been started yet.
    Queued,
    /// The provider process is being started.
    Starting,
    /// The provider is working.
    Running,
    /// The provider waits for a human decision on an approval.
    WaitingForApproval,
    /// The provider waits for a human answer to a question.
    WaitingForQuestion,
    /// Finished with a result.
    Succeeded,
    /// The provider failed.
    Failed,
    /// Cancelled by a caller.
    Cancelled,
    /// Stopped by the bridge: deadline, unanswered interaction, shutdown, restart.
    Interrupted,
}

wire_names!(TaskStatus, "task status" {
    Queued => "queued",
    Starting => "starting",
    Running => "running",
    WaitingForApproval => "waiting_for_approval",
    WaitingForQuestion => "waiting_for_question",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
});

impl TaskStatus {
    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Interrupted)
    }

    /// Whether the task waits for a human.
    pub fn is_waiting(self) -> bool {
        matches!(self, TaskStatus::WaitingForApproval | TaskStatus::WaitingForQuestion)
    }

    /// The transition matrix (the ServerFS one): `waiting_* → failed` is deliberately absent;
    /// an error while waiting interrupts the task instead.
    pub fn can_become(self, to: TaskStatus) -> bool {
        use TaskStatus::*;
        match self {
            Queued => matches!(to, Starting | Cancelled | Interrupted),
            Starting => matches!(to, Running | Failed | Cancelled | Interrupted),
            Running => {
                matches!(to, WaitingForApproval | WaitingForQuestion | Succeeded | Failed | Cancelled | Interrupted)
            }
            WaitingForApproval | WaitingForQuestion => matches!(to, Running | Cancelled | Interrupted),
            Succeeded | Failed | Cancelled | Interrupted => false,
        }
    }
}

/// A plan's state. Terminal states are final.
///
/// `pending_approval → approved → running ⇄ waiting → succeeded | failed | cancelled |
/// interrupted`, and `pending_approval → rejected | cancelled`. `waiting` means the next step
/// could not start yet (its workdir is busy or closed for recovery, or the active-task cap is
/// reached) and is retried when a writer lets go; `interrupted` means a step was in flight
/// when the bridge stopped, and the plan is never resumed past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanStatus {
    /// Filed; nothing runs until a human approves it.
    PendingApproval,
    /// Approved; its first step has not started yet.
    Approved,
    /// A step runs (or the next one is being started).
    Running,
    /// The next step waits for its workdir (or for room under the active-task cap).
    Waiting,
    /// Every step succeeded.
    Succeeded,
    /// A step failed or could not be started.
    Failed,
    /// Cancelled by its owner or an operator (or a step was cancelled).
    Cancelled,
    /// A human refused it; it keeps the reason.
    Rejected,
    /// A step was interrupted (deadline, shutdown, restart); the plan does not go on.
    Interrupted,
}

wire_names!(PlanStatus, "plan status" {
    PendingApproval => "pending_approval",
    Approved => "approved",
    Running => "running",
    Waiting => "waiting",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    Rejected => "rejected",
    Interrupted => "interrupted",
});

impl PlanStatus {
    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PlanStatus::Succeeded
                | PlanStatus::Failed
                | PlanStatus::Cancelled
                | PlanStatus::Rejected
                | PlanStatus::Interrupted
        )
    }

    /// The plan transition matrix.
    pub fn can_become(self, to: PlanStatus) -> bool {
        use PlanStatus::*;
        match self {
            PendingApproval => matches!(to, Approved | Rejected | Cancelled),
            Approved => matches!(to, Running | Waiting | Failed | Cancelled | Interrupted),
            Running => matches!(to, Waiting | Succeeded | Failed | Cancelled | Interrupted),
            Waiting => matches!(to, Running | Failed | Cancelled | Interrupted),
            Succeeded | Failed | Cancelled | Rejected | Interrupted => false,
        }
    }
}

/// What a task may do in its workdir.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Profile {
    /// Read-only: no writer lease is taken.
    Review,
    /// May modify the workdir: takes the writer lease and publishes a recovery guard.
    WorkspaceWrite,
}

wire_names!(Profile, "profile" {
    Review => "review",
    WorkspaceWrite => "workspace-write",
});

/// Where a writer task works: the user's checkout, or a git worktree of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the workdir itself, one writer at a time (the writer lease of the workdir).
    #[default]
    InPlace,
    /// In a git worktree of its own, on its own branch, outside the repository.
    Worktree,
}

wire_names!(Isolation, "isolation" {
    InPlace => "in_place",
    Worktree => "worktree",
});

/// What became of a worktree task's worktree and branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorktreeState {
    /// Submitted; the worktree does not exist yet (or its creation was cut short).
    Preparing,
    /// The worktree exists; the agent may be working in it.
    Active,
    /// The task ended; its branch holds work a human has not merged or discarded.
    Open,
    /// The task ended without changing anything: no branch is left.
    Empty,
    /// The task ended but its work could not be put on its branch: the worktree is kept
    /// (`reason` says why); a human discards it.
    Kept,
    /// The branch was merged into the checkout's branch.
    Merged,
    /// The branch was deleted by a human.
    Discarded,
    /// No worktree could be made (`reason` says why); nothing is left.
    Failed,
}

wire_names!(WorktreeState, "worktree state" {
    Preparing => "preparing",
    Active => "active",
    Open => "open",
    Empty => "empty",
    Kept => "kept",
    Merged => "merged",
    Discarded => "discarded",
    Failed => "failed",
});

impl WorktreeState {
    /// Whether the branch (or a kept worktree) still holds work nobody merged or discarded.
    pub fn holds_work(self) -> bool {
        matches!(self, WorktreeState::Preparing | WorktreeState::Active | WorktreeState::Open | WorktreeState::Kept)
    }
}

/// The kind of a pending interaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionKind {
    /// The agent asks permission for an action.
    Approval,
    /// The agent asks a question.
    Question,
}

wire_names!(InteractionKind, "interaction kind" {
    Approval => "approval",
    Question => "question",
});

impl InteractionKind {
    /// The task state while this kind of interaction is pending.
    pub fn waiting_status(self) -> TaskStatus {
        match self {
            InteractionKind::Approval => TaskStatus::WaitingForApproval,
            InteractionKind::Question => TaskStatus::WaitingForQuestion,
        }
    }
}

/// An interaction's state: answerable while `pending`; `resolved` once answered; `stale`
/// when it can no longer be answered (the task ended or moved on, the provider withdrew it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionStatus {
    /// Waiting for an answer.
    Pending,
    /// Answered.
    Resolved,
    /// No longer answerable.
    Stale,
}

wire_names!(InteractionStatus, "interaction status" {
    Pending => "pending",
    Resolved => "resolved",
    Stale => "stale",
});

/// A plan step's state. `starting` is the runner's intent, recorded before its task exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Its task is being submitted.
    Starting,
    /// Its task runs.
    Running,
    /// Its task succeeded.
    Succeeded,
    /// Its task failed, or could not be started.
    Failed,
    /// Its task (or the plan) was cancelled.
    Cancelled,
    /// Its task was interrupted.
    Interrupted,
}

wire_names!(StepStatus, "plan step status" {
    Pending => "pending",
    Starting => "starting",
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
});

/// Where a task's result is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultStorage {
    /// Whole in the task row.
    Inline,
    /// In a spool file; the task row holds a preview.
    Spool,
}

wire_names!(ResultStorage, "result storage" {
    Inline => "inline",
    Spool => "spool",
});

/// How an audited call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditOutcome {
    /// It succeeded.
    Ok,
    /// Authentication or authorization refused it.
    Denied,
    /// Its arguments were invalid.
    Invalid,
    /// It failed.
    Error,
}

wire_names!(AuditOutcome, "audit outcome" {
    Ok => "ok",
    Denied => "denied",
    Invalid => "invalid",
    Error => "error",
});

/// Who is calling: resolved by the registry from the credential and the surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The name tasks are owned by (an API key's name, `operator@local`, the tunnel principal).
    pub name: String,
    /// The role policy checks use.
    pub role: Role,
    /// The workdirs this principal may use (`None` = all).
    pub workdirs: Option<Vec<String>>,
    /// The API key behind the call, if any (for last-used bookkeeping).
    pub key_id: Option<String>,
    /// A name to show beside `name` (an OAuth token's `email` or `preferred_username`).
    pub display: Option<String>,
}

impl Principal {
    /// The local operator: the bridge's own uid on the CLI surface.
    pub fn local_operator() -> Principal {
        Principal { name: "operator@local".into(), role: Role::Admin, workdirs: None, key_id: None, display: None }
    }

    /// The board's operator: the person logged in to the web board with a board token.
    pub fn board_operator() -> Principal {
        Principal { name: "operator@board".into(), role: Role::Admin, workdirs: None, key_id: None, display: None }
    }

    /// Whether this is a person at the bridge's own machine (the local CLI's uid or a board
    /// session) rather than a key holder: only they approve plans, and their plans need no
    /// approval. The surface must be checked too: a tunnel principal may carry either name.
    pub fn is_local_human(&self) -> bool {
        self.key_id.is_none() && (self.name == "operator@local" || self.name == "operator@board")
    }

    /// Whether this principal sees every principal's tasks.
    pub fn sees_everything(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether this principal may use the workdir `alias`.
    pub fn may_use_workdir(&self, alias: &str) -> bool {
        self.workdirs.as_ref().is_none_or(|list| list.iter().any(|w| w == alias))
    }
}

/// Token usage and cost as a runtime reports them for one task (all turns of this task, none
/// of an earlier task whose session it continues). `input_tokens` counts every prompt token,
/// cached ones included (Claude Code reports its cache reads and writes apart: the provider
/// adds them in), so `cached_input_tokens ≤ input_tokens` for every runtime.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to the prompt cache, where the runtime says.
    pub cache_write_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Reasoning (thinking) output tokens, where the runtime says.
    pub reasoning_tokens: Option<u64>,
    /// Cost in US dollars, where the runtime computes it (Claude Code).
    pub cost_usd: Option<f64>,
    /// The model that actually answered, where the runtime says.
    pub model: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_are_final_and_names_round_trip() {
        for from in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(from.as_str()), Some(from));
            if from.is_terminal() {
                assert!(TaskStatus::ALL.iter().all(|to| !from.can_become(*to)));
            }
        }
        assert!(!TaskStatus::WaitingForApproval.can_become(TaskStatus::Failed));
        assert!(TaskStatus::Running.can_become(TaskStatus::WaitingForQuestion));
    }

    #[test]
    fn plan_states_are_final_and_approval_comes_first() {
        for from in PlanStatus::ALL {
            assert_eq!(PlanStatus::parse(from.as_str()), Some(from));
            if from.is_terminal() {
                assert!(PlanStatus::ALL.iter().all(|to| !from.can_become(*to)));
            }
        }
        assert!(!PlanStatus::PendingApproval.can_become(PlanStatus::Running), "nothing runs unapproved");
        assert!(!PlanStatus::PendingApproval.can_become(PlanStatus::Waiting));
        assert!(PlanStatus::Waiting.can_become(PlanStatus::Running));
    }
}
