//! Parameters of the socket methods.
//!
//! Methods are registry-level: the caller names a capability and passes its arguments, so a
//! client (the front, the CLI, the board) never needs to know a tool's name or schema.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// List the capabilities visible to the caller.
pub const CAPABILITIES_LIST: &str = "capabilities.list";
/// Call one capability.
pub const CAPABILITIES_CALL: &str = "capabilities.call";
/// Liveness: answers without touching any credential.
pub const BRIDGE_HEALTH: &str = "bridge.health";
/// The OAuth resource's public metadata (RFC 9728) and its 401 challenge; `OAUTH_NOT_CONFIGURED`
/// when the bridge takes no OAuth tokens. Needs no credential: nothing in it is secret.
pub const OAUTH_METADATA: &str = "oauth.metadata";

/// Which of the front's MCP paths a call came on: it decides what kind of credential the
/// `Authorization` header carries. Only meaningful on [`Surface::Mcp`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpPath {
    /// `/mcp`: an API key (or tunnel mode).
    #[default]
    #[serde(rename = "/mcp")]
    Keys,
    /// `/mcp-oauth`: an OAuth access token issued by the operator's identity provider.
    #[serde(rename = "/mcp-oauth")]
    Oauth,
}

impl McpPath {
    /// Whether this is the API-key path (the default, left out on the wire).
    pub fn is_keys(&self) -> bool {
        *self == McpPath::Keys
    }
}

/// The surface a call arrives through; it decides how the credential is read and is recorded
/// in the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Surface {
    /// A remote MCP caller, through `mcp-front`. Needs a valid credential (or tunnel mode).
    Mcp,
    /// The local operator's CLI. The bridge's own uid on the socket is the local admin.
    Cli,
    /// The operator's web board.
    Board,
}

impl Surface {
    /// The wire name of the surface.
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Mcp => "mcp",
            Surface::Cli => "cli",
            Surface::Board => "board",
        }
    }
}

/// Who is calling, as the client describes itself (recorded in the audit log, never trusted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    /// The client's name, e.g. `claude-code`.
    pub name: String,
    /// The client's version, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Parameters of [`CAPABILITIES_LIST`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// The caller's credential exactly as received (for MCP: the `Authorization` header value).
    pub credential: Option<String>,
    /// The surface the call arrives through.
    pub surface: Surface,
    /// The front's path the call came on (`/mcp` unless it says `/mcp-oauth`).
    #[serde(default, skip_serializing_if = "McpPath::is_keys")]
    pub path: McpPath,
    /// The client's self-description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientInfo>,
}

/// Parameters of [`CAPABILITIES_CALL`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// The caller's credential exactly as received.
    pub credential: Option<String>,
    /// The surface the call arrives through.
    pub surface: Surface,
    /// The front's path the call came on (`/mcp` unless it says `/mcp-oauth`).
    #[serde(default, skip_serializing_if = "McpPath::is_keys")]
    pub path: McpPath,
    /// The client's self-description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientInfo>,
    /// The capability (tool) name.
    pub name: String,
    /// The tool's arguments; validated by the bridge against the tool's input schema.
    pub arguments: Map<String, Value>,
}

/// Parameters of [`BRIDGE_HEALTH`]: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthParams {}

/// Parameters of [`OAUTH_METADATA`]: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OauthMetadataParams {}

/// The answer to [`OAUTH_METADATA`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OauthMetadata {
    /// The resource's canonical URL (the tokens' audience).
    pub resource: String,
    /// The absolute URL of the Protected Resource Metadata document.
    pub resource_metadata: String,
    /// The scopes a client should ask for, space-separated (the challenge's `scope`).
    pub scope: String,
    /// The RFC 9728 document itself.
    pub document: Value,
}
