//! The MCP server handler: every MCP request becomes exactly one bridge request, carrying the
//! caller's `Authorization` header untouched as the credential, on surface `mcp`, with the
//! path it came on (`/mcp` or `/mcp-oauth`).
//!
//! `tools/list` → `capabilities.list`; `tools/call` → `capabilities.call`; `initialize` and
//! `server/discover` check the credential with `capabilities.list` so a client learns at
//! connection time that its key is wrong. The handler keeps nothing between requests.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use bridge_proto::client::CallError;
use bridge_proto::codes;
use bridge_proto::methods::{self, CallParams, ClientInfo, ListParams, McpPath, Surface};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, DiscoverResult, ErrorData,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::bridge::Bridge;

/// The protocol revisions the front speaks: the three legacy ones with `initialize`, and the
/// modern stateless one.
pub static SUPPORTED_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

const INSTRUCTIONS: &str = "Delegates coding objectives to agent runtimes (Codex, Claude Code) on the operator's \
server. Call list_workdirs and list_agent_runtimes first; submit_agent_task returns a task_id at once; poll it \
with get_agent_task (wait_seconds up to 25 waits until it ends or needs an answer); when it waits for approval or a question, answer with \
respond_agent_approval or answer_agent_question. Reuse an idempotency_key to retry a submission safely.";

/// The handler; one is made per request, holding only the shared bridge client.
#[derive(Clone)]
pub struct Front {
    bridge: Arc<Bridge>,
}

/// How a bridge call failed, as MCP needs to tell it.
pub(crate) enum Failure {
    /// The credential was refused: HTTP 401.
    Unauthenticated(String),
    /// The tool does not exist for this caller: the JSON-RPC error of a nonexistent tool.
    UnknownTool(String),
    /// Anything else: a tool error (`isError: true`) or, outside a tool call, an internal error.
    Error { code: String, message: String },
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        match e {
            CallError::Remote { code, message } if code == codes::UNAUTHENTICATED => Failure::Unauthenticated(message),
            CallError::Remote { code, message } if code == codes::UNKNOWN_TOOL => Failure::UnknownTool(message),
            CallError::Remote { code, message } => Failure::Error { code, message },
            other => Failure::Error { code: other.code().to_owned(), message: other.to_string() },
        }
    }
}

impl Front {
    /// A handler that talks to the bridge through `bridge`.
    pub fn new(bridge: Arc<Bridge>) -> Front {
        Front { bridge }
    }

    /// Lists the caller's tools on the bridge.
    async fn list(&self, ctx: &RequestContext<RoleServer>, client: Option<ClientInfo>) -> Result<Value, Failure> {
        let params = ListParams { credential: credential(ctx), surface: Surface::Mcp, path: path(ctx), client };
        let listed = self.bridge.call_raw(methods::CAPABILITIES_LIST, &params).await?;
        parse(&listed)
    }

