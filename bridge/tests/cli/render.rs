//! `agent-bridge config render`: a private (0600) JSON file that `serve --config` runs with;
//! never written through a symlink; left unchanged when the `.env` is refused.

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::Duration;

use crate::{Fixture, assert_exit, mode, run_bounded, texts, wait_until};

/// Kills the daemon if the test fails before stopping it.
struct Daemon(Option<std::process::Child>);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn render_writes_a_private_file_that_serve_runs_with() {
    let fx = Fixture::new();
    let env = fx.write("bridge.env", &fx.env_with(&[]));
    let output = fx.root.join("bridge.json");
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        env.to_str().expect("utf-8"),
        "--output",
        output.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 0);
    assert!(texts(&out).0.contains("wrote"), "{}", texts(&out).0);
    assert_eq!(mode(&output), 0o600, "the rendered config is private");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&output).expect("read")).expect("JSON");
    assert_eq!(json["socket_path"], fx.socket().to_str().expect("utf-8"));
    assert_eq!(json["limits"]["max_active_tasks"], 3);

    let log = std::fs::File::create(fx.root.join("serve.log")).expect("log");
    let child = fx
        .command(&["serve", "--config", output.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start serve");
    let mut daemon = Daemon(Some(child));
    let serve_log = || std::fs::read_to_string(fx.root.join("serve.log")).unwrap_or_default();
    wait_until("the bridge answers `health`", Duration::from_secs(30), || {
        if let Some(status) = daemon.0.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("serve --config exited ({status}):\n{}", serve_log());
        }
        // The client finds the socket through the same rendered file.
        fx.run(&["health", "--config", output.to_str().expect("utf-8")]).status.success()
    });
    let out = fx.run(&["health", "--config", output.to_str().expect("utf-8")]);
    assert!(texts(&out).0.starts_with("ok: agent-bridge"), "{}", texts(&out).0);

    let mut child = daemon.0.take().expect("running");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("SIGTERM");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx.recv_timeout(Duration::from_secs(60)).expect("serve stops on SIGTERM").expect("wait");
    assert!(status.success(), "serve exits 0 on SIGTERM ({status}):\n{}", serve_log());
    assert!(!fx.socket().exists(), "an orderly stop removes the socket");
}

#[test]
fn render_refuses_to_write_through_a_symlink() {
    let fx = Fixture::new();
    let env = fx.write("bridge.env", &fx.env_with(&[]));
    let target = fx.write("precious.json", "precious\n");
    let link = fx.root.join("bridge.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        env.to_str().expect("utf-8"),
        "--output",
        link.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 2);
    assert!(texts(&out).1.contains("symbolic link"), "{}", texts(&out).1);
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "precious\n");
    assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());

    // A dangling link is refused too, and its target is not created.
    let nowhere = fx.root.join("nowhere.json");
    let dangling = fx.root.join("dangling.json");
    std::os::unix::fs::symlink(&nowhere, &dangling).expect("symlink");
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        env.to_str().expect("utf-8"),
        "--output",
        dangling.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 2);
    assert!(!nowhere.exists());
}

#[test]
fn a_refused_env_leaves_the_existing_output_unchanged() {
    let fx = Fixture::new();
    let good = fx.write("good.env", &fx.env_with(&[]));
    let output = fx.root.join("bridge.json");
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        good.to_str().expect("utf-8"),
        "--output",
        output.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 0);
    let before = std::fs::read(&output).expect("rendered");
    let inode = std::fs::metadata(&output).expect("stat").ino();
    let entries = || {
        let mut names: Vec<String> = std::fs::read_dir(&fx.root)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let listing = entries();

    let bad = fx.write("bad.env", &fx.env_with(&[("SERVERFS_AGENT_MAX_ACTIVE_TASKS", "0")]));
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        bad.to_str().expect("utf-8"),
        "--output",
        output.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 2);
    assert!(texts(&out).1.contains("SERVERFS_AGENT_MAX_ACTIVE_TASKS"), "{}", texts(&out).1);
    assert_eq!(std::fs::read(&output).expect("output"), before, "the output changed");
    assert_eq!(std::fs::metadata(&output).expect("stat").ino(), inode, "the output was replaced");
    assert_eq!(mode(&output), 0o600);
    let mut after = entries();
    after.retain(|n| n != "bad.env");
    assert_eq!(after, listing, "no temporary file is left behind");
}

