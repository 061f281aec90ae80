//! What callers do to a running task: answer its approval or question, steer it, cancel it.
//! Also the shape rules for interaction payloads and answers.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{Control, MAX_TEXT_BYTES, TaskService};
use crate::error::{ToolError, code};
use crate::model::{InteractionKind, InteractionStatus, Principal, TaskStatus};
use crate::store::events::NewEvent;
use crate::store::interactions::InteractionRow;
use crate::store::tasks::TransitionFields;

/// The decisions a caller may give an approval.
pub const DECISIONS: [&str; 4] = ["approve_once", "approve_session", "deny", "cancel_task"];

/// One answer to one question.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The question.
    pub question_id: String,
    /// Chosen options.
    pub selected_option_ids: Vec<String>,
    /// Free text, where allowed.
    pub text: Option<String>,
}

/// Checks and completes a provider's approval payload: an object with a `title`, a
/// `category`, and `available_decisions` drawn from [`DECISIONS`] (all but
/// `approve_session` when the provider gave none).
pub fn normalize_approval(payload: &mut Value) -> Result<(), String> {
    let map = payload.as_object_mut().ok_or("an approval must be an object")?;
    if !map.get("title").is_some_and(Value::is_string) {
        return Err("an approval needs a title".into());
    }
    if !map.contains_key("category") {
        map.insert("category".into(), json!("other"));
    }
    match map.get("available_decisions") {
        None => {
            map.insert("available_decisions".into(), json!(["approve_once", "deny", "cancel_task"]));
        }
        Some(Value::Array(list)) => {
            if list.is_empty() || !list.iter().all(|d| d.as_str().is_some_and(|d| DECISIONS.contains(&d))) {
                return Err("available_decisions must list known decisions".into());
            }
        }
        Some(_) => return Err("available_decisions must be a list".into()),
    }
    // What the approver sees is what is approved: a request clipped for display keeps its
    // whole text; one whose whole text could not be kept is never approved for the session.
    let clipped = map.get("clipped").and_then(Value::as_bool).unwrap_or(false);
    let complete = map.get("full_text_complete").and_then(Value::as_bool).unwrap_or(false)
        && map.get("full_text").is_some_and(Value::is_string);
    if clipped && !complete {
        map.insert("full_text_complete".into(), json!(false));
        if let Some(Value::Array(list)) = map.get_mut("available_decisions") {
            list.retain(|d| d.as_str() != Some("approve_session"));
            if list.is_empty() {
                return Err("available_decisions must list known decisions".into());
            }
        }
    }
    if let Some(perms) = map.get("requested_permissions") {
        let ok = perms
            .as_array()
            .is_some_and(|list| list.iter().all(|p| p.get("permission_id").is_some_and(Value::is_string)));
        if !ok {
            return Err("requested_permissions must be objects with a permission_id".into());
        }
    }
    Ok(())
}

