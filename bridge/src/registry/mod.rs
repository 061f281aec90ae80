//! The capability registry: the one place every action passes through, from every surface.
//! It authenticates, hides what the caller may not see, validates the
//! arguments against the schema it announces, calls the service and writes one audit row.
//! It holds no business logic: each entry delegates to a service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::config::{BridgeConfig, Role};
use crate::error::{ToolError, code};
use crate::model::{AuditOutcome, Principal};
use crate::store::Store;
use crate::store::audit::AuditRow;
use crate::tasks::TaskService;
use bridge_proto::methods::{CallParams, ListParams, Surface};

mod admin_tools;
pub mod args;
pub mod audit;
pub mod auth;
mod info_tools;
mod key_tools;
mod links;
mod notify_tools;
mod plan_tools;
pub mod policy;
pub mod sessions;
mod shared;
mod task_tools;
#[cfg(test)]
mod tests;

use auth::{Auth, Peer};
pub use links::LinkAnswer;
use policy::{Annotations, Scope};

/// The services capabilities delegate to.
pub struct Services {
    /// Tasks.
    pub tasks: TaskService,
    /// Plans.
    pub plans: crate::plans::PlanService,
    /// API keys.
    pub keys: crate::keys::KeyService,
    /// Outbound notifications.
    pub notify: crate::notify::Notifier,
    /// The address the board actually listens on, once it does.
    pub board_addr: Arc<std::sync::OnceLock<std::net::SocketAddr>>,
    /// The store (board tokens, audit reads).
    pub store: Arc<Store>,
    /// The configuration.
    pub config: Arc<BridgeConfig>,
    /// Authentication (the key cache, board tokens and sessions).
    pub auth: Auth,
    /// The audit writer.
    pub audit: audit::AuditSink,
    /// Time.
    pub clock: Clock,
}

/// What a handler gets besides its arguments.
#[derive(Clone)]
pub struct CallCtx {
    /// The caller.
    pub principal: Principal,
    /// Where the call came from.
    pub surface: Surface,
    /// The services.
    pub services: Arc<Services>,
    /// How many tools the caller can see (for `whoami`).
    pub visible_tools: usize,
}

/// A capability's answer: a JSON tree, or JSON text written straight from its rows (the task
/// view, the call callers poll). The socket sends either as it is; the board reads a tree.
#[derive(Debug)]
pub enum Reply {
    /// A JSON tree.
    Tree(Value),
    /// JSON text.
    Text(Box<RawValue>),
}

impl From<Value> for Reply {
    fn from(value: Value) -> Reply {
        Reply::Tree(value)
    }
}

impl From<Box<RawValue>> for Reply {
    fn from(text: Box<RawValue>) -> Reply {
        Reply::Text(text)
    }
}

impl Reply {
    /// The answer as a JSON tree.
    pub fn into_value(self) -> Value {
        match self {
            Reply::Tree(value) => value,
            Reply::Text(text) => serde_json::from_str(text.get()).unwrap_or(Value::Null),
        }
    }

    /// A top-level string of a tree answer (a text answer's ids are its call's arguments).
    fn id(&self, key: &str) -> Option<&str> {
        match self {
            Reply::Tree(value) => value.get(key).and_then(Value::as_str),
            Reply::Text(_) => None,
        }
    }
}

impl serde::Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Tree(value) => value.serialize(s),
            Reply::Text(text) => text.serialize(s),
        }
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Reply, ToolError>> + Send>>;
type Handler = Box<dyn Fn(CallCtx, Value) -> BoxFuture + Send + Sync>;

/// One capability: its static description and the handler that parses its arguments.
pub struct Capability {
    /// Name, scope, role, surfaces, description, annotations.
    pub meta: Meta,
    /// The input schema, generated from the type the handler parses.
    pub input_schema: Value,
    handler: Handler,
}

/// Every surface.
pub const ALL_SURFACES: &[Surface] = &[Surface::Mcp, Surface::Cli, Surface::Board];
/// The operator's own surfaces (never MCP).
pub const LOCAL_SURFACES: &[Surface] = &[Surface::Cli, Surface::Board];

/// The static part of a capability entry.
pub struct Meta {
    /// Tool name.
    pub name: &'static str,
    /// Read or write.
    pub scope: Scope,
    /// The least role that sees it.
    pub min_role: Role,
    /// Surfaces.
    pub surfaces: &'static [Surface],
    /// One sentence.
    pub description: &'static str,
    /// Annotations.
    pub annotations: Annotations,
}

