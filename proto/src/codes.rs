//! Stable `UPPER_SNAKE` error codes carried in `error.code` on the wire.
//!
//! Codes are part of the public contract (they reach MCP callers as `CODE: message`), so they
//! are never renamed. The names follow the ServerFS agent bridge where it had one.

/// The line is not a valid request envelope (not JSON, wrong keys, wrong types).
pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
/// The request line is longer than [`crate::MAX_LINE_BYTES`].
pub const REQUEST_TOO_LARGE: &str = "REQUEST_TOO_LARGE";
/// The response would be longer than [`crate::MAX_LINE_BYTES`].
pub const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";
/// `protocol_version` is not [`crate::PROTOCOL_VERSION`].
pub const PROTOCOL_VERSION_UNSUPPORTED: &str = "PROTOCOL_VERSION_UNSUPPORTED";
/// The method does not exist.
pub const METHOD_NOT_FOUND: &str = "METHOD_NOT_FOUND";
/// The connecting process's uid/gid is not allowed.
pub const PEER_NOT_AUTHORIZED: &str = "PEER_NOT_AUTHORIZED";
/// An unexpected failure inside the bridge; the message says no more than that.
pub const BRIDGE_PROTOCOL_ERROR: &str = "BRIDGE_PROTOCOL_ERROR";
/// The bridge is shutting down and takes no new work.
pub const BRIDGE_CLOSED: &str = "BRIDGE_CLOSED";
/// The socket holds as many connections as it takes, each with a request in progress, or the
/// bridge has no file descriptor left: the connection is answered with this and closed.
pub const BRIDGE_BUSY: &str = "BRIDGE_BUSY";
/// A request line's first byte arrived but the whole line did not within the bound (10 s).
pub const REQUEST_TIMED_OUT: &str = "REQUEST_TIMED_OUT";
/// Startup: the socket path holds a live socket or a file the bridge will not remove.
pub const SOCKET_PATH_IN_USE: &str = "SOCKET_PATH_IN_USE";

/// The credential is missing, malformed, unknown or revoked.
pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
/// `oauth.metadata`: this bridge takes no OAuth tokens (`SERVERFS_MCP_OAUTH_ISSUER` is unset).
pub const OAUTH_NOT_CONFIGURED: &str = "OAUTH_NOT_CONFIGURED";
/// The tool does not exist, or exists outside the caller's rights (the two are identical).
pub const UNKNOWN_TOOL: &str = "UNKNOWN_TOOL";
/// A tool argument breaks the tool's input schema; the message names the parameter.
pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";

/// Client side only: the bridge could not be reached or did not answer in time.
pub const AGENT_BRIDGE_UNAVAILABLE: &str = "AGENT_BRIDGE_UNAVAILABLE";
/// Client side only: the bridge answered something that is not a valid response.
pub const AGENT_BRIDGE_PROTOCOL_ERROR: &str = "AGENT_BRIDGE_PROTOCOL_ERROR";
