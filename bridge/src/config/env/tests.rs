//! Tests of `.env` validation, on real temporary files and directories.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;
use crate::config::{AgentMode, RuntimeName, Workdir};

/// A temporary home with two workdirs (`home/work/alpha`, `home/work/beta`) and a file.
struct Fixture {
    dir: TempDir,
    context: Context,
}

type TestResult = Result<(), Box<dyn std::error::Error>>;

impl Fixture {
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn new() -> Result<Fixture, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let home = dir.path().canonicalize()?;
        std::fs::create_dir_all(home.join("work/alpha"))?;
        std::fs::create_dir_all(home.join("work/beta"))?;
        std::fs::write(home.join("work/file.txt"), "not a directory")?;
        Ok(Fixture { dir, context: Context { home, uid: 1000, gid: 1000 } })
    }

    fn home(&self) -> &Path {
        &self.context.home
    }

    /// Replaces `$HOME` with the fixture's home, and `$ALPHA` with the two lines that declare
    /// slot 01 as `alpha` on `$HOME/work/alpha`.
    fn expand(&self, text: &str) -> String {
        text.replace("$ALPHA", "WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH=$HOME/work/alpha")
            .replace("$HOME", &self.home().display().to_string())
    }

    /// Writes `text` as `.env` and validates it.
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn load(&self, text: &str) -> Result<EnvReport, Refusals> {
        let path = self.dir.path().join(".env");
        if let Err(e) = std::fs::write(&path, text) {
            let mut refusals = Refusals::default();
            refusals.push(None, format!("test setup: {e}"));
            return Err(refusals);
        }
        from_env_file_with(&path, &self.context)
    }

    /// Validates `text`, which must be refused; returns the refusals.
    fn refusals(&self, text: &str) -> Vec<Refusal> {
        match self.load(text) {
            Ok(report) => panic!("accepted:\n{text}\n---\n{report}"),
            Err(refusals) => refusals.0,
        }
    }
}

/// Asserts that some refusal names `key` and says `expected`.
fn assert_refused(refusals: &[Refusal], key: &str, expected: &str, case: &str) {
    assert!(
        refusals.iter().any(|r| r.key.as_deref() == Some(key) && r.message.contains(expected)),
        "{case}: no refusal of {key} saying {expected:?}; got:\n{}",
        Refusals(refusals.to_vec())
    );
}

/// Runs each `(lines, key, expected)` case on its own `.env` (see [`Fixture::expand`]).
fn assert_cases(fixture: &Fixture, cases: &[(&str, &str, &str)]) {
    for (text, key, expected) in cases {
        let text = fixture.expand(text);
        let refusals = fixture.refusals(&text);
        assert_refused(&refusals, key, expected, &text);
    }
}

/// Runs each `("KEY=VALUE", expected)` case, which must be refused naming `KEY`.
fn assert_own_key_refused(fixture: &Fixture, cases: &[(&str, &str)]) {
    for (line, expected) in cases {
        let key = line.split_once('=').map_or(*line, |(key, _)| key);
        assert_cases(fixture, &[(&format!("{line}\n"), key, expected)]);
    }
}

#[test]
fn an_empty_env_gives_the_defaults() -> TestResult {
    let fixture = Fixture::new()?;
    let report = fixture.load("")?;
    let home = fixture.home();
    let config = &report.config;
    assert_eq!(config.socket_path, home.join(".local/share/agent-bridge/runtime/socket/bridge.sock"));
    assert_eq!(config.lock_dir, home.join(".local/share/agent-bridge/runtime/locks"));
    assert_eq!(config.state_dir, home.join(".local/state/agent-bridge"));
    assert_eq!((config.allowed_peer_uid, config.allowed_peer_gid), (None, None));
    assert!(!config.allow_root && !config.enable_fake_runtime && !config.fake_exec);
    assert_eq!(config.limits, Limits::default());
    assert_eq!(config.mcp_auth, McpAuth::default());
    assert_eq!(config.codex, RuntimeBinary { bin: None, home: Some(home.join(".codex")) });
    assert_eq!(config.claude, RuntimeBinary::default());
    assert!(config.workdirs.is_empty());
    assert_eq!(report.other.mcp_listen.to_string(), "127.0.0.1:8765");
    assert_eq!(report.other.board_addr.to_string(), "127.0.0.1:7878");
    assert_eq!(report.other.bridge_timeout_seconds, 30);
    assert_eq!(report.other.log_level, LogLevel::Info);
    assert_eq!(report.config.log_level, LogLevel::Info);
    assert!(report.ignored.is_empty());
    Ok(())
}

