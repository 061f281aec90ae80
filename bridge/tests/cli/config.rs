//! `agent-bridge config check`: the effective configuration for a good `.env`, and every
//! refusal, each naming its key, for a bad one (exit 2).

use crate::{Fixture, texts};

/// Runs `config check` on `text`; returns (exit code, stdout, stderr).
fn check(fx: &Fixture, text: &str) -> (Option<i32>, String, String) {
    let env = fx.write("check.env", text);
    let out = fx.run(&["config", "check", "--env-file", env.to_str().expect("utf-8 path")]);
    let (stdout, stderr) = texts(&out);
    (out.status.code(), stdout, stderr)
}

/// Asserts exit 2, nothing on stdout, and a refusal line per key (`KEY: …` saying `says`).
fn assert_refused(fx: &Fixture, text: &str, expected: &[(&str, &str)]) {
    let (code, stdout, stderr) = check(fx, text);
    assert_eq!(code, Some(2), "config check must refuse:\n{text}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.is_empty(), "a refusal prints nothing on stdout:\n{stdout}");
    for (key, says) in expected {
        let prefix = format!("{key}: ");
        assert!(
            stderr.lines().any(|l| l.starts_with(&prefix) && l.contains(says)),
            "no refusal line naming {key} and saying {says:?}:\n{stderr}"
        );
    }
}

#[test]
fn a_good_file_prints_the_effective_config() {
    let fx = Fixture::new();
    let (code, stdout, stderr) = check(&fx, &fx.env_with(&[]));
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let root = fx.root.display().to_string();
    for expected in [
        format!("socket:              {root}/run/bridge.sock"),
        format!("state dir:           {root}/state"),
        format!("lock dir:            {root}/locks"),
        "task timeout:        7200 s".to_owned(),
        "interaction timeout: 1800 s".to_owned(),
        "max active tasks:    3".to_owned(),
        "retention:           168 h".to_owned(),
        format!("01 repo: {root}/repo (writable, agent mode workspace-write, runtimes fake)"),
        format!("02 docs: {root}/docs (read-only, agent mode review, runtimes fake)"),
    ] {
        assert!(stdout.contains(&expected), "missing {expected:?} in:\n{stdout}");
    }
    // Checking never creates anything.
    assert!(!fx.state_dir().exists() && !fx.socket().parent().expect("dir").exists());
}

#[test]
fn a_misspelled_key_is_named_with_a_suggestion() {
    let fx = Fixture::new();
    let text = fx.env_with(&[("SERVERFS_AGENT_TASK_TIMEOUT_SECOND", "5")]);
    assert_refused(
        &fx,
        &text,
        &[("SERVERFS_AGENT_TASK_TIMEOUT_SECOND", "did you mean SERVERFS_AGENT_TASK_TIMEOUT_SECONDS")],
    );
}

#[test]
fn a_zero_limit_is_refused() {
    let fx = Fixture::new();
    for key in [
        "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS",
        "SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS",
        "SERVERFS_AGENT_MAX_ACTIVE_TASKS",
        "SERVERFS_AGENT_TASK_RETENTION_HOURS",
    ] {
        assert_refused(&fx, &fx.env_with(&[(key, "0")]), &[(key, "at least 1")]);
    }
}

#[test]
fn a_non_integer_limit_is_refused() {
    let fx = Fixture::new();
    for value in ["1.5", "ten", "-5", "1e3", "+60"] {
        let text = fx.env_with(&[("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", value)]);
        assert_refused(&fx, &text, &[("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", "not a positive whole number")]);
    }
}

#[test]
fn a_duplicate_alias_is_refused() {
    let fx = Fixture::new();
    // Aliases are compared case-insensitively.
    let text = fx.env_with(&[("WORKDIR_02_ALIAS", "REPO")]);
    assert_refused(&fx, &text, &[("WORKDIR_02_ALIAS", "already used by slot 01")]);
}

#[test]
fn a_missing_workdir_path_is_refused() {
    let fx = Fixture::new();
    let missing = fx.root.join("no-such-dir");
    let text = fx.env_with(&[("WORKDIR_01_PATH", missing.to_str().expect("utf-8"))]);
    assert_refused(&fx, &text, &[("WORKDIR_01_PATH", "does not exist")]);
    assert!(!missing.exists(), "a workdir is never created");
}

#[test]
fn workspace_write_on_a_read_only_workdir_is_refused() {
    let fx = Fixture::new();
    let text = fx.env_with(&[("WORKDIR_01_AGENT_MODE", "workspace-write"), ("WORKDIR_01_READ_ONLY", "true")]);
    assert_refused(&fx, &text, &[("WORKDIR_01_AGENT_MODE", "read-only")]);
}

#[test]
fn an_export_prefix_is_refused() {
    let fx = Fixture::new();
    let text = format!("{}export X=1\n", fx.env_with(&[]));
    let line = text.lines().count();
    assert_refused(&fx, &text, &[("X", &format!("line {line}: the `export` prefix is not supported"))]);
}

#[test]
fn several_problems_are_all_listed() {
    let fx = Fixture::new();
    let missing = fx.root.join("gone");
    let text = fx.env_with(&[
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECOND", "5"),
        ("SERVERFS_AGENT_MAX_ACTIVE_TASKS", "0"),
        ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", "soon"),
        ("WORKDIR_02_ALIAS", "repo"),
        ("WORKDIR_01_PATH", missing.to_str().expect("utf-8")),
        ("WORKDIR_03_ALIAS", "extra"),
        ("WORKDIR_03_PATH", fx.root.join("docs").to_str().expect("utf-8")),
        ("WORKDIR_03_AGENT_MODE", "workspace-write"),
        ("WORKDIR_03_READ_ONLY", "true"),
        ("WORKDIR_03_AGENT_RUNTIMES", "fake"),
    ]);
    let expected = [
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECOND", "unknown key"),
        ("SERVERFS_AGENT_MAX_ACTIVE_TASKS", "at least 1"),
        ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", "not a positive whole number"),
        ("WORKDIR_02_ALIAS", "already used"),
        ("WORKDIR_01_PATH", "does not exist"),
        ("WORKDIR_03_AGENT_MODE", "read-only"),
    ];
    assert_refused(&fx, &text, &expected);
    let (_, _, stderr) = check(&fx, &text);
    assert_eq!(stderr.lines().count(), expected.len(), "one line per problem, nothing else:\n{stderr}");
}

/// The four lifecycle limits.
const LIFECYCLE_KEYS: [&str; 4] = [
    "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS",
    "SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS",
    "SERVERFS_AGENT_MAX_ACTIVE_TASKS",
    "SERVERFS_AGENT_TASK_RETENTION_HOURS",
];

/// Runs `config check --json` on `text` and returns the effective limits.
fn checked_limits(fx: &Fixture, text: &str) -> serde_json::Value {
    let (code, stdout, stderr) = check_json(fx, text);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("config check --json prints JSON");
    v["config"]["limits"].clone()
}

fn check_json(fx: &Fixture, text: &str) -> (Option<i32>, String, String) {
    let env = fx.write("check.env", text);
    let out = fx.run(&["config", "check", "--json", "--env-file", env.to_str().expect("utf-8 path")]);
    let (stdout, stderr) = texts(&out);
    (out.status.code(), stdout, stderr)
}

#[test]
fn each_lifecycle_limit_defaults_to_the_seed_value_when_absent_or_empty() {
    let fx = Fixture::new();
    let defaults = serde_json::json!([7200, 1800, 4, 168]);
    let fields = ["task_timeout_seconds", "interaction_timeout_seconds", "max_active_tasks", "retention_hours"];
    let pick = |limits: &serde_json::Value| serde_json::json!(fields.map(|f| limits[f].clone()));
    // Absent (the fixture sets the active-task cap: drop it).
    let absent: String = fx
        .env_with(&[])
        .lines()
        .filter(|l| !LIFECYCLE_KEYS.iter().any(|k| l.starts_with(&format!("{k}="))))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(pick(&checked_limits(&fx, &absent)), defaults, "absent keys");
    // Empty: the same defaults.
    let empty = fx.env_with(&LIFECYCLE_KEYS.map(|k| (k, "")));
    assert_eq!(pick(&checked_limits(&fx, &empty)), defaults, "empty values");
    let (_, text, _) = check(&fx, &absent);
    assert!(text.contains("max active tasks:    4"), "{text}");
    // Each key on its own, the others at their defaults.
    for (i, key) in LIFECYCLE_KEYS.iter().enumerate() {
        let text = format!("{absent}{key}=37\n");
        let mut expected = defaults.clone();
        expected[i] = serde_json::json!(37);
        assert_eq!(pick(&checked_limits(&fx, &text)), expected, "{key}=37");
    }
}

#[test]
fn each_lifecycle_limit_is_bounded_above() {
    let fx = Fixture::new();
    // Ten years in seconds or hours, and a 32-bit count: the largest values that are taken.
    for (key, max) in [
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", 315_360_000u64),
        ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", 315_360_000),
        ("SERVERFS_AGENT_MAX_ACTIVE_TASKS", u64::from(u32::MAX)),
        ("SERVERFS_AGENT_TASK_RETENTION_HOURS", 87_600),
    ] {
        let (code, stdout, stderr) = check_json(&fx, &fx.env_with(&[(key, &max.to_string())]));
        assert_eq!(code, Some(0), "{key}={max}: {stderr}");
        assert!(stdout.contains(&max.to_string()));
        assert_refused(&fx, &fx.env_with(&[(key, &(max + 1).to_string())]), &[(key, "too large")]);
    }
    // An interaction timeout longer than the task timeout is allowed: the task deadline caps
    // every request (`expires_at = min(deadline, now + interaction timeout)`).
    let text = fx.env_with(&[
        ("SERVERFS_AGENT_TASK_TIMEOUT_SECONDS", "60"),
        ("SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS", "3600"),
    ]);
    let limits = checked_limits(&fx, &text);
    assert_eq!(
        (limits["task_timeout_seconds"].as_u64(), limits["interaction_timeout_seconds"].as_u64()),
        (Some(60), Some(3600))
    );
}
