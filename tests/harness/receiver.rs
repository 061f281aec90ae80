//! The notification receiver of the notify tests: runs `tests/notify/receiver.py` (webhook
//! signatures checked with the Standard Webhooks reference library, the ntfy and Slack shapes
//! checked, scripted failures) in `.tools/notify-venv` on 127.0.0.1, and reads the JSON line it
//! logs per request. `.ci/install-node-tools` makes the venv; in CI (`CI=true`) a missing venv
//! fails the test, elsewhere [`Receiver::start`] says loudly that it is skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::io::AsyncBufReadExt;

/// A Standard Webhooks secret for the tests (`whsec_` and 32 bytes in base64).
pub const SECRET: &str = "whsec_YWdlbnQtYnJpZGdlIGUyZSBub3RpZnkgc2VjcmV0ISE=";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_owned()
}

/// The venv's Python, or `None` (said loudly) outside CI when it is missing.
#[allow(clippy::print_stderr, reason = "a skipped test must say so where the developer looks")]
pub fn python() -> Option<PathBuf> {
    let python = workspace().join(".tools/notify-venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let missing = "the notification receiver's venv is missing (.tools/notify-venv with standardwebhooks): \
                   run bash .ci/install-node-tools";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{missing}");
    eprintln!("\n*** SKIPPED a notification end-to-end test: {missing} ***\n");
    None
}

/// A running `receiver.py`, killed on drop.
pub struct Receiver {
    /// The port it serves on (127.0.0.1).
    pub port: u16,
    dir: TempDir,
    child: tokio::process::Child,
}

impl Receiver {
    /// Starts a receiver verifying webhooks with `secret`, whose first `n` requests to
    /// `/webhook/NAME` (or `/slack/NAME`) answer 500 for each `(NAME, n)` of `fails`; waits
    /// (bounded, 30 s) for the port it prints. `None` when the venv is missing outside CI.
    pub async fn start(secret: &str, fails: &[(&str, u32)]) -> Option<Receiver> {
        let python = python()?;
        let dir = tempfile::Builder::new().prefix("ab-receiver-").tempdir().expect("temp dir");
        let stderr = std::fs::File::create(dir.path().join("receiver.stderr")).expect("stderr file");
        let mut command = tokio::process::Command::new(python);
        command
            .arg(workspace().join("tests/notify/receiver.py"))
            .arg("--log")
            .arg(dir.path().join("requests.jsonl"))
            .args(["--secret", secret]);
        for (name, n) in fails {
            command.arg("--fail").arg(format!("{name}={n}"));
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start receiver.py");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::time::timeout(Duration::from_secs(30), tokio::io::BufReader::new(stdout).lines().next_line())
            .await
            .expect("receiver.py prints its port within 30 s")
            .expect("read receiver.py's stdout");
        let Some(line) = line else {
            let _ = child.wait().await;
            let err = std::fs::read_to_string(dir.path().join("receiver.stderr")).unwrap_or_default();
            panic!("receiver.py exited before it printed its port:\n{err}");
        };
        let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("receiver.py's line {line:?}: {e}"));
        let port = ready["port"].as_u64().and_then(|p| u16::try_from(p).ok()).expect("a port");
        Some(Receiver { port, dir, child })
    }

    /// `http://127.0.0.1:PORT` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request received so far, in order of arrival: `{method, path, headers (lower-cased
    /// names), body (text), verified (true/false/null), error, status_answered, received_at}`.
    /// A line still being written (no newline yet) is left for the next read.
    pub fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("requests.jsonl")).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a receiver log line {l:?}: {e}")))
            .collect()
    }

    /// Polls the log every 50 ms until `cond(records)` holds and returns those records; panics
    /// after `timeout` with a summary of what arrived.
    pub async fn wait_for(&self, cond: impl Fn(&[Value]) -> bool, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let records = self.records();
            if cond(&records) {
                return records;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the receiver's log did not reach the expected state in {timeout:?}; {} request(s):\n{}\n--- stderr:\n{}",
                records.len(),
                summary(&records),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the receiver wrote on stderr (a Python traceback, if any).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("receiver.stderr")).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// One line per record (path, status, verified, webhook-id, error, the body's first 200
/// characters): for failure messages. At most the last 50 records.
pub fn summary(records: &[Value]) -> String {
    let skip = records.len().saturating_sub(50);
    records
        .iter()
        .skip(skip)
        .map(|r| {
            let body = r["body"].as_str().unwrap_or("");
            let body: String = body.chars().take(200).collect();
            format!(
                "{} {} verified={} id={} error={} body={body}",
                r["path"].as_str().unwrap_or("?"),
                r["status_answered"],
                r["verified"],
                r["headers"]["webhook-id"].as_str().unwrap_or("-"),
                r["error"],
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
