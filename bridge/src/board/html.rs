//! A tiny escaping template helper: the [`html!`](crate::html) macro writes a literal format
//! string as markup and escapes every argument, so page code never concatenates untrusted
//! text by hand. Plus the page layout and the status badges every page shares.

use std::fmt::{self, Display, Write as _};

/// Displays its value with `& < > " '` escaped (text and attribute values alike).
pub struct Esc<T>(pub T);

impl<T: Display> Display for Esc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Escaper<'a, 'b>(&'a mut fmt::Formatter<'b>);
        impl fmt::Write for Escaper<'_, '_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                let mut last = 0;
                for (i, c) in s.char_indices() {
                    let rep = match c {
                        '&' => "&amp;",
                        '<' => "&lt;",
                        '>' => "&gt;",
                        '"' => "&quot;",
                        '\'' => "&#39;",
                        _ => continue,
                    };
                    self.0.write_str(&s[last..i])?;
                    self.0.write_str(rep)?;
                    last = i + c.len_utf8();
                }
                self.0.write_str(&s[last..])
            }
        }
        write!(Escaper(f), "{}", self.0)
    }
}

/// Appends markup to a `String`: the format string is trusted markup, every argument is
/// escaped. Never use inline `{name}` captures in the format string (they would not be).
#[macro_export]
macro_rules! html {
    ($out:expr, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        use std::fmt::Write as _;
        let _ = write!($out, $fmt $(, $crate::board::html::Esc(&$arg))*);
    }};
}

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// Tasks (the home page).
    Tasks,
    /// Plans.
    Plans,
    /// Workdirs.
    Workdirs,
    /// Runtimes.
    Runtimes,
    /// The audit log.
    Audit,
    /// Notification targets and deliveries.
    Notifications,
    /// No entry (login, errors).
    None,
}

/// What every page shows around its body.
pub struct Frame<'a> {
    /// The `<title>` and `<h1>`.
    pub title: &'a str,
    /// The active navigation entry.
    pub nav: Nav,
    /// The session's CSRF token (for the logout form); `None` when logged out.
    pub csrf: Option<&'a str>,
    /// Plans awaiting a human (shown in the navigation).
    pub pending_plans: i64,
    /// The change pulse the page was rendered at (the live-update script compares it).
    pub pulse: u64,
}

/// Renders a whole page around `body` (already markup).
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    html!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · agent-bridge</title><link rel=\"stylesheet\" href=\"/static/board.css\"></head>\
         <body data-pulse=\"{}\"><header class=\"top\"><a class=\"brand\" href=\"/\">agent-bridge</a>",
        frame.title,
        frame.pulse
    );
    if let Some(csrf) = frame.csrf {
        out.push_str("<nav>");
        for (nav, href, label) in [
            (Nav::Tasks, "/", "Tasks"),
            (Nav::Plans, "/plans", "Plans"),
            (Nav::Workdirs, "/workdirs", "Workdirs"),
            (Nav::Runtimes, "/runtimes", "Runtimes"),
            (Nav::Audit, "/audit", "Audit log"),
            (Nav::Notifications, "/notifications", "Notifications"),
        ] {
            let class = if nav == frame.nav { "active" } else { "" };
            html!(out, "<a class=\"{}\" href=\"{}\">{}", class, href, label);
            if nav == Nav::Plans && frame.pending_plans > 0 {
                html!(out, " <span class=\"count\" title=\"awaiting approval\">{}</span>", frame.pending_plans);
            }
            out.push_str("</a>");
        }
        html!(
            out,
            "</nav><form class=\"logout\" method=\"post\" action=\"/logout\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button class=\"link\">Log out</button></form>",
            csrf
        );
    }
    html!(out, "</header><main><h1>{}</h1>", frame.title);
    out.push_str(body);
    out.push_str(
        "</main><div id=\"live-note\" class=\"live-note\" hidden>This page changed. \
         <a href=\"\">Reload</a></div><script src=\"/static/board.js\" defer></script></body></html>",
    );
    out
}

