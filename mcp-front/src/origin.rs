//! Host and Origin text, normalized for comparison: shared by the configuration (which refuses
//! an origin that does not parse) and the guard (which compares requests against the lists).
//! Pure functions on strings; no policy.

/// `host[:port]` → lowercase host without brackets, and the port.
pub fn parse_authority(text: &str) -> Option<(String, Option<u16>)> {
    let authority: http::uri::Authority = text.trim().parse().ok()?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    Some((host, authority.port_u16()))
}

/// `scheme://host[:port][/]` → (scheme, host, port with the scheme's default filled in).
pub fn normalize_origin(text: &str) -> Option<(String, String, u16)> {
    let text = text.trim().trim_end_matches('/');
    let (scheme, rest) = text.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) || rest.contains(char::is_whitespace) {
        return None;
    }
    let (host, port) = parse_authority(rest)?;
    Some((scheme, host, port.unwrap_or(default_port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize_with_default_ports() {
        assert_eq!(normalize_origin("https://ChatGPT.com/"), Some(("https".into(), "chatgpt.com".into(), 443)));
        assert_eq!(normalize_origin("http://localhost:6274"), Some(("http".into(), "localhost".into(), 6274)));
        assert_eq!(normalize_origin("http://[::1]:80"), Some(("http".into(), "::1".into(), 80)));
        for bad in ["chatgpt.com", "ftp://x", "https://", "https://a/b", "null", "https://u@a"] {
            assert_eq!(normalize_origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn authorities_parse_with_and_without_ports() {
        assert_eq!(parse_authority("LOCALHOST:8765"), Some(("localhost".into(), Some(8765))));
        assert_eq!(parse_authority("[::1]:1"), Some(("::1".into(), Some(1))));
        assert_eq!(parse_authority("a b"), None);
    }
}
