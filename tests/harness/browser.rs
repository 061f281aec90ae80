//! Just enough HTTP/1.1 and WebDriver to drive the board in a real headless Chromium, with no
//! new dependency: a blocking HTTP client for loopback, a client of chromedriver's W3C
//! WebDriver API, and a base64 decoder for its screenshots.
//!
//! Chromium and chromedriver are Debian's (`apt-get install chromium chromium-driver`).
//! Under `CI=true` a missing browser fails the test that needs it; elsewhere it is skipped,
//! loudly.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One HTTP answer.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl HttpResponse {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Sends one request to `addr` (`127.0.0.1:port`) and reads the whole answer.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    // Read the head, then exactly the body (a server may keep the connection open).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let split = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "the connection closed before the headers ended");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let length =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let payload = &raw[split + 4..];
        let complete = match length {
            Some(len) => payload.len() >= len,
            None if chunked => payload.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if complete {
            break;
        }
        let n = stream.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let reply = crate::front::parse_reply(&raw);
    HttpResponse {
        status: reply.status,
        headers: reply.headers,
        body: String::from_utf8_lossy(&reply.body).into_owned(),
    }
}

/// Decodes standard base64 (padding optional, whitespace ignored).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in text.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Where the browser and its driver are, if installed.
pub fn browser_paths() -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("CHROMIUM_BIN").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    let driver =
        std::env::var_os("CHROMEDRIVER_BIN").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromedriver".into());
    (chromium.exists() && driver.exists()).then_some((chromium, driver))
}

/// The browser, or `None` (skipped loudly) when it is missing outside CI; under `CI=true` a
/// missing browser fails the test.
pub fn browser_or_skip(test: &str) -> Option<(PathBuf, PathBuf)> {
    let found = browser_paths();
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: chromium and chromedriver are required under CI=true (apt-get install chromium chromium-driver)"
        );
        crate::measured(format_args!(
            "SKIPPED {test}: no /usr/bin/chromium or /usr/bin/chromedriver (apt-get install chromium chromium-driver)"
        ));
    }
    found
}

/// A chromedriver process and one WebDriver session in a fresh headless Chromium.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium with a fresh
    /// profile directory.
    pub fn start(chromium: &Path, chromedriver: &Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen in 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::Builder::new().prefix("ab-chromium-").tempdir().expect("profile dir");
        let args = json!([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--window-size=1280,900",
            format!("--user-data-dir={}", profile.path().display()),
        ]);
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium.display().to_string(), "args": args },
        } } });
        let mut browser = Browser { driver, addr, session: String::new(), _profile: profile };
        let v = browser.wd("POST", "/session", caps);
        browser.session = v["sessionId"].as_str().expect("session id").to_owned();
        browser
    }

    fn wd(&self, method: &str, path: &str, body: Value) -> Value {
        let text = if method == "GET" || method == "DELETE" { String::new() } else { body.to_string() };
        let r = http(&self.addr, method, path, &[("Content-Type", "application/json")], &text);
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        assert!(r.status == 200, "WebDriver {method} {path}: {} {}", r.status, r.body);
        v["value"].clone()
    }

    fn path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens a URL.
    pub fn goto(&self, url: &str) {
        self.wd("POST", &self.path("/url"), json!({ "url": url }));
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        self.wd("GET", &self.path("/url"), Value::Null).as_str().unwrap_or_default().to_owned()
    }

    /// The page's HTML.
    pub fn source(&self) -> String {
        self.wd("GET", &self.path("/source"), Value::Null).as_str().unwrap_or_default().to_owned()
    }

    /// The element matching a CSS selector, if any.
    pub fn find(&self, css: &str) -> Option<String> {
        let r = http(
            &self.addr,
            "POST",
            &self.path("/element"),
            &[("Content-Type", "application/json")],
            &json!({ "using": "css selector", "value": css }).to_string(),
        );
        let v: Value = serde_json::from_str(&r.body).ok()?;
        (r.status == 200).then(|| v["value"].as_object()?.values().next()?.as_str().map(str::to_owned)).flatten()
    }

    /// Waits (bounded, polling the page as a person would look at it) for a selector.
    pub fn wait_for(&self, css: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = self.find(css) {
                return e;
            }
            assert!(Instant::now() < deadline, "no {css} on {} after {limit:?}:\n{}", self.url(), self.source());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until the page's source contains `text`; the source that does.
    pub fn wait_text(&self, text: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let page = self.source();
            if page.contains(text) {
                return page;
            }
            assert!(Instant::now() < deadline, "no {text:?} on {} after {limit:?}:\n{page}", self.url());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until the page's URL contains `part`.
    pub fn wait_url(&self, part: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        // Read while the page navigates: chromedriver may answer an error ("loader has
        // changed") for a read that races the navigation; that is a "not yet".
        let now = || {
            let r = http(&self.addr, "GET", &self.path("/url"), &[], "");
            let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            if r.status == 200 { v["value"].as_str().unwrap_or_default().to_owned() } else { String::new() }
        };
        while !now().contains(part) {
            assert!(Instant::now() < deadline, "the page never went to {part}: {}", self.url());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Clicks an element.
    pub fn click(&self, element: &str) {
        self.wd("POST", &self.path(&format!("/element/{element}/click")), json!({}));
    }

    /// Types into an element.
    pub fn type_into(&self, element: &str, text: &str) {
        self.wd("POST", &self.path(&format!("/element/{element}/value")), json!({ "text": text }));
    }

    /// Runs a script in the page (a returned promise is awaited) and returns its value.
    pub fn script(&self, script: &str) -> Value {
        self.wd("POST", &self.path("/execute/sync"), json!({ "script": script, "args": [] }))
    }

    /// Runs a script with arguments (`arguments[0]` …) and returns its value.
    pub fn execute_script(&self, script: &str, args: Value) -> Value {
        self.wd("POST", &self.path("/execute/sync"), json!({ "script": script, "args": args }))
    }

    /// Sets the window's size; headless Chromium's viewport follows it. Returns the page's
    /// `window.innerWidth` afterwards.
    pub fn set_window_size(&self, width: u32, height: u32) -> u64 {
        self.wd("POST", &self.path("/window/rect"), json!({ "width": width, "height": height }));
        self.script("return window.innerWidth").as_u64().unwrap_or_default()
    }

    /// The rendered text of the first element matching a CSS selector (`innerText`: after the
    /// stylesheet's `text-transform`), or `None`.
    pub fn inner_text(&self, css: &str) -> Option<String> {
        self.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null",
            json!([css]),
        )
        .as_str()
        .map(str::to_owned)
    }

    /// Saves a PNG screenshot of the page.
    pub fn screenshot(&self, file: &Path) {
        let v = self.wd("GET", &self.path("/screenshot"), Value::Null);
        let png = base64_decode(v.as_str().expect("base64 screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(file, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(&self.addr, "DELETE", &format!("/session/{}", self.session), &[], "");
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where the tests leave their screenshots: `target/board-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/board-screenshots
    let target = exe.ancestors().nth(3).map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    target.join("board-screenshots")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(base64_decode("aGVsbG8gd29ybGQ="), b"hello world");
        assert_eq!(base64_decode("AAEC/w=="), [0, 1, 2, 255]);
    }
}
