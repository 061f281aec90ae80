//! Pins the capability catalog: every tool's name in `tools/list` order, and a digest of all
//! that is announced about it (input schema, description, annotations, scope, least role,
//! surfaces), so a refactoring of the tool tables provably changes nothing a client sees.

use sha2::{Digest, Sha256};

use super::{Capability, catalog};

/// `(name, digest)` of each capability, in order. Change it only with a deliberate change to
/// what a tool announces.
const PINNED: &[(&str, &str)] = &[
    ("whoami", "b0757287c9aa97271199c9f7"),
    ("list_workdirs", "fba719725e3154fb40d1786a"),
    ("list_agent_runtimes", "4f21c9d6aabe4f1317d78453"),
    ("list_agent_models", "42f30973092c9b027e923b30"),
    ("submit_agent_task", "6211e400eb47bac08c5dd7a2"),
    ("get_agent_task", "92ebe4b755efb7922885fa56"),
    ("read_agent_task_events", "6fa712cd6fdfd48cb53a498d"),
    ("read_agent_task_result", "b3370de8bfac9732a7a24a28"),
    ("read_agent_task_diff", "7e38aa2ff901552656821355"),
    ("respond_agent_approval", "bdbdd94402d9687b6dc4e634"),
    ("answer_agent_question", "09c8dcb9f14e9ef40571797b"),
    ("send_agent_message", "e079d69f8700da80439566c5"),
    ("cancel_agent_task", "9536ac25d5a106970926d1a7"),
    ("merge_agent_task", "199b6fbf133d6f28548b8f95"),
    ("discard_agent_task", "8eeec4db411d049c5c4a01a8"),
    ("admin_list_tasks", "74c0dcc4651509f6ae5b5ebd"),
    ("admin_read_audit_log", "049914d44ad97431709b70c7"),
    ("admin_workdir_status", "456113b2cbd44078a8d047dd"),
    ("admin_clear_guard", "31d7a747ac1ce6473e58d9de"),
    ("admin_create_api_key", "6fd7233444f293dfcc37e51f"),
    ("admin_list_api_keys", "367dcbfa69711e92e03a790e"),
    ("admin_revoke_api_key", "a234c819e3b9bd84844dc576"),
    ("submit_agent_plan", "eafa0d89c9ffb2d130d6bb89"),
    ("get_agent_plan", "f0dc2241736faecfac0bdfc6"),
    ("cancel_agent_plan", "d534987fb399aeaab7dfaedb"),
    ("admin_list_plans", "9004a5c6eb2f0a6bee5e677f"),
    ("admin_approve_plan", "99a56dac17a00089756b5c01"),
    ("admin_reject_plan", "5f002a55e00575127e2af18f"),
    ("admin_create_board_token", "ed9eba9eabdd90ebdfe9dda9"),
    ("admin_revoke_board_tokens", "b907338e5c889ff75786b05b"),
    ("admin_list_notifications", "31a73c829317b290d9ef599f"),
    ("admin_notify_test", "7e0f201ee6f3ce3b0c8e9f3a"),
];

fn digest(c: &Capability) -> String {
    let surfaces: Vec<&str> = c.meta.surfaces.iter().map(|s| s.as_str()).collect();
    let announced = format!("{}|{}", serde_json::to_string(&c.view()).expect("json"), surfaces.join(","));
    crate::ids::hex(&Sha256::digest(announced.as_bytes())[..12])
}

#[test]
fn the_catalog_is_unchanged() {
    let actual: Vec<(&str, String)> = catalog().iter().map(|c| (c.meta.name, digest(c))).collect();
    let pinned: Vec<(&str, String)> = PINNED.iter().map(|(n, d)| (*n, (*d).to_owned())).collect();
    let listing: String = actual.iter().map(|(n, d)| format!("    ({n:?}, {d:?}),\n")).collect();
    assert_eq!(actual, pinned, "the tool catalog changed; if that is deliberate, pin:\n{listing}");
}

#[test]
fn tool_names_are_unique() {
    let catalog = catalog();
    let mut names: Vec<&str> = catalog.iter().map(|c| c.meta.name).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "two capabilities share a name");
}