#[test]
fn a_full_env_gives_the_expected_config() -> TestResult {
    let fixture = Fixture::new()?;
    let home = fixture.home().to_owned();
    std::os::unix::fs::symlink(home.join("work/beta"), home.join("beta-link"))?;
    let text = format!(
        "# The operator's .env.\n\
         SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR=/run/user/1000/agent-bridge\n\
         SERVERFS_AGENT_LOCK_HOST_DIR=~/locks\n\
         SERVERFS_AGENT_BRIDGE_STATE_DIR='{home}/state'\n\
         SERVERFS_AGENT_PEER_UID=1001\n\
         SERVERFS_AGENT_PEER_GID=\n\
         SERVERFS_AGENT_ALLOW_ROOT=no\n\
         SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=TRUE\n\
         SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=3600\n\
         SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=600   # ten minutes\n\
         SERVERFS_AGENT_MAX_ACTIVE_TASKS=2\n\
         SERVERFS_AGENT_MAX_EVENTS_PER_TASK=250000\n\
         SERVERFS_AGENT_TASK_RETENTION_HOURS=24\n\
         SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES=8388608\n\
         SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=900\n\
         SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS=45\n\
         SERVERFS_AGENT_MODE=review\n\
         SERVERFS_AGENT_RUNTIMES=codex, claude\n\
         SERVERFS_AGENT_BRIDGE_SOCKET=/run/agent-bridge/bridge.sock\n\
         SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS=45\n\
         SERVERFS_MCP_LISTEN=0.0.0.0:9000\n\
         SERVERFS_MCP_ALLOWED_HOSTS=mcp.example.com, localhost\n\
         SERVERFS_MCP_ALLOWED_ORIGINS=https://chatgpt.com,https://claude.ai\n\
         SERVERFS_MCP_AUTH=none\n\
         SERVERFS_MCP_TUNNEL_PRINCIPAL=openai-tunnel@example.com\n\
         SERVERFS_MCP_TUNNEL_ROLE=Viewer\n\
         SERVERFS_BOARD_ADDR=[::1]:7000\n\
         SERVERFS_CODEX_BIN=/usr/local/bin/codex\n\
         SERVERFS_CODEX_HOME=~/.codex-bridge\n\
         SERVERFS_CLAUDE_BIN=~/.local/bin/claude\n\
         SERVERFS_CLAUDE_CONFIG_DIR=/opt/claude\n\
         SERVERFS_LOG_LEVEL=debug\n\
         WORKDIR_01_ALIAS=alpha\n\
         WORKDIR_01_PATH=~/work/alpha\n\
         WORKDIR_01_DESCRIPTION=\"Alpha: the \\\"main\\\" project\"\n\
         WORKDIR_02_ALIAS=beta-2\n\
         WORKDIR_02_PATH={home}/beta-link/\n\
         WORKDIR_02_READ_ONLY=false\n\
         WORKDIR_02_AGENT_MODE=workspace-write\n\
         WORKDIR_02_AGENT_RUNTIMES=fake,codex\n\
         WORKDIR_02_AGENT_ISOLATION=Worktree\n\
         SERVERFS_AGENT_BRANCH_PREFIX=bots/agent-\n\
         WORKDIR_05_ALIAS=Docs\n\
         WORKDIR_05_PATH={home}/work\n\
         WORKDIR_05_READ_ONLY=on\n\
         WORKDIR_05_AGENT_MODE=disabled\n",
        home = home.display()
    );
    let report = fixture.load(&text)?;
    let expected = BridgeConfig {
        socket_path: PathBuf::from("/run/user/1000/agent-bridge/bridge.sock"),
        state_dir: home.join("state"),
        lock_dir: home.join("locks"),
        allowed_peer_uid: Some(1001),
        allowed_peer_gid: None,
        allow_root: false,
        enable_fake_runtime: true,
        fake_exec: false,
        limits: Limits {
            task_timeout_seconds: 3600,
            interaction_timeout_seconds: 600,
            max_active_tasks: 2,
            max_events_per_task: 250_000,
            retention_hours: 24,
            audit_retention_days: 90,
            result_spool_threshold_bytes: 8_388_608,
            event_idle_timeout_seconds: Some(900),
            provider_retry_timeout_seconds: 45,
        },
        mcp_auth: McpAuth {
            mode: McpAuthMode::None,
            tunnel_principal: "openai-tunnel@example.com".into(),
            tunnel_role: Role::Viewer,
        },
        oauth: None,
        notify: Default::default(),
        codex: RuntimeBinary {
            bin: Some(PathBuf::from("/usr/local/bin/codex")),
            home: Some(home.join(".codex-bridge")),
        },
        claude: RuntimeBinary { bin: Some(home.join(".local/bin/claude")), home: Some(PathBuf::from("/opt/claude")) },
        board_addr: "[::1]:7000".parse()?,
        board_socket: None,
        log_level: LogLevel::Debug,
        sandbox: crate::config::SandboxSettings::default(),
        branch_prefix: "bots/agent-".into(),
        config_file: None,
        workdirs: vec![
            Workdir {
                slot: 1,
                alias: "alpha".into(),
                path: home.join("work/alpha"),
                description: "Alpha: the \"main\" project".into(),
                read_only: true,
                agent_mode: AgentMode::Review,
                runtimes: vec![RuntimeName::Codex, RuntimeName::Claude],
                sandbox_read: vec![],
                sandbox_write: vec![],
                egress_allow: vec![],
                isolation: Default::default(),
            },
            Workdir {
                slot: 2,
                alias: "beta-2".into(),
                path: home.join("work/beta"),
                description: String::new(),
                read_only: false,
                agent_mode: AgentMode::WorkspaceWrite,
                runtimes: vec![RuntimeName::Fake, RuntimeName::Codex],
                sandbox_read: vec![],
                sandbox_write: vec![],
                egress_allow: vec![],
                isolation: crate::model::Isolation::Worktree,
            },
            Workdir {
                slot: 5,
                alias: "Docs".into(),
                path: home.join("work"),
                description: String::new(),
                read_only: true,
                agent_mode: AgentMode::Disabled,
                runtimes: vec![],
                sandbox_read: vec![],
                sandbox_write: vec![],
                egress_allow: vec![],
                isolation: Default::default(),
            },
        ],
    };
    assert_eq!(report.config, expected);
    let other = &report.other;
    assert_eq!(other.bridge_socket, Some(PathBuf::from("/run/agent-bridge/bridge.sock")));
    assert_eq!(other.bridge_timeout_seconds, 45);
    assert_eq!(other.mcp_listen.to_string(), "0.0.0.0:9000");
    assert_eq!(other.board_addr.to_string(), "[::1]:7000");
    assert_eq!(other.allowed_hosts, vec!["mcp.example.com", "localhost"]);
    assert_eq!(other.allowed_origins, vec!["https://chatgpt.com", "https://claude.ai"]);
    assert_eq!(other.log_level, LogLevel::Debug);
    assert!(report.ignored.is_empty());

    let shown = report.to_string();
    for expected in ["uid 1001, gid 1000 (the bridge's own)", "02 beta-2:", "tunnel mode", "off"] {
        assert!(shown.contains(expected), "{expected:?} missing from:\n{shown}");
    }
    Ok(())
}

