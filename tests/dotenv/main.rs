//! Differential test of the two `.env` readers: the front's (`mcp_front::dotenv`, five-odd keys
//! of the operator's file) and the bridge's (`agent_bridge::config::dotenv`, the reference: it
//! validates the whole file). On the committed seed corpus (`fuzz/corpus/dotenv/`) mutated, and
//! on files generated from the syntax's pieces (quotes, escapes, comments, `export`,
//! duplicates, CRLF, a BOM), both accept or both refuse (naming the same first line), and an
//! accepted file yields the same assignments in both.
//!
//! This test lives in the e2e crate because it is the one crate that may see both: the front
//! never depends on the bridge (ARCHITECTURE invariant 1).
#![allow(clippy::disallowed_methods, clippy::disallowed_types, reason = "a test: it writes the .env files it compares")]

use std::collections::HashMap;

use proptest::prelude::*;

#[path = "../../fuzz/mutate.rs"]
mod mutate;

use mutate::{Bytes, Corpus};

/// Checks that both readers agree on `input`.
fn agree(input: &[u8]) -> Result<(), TestCaseError> {
    let bridge = agent_bridge::config::dotenv::parse(input);
    let front = mcp_front::dotenv::parse(input);
    match (bridge, front) {
        (Ok(entries), Ok(front)) => {
            let bridge: HashMap<String, String> = entries.into_iter().map(|e| (e.key, e.value)).collect();
            prop_assert_eq!(bridge, front, "the readers read {:?} differently", Bytes(input.to_vec()));
        }
        (Err(errors), Err(front)) => {
            prop_assert_eq!(
                errors[0].line,
                front.line,
                "the readers refuse {:?} on different lines: bridge {:?}, front {}",
                Bytes(input.to_vec()),
                errors,
                front
            );
        }
        (bridge, front) => {
            return Err(TestCaseError::fail(format!(
                "one reader accepts {:?} and the other refuses it: bridge {bridge:?}, front {front:?}",
                Bytes(input.to_vec())
            )));
        }
    }
    Ok(())
}

/// The pieces generated files are made of: every form of the syntax, good and bad.
const KEYS: &[&str] = &["A", "_b2", "SERVERFS_MCP_LISTEN", "SERVERFS_AGENT_BRIDGE_SOCKET", "1A", "A-B", "export A", ""];
const EQUALS: &[&str] = &["=", " = ", "\t=\t", "==", ""];
const VALUES: &[&str] = &[
    "plain",
    "two words",
    "v # comment",
    "v#not-a-comment",
    "# only a comment",
    "",
    "  padded  ",
    "'single # kept $X'",
    "'single' # c",
    "'single'x",
    "'unterminated",
    "\"dq \\\" \\\\ \\n\"",
    "\"dq\" # c",
    "\"dq\"x",
    "\"bad \\t escape\"",
    "\"ends in \\",
    "\"unterminated",
    "caf\u{e9}",
    "=[::1]:0",
];
const LINE_ENDS: &[&str] = &["\n", "\r\n"];
const OTHER_LINES: &[&str] = &["", "   ", "# a comment", "  # indented comment", "no equals sign", "\u{feff}A=1"];

/// One generated line: an assignment from the pieces, or another kind of line.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (
            0..KEYS.len(),
            0..EQUALS.len(),
            0..VALUES.len(),
            proptest::bool::ANY,
        )
            .prop_map(|(k, e, v, indent)| format!("{}{}{}{}", if indent { " \t" } else { "" }, KEYS[k], EQUALS[e], VALUES[v])),
        1 => (0..OTHER_LINES.len()).prop_map(|i| OTHER_LINES[i].to_owned()),
    ]
}

/// A generated file: a few lines, CRLF or LF ends, sometimes a BOM, sometimes invalid UTF-8.
fn file() -> impl Strategy<Value = Bytes> {
    (proptest::collection::vec((line(), 0..LINE_ENDS.len()), 0..8), proptest::bool::ANY, 0..8u8).prop_map(
        |(lines, bom, bad_utf8)| {
            let mut out = if bom { b"\xEF\xBB\xBF".to_vec() } else { Vec::new() };
            for (i, (text, end)) in lines.iter().enumerate() {
                out.extend_from_slice(text.as_bytes());
                if i == 0 && bad_utf8 == 0 {
                    out.push(0xFF);
                }
                out.extend_from_slice(LINE_ENDS[*end].as_bytes());
            }
            Bytes(out)
        },
    )
}

#[test]
fn the_readers_agree_on_generated_files() {
    mutate::run("dotenv_differential_generated", file(), |input| agree(&input));
}

#[test]
fn the_readers_agree_on_the_mutated_corpus() {
    let corpus = Corpus::load(
        "dotenv",
        &["\nA=1\nA=2\n", "export ", "'", "\"", "\\", "\\n", " # ", "#", "=", "\r\n", "\nSERVERFS_MCP_LISTEN="],
    );
    mutate::run("dotenv_differential", mutate::bytes(&corpus), |input| agree(&input));
}

#[test]
fn the_readers_agree_on_the_hand_picked_cases() {
    for input in [
        &b""[..],
        b"A=1\nA=2\n",
        b"A=1\r\nB = 'x # y' # z\r\nC=\"q \\\" \\\\ \\n\"\n",
        b"export A=1\n",
        b"A=\"x\\\"\n",
        b"A=v#c\nB=v #c\n",
        b"\xEF\xBB\xBFA=1\n",
        b"A=\xFF\n",
    ] {
        agree(input).unwrap_or_else(|e| panic!("{e}"));
    }
}
