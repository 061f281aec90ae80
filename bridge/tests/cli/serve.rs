//! `agent-bridge serve` refuses a bad configuration before it touches the disk.

use crate::{Fixture, assert_exit, texts};

#[test]
fn serve_with_a_bad_env_exits_2_without_creating_anything() {
    let fx = Fixture::new();
    let env = fx.write("bad.env", &fx.env_with(&[("SERVERFS_AGENT_TASK_TIMEOUT_SECOND", "5")]));
    let out = fx.run(&["serve", "--env-file", env.to_str().expect("utf-8")]);
    assert_exit(&out, 2);
    assert!(texts(&out).1.contains("SERVERFS_AGENT_TASK_TIMEOUT_SECOND"), "{}", texts(&out).1);
    assert!(!fx.state_dir().exists(), "the state dir was created");
    assert!(!fx.root.join("run").exists(), "the socket dir was created");
    assert!(!fx.root.join("locks").exists(), "the lock dir was created");
}

#[test]
fn serve_with_a_bad_json_config_exits_2() {
    let fx = Fixture::new();
    let config = fx.write("bridge.json", "{\"socket_path\": \"relative.sock\"}\n");
    let out = fx.run(&["serve", "--config", config.to_str().expect("utf-8")]);
    assert_exit(&out, 2);
    assert!(texts(&out).1.contains("is invalid"), "{}", texts(&out).1);
    assert!(!fx.state_dir().exists());
}

#[test]
fn serve_refuses_two_config_sources() {
    let fx = Fixture::new();
    let env = fx.write("bridge.env", &fx.env_with(&[]));
    let env = env.to_str().expect("utf-8");
    let out = fx.run(&["serve", "--env-file", env, "--config", env]);
    assert_exit(&out, 2);
    assert!(!fx.state_dir().exists());
}