impl Capability {
    /// Builds an entry whose arguments parse as `T`; the schema comes from `T`.
    pub fn new<T, F, Fut, R>(meta: Meta, handler: F) -> Capability
    where
        T: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        F: Fn(CallCtx, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: Into<Reply> + 'static,
    {
        let handler: Handler = Box::new(move |ctx, value| match serde_json::from_value::<T>(value) {
            Ok(args) => {
                let answer = handler(ctx, args);
                Box::pin(async move { answer.await.map(Into::into) })
            }
            Err(e) => Box::pin(std::future::ready(Err(ToolError::new(
                code::INVALID_ARGUMENT,
                format!("invalid arguments: {e}"),
            )))),
        });
        Capability { meta, input_schema: args::schema_for::<T>(), handler }
    }

    fn view(&self) -> Value {
        let m = &self.meta;
        json!({
            "name": m.name,
            "description": m.description,
            "input_schema": self.input_schema,
            "annotations": m.annotations.to_json(),
            "scope": m.scope.as_str(),
            "min_role": m.min_role.as_str(),
        })
    }
}

/// Every capability of this build, in the order `tools/list` shows them.
fn catalog() -> Vec<Capability> {
    let mut capabilities = info_tools::all();
    capabilities.extend(task_tools::all());
    capabilities.extend(admin_tools::all());
    capabilities.extend(key_tools::all());
    capabilities.extend(plan_tools::all());
    capabilities.extend(notify_tools::all());
    capabilities
}

/// The registry.
pub struct Registry {
    capabilities: Vec<Capability>,
    services: Arc<Services>,
}

impl Registry {
    /// The registry with every capability of this build.
    pub fn new(services: Services) -> Registry {
        Registry { capabilities: catalog(), services: Arc::new(services) }
    }

    /// The services.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    fn visible(&self, role: Role, surface: Surface) -> impl Iterator<Item = &Capability> + '_ {
        self.capabilities.iter().filter(move |c| policy::can_see(role, c.meta.min_role, surface, c.meta.surfaces))
    }

    /// `capabilities.list`: the tools the caller may see.
    pub async fn list(&self, params: &ListParams, peer: &Peer) -> Result<Value, ToolError> {
        let auth = &self.services.auth;
        let principal =
            auth.resolve(params.credential.as_deref(), params.surface, params.path, peer).await.map_err(|f| f.error)?;
        let tools: Vec<Value> = self.visible(principal.role, params.surface).map(Capability::view).collect();
        Ok(json!({ "tools": tools, "principal": { "name": principal.name, "role": principal.role.as_str() } }))
    }

    /// `capabilities.call`: authenticate, authorize, validate, run, audit.
    pub async fn call(&self, params: CallParams, peer: &Peer) -> Result<Reply, ToolError> {
        let started = Instant::now();
        let mut row = self.audit_row(&params);
        // A task process's attempt is audited under its task, whatever it claims.
        let peer_task =
            peer.in_task.as_ref().and_then(|o| o.task_id.clone()).filter(|id| crate::ids::looks_like(id, "agt_"));
        if peer_task.is_some() {
            row.task_id = peer_task.clone();
        }
        let resolved =
            self.services.auth.resolve(params.credential.as_deref(), params.surface, params.path, peer).await;
        let outcome = self.call_inner(params, resolved, &mut row).await;
        self.finish(row, outcome, peer_task, started)
    }

    /// The audit row of a call before anything is decided (outcome `denied`).
    fn audit_row(&self, params: &CallParams) -> AuditRow {
        // The client's self-reported name and version, in the safe shape the audit writer gives it.
        let client_name = params.client.as_ref().map(|c| match &c.version {
            Some(v) => format!("{}/{}", c.name, v),
            None => c.name.clone(),
        });
        // Caller-supplied strings reach the audit log only in a harmless shape.
        let capability_name: String =
            params.name.chars().filter(|c| c.is_ascii_alphanumeric() || "_-.".contains(*c)).take(64).collect();
        AuditRow {
            audit_id: 0,
            at: self.services.clock.now_ms(),
            surface: params.surface.as_str().to_owned(),
            principal: None,
            role: None,
            capability: capability_name,
            scope: None,
            outcome: AuditOutcome::Denied,
            error_code: None,
            duration_us: 0,
            task_id: params
                .arguments
                .get("task_id")
                .and_then(Value::as_str)
                .filter(|id| crate::ids::looks_like(id, "agt_"))
                .map(str::to_owned),
            plan_id: params
                .arguments
                .get("plan_id")
                .and_then(Value::as_str)
                .filter(|id| crate::ids::looks_like(id, "pln_"))
                .map(str::to_owned),
            client_name,
            count: 1,
        }
    }

