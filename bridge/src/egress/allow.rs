//! Where a task's network traffic may go: rules (`host`, `host:port`, `*.domain`), parsed
//! strictly from the operator's settings and derived from a runtime's endpoint URLs, and the
//! decision for one destination.
//!
//! A rule without a port allows 443 and 80; `*.example.com` allows every name below
//! `example.com` but not `example.com` itself. Names compare case-insensitively, without a
//! trailing dot. An IP literal (`127.0.0.1`, `[::1]`) matches only itself, and only a rule that
//! names a loopback or private address lets a connection reach one (see [`Allow::reaches`]): a
//! name that resolves to the host's loopback never opens the operator's own services.

use std::net::IpAddr;

/// Ports a rule without one allows.
const DEFAULT_PORTS: [u16; 2] = [443, 80];
/// The longest host name accepted (RFC 1035's 253, plus a little for a wildcard).
const MAX_HOST: usize = 255;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// An exact name, lower-case.
    Name(String),
    /// `*.domain`: names below `domain` (lower-case).
    Below(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Rule {
    /// Parses `host`, `host:port`, `*.domain`, `*.domain:port`, `1.2.3.4[:port]`,
    /// `[::1][:port]`; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty rule".to_owned());
        }
        if text.contains("://") || text.contains('/') {
            return Err(format!("{text:?} is a URL: write a host, host:port or *.domain"));
        }
        let (host, port) = split_port(text)?;
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(Rule { host: Host::Ip(ip), port });
        }
        if host.starts_with('[') {
            return Err(format!("{text:?} is not an IPv6 address"));
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let (wild, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_owned()),
            None => (false, host),
        };
        if !valid_name(&name) {
            return Err(format!("{text:?} is not a host name (letters, digits, - and . only; * only as a leading *.)"));
        }
        if wild && !name.contains('.') {
            return Err(format!("{text:?} allows a whole top-level domain: name a narrower one"));
        }
        Ok(Rule { host: if wild { Host::Below(name) } else { Host::Name(name) }, port })
    }

    /// The rule for a URL's host and port (`https://api.example.com/v1` → `api.example.com:443`),
    /// or `None` when the URL has no host.
    pub fn for_url(url: &str) -> Option<Rule> {
        let uri: http::Uri = url.trim().parse().ok()?;
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") | Some("wss") => Some(443),
            Some("http") | Some("ws") => Some(80),
            _ => None,
        });
        let host = match host.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) if valid_name(&host) => Host::Name(host),
            Err(_) => return None,
        };
        Some(Rule { host, port })
    }

    /// Whether this rule allows `host:port` (`host` as the client named it).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        if !port_ok {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            Host::Ip(ip) => host.parse::<IpAddr>().is_ok_and(|h| h == *ip),
            Host::Name(name) => host == *name,
            Host::Below(domain) => host.len() > domain.len() + 1 && host.ends_with(&format!(".{domain}")),
        }
    }

    /// Whether this rule names a loopback or private destination itself (`localhost`, an IP
    /// literal): only such a rule lets a connection reach a loopback or private address.
    fn names_a_local_place(&self) -> bool {
        match &self.host {
            Host::Ip(ip) => !is_public(ip),
            Host::Name(name) => name == "localhost" || name.ends_with(".localhost"),
            Host::Below(_) => false,
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Name(n) => write!(f, "{n}")?,
            Host::Below(d) => write!(f, "*.{d}")?,
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            Host::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// A task's whole allowance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    rules: Vec<Rule>,
}

impl Allow {
    /// An allowance of `rules` (duplicates dropped).
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> Allow {
        let mut allow = Allow::default();
        for rule in rules {
            if !allow.rules.contains(&rule) {
                allow.rules.push(rule);
            }
        }
        allow
    }

    /// The rules, for the operator's view.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether a connection to `host:port` may be opened at all (before resolving it).
    pub fn permits(&self, host: &str, port: u16) -> bool {
        self.rules.iter().any(|r| r.allows(host, port))
    }

    /// Whether some rule names the host's loopback (`localhost`, `127.0.0.1`, `[::1]`): then the
    /// task's loopback names must go through the proxy, which alone can reach the host's.
    pub fn names_loopback(&self) -> bool {
        self.rules.iter().any(|r| match &r.host {
            Host::Ip(ip) => ip.is_loopback(),
            Host::Name(name) => name == "localhost" || name.ends_with(".localhost"),
            Host::Below(domain) => domain == "localhost",
        })
    }

    /// Whether a connection to `host:port`, which resolved to `addr`, may reach it: a public
    /// address through any matching rule; a loopback, private or link-local one only through a
    /// matching rule that names such a place itself.
    pub fn reaches(&self, host: &str, port: u16, addr: &IpAddr) -> bool {
        self.rules.iter().any(|r| r.allows(host, port) && (is_public(addr) || r.names_a_local_place()))
    }
}

/// Splits an optional `:port` off (IPv6 literals are bracketed when they carry one).
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let bad_port = || format!("{text:?} has a port that is not a number from 1 to 65535");
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(|| format!("{text:?} opens [ without closing it"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad_port)?),
            None if after.is_empty() => None,
            None => return Err(format!("{text:?} has something after ]")),
        };
        return Ok((&text[..inner.len() + 2], port));
    }
    if text.matches(':').count() > 1 {
        // A bare IPv6 address, without a port.
        return Ok((text, None));
    }
    match text.split_once(':') {
        Some((host, p)) => Ok((host, Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad_port)?))),
        None => Ok((text, None)),
    }
}

