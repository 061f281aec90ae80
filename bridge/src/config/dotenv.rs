//! A strict parser for the subset of `.env` syntax the project accepts.
//!
//! The file comes from outside, so the parser never panics and every error names its line.
//! Accepted: `KEY=VALUE` lines, blank lines and `#` comment lines. Keys match
//! `[A-Za-z_][A-Za-z0-9_]*`; spaces and tabs before the key and around `=` are tolerated, as
//! ServerFS's own renderer tolerates them. A value is unquoted (an inline `#` comment starts
//! only after whitespace; surrounding whitespace is trimmed), single-quoted (literal) or
//! double-quoted (with the escapes `\"`, `\\` and `\n`); after a closing quote only
//! whitespace and a comment may follow. Refused: an `export ` prefix, a duplicate key,
//! invalid UTF-8.
//! Nothing is expanded: `$X` stays `$X`. CRLF line ends and a leading UTF-8 BOM are tolerated.
//!
//! Error messages never quote a value, because a value may be a secret.

use std::collections::HashMap;

/// One `KEY=VALUE` assignment, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value, unquoted and unescaped.
    pub value: String,
    /// The 1-based line it was found on.
    pub line: usize,
}

/// A syntax error on one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct DotenvError {
    /// The 1-based line.
    pub line: usize,
    /// The key assigned on that line, when the line got far enough to name one.
    pub key: Option<String>,
    /// What is wrong, without the value.
    pub message: String,
}

/// Parses a whole `.env` file, returning every assignment or every syntax error.
pub fn parse(input: &[u8]) -> Result<Vec<Entry>, Vec<DotenvError>> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    let mut first_line_of: HashMap<String, usize> = HashMap::new();

    for (index, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = match std::str::from_utf8(raw) {
            Ok(text) => text,
            Err(e) => {
                let message = format!("invalid UTF-8 at byte {} of the line", e.valid_up_to() + 1);
                errors.push(DotenvError { line, key: None, message });
                continue;
            }
        };
        match parse_line(text) {
            Ok(None) => {}
            Ok(Some((key, value))) => {
                if let Some(first) = first_line_of.get(key) {
                    errors.push(DotenvError {
                        line,
                        key: Some(key.to_owned()),
                        message: format!("duplicate key (first set on line {first})"),
                    });
                } else {
                    first_line_of.insert(key.to_owned(), line);
                    entries.push(Entry { key: key.to_owned(), value, line });
                }
            }
            Err((key, message)) => {
                errors.push(DotenvError { line, key: key.map(str::to_owned), message });
            }
        }
    }
    if errors.is_empty() { Ok(entries) } else { Err(errors) }
}

/// What a line failed with: the key when known, and the problem.
type LineError<'a> = (Option<&'a str>, String);

/// Parses one line (without its line end): `None` for blank and comment lines.
fn parse_line(text: &str) -> Result<Option<(&str, String)>, LineError<'_>> {
    let trimmed = text.trim_start_matches([' ', '\t']);
    if trimmed.trim_end_matches([' ', '\t']).is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    if let Some(rest) = trimmed.strip_prefix("export")
        && rest.starts_with([' ', '\t'])
    {
        let key = rest.split_once('=').map(|(key, _)| key.trim_matches([' ', '\t'])).filter(|key| is_valid_key(key));
        return Err((key, "the `export` prefix is not supported: write KEY=VALUE without it".to_owned()));
    }
    let Some((key_part, value_part)) = trimmed.split_once('=') else {
        return Err((None, "expected KEY=VALUE".to_owned()));
    };
    let key = key_part.trim_end_matches([' ', '\t']);
    if !is_valid_key(key) {
        let message = if key.is_empty() {
            "missing key before `=`".to_owned()
        } else {
            format!(
                "invalid key {key:?}: a key is letters, digits and underscores, \
                 and does not start with a digit"
            )
        };
        return Err((None, message));
    }
    parse_value(value_part).map(|value| Some((key, value))).map_err(|message| (Some(key), message))
}

/// Whether `key` matches `[A-Za-z_][A-Za-z0-9_]*`.
fn is_valid_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parses the text after `=`.
fn parse_value(raw: &str) -> Result<String, String> {
    let start = raw.trim_start_matches([' ', '\t']);
    // A `#` right after whitespace begins a comment, even when it is the first thing after `=`.
    if start.len() < raw.len() && start.starts_with('#') {
        return Ok(String::new());
    }
    if let Some(body) = start.strip_prefix('\'') {
        let Some((value, rest)) = body.split_once('\'') else {
            return Err("unterminated single-quoted value".to_owned());
        };
        check_after_quote(rest)?;
        Ok(value.to_owned())
    } else if let Some(body) = start.strip_prefix('"') {
        parse_double_quoted(body)
    } else {
        Ok(unquoted(start))
    }
}

/// An unquoted value: everything up to a `#` that follows whitespace, trailing whitespace trimmed.
fn unquoted(text: &str) -> String {
    let mut end = text.len();
    let mut previous_is_space = false;
    for (index, c) in text.char_indices() {
        if c == '#' && previous_is_space {
            end = index;
            break;
        }
        previous_is_space = c == ' ' || c == '\t';
    }
    text[..end].trim_end_matches([' ', '\t']).to_owned()
}

