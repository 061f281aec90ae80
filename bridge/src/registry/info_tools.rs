//! The informational capabilities: who the caller is, and which workdirs, runtimes and
//! models it may use.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::policy::{Annotations, Scope};
use super::shared::{NoArgs, RuntimeArg, meta, tasks};
use super::{CallCtx, Capability};
use crate::config::{AgentMode, Role, RuntimeName};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ModelsArgs {
    /// The runtime whose models to list.
    runtime: RuntimeArg,
}

/// The informational capabilities, in `tools/list` order.
pub(super) fn all() -> Vec<Capability> {
    vec![
        Capability::new(
            meta(
                "whoami",
                Scope::Read,
                Role::Viewer,
                "Shows who you are to this bridge: principal, role, surface and how many tools you can use.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let mut me = json!({
                    "principal": ctx.principal.name,
                    "role": ctx.principal.role.as_str(),
                    "surface": ctx.surface.as_str(),
                    "visible_tools": ctx.visible_tools,
                    "workdirs": ctx.principal.workdirs,
                });
                if let Some(display) = &ctx.principal.display {
                    me["display_name"] = json!(display);
                }
                Ok(me)
            },
        ),
        Capability::new(
            meta(
                "list_workdirs",
                Scope::Read,
                Role::Viewer,
                "Lists the work directories you may use, with their access, agent mode and allowed runtimes.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let workdirs: Vec<Value> = ctx
                    .services
                    .config
                    .workdirs
                    .iter()
                    .filter(|w| ctx.principal.may_use_workdir(&w.alias))
                    .map(|w| {
                        json!({
                            "alias": w.alias,
                            "description": w.description,
                            "access": if w.read_only { "read-only" } else { "read-write" },
                            "agent_mode": w.agent_mode.as_str(),
                            "runtimes": w.runtimes.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                Ok(json!({ "workdirs": workdirs }))
            },
        ),
        Capability::new(
            meta(
                "list_agent_runtimes",
                Scope::Read,
                Role::Viewer,
                "Lists the agent runtimes enabled on your workdirs, whether each is available now, its version and what it supports.",
                Annotations::READ,
            ),
            |ctx: CallCtx, _: NoArgs| async move {
                let mut enabled: Vec<RuntimeName> = ctx
                    .services
                    .config
                    .workdirs
                    .iter()
                    .filter(|w| w.agent_mode != AgentMode::Disabled && ctx.principal.may_use_workdir(&w.alias))
                    .flat_map(|w| w.runtimes.iter().copied())
                    .collect();
                enabled.sort();
                enabled.dedup();
                let mut runtimes = Vec::new();
                for r in enabled {
                    runtimes.push(tasks(&ctx).providers().probe(r).await.to_json());
                }
                let containment = tasks(&ctx).providers().containment().caller_json();
                for r in &mut runtimes {
                    r["containment"] = containment.clone();
                }
                Ok(json!({ "runtimes": runtimes, "containment": containment }))
            },
        ),
        Capability::new(
            meta(
                "list_agent_models",
                Scope::Read,
                Role::Viewer,
                "Lists the models a runtime offers (discovery only; it never starts the agent).",
                Annotations::READ,
            ),
            |ctx: CallCtx, args: ModelsArgs| async move { Ok(tasks(&ctx).providers().models(args.runtime.into()).await) },
        ),
    ]
}
