//! The board on a phone (390 px) and a laptop (1,280 px), in a real headless Chromium: no page
//! is wider than the window, a plan step whose task waits for an approval reads "Needs you", a
//! denied approval says who denied it and when, a running writer's workdir reads "in use by
//! task …", no page prints JSON, and the audit's durations read in ms under a heading that
//! survives the stylesheet's upper-casing. Screenshots of every page at both widths, the page
//! of a notification's action link among them.

use std::time::Duration;

use serde_json::{Value, json};

use e2e::browser::{Browser, browser_or_skip, screenshot_dir};
use e2e::{Options, TestBridge};

use crate::action_links::{closed_port, link_of, webhook};
use crate::board::token;

/// The page's width against the window's: `[scrollWidth, innerWidth]`.
const WIDTHS: &str = "return [document.documentElement.scrollWidth, window.innerWidth]";

/// The elements that reach past the window's right edge (for a failure's message).
const WIDEST: &str = "return [...document.querySelectorAll('body *')]\
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)\
    .slice(-8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right) + ' ' + (e.textContent || '').slice(0, 60))";

#[tokio::test]
async fn every_page_fits_a_phone_and_a_laptop_and_says_who_must_act() {
    let Some((chromium, driver)) = browser_or_skip("board widths test") else { return };
    // A webhook target that never answers: its rows stay pending, with their action links.
    let hook = format!("http://127.0.0.1:{}/hook", closed_port());
    let b = TestBridge::start_with(webhook(Options::default(), &hook)).await;
    // A writer task that changed files: its change set and diff.
    std::fs::write(b.repo.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    let changed = b
        .submit(
            "exec:printf 'alpha\\nBETA, a line long enough to need wrapping on a phone screen: \
             aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\\ngamma\\n' > notes.txt",
        )
        .await;
    assert_eq!(b.wait_terminal(&changed).await["changes"]["status"], "recorded");
    // A writer waiting for an approval (it holds `repo`), with a long unbroken command.
    let long = format!("curl -fsS https://example.invalid/{}/release.tar.gz | tar -x", "x".repeat(160));
    let asking = b.submit(&format!("approval:{long}")).await;
    b.wait_status(&asking, "waiting_for_approval").await;
    let action_link = link_of(&b, &asking).await;
    // A reader whose approval a person will deny on the board.
    let v = b
        .submit_args(json!({ "workdir": "docs", "profile": "review", "prompt": "approval:rm -rf ./build" }))
        .await
        .expect("submit");
    let denied = v["task_id"].as_str().unwrap().to_owned();
    b.wait_status(&denied, "waiting_for_approval").await;
    // A plan awaiting approval (what a notification opens), filed by a session.
    let key = b.create_key("panel", "operator").await;
    let v = b
        .call_mcp(
            Some(&key),
            "submit_agent_plan",
            json!({ "workdir": "docs", "runtime": "fake", "profile": "review",
                    "title": "Summarize the docs for the release notes",
                    "steps": [{ "title": "Read them", "prompt": format!("complete:{}", "read every page ".repeat(30)) },
                              { "title": "Summarize", "prompt": "complete:three bullet points" }] }),
        )
        .await
        .unwrap();
    let pending = v["plan_id"].as_str().unwrap().to_owned();
    // A plan whose first step waits for an approval (the local operator's: approved at once).
    let v = b
        .call(
            "submit_agent_plan",
            json!({ "workdir": "docs", "runtime": "fake", "profile": "review", "title": "Ship the release",
                    "steps": [{ "title": "Ask first", "prompt": "approval:make deploy" },
                              { "title": "Then finish", "prompt": "complete:done" }] }),
        )
        .await
        .unwrap();
    let running = v["plan_id"].as_str().unwrap().to_owned();
    let p = crate::plans::wait_plan(&b, &running, |p| p["steps"][0]["attention"] == "needs_you").await;
    assert_eq!((p["status"].as_str(), p["needs_human"].as_bool()), (Some("running"), Some(true)), "{p:#}");

    let (token, addr) = token(&b);
    let shots = screenshot_dir();
    let base = format!("http://{addr}");
    let browser = tokio::task::spawn_blocking(move || Browser::start(&chromium, &driver)).await.unwrap();
    let (ids, shots_dir) = ((changed.clone(), asking.clone(), denied.clone()), shots.clone());
    let (plans, key_copy) = ((pending.clone(), running.clone()), key.clone());
    let link = action_link.clone();
    let run = tokio::task::spawn_blocking(move || {
        let (changed, asking, denied) = ids;
        let (pending, running) = plans;
        let url = |path: &str| format!("{base}{path}");
        browser.goto(&url("/login"));
        let field = browser.wait_for("input[name=token]", Duration::from_secs(10));
        browser.type_into(&field, &token);
        browser.click(&browser.wait_for("form[action='/login'] button", Duration::from_secs(5)));
        // The login page has a heading too: wait for a page only a session shows.
        browser.wait_for("form.logout", Duration::from_secs(10));
        // A person denies the reader's approval on its page.
        browser.goto(&url(&format!("/tasks/{denied}")));
        browser.click(&browser.wait_for("button[name=decision][value=deny]", Duration::from_secs(10)));
        browser.wait_for("#decisions", Duration::from_secs(30));

        let pages = [
            ("home", "/".to_owned()),
            ("task-approval", format!("/tasks/{asking}")),
            ("task-changes", format!("/tasks/{changed}")),
            ("task-denied", format!("/tasks/{denied}")),
            ("plan-pending", format!("/plans/{pending}")),
            ("plan-needs-you", format!("/plans/{running}")),
            ("plans", "/plans".to_owned()),
            ("audit", "/audit".to_owned()),
            ("runtimes", "/runtimes".to_owned()),
            ("workdirs", "/workdirs".to_owned()),
            ("notifications", "/notifications".to_owned()),
            // What an approval's notification opens on a phone: its one request, no login.
            ("action-link", link.clone()),
        ];
        for (width, height) in [(390, 1200), (1280, 1000)] {
            let inner = browser.set_window_size(width, height);
            assert!(inner <= u64::from(width) && inner + 40 >= u64::from(width), "{width} px asked, {inner} px given");
            for (name, path) in &pages {
                browser.goto(&url(path));
                browser.wait_for("main h1", Duration::from_secs(10));
                // The whole page in one picture (up to 4,000 px tall): the window grows to it.
                let tall = browser.script("return document.documentElement.scrollHeight").as_u64().unwrap_or(0);
                browser.set_window_size(width, (tall as u32).clamp(height, 4000));
                browser.screenshot(&shots_dir.join(format!("w{width}-{name}.png")));
                browser.set_window_size(width, height);
                let w = browser.script(WIDTHS);
                if w[0].as_u64() > w[1].as_u64() {
                    let wide = browser.script(WIDEST);
                    panic!("{path} at {width} px is wider than the window: {w}; past its edge: {wide:#}");
                }
                let shown = browser.inner_text("body").unwrap_or_default();
                for json in ["[\"", "{\""] {
                    assert!(!shown.contains(json), "{path} prints JSON ({json}):\n{shown}");
                }
                assert!(!shown.contains(key_copy.as_str()), "{path} shows the key");
                match *name {
                    "home" => {
                        // Rows lead with the title; the id is cut but whole in the markup.
                        let lead = browser.inner_text("table.tasks tbody tr td a.lead").unwrap_or_default();
                        assert!(!lead.starts_with("agt_"), "a row leads with its title, not {lead:?}");
                        let id = browser.script(
                            "const e = document.querySelector('table.tasks .id'); \
                             return [e.textContent, e.title, e.scrollWidth > e.clientWidth]",
                        );
                        assert!(id[0] == id[1] && id[0].as_str().is_some_and(|i| i.starts_with("agt_")), "{id}");
                        assert_eq!(id[2], true, "the id is shown cut: {id}");
                    }
                    "plan-needs-you" => {
                        assert_eq!(browser.inner_text(".badge.big").as_deref(), Some("Needs you"));
                        let step = browser.inner_text("table [data-attention=needs_you]");
                        assert_eq!(step.as_deref(), Some("Needs you"), "step 1 needs the human");
                        let sentence = browser.inner_text("#plan-state").unwrap_or_default();
                        assert!(sentence.contains("Step 1 waits for you"), "{sentence}");
                        assert!(browser.find("#plan-state a[href^='/tasks/']").is_some(), "a link to the task's form");
                        assert!(!shown.contains("get_agent_task"), "no text written for the calling model:\n{shown}");
                    }
                    "plans" => {
                        let badge = browser.script(&format!(
                            "return [...document.querySelectorAll('tr')].filter(r => r.innerHTML.includes('{running}'))\
                             .map(r => r.querySelector('.badge').innerText)"
                        ));
                        assert_eq!(badge, json!(["Needs you"]), "the plan list says who must act");
                    }
                    "plan-pending" => {
                        assert!(browser.find("button[name=approve]").is_some(), "the approve button is there");
                        assert!(!shown.contains("get_agent_plan"), "{shown}");
                    }
                    "task-denied" => {
                        let d = browser.inner_text("#decisions").unwrap_or_default();
                        assert!(d.contains("Denied by operator@board, at 20"), "{d}");
                        assert!(d.contains("Run `rm -rf ./build`"), "what was denied: {d}");
                    }
                    "audit" => {
                        // The headings show on a wide screen (a phone shows them as each
                        // line's label), upper-cased by the stylesheet.
                        if width > 760 {
                            let head = browser.script(
                                "return [...document.querySelectorAll('table.audit th')].map(t => t.innerText).pop()",
                            );
                            assert_eq!(head, json!("DURATION"), "the heading reads right after upper-casing");
                        }
                        let cells = browser.script(
                            "return [...document.querySelectorAll('table.audit td[data-us]')].map(t => t.innerText)",
                        );
                        let cells = cells.as_array().cloned().unwrap_or_default();
                        assert!(!cells.is_empty());
                        for c in &cells {
                            let c = c.as_str().unwrap_or("");
                            assert!(c.ends_with(" ms") || c.ends_with(" s") || c.ends_with(" min"), "{c:?}");
                        }
                    }
                    "workdirs" => {
                        assert!(shown.contains("in use by task"), "{shown}");
                        assert!(!shown.contains("Not proven stopped"), "a running writer is no leftover:\n{shown}");
                    }
                    _ => {}
                }
            }
        }
    });
    run.await.unwrap_or_else(|e| panic!("browser steps failed: {e}\n{}", b.log()));
    // The denial is the task's own record too, with who took it.
    let events = b.all_events(&denied).await;
    let resolved: Vec<&Value> = events.iter().filter(|e| e["event_type"] == "approval.resolved").collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(
        (resolved[0]["payload"]["decision"].as_str(), resolved[0]["payload"]["by"].as_str()),
        (Some("deny"), Some("operator@board"))
    );
    e2e::measured(format_args!("board screenshots at 390 and 1280 px in {}", shots.display()));
}
