//! The CLI's output: results on stdout, problems on stderr (the daemon itself logs with
//! `tracing` only).
//!
//! Much of what the CLI prints came from a model or an agent (a final response, an approval's
//! command, an event's text), so nothing reaches the terminal unfiltered: C0 control
//! characters other than newline and tab, DEL and the C1 controls are removed from text (an
//! escape sequence could rewrite the screen or hide what an approval really runs), and
//! escaped as `\u…` in JSON, whose other control characters serde already escapes.

use std::io::Write;

use serde_json::Value;

/// Whether `c` is a control character a terminal may act on (newline and tab are text).
fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
}

/// `text` without the control characters a terminal would act on.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(is_terminal_control) {
        text.chars().filter(|c| !is_terminal_control(*c)).collect::<String>().into()
    } else {
        text.into()
    }
}

/// Prints one line (or block) on stdout, without terminal controls.
pub fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", terminal_safe(text));
}

/// Prints a JSON value on stdout, pretty, every terminal control escaped (the data is kept).
pub fn json(value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if is_terminal_control(c) && c != '\n' {
            escaped.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            escaped.push(c);
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{escaped}");
}

/// Prints a problem on stderr, without terminal controls.
pub fn error(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}", terminal_safe(text));
}

/// Renders rows as aligned columns.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let render = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![render(headers.to_vec())];
    for row in rows {
        out.push(render(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// A JSON value as a table cell: a string as is, `null` as `-`, anything else as JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A table of `list` (a JSON array): a row an item, a column a `(header, JSON pointer)`;
/// a missing value shows as `-`.
pub fn listing(list: &Value, columns: &[(&str, &str)]) -> String {
    let headers: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    let rows: Vec<Vec<String>> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| columns.iter().map(|(_, at)| cell(item.pointer(at).unwrap_or(&Value::Null))).collect())
        .collect();
    table(&headers, &rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn terminal_controls_never_reach_the_terminal() {
        let hostile = "ok\u{1b}[2J\u{1b}]0;title\u{7}\r\u{9b}31mred\u{7f}\ttab\nnext é";
        assert_eq!(terminal_safe(hostile), "ok[2J]0;title31mred\ttab\nnext é");
        assert!(matches!(terminal_safe("plain\ttext\n"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn a_listing_aligns_columns_and_shows_missing_values_as_a_dash() {
        let list = json!([
            { "alias": "repo", "state": "free", "guard": null },
            { "alias": "docs-long", "state": "recovery_required", "guard": { "task_id": "agt_1", "n": 2 } },
        ]);
        let text = listing(
            &list,
            &[("WORKDIR", "/alias"), ("STATE", "/state"), ("GUARD", "/guard/task_id"), ("N", "/guard/n")],
        );
        assert_eq!(
            text,
            "WORKDIR    STATE              GUARD  N\n\
             repo       free               -      -\n\
             docs-long  recovery_required  agt_1  2"
        );
        assert_eq!(listing(&json!({ "not": "a list" }), &[("A", "/a")]), "A");
    }
}