/// An `.env` shaped like ServerFS's own `.env.example`: its keys, its 16 slots, its tunnel and
/// runtime sections, with slot 01 pointing at an existing directory, and the container
/// identity of a ServerFS agent deployment (the login user: 1000 in the fixture; ServerFS's
/// own default of 10001 is refused, see `the_front_container_runs_as_the_admitted_peer`).
fn serverfs_example(workdir: &Path) -> String {
    let mut text = String::from(
        "# ServerFS MCP\n\
         SERVERFS_IMAGE=ghcr.io/ntlx/serverfs_mcp:latest\n\
         SERVERFS_LOG_LEVEL=INFO\n\
         SERVERFS_UID=1000\nSERVERFS_GID=1000\n\
         SERVERFS_AGENT_BRIDGE_ENABLED=false\n\
         SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS=30\n\
         SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=7200\n\
         SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=1800\n\
         SERVERFS_AGENT_MAX_ACTIVE_TASKS=4\n\
         SERVERFS_AGENT_TASK_RETENTION_HOURS=168\n\
         SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES=262144\n\
         SERVERFS_AGENT_USE_PROXY=false\n\
         SERVERFS_AGENT_MODE=disabled\nSERVERFS_AGENT_RUNTIMES=\n\
         SERVERFS_AGENT_PEER_UID=\nSERVERFS_AGENT_PEER_GID=\n\
         SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR=\nSERVERFS_AGENT_LOCK_HOST_DIR=\n\
         SERVERFS_AGENT_BRIDGE_STATE_DIR=\n\
         SERVERFS_CODEX_BIN=\nSERVERFS_CODEX_HOME=~/.codex\nSERVERFS_CODEX_AUTOSTART=false\n\
         SERVERFS_CODEX_REQUEST_TIMEOUT_SECONDS=10\n\
         SERVERFS_CLAUDE_BIN=\nSERVERFS_CLAUDE_PROBE_TIMEOUT_SECONDS=5\n\
         SERVERFS_QODER_BIN=\nSERVERFS_QODER_PROBE_TIMEOUT_SECONDS=5\n\
         SERVERFS_JEV_API_KEY=\nSERVERFS_JEV_USE_PROXY=false\n\
         SERVERFS_MAX_READ_BYTES=524288\nSERVERFS_MAX_READ_LINES=500\n\
         SERVERFS_DEFAULT_LIST_LIMIT=100\nSERVERFS_MAX_LIST_ENTRIES=500\n\
         SERVERFS_DEFAULT_SEARCH_RESULTS=50\nSERVERFS_MAX_SEARCH_RESULTS=100\n\
         SERVERFS_MAX_WALK_ENTRIES=200000\n\
         SERVERFS_SEARCH_TIMEOUT_SECONDS=15\nSERVERFS_SEARCH_MAX_FILE_BYTES=52428800\n\
         SERVERFS_ALLOW_HIDDEN=false\nSERVERFS_EXTRA_DENY_GLOBS=\n\
         SERVERFS_DISABLE_DEFAULT_DENY=false\n\
         SERVERFS_MAX_WRITE_BYTES=1048576\nSERVERFS_MAX_EDITS_PER_CALL=50\n\
         SERVERFS_BINARY_TRANSFER_ENABLED=false\nSERVERFS_MAX_BINARY_TRANSFER_BYTES=8388608\n\
         SERVERFS_FILE_INGRESS_ENABLED=false\nSERVERFS_FILE_INGRESS_TIMEOUT_SECONDS=30\n\
         SERVERFS_FILE_INGRESS_ALLOWED_HOSTS=\n\
         SERVERFS_FILE_INGRESS_ALLOW_OPENAI_BLOB_HOSTS=false\n\
         SERVERFS_FILE_INGRESS_FETCH_TIMEOUT_SECONDS=30\n\
         SERVERFS_FILE_INGRESS_MAX_REDIRECTS=3\n\n",
    );
    let suffixes = [
        "ALIAS",
        "PATH",
        "DESCRIPTION",
        "READ_ONLY",
        "ALLOW_HIDDEN",
        "DISABLE_DEFAULT_DENY",
        "EXTRA_DENY_GLOBS",
        "MAX_READ_BYTES",
        "MAX_READ_LINES",
        "MAX_WRITE_BYTES",
        "BINARY_TRANSFER_ENABLED",
        "MAX_BINARY_TRANSFER_BYTES",
        "AGENT_MODE",
        "AGENT_RUNTIMES",
    ];
    for slot in 1..=16u8 {
        for suffix in suffixes {
            let value = match (slot, suffix) {
                (1, "ALIAS") => "projects".to_owned(),
                (1, "PATH") => workdir.display().to_string(),
                (1, "DESCRIPTION") => "\"项目代码、部署配置和技术文档\"".to_owned(),
                (_, "READ_ONLY") => "true".to_owned(),
                _ => String::new(),
            };
            text.push_str(&format!("WORKDIR_{slot:02}_{suffix}={value}\n"));
        }
        text.push('\n');
    }
    text.push_str(
        "OPENAI_TUNNEL_IMAGE=ghcr.io/openai/tunnel-client:v0.0.14\n\
         CONTROL_PLANE_BASE_URL=https://api.openai.com\n\
         SERVERFS_OPENAI_TUNNEL_USE_PROXY=false\n\
         SERVERFS_PROXY_HOST=\nSERVERFS_PROXY_PORT=\nSERVERFS_PROXY_USERNAME=\n\
         SERVERFS_PROXY_PASSWORD=\n\
         CONTROL_PLANE_TUNNEL_ID=\nCONTROL_PLANE_API_KEY=\n\
         MCP_STARTUP_WAIT_TIMEOUT=60s\n\
         TUNNEL_LOG_LEVEL=info\nTUNNEL_LOG_FORMAT=json\n\
         HEALTH_LISTEN_ADDR=:8080\n\
         TZ=Asia/Shanghai\n",
    );
    text
}

#[test]
fn the_serverfs_example_shape_is_accepted_with_its_ignored_keys() -> TestResult {
    let fixture = Fixture::new()?;
    let workdir = fixture.home().join("work/alpha");
    let report = fixture.load(&serverfs_example(&workdir))?;
    assert_eq!(report.config.workdirs.len(), 1);
    let projects = &report.config.workdirs[0];
    assert_eq!((projects.slot, projects.alias.as_str()), (1, "projects"));
    assert_eq!(projects.description, "项目代码、部署配置和技术文档");
    assert!(projects.read_only);
    assert_eq!(projects.agent_mode, AgentMode::Disabled);

    let ignored = |kind: IgnoredKind| -> Vec<&str> {
        report.ignored.iter().filter(|k| k.kind == kind).map(|k| k.key.as_str()).collect()
    };
    let serverfs = ignored(IgnoredKind::ServerFs);
    for key in [
        "SERVERFS_IMAGE",
        "SERVERFS_AGENT_BRIDGE_ENABLED",
        "SERVERFS_JEV_API_KEY",
        "SERVERFS_PROXY_PASSWORD",
        "WORKDIR_01_MAX_READ_BYTES",
        "WORKDIR_16_MAX_BINARY_TRANSFER_BYTES",
    ] {
        assert!(serverfs.contains(&key), "{key} not reported as an ignored ServerFS key");
    }
    let catalog = keys::KEYS.iter().filter(|spec| spec.owner == Owner::ServerFsIgnored && !spec.is_per_slot()).count();
    assert_eq!(serverfs.len(), catalog + 16 * 8, "every ignored ServerFS key is reported");
    let others = ignored(IgnoredKind::OtherProgram);
    assert_eq!(
        others,
        vec![
            "OPENAI_TUNNEL_IMAGE",
            "CONTROL_PLANE_BASE_URL",
            "CONTROL_PLANE_TUNNEL_ID",
            "CONTROL_PLANE_API_KEY",
            "MCP_STARTUP_WAIT_TIMEOUT",
            "TUNNEL_LOG_LEVEL",
            "TUNNEL_LOG_FORMAT",
            "HEALTH_LISTEN_ADDR",
            "TZ",
        ]
    );
    let shown = report.to_string();
    assert!(shown.contains("ignored ServerFS keys"), "{shown}");
    assert!(shown.contains("  OPENAI_TUNNEL_IMAGE, CONTROL_PLANE_BASE_URL,"), "{shown}");
    assert!(shown.contains("WORKDIR_NN_MAX_READ_BYTES,") && shown.contains("(in slots 01-16)"), "{shown}");
    Ok(())
}

