//! `mcp-front`: the stateless MCP server in front of `agent-bridge`.
//!
//! It speaks MCP over Streamable HTTP (stateless, JSON responses, dual-era: `initialize` for
//! 2025-03-26…2025-11-25 and `server/discover` for 2026-07-28) through `rmcp`, and turns each
//! request into one call on the bridge's socket. It holds no state and no secret, never opens
//! the database, never reads a workdir and never decides authorization:
//! the caller's `Authorization` header goes to the bridge untouched.

pub mod bridge;
pub mod config;
pub mod direct;
pub mod dotenv;
pub mod guard;
pub mod handler;
pub mod healthcheck;
pub mod oauth;
pub mod origin;
pub mod quirks;
pub mod server;
pub mod tasks;
