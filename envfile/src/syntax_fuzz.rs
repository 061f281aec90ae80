//! Fuzz target of the `.env` syntax (`fuzz/corpus/dotenv/`: the generated `.env.example`, the
//! CLI tests' good file, the syntax and refusal cases, mutated with the syntax's own tokens).
//!
//! Properties: nothing panics; an accepted file gives entries with valid, unique keys in line
//! order, which read back the same when written out again double-quoted; a refused file gives
//! errors in line order, at most one a line, each naming a line of the file; an error's key is
//! a valid key, and the only input text a problem carries is the invalid key — the trimmed text
//! before the line's first `=` — so no message can show a value.

use std::collections::HashSet;

use proptest::prelude::*;

use super::mutate::{self, Corpus};
use super::{Entry, Problem, is_valid_key, parse};

/// The syntax's pieces, good and bad, as dictionary tokens.
const TOKENS: &[&str] =
    &["\nA=1\nA=2\n", "export ", "'", "\"", "\\", "\\n", " # ", "#", "=", "\r\n", "\nSERVERFS_MCP_LISTEN=", "\u{feff}"];

/// The entries written out again, each value double-quoted.
fn rendered(entries: &[Entry]) -> Vec<u8> {
    let mut out = String::new();
    for entry in entries {
        let value = entry.value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        out.push_str(&format!("{}=\"{value}\"\n", entry.key));
    }
    out.into_bytes()
}

fn check(input: &[u8]) -> Result<(), TestCaseError> {
    let body = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let raw_lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    match parse(input) {
        Ok(entries) => {
            let mut seen = HashSet::new();
            let mut previous = 0;
            for entry in &entries {
                prop_assert!(entry.line > previous && entry.line <= raw_lines.len(), "line {}", entry.line);
                previous = entry.line;
                prop_assert!(seen.insert(entry.key.as_str()), "duplicate key {}", entry.key);
                prop_assert!(is_valid_key(&entry.key), "key {:?}", entry.key);
            }
            let again = parse(&rendered(&entries)).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let pairs =
                |entries: &[Entry]| entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect::<Vec<_>>();
            prop_assert_eq!(pairs(&again), pairs(&entries));
        }
        Err(errors) => {
            prop_assert!(!errors.is_empty());
            let mut previous = 0;
            for error in &errors {
                prop_assert!(error.line > previous && error.line <= raw_lines.len(), "{error}");
                previous = error.line;
                prop_assert!(!error.to_string().is_empty());
                if let Some(key) = &error.key {
                    prop_assert!(is_valid_key(key), "{error} names key {key:?}");
                }
                if let Problem::InvalidKey(key) = &error.problem {
                    let text = String::from_utf8_lossy(raw_lines[error.line - 1]);
                    let before = text.split_once('=').map(|(before, _)| before.trim_matches([' ', '\t']));
                    prop_assert_eq!(Some(key.as_str()), before, "{} carries more than the key", error);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn fuzz_envfile() {
    let corpus = Corpus::load("dotenv", TOKENS);
    mutate::run("envfile", mutate::bytes(&corpus), |input| check(&input));
}
