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

/// Runs `serve --env-file` until it answers `health`, stops it with SIGTERM and returns what
/// it logged. `log_override` is `AGENT_BRIDGE_LOG`, if any.
fn serve_and_stop(fx: &Fixture, level: &str, log_override: Option<&str>) -> String {
    use std::process::Stdio;
    use std::time::Duration;

    let env = fx.write("bridge.env", &fx.env_with(&[("SERVERFS_LOG_LEVEL", level)]));
    let env = env.to_str().expect("utf-8");
    let log_path = fx.root.join(format!("serve-{level}.log"));
    let log = std::fs::File::create(&log_path).expect("log");
    let mut cmd = fx.command(&["serve", "--env-file", env]);
    if let Some(filter) = log_override {
        cmd.env("AGENT_BRIDGE_LOG", filter);
    }
    let mut child = cmd.stdout(Stdio::null()).stderr(log).spawn().expect("start serve");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let healthy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::wait_until("the bridge answers `health`", Duration::from_secs(30), || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("serve exited ({status}):\n{}", read_log());
            }
            fx.run(&["health", "--env-file", env]).status.success()
        })
    }));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let status = child.wait().expect("wait for serve");
    if let Err(panic) = healthy {
        std::panic::resume_unwind(panic);
    }
    assert!(status.success(), "serve exits 0 on SIGTERM ({status}):\n{}", read_log());
    read_log()
}

#[test]
fn serve_logs_at_the_configured_level_unless_the_environment_overrides_it() {
    let fx = Fixture::new();
    let info = serve_and_stop(&fx, "INFO", None);
    assert!(info.contains("agent-bridge is ready"), "{info}");
    let quiet = serve_and_stop(&fx, "warning", None);
    assert!(!quiet.contains("is ready") && !quiet.contains(" INFO "), "WARNING still logs INFO lines:\n{quiet}");
    let overridden = serve_and_stop(&fx, "ERROR", Some("info"));
    assert!(overridden.contains("agent-bridge is ready"), "AGENT_BRIDGE_LOG did not override:\n{overridden}");
}
