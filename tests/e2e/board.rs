//! The board, served by the real bridge: its guards over plain HTTP (login, cookie flags,
//! CSRF, Origin, Host, audit on surface `board`, no host path in any page), and a person's
//! work in a real headless Chromium (log in, approve a pending plan and watch step 1 succeed,
//! answer a fake task's approval, a POST without the CSRF token refused, screenshots).

use std::time::Duration;

use serde_json::{Value, json};

use e2e::TestBridge;
use e2e::browser::{Browser, browser_or_skip, http, screenshot_dir};

/// A board token and the board's address (`127.0.0.1:port`), from the CLI.
pub(crate) fn token(b: &TestBridge) -> (String, String) {
    let out = b.cli(&["board", "token", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let url = v["login_url"].as_str().expect("login url");
    let addr = url.trim_start_matches("http://").trim_end_matches("/login").to_owned();
    (v["token"].as_str().expect("token").to_owned(), addr)
}

pub(crate) fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap_or_default().to_owned()
}

/// Logs in over HTTP; returns the `Cookie` header value.
pub(crate) fn login(addr: &str, token: &str) -> String {
    let origin = format!("http://{addr}");
    let r = http(
        addr,
        "POST",
        "/login",
        &[("Origin", &origin), ("Content-Type", "application/x-www-form-urlencoded")],
        &format!("token={token}"),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").expect("a session cookie").to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    cookie.split(';').next().unwrap().to_owned()
}

/// A one-time login link (`board token --once`): opening its page only fills in the login form
/// (twice is fine); its token logs one browser in and is then used up.
#[tokio::test]
async fn a_one_time_login_link_logs_one_browser_in() {
    let b = TestBridge::start().await;
    let out = b.cli(&["board", "token", "--once", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let (token, url) = (v["token"].as_str().expect("token"), v["login_url"].as_str().expect("login url"));
    assert_eq!(v["login_link"].as_str(), Some(format!("{url}/{token}").as_str()));
    let addr = url.trim_start_matches("http://").trim_end_matches("/login").to_owned();
    for _ in 0..2 {
        let page = http(&addr, "GET", &format!("/login/{token}"), &[], "");
        assert_eq!(page.status, 200);
        assert!(page.body.contains(&format!("name=\"token\" value=\"{token}\"")), "{}", page.body);
    }
    let cookie = login(&addr, token);
    assert_eq!(http(&addr, "GET", "/", &[("Cookie", cookie.as_str())], "").status, 200, "logged in");
    let origin = format!("http://{addr}");
    let form = [("Origin", origin.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(http(&addr, "POST", "/login", &form, &format!("token={token}")).status, 401, "used up");
    let text = b.cli(&["board", "token", "--once"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("log in once at http://{addr}/login/abb_")), "{text}");
}

#[tokio::test]
async fn the_board_refuses_what_does_not_come_from_a_logged_in_form_of_its_own() {
    let b = TestBridge::start().await;
    let (token, addr) = token(&b);
    let origin = format!("http://{addr}");
    let form = [("Origin", origin.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(http(&addr, "GET", "/", &[], "").header("location"), Some("/login"), "logged out: the login page");
    let wrong = http(&addr, "POST", "/login", &form, "token=abb_0000");
    assert_eq!(wrong.status, 401);
    let cookie = login(&addr, &token);
    fn with<'a>(cookie: &'a str, extra: &[(&'static str, &'a str)]) -> Vec<(&'static str, &'a str)> {
        let mut h = vec![("Cookie", cookie)];
        h.extend_from_slice(extra);
        h
    }
    let key = b.create_key("panel", "operator").await;
    let v = b
        .call_mcp(
            Some(&key),
            "submit_agent_plan",
            json!({ "workdir": "docs", "runtime": "fake", "profile": "review", "title": "Read the docs",
                    "steps": [{ "title": "one", "prompt": "complete:read" }] }),
        )
        .await
        .unwrap();
    let plan = v["plan_id"].as_str().unwrap().to_owned();
    let task = b.submit("wait:60").await;
    b.wait_status(&task, "running").await;
    let home = http(&addr, "GET", "/", &with(&cookie, &[]), "");
    assert_eq!(home.status, 200);
    assert!(home.body.contains("created by panel") && home.body.contains("Read the docs"), "{}", home.body);
    let csrf = csrf_of(&home.body);
    let cancel = format!("/tasks/{task}/cancel");
    let mut post = with(&cookie, &form);
    assert_eq!(http(&addr, "POST", &cancel, &post, "").status, 403, "no CSRF token");
    assert_eq!(http(&addr, "POST", &cancel, &post, "csrf=nope").status, 403, "a wrong CSRF token");
    post[1] = ("Origin", "http://evil.example");
    assert_eq!(http(&addr, "POST", &cancel, &post, &format!("csrf={csrf}")).status, 403, "a foreign origin");
    let no_origin = with(&cookie, &[("Content-Type", "application/x-www-form-urlencoded")]);
    assert_eq!(http(&addr, "POST", &cancel, &no_origin, &format!("csrf={csrf}")).status, 403, "no origin");
    let rebound = with(&cookie, &[("Host", "evil.example:80")]);
    assert_eq!(http(&addr, "GET", "/", &rebound, "").status, 421, "a foreign Host (DNS rebinding)");
    assert_eq!(b.get(&task).await["status"], "running", "nothing refused reached the task");

    // A real form: approved through the registry on surface `board`, audited as such.
    let approve =
        http(&addr, "POST", &format!("/plans/{plan}/approve"), &with(&cookie, &form), &format!("csrf={csrf}"));
    assert_eq!(approve.status, 303, "{}", approve.body);
    let log = b.call("admin_read_audit_log", json!({ "capability": "admin_approve_plan" })).await.unwrap();
    let row = &log["rows"][0];
    assert_eq!((row["surface"].as_str(), row["principal"].as_str()), (Some("board"), Some("operator@board")));
    assert_eq!(row["plan_id"], plan.as_str());

    // No host path, secret or key on any page.
    let root = b.root().display().to_string();
    for page in
        ["/", "/plans", &format!("/plans/{plan}"), &format!("/tasks/{task}"), "/workdirs", "/runtimes", "/audit"]
    {
        let r = http(&addr, "GET", page, &with(&cookie, &[]), "");
        assert_eq!(r.status, 200, "{page}: {}", r.body);
        for secret in [root.as_str(), token.as_str(), key.as_str()] {
            assert!(!r.body.contains(secret), "{page} shows {secret}");
        }
    }
    // The runtimes page says which containment tasks run under.
    let runtimes = http(&addr, "GET", "/runtimes", &with(&cookie, &[]), "");
    let expected = if crate::containment::sandbox_available() { "Contained" } else { "Not contained" };
    assert!(runtimes.body.contains(&format!("id=\"containment\">{expected}<")), "{}", runtimes.body);
    let out = b.cli(&["board", "revoke"]);
    assert!(out.status.success());
    assert_eq!(
        http(&addr, "GET", "/", &with(&cookie, &[]), "").header("location"),
        Some("/login"),
        "revoking ends sessions"
    );
}

#[tokio::test]
async fn a_person_approves_a_plan_and_answers_an_approval_in_a_real_browser() {
    let Some((chromium, driver)) = browser_or_skip("board browser test") else { return };
    let b = TestBridge::start().await;
    let key = b.create_key("panel", "operator").await;
    let v = b
        .call_mcp(
            Some(&key),
            "submit_agent_plan",
            json!({ "workdir": "docs", "runtime": "fake", "profile": "review", "title": "Summarize the docs",
                    "steps": [{ "title": "Read them", "prompt": "complete:read every page" },
                              { "title": "Summarize", "prompt": "complete:three bullet points" }] }),
        )
        .await
        .unwrap();
    let plan = v["plan_id"].as_str().unwrap().to_owned();
    let asking = b.submit("approval:publish the release notes").await;
    b.wait_status(&asking, "waiting_for_approval").await;
    let (token, addr) = token(&b);
    let shots = screenshot_dir();
    let base = format!("http://{addr}");
    let url = move |path: &str| format!("{base}{path}");

    let browser = tokio::task::spawn_blocking(move || Browser::start(&chromium, &driver)).await.unwrap();
    let browser = std::sync::Arc::new(browser);
    let run = {
        let (browser, plan, asking, shots, token) =
            (browser.clone(), plan.clone(), asking.clone(), shots.clone(), token.clone());
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            browser.goto(&url("/login"));
            browser.screenshot(&shots.join("login.png"));
            let field = browser.wait_for("input[name=token]", Duration::from_secs(10));
            browser.type_into(&field, &token);
            let button = browser.wait_for("form[action='/login'] button", Duration::from_secs(5));
            browser.click(&button);
            // The pending plan is at the top, with its provenance.
            browser.wait_for(&format!("div[data-plan='{plan}']"), Duration::from_secs(10));
            assert!(browser.source().contains("created by panel"));
            browser.screenshot(&shots.join("home.png"));
            let approve =
                browser.wait_for(&format!("div[data-plan='{plan}'] button[name=approve]"), Duration::from_secs(5));
            browser.click(&approve);
            // The plan's page updates itself (live updates) until step 1 has succeeded.
            browser.wait_url(&format!("/plans/{plan}"), Duration::from_secs(10));
            browser.wait_for("table [data-status=succeeded]", Duration::from_secs(30));
            browser.wait_for(".badge.big[data-status=succeeded]", Duration::from_secs(30));
            browser.screenshot(&shots.join("plan.png"));
            // A fake task's approval, answered from its page.
            browser.goto(&url(&format!("/tasks/{asking}")));
            let once = browser.wait_for("button[name=decision][value=approve_once]", Duration::from_secs(10));
            browser.screenshot(&shots.join("task-approval.png"));
            browser.click(&once);
            browser.wait_for(".badge.big[data-status=succeeded]", Duration::from_secs(30));
            browser.screenshot(&shots.join("task-done.png"));
            // The same POST the cancel form sends, without its CSRF token: refused.
            let status = browser.script(&format!(
                "return fetch('/tasks/{asking}/cancel', {{method: 'POST', headers: \
                 {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: 'x=1'}}).then(r => r.status)"
            ));
            assert_eq!(status, json!(403));
            for (page, file) in [
                ("/plans", "plans.png"),
                ("/workdirs", "workdirs.png"),
                ("/runtimes", "runtimes.png"),
                ("/audit", "audit.png"),
                ("/", "home-after.png"),
            ] {
                browser.goto(&url(page));
                browser.wait_for("main h1", Duration::from_secs(10));
                browser.screenshot(&shots.join(file));
            }
        })
    };
    run.await.unwrap_or_else(|e| panic!("browser steps failed: {e}\n{}", b.log()));
    let p = b.call("get_agent_plan", json!({ "plan_id": plan })).await.unwrap();
    assert_eq!(p["approved_by"], "operator@board");
    assert_eq!(p["steps"][0]["status"], "succeeded");
    let t = b.get(&asking).await;
    assert_eq!(
        (t["status"].as_str(), t["final_response"].as_str()),
        (Some("succeeded"), Some("approval=approve_once"))
    );
    e2e::measured(format_args!("board screenshots in {}", shots.display()));
}

#[tokio::test]
async fn a_long_timeline_is_read_page_by_page() {
    let b = TestBridge::start().await;
    let (token, addr) = token(&b);
    let cookie = login(&addr, &token);
    let id = b.submit("events:1100").await;
    assert_eq!(b.wait_terminal(&id).await["status"], "succeeded");
    let total = b.all_events(&id).await.len();
    assert!(total > 1100, "{total} events");
    let page = |path: &str| {
        let r = http(&addr, "GET", path, &[("Cookie", cookie.as_str())], "");
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.body
    };
    let rows = |body: &str| body.matches("<td data-label=\"Event\"><code>").count();
    let later = |body: &str| {
        let at = body.find("Later events")?;
        let href = body[..at].rfind("href=\"")? + "href=\"".len();
        Some(body[href..].split('"').next()?.replace("&amp;", "&"))
    };

    let mut path = format!("/tasks/{id}");
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let body = page(&path);
        pages += 1;
        seen.push(rows(&body));
        assert!(body.contains("event 1 of 1100") == (pages == 1), "page {pages} shows the first event or not");
        match later(&body) {
            Some(next) => {
                assert_eq!(rows(&body), 500, "a full page before a link to the next");
                path = next;
            }
            None => {
                assert!(body.contains("emitted 1100 events") || body.contains("event 1100 of 1100"), "the last page");
                break;
            }
        }
        assert!(pages < 10, "the pages never end: {seen:?}");
    }
    assert_eq!(seen.iter().sum::<usize>(), total, "every event on exactly one page: {seen:?}");
    assert_eq!(pages, total.div_ceil(500), "{seen:?}");
}

/// A session cookie replayed by another program (another `User-Agent`) is refused, and the
/// page of an approval clipped for display shows the request's whole text and says so.
#[tokio::test]
async fn a_session_is_bound_to_its_browser_and_a_clipped_approval_is_shown_whole() {
    let b = TestBridge::start().await;
    let (token, addr) = token(&b);
    let origin = format!("http://{addr}");
    let browser = "Mozilla/5.0 (board test)";
    let r = http(
        &addr,
        "POST",
        "/login",
        &[("Origin", &origin), ("Content-Type", "application/x-www-form-urlencoded"), ("User-Agent", browser)],
        &format!("token={token}"),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").expect("cookie").split(';').next().unwrap().to_owned();
    let as_browser = [("Cookie", cookie.as_str()), ("User-Agent", browser)];
    assert_eq!(http(&addr, "GET", "/", &as_browser, "").status, 200);
    let replayed = http(&addr, "GET", "/", &[("Cookie", cookie.as_str()), ("User-Agent", "curl/8.5.0")], "");
    assert_eq!(replayed.header("location"), Some("/login"), "another program's replay is logged out");
    assert_eq!(http(&addr, "GET", "/", &as_browser, "").status, 200, "the browser's session survives the replay");

    let long = format!("echo {} ; rm -rf ~/precious-files", "z".repeat(5_000));
    let task = b.submit(&format!("approval:{long}")).await;
    b.wait_status(&task, "waiting_for_approval").await;
    let page = http(&addr, "GET", &format!("/tasks/{task}"), &as_browser, "");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("The display above is clipped"), "{}", page.body);
    assert!(page.body.contains("rm -rf ~/precious-files"), "the whole request is on the page");
    assert!(page.body.contains("Approve for this session"), "a request shown whole keeps its decisions");
}

/// A writer task's page shows what it changed and cost: the change list with `+N −M`, the diff
/// coloured file by file (and one file's alone), a long diff paged; the task list shows the
/// title, duration and change counts. In headless Chromium, with screenshots.
#[tokio::test]
async fn a_tasks_change_set_and_usage_read_on_its_page_in_a_real_browser() {
    let Some((chromium, driver)) = browser_or_skip("board diff view test") else { return };
    let b = TestBridge::start().await;
    std::fs::write(b.repo.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    let id = b
        .submit("exec:printf 'alpha\\nBETA <b>bold</b>\\ngamma\\n' > notes.txt && printf 'one\\ntwo\\n' > added.txt")
        .await;
    let t = b.wait_terminal(&id).await;
    assert_eq!(t["changes"]["status"], "recorded", "{t:#}");
    // A diff longer than one page (64 KiB): 3,000 lines of 40 bytes.
    let long = b.submit("exec:seq -f 'line %035g' 3000 > long.txt").await;
    assert_eq!(b.wait_terminal(&long).await["changes"]["files_changed"], 1);
    let (token, addr) = token(&b);
    let shots = screenshot_dir();
    let base = format!("http://{addr}");
    let browser = tokio::task::spawn_blocking(move || Browser::start(&chromium, &driver)).await.unwrap();
    let (i, l) = (id.clone(), long.clone());
    let run = tokio::task::spawn_blocking(move || {
        let url = |path: &str| format!("{base}{path}");
        browser.goto(&url("/login"));
        let field = browser.wait_for("input[name=token]", Duration::from_secs(10));
        browser.type_into(&field, &token);
        browser.click(&browser.wait_for("form[action='/login'] button", Duration::from_secs(5)));
        // The login page has a heading too: wait for a page only a session shows.
        browser.wait_for("form.logout", Duration::from_secs(10));
        // The list: title, duration, +N −M.
        let home = browser.source();
        assert!(home.contains("exec:printf"), "the title is listed");
        assert!(home.contains("<span class=\"add\">+3</span> <span class=\"del\">−1</span>"), "{home}");
        browser.screenshot(&shots.join("tasks-list-review.png"));

        browser.goto(&url(&format!("/tasks/{i}")));
        browser.wait_for(".diff-file", Duration::from_secs(10));
        let sections = browser.script("return document.querySelectorAll('.diff-file').length");
        assert_eq!(sections, json!(2), "one section per file");
        let added = browser.script(
            "return [...document.querySelectorAll('.diff-file span.add')].map(s => [s.textContent, getComputedStyle(s).backgroundColor])",
        );
        let added = added.as_array().unwrap();
        assert!(added.iter().any(|a| a[0] == "+BETA <b>bold</b>"), "the markup is shown, not rendered: {added:?}");
        assert!(added.iter().all(|a| a[1] == "rgb(230, 255, 236)"), "additions are green: {added:?}");
        let removed = browser.script(
            "return [...document.querySelectorAll('.diff-file span.del')].map(s => [s.textContent, getComputedStyle(s).backgroundColor])",
        );
        assert_eq!(removed, json!([["-beta", "rgb(255, 235, 233)"]]), "removals are red");
        assert_eq!(
            browser.script("return document.querySelectorAll('.diff b').length"),
            json!(0),
            "no injected markup"
        );
        assert!(browser.source().contains("Run time"), "the usage card is there");
        browser.script("document.getElementById('diff').scrollIntoView(); return true");
        browser.screenshot(&shots.join("task-diff.png"));
        // One file's section alone.
        browser.goto(&url(&format!("/tasks/{i}?file=added.txt")));
        browser.wait_for(".diff-file", Duration::from_secs(10));
        assert_eq!(browser.script("return document.querySelectorAll('.diff-file').length"), json!(1));
        assert!(!browser.source().contains("notes.txt</span>"));
        // A long diff, paged.
        browser.goto(&url(&format!("/tasks/{l}")));
        let next = browser.wait_for("a[href*='diff_offset=']", Duration::from_secs(10));
        let first_lines = browser.script("return document.querySelectorAll('.diff-file span.add').length");
        browser.script("document.getElementById('diff').scrollIntoView(); return true");
        browser.screenshot(&shots.join("task-diff-paged.png"));
        browser.click(&next);
        browser.wait_url("diff_offset=", Duration::from_secs(10));
        browser.wait_for(".diff-file span.add", Duration::from_secs(10));
        let page_two = browser.script("return document.querySelector('.diff-file span.add').textContent");
        let n = first_lines.as_u64().unwrap();
        assert!(n > 100 && n < 3000, "the first page holds part of the diff: {n} lines");
        assert!(
            page_two.as_str().is_some_and(|l| l.starts_with("+line 0")),
            "a page starts at a whole line: {page_two}"
        );
    });
    run.await.unwrap_or_else(|e| panic!("browser steps failed: {e}\n{}", b.log()));
    e2e::measured(format_args!("board review screenshots in {}", screenshot_dir().display()));
}
