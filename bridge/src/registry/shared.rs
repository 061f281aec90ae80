//! What the capability tables share: the argument types more than one area parses (their
//! names and doc comments are part of the announced schemas) and the metadata constructors.

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{Annotations, Scope};
use super::{ALL_SURFACES, CallCtx, LOCAL_SURFACES, Meta};
use crate::config::{Role, RuntimeName};
use crate::model::Profile;
use crate::tasks::TaskService;
use bridge_proto::methods::Surface;

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArgs {}

/// A runtime name.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum RuntimeArg {
    Codex,
    Claude,
    Fake,
}

impl From<RuntimeArg> for RuntimeName {
    fn from(r: RuntimeArg) -> RuntimeName {
        match r {
            RuntimeArg::Codex => RuntimeName::Codex,
            RuntimeArg::Claude => RuntimeName::Claude,
            RuntimeArg::Fake => RuntimeName::Fake,
        }
    }
}

/// A task profile.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
pub(super) enum ProfileArg {
    #[serde(rename = "review")]
    Review,
    #[default]
    #[serde(rename = "workspace-write")]
    WorkspaceWrite,
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Profile {
        match p {
            ProfileArg::Review => Profile::Review,
            ProfileArg::WorkspaceWrite => Profile::WorkspaceWrite,
        }
    }
}

/// Where a writer task works.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
pub(super) enum IsolationArg {
    #[serde(rename = "in_place")]
    InPlace,
    #[serde(rename = "worktree")]
    Worktree,
}

impl From<IsolationArg> for crate::model::Isolation {
    fn from(i: IsolationArg) -> crate::model::Isolation {
        match i {
            IsolationArg::InPlace => crate::model::Isolation::InPlace,
            IsolationArg::Worktree => crate::model::Isolation::Worktree,
        }
    }
}

/// A capability on every surface, for `min_role` and up.
pub(super) fn meta(
    name: &'static str,
    scope: Scope,
    min_role: Role,
    description: &'static str,
    annotations: Annotations,
) -> Meta {
    Meta { name, scope, min_role, surfaces: ALL_SURFACES, description, annotations }
}

/// An admin capability on the operator's own surfaces (never MCP).
pub(super) fn local(name: &'static str, scope: Scope, description: &'static str, annotations: Annotations) -> Meta {
    local_on(name, scope, LOCAL_SURFACES, description, annotations)
}

/// An admin capability on `surfaces` only.
pub(super) fn local_on(
    name: &'static str,
    scope: Scope,
    surfaces: &'static [Surface],
    description: &'static str,
    annotations: Annotations,
) -> Meta {
    Meta { name, scope, min_role: Role::Admin, surfaces, description, annotations }
}

/// The task service, which most handlers call.
pub(super) fn tasks(ctx: &CallCtx) -> &TaskService {
    &ctx.services.tasks
}