#[test]
fn lifecycle_limits_are_strict_positive_integers() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=0", "at least 1"),
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=-5", "not a positive whole number"),
        ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS=1.0", "not a positive whole number"),
        ("SERVERFS_AGENT_MAX_ACTIVE_TASKS=\" 4\"", "not a positive whole number"),
        ("SERVERFS_AGENT_MAX_ACTIVE_TASKS=4294967296", "too large"),
        ("SERVERFS_AGENT_MAX_EVENTS_PER_TASK=0", "at least 1"),
        ("SERVERFS_AGENT_MAX_EVENTS_PER_TASK=10000001", "too large"),
        ("SERVERFS_AGENT_TASK_RETENTION_HOURS=99999999999999999999999", "too large"),
        ("SERVERFS_AGENT_TASK_RETENTION_HOURS=+168", "not a positive whole number"),
        ("SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES=8388609", "at most 8388608"),
        ("SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS=0", "at least 1"),
        ("SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS=0", "at least 1"),
        ("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS=abc", "not a positive whole number"),
    ];
    assert_own_key_refused(&fixture, &cases);
    Ok(())
}

#[test]
fn workdir_slots_are_checked() -> TestResult {
    let fixture = Fixture::new()?;
    let long_alias = format!("WORKDIR_01_ALIAS={}\nWORKDIR_01_PATH=$HOME/work/alpha\n", "a".repeat(33));
    #[rustfmt::skip]
    let cases = [
        ("WORKDIR_01_ALIAS=proj\nWORKDIR_01_PATH=$HOME/work/alpha\n\
          WORKDIR_02_ALIAS=PROJ\nWORKDIR_02_PATH=$HOME/work/beta\n",
            "WORKDIR_02_ALIAS", "already used by slot 01"),
        ("WORKDIR_01_ALIAS=9lives\nWORKDIR_01_PATH=$HOME/work/alpha\n",
            "WORKDIR_01_ALIAS", "not a valid alias"),
        (&long_alias, "WORKDIR_01_ALIAS", "not a valid alias"),
        ("WORKDIR_01_ALIAS=alpha\n", "WORKDIR_01_PATH", "path is empty"),
        ("WORKDIR_01_PATH=$HOME/work/alpha\n", "WORKDIR_01_ALIAS", "alias is empty"),
        ("WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH=$HOME/work/missing\n",
            "WORKDIR_01_PATH", "does not exist"),
        ("WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH=$HOME/work/file.txt\n",
            "WORKDIR_01_PATH", "is not a directory"),
        ("WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH=work/alpha\n",
            "WORKDIR_01_PATH", "not an absolute path"),
        ("$ALPHA\nWORKDIR_01_DESCRIPTION=\"two\\nlines\"\n",
            "WORKDIR_01_DESCRIPTION", "one line only"),
        ("$ALPHA\nWORKDIR_01_READ_ONLY=maybe\n", "WORKDIR_01_READ_ONLY", "not a boolean"),
        ("WORKDIR_03_AGENT_MODE=review\n", "WORKDIR_03_AGENT_MODE", "has no ALIAS or PATH"),
        ("WORKDIR_03_READ_ONLY=false\n", "WORKDIR_03_READ_ONLY", "has no ALIAS or PATH"),
    ];
    // The baseline the cases alter is valid.
    assert!(fixture.load(&fixture.expand("$ALPHA\n")).is_ok());
    assert_cases(&fixture, &cases);
    Ok(())
}

#[test]
fn agent_policy_is_checked() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=workspace-write\nWORKDIR_01_AGENT_RUNTIMES=codex\n",
            "WORKDIR_01_AGENT_MODE", "a writable mode on a read-only workdir"),
        ("$ALPHA\nSERVERFS_AGENT_MODE=workspace-write\nSERVERFS_AGENT_RUNTIMES=codex\n",
            "WORKDIR_01_READ_ONLY", "a writable mode on a read-only workdir"),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=yolo\n", "WORKDIR_01_AGENT_MODE", "not an agent mode"),
        ("SERVERFS_AGENT_MODE=read-write\n", "SERVERFS_AGENT_MODE", "not an agent mode"),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=review\nWORKDIR_01_AGENT_RUNTIMES=codex,gemini\n",
            "WORKDIR_01_AGENT_RUNTIMES", "unknown runtime \"gemini\""),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=review\nWORKDIR_01_AGENT_RUNTIMES=codex, CODEX\n",
            "WORKDIR_01_AGENT_RUNTIMES", "codex is listed twice"),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=review\nWORKDIR_01_AGENT_RUNTIMES=qoder\n",
            "WORKDIR_01_AGENT_RUNTIMES", "qoder is not supported by agent-bridge"),
        ("SERVERFS_AGENT_RUNTIMES=claude,qoder\n",
            "SERVERFS_AGENT_RUNTIMES", "qoder is not supported by agent-bridge"),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=review\nWORKDIR_01_AGENT_RUNTIMES=fake\n",
            "WORKDIR_01_AGENT_RUNTIMES", "fake needs SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true"),
        ("SERVERFS_AGENT_RUNTIMES=fake\n",
            "SERVERFS_AGENT_RUNTIMES", "fake needs SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true"),
        ("$ALPHA\nWORKDIR_01_AGENT_RUNTIMES=codex\n",
            "WORKDIR_01_AGENT_RUNTIMES", "agent mode is disabled"),
        ("$ALPHA\nWORKDIR_01_AGENT_MODE=review\n",
            "WORKDIR_01_AGENT_RUNTIMES", "needs at least one runtime"),
        ("$ALPHA\nSERVERFS_AGENT_MODE=review\n",
            "WORKDIR_01_AGENT_RUNTIMES", "needs at least one runtime"),
    ];
    assert_cases(&fixture, &cases);

    // An inherited global list is dropped on a disabled workdir, not refused.
    let home = fixture.home().display();
    let text = format!(
        "WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH={home}/work/alpha\n\
         SERVERFS_AGENT_RUNTIMES=codex\nWORKDIR_01_AGENT_MODE=disabled\n"
    );
    let report = fixture.load(&text)?;
    assert!(report.config.workdirs[0].runtimes.is_empty());
    Ok(())
}

