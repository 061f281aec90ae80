//! The `agent-bridge` executable: the daemon, its operator CLI and the fake runtime's child.

/// jemalloc returns freed memory to the system: the daemon's RSS follows its live memory
/// under bursts of connections and tasks (the soak benchmark checks it stays flat). It also
/// serves C's `malloc` (the crate's `unprefixed_malloc_on_supported_platforms`), so SQLite's
/// page caches, used from many blocking threads, do not spread over glibc's arenas, which
/// kept every one of them at its high-water mark (the soak saw +15 % in ten minutes).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    agent_bridge::cli::main()
}
