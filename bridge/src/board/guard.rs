//! The guard every board request passes: a `Host` that names the board (its own address, a
//! loopback name on a Unix socket's forward, or the public URL's host), on a POST the board's
//! own `Origin` for that host, and the security headers on every answer.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Board, Place};

/// The parts of `SERVERFS_BOARD_PUBLIC_URL` the guard compares with a request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// `host[:port]`, as a `Host` header names it (no default port), lower case.
    pub host: String,
    /// `scheme://host[:port]`, as an `Origin` header names it.
    pub origin: String,
}

impl PublicUrl {
    /// The host and origin of a public URL (`https://host[:port][/prefix]`); `None` when it
    /// does not parse.
    pub fn parse(url: &str) -> Option<PublicUrl> {
        let url = reqwest::Url::parse(url).ok()?;
        let name = url.host_str()?.to_ascii_lowercase();
        let host = match url.port() {
            Some(port) => format!("{name}:{port}"),
            None => name,
        };
        Some(PublicUrl { origin: format!("{}://{host}", url.scheme()), host })
    }
}

/// Whether `host` names the board at `place`: its own address (with its port), or, on a Unix
/// socket whose forward may listen on any port, a loopback name with any port, or the public
/// URL's host. Never another name, so a page under an attacker's DNS name cannot reach it (no
/// DNS rebinding).
fn host_allowed(place: &Place, public: Option<&PublicUrl>, host: &str) -> bool {
    if public.is_some_and(|p| p.host.eq_ignore_ascii_case(host)) {
        return true;
    }
    let addr = match place {
        Place::Tcp(addr) => addr,
        Place::Unix(_) => return loopback_host_any_port(host),
    };
    let port = addr.port();
    let mut allowed = vec![addr.to_string(), format!("localhost:{port}")];
    if addr.is_ipv4() {
        allowed.push(format!("127.0.0.1:{port}"));
    } else {
        allowed.push(format!("[::1]:{port}"));
    }
    allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
}

/// Whether a POST's `Origin` is the board's own for the (allowed) `host` it came with: the
/// public URL's origin under the public host (the board behind a TLS proxy or tunnel),
/// `http://<host>` under any other.
fn origin_allowed(public: Option<&PublicUrl>, host: &str, origin: &str) -> bool {
    match public {
        Some(p) if p.host.eq_ignore_ascii_case(host) => origin.eq_ignore_ascii_case(&p.origin),
        _ => origin.eq_ignore_ascii_case(&format!("http://{host}")),
    }
}

/// `localhost`, `127.0.0.1` or `[::1]`, with a port or without.
fn loopback_host_any_port(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') => {
            name
        }
        _ => host,
    };
    ["localhost", "127.0.0.1", "[::1]"].iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Every request: a `Host` of the board's own (no DNS rebinding), the board's own `Origin`
/// on every POST, and the security headers on every answer.
pub(super) async fn guard(State(board): State<Board>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("").to_owned();
    if !host_allowed(&board.inner.place, board.inner.public.as_ref(), &host) {
        return (StatusCode::MISDIRECTED_REQUEST, "unknown host: open the board at its own address").into_response();
    }
    if request.method() == axum::http::Method::POST {
        let origin = request.headers().get(header::ORIGIN).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !origin_allowed(board.inner.public.as_ref(), &host, origin) {
            return (StatusCode::FORBIDDEN, "refused: this form did not come from the board").into_response();
        }
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_url_adds_its_host_and_its_origin_under_that_host_only() {
        let p = PublicUrl::parse("https://Phone.Example/ab").unwrap();
        assert_eq!((p.host.as_str(), p.origin.as_str()), ("phone.example", "https://phone.example"));
        let p8 = PublicUrl::parse("https://phone.example:8443").unwrap();
        assert_eq!((p8.host.as_str(), p8.origin.as_str()), ("phone.example:8443", "https://phone.example:8443"));
        let default_port = PublicUrl::parse("https://phone.example:443/").unwrap();
        assert_eq!(default_port, PublicUrl::parse("https://phone.example").unwrap());
        let local = PublicUrl::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(local.origin, "http://127.0.0.1:9000");
        assert_eq!(PublicUrl::parse("not a url"), None);

        assert!(origin_allowed(Some(&p), "phone.example", "https://phone.example"));
        assert!(origin_allowed(Some(&p), "PHONE.example", "https://phone.EXAMPLE"));
        for (host, origin) in [
            ("phone.example", "http://phone.example"),
            ("phone.example", "https://evil.example"),
            ("phone.example", "null"),
            ("phone.example", ""),
            ("127.0.0.1:4000", "https://phone.example"),
        ] {
            assert!(!origin_allowed(Some(&p), host, origin), "{host} {origin}");
        }
        assert!(origin_allowed(Some(&p), "127.0.0.1:4000", "http://127.0.0.1:4000"));
        assert!(origin_allowed(None, "127.0.0.1:4000", "http://127.0.0.1:4000"));
        assert!(!origin_allowed(None, "phone.example", "https://phone.example"));

        let tcp = Place::Tcp("127.0.0.1:4000".parse().unwrap());
        for host in ["127.0.0.1:4000", "localhost:4000", "phone.example", "Phone.Example"] {
            assert!(host_allowed(&tcp, Some(&p), host), "{host}");
        }
        for host in ["phone.example:443", "phone.example.evil", "evil.example", "127.0.0.1:4001", ""] {
            assert!(!host_allowed(&tcp, Some(&p), host), "{host}");
        }
        assert!(!host_allowed(&tcp, None, "phone.example"), "only with a public URL");
        let unix = Place::Unix("/run/board.sock".into());
        assert!(host_allowed(&unix, Some(&p), "phone.example") && host_allowed(&unix, None, "localhost:9"));
        assert!(!host_allowed(&unix, None, "phone.example"));
    }
}