#[test]
fn keys_and_global_settings_are_checked() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("SERVERFS_AGENT_MOD=review", "did you mean SERVERFS_AGENT_MODE?"),
        ("WORKDIR_01_ALIS=x", "did you mean WORKDIR_01_ALIAS?"),
        ("WORKDIR_17_ALIAS=x", "01 to 16"),
        ("SERVERFS_NONSENSE_SETTING=1", "unknown key"),
        ("SERVERFS_AGENT_ALLOW_ROOT=2", "not a boolean"),
        ("SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=enabled", "not a boolean"),
        ("SERVERFS_AGENT_PEER_UID=abc", "not a numeric id"),
        ("SERVERFS_AGENT_PEER_UID=-1", "not a numeric id"),
        ("SERVERFS_AGENT_PEER_GID=4294967296", "too large"),
        ("SERVERFS_MCP_AUTH=oauth", "not an auth mode"),
        ("SERVERFS_MCP_TUNNEL_ROLE=root", "not a role"),
        ("SERVERFS_MCP_TUNNEL_PRINCIPAL=\"a b\"", "not a principal name"),
        ("SERVERFS_MCP_LISTEN=localhost:8765", "not an IP address and port"),
        ("SERVERFS_BOARD_ADDR=127.0.0.1", "not an IP address and port"),
        ("SERVERFS_BOARD_ADDR=0.0.0.0:7878", "not a loopback address"),
        ("SERVERFS_MCP_ALLOWED_ORIGINS=chatgpt.com", "not an origin"),
        ("SERVERFS_MCP_ALLOWED_HOSTS=https://x.example", "not a host name"),
        ("SERVERFS_CODEX_BIN=codex", "not an absolute path"),
        ("SERVERFS_AGENT_BRIDGE_STATE_DIR=~other/state", "~user"),
        ("SERVERFS_LOG_LEVEL=LOUD", "not a log level"),
    ];
    assert_own_key_refused(&fixture, &cases);
    Ok(())
}

#[test]
fn syntax_errors_name_the_key_and_line() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("export SERVERFS_AGENT_MODE=review\n",
            "SERVERFS_AGENT_MODE", "line 1: the `export` prefix is not supported"),
        ("SERVERFS_AGENT_MODE=review\n\nSERVERFS_AGENT_MODE=disabled\n",
            "SERVERFS_AGENT_MODE", "line 3: duplicate key (first set on line 1)"),
        ("# c\nWORKDIR_01_DESCRIPTION=\"never closed\n",
            "WORKDIR_01_DESCRIPTION", "line 2: unterminated double-quoted value"),
    ];
    assert_cases(&fixture, &cases);
    Ok(())
}