/// The words and colour class of a task or plan state.
pub fn state_label(status: &str) -> (&'static str, &'static str) {
    match status {
        "queued" => ("Queued", "idle"),
        "starting" => ("Starting", "busy"),
        "running" => ("Running", "busy"),
        "waiting_for_approval" => ("Needs approval", "ask"),
        "waiting_for_question" => ("Needs an answer", "ask"),
        "pending_approval" => ("Awaiting approval", "ask"),
        "approved" => ("Approved", "busy"),
        "waiting" => ("Waiting for workdir", "idle"),
        "succeeded" => ("Succeeded", "good"),
        "failed" => ("Failed", "bad"),
        "rejected" => ("Rejected", "bad"),
        "cancelled" => ("Cancelled", "off"),
        "interrupted" => ("Interrupted", "warn"),
        "not_run" => ("Not run", "off"),
        "pending" => ("Pending", "idle"),
        _ => ("Unknown", "off"),
    }
}

/// A state badge: a coloured pill with the state in words and its wire name for machines.
pub fn badge(status: &str) -> String {
    let (label, class) = state_label(status);
    let mut out = String::new();
    html!(out, "<span class=\"badge {}\" data-status=\"{}\">{}</span>", class, status, label);
    out
}

/// An RFC 3339 instant shown compactly (`2026-12-02 10:56:20`), or a dash.
pub fn when(value: &serde_json::Value) -> String {
    match value.as_str() {
        Some(t) if t.len() >= 19 => {
            let mut out = String::new();
            html!(out, "<time datetime=\"{}\">{} {}</time>", t, &t[..10], &t[11..19]);
            out
        }
        _ => "—".to_owned(),
    }
}

/// A JSON value as plain text: `—` for null, a list as `a, b`, an object as `key: value`
/// pairs — never JSON source.
pub fn text(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "—".to_owned(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(", "),
        Value::Object(map) if map.is_empty() => "—".to_owned(),
        Value::Object(map) => {
            map.iter().map(|(k, v)| format!("{}: {}", k.replace('_', " "), text(v))).collect::<Vec<_>>().join(" · ")
        }
        other => other.to_string(),
    }
}

/// A list of words as chips (`—` when empty); anything else as [`text`].
pub fn chips(value: &serde_json::Value) -> String {
    let Some(items) = value.as_array().filter(|l| !l.is_empty()) else { return escape(&text(value)) };
    let mut out = String::new();
    for item in items {
        html!(out, "<span class=\"chip\">{}</span>", text(item));
    }
    out
}

/// An id as lists show it: the whole id in the markup (a copy takes all of it, and `title`
/// shows it on hover), cut by the stylesheet to its first dozen characters and an ellipsis.
pub fn short_id(id: &str) -> String {
    let mut out = String::new();
    html!(out, "<span class=\"id\" title=\"{}\">{}</span>", id, id);
    out
}

/// A link to a task's or a plan's page led by its title, its short id under it.
pub fn lead(href: &str, title: &str, id: &str) -> String {
    let mut out = String::new();
    html!(out, "<a class=\"lead\" href=\"{}\">{}</a><br>", href, title);
    out.push_str(&short_id(id));
    out
}

