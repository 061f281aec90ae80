//! Calls to the test bridge over the real socket protocol: capabilities as the local operator
//! or on the MCP surface with a credential, keys, task submission, and waiting (by long poll)
//! for a task's state; plus the readers of a refusal's code.

use std::time::Duration;

use serde_json::{Map, Value, json};

use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, ListParams, Surface};

use crate::TestBridge;

impl TestBridge {
    /// A client with a generous timeout.
    pub fn client(&self) -> Client {
        Client::new(&self.socket, Duration::from_secs(60))
    }

    /// `bridge.health`.
    pub async fn health(&self) -> Result<Value, CallError> {
        Client::new(&self.socket, Duration::from_secs(5)).call(methods::BRIDGE_HEALTH, Map::new()).await
    }

    /// Calls a capability as the local operator (surface `cli`, no credential).
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, CallError> {
        self.call_on(Surface::Cli, None, name, args).await
    }

    /// Calls a capability on the MCP surface with a credential (`Bearer …`).
    pub async fn call_mcp(&self, key: Option<&str>, name: &str, args: Value) -> Result<Value, CallError> {
        let credential = key.map(|k| format!("Bearer {k}"));
        self.call_on(Surface::Mcp, credential.as_deref(), name, args).await
    }

    /// Calls a capability with an exact credential string on any surface.
    pub async fn call_on(
        &self,
        surface: Surface,
        credential: Option<&str>,
        name: &str,
        args: Value,
    ) -> Result<Value, CallError> {
        let Value::Object(arguments) = args else { panic!("arguments must be an object") };
        self.client().call(methods::CAPABILITIES_CALL, call_params(surface, credential, name, arguments)).await
    }

    /// Lists the capabilities visible with a credential on the MCP surface.
    pub async fn list_mcp(&self, key: Option<&str>) -> Result<Value, CallError> {
        let params = ListParams {
            credential: key.map(|k| format!("Bearer {k}")),
            surface: Surface::Mcp,
            path: Default::default(),
            client: None,
        };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_LIST, params).await
    }

    /// Lists the capabilities visible with an exact credential string on any surface.
    pub async fn list_on(&self, surface: Surface, credential: Option<&str>) -> Result<Value, CallError> {
        let params =
            ListParams { credential: credential.map(str::to_owned), surface, path: Default::default(), client: None };
        let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
        self.client().call(methods::CAPABILITIES_LIST, params).await
    }

    /// Creates an API key (for every workdir) and returns its secret.
    pub async fn create_key(&self, name: &str, role: &str) -> String {
        self.create_key_with(json!({ "name": name, "role": role })).await
    }

    /// Creates an API key restricted to `workdirs` (as the local operator) and returns its secret.
    pub async fn create_key_for(&self, name: &str, role: &str, workdirs: &[&str]) -> String {
        self.create_key_with(json!({ "name": name, "role": role, "workdirs": workdirs })).await
    }

    async fn create_key_with(&self, args: Value) -> String {
        let v = self.call("admin_create_api_key", args).await.expect("create key");
        v["secret"].as_str().expect("secret").to_owned()
    }

    /// Submits a fake task as the local operator and returns its id.
    pub async fn submit(&self, prompt: &str) -> String {
        let v = self
            .call("submit_agent_task", json!({ "runtime": "fake", "workdir": "repo", "prompt": prompt }))
            .await
            .expect("submit");
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// `submit_agent_task` with `runtime: fake, workdir: repo` unless `args` says otherwise.
    pub async fn submit_args(&self, args: Value) -> Result<Value, CallError> {
        let mut full = json!({ "runtime": "fake", "workdir": "repo" });
        let Value::Object(extra) = args else { panic!("submit arguments must be an object") };
        for (k, v) in extra {
            full[k] = v;
        }
        self.call("submit_agent_task", full).await
    }

    /// Submits and returns the new task id, panicking on refusal.
    pub async fn submit_ok(&self, args: Value) -> String {
        let v = self.submit_args(args.clone()).await.unwrap_or_else(|e| panic!("submit {args} failed: {e:?}"));
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// `get_agent_task` without waiting.
    pub async fn get(&self, task_id: &str) -> Value {
        self.call("get_agent_task", json!({ "task_id": task_id })).await.expect("get task")
    }

    /// Waits (by long-polling, never sleeping) until `done(task)` holds; panics after 30 s.
    ///
    /// A long poll returns early only when the task ends or its pending request differs from
    /// the one it had *when the poll began*, so each round first reads without waiting: a
    /// state reached just before a poll, or one no poll wakes on (`running`), is otherwise only
    /// seen when that poll times out.
    pub async fn wait_for(&self, task_id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let task = self.call("get_agent_task", json!({ "task_id": task_id })).await.expect("get task");
            if done(&task) {
                return task;
            }
            let task =
                self.call("get_agent_task", json!({ "task_id": task_id, "wait_seconds": 1 })).await.expect("get task");
            if done(&task) {
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {task_id} did not reach the expected state: {task:#}\n{}",
                self.log()
            );
        }
    }

    /// Waits until the task is terminal.
    pub async fn wait_terminal(&self, task_id: &str) -> Value {
        self.wait_for(task_id, |t| t["terminal"] == true).await
    }

    /// Waits until the task has `status`.
    pub async fn wait_status(&self, task_id: &str, status: &str) -> Value {
        self.wait_for(task_id, |t| t["status"] == status).await
    }

    /// Every event of a task, read page by page (500 a page).
    pub async fn all_events(&self, task_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = 0u64;
        loop {
            let page = self
                .call("read_agent_task_events", json!({ "task_id": task_id, "after_event_id": after, "limit": 500 }))
                .await
                .expect("read events");
            let events = page["events"].as_array().expect("events").clone();
            if events.is_empty() {
                return out;
            }
            after = page["next_after_event_id"].as_u64().expect("cursor");
            out.extend(events);
        }
    }
}

/// The params of a `capabilities.call` of `name` with `arguments` on `surface`, with an exact
/// credential string (or none: the local operator on the CLI surface).
pub fn call_params(
    surface: Surface,
    credential: Option<&str>,
    name: &str,
    arguments: Map<String, Value>,
) -> Map<String, Value> {
    let params = CallParams {
        credential: credential.map(str::to_owned),
        surface,
        path: Default::default(),
        client: None,
        name: name.to_owned(),
        arguments,
    };
    let Value::Object(params) = serde_json::to_value(params).expect("params") else { unreachable!() };
    params
}

/// The code and message of a call the bridge refused.
pub fn error_of(result: &Result<Value, CallError>) -> (String, String) {
    match result {
        Ok(v) => panic!("expected an error, got {v:#}"),
        Err(CallError::Remote { code, message }) => (code.clone(), message.clone()),
        Err(e) => panic!("expected a refusal from the bridge, got {e}"),
    }
}

/// The code of a failed call.
pub fn code(result: &Result<Value, CallError>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:#}"),
        Err(e) => e.code().to_owned(),
    }
}

/// The event types of a list of envelopes, in order.
pub fn event_types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["event_type"].as_str().unwrap_or_default().to_owned()).collect()
}
