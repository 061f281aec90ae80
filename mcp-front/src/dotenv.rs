//! A reader for the `.env` syntax the project accepts, reduced to what the front needs.
//!
//! The bridge owns the strict validation of the whole file (`agent-bridge config check`: key
//! catalog, typos, duplicates). The front reads the same file for five keys only, so this
//! reader accepts the same syntax (`KEY=VALUE`, `#` comments, single quotes taken literally,
//! double quotes with `\"`, `\\` and `\n`, an inline comment after whitespace) and refuses what
//! it cannot read, naming the line and never quoting a value. It accepts exactly the files the
//! bridge's parser accepts, a duplicate key included (refused), with the same values: the e2e
//! crate's `dotenv` test compares the two on generated files. It is deliberately not shared
//! with the bridge through `bridge-proto`: that crate is the socket protocol, and the front
//! must not depend on the bridge (ARCHITECTURE invariant 1).

use std::collections::HashMap;

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
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut out = HashMap::new();
    let mut first_line_of: HashMap<String, usize> = HashMap::new();
    for (index, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let err = |message: &str| DotenvError { line, message: message.to_owned() };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).map_err(|_| err("invalid UTF-8"))?;
        let text = text.trim_start_matches([' ', '\t']);
        if text.trim_end_matches([' ', '\t']).is_empty() || text.starts_with('#') {
            continue;
        }
        // As the bridge: `export` and whitespace is the refused prefix, even before `=`.
        if text.strip_prefix("export").is_some_and(|rest| rest.starts_with([' ', '\t'])) {
            return Err(err("the `export` prefix is not supported"));
        }
        let (key, value) = text.split_once('=').ok_or_else(|| err("expected KEY=VALUE"))?;
        let key = key.trim_end_matches([' ', '\t']);
        let valid_key = key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid_key {
            return Err(err("invalid key: a key is letters, digits and underscores, and does not start with a digit"));
        }
        let value = parse_value(value).map_err(err)?;
        if let Some(first) = first_line_of.get(key) {
            return Err(err(&format!("duplicate key (first set on line {first})")));
        }
        first_line_of.insert(key.to_owned(), line);
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

fn parse_value(raw: &str) -> Result<String, &'static str> {
    let start = raw.trim_start_matches([' ', '\t']);
    if start.len() < raw.len() && start.starts_with('#') {
        return Ok(String::new());
    }
    let (value, rest) = if let Some(body) = start.strip_prefix('\'') {
        let (value, rest) = body.split_once('\'').ok_or("unterminated single-quoted value")?;
        (value.to_owned(), rest)
    } else if let Some(body) = start.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = body.char_indices();
        let rest = loop {
            match chars.next() {
                Some((i, '"')) => break &body[i + 1..],
                Some((_, '\\')) => match chars.next() {
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("unsupported escape in a double-quoted value"),
                },
                Some((_, c)) => value.push(c),
                None => return Err("unterminated double-quoted value"),
            }
        };
        (value, rest)
    } else {
        let mut end = start.len();
        let mut after_space = false;
        for (i, c) in start.char_indices() {
            if c == '#' && after_space {
                end = i;
                break;
            }
            after_space = c == ' ' || c == '\t';
        }
        return Ok(start[..end].trim_end_matches([' ', '\t']).to_owned());
    };
    let trimmed = rest.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#')) {
        Ok(value)
    } else {
        Err("unexpected text after the closing quote")
    }
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

    proptest::proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = parse(&input);
        }
    }
}
