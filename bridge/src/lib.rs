//! agent-bridge: the daemon that owns tasks, policy, audit and provider processes.

pub mod config;
pub mod clock;
pub mod ids;
pub mod model;
pub mod store;
pub mod provider;
pub mod error;
pub mod files;
pub mod lease;
pub mod tasks;
pub mod registry;
pub mod server;
pub mod daemon;
pub mod cli;