#[test]
fn every_problem_is_reported_at_once() -> TestResult {
    let fixture = Fixture::new()?;
    let text = "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=0\n\
                SERVERFS_AGENT_MAX_ACTIVE_TASKS=lots\n\
                SERVERFS_MCP_AUTH=maybe\n\
                SERVERFS_AGENT_MOD=review\n\
                WORKDIR_01_ALIAS=alpha\n\
                WORKDIR_02_ALIAS=9\n\
                WORKDIR_02_PATH=/nonexistent/agent-bridge-test\n\
                SERVERFS_BOARD_ADDR=board\n";
    let refusals = fixture.refusals(text);
    let keys: Vec<&str> = refusals.iter().filter_map(|r| r.key.as_deref()).collect();
    for key in [
        "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS",
        "SERVERFS_AGENT_MAX_ACTIVE_TASKS",
        "SERVERFS_MCP_AUTH",
        "SERVERFS_AGENT_MOD",
        "WORKDIR_01_PATH",
        "WORKDIR_02_ALIAS",
        "WORKDIR_02_PATH",
        "SERVERFS_BOARD_ADDR",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    assert_eq!(refusals.len(), 8, "{}", Refusals(refusals.clone()));
    let shown = Refusals(refusals).to_string();
    assert_eq!(shown.lines().count(), 8);
    assert!(shown.lines().all(|line| line.starts_with("SERVERFS_") || line.starts_with("WORKDIR_")));

    let syntax = fixture.refusals("A=1\nexport B=2\nC='open\nA=3\n");
    assert_eq!(syntax.len(), 3, "{}", Refusals(syntax.clone()));
    Ok(())
}

#[test]
fn secret_values_never_appear() -> TestResult {
    let fixture = Fixture::new()?;
    let secrets = "SERVERFS_JEV_API_KEY=s3cr3t-jev\n\
                   SERVERFS_PROXY_PASSWORD='s3cr3t-proxy'\n\
                   CONTROL_PLANE_API_KEY=s3cr3t-control\n\
                   GITHUB_TOKEN=\"s3cr3t-token\"\n";
    let report = fixture.load(secrets)?;
    assert!(!format!("{report}\n{report:?}").contains("s3cr3t"), "{report}");

    let invalid = format!(
        "{secrets}SERVERFS_API_TOKEN=s3cr3t-typo\nSERVERFS_JEV_API_KEYS=s3cr3t-near\n\
         SERVERFS_AGENT_TASK_TIMEOUT_SECONDS=0\n"
    );
    let refusals = Refusals(fixture.refusals(&invalid));
    assert_refused(&refusals.0, "SERVERFS_JEV_API_KEYS", "did you mean SERVERFS_JEV_API_KEY?", "typo");
    assert_refused(&refusals.0, "SERVERFS_API_TOKEN", "unknown key", "typo");
    assert!(!format!("{refusals}\n{refusals:?}").contains("s3cr3t"), "{refusals}");

    for broken in [
        "MY_SECRET=\"s3cr3t-escape\\q\"\n",
        "MY_SECRET='s3cr3t-open\n",
        "MY_SECRET=\"s3cr3t-tail\"tail\n",
        "MY_SECRET=s3cr3t-one\nMY_SECRET=s3cr3t-two\n",
        "export MY_SECRET=s3cr3t-export\n",
    ] {
        let refusals = Refusals(fixture.refusals(broken));
        assert!(!format!("{refusals}\n{refusals:?}").contains("s3cr3t"), "{refusals}");
    }
    Ok(())
}

#[test]
fn check_rules_reports_every_broken_rule_of_a_loaded_config() -> TestResult {
    let fixture = Fixture::new()?;
    let text = format!(
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME=true\n\
         WORKDIR_01_ALIAS=alpha\nWORKDIR_01_PATH={home}/work/alpha\n\
         WORKDIR_01_READ_ONLY=false\nWORKDIR_01_AGENT_MODE=workspace-write\n\
         WORKDIR_01_AGENT_RUNTIMES=fake\n",
        home = fixture.home().display()
    );
    let mut config = fixture.load(&text)?.config;
    assert!(check_rules(&config).is_ok());

    config.socket_path = PathBuf::from("relative/bridge.sock");
    config.enable_fake_runtime = false;
    config.limits.max_active_tasks = 0;
    config.limits.result_spool_threshold_bytes = MAX_SPOOLED_RESULT_BYTES + 1;
    config.limits.event_idle_timeout_seconds = Some(0);
    let mut twin = config.workdirs[0].clone();
    twin.slot = 2;
    twin.alias = "ALPHA".into();
    twin.path = fixture.home().join("work/gone");
    twin.agent_mode = AgentMode::Disabled;
    config.workdirs.push(twin);
    config.workdirs[0].read_only = true;

    let refusals = check_rules(&config).err().unwrap_or_default();
    for (field, expected) in [
        ("socket_path", "not an absolute path"),
        ("limits.max_active_tasks", "at least 1"),
        ("limits.result_spool_threshold_bytes", "at most 8388608"),
        ("limits.event_idle_timeout_seconds", "at least 1"),
        ("workdirs[0].runtimes", "fake needs enable_fake_runtime"),
        ("workdirs[0].runtimes", "a writable mode on a read-only workdir"),
        ("workdirs[1].alias", "used twice"),
        ("workdirs[1].path", "does not exist"),
        ("workdirs[1].runtimes", "must be empty when the agent mode is disabled"),
    ] {
        assert_refused(&refusals.0, field, expected, "check_rules");
    }
    Ok(())
}

#[test]
fn refusals_display_one_line_each() {
    let mut refusals = Refusals::default();
    refusals.push(Some("SERVERFS_AGENT_MODE"), "\"x\" is not an agent mode");
    refusals.push(None, "cannot read .env");
    assert_eq!(refusals.to_string(), "SERVERFS_AGENT_MODE: \"x\" is not an agent mode\ncannot read .env");
    assert!(Refusals::default().into_result(()).is_ok());
}

#[test]
fn an_unreadable_file_is_refused_clearly() -> TestResult {
    let fixture = Fixture::new()?;
    let missing = fixture.home().join("no-such.env");
    let refusals = from_env_file_with(&missing, &fixture.context).err().unwrap_or_default();
    assert_eq!(refusals.0.len(), 1);
    assert!(refusals.to_string().contains("cannot read"), "{refusals}");
    Ok(())
}

#[test]
fn the_front_container_runs_as_the_admitted_peer() -> TestResult {
    let fixture = Fixture::new()?;
    // The fixture's bridge runs as 1000:1000.
    #[rustfmt::skip]
    let cases = [
        ("SERVERFS_UID=10001\n", "SERVERFS_UID",
            "the front's container would run as uid 10001, but the bridge admits only uid 1000 (the bridge's own"),
        ("SERVERFS_GID=10001\n", "SERVERFS_GID", "set SERVERFS_GID=1000, or leave it empty"),
        ("SERVERFS_AGENT_PEER_UID=1001\nSERVERFS_UID=1000\n", "SERVERFS_UID",
            "admits only uid 1001 (SERVERFS_AGENT_PEER_UID)"),
        ("SERVERFS_AGENT_PEER_GID=2000\nSERVERFS_GID=1000\n", "SERVERFS_GID", "set SERVERFS_GID=2000"),
        ("SERVERFS_AGENT_PEER_UID=0\nSERVERFS_UID=0\n", "SERVERFS_UID", "0 would run the front's container as root"),
        ("SERVERFS_UID=me\n", "SERVERFS_UID", "not a numeric id"),
        ("SERVERFS_GID=-1\n", "SERVERFS_GID", "not a numeric id"),
    ];
    assert_cases(&fixture, &cases);
    for text in [
        "SERVERFS_UID=1000\nSERVERFS_GID=1000\n",
        "SERVERFS_AGENT_PEER_UID=1001\nSERVERFS_AGENT_PEER_GID=2000\nSERVERFS_UID=1001\nSERVERFS_GID=2000\n",
        "SERVERFS_UID=\nSERVERFS_GID=\n",
        "SERVERFS_AGENT_ALLOW_ROOT=true\nSERVERFS_AGENT_PEER_UID=0\nSERVERFS_UID=0\n",
    ] {
        let report = fixture.load(text).map_err(|r| format!("{text}: {r}"))?;
        assert!(report.to_string().contains("runs as:"), "{report}");
    }
    Ok(())
}

#[test]
fn compose_settings_are_checked() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("SERVERFS_MCP_PUBLISH=8765", "not an IP address and port"),
        ("SERVERFS_MCP_PUBLISH=localhost:8765", "not an IP address and port"),
        ("SERVERFS_MCP_FRONT_IMAGE=\"my image\"", "not an image reference"),
        ("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR=run/socket", "not an absolute path"),
        ("SERVERFS_AGENT_LOCK_HOST_DIR=locks", "not an absolute path"),
        ("SERVERFS_AGENT_BRIDGE_STATE_DIR=./state", "not an absolute path"),
    ];
    assert_own_key_refused(&fixture, &cases);
    let report =
        fixture.load("SERVERFS_MCP_PUBLISH=127.0.0.1:8765\nSERVERFS_MCP_FRONT_IMAGE=registry.example/front:1.2\n")?;
    assert_eq!(report.other.publish.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:8765"));
    assert_eq!(report.other.front_image, "registry.example/front:1.2");
    let report = fixture.load("")?;
    assert_eq!((report.other.publish, report.other.front_image.as_str()), (None, "agent-bridge/mcp-front:local"));
    assert_eq!((report.other.container_uid, report.other.container_gid), (None, None));
    Ok(())
}