/// Gives every cell of a table its column's heading (`data-label`) and the table the class
/// `stack`, so that on a narrow screen the stylesheet shows each row as a card of labelled
/// lines. The table is markup the board wrote: every argument in it is escaped, so each
/// `<th`, `<tr` and `<td` in it is a tag.
pub fn stack(table: &str) -> String {
    let Some(head_end) = table.find("</thead>").map(|i| i + "</thead>".len()) else { return table.to_owned() };
    let labels: Vec<String> = table[..head_end]
        .split("<th")
        .skip(1)
        // `<thead` splits there too.
        .filter(|cell| cell.starts_with('>') || cell.starts_with(' '))
        .map(|cell| {
            let inner = cell.split_once('>').map_or("", |(_, rest)| rest);
            let inner = inner.split("</th>").next().unwrap_or("");
            // The heading's words without their tags (headings hold no attribute markup).
            let mut words = String::new();
            let mut in_tag = false;
            for c in inner.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => words.push(c),
                    _ => {}
                }
            }
            words
        })
        .collect();
    let head = &table[..head_end];
    let mut out = String::with_capacity(table.len() * 5 / 4);
    match head.strip_prefix("<table class=\"") {
        Some(rest) => {
            out.push_str("<table class=\"stack ");
            out.push_str(rest);
        }
        None => {
            out.push_str("<table class=\"stack\"");
            out.push_str(head.strip_prefix("<table").unwrap_or(head));
        }
    }
    let mut rest = &table[head_end..];
    let mut column = 0;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with("<tr") {
            column = 0;
        } else if rest.starts_with("<td>") || rest.starts_with("<td ") {
            html!(out, "<td data-label=\"{}\"", labels.get(column).map_or("", String::as_str));
            let span = rest[3..].split_once('>').map_or("", |(attrs, _)| attrs);
            let width = span
                .split_once("colspan=\"")
                .and_then(|(_, n)| n.split('"').next()?.parse::<usize>().ok())
                .unwrap_or(1);
            column += width;
            rest = &rest[3..];
            continue;
        }
        out.push('<');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// A hidden CSRF field.
pub fn csrf_field(csrf: &str) -> String {
    let mut out = String::new();
    html!(out, "<input type=\"hidden\" name=\"csrf\" value=\"{}\">", csrf);
    out
}

/// Writes `args` escaped; for callers outside the macro.
pub fn escape(text: &str) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}", Esc(text));
    out
}

/// Percent-encodes a query component.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_escaped_and_markup_is_not() {
        let mut out = String::new();
        html!(out, "<a title=\"{}\">{}</a>", "\"><script>", "<b>&'x'");
        assert_eq!(out, "<a title=\"&quot;&gt;&lt;script&gt;\">&lt;b&gt;&amp;&#39;x&#39;</a>");
        assert_eq!(escape("é & ü"), "é &amp; ü");
        assert!(badge("<x>").contains("data-status=\"&lt;x&gt;\""));
    }

    #[test]
    fn values_read_as_text_never_as_json() {
        use serde_json::json;
        assert_eq!(text(&json!(["fake", "codex"])), "fake, codex");
        assert_eq!(text(&json!({ "probe_ms": 3, "path_ok": true })), "path ok: true · probe ms: 3");
        assert_eq!(text(&json!([])), "—");
        assert_eq!(chips(&json!(["a<b>"])), "<span class=\"chip\">a&lt;b&gt;</span>");
        assert!(short_id("agt_0123456789abcdef").contains("title=\"agt_0123456789abcdef\""));
    }

    #[test]
    fn a_stacked_table_labels_each_cell_with_its_heading() {
        let t = stack(
            "<table><thead><tr><th>State</th><th>Task <span>id</span></th></tr></thead><tbody>\
             <tr><td>a</td><td class=\"num\">&lt;td&gt;</td></tr><tr><td colspan=\"2\">none</td></tr></tbody></table>",
        );
        assert_eq!(
            t,
            "<table class=\"stack\"><thead><tr><th>State</th><th>Task <span>id</span></th></tr></thead><tbody>\
             <tr><td data-label=\"State\">a</td><td data-label=\"Task id\" class=\"num\">&lt;td&gt;</td></tr>\
             <tr><td data-label=\"State\" colspan=\"2\">none</td></tr></tbody></table>"
        );
        assert!(stack("<table class=\"files\"><thead></thead></table>").starts_with("<table class=\"stack files\">"));
    }
}
