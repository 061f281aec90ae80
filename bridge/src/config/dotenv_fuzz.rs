//! Fuzz target of the bridge's `.env` validation (`fuzz/corpus/dotenv/`: the generated
//! `.env.example`, the CLI tests' good file, the syntax and refusal cases): mutated files that
//! the syntax accepts ([`bridge_envfile::parse`], fuzzed on its own in its crate) go through the
//! whole validation, [`env::from_pairs`], in a temporary home with real workdirs.
//!
//! Properties: nothing panics; the validation returns a config that passes
//! [`env::check_rules`] and survives its JSON form, or refusals, each with a message, none
//! showing a secret-looking key's value.

use crate::mutate;
use bridge_envfile::Entry;
use proptest::prelude::*;

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
#[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
fn fuzz_dotenv() {
    let dir = tempfile::tempdir().expect("a temporary home");
    let home = dir.path().canonicalize().expect("the home");
    for sub in ["work/alpha", "work/beta", "run", "locks", "state"] {
        std::fs::create_dir_all(home.join(sub)).expect("a directory of the home");
    }
    std::fs::write(home.join("work/file.txt"), "not a directory").expect("a file");
    let context = Context { home: home.clone(), uid: 1000, gid: 1000 };
    let corpus = corpus(&home.display().to_string());
    mutate::run("dotenv", mutate::bytes(&corpus), |input| match bridge_envfile::parse(&input) {
        Ok(entries) => check_validation(&entries, &context),
        Err(_) => Ok(()),
    });
}
