//! `agent-bridge plans …` and `agent-bridge board …`: socket calls on surface `cli` as the
//! local operator, who is the person the approval gate waits for.

use clap::Subcommand;
use serde_json::{Value, json};

use super::call::{Failure, call, listing, s, show};
use bridge_proto::client::Client;

/// `agent-bridge plans …`
#[derive(Debug, Subcommand)]
pub enum PlansCommand {
    /// List plans, those awaiting approval first.
    List {
        /// Only this state (e.g. pending_approval).
        #[arg(long)]
        status: Option<String>,
        /// Only this owner.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Show one plan, its provenance and its steps.
    Show {
        /// The plan id.
        id: String,
    },
    /// Approve a plan awaiting a human; its first step starts at once.
    Approve {
        /// The plan id.
        id: String,
    },
    /// Reject a plan awaiting a human; none of it runs.
    Reject {
        /// The plan id.
        id: String,
        /// Why (kept with the plan, shown to its owner).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Cancel a plan and the step it is running.
    Cancel {
        /// The plan id.
        id: String,
    },
    /// File a plan as the local operator (approved at once): one --step "TITLE=PROMPT" each.
    Submit {
        /// codex, claude or fake.
        #[arg(long)]
        runtime: String,
        /// The workdir alias.
        #[arg(long)]
        workdir: String,
        /// The plan's title.
        #[arg(long)]
        title: String,
        /// `TITLE=PROMPT`, in order (repeatable, 1 to 20).
        #[arg(long = "step", required = true)]
        steps: Vec<String>,
        /// review or workspace-write.
        #[arg(long)]
        profile: Option<String>,
        /// A directory relative to the workdir.
        #[arg(long)]
        path: Option<String>,
    },
}

/// `agent-bridge board …`
#[derive(Debug, Subcommand)]
pub enum BoardCommand {
    /// Print a new login token for the web board (only its hash is stored).
    Token {
        /// How long it can log in, in hours.
        #[arg(long, default_value_t = 24)]
        valid_hours: u32,
        /// A one-time login link instead: it logs one browser in and is used up (a restarted
        /// bridge forgets it).
        #[arg(long)]
        once: bool,
    },
    /// Revoke every board token and one-time login link and end every board session.
    Revoke,
}

/// A step's state as the operator reads it: `running, NEEDS YOU` while its task waits for a
/// person.
fn step_state(step: &Value) -> String {
    if step["attention"] == "needs_you" { format!("{}, NEEDS YOU", s(&step["status"])) } else { s(&step["status"]) }
}

fn describe_plan(v: &Value) -> String {
    let waiting = v["steps"].as_array().and_then(|l| l.iter().find(|st| st["attention"] == "needs_you"));
    let status = match waiting {
        Some(step) => format!(
            "{}, NEEDS YOU: step {}'s task waits for {} (agent-bridge tasks show {})",
            s(&v["status"]),
            s(&step["position"]),
            if step["task_status"] == "waiting_for_question" { "an answer" } else { "an approval" },
            s(&step["task_id"])
        ),
        None if v["awaiting_human"] == true => {
            format!("{}, NEEDS YOU: agent-bridge plans approve|reject {}", s(&v["status"]), s(&v["plan_id"]))
        }
        None => s(&v["status"]),
    };
    let mut lines = vec![
        format!("plan      {}  {}", s(&v["plan_id"]), s(&v["title"])),
        format!("status    {status}"),
        format!("created   by {} via {} at {}", s(&v["created_by"]), s(&v["created_surface"]), s(&v["created_at"])),
        format!("runs      {} in {} ({})", s(&v["runtime"]), s(&v["workdir"]), s(&v["profile"])),
    ];
    if !v["approved_by"].is_null() {
        lines.push(format!("approved  by {} at {}", s(&v["approved_by"]), s(&v["approved_at"])));
    }
    if !v["rejection"].is_null() {
        lines.push(format!("rejected  by {}: {}", s(&v["rejection"]["by"]), s(&v["rejection"]["reason"])));
    }
    if !v["error"].is_null() {
        lines.push(format!("error     {}: {}", s(&v["error"]["code"]), s(&v["error"]["message"])));
    }
    if waiting.is_none() && v["awaiting_human"] != true {
        lines.push(format!("          {}", s(&v["message"])));
    }
    for step in v["steps"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        lines.push(format!(
            "step {:>2}   {:<21} {:<36} {}",
            s(&step["position"]),
            step_state(step),
            s(&step["task_id"]),
            s(&step["title"])
        ));
    }
    lines.join("\n")
}

/// Runs a `plans` command.
pub(super) async fn plans(client: &Client, command: PlansCommand, json_mode: bool) -> Result<(), Failure> {
    match command {
        PlansCommand::List { status, owner } => {
            let v = call(client, "admin_list_plans", json!({ "status": status, "owner": owner, "limit": 200 })).await?;
            show(json_mode, &v, |v| {
                // A plan a person must act on says so beside its state.
                let mut rows = v["plans"].clone();
                for p in rows.as_array_mut().into_iter().flatten() {
                    if p["needs_human"] == true {
                        p["status"] = json!(format!("{}, NEEDS YOU", s(&p["status"])));
                    }
                }
                listing(
                    &rows,
                    &[
                        ("PLAN", "/plan_id"),
                        ("STATUS", "/status"),
                        ("CREATED BY", "/created_by"),
                        ("WORKDIR", "/workdir"),
                        ("CREATED", "/created_at"),
                        ("TITLE", "/title"),
                    ],
                )
            });
        }
        PlansCommand::Show { id } => {
            let v = call(client, "get_agent_plan", json!({ "plan_id": id })).await?;
            show(json_mode, &v, describe_plan);
        }
        PlansCommand::Approve { id } => {
            let v = call(client, "admin_approve_plan", json!({ "plan_id": id })).await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["plan_id"]), s(&v["status"])));
        }
        PlansCommand::Reject { id, reason } => {
            let v = call(client, "admin_reject_plan", json!({ "plan_id": id, "reason": reason })).await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["plan_id"]), s(&v["status"])));
        }
        PlansCommand::Cancel { id } => {
            let v = call(client, "cancel_agent_plan", json!({ "plan_id": id })).await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["plan_id"]), s(&v["status"])));
        }
        PlansCommand::Submit { runtime, workdir, title, steps, profile, path } => {
            let mut list = Vec::new();
            for step in &steps {
                let (t, p) = step
                    .split_once('=')
                    .ok_or_else(|| Failure::Usage(format!("--step takes TITLE=PROMPT, got {step:?}")))?;
                list.push(json!({ "title": t, "prompt": p }));
            }
            let v = call(
                client,
                "submit_agent_plan",
                json!({
                    "runtime": runtime, "workdir": workdir, "title": title, "steps": list,
                    "profile": profile, "path": path,
                }),
            )
            .await?;
            show(json_mode, &v, |v| format!("{} {}", s(&v["plan_id"]), s(&v["status"])));
        }
    }
    Ok(())
}

