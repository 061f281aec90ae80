//! The parser's unit tests: the documented forms, each refusal and its wording, and the
//! properties (no panic, double-quoted values round-trip).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn ok(input: &str) -> Vec<(String, String, usize)> {
    match parse(input.as_bytes()) {
        Ok(entries) => entries.into_iter().map(|e| (e.key, e.value, e.line)).collect(),
        Err(errors) => panic!("unexpected errors: {errors:?}"),
    }
}

fn err(input: &str) -> Vec<SyntaxError> {
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
    assert_eq!(errors[0].problem, Problem::Export);
    assert_eq!(errors[0].key.as_deref(), Some("A"));
    assert_eq!(errors[1].key.as_deref(), Some("B"));
    assert_eq!(errors[1].problem, Problem::Duplicate { first: 2 });
    assert_eq!(errors[2].problem, Problem::InvalidKey("1X".to_owned()));
    assert_eq!(errors[3].problem, Problem::MissingKey);
    assert_eq!(errors[4].problem, Problem::NotAnAssignment);
    assert_eq!(errors[1].to_string(), "line 3: duplicate key (first set on line 2)");
}

#[test]
fn refuses_bad_quoting() {
    let cases = [
        ("A=\"open\n", Problem::UnterminatedDoubleQuote),
        ("A='open\n", Problem::UnterminatedSingleQuote),
        ("A=\"x\"y\n", Problem::TextAfterQuote),
        ("A='x'#c\n", Problem::TextAfterQuote),
        ("A=\"\\t\"\n", Problem::UnsupportedEscape),
        ("A=\"ends with backslash\\\n", Problem::TrailingBackslash),
    ];
    for (input, expected) in cases {
        let errors = err(input);
        assert_eq!(errors.len(), 1, "{input:?}");
        assert_eq!(errors[0].line, 1);
        assert_eq!(errors[0].key.as_deref(), Some("A"));
        assert_eq!(errors[0].problem, expected, "{input:?}");
    }
}

#[test]
fn refuses_invalid_utf8_naming_the_line() {
    let errors = parse(b"A=1\nB=\xff\n").err().unwrap_or_default();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].line, 2);
    assert_eq!(errors[0].problem, Problem::InvalidUtf8 { byte: 3 });
}

#[test]
fn the_messages_are_worded_as_the_bridge_reports_them() {
    let cases: [(&[u8], &str); 11] = [
        (b"B=\xc3\xa9\xff", "line 1: invalid UTF-8 at byte 5 of the line"),
        (b"export A=1", "line 1: the `export` prefix is not supported: write KEY=VALUE without it"),
        (b"nope", "line 1: expected KEY=VALUE"),
        (b" =1", "line 1: missing key before `=`"),
        (
            b"A-B=1",
            "line 1: invalid key \"A-B\": a key is letters, digits and underscores, and does not start with a digit",
        ),
        (b"A='x", "line 1: unterminated single-quoted value"),
        (b"A=\"x", "line 1: unterminated double-quoted value"),
        (b"A=\"x\\", "line 1: unterminated double-quoted value"),
        (b"A=\"\\t\"", "line 1: unsupported escape in a double-quoted value (only \\\", \\\\ and \\n are allowed)"),
        (b"A=''x", "line 1: unexpected text after the closing quote (only a comment after whitespace may follow)"),
        (b"A=1\nA=2", "line 2: duplicate key (first set on line 1)"),
    ];
    for (input, expected) in cases {
        let errors = parse(input).err().unwrap_or_default();
        assert_eq!(errors.len(), 1, "{input:?}");
        assert_eq!(errors[0].to_string(), expected);
    }
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