/// Values are taken literally: `$HOME` or `${X}` in a value is not expanded (ServerFS's
/// renderer does no variable expansion either), so such a path is simply not absolute.
#[test]
fn values_are_never_expanded() -> TestResult {
    let fixture = Fixture::new()?;
    let cases = [("SERVERFS_AGENT_BRIDGE_STATE_DIR=$HOME/state", "not an absolute path")];
    // `expand` would replace `$HOME`: write the file directly.
    for (line, expected) in cases {
        let refusals = fixture.refusals(&format!("{line}\n"));
        assert_refused(&refusals, "SERVERFS_AGENT_BRIDGE_STATE_DIR", expected, line);
    }
    let report = fixture.load(&fixture.expand("$ALPHA\nWORKDIR_01_DESCRIPTION=costs ${PRICE} or $5\n"))?;
    assert_eq!(report.config.workdirs[0].description, "costs ${PRICE} or $5");
    Ok(())
}

#[test]
fn tunnel_mode_is_refused_on_loopback_unless_meant_and_never_admin() -> TestResult {
    let fixture = Fixture::new()?;
    #[rustfmt::skip]
    let cases = [
        ("SERVERFS_MCP_AUTH=none\nSERVERFS_MCP_LISTEN=127.0.0.1:8765\n", "SERVERFS_MCP_AUTH", "SERVERFS_MCP_TUNNEL_ALLOW_LOCAL=true"),
        ("SERVERFS_MCP_AUTH=none\nSERVERFS_MCP_PUBLISH=127.0.0.1:8765\n", "SERVERFS_MCP_AUTH", "every local user"),
        ("SERVERFS_MCP_AUTH=none\nSERVERFS_MCP_LISTEN=[::1]:8765\n", "SERVERFS_MCP_AUTH", "loopback"),
        ("SERVERFS_MCP_TUNNEL_ROLE=admin\n", "SERVERFS_MCP_TUNNEL_ROLE", "at most operator"),
        ("SERVERFS_MCP_TUNNEL_ROLE=Admin\nSERVERFS_MCP_AUTH=none\nSERVERFS_MCP_LISTEN=0.0.0.0:8765\n", "SERVERFS_MCP_TUNNEL_ROLE", "administrator"),
        ("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL=maybe\n", "SERVERFS_MCP_TUNNEL_ALLOW_LOCAL", "not a boolean"),
    ];
    assert_cases(&fixture, &cases);
    for accepted in [
        "SERVERFS_MCP_AUTH=none\nSERVERFS_MCP_LISTEN=127.0.0.1:8765\nSERVERFS_MCP_TUNNEL_ALLOW_LOCAL=true\n",
        "SERVERFS_MCP_AUTH=none\nSERVERFS_MCP_LISTEN=0.0.0.0:8765\n",
        // The front's own default bind is checked by the front itself, which knows it.
        "SERVERFS_MCP_AUTH=none\n",
        "SERVERFS_MCP_LISTEN=127.0.0.1:8765\n",
    ] {
        let text = fixture.expand(accepted);
        let report = fixture.load(&text).map_err(|r| format!("refused:\n{text}\n{r}"))?;
        assert!(report.config.mcp_auth.tunnel_role <= Role::Operator);
    }
    Ok(())
}

#[test]
fn oauth_settings_are_read_and_checked() -> TestResult {
    let f = Fixture::new()?;
    let report = f
        .load(&f.expand(
            "$ALPHA\nSERVERFS_MCP_OAUTH_ISSUER=https://idp.example/realms/main\n\
             SERVERFS_MCP_OAUTH_RESOURCE=https://front.example/mcp-oauth\n\
             SERVERFS_MCP_OAUTH_ROLE_CLAIM=realm_access.roles\nSERVERFS_MCP_OAUTH_ADMINS=auth0|1, boss\n\
             SERVERFS_MCP_OAUTH_WORKDIRS=alpha\nSERVERFS_MCP_OAUTH_SCOPES=openid agent-bridge:operator\n",
        ))
        .map_err(|r| r.to_string())?;
    let oauth = report.config.oauth.expect("OAuth is on");
    assert_eq!(oauth.issuer, "https://idp.example/realms/main");
    assert_eq!(oauth.resource, "https://front.example/mcp-oauth");
    assert_eq!(oauth.metadata_url(), "https://front.example/.well-known/oauth-protected-resource/mcp-oauth");
    assert_eq!(oauth.scopes, ["openid", "agent-bridge:operator"]);
    assert_eq!(oauth.role_prefix, "agent-bridge:");
    assert_eq!(oauth.role_claim.as_deref(), Some("realm_access.roles"));
    assert_eq!(oauth.admins, ["auth0|1", "boss"]);
    assert_eq!(oauth.workdirs, Some(vec!["alpha".to_owned()]));
    assert_eq!(oauth.leeway_seconds, 30);
    assert!(oauth.introspection.is_none());
    // Off by default, and a loopback test IdP over http is accepted.
    assert!(f.load("").map_err(|r| r.to_string())?.config.oauth.is_none());
    let local = f
        .load("SERVERFS_MCP_OAUTH_ISSUER=http://127.0.0.1:9000\nSERVERFS_MCP_OAUTH_RESOURCE=http://127.0.0.1:8765/mcp-oauth\n")
        .map_err(|r| r.to_string())?;
    assert_eq!(local.config.oauth.map(|o| o.resource).as_deref(), Some("http://127.0.0.1:8765/mcp-oauth"));

    let both =
        "SERVERFS_MCP_OAUTH_ISSUER=https://idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://front.example/mcp-oauth\n";
    let with = |extra: &str| format!("$ALPHA\n{both}{extra}\n");
    let cases = [
        (with("SERVERFS_MCP_OAUTH_ISSUER=x"), "SERVERFS_MCP_OAUTH_ISSUER", "duplicate key"),
        ("SERVERFS_MCP_OAUTH_ISSUER=http://idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp-oauth".into(), "SERVERFS_MCP_OAUTH_ISSUER", "must be https://"),
        ("SERVERFS_MCP_OAUTH_ISSUER=idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp-oauth".into(), "SERVERFS_MCP_OAUTH_ISSUER", "not an absolute URL"),
        ("SERVERFS_MCP_OAUTH_ISSUER=https://u:p@idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp-oauth".into(), "SERVERFS_MCP_OAUTH_ISSUER", "credentials"),
        ("SERVERFS_MCP_OAUTH_ISSUER=https://idp.example".into(), "SERVERFS_MCP_OAUTH_RESOURCE", "is required"),
        ("SERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp-oauth".into(), "SERVERFS_MCP_OAUTH_ISSUER", "is required"),
        ("SERVERFS_MCP_OAUTH_ISSUER=https://idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp".into(), "SERVERFS_MCP_OAUTH_RESOURCE", "/mcp-oauth"),
        ("SERVERFS_MCP_OAUTH_ISSUER=https://idp.example\nSERVERFS_MCP_OAUTH_RESOURCE=https://f.example/mcp-oauth?x=1".into(), "SERVERFS_MCP_OAUTH_RESOURCE", "no query"),
        ("SERVERFS_MCP_OAUTH_ADMINS=boss".into(), "SERVERFS_MCP_OAUTH_ADMINS", "SERVERFS_MCP_OAUTH_ISSUER is not"),
        (with("SERVERFS_MCP_OAUTH_JWKS_URL=ftp://keys.example/jwks"), "SERVERFS_MCP_OAUTH_JWKS_URL", "must be https://"),
        (with("SERVERFS_MCP_OAUTH_WORKDIRS=alpha,nowhere"), "SERVERFS_MCP_OAUTH_WORKDIRS", "\"nowhere\" is not a configured workdir"),
        (with("SERVERFS_MCP_OAUTH_ROLE_CLAIM=realm access"), "SERVERFS_MCP_OAUTH_ROLE_CLAIM", "not a claim name"),
        (with("SERVERFS_MCP_OAUTH_LEEWAY_SECONDS=301"), "SERVERFS_MCP_OAUTH_LEEWAY_SECONDS", "from 0 to 300"),
        (with("SERVERFS_MCP_OAUTH_SCOPES=\"a\\\"b\""), "SERVERFS_MCP_OAUTH_SCOPES", "no quotes"),
        (with("SERVERFS_MCP_OAUTH_INTROSPECTION_URL=https://idp.example/introspect"), "SERVERFS_MCP_OAUTH_INTROSPECTION_URL", "together"),
    ];
    for (text, key, expected) in &cases {
        let text = f.expand(text);
        assert_refused(&f.refusals(&text), key, expected, &text);
    }
    // The client secret is never shown, whatever is wrong around it.
    let text =
        f.expand(&with("SERVERFS_MCP_OAUTH_CLIENT_ID=bridge\nSERVERFS_MCP_OAUTH_CLIENT_SECRET=s3cr3t-value-xyz"));
    let refusals = f.refusals(&text);
    assert!(!Refusals(refusals).to_string().contains("s3cr3t-value-xyz"));
    Ok(())
}

