//! `agent-bridge tasks …`: list, show, events, the whole result, submit, cancel, and the
//! answers to a task's pending approval or question, as socket calls on surface `cli`.

use clap::Subcommand;
use serde_json::{Value, json};

use super::call::{Failure, call, listing, s, show};
use bridge_proto::client::Client;

/// `agent-bridge tasks …`
#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List tasks, newest first.
    List {
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        /// Only this workdir.
        #[arg(long)]
        workdir: Option<String>,
        /// Only this runtime.
        #[arg(long)]
        runtime: Option<String>,
        /// Only this owner.
        #[arg(long)]
        owner: Option<String>,
        /// Only tasks created at or after this RFC 3339 instant.
        #[arg(long)]
        since: Option<String>,
        /// Only tasks created before this RFC 3339 instant.
        #[arg(long)]
        until: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Also print the usage totals over the whole filter, not just the listed tasks (a pass
        /// over every task the filter matches: with a year of history, most of the time).
        #[arg(long)]
        totals: bool,
    },
    /// Show one task.
    Show {
        /// The task id.
        id: String,
        /// Wait up to this many seconds for the task to end or for its pending approval or question
        /// to appear, be answered or change.
        #[arg(long, default_value_t = 0)]
        wait: u32,
        /// Show a pending request's whole text when its display was clipped.
        #[arg(long)]
        full_request: bool,
    },
    /// Print a task's events.
    Events {
        /// The task id.
        id: String,
        /// Start after this event id.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Print a task's full result.
    Result {
        /// The task id.
        id: String,
    },
    /// Print what a finished task changed, as a unified diff (`git apply` takes it).
    Diff {
        /// The task id.
        id: String,
        /// Only this file (relative to the workdir).
        #[arg(long)]
        path: Option<String>,
    },
    /// Submit a task as the local operator.
    Submit {
        /// codex, claude or fake.
        #[arg(long)]
        runtime: String,
        /// The workdir alias.
        #[arg(long)]
        workdir: String,
        /// The objective.
        #[arg(long)]
        prompt: String,
        /// A directory relative to the workdir.
        #[arg(long)]
        path: Option<String>,
        /// review or workspace-write.
        #[arg(long)]
        profile: Option<String>,
        /// A retry key.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Continue this finished task's session.
        #[arg(long)]
        continue_from: Option<String>,
        /// in_place or worktree (default: the workdir's setting).
        #[arg(long)]
        isolation: Option<String>,
        /// For a worktree task: the branch, tag or commit its branch starts from.
        #[arg(long)]
        base_ref: Option<String>,
    },
    /// Merge a finished worktree task's branch into the branch the workdir's checkout is on.
    Merge {
        /// The task id.
        id: String,
        /// ff_only (default), merge or squash.
        #[arg(long, default_value = "ff_only")]
        strategy: String,
    },
    /// Delete a finished worktree task's branch (its work is gone).
    Discard {
        /// The task id.
        id: String,
    },
    /// Cancel a task.
    Cancel {
        /// The task id.
        id: String,
    },
    /// Approve a pending approval request.
    Approve {
        /// The task id.
        id: String,
        /// The request id (default: the task's pending approval).
        request: Option<String>,
        /// Approve for the rest of the session instead of once.
        #[arg(long)]
        session: bool,
        /// Grant this requested permission (repeatable).
        #[arg(long = "grant")]
        grants: Vec<String>,
    },
    /// Deny a pending approval request.
    Deny {
        /// The task id.
        id: String,
        /// The request id (default: the task's pending approval).
        request: Option<String>,
    },
    /// Answer a pending question.
    Answer {
        /// The task id.
        id: String,
        /// The request id (default: the task's pending question).
        request: Option<String>,
        /// `QUESTION=OPTION[,OPTION]` (repeatable).
        #[arg(long = "select")]
        selects: Vec<String>,
        /// `QUESTION=free text` (repeatable).
        #[arg(long = "text")]
        texts: Vec<String>,
    },
}

pub(super) async fn tasks(client: &Client, command: TasksCommand, json_mode: bool) -> Result<(), Failure> {
    match command {
        TasksCommand::List { status, workdir, runtime, owner, since, until, limit, totals } => {
            let args = json!({
                "status": status, "workdir": workdir, "runtime": runtime, "owner": owner,
                "since": since, "until": until, "limit": limit, "totals": totals,
            });
            let v = call(client, "admin_list_tasks", args).await?;
            show(json_mode, &v, |v| {
                let mut out = listing(
                    &v["tasks"],
                    &[
                        ("TASK", "/task_id"),
                        ("STATUS", "/status"),
                        ("RUNTIME", "/runtime"),
                        ("WORKDIR", "/workdir"),
                        ("OWNER", "/owner"),
                        ("CREATED", "/created_at"),
                        ("MS", "/duration_ms"),
                        ("TOKENS", "/usage/total_tokens"),
                        ("USD", "/usage/cost_usd"),
                        ("TITLE", "/title"),
                        ("ERROR", "/error_code"),
                    ],
                );
                if !totals {
                    return out;
                }
                let t = &v["totals"]["overall"];
                out.push_str(&format!(
                    "\ntotal: {} tasks, {} input ({} cached) and {} output tokens, ${}, {} ms running, {} ms waiting for a human",
                    s(&t["tasks"]),
                    s(&t["input_tokens"]),
                    s(&t["cached_input_tokens"]),
                    s(&t["output_tokens"]),
                    s(&t["cost_usd"]),
                    s(&t["wall_ms"]),
                    s(&t["human_wait_ms"])
                ));
                out
            });
        }
        TasksCommand::Diff { id, path } => {
            let mut text = String::new();
            let mut offset = 0u64;
            loop {
                let args = json!({ "task_id": id, "path": path, "offset_bytes": offset });
                let chunk = call(client, "read_agent_task_diff", args).await?;
                text.push_str(chunk["text"].as_str().unwrap_or_default());
                offset = chunk["next_offset_bytes"].as_u64().unwrap_or(offset);
                if chunk["eof"].as_bool() != Some(false) {
                    break;
                }
            }
            let v = json!({ "task_id": id, "path": path, "text": text });
            show(json_mode, &v, |v| s(&v["text"]));
        }
        TasksCommand::Show { id, wait, full_request } => {
            let args = json!({ "task_id": id, "wait_seconds": wait, "full_request": full_request });
            let v = call(client, "get_agent_task", args).await?;
            show(json_mode, &v, describe_task);
        }
        TasksCommand::Events { id, after, limit } => {
            let v = call(
                client,
                "read_agent_task_events",
                json!({ "task_id": id, "after_event_id": after, "limit": limit }),
            )
            .await?;
            show(json_mode, &v, |v| {
                v["events"]
                    .as_array()
                    .map(|events| {
                        events
                            .iter()
                            .map(|e| {
                                format!(
                                    "{:>6}  {}  {}  {}",
                                    s(&e["event_id"]),
                                    s(&e["created_at"]),
                                    s(&e["event_type"]),
                                    e["payload"]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default()
            });
        }
        TasksCommand::Result { id } => {
            let task = call(client, "get_agent_task", json!({ "task_id": id })).await?;
            let text = if task["result"]["storage"] == "spool" {
                let mut text = String::new();
                let mut offset = 0u64;
                loop {
                    let chunk =
                        call(client, "read_agent_task_result", json!({ "task_id": id, "offset_bytes": offset }))
                            .await?;
                    text.push_str(chunk["text"].as_str().unwrap_or_default());
                    offset = chunk["next_offset_bytes"].as_u64().unwrap_or(offset);
                    if chunk["eof"].as_bool() != Some(false) {
                        break;
                    }
                }
                text
            } else {
                task["final_response"].as_str().unwrap_or_default().to_owned()
            };
            let v = json!({ "task_id": id, "text": text });
            show(json_mode, &v, |v| s(&v["text"]));
        }
        TasksCommand::Submit {
            runtime,
            workdir,
            prompt,
            path,
            profile,
            idempotency_key,
            continue_from,
            isolation,
            base_ref,
        } => {
            let v = call(
                client,
                "submit_agent_task",
                json!({
                    "runtime": runtime, "workdir": workdir, "prompt": prompt, "path": path, "profile": profile,
                    "idempotency_key": idempotency_key, "continue_from_task_id": continue_from,
                    "isolation": isolation, "base_ref": base_ref,
                }),
            )
            .await?;
            show(json_mode, &v, |v| s(&v["task_id"]));
        }
        TasksCommand::Merge { id, strategy } => {
            let v = call(client, "merge_agent_task", json!({ "task_id": id, "strategy": strategy })).await?;
            show(json_mode, &v, |v| {
                let what = if v["already_merged"] == json!(true) { "was already merged" } else { "merged" };
                format!("{} {what}: {}", s(&v["branch"]), s(&v["merged_commit"]))
            });
        }
        TasksCommand::Discard { id } => {
            let v = call(client, "discard_agent_task", json!({ "task_id": id })).await?;
            show(json_mode, &v, |v| format!("{} discarded", s(&v["branch"])));
        }
        TasksCommand::Cancel { id } => {
            let v = call(client, "cancel_agent_task", json!({ "task_id": id })).await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["task_id"]), s(&v["status"])));
        }
        TasksCommand::Approve { id, request, session, grants } => {
            let request = match request {
                Some(request) => request,
                None => super::pending::request_id(client, &id, "approval").await?,
            };
            let decision = if session { "approve_session" } else { "approve_once" };
            let grants = if grants.is_empty() { Value::Null } else { json!(grants) };
            let v = call(
                client,
                "respond_agent_approval",
                json!({ "task_id": id, "request_id": request, "decision": decision, "granted_permission_ids": grants }),
            )
            .await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["request_id"]), s(&v["decision"])));
        }
        TasksCommand::Deny { id, request } => {
            let request = match request {
                Some(request) => request,
                None => super::pending::request_id(client, &id, "approval").await?,
            };
            let v = call(
                client,
                "respond_agent_approval",
                json!({ "task_id": id, "request_id": request, "decision": "deny" }),
            )
            .await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["request_id"]), s(&v["decision"])));
        }
        TasksCommand::Answer { id, request, selects, texts } => {
            let answers = build_answers(&selects, &texts).map_err(Failure::Usage)?;
            let request = match request {
                Some(request) => request,
                None => super::pending::request_id(client, &id, "question").await?,
            };
            let v = call(
                client,
                "answer_agent_question",
                json!({ "task_id": id, "request_id": request, "answers": answers }),
            )
            .await?;
            show(json_mode, &v, |v| format!("{} answered", s(&v["request_id"])));
        }
    }
    Ok(())
}