/// A DNS name: labels of letters, digits and `-`, not starting or ending with `-`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_HOST
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `ip` is an address of the wider internet (not loopback, private, link-local,
/// unspecified, shared or unique-local).
pub fn is_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1])))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(&IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback() || v6.is_unspecified() || (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn rules_are_read_strictly() {
        assert_eq!(rule("Registry.NPMJS.org.").to_string(), "registry.npmjs.org");
        assert_eq!(rule("*.pypi.org:443").to_string(), "*.pypi.org:443");
        assert_eq!(rule("127.0.0.1:8080").to_string(), "127.0.0.1:8080");
        assert_eq!(rule("[::1]:9").to_string(), "[::1]:9");
        assert_eq!(rule("::1").to_string(), "[::1]");
        for bad in [
            "",
            "https://x.org",
            "x.org/path",
            "*.org",
            "*",
            "a_b.org",
            "x.org:0",
            "x.org:70000",
            "[::1",
            "-x.org",
            "x..org",
            "*.*.org",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_rule_allows_its_host_and_ports_and_a_wildcard_only_what_is_below() {
        assert!(rule("api.openai.com").allows("API.openai.com.", 443));
        assert!(rule("api.openai.com").allows("api.openai.com", 80));
        assert!(!rule("api.openai.com").allows("api.openai.com", 8443));
        assert!(!rule("api.openai.com").allows("evil-api.openai.com", 443));
        assert!(rule("*.npmjs.org").allows("registry.npmjs.org", 443));
        assert!(!rule("*.npmjs.org").allows("npmjs.org", 443));
        assert!(!rule("*.npmjs.org").allows("registry.npmjs.org.evil.com", 443));
        assert!(!rule("*.npmjs.org").allows("xnpmjs.org", 443));
        assert!(rule("127.0.0.1:4000").allows("127.0.0.1", 4000));
        assert!(!rule("127.0.0.1:4000").allows("127.0.0.1", 4001));
        assert!(rule("[::1]:4000").allows("[::1]", 4000));
    }

    #[test]
    fn an_allowance_knows_whether_it_names_the_hosts_loopback() {
        let named = |text: &str| Allow::new(text.split(',').map(rule)).names_loopback();
        assert!(!named("api.openai.com,*.pypi.org,10.0.0.5:8080"));
        for text in ["127.0.0.1:8080", "localhost:5173", "[::1]:9", "a.example.com,127.0.0.2"] {
            assert!(named(text), "{text}");
        }
    }

    #[test]
    fn loopback_and_private_addresses_need_a_rule_that_names_them() {
        let allow = Allow::new([rule("*.example.com"), rule("127.0.0.1:4000"), rule("localhost:5000")]);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        assert!(allow.reaches("a.example.com", 443, &public));
        assert!(!allow.reaches("a.example.com", 443, &lo), "a name that resolves to loopback opens nothing");
        assert!(!allow.reaches("a.example.com", 443, &"10.0.0.5".parse().unwrap()));
        assert!(!allow.reaches("a.example.com", 443, &"::ffff:127.0.0.1".parse().unwrap()));
        assert!(allow.reaches("127.0.0.1", 4000, &lo), "the operator named it");
        assert!(allow.reaches("localhost", 5000, &"::1".parse().unwrap()));
        assert!(!allow.reaches("127.0.0.1", 5173, &lo), "another port is another service");
    }

    #[test]
    fn an_endpoint_url_gives_its_host_and_port() {
        assert_eq!(
            Rule::for_url("https://api.anthropic.com").map(|r| r.to_string()),
            Some("api.anthropic.com:443".into())
        );
        assert_eq!(Rule::for_url("http://127.0.0.1:41234/v1").map(|r| r.to_string()), Some("127.0.0.1:41234".into()));
        assert_eq!(Rule::for_url("http://[::1]:80/").map(|r| r.to_string()), Some("[::1]:80".into()));
        assert_eq!(Rule::for_url("not a url"), None);
    }

    proptest::proptest! {
        /// Whatever the text, parsing answers (never panics), and an accepted rule prints as a
        /// rule that parses back to itself.
        #[test]
        fn parsing_any_text_answers_and_round_trips(text in "\\PC{0,40}") {
            if let Ok(rule) = Rule::parse(&text) {
                proptest::prop_assert_eq!(Rule::parse(&rule.to_string()), Ok(rule));
            }
        }
    }
}
