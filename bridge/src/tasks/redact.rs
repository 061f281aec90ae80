//! Host-path confidentiality: every payload, error and result leaving the bridge is rewritten
//! so no host path is shown. Paths inside the workdir become relative (`<workdir>/…` in free
//! text, `src/x.rs` in path fields); other known host roots become markers.

use std::path::Path;

use serde_json::Value;

/// Keys whose string value is a path.
const PATH_KEYS: &[&str] = &["path", "cwd", "relative_cwd", "file_path", "grantRoot", "blocked_path", "notebook_path"];
/// Keys whose value is a list of paths.
const PATH_LIST_KEYS: &[&str] = &["paths", "read", "write", "readableRoots", "writableRoots"];
/// Provider-native identifiers that never leave the bridge.
const PRIVATE_KEYS: &[&str] =
    &["native_session_id", "native_turn_id", "thread_id", "threadId", "turn_id", "turnId", "session_id", "sessionId"];

#[derive(Debug, Clone)]
struct Rule {
    prefix: String,
    marker: &'static str,
    sibling: &'static str,
}

/// Rewrites host paths for one task's workdir.
#[derive(Debug, Clone)]
pub struct Redactor {
    workdir: String,
    rules: Vec<Rule>,
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

impl Redactor {
    /// A redactor for a workdir rooted at `workdir` (canonical) that also hides `others`
    /// (the home directory, the state directory, the workdir's configured spelling).
    pub fn new(workdir: &Path, others: &[&Path]) -> Redactor {
        let workdir = workdir.to_string_lossy().trim_end_matches('/').to_owned();
        let mut rules = vec![Rule { prefix: workdir.clone(), marker: "<workdir>", sibling: "<outside-workdir>" }];
        for other in others {
            let prefix = other.to_string_lossy().trim_end_matches('/').to_owned();
            if prefix.len() > 1 && prefix != workdir {
                rules.push(Rule { prefix, marker: "<host-path>", sibling: "<host-path>" });
            }
        }
        rules.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        Redactor { workdir, rules }
    }

    /// Rewrites free text.
    pub fn text(&self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            let found = self
                .rules
                .iter()
                .filter_map(|r| s[i..].find(&r.prefix).map(|p| (i + p, r)))
                .min_by_key(|(pos, r)| (*pos, std::cmp::Reverse(r.prefix.len())));
            let Some((pos, rule)) = found else {
                out.push_str(&s[i..]);
                break;
            };
            let end = pos + rule.prefix.len();
            let before_ok = s[..pos].chars().next_back().is_none_or(|c| !is_path_char(c));
            if !before_ok {
                out.push_str(&s[i..end]);
                i = end;
                continue;
            }
            out.push_str(&s[i..pos]);
            let after = &s[end..];
            let mut chars = after.chars();
            let boundary = match chars.next() {
                None | Some('/') => true,
                Some('.') => chars.next().is_none_or(|c| !is_path_char(c) && c != '/'),
                Some(c) => !is_path_char(c),
            };
            if boundary {
                out.push_str(rule.marker);
                i = end;
            } else {
                out.push_str(rule.sibling);
                let skip = after.find(|c: char| !(is_path_char(c) || c == '/')).unwrap_or(after.len());
                i = end + skip;
            }
        }
        out
    }

    /// Rewrites a path field: inside the workdir → relative (`.` for the root), other
    /// absolute paths → `<outside-workdir>`, relative paths → free-text rules.
    pub fn path(&self, p: &str) -> String {
        if !p.starts_with('/') {
            return self.text(p);
        }
        match p.strip_prefix(&self.workdir) {
            Some("") | Some("/") => ".".into(),
            Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/').to_owned(),
            _ => "<outside-workdir>".into(),
        }
    }

    /// Rewrites every string in a JSON value and drops provider-native ids.
    pub fn value(&self, v: &mut Value) {
        match v {
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => {
                map.retain(|k, _| !PRIVATE_KEYS.contains(&k.as_str()));
                for (k, item) in map.iter_mut() {
                    match item {
                        Value::String(s) if PATH_KEYS.contains(&k.as_str()) => *s = self.path(s),
                        Value::Array(list) if PATH_LIST_KEYS.contains(&k.as_str()) => {
                            for p in list.iter_mut() {
                                match p {
                                    Value::String(s) => *s = self.path(s),
                                    other => self.value(other),
                                }
                            }
                        }
                        other => self.value(other),
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r() -> Redactor {
        Redactor::new(Path::new("/srv/repo"), &[Path::new("/home/op"), Path::new("/home/op/.local/state/agent-bridge")])
    }

    #[test]
    fn free_text_is_rewritten_at_token_boundaries() {
        let r = r();
        assert_eq!(r.text("see /srv/repo/src/main.rs:3"), "see <workdir>/src/main.rs:3");
        assert_eq!(r.text("in /srv/repo."), "in <workdir>.");
        assert_eq!(r.text("cd /srv/repo && ls"), "cd <workdir> && ls");
        assert_eq!(r.text("/srv/repo2/x and /srv/repo.bak"), "<outside-workdir> and <outside-workdir>");
        assert_eq!(r.text("/x/srv/repo stays"), "/x/srv/repo stays");
        assert_eq!(r.text("HOME=/home/op/.cache"), "HOME=<host-path>/.cache");
        assert_eq!(
            r.text("db at /home/op/.local/state/agent-bridge/bridge.sqlite3"),
            "db at <host-path>/bridge.sqlite3"
        );
        assert_eq!(r.text("/home/operator"), "<host-path>");
        assert_eq!(r.text("naïve ünïcode /srv/repo/ä"), "naïve ünïcode <workdir>/ä");
    }

    #[test]
    fn path_fields_become_relative_and_native_ids_vanish() {
        let mut v = json!({
            "path": "/srv/repo/src/lib.rs",
            "cwd": "/srv/repo",
            "blocked_path": "/etc/passwd",
            "writableRoots": ["/srv/repo/a", "/tmp"],
            "note": "wrote /srv/repo/a",
            "thread_id": "t-123",
            "nested": [{"file_path": "/srv/repo2/x", "threadId": "x"}],
        });
        r().value(&mut v);
        assert_eq!(
            v,
            json!({
                "path": "src/lib.rs",
                "cwd": ".",
                "blocked_path": "<outside-workdir>",
                "writableRoots": ["a", "<outside-workdir>"],
                "note": "wrote <workdir>/a",
                "nested": [{"file_path": "<outside-workdir>"}],
            })
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_text(s in ".{0,80}", t in ".{0,20}") {
            let r = r();
            let _ = r.text(&format!("{s}/srv/repo{t}"));
            let mut v = json!({"path": format!("/srv/repo{t}"), "x": [s]});
            r.value(&mut v);
        }

        #[test]
        fn the_root_never_survives_between_separators(a in "[ ,;:!?()'=]{0,12}", b in "[ ,;:!?()'=]{1,12}", tail in "[a-z/]{0,12}") {
            let out = r().text(&format!("{a}/srv/repo/{tail}{b}/home/op{b}"));
            proptest::prop_assert!(!out.contains("/srv/repo"), "{}", out);
            proptest::prop_assert!(!out.contains("/home/op"), "{}", out);
        }
    }
}