/// The four lifecycle limits go `.env` → rendered JSON → the serving bridge → the manifest
/// a task freezes at submit.
#[test]
fn rendered_lifecycle_limits_are_frozen_into_a_task_manifest() {
    let fx = Fixture::new();
    let env = fx.write(
        "bridge.env",
        &fx.env_with(&[
            ("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", "3601"),
            ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", "601"),
            ("SERVERFS_AGENT_MAX_ACTIVE_TASKS", "2"),
            ("SERVERFS_AGENT_TASK_RETENTION_HOURS", "25"),
        ]),
    );
    let output = fx.root.join("bridge.json");
    let config = output.to_str().expect("utf-8");
    assert_exit(&fx.run(&["config", "render", "--env-file", env.to_str().expect("utf-8"), "--output", config]), 0);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&output).expect("read")).expect("JSON");
    let limits = &json["limits"];
    assert_eq!(
        [
            &limits["task_timeout_seconds"],
            &limits["interaction_timeout_seconds"],
            &limits["max_active_tasks"],
            &limits["retention_hours"]
        ],
        [3601, 601, 2, 25]
    );

    let log = std::fs::File::create(fx.root.join("serve.log")).expect("log");
    let child = fx.command(&["serve", "--config", config]).stdout(Stdio::null()).stderr(log).spawn().expect("serve");
    let mut daemon = Daemon(Some(child));
    let serve_log = || std::fs::read_to_string(fx.root.join("serve.log")).unwrap_or_default();
    wait_until("the bridge answers `health`", Duration::from_secs(30), || {
        if let Some(status) = daemon.0.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("serve --config exited ({status}):\n{}", serve_log());
        }
        fx.run(&["health", "--config", config]).status.success()
    });
    let out = fx.run(&[
        "tasks",
        "submit",
        "--runtime",
        "fake",
        "--workdir",
        "repo",
        "--prompt",
        "complete:frozen",
        "--config",
        config,
    ]);
    assert_exit(&out, 0);
    let task_id = texts(&out).0.trim().to_owned();
    let out = fx.run(&["tasks", "show", &task_id, "--json", "--config", config]);
    assert_exit(&out, 0);
    let task: serde_json::Value = serde_json::from_str(&texts(&out).0).expect("tasks show --json");
    let m = &task["manifest"]["limits"];
    assert_eq!(
        [&m["task_timeout_seconds"], &m["interaction_timeout_seconds"], &m["max_active_tasks"], &m["retention_hours"]],
        [3601, 601, 2, 25],
        "{task:#}"
    );
    assert_eq!(task["manifest"]["deadline_at"], task["deadline_at"]);
    let db = rusqlite::Connection::open_with_flags(
        fx.state_dir().join("bridge.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store");
    let (created, deadline): (i64, i64) = db
        .query_row("SELECT created_at, deadline_at FROM tasks WHERE task_id = ?1", [&task_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("task row");
    assert_eq!(deadline - created, 3_601_000, "the deadline is the rendered task timeout");

    let child = daemon.0.take().expect("running");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("SIGTERM");
    let mut child = child;
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}:\n{}", serve_log());
}

/// A hand-edited JSON config is checked like a `.env`: a lifecycle limit of 0 or past its
/// bound is refused at start, naming the field.
#[test]
fn serve_refuses_a_rendered_config_with_an_impossible_lifecycle_limit() {
    let fx = Fixture::new();
    let env = fx.write("bridge.env", &fx.env_with(&[]));
    let good = fx.root.join("good.json");
    assert_exit(
        &fx.run(&[
            "config",
            "render",
            "--env-file",
            env.to_str().expect("utf-8"),
            "--output",
            good.to_str().expect("utf-8"),
        ]),
        0,
    );
    let rendered: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&good).expect("read")).expect("JSON");
    for (field, bad) in [
        ("task_timeout_seconds", 0u64),
        ("task_timeout_seconds", 315_360_001),
        ("interaction_timeout_seconds", 0),
        ("interaction_timeout_seconds", 315_360_001),
        ("max_active_tasks", 0),
        ("retention_hours", 0),
        ("retention_hours", 87_601),
    ] {
        let mut edited = rendered.clone();
        edited["limits"][field] = serde_json::json!(bad);
        let path = fx.write("edited.json", &edited.to_string());
        std::fs::set_permissions(&path, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600))
            .expect("chmod");
        let out =
            run_bounded(fx.command(&["serve", "--config", path.to_str().expect("utf-8")]), Duration::from_secs(30));
        assert_exit(&out, 2);
        let stderr = texts(&out).1;
        assert!(stderr.contains(&format!("limits.{field}")), "{field}={bad}: {stderr}");
        assert!(!fx.socket().exists(), "a refused config starts nothing");
    }
}
