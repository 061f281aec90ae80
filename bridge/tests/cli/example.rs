//! `.env.example` through the real binary: `config example` prints the repository's file, the
//! file as shipped is a valid configuration, and a copy filled in the way an operator fills it
//! (paths, a workdir, the container identity) checks and renders; `config reference` prints
//! `docs/configuration.md`.

use crate::{Fixture, assert_exit, mode, texts};

/// The repository's `.env.example`.
fn shipped() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.env.example");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Replaces the value of each `KEY=` line of `text` named in `changes`; each must be found.
fn edit(text: &str, changes: &[(&str, String)]) -> String {
    let mut out: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, value) in changes {
        let line = out
            .iter_mut()
            .find(|l| l.starts_with(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} is not in .env.example"));
        *line = format!("{key}={value}");
    }
    out.join("\n") + "\n"
}

fn own_ids() -> (u32, u32) {
    (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw())
}

#[test]
fn config_example_prints_the_shipped_file() {
    let fx = Fixture::new();
    let out = fx.run(&["config", "example"]);
    assert_exit(&out, 0);
    assert!(texts(&out).0 == shipped(), "`agent-bridge config example` and .env.example differ");
}

#[test]
fn the_shipped_example_checks_as_it_stands() {
    let fx = Fixture::new();
    let env = fx.write("example.env", &shipped());
    let out = fx.run(&["config", "check", "--env-file", env.to_str().expect("utf-8")]);
    assert_exit(&out, 0);
    let (stdout, _) = texts(&out);
    let root = fx.root.display();
    for expected in [
        format!("socket:              {root}/.local/share/agent-bridge/runtime/socket/bridge.sock"),
        format!("state dir:           {root}/.local/state/agent-bridge"),
        "task timeout:        7200 s".to_owned(),
        "bridge RPC timeout:  30 s".to_owned(),
        "image:               agent-bridge/mcp-front:local".to_owned(),
        "ignored keys of other programs\n  COMPOSE_FILE".to_owned(),
        "workdirs\n  (none)".to_owned(),
    ] {
        assert!(stdout.contains(&expected), "missing {expected:?} in:\n{stdout}");
    }
}

#[test]
fn a_filled_in_copy_checks_and_renders() {
    let fx = Fixture::new();
    let root = fx.root.display().to_string();
    let (uid, gid) = own_ids();
    let mut changes = vec![
        ("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR", format!("{root}/run")),
        ("SERVERFS_AGENT_LOCK_HOST_DIR", format!("{root}/locks")),
        ("SERVERFS_AGENT_BRIDGE_STATE_DIR", format!("{root}/state")),
        ("SERVERFS_AGENT_ENABLE_FAKE_RUNTIME", "true".to_owned()),
        ("SERVERFS_UID", uid.to_string()),
        ("SERVERFS_GID", gid.to_string()),
        ("SERVERFS_MCP_PUBLISH", "127.0.0.1:8765".to_owned()),
        ("WORKDIR_01_ALIAS", "repo".to_owned()),
        ("WORKDIR_01_PATH", format!("{root}/repo")),
        ("WORKDIR_01_DESCRIPTION", "\"The repository\"".to_owned()),
        ("WORKDIR_01_READ_ONLY", "false".to_owned()),
        ("WORKDIR_01_AGENT_MODE", "workspace-write".to_owned()),
        ("WORKDIR_01_AGENT_RUNTIMES", "fake".to_owned()),
    ];
    // Tests may run as root (CI containers): root needs the explicit switch.
    if uid == 0 {
        changes.push(("SERVERFS_AGENT_ALLOW_ROOT", "true".to_owned()));
    }
    let env = fx.write("filled.env", &edit(&shipped(), &changes));
    let out = fx.run(&["config", "check", "--env-file", env.to_str().expect("utf-8")]);
    assert_exit(&out, 0);
    let stdout = texts(&out).0;
    assert!(stdout.contains(&format!("01 repo: {root}/repo (writable, agent mode workspace-write, runtimes fake)")));
    assert!(stdout.contains(&format!("runs as:             uid {uid}, gid {gid}")), "{stdout}");
    assert!(stdout.contains("published on:        127.0.0.1:8765"), "{stdout}");

    let output = fx.root.join("config.json");
    let out = fx.run(&[
        "config",
        "render",
        "--env-file",
        env.to_str().expect("utf-8"),
        "--output",
        output.to_str().expect("utf-8"),
    ]);
    assert_exit(&out, 0);
    assert_eq!(mode(&output), 0o600);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&output).expect("read")).expect("JSON");
    assert_eq!(json["socket_path"], format!("{root}/run/bridge.sock"));
    assert_eq!(json["workdirs"][0]["alias"], "repo");
}

/// The compose trap of a container that runs as another user than the bridge admits: refused
/// at check time, naming the key and the fix, rather than as PEER_NOT_AUTHORIZED on every call.
#[test]
fn a_container_identity_the_bridge_would_refuse_is_refused() {
    let fx = Fixture::new();
    let (uid, gid) = own_ids();
    let other = uid.wrapping_add(4242);
    let text = edit(&shipped(), &[("SERVERFS_UID", other.to_string()), ("SERVERFS_GID", gid.to_string())]);
    let env = fx.write("identity.env", &text);
    let out = fx.run(&["config", "check", "--env-file", env.to_str().expect("utf-8")]);
    assert_exit(&out, 2);
    let stderr = texts(&out).1;
    let expected =
        format!("SERVERFS_UID: the front's container would run as uid {other}, but the bridge admits only uid {uid}");
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(stderr.contains(&format!("set SERVERFS_UID={uid}")), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn config_reference_prints_the_shipped_page() {
    let fx = Fixture::new();
    let out = fx.run(&["config", "reference"]);
    assert_exit(&out, 0);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        texts(&out).0 == page,
        "`agent-bridge config reference` and docs/configuration.md differ: regenerate it with\n  \
         cargo run -q -p agent-bridge -- config reference > docs/configuration.md"
    );
}
