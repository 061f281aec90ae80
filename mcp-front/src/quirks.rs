//! Known client bugs the front tolerates, each as narrowly as it can be recognized, so the
//! protocol checks stay strict for every other client.
//!
//! Two today. First, clients that accept JSON but do not list `text/event-stream` in `Accept`
//! (or send no `Accept`, or `*/*`): some connectors do, and so does a bare `curl`. The front
//! answers every request with JSON, so such a client can read the answer; its `Accept` is
//! completed before rmcp's transport (which wants both) sees it. A client that accepts neither
//! JSON nor anything still gets 406.
//!
//! Second, Claude's connectors (claude.ai, Claude Desktop, and Claude Code through a
//! claude.ai connector) negotiate 2026-07-28 and say so in every request's `_meta`, but send
//! the header `MCP-Protocol-Version: 2025-11-25` (anthropics/claude-code#93290). A strict
//! server answers every such call with `-32020` (header mismatch). The front lets the body
//! win for exactly that pair of versions from a client that names itself Claude; any other
//! mismatch is still refused by rmcp.

use http::{HeaderMap, HeaderValue};
use serde_json::Value;

const HEADER: &str = "mcp-protocol-version";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";

/// Rewrites `headers` for a request with a recognized client quirk; returns whether the
/// Claude header mismatch was one of them.
pub fn apply(headers: &mut HeaderMap, body: &Value) -> bool {
    complete_accept(headers);
    if !is_claude_header_mismatch(headers, body) {
        return false;
    }
    tracing::debug!(
        "tolerating a Claude connector's MCP-Protocol-Version header that disagrees with _meta (anthropics/claude-code#93290)"
    );
    headers.insert(HEADER, HeaderValue::from_static("2026-07-28"));
    true
}

/// Completes an `Accept` that admits JSON (or is absent) so that it also lists SSE.
pub fn complete_accept(headers: &mut HeaderMap) {
    let values: Vec<String> = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|range| range.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .collect();
    let json =
        values.is_empty() || values.iter().any(|r| matches!(r.as_str(), "application/json" | "application/*" | "*/*"));
    let sse = values.iter().any(|r| r == "text/event-stream");
    if json && !sse {
        headers.insert(http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    }
}

fn is_claude_header_mismatch(headers: &HeaderMap, body: &Value) -> bool {
    let mut values = headers.get_all(HEADER).iter();
    let (Some(header), None) = (values.next(), values.next()) else {
        return false;
    };
    let meta = &body["params"]["_meta"];
    let client = meta[META_CLIENT]["name"].as_str().unwrap_or_default().to_ascii_lowercase();
    header.as_bytes() == b"2025-11-25" && meta[META_VERSION] == "2026-07-28" && client.starts_with("claude")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(header: &str, meta_version: &str, client: &str) -> (HeaderMap, Value) {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_str(header).unwrap());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            META_VERSION: meta_version, META_CLIENT: {"name": client, "version": "1"}}}});
        (headers, body)
    }

    #[test]
    fn only_the_known_pair_from_claude_is_rewritten() {
        for (header, meta, client, expected) in [
            ("2025-11-25", "2026-07-28", "claude-ai", true),
            ("2025-11-25", "2026-07-28", "Claude Desktop", true),
            ("2025-11-25", "2026-07-28", "inspector", false),
            ("2025-06-18", "2026-07-28", "claude-ai", false),
            ("2025-11-25", "2025-11-25", "claude-ai", false),
            ("2026-07-28", "2026-07-28", "claude-ai", false),
        ] {
            let (mut headers, body) = request(header, meta, client);
            assert_eq!(apply(&mut headers, &body), expected, "{header} {meta} {client}");
            let now = headers.get(HEADER).unwrap().to_str().unwrap();
            assert_eq!(now, if expected { "2026-07-28" } else { header });
        }
    }

    #[test]
    fn an_accept_that_admits_json_is_completed_and_others_are_kept() {
        for (accept, expected) in [
            (None, "application/json, text/event-stream"),
            (Some("*/*"), "application/json, text/event-stream"),
            (Some("application/json"), "application/json, text/event-stream"),
            (Some("text/event-stream, application/json"), "text/event-stream, application/json"),
            (Some("text/html"), "text/html"),
        ] {
            let mut headers = HeaderMap::new();
            if let Some(accept) = accept {
                headers.insert(http::header::ACCEPT, HeaderValue::from_static(accept));
            }
            apply(&mut headers, &json!({}));
            assert_eq!(headers.get(http::header::ACCEPT).unwrap(), expected, "{accept:?}");
        }
    }

    #[test]
    fn duplicate_headers_are_left_alone() {
        let (mut headers, body) = request("2025-11-25", "2026-07-28", "claude-ai");
        headers.append(HEADER, HeaderValue::from_static("2026-07-28"));
        assert!(!apply(&mut headers, &body));
    }
}
