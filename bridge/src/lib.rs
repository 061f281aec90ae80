//! agent-bridge: the daemon that owns tasks, policy, audit and provider processes.

pub mod config;