/// Checks a provider's question payload: 1–10 questions with unique ids, each with unique
/// options and the two flags.
pub fn check_question(payload: &Value) -> Result<(), String> {
    let questions = payload.get("questions").and_then(Value::as_array).ok_or("a question needs a questions list")?;
    if questions.is_empty() || questions.len() > 10 {
        return Err("a question needs 1 to 10 questions".into());
    }
    let mut ids = HashSet::new();
    for q in questions {
        let id = q
            .get("question_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("each question needs a question_id")?;
        if !ids.insert(id) {
            return Err(format!("question id {id:?} appears twice"));
        }
        if !q.get("prompt").is_some_and(Value::is_string) {
            return Err(format!("question {id:?} needs a prompt"));
        }
        if !q.get("multi_select").is_some_and(Value::is_boolean)
            || !q.get("allow_free_text").is_some_and(Value::is_boolean)
        {
            return Err(format!("question {id:?} needs multi_select and allow_free_text"));
        }
        let options =
            q.get("options").and_then(Value::as_array).ok_or(format!("question {id:?} needs an options list"))?;
        let mut option_ids = HashSet::new();
        for o in options {
            let oid =
                o.get("option_id").and_then(Value::as_str).ok_or(format!("an option of {id:?} has no option_id"))?;
            if !option_ids.insert(oid) || !o.get("label").is_some_and(Value::is_string) {
                return Err(format!("option {oid:?} of {id:?} is duplicated or has no label"));
            }
        }
    }
    Ok(())
}

/// Checks answers against the question payload (the ServerFS rules): every question answered
/// once, known options only, one option unless multi-select, text only where free text is
/// allowed, and each answer selects something or gives text.
pub fn check_answers(payload: &Value, answers: &[Answer]) -> Result<(), ToolError> {
    let bad = |why: String| ToolError::new(code::INVALID_QUESTION_ANSWER, why);
    let questions = payload.get("questions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut seen = HashSet::new();
    for a in answers {
        let q = questions
            .iter()
            .find(|q| q.get("question_id").and_then(Value::as_str) == Some(a.question_id.as_str()))
            .ok_or_else(|| bad(format!("unknown question_id {:?}", a.question_id)))?;
        if !seen.insert(a.question_id.as_str()) {
            return Err(bad(format!("question {:?} is answered twice", a.question_id)));
        }
        let known: HashSet<&str> = q
            .get("options")
            .and_then(Value::as_array)
            .map(|o| o.iter().filter_map(|o| o.get("option_id").and_then(Value::as_str)).collect())
            .unwrap_or_default();
        let mut chosen = HashSet::new();
        for id in &a.selected_option_ids {
            if !known.contains(id.as_str()) {
                return Err(bad(format!("option {id:?} is not an option of question {:?}", a.question_id)));
            }
            if !chosen.insert(id.as_str()) {
                return Err(bad(format!("option {id:?} is selected twice")));
            }
        }
        if chosen.len() > 1 && q.get("multi_select") != Some(&Value::Bool(true)) {
            return Err(bad(format!("question {:?} takes one option", a.question_id)));
        }
        let has_text = a.text.as_deref().is_some_and(|t| !t.is_empty());
        if has_text && q.get("allow_free_text") != Some(&Value::Bool(true)) {
            return Err(bad(format!("question {:?} does not take free text", a.question_id)));
        }
        if chosen.is_empty() && !has_text {
            return Err(bad(format!("the answer to {:?} selects nothing and gives no text", a.question_id)));
        }
    }
    if let Some(missing) =
        questions.iter().filter_map(|q| q.get("question_id").and_then(Value::as_str)).find(|id| !seen.contains(id))
    {
        return Err(bad(format!("question {missing:?} is not answered")));
    }
    Ok(())
}

impl TaskService {
    async fn interaction(&self, task_id: &str, request_id: &str) -> Result<InteractionRow, ToolError> {
        let id = request_id.to_owned();
        let row = if crate::ids::looks_like(request_id, "req_") {
            self.inner.store.call(move |s| s.get_interaction(&id)).await?
        } else {
            None
        };
        let row = row
            .filter(|r| r.task_id == task_id)
            .ok_or_else(|| ToolError::new(code::REQUEST_NOT_FOUND, "no such request on this task"))?;
        match row.status {
            InteractionStatus::Resolved => {
                Err(ToolError::new(code::REQUEST_ALREADY_RESOLVED, "this request was already answered"))
            }
            InteractionStatus::Stale => {
                let reason = row
                    .resolution_json
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<Value>(r).ok())
                    .and_then(|r| r["stale_reason"].as_str().map(str::to_owned));
                Err(ToolError::new(
                    code::REQUEST_STALE,
                    match reason {
                        Some(why) => format!("this request can no longer be answered: {why}"),
                        None => "this request can no longer be answered".to_owned(),
                    },
                ))
            }
            InteractionStatus::Pending => Ok(row),
        }
    }

    fn control(&self, task_id: &str) -> Option<tokio::sync::mpsc::Sender<Control>> {
        self.inner.active.lock().ok()?.get(task_id).map(|a| a.control.clone())
    }

    /// `respond_agent_approval`.
    pub async fn respond_approval(
        &self,
        principal: &Principal,
        task_id: &str,
        request_id: &str,
        decision: &str,
        granted: Option<Vec<String>>,
    ) -> Result<Value, ToolError> {
        let task = self.inner.visible_task(principal, task_id).await?;
        let req = self.interaction(task_id, request_id).await?;
        let invalid = |why: String| ToolError::new(code::INVALID_APPROVAL_DECISION, why);
        if req.kind != InteractionKind::Approval {
            return Err(invalid("this request is a question; answer it with answer_agent_question".into()));
        }
        let payload: Value = serde_json::from_str(&req.payload_json).unwrap_or(Value::Null);
        let offered = payload.get("available_decisions").and_then(Value::as_array);
        if offered.is_some_and(|o| !o.iter().any(|d| d.as_str() == Some(decision))) {
            return Err(invalid(format!("decision {decision:?} is not offered for this request")));
        }
        let granted = granted.unwrap_or_default();
        if !granted.is_empty() {
            if !matches!(decision, "approve_once" | "approve_session") {
                return Err(invalid("only an approval can grant permissions".into()));
            }
            let requested: HashSet<&str> = payload
                .get("requested_permissions")
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(|p| p.get("permission_id").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            let mut seen = HashSet::new();
            for id in &granted {
                if !requested.contains(id.as_str()) {
                    return Err(ToolError::new(
                        code::PERMISSION_OUTSIDE_POLICY,
                        format!("permission {id:?} was not requested"),
                    ));
                }
                if !seen.insert(id) {
                    return Err(invalid(format!("permission {id:?} is listed twice")));
                }
            }
        }
        let resolution = json!({ "decision": decision, "granted_permission_ids": granted }).to_string();
        // Who decided, and on what: the task's timeline shows a denial with both.
        let title: Option<String> = payload.get("title").and_then(Value::as_str).map(|t| t.chars().take(300).collect());
        let event = NewEvent::new(
            "approval.resolved",
            json!({ "request_id": request_id, "decision": decision, "by": principal.name, "title": title }),
        );
        let (tid, rid, now) = (task_id.to_owned(), request_id.to_owned(), self.inner.clock.now_ms());
        self.inner
            .store
            .call(move |s| s.resolve_interaction(&tid, &rid, InteractionKind::Approval, &resolution, &event, now))
            .await?;
        self.inner.changes.notify(task_id);
        if decision == "cancel_task" {
            // The same path as cancel_agent_task; the runner tells the provider.
            let cancelled = self.cancel(principal, task_id).await?;
            return Ok(json!({
                "task_id": task_id, "request_id": request_id, "resolved": true, "decision": decision,
                "status": cancelled["status"], "correlation_id": task.correlation_id,
            }));
        }
        if let Some(control) = self.control(task_id) {
            let _ = control
                .send(Control::Approval {
                    request_id: request_id.to_owned(),
                    decision: decision.to_owned(),
                    granted_permission_ids: granted,
                })
                .await;
        }
        Ok(json!({
            "task_id": task_id, "request_id": request_id, "resolved": true, "decision": decision,
            "status": TaskStatus::Running.as_str(), "correlation_id": task.correlation_id,
        }))
    }

    /// `answer_agent_question`.
    pub async fn answer_question(
        &self,
        principal: &Principal,
        task_id: &str,
        request_id: &str,
        answers: Vec<Answer>,
    ) -> Result<Value, ToolError> {
        let task = self.inner.visible_task(principal, task_id).await?;
        let req = self.interaction(task_id, request_id).await?;
        if req.kind != InteractionKind::Question {
            return Err(ToolError::new(
                code::INVALID_QUESTION_ANSWER,
                "this request is an approval; answer it with respond_agent_approval",
            ));
        }
        let payload: Value = serde_json::from_str(&req.payload_json).unwrap_or(Value::Null);
        check_answers(&payload, &answers)?;
        let answers_json: Value = answers
            .iter()
            .map(|a| {
                let mut v = json!({ "question_id": a.question_id, "selected_option_ids": a.selected_option_ids });
                if let Some(t) = &a.text {
                    v["text"] = json!(t);
                }
                v
            })
            .collect();
        if answers_json.to_string().len() > MAX_TEXT_BYTES {
            return Err(ToolError::new(
                code::INVALID_QUESTION_ANSWER,
                format!("the answers are larger than {MAX_TEXT_BYTES} bytes"),
            ));
        }
        let resolution = json!({ "answers": answers_json }).to_string();
        let event =
            NewEvent::new("question.answered", json!({ "request_id": request_id, "question_count": answers.len() }));
        let (tid, rid, now) = (task_id.to_owned(), request_id.to_owned(), self.inner.clock.now_ms());
        self.inner
            .store
            .call(move |s| s.resolve_interaction(&tid, &rid, InteractionKind::Question, &resolution, &event, now))
            .await?;
        self.inner.changes.notify(task_id);
        if let Some(control) = self.control(task_id) {
            let _ = control.send(Control::Answers { request_id: request_id.to_owned(), answers: answers_json }).await;
        }
        Ok(json!({
            "task_id": task_id, "request_id": request_id, "resolved": true,
            "status": TaskStatus::Running.as_str(), "correlation_id": task.correlation_id,
        }))
    }

    /// `send_agent_message`: steers a running task, where the runtime supports it.
    pub async fn send_message(&self, principal: &Principal, task_id: &str, message: &str) -> Result<Value, ToolError> {
        if message.len() > MAX_TEXT_BYTES {
            return Err(ToolError::new(
                code::AGENT_MESSAGE_TOO_LARGE,
                format!("the message is larger than {MAX_TEXT_BYTES} bytes"),
            ));
        }
        if message.trim().is_empty() {
            return Err(ToolError::invalid("message", "must not be empty"));
        }
        let task = self.inner.visible_task(principal, task_id).await?;
        match task.status {
            s if s.is_terminal() => {
                return Err(ToolError::new(
                    code::AGENT_TASK_TERMINAL,
                    "the task has finished; submit a continuation instead",
                ));
            }
            s if s.is_waiting() => {
                return Err(ToolError::new(
                    code::AGENT_TASK_NOT_ACTIVE,
                    "the task waits for an answer to its pending request; answer it first",
                ));
            }
            TaskStatus::Queued | TaskStatus::Starting => {
                return Err(ToolError::new(
                    code::AGENT_TASK_NOT_ACTIVE,
                    "the task has not started yet; try again in a moment",
                ));
            }
            _ => {}
        }
        let runtime = self.inner.active.lock().ok().and_then(|a| a.get(task_id).map(|a| a.runtime));
        let Some(runtime) = runtime else {
            return Err(ToolError::new(code::AGENT_TASK_NOT_ACTIVE, "the task is not running in this bridge"));
        };
        if !self.inner.providers.probe(runtime).await.live_steer {
            return Err(ToolError::new(
                code::AGENT_PROVIDER_ERROR,
                format!("runtime {} cannot be steered while it works", runtime.as_str()),
            ));
        }
        let event = NewEvent::new("user.message", json!({ "bytes": message.len() }));
        let (tid, now) = (task_id.to_owned(), self.inner.clock.now_ms());
        self.inner.store.call(move |s| s.append_event(&tid, &event, None, now)).await?;
        if let Some(control) = self.control(task_id) {
            let _ = control.send(Control::Steer(message.to_owned())).await;
        }
        Ok(json!({ "task_id": task_id, "accepted": true, "correlation_id": task.correlation_id }))
    }

    /// `cancel_agent_task`: `cancelled` is persisted before this returns; the runner then
    /// interrupts the provider (bounded) and releases the lease after cleanup. Repeat-safe.
    pub async fn cancel(&self, principal: &Principal, task_id: &str) -> Result<Value, ToolError> {
        self.inner.visible_task(principal, task_id).await?;
        let _serial = self.inner.cancel_lock.lock().await;
        let now = self.inner.clock.now_ms();
        let fields = TransitionFields { event: Some(NewEvent::new("task.cancelled", json!({}))), ..Default::default() };
        let id = task_id.to_owned();
        let row = match self.inner.store.call(move |s| s.transition(&id, TaskStatus::Cancelled, fields, now)).await {
            Ok(row) => {
                self.inner.changes.notify(task_id);
                if let Some(active) =
                    self.inner.active.lock().ok().and_then(|a| a.get(task_id).map(|a| a.cancel.clone()))
                {
                    active.cancel();
                }
                row
            }
            Err(crate::store::StoreError::InvalidTransition { .. }) => {
                self.inner.visible_task(principal, task_id).await?
            }
            Err(e) => return Err(e.into()),
        };
        self.inner.collect_garbage().await;
        Ok(json!({ "task_id": task_id, "status": row.status.as_str(), "correlation_id": row.correlation_id }))
    }
}