/// The body of a double-quoted value, from just after the opening quote.
fn parse_double_quoted(body: &str) -> Result<String, String> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => {
                check_after_quote(&body[index + 1..])?;
                return Ok(value);
            }
            '\\' => match chars.next() {
                Some((_, '"')) => value.push('"'),
                Some((_, '\\')) => value.push('\\'),
                Some((_, 'n')) => value.push('\n'),
                Some(_) => {
                    return Err("unsupported escape in a double-quoted value (only \\\", \\\\ and \\n \
                         are allowed)"
                        .to_owned());
                }
                None => return Err("unterminated double-quoted value".to_owned()),
            },
            _ => value.push(c),
        }
    }
    Err("unterminated double-quoted value".to_owned())
}

/// What may follow a closing quote: nothing, whitespace, or whitespace and a comment.
fn check_after_quote(rest: &str) -> Result<(), String> {
    let trimmed = rest.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#')) {
        Ok(())
    } else {
        Err("unexpected text after the closing quote (only a comment after whitespace may follow)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn ok(input: &str) -> Vec<(String, String, usize)> {
        match parse(input.as_bytes()) {
            Ok(entries) => entries.into_iter().map(|e| (e.key, e.value, e.line)).collect(),
            Err(errors) => panic!("unexpected errors: {errors:?}"),
        }
    }

    fn err(input: &str) -> Vec<DotenvError> {
        match parse(input.as_bytes()) {
            Ok(entries) => panic!("unexpectedly parsed: {entries:?}"),
            Err(errors) => errors,
        }
    }

    fn entry(key: &str, value: &str, line: usize) -> (String, String, usize) {
        (key.to_owned(), value.to_owned(), line)
    }

    #[test]
    fn accepts_the_documented_forms() {
        let input = "\u{feff}# comment\r\n\r\nA=plain\r\nB=with # comment\nC=no#comment\n\
                     D='single $X \\n # kept'  # comment\nE=\"dq \\\"x\\\" \\\\ \\n\" # c\n\
                     F=\nG= spaced  \n  H = 1\nI=$HOME\nJ= # only a comment\nK=\"\"\n";
        assert_eq!(
            ok(input),
            vec![
                entry("A", "plain", 3),
                entry("B", "with", 4),
                entry("C", "no#comment", 5),
                entry("D", "single $X \\n # kept", 6),
                entry("E", "dq \"x\" \\ \n", 7),
                entry("F", "", 8),
                entry("G", "spaced", 9),
                entry("H", "1", 10),
                entry("I", "$HOME", 11),
                entry("J", "", 12),
                entry("K", "", 13),
            ]
        );
    }

    #[test]
    fn refuses_export_duplicates_and_bad_keys() {
        let errors = err("export A=1\nB=1\nB=2\n1X=3\n=4\nnot an assignment\n");
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![1, 3, 4, 5, 6]);
        assert!(errors[0].message.contains("export"));
        assert_eq!(errors[0].key.as_deref(), Some("A"));
        assert_eq!(errors[1].key.as_deref(), Some("B"));
        assert!(errors[1].message.contains("duplicate key (first set on line 2)"));
        assert!(errors[2].message.contains("invalid key"));
        assert!(errors[3].message.contains("missing key"));
        assert!(errors[4].message.contains("expected KEY=VALUE"));
        assert_eq!(errors[1].to_string(), "line 3: duplicate key (first set on line 2)");
    }

    #[test]
    fn refuses_bad_quoting() {
        let cases = [
            ("A=\"open\n", "unterminated double-quoted"),
            ("A='open\n", "unterminated single-quoted"),
            ("A=\"x\"y\n", "after the closing quote"),
            ("A='x'#c\n", "after the closing quote"),
            ("A=\"\\t\"\n", "unsupported escape"),
            ("A=\"ends with backslash\\\n", "unterminated double-quoted"),
        ];
        for (input, expected) in cases {
            let errors = err(input);
            assert_eq!(errors.len(), 1, "{input:?}");
            assert_eq!(errors[0].line, 1);
            assert_eq!(errors[0].key.as_deref(), Some("A"));
            assert!(errors[0].message.contains(expected), "{input:?}: {}", errors[0].message);
        }
    }

    #[test]
    fn refuses_invalid_utf8_naming_the_line() {
        let errors = parse(b"A=1\nB=\xff\n").err().unwrap_or_default();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 2);
        assert!(errors[0].message.contains("invalid UTF-8"));
    }

    #[test]
    fn errors_never_quote_the_value() {
        for input in ["TOKEN=\"hunter2\\q\"", "TOKEN='hunter2", "TOKEN=\"hunter2\"tail"] {
            for error in err(input) {
                assert!(!error.to_string().contains("hunter2"), "{error}");
            }
        }
    }

    /// Renders a value as a double-quoted `.env` value.
    fn double_quoted(value: &str) -> String {
        let mut out = String::from("\"");
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                _ => out.push(c),
            }
        }
        out.push('"');
        out
    }

    /// Maps of valid keys to arbitrary values.
    fn env_maps() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,24}", any::<String>(), 0..16)
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&input);
        }

        #[test]
        fn never_panics_on_text(input in "[ \\t\\r\\n#='\"\\\\A-Za-z0-9_$\u{feff}é]{0,200}") {
            let _ = parse(input.as_bytes());
        }

        #[test]
        fn double_quoted_values_round_trip(
            map in env_maps(),
            crlf in any::<bool>(),
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let text: String = map
                .iter()
                .map(|(key, value)| format!("{key}={}{end}", double_quoted(value)))
                .collect();
            let parsed = parse(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let parsed: BTreeMap<String, String> =
                parsed.into_iter().map(|e| (e.key, e.value)).collect();
            prop_assert_eq!(parsed, map);
        }
    }
}