/// Runs a `board` command.
pub(super) async fn board(client: &Client, command: BoardCommand, json_mode: bool) -> Result<(), Failure> {
    match command {
        BoardCommand::Token { valid_hours, once } => {
            let v =
                call(client, "admin_create_board_token", json!({ "valid_hours": valid_hours, "once": once })).await?;
            show(json_mode, &v, |v| {
                let url = match v["login_link"].as_str() {
                    Some(link) => format!("\nlog in once at {link} (expires {})", s(&v["expires_at"])),
                    None => v["login_url"]
                        .as_str()
                        .map(|u| format!("\nlog in at {u} (expires {})", s(&v["expires_at"])))
                        .unwrap_or_default(),
                };
                let socket = v["board_socket"].as_str().map(|path| {
                    let page = if once { format!("login/{}", s(&v["token"])) } else { "login".to_owned() };
                    format!(
                        "\nthe board serves on the Unix socket {path} (expires {}): forward it with \
                         `ssh -L 8080:{path} HOST`, then log in at http://localhost:8080/{page}",
                        s(&v["expires_at"])
                    )
                });
                format!("{}{}", s(&v["token"]), socket.unwrap_or(url))
            });
        }
        BoardCommand::Revoke => {
            let v = call(client, "admin_revoke_board_tokens", json!({})).await?;
            show(json_mode, &v, |v| {
                format!("revoked {} board token(s); every board session is over", s(&v["revoked"]))
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_waiting_for_a_person_reads_needs_you() {
        let plan = json!({
            "plan_id": "pln_1", "title": "Tidy", "status": "running", "awaiting_human": false, "needs_human": true,
            "message": "Step 1 waits for a human: get_agent_task …",
            "steps": [
                { "position": 1, "status": "running", "attention": "needs_you", "task_status": "waiting_for_approval",
                  "task_id": "agt_1", "title": "Ask" },
                { "position": 2, "status": "pending", "attention": null, "task_id": null, "title": "Then" },
            ],
        });
        let out = describe_plan(&plan);
        assert!(
            out.contains(
                "status    running, NEEDS YOU: step 1's task waits for an approval (agent-bridge tasks show agt_1)"
            ),
            "{out}"
        );
        assert!(out.contains("step  1   running, NEEDS YOU    agt_1"), "{out}");
        assert!(!out.contains("get_agent_task"), "no text written for a calling model: {out}");
        let pending = json!({ "plan_id": "pln_2", "status": "pending_approval", "awaiting_human": true, "steps": [] });
        assert!(
            describe_plan(&pending).contains("pending_approval, NEEDS YOU: agent-bridge plans approve|reject pln_2")
        );
        let running = json!({ "plan_id": "pln_3", "status": "running", "message": "Step 1 runs", "steps": [
            { "position": 1, "status": "running", "attention": null, "task_id": "agt_3", "title": "Go" }] });
        let out = describe_plan(&running);
        assert!(!out.contains("NEEDS YOU") && out.contains("Step 1 runs"), "{out}");
    }
}
