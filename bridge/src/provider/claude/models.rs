//! Claude Code's model catalog through its `list_models` control request: a short-lived
//! `claude -p` in the task sandbox answers the control `initialize` and then `list_models`
//! from its own settings and provider, without a prompt and so without inference.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::sync::mpsc;

use super::super::io::{self, Read};
use super::super::process::{SpawnSpec, spawn};
use super::super::tether::SpawnKind;
use super::ClaudeRuntime;

/// How long the listing child may take, from spawn to the answer.
const LIST_BOUND: Duration = Duration::from_secs(20);
/// The most models reported.
const MAX_MODELS: usize = 64;

/// The public shape of `list_models`'s answer (`{models: [{value, resolvedModel, displayName,
/// description, …}]}`), bounded; an answer without a model list is an error.
pub fn catalog(response: &Value) -> Result<Vec<Value>, String> {
    let list = response.get("models").and_then(Value::as_array).ok_or("the answer holds no model list")?;
    let models: Vec<Value> = list
        .iter()
        .filter_map(|m| {
            let id = m.get("value").and_then(Value::as_str).filter(|v| !v.is_empty())?;
            Some(json!({
                "id": io::clip(id, 200),
                "resolved_model": m.get("resolvedModel").and_then(Value::as_str).map(|r| io::clip(r, 200)),
                "display_name": m.get("displayName").and_then(Value::as_str).map(|d| io::clip(d, 200)),
                "description": m.get("description").and_then(Value::as_str).map(|d| io::clip(d, 500)),
                "is_default": id == "default",
                "reasoning_efforts": m.get("supportedEffortLevels").filter(|l| l.is_array()),
            }))
        })
        .take(MAX_MODELS)
        .collect();
    if models.is_empty() {
        return Err("the model list is empty".to_owned());
    }
    Ok(models)
}

impl ClaudeRuntime {
    /// Asks a listing child for the catalog; the child is stopped with proof either way.
    pub(super) async fn list(&self) -> Result<Vec<Value>, String> {
        let bin = self.bin.resolve().await.ok_or("claude is not installed")?;
        let cwd = self.home.clone().filter(|h| h.is_dir()).unwrap_or_else(|| std::path::PathBuf::from("/"));
        let marker = self.containment.helper_marker("models-claude");
        let env = self.env();
        let rules_env = env.clone();
        let home = super::super::env::runtime_home(&env, "CLAUDE_CONFIG_DIR", ".claude");
        if let Some(home) = &home {
            super::super::env::ensure_home(home).await;
        }
        let cwd = match &home {
            Some(home) if cwd == std::path::Path::new("/") => home.clone(),
            _ => cwd,
        };
        let spawned = spawn(SpawnSpec {
            program: bin,
            // A task's I/O settings, and never a prompt.
            args: super::BASE_ARGS.iter().map(Into::into).collect(),
            cwd,
            env,
            task_id: marker,
            sandbox: Some(self.containment.clone()),
            workdir: None,
            git: None,
            read: Vec::new(),
            write: home.into_iter().collect(),
            egress: Some(super::endpoints(&rules_env)),
            kind: SpawnKind::Probe,
            hold: None,
            beside: false,
        })
        .await
        .map_err(|e| format!("cannot start claude: {e}"))?;
        let (lines_tx, mut lines) = mpsc::channel(64);
        let (outbox, outbox_rx) = mpsc::unbounded_channel();
        let reader = io::spawn_reader(BufReader::new(spawned.stdout), lines_tx);
        let writer = io::spawn_writer(spawned.stdin, outbox_rx);
        let tail = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (drain, _) = io::spawn_stderr(spawned.stderr, std::sync::Arc::clone(&tail));
        let request = |id: &str, subtype: &str| {
            let mut body = json!({ "subtype": subtype });
            if subtype == "initialize" {
                body["hooks"] = Value::Null;
            }
            json!({ "type": "control_request", "request_id": id, "request": body })
        };
        let _ = outbox.send(request("models_init", "initialize"));
        let answer = tokio::time::timeout(LIST_BOUND, async {
            while let Some(line) = lines.recv().await {
                let Read::Json(msg) = line else { continue };
                let Some(response) = msg.get("response").filter(|_| msg["type"] == "control_response") else {
                    continue;
                };
                let ok = response.get("subtype").and_then(Value::as_str) == Some("success");
                match response.get("request_id").and_then(Value::as_str) {
                    Some("models_init") if ok => {
                        let _ = outbox.send(request("models_list", "list_models"));
                    }
                    Some("models_list") if ok => {
                        return catalog(response.get("response").unwrap_or(&Value::Null));
                    }
                    Some("models_init" | "models_list") => {
                        let why = response.get("error").and_then(Value::as_str).unwrap_or("no reason given");
                        return Err(format!("claude refused: {}", io::clip(why, 300)));
                    }
                    _ => {}
                }
            }
            Err("claude exited without answering".to_owned())
        })
        .await
        .unwrap_or_else(|_| Err(format!("claude did not answer within {} s", LIST_BOUND.as_secs())));
        drop(outbox);
        let proof = spawned.process.stop(Duration::from_secs(2), Duration::from_secs(2)).await;
        for task in [reader, writer, drain] {
            task.abort();
            let _ = task.await;
        }
        if !proof.proven() {
            tracing::warn!(?proof, "the claude model-listing child did not stop cleanly");
        }
        answer.map_err(|why| {
            let said = tail.lock().map(|s| s.clone()).unwrap_or_default();
            match said.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(last) => format!("{why}: {}", io::clip(last.trim(), 200)),
                None => why,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_bounded_and_refuses_what_is_not_a_list() {
        let answer = json!({ "models": [
            { "value": "default", "resolvedModel": "claude-x-1", "displayName": "Default", "description": "d" },
            { "value": "sonnet", "displayName": "Sonnet", "supportedEffortLevels": ["low", "high"] },
            { "value": "" }, { "displayName": "no value" }, "junk",
        ]});
        let models = catalog(&answer).unwrap();
        assert_eq!(models.len(), 2);
        assert_eq!(models[0]["id"], "default");
        assert_eq!(models[0]["is_default"], true);
        assert_eq!(models[0]["resolved_model"], "claude-x-1");
        assert_eq!(models[1]["reasoning_efforts"], json!(["low", "high"]));
        assert!(catalog(&json!({ "models": [] })).is_err());
        assert!(catalog(&json!({ "error": "x" })).is_err());
        let many: Vec<Value> = (0..100).map(|i| json!({ "value": format!("m{i}") })).collect();
        assert_eq!(catalog(&json!({ "models": many })).unwrap().len(), MAX_MODELS);
    }
}
