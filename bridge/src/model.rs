//! Domain vocabulary shared by the store and the services: task and plan states, profiles,
//! interaction kinds and principals, with their wire names.

use crate::config::Role;

/// A task's state (DESIGN §6). Terminal states have no outgoing transition.
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

impl TaskStatus {
    /// Every state, in lifecycle order.
    pub const ALL: [TaskStatus; 9] = [
        TaskStatus::Queued,
        TaskStatus::Starting,
        TaskStatus::Running,
        TaskStatus::WaitingForApproval,
        TaskStatus::WaitingForQuestion,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::Interrupted,
    ];

    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Starting => "starting",
            TaskStatus::Running => "running",
            TaskStatus::WaitingForApproval => "waiting_for_approval",
            TaskStatus::WaitingForQuestion => "waiting_for_question",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Interrupted => "interrupted",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }

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

/// A plan's state (DESIGN §7, plus `waiting` and `interrupted`). Terminal states are final.
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

impl PlanStatus {
    /// Every state, in lifecycle order.
    pub const ALL: [PlanStatus; 9] = [
        PlanStatus::PendingApproval,
        PlanStatus::Approved,
        PlanStatus::Running,
        PlanStatus::Waiting,
        PlanStatus::Succeeded,
        PlanStatus::Failed,
        PlanStatus::Cancelled,
        PlanStatus::Rejected,
        PlanStatus::Interrupted,
    ];

    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::PendingApproval => "pending_approval",
            PlanStatus::Approved => "approved",
            PlanStatus::Running => "running",
            PlanStatus::Waiting => "waiting",
            PlanStatus::Succeeded => "succeeded",
            PlanStatus::Failed => "failed",
            PlanStatus::Cancelled => "cancelled",
            PlanStatus::Rejected => "rejected",
            PlanStatus::Interrupted => "interrupted",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<PlanStatus> {
        PlanStatus::ALL.into_iter().find(|p| p.as_str() == s)
    }

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

impl Profile {
    /// The profile's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Review => "review",
            Profile::WorkspaceWrite => "workspace-write",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Profile> {
        match s {
            "review" => Some(Profile::Review),
            "workspace-write" => Some(Profile::WorkspaceWrite),
            _ => None,
        }
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

impl InteractionKind {
    /// The kind's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            InteractionKind::Approval => "approval",
            InteractionKind::Question => "question",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<InteractionKind> {
        match s {
            "approval" => Some(InteractionKind::Approval),
            "question" => Some(InteractionKind::Question),
            _ => None,
        }
    }

    /// The task state while this kind of interaction is pending.
    pub fn waiting_status(self) -> TaskStatus {
        match self {
            InteractionKind::Approval => TaskStatus::WaitingForApproval,
            InteractionKind::Question => TaskStatus::WaitingForQuestion,
        }
    }
}

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
}

impl Principal {
    /// The local operator: the bridge's own uid on the CLI surface.
    pub fn local_operator() -> Principal {
        Principal { name: "operator@local".into(), role: Role::Admin, workdirs: None, key_id: None }
    }

    /// The board's operator: the person logged in to the web board with a board token.
    pub fn board_operator() -> Principal {
        Principal { name: "operator@board".into(), role: Role::Admin, workdirs: None, key_id: None }
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
