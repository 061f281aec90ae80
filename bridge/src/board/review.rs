//! What a task changed and cost, on the board: the usage card, the change list with `+N −M`,
//! and the diff — additions and removals coloured, one section per file, a long diff paged —
//! plus the short forms the task lists use (duration, cost, change counts).

use serde_json::{Value, json};

use super::Board;
use super::html::{text, urlencode};
use crate::html;

/// The most diff bytes one page shows.
const DIFF_PAGE_BYTES: u64 = 64 * 1024;

/// A duration in ms as people read it (`850 ms`, `12.4 s`, `3 min 05 s`, `2 h 07 min`).
pub fn duration(ms: &Value) -> String {
    let Some(ms) = ms.as_i64().filter(|m| *m >= 0) else { return "—".to_owned() };
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A cost in USD (`$0.0123`), or `—` when the runtime reported none.
pub fn cost(usage: &Value) -> String {
    match usage.get("cost_usd").and_then(Value::as_f64) {
        Some(c) if c < 0.01 => format!("${c:.4}"),
        Some(c) => format!("${c:.2}"),
        None => "—".to_owned(),
    }
}

/// `+N −M` for a change outline, `read-only`, or `—` when none was recorded.
pub fn change_counts(changes: &Value) -> String {
    let mut out = String::new();
    match changes.get("status").and_then(Value::as_str) {
        Some("recorded") => html!(
            out,
            "<span class=\"add\">+{}</span> <span class=\"del\">−{}</span> <span class=\"meta\">{} file(s)</span>",
            text(&changes["added"]),
            text(&changes["removed"]),
            text(&changes["files_changed"])
        ),
        Some("read_only") => out.push_str("<span class=\"meta\">read-only</span>"),
        Some(_) => out.push_str("<span class=\"meta\" title=\"not recorded\">n/a</span>"),
        None => out.push('—'),
    }
    out
}

/// The usage and time card of a task's page.
pub fn usage_card(t: &Value) -> String {
    let usage = &t["usage"];
    let mut out = String::from("<h2>Usage and time</h2><div class=\"card\"><dl class=\"kv\">");
    html!(out, "<dt>Run time</dt><dd>{}</dd>", duration(&t["timing"]["wall_ms"]));
    html!(out, "<dt>Waiting for a human</dt><dd>{}</dd>", duration(&t["timing"]["human_wait_ms"]));
    if usage.is_object() {
        html!(out, "<dt>Model</dt><dd><code>{}</code></dd>", text(&usage["model"]));
        for (label, key) in [
            ("Input tokens", "input_tokens"),
            ("… of them cached", "cached_input_tokens"),
            ("Output tokens", "output_tokens"),
            ("Reasoning tokens", "reasoning_tokens"),
        ] {
            html!(out, "<dt>{}</dt><dd class=\"num\">{}</dd>", label, text(&usage[key]));
        }
        html!(out, "<dt>Cost</dt><dd class=\"num\" data-cost>{}</dd>", cost(usage));
    } else {
        out.push_str("<dt>Tokens</dt><dd>not reported by this runtime</dd>");
    }
    out.push_str("</dl></div>");
    out
}

/// The class of one diff line.
fn line_class(line: &str) -> &'static str {
    if line.starts_with("diff --git ") {
        "dh"
    } else if line.starts_with("@@") {
        "hunk"
    } else if line.starts_with("+++ ") || line.starts_with("--- ") || is_header(line) {
        "meta"
    } else if line.starts_with('+') {
        "add"
    } else if line.starts_with('-') {
        "del"
    } else if line.starts_with("# agent-bridge:") {
        "cut"
    } else {
        "ctx"
    }
}

fn is_header(line: &str) -> bool {
    [
        "index ",
        "new file mode",
        "deleted file mode",
        "old mode",
        "new mode",
        "similarity index",
        "rename ",
        "copy ",
        "Binary files",
    ]
    .iter()
    .any(|h| line.starts_with(h))
}

/// Renders a chunk of unified diff: a `<section>` per file, a coloured line each.
pub fn render_diff(chunk: &str) -> String {
    let mut out = String::from("<div class=\"diff\">");
    let mut open = false;
    for line in chunk.lines() {
        if line.starts_with("diff --git ") || !open {
            if open {
                out.push_str("</pre></section>");
            }
            out.push_str("<section class=\"diff-file\"><pre>");
            open = true;
        }
        // One block per line (no newline between them: the blocks are the lines).
        html!(out, "<span class=\"{}\">{}</span>", line_class(line), if line.is_empty() { " " } else { line });
    }
    if open {
        out.push_str("</pre></section>");
    }
    out.push_str("</div>");
    out
}

