//! Parameters of the three socket methods.
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