/// Builds `answers[]` from `--select Q=A,B` and `--text Q=…` flags.
fn build_answers(selects: &[String], texts: &[String]) -> Result<Value, String> {
    let mut order: Vec<String> = Vec::new();
    let mut answers: std::collections::HashMap<String, (Vec<String>, Option<String>)> = Default::default();
    for (flag, items, is_text) in [("--select", selects, false), ("--text", texts, true)] {
        for item in items {
            let (q, rest) = item.split_once('=').ok_or(format!("{flag} takes QUESTION=VALUE, got {item:?}"))?;
            if !answers.contains_key(q) {
                order.push(q.to_owned());
            }
            let entry = answers.entry(q.to_owned()).or_default();
            if is_text {
                entry.1 = Some(rest.to_owned());
            } else {
                entry.0.extend(rest.split(',').filter(|o| !o.is_empty()).map(str::to_owned));
            }
        }
    }
    if order.is_empty() {
        return Err("give at least one --select or --text".into());
    }
    Ok(Value::Array(
        order
            .iter()
            .map(|q| {
                let (sel, text) = &answers[q];
                json!({ "question_id": q, "selected_option_ids": sel, "text": text })
            })
            .collect(),
    ))
}

fn describe_task(v: &Value) -> String {
    let mut lines = vec![
        format!("task      {}", s(&v["task_id"])),
        format!("status    {}", s(&v["status"])),
        format!(
            "runtime   {} in {} ({}) path {:?}",
            s(&v["runtime"]),
            s(&v["workdir"]),
            s(&v["profile"]),
            s(&v["path"])
        ),
        format!("owner     {}", s(&v["owner"])),
        format!("created   {}  deadline {}", s(&v["created_at"]), s(&v["deadline_at"])),
    ];
    if !v["error"].is_null() {
        lines.push(format!("error     {}: {}", s(&v["error"]["code"]), s(&v["error"]["message"])));
    }
    let pending = &v["pending_request"];
    if !pending.is_null() {
        lines.extend(super::pending::describe(&s(&v["task_id"]), pending));
        let whole = pending["payload"].get("full_text");
        if pending["payload"]["clipped"] == true {
            match whole.and_then(Value::as_str) {
                Some(text) => {
                    let note = if pending["payload"]["full_text_complete"] == true {
                        "clipped for display; the whole request:"
                    } else {
                        "clipped for display, and too long to keep whole (no approve_session); its start:"
                    };
                    lines.push(format!("          {note}"));
                    lines.extend(text.lines().map(|l| format!("          | {l}")));
                }
                None => lines.push("          clipped for display: see it whole with --full-request".to_owned()),
            }
        }
    }
    if let Some(u) = v["usage"].as_object() {
        lines.push(format!(
            "usage     {} input ({} cached), {} output tokens, cost ${} ({})",
            s(&u["input_tokens"]),
            s(&u["cached_input_tokens"]),
            s(&u["output_tokens"]),
            s(&u["cost_usd"]),
            s(&u["model"])
        ));
    }
    lines.push(format!(
        "time      {} ms, of which {} ms waiting for a human",
        s(&v["timing"]["wall_ms"]),
        s(&v["timing"]["human_wait_ms"])
    ));
    let changes = &v["changes"];
    if changes["status"] == "recorded" {
        lines.push(format!(
            "changes   {} files, +{} -{}{}",
            s(&changes["files_changed"]),
            s(&changes["added"]),
            s(&changes["removed"]),
            if changes["truncated"] == true { " (diff truncated)" } else { "" }
        ));
        for f in changes["files"].as_array().map(Vec::as_slice).unwrap_or_default() {
            lines.push(format!(
                "          {:<8} +{} -{}  {}",
                s(&f["status"]),
                s(&f["added"]),
                s(&f["removed"]),
                s(&f["path"])
            ));
        }
    } else if changes["status"] == "read_only" {
        lines.push("changes   none (a read-only task)".to_owned());
    } else if !changes.is_null() {
        lines.push(format!("changes   not recorded: {}", s(&changes["reason"])));
    }
    if !v["final_response"].is_null() {
        lines.push(format!("result    {}", s(&v["final_response"])));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_built_from_flags() {
        let v = build_answers(&["q1=yes".into(), "q2=a,b".into()], &["q1=because".into()]).unwrap();
        assert_eq!(
            v,
            json!([
                {"question_id": "q1", "selected_option_ids": ["yes"], "text": "because"},
                {"question_id": "q2", "selected_option_ids": ["a", "b"], "text": null},
            ])
        );
        assert!(build_answers(&["nope".into()], &[]).is_err());
        assert!(build_answers(&[], &[]).is_err());
    }
}
