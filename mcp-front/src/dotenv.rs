//! The front's reading of the operator's `.env`: the shared strict syntax, worded the front's way.
//!
//! The syntax is `bridge-envfile`'s, the one parser both binaries use (the front never links the
//! bridge). The bridge validates the whole file; the front takes the keys it needs from the
//! assignments, and on a refused file reports the first bad line, in its own shorter words,
//! never quoting a value.

use std::collections::HashMap;

use bridge_envfile::Problem;

/// A line the reader cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct DotenvError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong, without the value.
    pub message: String,
}

/// Parses a `.env` file into its assignments; a key set twice is refused, as the bridge
/// refuses it.
pub fn parse(input: &[u8]) -> Result<HashMap<String, String>, DotenvError> {
    match bridge_envfile::parse(input) {
        Ok(entries) => Ok(entries.into_iter().map(|e| (e.key, e.value)).collect()),
        Err(errors) => {
            let first = errors.into_iter().next().expect("a refused file has at least one error");
            Err(DotenvError { line: first.line, message: message(&first.problem) })
        }
    }
}

/// The front's words for a problem.
fn message(problem: &Problem) -> String {
    match problem {
        Problem::InvalidUtf8 { .. } => "invalid UTF-8",
        Problem::Export => "the `export` prefix is not supported",
        Problem::NotAnAssignment => "expected KEY=VALUE",
        Problem::MissingKey | Problem::InvalidKey(_) => {
            "invalid key: a key is letters, digits and underscores, and does not start with a digit"
        }
        Problem::UnterminatedSingleQuote => "unterminated single-quoted value",
        Problem::UnterminatedDoubleQuote => "unterminated double-quoted value",
        Problem::UnsupportedEscape | Problem::TrailingBackslash => "unsupported escape in a double-quoted value",
        Problem::TextAfterQuote => "unexpected text after the closing quote",
        Problem::Duplicate { first } => return format!("duplicate key (first set on line {first})"),
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_forms_the_bridge_accepts() {
        let env = parse(
            b"\xEF\xBB\xBF# c\r\nA=plain\r\nB=with # comment\nC=no#comment\nD='lit $X # kept' # c\n\
              E=\"dq \\\"x\\\" \\\\\"\n  F = spaced  \nG=\n",
        )
        .unwrap();
        assert_eq!(env["A"], "plain");
        assert_eq!(env["B"], "with");
        assert_eq!(env["C"], "no#comment");
        assert_eq!(env["D"], "lit $X # kept");
        assert_eq!(env["E"], "dq \"x\" \\");
        assert_eq!(env["F"], "spaced");
        assert_eq!(env["G"], "");
    }

    #[test]
    fn refuses_what_it_cannot_read_without_quoting_the_value() {
        for (input, line) in [
            ("A=1\nexport B=2\n", 2),
            ("A='secret\n", 1),
            ("A=\"secret\"x\n", 1),
            ("nope\n", 1),
            ("A=1\n\nA=secret\n", 3),
            ("export =secret\n", 1),
        ] {
            let e = parse(input.as_bytes()).unwrap_err();
            assert_eq!(e.line, line, "{input:?}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }

    #[test]
    fn words_each_problem_the_fronts_way() {
        for (input, expected) in [
            (&b"A=1\nB=\xff\n"[..], "line 2: invalid UTF-8"),
            (b"export A=1", "line 1: the `export` prefix is not supported"),
            (b"nope", "line 1: expected KEY=VALUE"),
            (b"=1", "line 1: invalid key: a key is letters, digits and underscores, and does not start with a digit"),
            (b"1A=1", "line 1: invalid key: a key is letters, digits and underscores, and does not start with a digit"),
            (b"A='x", "line 1: unterminated single-quoted value"),
            (b"A=\"x", "line 1: unterminated double-quoted value"),
            (b"A=\"x\\", "line 1: unsupported escape in a double-quoted value"),
            (b"A=\"\\t\"", "line 1: unsupported escape in a double-quoted value"),
            (b"A='x'y", "line 1: unexpected text after the closing quote"),
            (b"A=1\nA=2\nnope", "line 2: duplicate key (first set on line 1)"),
        ] {
            assert_eq!(parse(input).unwrap_err().to_string(), expected, "{input:?}");
        }
    }
}
