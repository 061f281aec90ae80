//! The CLI's output: results on stdout, problems on stderr (the daemon itself logs with
//! `tracing` only).

use std::io::Write;

use serde_json::Value;

/// Prints one line (or block) on stdout.
pub fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}

/// Prints a problem on stderr.
pub fn error(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
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
