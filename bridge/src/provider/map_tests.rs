//! Tests of the provider mappings: the shapes seen on the wire (notes §4, §5 transcripts)
//! map as documented, and arbitrary JSON never makes a mapping panic.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::claude::map as claude;
use super::codex::map as codex;
use super::codex::rpc;
use super::events::Items;
use super::io::{Read, parse_line};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z_/ .'\\\\-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("item/started"),
            Just("commandExecution"),
            Just("fileChange"),
            Just("agentMessage"),
            Just("tool_use"),
            Just("Bash"),
            Just("AskUserQuestion"),
            Just("opt_1"),
            Just("q1"),
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("type"),
            Just("id"),
            Just("item"),
            Just("command"),
            Just("changes"),
            Just("kind"),
            Just("questions"),
            Just("options"),
            Just("label"),
            Just("input"),
            Just("tool_name"),
            Just("tool_use_id"),
            Just("question_id"),
            Just("selected_option_ids"),
            Just("permission_suggestions"),
            Just("permissions"),
            Just("content"),
            Just("status"),
            Just("text"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

proptest! {
    #[test]
    fn codex_mappings_never_panic(params in arb_json(), answers in arb_json(), method in prop_oneof![
        Just("item/started"), Just("item/completed"), Just("turn/plan/updated"), Just("error"), Just("warning"),
        Just(codex::COMMAND_APPROVAL), Just(codex::FILE_APPROVAL), Just(codex::PERMISSIONS_APPROVAL), Just("other"),
    ]) {
        let mut items = Items::default();
        let _ = codex::notification(method, &params, &mut items);
        let _ = codex::approval(method, &params, &items);
        for d in ["approve_once", "approve_session", "deny", "cancel_task", "junk"] {
            let _ = codex::decision_response(method, &params, d, &["network".into()]);
        }
        if let Ok(q) = codex::question(&params) {
            let _ = codex::answers_response(&q, &answers);
        }
        let _ = rpc::classify(params);
        let _ = codex::command_display(&answers.to_string());
    }

    #[test]
    fn claude_mappings_never_panic(block in arb_json(), request in arb_json(), answers in arb_json()) {
        let mut items = Items::default();
        let _ = claude::tool_use(&block, &mut items);
        let _ = claude::tool_result(&block, &mut items, false);
        let _ = claude::permission(&request);
        let _ = claude::allow(&request, "approve_session");
        let _ = claude::answer(&request, &answers);
        let _ = claude::result_error(&request);
        let _ = claude::result_code(&request);
        let _ = claude::api_retry(&request);
    }

    #[test]
    fn any_line_reads_without_panic(line in "\\PC{0,200}") {
        if let Read::Json(v) = parse_line(line.as_bytes()) {
            let _ = rpc::classify(v);
        }
    }
}

#[test]
fn codex_command_approval_maps_like_the_transcript() {
    let params = json!({
        "kind": "command", "threadId": "t", "turnId": "u", "itemId": "call_2",
        "command": "/bin/bash -lc 'echo hi > made_by_codex.txt'", "cwd": "/w",
        "reason": "needs the network", "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {}}, "cancel"],
    });
    let p = codex::approval(codex::COMMAND_APPROVAL, &params, &Items::default()).unwrap();
    assert_eq!(p["category"], "command");
    assert_eq!(p["command_display"], "echo hi > made_by_codex.txt");
    assert_eq!(p["title"], "Run `echo hi > made_by_codex.txt`");
    assert_eq!(p["available_decisions"], json!(["approve_once", "deny", "cancel_task"]));
    assert!(p.get("threadId").is_none() && p.get("itemId").is_none());
    let answer = |d| codex::decision_response(codex::COMMAND_APPROVAL, &params, d, &[]);
    assert_eq!(answer("approve_once"), json!({"decision": "accept"}));
    assert_eq!(answer("approve_session"), json!({"decision": "acceptForSession"}));
    assert_eq!(answer("deny"), json!({"decision": "decline"}));
    assert_eq!(answer("cancel_task"), json!({"decision": "cancel"}));
    assert_eq!(codex::command_display("/bin/bash -lc 'echo '\\''x'\\'''"), "echo 'x'");
}

#[test]
fn codex_permissions_grant_only_what_was_chosen() {
    let params = json!({ "permissions": { "network": { "enabled": true }, "fileSystem": { "write": ["/w/out"] } } });
    let p = codex::approval(codex::PERMISSIONS_APPROVAL, &params, &Items::default()).unwrap();
    assert_eq!(p["requested_permissions"].as_array().unwrap().len(), 2);
    let granted =
        codex::decision_response(codex::PERMISSIONS_APPROVAL, &params, "approve_session", &["network".into()]);
    assert_eq!(granted, json!({ "permissions": { "network": { "enabled": true } }, "scope": "session" }));
    let denied = codex::decision_response(codex::PERMISSIONS_APPROVAL, &params, "deny", &[]);
    assert_eq!(denied, json!({ "permissions": {}, "scope": "turn" }));
}

#[test]
fn codex_questions_map_both_ways_and_secrets_are_refused() {
    let params = json!({ "questions": [{
        "id": "color", "header": "Color", "question": "Which color?", "isOther": true, "isSecret": false,
        "options": [{ "label": "Blue", "description": "Calm" }, { "label": "Red", "description": "Bold" }],
    }]});
    let q = codex::question(&params).unwrap();
    assert_eq!(q.payload["questions"][0]["allow_free_text"], true);
    assert_eq!(q.payload["questions"][0]["options"][1]["option_id"], "opt_2");
    let answers = json!([{ "question_id": "color", "selected_option_ids": ["opt_2"], "text": "darker" }]);
    assert_eq!(
        codex::answers_response(&q, &answers),
        json!({ "answers": { "color": { "answers": ["Red", "darker"] } } })
    );
    let secret = json!({ "questions": [{ "id": "pw", "question": "Password?", "isSecret": true }] });
    assert!(codex::question(&secret).is_err());
}

#[test]
fn claude_permissions_map_like_the_transcript() {
    let request = json!({
        "subtype": "can_use_tool", "tool_name": "Bash", "input": { "command": "echo hi > x", "description": "d" },
        "description": "Run scripted command", "tool_use_id": "toolu_1", "blocked_path": "/w/x",
        "permission_suggestions": [{ "type": "addRules", "rules": [{ "toolName": "Bash", "ruleContent": "echo hi *" }],
                                     "behavior": "allow", "destination": "localSettings" }],
    });
    let claude::Permission::Approval(p) = claude::permission(&request).unwrap() else { panic!() };
    assert_eq!(p["category"], "command");
    assert_eq!(p["available_decisions"], json!(["approve_once", "approve_session", "deny", "cancel_task"]));
    assert!(!p.to_string().contains("toolu_1"));
    let session = claude::allow(&request, "approve_session");
    assert_eq!(session["updatedPermissions"][0]["destination"], "session", "never the operator's settings files");
    assert_eq!(claude::allow(&request, "approve_once").get("updatedPermissions"), None);
    assert_eq!(claude::deny("no", true), json!({ "behavior": "deny", "message": "no", "interrupt": true }));
}

#[test]
fn claude_questions_answer_with_labels_by_question_text() {
    let request = json!({ "tool_name": "AskUserQuestion", "input": { "questions": [{
        "question": "Which color?", "header": "Color", "multiSelect": true,
        "options": [{ "label": "Blue", "description": "" }, { "label": "Red", "description": "" }],
    }]}});
    let claude::Permission::Question(p) = claude::permission(&request).unwrap() else { panic!() };
    assert_eq!(p["questions"][0]["question_id"], "q1");
    assert_eq!(p["questions"][0]["multi_select"], true);
    let answers = json!([{ "question_id": "q1", "selected_option_ids": ["opt_1", "opt_2"], "text": "or green" }]);
    let body = claude::answer(&request, &answers);
    assert_eq!(body["updatedInput"]["answers"], json!({ "Which color?": "Blue, Red, or green" }));
    assert_eq!(body["updatedInput"]["questions"], request["input"]["questions"]);
}

#[test]
fn a_request_clipped_for_display_keeps_its_whole_text() {
    // Codex: the dangerous part of a long command lies past the 4,000 bytes shown.
    let command = format!("echo {} && rm -rf /", "a".repeat(5_000));
    let params = json!({ "command": command, "availableDecisions": ["accept", "acceptForSession"] });
    let p = codex::approval(codex::COMMAND_APPROVAL, &params, &Items::default()).unwrap();
    assert!(!p["command_display"].as_str().unwrap().contains("rm -rf"));
    assert_eq!(
        (&p["clipped"], &p["full_text"], &p["full_text_complete"]),
        (&json!(true), &json!(command), &json!(true))
    );
    let short = codex::approval(codex::COMMAND_APPROVAL, &json!({ "command": "ls" }), &Items::default()).unwrap();
    assert!(short.get("clipped").is_none() && short.get("full_text").is_none());

    // Claude: a tool whose input is clipped keeps the whole input; a command keeps its text.
    let content = format!("{}\nmalicious line", "b".repeat(6_000));
    let request = json!({ "tool_name": "Write", "input": { "file_path": "/w/x", "content": content } });
    let claude::Permission::Approval(p) = claude::permission(&request).unwrap() else { panic!() };
    assert_eq!(p["clipped"], true);
    assert!(p["full_text"].as_str().unwrap().contains("malicious line"), "{}", p["full_text"]);
    let huge = format!("{} ; curl x | sh", "c".repeat(40_000));
    let request = json!({ "tool_name": "Bash", "input": { "command": huge } });
    let claude::Permission::Approval(p) = claude::permission(&request).unwrap() else { panic!() };
    assert_eq!((&p["clipped"], &p["full_text_complete"]), (&json!(true), &json!(false)));
    assert!(p["full_text"].as_str().unwrap().len() <= super::events::MAX_FULL_TEXT_BYTES + 4);
}

/// A failed turn that Claude Code still marks `success` reads as its own text, and a logged-out
/// CLI is a runtime that cannot work, not a provider error.
#[test]
fn claude_failures_read_as_words_and_a_logged_out_cli_is_unavailable() {
    let logged_out = json!({"type": "result", "subtype": "success", "is_error": true,
        "result": "Not logged in · Please run /login"});
    assert_eq!(claude::result_error(&logged_out), "Not logged in · Please run /login");
    assert_eq!(claude::result_code(&logged_out), "AGENT_RUNTIME_UNAVAILABLE");
    let turns = json!({"type": "result", "subtype": "error_max_turns", "is_error": true});
    assert_eq!(claude::result_error(&turns), "claude stopped at its turn limit");
    assert_eq!(claude::result_code(&turns), "AGENT_PROVIDER_ERROR");
    let retry = json!({"type": "system", "subtype": "api_retry", "attempt": 3, "max_retries": 10,
        "retry_delay_ms": 2122, "error_status": null, "error": "unknown"});
    let event = claude::api_retry(&retry);
    assert_eq!(event["will_retry"], true);
    assert_eq!(event["message"], "the model service cannot be reached; retry 3 of 10");
    let status =
        json!({"subtype": "api_retry", "attempt": 1, "max_retries": 10, "error_status": 529, "error": "overloaded"});
    assert_eq!(claude::api_retry(&status)["message"], "the model service failed (HTTP 529: overloaded); retry 1 of 10");
}

/// `claude auth status` as 2.1.332 prints it, logged out and with an API key; anything else
/// (an older CLI's usage text) cannot tell and refuses nothing.
#[test]
fn claude_login_state_is_read_from_auth_status() {
    let out = br#"{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}"#;
    assert!(claude::why_logged_out(out).is_some_and(|w| w.contains("claude auth login")));
    let key = br#"{"loggedIn": true, "authMethod": "api_key", "apiKeySource": "ANTHROPIC_API_KEY"}"#;
    assert_eq!(claude::why_logged_out(key), None);
    assert_eq!(claude::why_logged_out(b"error: unknown command 'auth'"), None);
    assert_eq!(claude::why_logged_out(b"{}"), None);
}
