//! The `agent-bridge` executable: the daemon, its operator CLI and the fake runtime's child.

fn main() -> std::process::ExitCode {
    agent_bridge::cli::main()
}
