//! The agent-bridge socket protocol, shared by the bridge, its CLI and `mcp-front`.
//!
//! One request and one response per line of JSON over a Unix stream socket.
//! This crate owns the envelope (exact key sets), the stable error codes, the bounded line
//! framing and the one client of the socket (a connection per call, or pooled). It knows
//! nothing of tools: tool names, schemas and results are
//! opaque JSON that the bridge's registry defines.

pub mod client;
pub mod codes;
pub mod envelope;
#[cfg(test)]
mod envelope_fuzz;
pub mod framing;
pub mod methods;

/// The protocol version every request must carry; a request with any other value is refused
/// with [`codes::PROTOCOL_VERSION_UNSUPPORTED`].
pub const PROTOCOL_VERSION: u64 = 1;

/// The longest line either side accepts, newline excluded (1 MiB).
pub const MAX_LINE_BYTES: usize = 1 << 20;