    /// Calls one bridge tool for the caller.
    async fn call(
        &self,
        ctx: &RequestContext<RoleServer>,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, Failure> {
        let params = CallParams {
            credential: credential(ctx),
            surface: Surface::Mcp,
            path: path(ctx),
            client: client_info(ctx),
            name: name.to_owned(),
            arguments,
        };
        parse(&self.call_raw(&params).await?)
    }

    /// One `capabilities.call` on the bridge; its result as the JSON text it came as.
    pub(crate) async fn call_raw(&self, params: &CallParams) -> Result<Box<RawValue>, Failure> {
        Ok(self.bridge.call_raw(methods::CAPABILITIES_CALL, params).await?)
    }

    /// A `tasks/*` call's bridge failure as the extension wants it: an unknown task, or one of
    /// another principal (the bridge answers both alike), is `-32602`.
    fn task_error(&self, ctx: &RequestContext<RoleServer>, failure: Failure) -> ErrorData {
        match failure {
            Failure::Unauthenticated(message) => refuse(ctx, message),
            Failure::Error { code, message } if code == "AGENT_TASK_NOT_FOUND" || code == "INVALID_ARGUMENT" => {
                ErrorData::invalid_params(format!("{code}: {message}"), None)
            }
            Failure::UnknownTool(message) => ErrorData::invalid_params(message, None),
            Failure::Error { code, message } => ErrorData::internal_error(format!("{code}: {message}"), None),
        }
    }

    /// Asks the bridge whether the caller's credential is good; only a refusal is an error
    /// (an unreachable bridge shows up on the first tool call instead).
    async fn check_credential(
        &self,
        ctx: &RequestContext<RoleServer>,
        client: Option<ClientInfo>,
    ) -> Result<(), ErrorData> {
        match self.list(ctx, client).await {
            Err(Failure::Unauthenticated(message)) => Err(refuse(ctx, message)),
            Err(Failure::Error { code, message }) => {
                tracing::warn!(code, message, "the bridge did not answer the credential check");
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        // The Tasks extension is advertised to everyone; only a client that declares it on a
        // request ever gets a task handle (the others keep today's synchronous results).
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("agent-bridge", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(SUPPORTED_VERSIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let client =
            ClientInfo { name: request.client_info.name.clone(), version: Some(request.client_info.version.clone()) };
        self.check_credential(&context, Some(client)).await?;
        self.negotiate_initialize(&request)
    }

    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        self.check_credential(&context, client_info(&context)).await?;
        Ok(DiscoverResult::from_server_info(SUPPORTED_VERSIONS.to_vec(), self.get_info()))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let listed = match self.list(&context, client_info(&context)).await {
            Ok(v) => v,
            Err(Failure::Unauthenticated(message)) => return Err(refuse(&context, message)),
            Err(Failure::UnknownTool(message)) => {
                return Err(ErrorData::internal_error(message, None));
            }
            Err(Failure::Error { code, message }) => {
                return Err(ErrorData::internal_error(format!("{code}: {message}"), None));
            }
        };
        let tools = listed["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
        let tools = tools.iter().filter_map(to_mcp_tool).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declared = context.client_capabilities().is_some_and(|c| c.supports_tasks());
        let result = self.call(&context, &request.name, request.arguments.unwrap_or_default()).await;
        match result {
            // A declaring client's submission is a task of the extension: the handle the
            // bridge stored before answering (durable, retry-safe with the same key).
            Ok(handle) if declared && request.name == "submit_agent_task" => {
                Ok(CallToolResponse::Task(crate::tasks::created(&handle)))
            }
            Ok(Value::Object(result)) => Ok(CallToolResult::structured(Value::Object(result)).into()),
            Ok(other) => Ok(CallToolResult::structured(json!({ "result": other })).into()),
            Err(Failure::Unauthenticated(message)) => Err(refuse(&context, message)),
            Err(Failure::UnknownTool(message)) => Err(ErrorData::invalid_params(message, None)),
            Err(Failure::Error { code, message }) => Ok(tool_error(&code, &message).into()),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let mut args = Map::new();
        args.insert("task_id".into(), json!(request.task_id));
        args.insert("full_request".into(), json!(true));
        let view = self.call(&context, "get_agent_task", args).await.map_err(|f| self.task_error(&context, f))?;
        let task = crate::tasks::detailed(&view).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let answers = crate::tasks::answers(&request.task_id, &request.input_responses);
        if answers.is_empty() {
            // Nothing usable: still an unknown task is an error, an ignored answer is not.
            let mut args = Map::new();
            args.insert("task_id".into(), json!(request.task_id));
            self.call(&context, "get_agent_task", args).await.map_err(|f| self.task_error(&context, f))?;
        }
        for answer in answers {
            match self.call(&context, answer.tool, answer.arguments).await {
                Ok(_) => {}
                // Eventually consistent: an answer that came too late, twice or badly formed
                // is ignored (the task's state tells the client what happened).
                Err(Failure::Error { code, .. }) if code != "AGENT_TASK_NOT_FOUND" => {
                    tracing::debug!(code, "an input response was not used");
                }
                Err(f) => return Err(self.task_error(&context, f)),
            }
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut args = Map::new();
        args.insert("task_id".into(), json!(request.task_id));
        // Cooperative; a task that already ended answers the same (the bridge's cancel of a
        // terminal task succeeds without changing it).
        self.call(&context, "cancel_agent_task", args).await.map(|_| ()).map_err(|f| self.task_error(&context, f))
    }
}

/// The tool result of a failed call: `isError`, `structuredContent.error {code, message}` and
/// the text `CODE: message`.
pub fn tool_error(code: &str, message: &str) -> CallToolResult {
    let mut result = CallToolResult::structured_error(json!({ "error": { "code": code, "message": message } }));
    result.content = vec![rmcp::model::ContentBlock::text(format!("{code}: {message}"))];
    result
}

/// One bridge tool as an MCP tool: name, description, input schema and annotations. A tool
/// the bridge describes badly is left out rather than failing the whole list.
fn to_mcp_tool(tool: &Value) -> Option<Tool> {
    let mcp = json!({
        "name": tool["name"],
        "description": tool["description"],
        "inputSchema": tool["input_schema"],
        "annotations": tool["annotations"],
    });
    match serde_json::from_value(mcp) {
        Ok(tool) => Some(tool),
        Err(e) => {
            tracing::warn!(name = %tool["name"], cause = %e, "the bridge described a tool MCP cannot carry; left out");
            None
        }
    }
}

/// The caller's `Authorization` header, exactly as received.
fn credential(ctx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    let value = parts.headers.get(http::header::AUTHORIZATION)?;
    Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The path the request came on, as the guard recorded it.
fn path(ctx: &RequestContext<RoleServer>) -> McpPath {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<McpPath>())
        .copied()
        .unwrap_or_default()
}

/// The client's self-description from the request's `_meta` (modern requests carry it).
fn client_info(ctx: &RequestContext<RoleServer>) -> Option<ClientInfo> {
    ctx.meta.client_info().map(|i| ClientInfo { name: i.name, version: Some(i.version) })
}

/// Set by the handler when the bridge answered `UNAUTHENTICATED`, read by the guard to answer
/// 401. The guard puts one in each request's extensions, so it lives exactly as long as one
/// request.
#[derive(Debug, Clone, Default)]
pub struct AuthOutcome(Arc<OnceLock<String>>);

impl AuthOutcome {
    /// Records the bridge's refusal.
    pub fn refuse(&self, message: String) {
        let _ = self.0.set(message);
    }

    /// The bridge's refusal, if it refused the credential.
    pub fn refusal(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// Records a refused credential for the guard (which answers 401) and returns the error
/// rmcp would otherwise send.
fn refuse(ctx: &RequestContext<RoleServer>, message: String) -> ErrorData {
    if let Some(outcome) = ctx.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<AuthOutcome>())
    {
        outcome.refuse(message.clone());
    }
    ErrorData::invalid_request(format!("{}: {message}", codes::UNAUTHENTICATED), None)
}

/// A bridge result's JSON text as a value.
fn parse(raw: &RawValue) -> Result<Value, Failure> {
    serde_json::from_str(raw.get())
        .map_err(|e| Failure::from(CallError::Protocol(format!("the result is not JSON: {e}"))))
}