/// The change-set section of a task's page: the list of files and a page of the diff (the
/// whole diff, or one file's with `?file=`), `?diff_offset=` for the next page.
pub async fn changes_section(board: &Board, id: &str, t: &Value, file: Option<&str>, offset: u64) -> String {
    let changes = &t["changes"];
    let mut out = String::from("<h2>Changes</h2>");
    match changes.get("status").and_then(Value::as_str) {
        None => {
            out.push_str(if t["terminal"] == true {
                "<p class=\"empty\">No change set was recorded for this task.</p>"
            } else {
                "<p class=\"empty\">The change set is computed when the task ends.</p>"
            });
            return out;
        }
        Some("recorded") => {}
        Some(status) => {
            html!(out, "<p class=\"empty\">{}: {}</p>", status.replace('_', " "), text(&changes["reason"]));
            return out;
        }
    }
    out.push_str("<div class=\"card\" data-changes>");
    out.push_str(&change_counts(changes));
    if changes["truncated"] == true {
        out.push_str(" <span class=\"badge warn\">diff cut at 8 MiB</span>");
    }
    out.push_str("<table class=\"files\"><tbody>");
    for f in changes["files"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let path = f["path"].as_str().unwrap_or("");
        html!(
            out,
            "<tr><td><code>{}</code></td><td><a class=\"mono\" href=\"/tasks/{}?file={}#diff\">{}</a>{}</td>\
             <td class=\"num add\">+{}</td><td class=\"num del\">−{}</td></tr>",
            text(&f["status"]),
            urlencode(id),
            urlencode(path),
            path,
            match f["old_path"].as_str() {
                Some(old) => format!(" ← {old}"),
                None if f["binary"] == true => " (binary)".to_owned(),
                None => String::new(),
            },
            text(&f["added"]),
            text(&f["removed"])
        );
    }
    out.push_str("</tbody></table></div>");
    if changes["files_changed"].as_i64().unwrap_or(0) == 0 {
        return out;
    }
    out.push_str("<h3 id=\"diff\">Diff</h3>");
    if let Some(f) = file {
        html!(
            out,
            "<p class=\"meta\">File <code>{}</code> · <a href=\"/tasks/{}#diff\">the whole diff</a></p>",
            f,
            urlencode(id)
        );
    }
    let args = json!({ "task_id": id, "path": file, "offset_bytes": offset, "max_bytes": DIFF_PAGE_BYTES });
    match board.call("read_agent_task_diff", args).await {
        Ok(chunk) => {
            let text_of = chunk["text"].as_str().unwrap_or("");
            // A page ends at a whole line (the next one starts there), unless a line is longer
            // than a page.
            let (shown, next) = match text_of.rfind('\n') {
                Some(nl) if chunk["eof"] != true => (&text_of[..=nl], offset + nl as u64 + 1),
                _ => (text_of, chunk["next_offset_bytes"].as_u64().unwrap_or(offset)),
            };
            out.push_str(&render_diff(shown));
            if chunk["eof"] != true {
                let file = file.map(|f| format!("&file={}", urlencode(f))).unwrap_or_default();
                html!(
                    out,
                    "<p><a href=\"/tasks/{}?diff_offset={}{}#diff\">Next part of the diff ({} of {} bytes shown) →</a></p>",
                    urlencode(id),
                    next,
                    file,
                    next,
                    text(&chunk["size_bytes"])
                );
            }
        }
        Err(e) => html!(out, "<div class=\"error\"><code>{}</code>: {}</div>", e.code, e.message),
    }
    out
}

/// A branch's `size` as people read it (`2 commits · 3 files +10 −1`).
pub fn branch_size(size: &Value) -> String {
    let mut out = String::new();
    let n = |key: &str| size[key].as_u64().unwrap_or(0);
    match size["commits"].as_u64() {
        Some(c) => html!(
            out,
            "{} commit(s) · {} file(s) <span class=\"add\">+{}</span> <span class=\"del\">−{}</span>",
            c,
            n("files_changed"),
            n("lines_added"),
            n("lines_removed")
        ),
        None => out.push('—'),
    }
    out
}

