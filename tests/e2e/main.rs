//! The end-to-end suite: each module starts real `agent-bridge` processes on temporary
//! sockets and drives them through the socket protocol and the CLI.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "end-to-end tests start processes, write fixtures and read files: the daemons' rules do not apply to them"
)]

mod accounting;
mod action_links;
mod audit_flood;
mod beside;
mod board;
mod board_widths;
mod changes;
mod claude;
mod codex;
mod conformance;
mod containment;
mod crashloop;
mod deploy;
mod doctor;
mod front;
mod front_http;
mod handback;
mod hardening;
mod http_bounds;
mod idempotency;
mod idle;
mod leftovers;
mod lifecycle;
mod long_poll;
mod mcp_tasks;
mod notify;
mod oauth;
mod orphans;
mod plans;
mod policy;
mod privilege;
mod protocol;
mod restart;
mod results;
mod retention;
mod runtimes;
mod smoke;
mod socket_bounds;
mod tasks;
mod tidy;
mod validation;
mod waivers;
mod worktrees;
