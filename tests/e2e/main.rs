//! The end-to-end suite: each module starts real `agent-bridge` processes on temporary
//! sockets and drives them through the socket protocol and the CLI.

mod audit_flood;
mod board;
mod claude;
mod codex;
mod conformance;
mod containment;
mod crashloop;
mod deploy;
mod doctor;
mod front;
mod front_http;
mod hardening;
mod http_bounds;
mod idempotency;
mod idle;
mod lifecycle;
mod orphans;
mod plans;
mod policy;
mod protocol;
mod restart;
mod results;
mod retention;
mod smoke;
mod socket_bounds;
mod tasks;
mod validation;
