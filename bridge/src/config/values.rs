//! Typed reads of `.env` values: each getter parses one key and records a refusal on failure.
//! The [`Context`] they are read in (what `~/` means, who the bridge runs as) lives here too.
//!
//! An empty or absent key takes its default from the catalog in [`super::keys`], so defaults
//! are written in one place. A getter returns `None` when the value is refused; callers then
//! skip the checks that depend on it, so one mistake is reported once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::keys;
use super::refusals::Refusals;

/// The longest duration, in seconds, a lifecycle setting may name (ten years), so that adding
/// it to a clock reading can never overflow.
pub(super) const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The longest retention, in hours (ten years).
pub(super) const MAX_HOURS: u64 = MAX_SECONDS / 3600;

/// Where the values are read: what `~/` means and who the bridge runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The directory `~/` expands to.
    pub home: PathBuf,
    /// The bridge's own uid.
    pub uid: u32,
    /// The bridge's own gid.
    pub gid: u32,
}

impl Context {
    /// The running process's context: `HOME` (or the password database) and its own ids.
    #[expect(
        clippy::disallowed_methods,
        reason = "configuration is read once, before the runtime serves, or in a CLI command"
    )]
    pub fn current() -> Result<Context, Refusals> {
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid().as_raw();
        let from_env = std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        let home = from_env.or_else(|| nix::unistd::User::from_uid(uid).ok().flatten().map(|user| user.dir));
        match home {
            Some(home) => Ok(Context { home, uid: uid.as_raw(), gid }),
            None => Err(Refusals::single(
                None,
                "cannot tell the home directory: HOME is unset or relative and the \
                 password database has no entry for this user",
            )),
        }
    }
}

/// The `.env` values being validated, with the refusals found so far.
pub(super) struct Reader<'a> {
    values: HashMap<&'a str, &'a str>,
    context: &'a Context,
    /// Every problem found so far.
    pub(super) refusals: Refusals,
}

impl<'a> Reader<'a> {
    /// A reader over the given `(key, value)` pairs.
    pub(super) fn new(values: HashMap<&'a str, &'a str>, context: &'a Context) -> Reader<'a> {
        Reader { values, context, refusals: Refusals::default() }
    }

    /// The raw value of `key`, empty when absent.
    pub(super) fn raw(&self, key: &str) -> &'a str {
        self.values.get(key).copied().unwrap_or("")
    }

    /// The value of `key`, or the catalog's default when it is empty; `None` if both are empty.
    pub(super) fn effective(&self, key: &str) -> Option<&'a str> {
        let raw = self.raw(key);
        if !raw.is_empty() {
            return Some(raw);
        }
        keys::lookup(key).and_then(|known| known.spec.default).filter(|d| !d.is_empty())
    }

    /// Records a refusal naming `key`.
    pub(super) fn refuse(&mut self, key: &str, message: impl Into<String>) {
        self.refusals.push(Some(key), message);
    }

    /// A strict positive integer, at most `max`; `None` when refused, or when empty with no
    /// default.
    pub(super) fn positive(&mut self, key: &str, max: u64) -> Option<u64> {
        let text = self.effective(key)?;
        self.check(key, parse_positive(text, max))
    }

    /// A boolean: true/false, 1/0, yes/no, on/off, in any case.
    pub(super) fn boolean(&mut self, key: &str) -> Option<bool> {
        let text = self.effective(key).unwrap_or("false");
        let parsed =
            parse_bool(text).ok_or_else(|| format!("{} is not a boolean (use true or false)", shown(key, text)));
        self.check(key, parsed)
    }

    /// A uid or gid: empty means `Some(None)`, the bridge's own.
    pub(super) fn id(&mut self, key: &str) -> Option<Option<u32>> {
        let Some(text) = self.effective(key) else {
            return Some(None);
        };
        let parsed = if text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse::<u32>()
                .map(Some)
                .map_err(|_| format!("{} is too large for a user or group id", shown(key, text)))
        } else {
            Err(format!("{} is not a numeric id (leave it empty for the bridge's own)", shown(key, text)))
        };
        self.check(key, parsed)
    }

    /// The directory `~/` expands to.
    pub(super) fn home(&self) -> &Path {
        &self.context.home
    }

    /// A path, absolute or under `~/`; `Some(None)` when empty with no default.
    pub(super) fn path(&mut self, key: &str) -> Option<Option<PathBuf>> {
        let Some(text) = self.effective(key) else {
            return Some(None);
        };
        let parsed = expand_path(text, &self.context.home)
            .map(Some)
            .map_err(|problem| format!("{} {problem}", shown(key, text)));
        self.check(key, parsed)
    }

    /// A socket address (`IP:port`).
    pub(super) fn socket_addr(&mut self, key: &str) -> Option<SocketAddr> {
        let text = self.effective(key)?;
        let parsed = text.parse::<SocketAddr>().map_err(|_| {
            format!(
                "{} is not an IP address and port such as 127.0.0.1:8765 \
                 (host names are not accepted)",
                shown(key, text)
            )
        });
        self.check(key, parsed)
    }

    /// A comma-separated list; items are trimmed and empty items dropped.
    pub(super) fn list(&self, key: &str) -> Vec<String> {
        split_list(self.effective(key).unwrap_or(""))
    }

    /// A comma-separated list of absolute (or `~/`) paths, none of them `/` (`root` says why
    /// `/` is refused); `None`, with every problem recorded, when an item is refused.
    pub(super) fn path_list(&mut self, key: &str, root: &str) -> Option<Vec<PathBuf>> {
        let mut paths = Vec::new();
        let mut ok = true;
        for item in self.list(key) {
            match expand_path(&item, self.home()) {
                Ok(path) if path.components().count() > 1 => paths.push(path),
                Ok(_) => {
                    self.refuse(key, format!("{item:?} {root}; name a directory or a file"));
                    ok = false;
                }
                Err(problem) => {
                    self.refuse(key, format!("{item:?} {problem}"));
                    ok = false;
                }
            }
        }
        ok.then_some(paths)
    }

    /// A comma-separated list of egress rules (`host`, `host:port`, `*.domain`), each checked;
    /// `None`, with every problem recorded, when one is refused.
    pub(super) fn rule_list(&mut self, key: &str) -> Option<Vec<String>> {
        let mut rules = Vec::new();
        let mut ok = true;
        for item in self.list(key) {
            match crate::egress::Rule::parse(&item) {
                Ok(rule) => rules.push(rule.to_string()),
                Err(problem) => {
                    self.refuse(key, problem);
                    ok = false;
                }
            }
        }
        ok.then_some(rules)
    }

    /// Records the error of `parsed`, if any, against `key`.
    fn check<T>(&mut self, key: &str, parsed: Result<T, String>) -> Option<T> {
        parsed.map_err(|message| self.refuse(key, message)).ok()
    }
}

