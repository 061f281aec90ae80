//! agent-bridge: the daemon that owns tasks, policy, audit and provider processes.

pub mod audit_view;
pub mod board;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod egress;
pub mod error;
pub mod files;
pub mod ids;
pub mod keys;
pub mod lease;
pub mod model;
pub mod notify;
pub mod oauth;
pub mod plans;
pub mod provider;
pub mod registry;
pub mod sched;
pub mod server;
pub mod store;
pub mod tasks;

// The shared fuzz engine and event checks (`fuzz/`), compiled once for this crate's fuzz
// targets (`config::dotenv_fuzz`, `provider::{codex,claude}::map_fuzz`).
#[cfg(test)]
#[path = "../../fuzz/events.rs"]
mod fuzz_events;
#[cfg(test)]
#[path = "../../fuzz/mutate.rs"]
mod mutate;
