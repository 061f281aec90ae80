//! Fuzz target of `.env` reading (`fuzz/corpus/dotenv/`: the generated `.env.example`, the
//! CLI tests' good file, the syntax and refusal cases): mutated files go through
//! [`dotenv::parse`] and then the whole validation, [`env::from_pairs`], in a temporary home
//! with real workdirs.
//!
//! Properties: nothing panics; the parser returns entries with valid, unique keys in line
//! order, or errors that name a line of the file and never quote a secret-looking value; the
//! validation returns a config that passes [`env::check_rules`] and survives its JSON form, or
//! refusals, each with a message, none showing a secret-looking key's value.

use std::collections::HashSet;

use crate::mutate;
use proptest::prelude::*;

use super::dotenv::{self, Entry};
use super::env::{self, Context};
use super::{BridgeConfig, keys};
use mutate::Corpus;

/// The seeds with `$HOME` replaced by the temporary home, and the catalog's keys as tokens.
fn corpus(home: &str) -> std::sync::Arc<Corpus> {
    let raw = Corpus::load("dotenv", &[]);
    let seeds = raw.seeds.iter().map(|s| String::from_utf8_lossy(s).replace("$HOME", home).into_bytes()).collect();
    let mut tokens: Vec<String> = keys::KEYS.iter().map(|k| k.name.replace("WORKDIR_NN_", "WORKDIR_01_")).collect();
    tokens.extend(
        ["\nWORKDIR_16_", "\nWORKDIR_00_", "\nSERVERFS_X=", "=~/", "=~", "=/", "=true", "=0"].map(String::from),
    );
    tokens.push(format!("={home}/work/alpha"));
    tokens.push(format!("={home}/work/file.txt"));
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    Corpus::new(seeds, &tokens)
}

/// A secret-looking value at least this long never appears in a syntax error.
const SECRET_MIN: usize = 12;

/// What replaces every secret-looking key's value in the second validation: a message that
/// shows a secret shows this.
const MARKER: &str = "zz-secret-marker-zz";

/// The entries with every secret-looking key's value replaced by [`MARKER`].
fn with_markers(entries: &[Entry]) -> Vec<Entry> {
    let mut marked = entries.to_vec();
    for entry in marked.iter_mut().filter(|e| keys::is_secret(&e.key)) {
        entry.value = MARKER.to_owned();
    }
    marked
}

fn check_parse(input: &[u8]) -> Result<Option<Vec<Entry>>, TestCaseError> {
    let lines = input.split(|&b| b == b'\n').count();
    match dotenv::parse(input) {
        Ok(entries) => {
            let mut seen = HashSet::new();
            let mut previous = 0;
            for entry in &entries {
                prop_assert!(entry.line > previous && entry.line <= lines, "line {} of {lines}", entry.line);
                previous = entry.line;
                prop_assert!(seen.insert(entry.key.as_str()), "duplicate key {}", entry.key);
                let mut bytes = entry.key.bytes();
                prop_assert!(matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_'));
                prop_assert!(bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_'), "key {:?}", entry.key);
            }
            Ok(Some(entries))
        }
        Err(errors) => {
            prop_assert!(!errors.is_empty());
            let raw_lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
            let mut previous = 0;
            for error in &errors {
                prop_assert!(error.line >= previous && error.line >= 1 && error.line <= lines, "{error}");
                previous = error.line;
                prop_assert!(!error.message.is_empty());
                // The value of a secret-looking key on that line is never quoted.
                let text = String::from_utf8_lossy(raw_lines[error.line - 1]);
                if let Some((key, value)) = text.split_once('=')
                    && keys::is_secret(key)
                {
                    let value = value.trim_matches([' ', '\t', '\r', '"', '\'']);
                    if value.len() >= SECRET_MIN && !key.contains(value) {
                        prop_assert!(!error.to_string().contains(value), "{error} shows a secret");
                    }
                }
            }
            Ok(None)
        }
    }
}

fn check_validation(entries: &[Entry], context: &Context) -> Result<(), TestCaseError> {
    match env::from_pairs(entries, context) {
        Ok(report) => {
            let config = &report.config;
            prop_assert!(env::check_rules(config).is_ok(), "an accepted config breaks its own rules");
            let json = serde_json::to_string(config).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: BridgeConfig = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, config);
            let _ = report.to_string();
        }
        Err(refusals) => {
            prop_assert!(!refusals.is_empty());
            let _ = refusals.to_string();
            for refusal in &refusals {
                prop_assert!(!refusal.message.is_empty(), "an empty refusal of {:?}", refusal.key);
            }
        }
    }
    // The same file with the secrets marked: no message may show one.
    if entries.iter().any(|e| keys::is_secret(&e.key)) {
        let marked = with_markers(entries);
        let shown = match env::from_pairs(&marked, context) {
            Ok(report) => report.to_string(),
            Err(refusals) => refusals.to_string(),
        };
        prop_assert!(!shown.contains(MARKER), "a secret value is shown:\n{shown}");
    }
    Ok(())
}

#[test]
fn fuzz_dotenv() {
    let dir = tempfile::tempdir().expect("a temporary home");
    let home = dir.path().canonicalize().expect("the home");
    for sub in ["work/alpha", "work/beta", "run", "locks", "state"] {
        std::fs::create_dir_all(home.join(sub)).expect("a directory of the home");
    }
    std::fs::write(home.join("work/file.txt"), "not a directory").expect("a file");
    let context = Context { home: home.clone(), uid: 1000, gid: 1000 };
    let corpus = corpus(&home.display().to_string());
    mutate::run("dotenv", mutate::bytes(&corpus), |input| {
        if let Some(entries) = check_parse(&input)? {
            check_validation(&entries, &context)?;
        }
        Ok(())
    });
}
