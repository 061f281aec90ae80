//! The `agent-bridge` executable: the daemon, its operator CLI and the fake runtime's child.

/// jemalloc returns freed memory to the system: the daemon's RSS follows its live memory
/// under bursts of connections and tasks (the soak benchmark checks it stays flat).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    agent_bridge::cli::main()
}