/// A worktree task's branch: where it started and ended, what it holds, and — while it is
/// open — the forms that merge it into the checkout's branch or discard it (a kept worktree
/// can only be discarded). Empty for a task that worked in place.
pub fn branch_card(id: &str, t: &Value, csrf: &str) -> String {
    let iso = &t["isolation"];
    if iso["mode"] != "worktree" {
        return String::new();
    }
    let mut out = String::from("<div class=\"card\" id=\"branch\"><h2>Branch</h2><dl class=\"kv\">");
    html!(out, "<dt>Branch</dt><dd><code>{}</code> ({})</dd>", text(&iso["branch"]), text(&iso["state"]));
    html!(
        out,
        "<dt>From</dt><dd><code>{}</code> at <code>{}</code></dd>",
        text(&iso["base_ref"]),
        text(&iso["base_commit"])
    );
    html!(out, "<dt>Head</dt><dd><code>{}</code></dd>", text(&iso["head_commit"]));
    out.push_str("<dt>Holds</dt><dd>");
    out.push_str(&branch_size(&iso["size"]));
    out.push_str("</dd>");
    if iso["base_dirty"] == true {
        out.push_str("<dt>Note</dt><dd>The checkout had uncommitted changes the task did not see.</dd>");
    }
    if let Some(reason) = iso["reason"].as_str() {
        html!(out, "<dt>Why</dt><dd>{}</dd>", reason);
    }
    if let Some(merged) = iso["merged_commit"].as_str() {
        html!(out, "<dt>Merged as</dt><dd><code>{}</code></dd>", merged);
    }
    out.push_str("</dl>");
    let id = urlencode(id);
    if iso["state"] == "open" {
        html!(out, "<form class=\"inline\" method=\"post\" action=\"/tasks/{}/merge\">", id);
        out.push_str(&super::html::csrf_field(csrf));
        out.push_str(
            "<label><input type=\"radio\" name=\"strategy\" value=\"ff_only\" checked> fast-forward</label> \
             <label><input type=\"radio\" name=\"strategy\" value=\"merge\"> merge commit</label> \
             <label><input type=\"radio\" name=\"strategy\" value=\"squash\"> squash</label> \
             <button class=\"primary\">Merge into the checkout's branch</button></form>",
        );
    }
    if matches!(iso["state"].as_str(), Some("open" | "kept")) {
        html!(out, "<form class=\"inline\" method=\"post\" action=\"/tasks/{}/discard\">", id);
        out.push_str(&super::html::csrf_field(csrf));
        out.push_str(
            "<label><input type=\"checkbox\" name=\"confirm\" value=\"true\" required> its work is lost</label> \
             <button class=\"danger\">Discard the branch</button></form>",
        );
    }
    out.push_str("</div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_is_escaped_coloured_and_cut_into_files() {
        let html = render_diff(
            "diff --git a/a b/a\nindex 1..2 100644\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-<old>\n+<script>x</script>\n ctx\n\
             diff --git a/b b/b\nBinary files /dev/null and b/b differ\n",
        );
        assert_eq!(html.matches("<section class=\"diff-file\">").count(), 2, "{html}");
        assert!(html.contains("<span class=\"del\">-&lt;old&gt;</span>"), "{html}");
        assert!(html.contains("<span class=\"add\">+&lt;script&gt;x&lt;/script&gt;</span>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("<span class=\"meta\">+++ b/a</span>") && html.contains("<span class=\"hunk\">"));
        assert!(html.contains("<span class=\"meta\">Binary files"), "{html}");
        assert_eq!(render_diff(""), "<div class=\"diff\"></div>");
    }

    #[test]
    fn durations_costs_and_counts_read_as_people_read_them() {
        assert_eq!(duration(&json!(850)), "850 ms");
        assert_eq!(duration(&json!(12_400)), "12.4 s");
        assert_eq!(duration(&json!(185_000)), "3 min 05 s");
        assert_eq!(duration(&json!(7_620_000)), "2 h 07 min");
        assert_eq!(duration(&Value::Null), "—");
        assert_eq!(cost(&json!({ "cost_usd": 0.001928 })), "$0.0019");
        assert_eq!(cost(&json!({ "cost_usd": 1.5 })), "$1.50");
        assert_eq!(cost(&Value::Null), "—");
        let counts = change_counts(&json!({ "status": "recorded", "added": 3, "removed": 1, "files_changed": 2 }));
        assert!(counts.contains("+3") && counts.contains("−1") && counts.contains("2 file(s)"), "{counts}");
        assert_eq!(change_counts(&Value::Null), "—");
    }
}