    /// Completes a call's audit row from its outcome, records it, and returns the answer.
    /// `peer_task` is the task of a refused task process (the only task a flood row names).
    fn finish(
        &self,
        mut row: AuditRow,
        outcome: Result<(Reply, Option<String>), (ToolError, Option<String>)>,
        peer_task: Option<String>,
        started: Instant,
    ) -> Result<Reply, ToolError> {
        // A row of a call that failed authentication is coalesced by its source (see
        // `audit`): only what the bridge decided may name it, so a name no capability has
        // becomes `*`, and the task is the refused task process's own, never an argument.
        if audit::is_flood_row(&row) {
            if !self.capabilities.iter().any(|c| c.meta.name == row.capability) {
                row.capability = "*".into();
            }
            row.task_id = peer_task;
            row.plan_id = None;
        }
        row.duration_us = started.elapsed().as_micros().min(i64::MAX as u128) as i64;
        let key_id = match &outcome {
            Ok((value, key_id)) => {
                row.outcome = AuditOutcome::Ok;
                if let Some(id) = value.id("task_id") {
                    row.task_id = Some(id.to_owned());
                }
                if let Some(id) = value.id("plan_id") {
                    row.plan_id = Some(id.to_owned());
                }
                key_id.clone()
            }
            Err((e, key_id)) => {
                row.error_code.get_or_insert_with(|| e.code.to_owned());
                if row.outcome != AuditOutcome::Denied {
                    row.outcome =
                        if e.code == code::INVALID_ARGUMENT { AuditOutcome::Invalid } else { AuditOutcome::Error };
                }
                key_id.clone()
            }
        };
        self.services.audit.record(row, key_id);
        outcome.map(|(v, _)| v).map_err(|(e, _)| e)
    }

    /// The board's login: a presented board token opens a session (see
    /// [`Auth::board_login`]); returns the session id. Audited like a call, as `board_login`.
    pub async fn board_login(&self, presented: &str, user_agent: &str) -> Result<String, ToolError> {
        let services = &self.services;
        let now = services.clock.now_ms();
        let outcome = services.auth.board_login(&services.store, presented, now, user_agent).await;
        let ok = outcome.is_ok();
        let row = AuditRow {
            audit_id: 0,
            at: now,
            surface: Surface::Board.as_str().to_owned(),
            principal: ok.then(|| Principal::board_operator().name),
            role: ok.then_some(Role::Admin),
            capability: "board_login".into(),
            scope: Some(Scope::Write.as_str().to_owned()),
            outcome: if ok { AuditOutcome::Ok } else { AuditOutcome::Denied },
            error_code: outcome.as_ref().err().map(|e| e.code.to_owned()),
            duration_us: 0,
            task_id: None,
            plan_id: None,
            client_name: Some("board".into()),
            count: 1,
        };
        services.audit.record(row, None);
        outcome
    }

    /// Authorizes (the capability must be visible to the resolved caller on its surface),
    /// validates and runs one call, filling in `row` as it goes.
    async fn call_inner(
        &self,
        params: CallParams,
        resolved: Result<Principal, auth::AuthFailure>,
        row: &mut AuditRow,
    ) -> Result<(Reply, Option<String>), (ToolError, Option<String>)> {
        let principal = resolved.map_err(|failure| {
            // The audit row keeps an OAuth refusal's reason and, for a valid token with no
            // role, whose it was.
            row.error_code = failure.audit_code.map(str::to_owned);
            row.principal = failure.principal;
            (failure.error, None)
        })?;
        let key_id = principal.key_id.clone();
        row.principal = Some(principal.name.clone());
        row.role = Some(principal.role);
        let Some(capability) = self.visible(principal.role, params.surface).find(|c| c.meta.name == params.name) else {
            return Err((ToolError::new(code::UNKNOWN_TOOL, format!("unknown tool: {}", row.capability)), key_id));
        };
        row.scope = Some(capability.meta.scope.as_str().to_owned());
        row.outcome = AuditOutcome::Invalid;
        let args = args::validate(&capability.input_schema, params.arguments).map_err(|e| (e, key_id.clone()))?;
        row.outcome = AuditOutcome::Error;
        let ctx = CallCtx {
            visible_tools: self.visible(principal.role, params.surface).count(),
            principal,
            surface: params.surface,
            services: Arc::clone(&self.services),
        };
        match (capability.handler)(ctx, args).await {
            Ok(value) => Ok((value, key_id)),
            Err(e) => Err((e, key_id)),
        }
    }
}