/// Shows a value in a message, or hides it when the key looks secret.
pub(super) fn shown(key: &str, value: &str) -> String {
    if keys::is_secret(key) { "the value".to_owned() } else { format!("{value:?}") }
}

/// Parses a strict positive integer (digits only, at least 1, at most `max`).
pub(super) fn parse_positive(text: &str, max: u64) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a positive whole number (digits only)"));
    }
    match text.parse::<u64>() {
        Ok(0) => Err("0 is not allowed: the value must be at least 1".to_owned()),
        Ok(value) if value <= max => Ok(value),
        _ => Err(format!("{text:?} is too large: the value must be at most {max}")),
    }
}

/// Parses a boolean word, case-insensitively.
pub(super) fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Expands a leading `~/` (or a lone `~`) against `home`; any other path must be absolute.
pub(super) fn expand_path(text: &str, home: &Path) -> Result<PathBuf, &'static str> {
    let path = if text == "~" {
        home.to_owned()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.join(rest)
    } else if text.starts_with('~') {
        return Err("uses ~user, which is not supported: write an absolute path or ~/");
    } else {
        PathBuf::from(text)
    };
    if path.is_absolute() { Ok(path) } else { Err("is not an absolute path (or one starting with ~/)") }
}

/// Splits a comma-separated list, trimming items and dropping empty ones.
pub(super) fn split_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|item| !item.is_empty()).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_integers_are_strict() {
        assert_eq!(parse_positive("7200", MAX_SECONDS), Ok(7200));
        assert_eq!(parse_positive("007", MAX_SECONDS), Ok(7));
        for bad in ["", "0", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "٣"] {
            assert!(parse_positive(bad, MAX_SECONDS).is_err(), "{bad:?}");
        }
        assert!(parse_positive("99999999999999999999999", u64::MAX).is_err());
        assert!(parse_positive("11", 10).unwrap_err().contains("at most 10"));
    }

    #[test]
    fn booleans_accept_the_usual_words() {
        for yes in ["true", "TRUE", "1", "yes", "On"] {
            assert_eq!(parse_bool(yes), Some(true), "{yes}");
        }
        for no in ["false", "0", "No", "OFF"] {
            assert_eq!(parse_bool(no), Some(false), "{no}");
        }
        for bad in ["", "y", "enabled", "2", " true"] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_expand_home_or_must_be_absolute() {
        let home = Path::new("/home/op");
        assert_eq!(expand_path("~/x/y", home), Ok(PathBuf::from("/home/op/x/y")));
        assert_eq!(expand_path("~", home), Ok(PathBuf::from("/home/op")));
        assert_eq!(expand_path("/abs", home), Ok(PathBuf::from("/abs")));
        assert!(expand_path("rel/dir", home).is_err());
        assert!(expand_path("~other/dir", home).is_err());
    }
}