#[test]
fn notification_targets_are_validated_strictly() -> TestResult {
    let fixture = Fixture::new()?;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let hook = |extra: &str| {
        format!("SERVERFS_NOTIFY_01_URL=https://hooks.example/a\nSERVERFS_NOTIFY_01_KIND=webhook\n{extra}")
    };
    let cases = [
        (hook(""), "SERVERFS_NOTIFY_01_SECRET", "needs a signing secret"),
        (hook("SERVERFS_NOTIFY_01_SECRET=hunter2"), "SERVERFS_NOTIFY_01_SECRET", "whsec_"),
        (hook(&format!("SERVERFS_NOTIFY_01_SECRET={secret}\nSERVERFS_NOTIFY_01_EVENTS=task.finished,task.done")), "SERVERFS_NOTIFY_01_EVENTS", "\"task.done\" is not an event"),
        (hook(&format!("SERVERFS_NOTIFY_01_SECRET={secret}\nSERVERFS_NOTIFY_01_DETAILS=all")), "SERVERFS_NOTIFY_01_DETAILS", "not summary or full"),
        ("SERVERFS_NOTIFY_02_URL=http://10.0.0.5/hook\nSERVERFS_NOTIFY_02_KIND=slack".into(), "SERVERFS_NOTIFY_02_URL", "must be https://"),
        ("SERVERFS_NOTIFY_02_URL=https://hooks.slack.example/T/B/C\nSERVERFS_NOTIFY_02_KIND=slack\nSERVERFS_NOTIFY_02_SECRET=x".into(), "SERVERFS_NOTIFY_02_SECRET", "no secret"),
        ("SERVERFS_NOTIFY_03_URL=https://ntfy.example/\nSERVERFS_NOTIFY_03_KIND=ntfy".into(), "SERVERFS_NOTIFY_03_URL", "names its topic"),
        ("SERVERFS_NOTIFY_04_URL=https://x.example/h\nSERVERFS_NOTIFY_04_KIND=email".into(), "SERVERFS_NOTIFY_04_KIND", "not webhook, ntfy or slack"),
        ("SERVERFS_NOTIFY_05_KIND=ntfy".into(), "SERVERFS_NOTIFY_05_KIND", "has no URL"),
        ("SERVERFS_NOTIFY_09_URL=https://x.example/h".into(), "SERVERFS_NOTIFY_09_URL", "notification targets are numbered 01 to 08"),
        ("SERVERFS_NOTIFY_RETRY_BASE_MS=50".into(), "SERVERFS_NOTIFY_RETRY_BASE_MS", "below the least delay"),
        ("SERVERFS_BOARD_PUBLIC_URL=http://phone.example".into(), "SERVERFS_BOARD_PUBLIC_URL", "must be https://"),
    ];
    for (text, key, expected) in &cases {
        let text = fixture.expand(&format!("$ALPHA\n{text}\n"));
        assert_refused(&fixture.refusals(&text), key, expected, &text);
    }
    let text = fixture.expand(&format!(
        "$ALPHA\n{}\nSERVERFS_NOTIFY_01_SECRET={secret}\nSERVERFS_NOTIFY_01_EVENTS=approval.requested, task.failed\n\
         SERVERFS_NOTIFY_02_URL=https://ntfy.example/alerts\nSERVERFS_NOTIFY_02_KIND=NTFY\nSERVERFS_NOTIFY_02_DETAILS=full\n\
         SERVERFS_NOTIFY_03_DETAILS=summary\nSERVERFS_BOARD_PUBLIC_URL=https://phone.example/board/\n",
        hook("")
    ));
    let notify = fixture.load(&text)?.config.notify;
    assert_eq!(notify.targets.len(), 2);
    let events: Vec<&str> = notify.targets[0].events.iter().map(|e| e.as_str()).collect();
    assert_eq!(events, ["approval.requested", "task.failed"]);
    assert_eq!(notify.targets[1].events.len(), 6, "empty EVENTS means all");
    assert_eq!(notify.targets[1].details, crate::config::notify::Details::Full);
    assert_eq!(notify.board_public_url.as_deref(), Some("https://phone.example/board"));
    assert!(!format!("{:?}", notify.targets[0]).contains("whsec_"), "Debug shows no secret");
    Ok(())
}
