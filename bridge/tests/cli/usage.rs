//! The client commands without a bridge, and the help text.

use crate::{Fixture, assert_exit, texts};

#[test]
fn a_missing_socket_exits_3_with_agent_bridge_unavailable() {
    let fx = Fixture::new();
    let socket = fx.root.join("nobody/bridge.sock");
    let socket = socket.to_str().expect("utf-8");
    for args in [
        vec!["health", "--socket", socket],
        vec!["tasks", "list", "--socket", socket],
        vec!["tasks", "show", "agt_x", "--socket", socket],
        vec!["keys", "list", "--socket", socket],
    ] {
        let out = fx.run(&args);
        assert_exit(&out, 3);
        let (stdout, stderr) = texts(&out);
        assert!(stderr.starts_with("AGENT_BRIDGE_UNAVAILABLE: "), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}

#[test]
fn help_lists_the_commands() {
    let fx = Fixture::new();
    let out = fx.run(&["--help"]);
    assert_exit(&out, 0);
    let stdout = texts(&out).0;
    let commands: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for command in ["serve", "config", "keys", "tasks", "health"] {
        assert!(commands.contains(&command), "{command} missing from:\n{stdout}");
    }
    assert!(!commands.contains(&"fake-agent"), "the fake runtime's entry point is hidden:\n{stdout}");
}
