//! The check of every answer in `calls`: cheap for all (the status, the asked task's id found in
//! the bytes, a fixed reply or an echo compared whole), and a full parse of one in
//! [`FULL_EVERY`] (the JSON-RPC id, `isError: false`, the structured task's id; or the
//! envelope's `request_id`, `ok` and the task's id). A bad answer fails the run, shown.

use serde_json::Value;

use crate::wire::{Call, find};

/// One answer in this many is parsed whole.
pub const FULL_EVERY: usize = 16;

/// What an answer must be.
#[derive(Debug, Clone)]
pub enum Expect {
    /// An MCP `tools/call` result over HTTP: 200, the JSON-RPC id, `isError: false`,
    /// `structuredContent.task_id` the asked task.
    McpTask,
    /// HTTP 200 with exactly this body (the HTTP floor).
    Fixed(Vec<u8>),
    /// The bridge's `{request_id, ok: true, result}` line whose `result.task_id` is the asked task.
    Envelope,
    /// The line sent, back (the UDS floor).
    Echo,
}

/// Checks the answer to `call`; `full` parses it whole. `Err` shows what was wrong.
pub fn check(expect: &Expect, call: &Call, status: Option<u16>, body: &[u8], full: bool) -> Result<(), String> {
    let bad = |what: &str| {
        let shown: String = String::from_utf8_lossy(body).chars().take(600).collect();
        Err(format!("a bad answer to call {} ({}): {what}; the answer: {shown}", call.id, call.task_id))
    };
    if let Some(status) = status
        && status != 200
    {
        return bad(&format!("HTTP {status}"));
    }
    match expect {
        Expect::Fixed(fixed) => return if body == fixed.as_slice() { Ok(()) } else { bad("not the fixed reply") },
        Expect::Echo => return if body == call.wire.as_slice() { Ok(()) } else { bad("not the line sent") },
        Expect::McpTask | Expect::Envelope => {}
    }
    if find(body, call.task_id.as_bytes()).is_none() {
        return bad("the asked task's id is not in it");
    }
    if !full {
        return Ok(());
    }
    let Ok(message) = serde_json::from_slice::<Value>(body) else { return bad("not JSON") };
    match expect {
        Expect::McpTask => {
            if message["jsonrpc"] != "2.0" || message["id"].as_u64() != Some(call.id) {
                return bad("not the JSON-RPC 2.0 answer to this id");
            }
            let result = &message["result"];
            if result["isError"] != Value::Bool(false) {
                return bad("not a result with isError false");
            }
            if result["structuredContent"]["task_id"].as_str() != Some(&call.task_id) {
                return bad("structuredContent.task_id is not the asked task");
            }
        }
        Expect::Envelope => {
            if message["request_id"].as_str() != Some(&call.id.to_string()) || message["ok"] != Value::Bool(true) {
                return bad("not a successful envelope answering this request_id");
            }
            if message["result"]["task_id"].as_str() != Some(&call.task_id) {
                return bad("result.task_id is not the asked task");
            }
        }
        Expect::Fixed(_) | Expect::Echo => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::{mcp_call, socket_call};

    fn mcp_answer(id: u64, task: &str, is_error: bool) -> Vec<u8> {
        let view = json!({ "task_id": task, "status": "succeeded" });
        json!({ "jsonrpc": "2.0", "id": id, "result": {
            "content": [{ "type": "text", "text": view.to_string() }], "structuredContent": view, "isError": is_error } })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_good_mcp_answer_passes_and_each_fault_fails() {
        let call = mcp_call(5, "127.0.0.1:9".parse().expect("addr"), None);
        let good = mcp_answer(5, &call.task_id, false);
        assert!(check(&Expect::McpTask, &call, Some(200), &good, true).is_ok());
        assert!(check(&Expect::McpTask, &call, Some(500), &good, false).is_err());
        assert!(check(&Expect::McpTask, &call, Some(200), &mcp_answer(6, &call.task_id, false), true).is_err());
        assert!(check(&Expect::McpTask, &call, Some(200), &mcp_answer(5, &call.task_id, true), true).is_err());
        let other = mcp_answer(5, "agt_ffff", false);
        assert!(check(&Expect::McpTask, &call, Some(200), &other, false).is_err(), "the cheap check sees another task");
    }

    #[test]
    fn envelopes_echoes_and_fixed_replies() {
        let call = socket_call(3, "Bearer k");
        let ok = json!({ "request_id": "3", "ok": true, "result": { "task_id": call.task_id } }).to_string();
        assert!(check(&Expect::Envelope, &call, None, ok.as_bytes(), true).is_ok());
        let refused = json!({ "request_id": "3", "ok": false, "error": { "code": "X", "message": call.task_id } });
        assert!(check(&Expect::Envelope, &call, None, refused.to_string().as_bytes(), true).is_err());
        assert!(check(&Expect::Echo, &call, None, &call.wire, false).is_ok());
        assert!(check(&Expect::Echo, &call, None, b"{}\n", false).is_err());
        let fixed = Expect::Fixed(b"{}".to_vec());
        assert!(check(&fixed, &call, Some(200), b"{}", false).is_ok());
        assert!(check(&fixed, &call, Some(200), b"{ }", false).is_err());
    }
}
