//! The tidy check on waived rules: a lint is waived item by item (an `expect` with a reason), a
//! module-wide waiver (`#![allow]`, `#![expect]`) lives only in test or benchmark code, and
//! every waiver in the repository is in `tests/e2e/waivers.txt`, so a new one is a visible
//! change in review. It reads the repository's files; it starts nothing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::tidy::{root, rust_files};

const LIST: &str = "tests/e2e/waivers.txt";

/// Whether a waiver covers a whole module (`#![…]`) or one item (`#[…]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Module,
    Item,
}

/// Every waiver in `source`: its scope and the lints it names (the attribute's arguments
/// before `reason`). Attributes may span lines.
fn waivers(source: &str) -> Vec<(Scope, Vec<String>)> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("#") {
        let rest = &source[at..];
        let (scope, args) = if let Some(r) =
            rest.strip_prefix(concat!("#!", "[allow(")).or_else(|| rest.strip_prefix(concat!("#!", "[expect(")))
        {
            (Scope::Module, r)
        } else if let Some(r) =
            rest.strip_prefix(concat!("#", "[allow(")).or_else(|| rest.strip_prefix(concat!("#", "[expect(")))
        {
            (Scope::Item, r)
        } else {
            continue;
        };
        // The arguments end at the parenthesis that closes the attribute; a reason is a string
        // and may hold parentheses, so it is skipped as a string.
        let (mut depth, mut in_string, mut end) = (1usize, false, args.len());
        for (i, c) in args.char_indices() {
            match c {
                '"' => in_string = !in_string,
                '(' if !in_string => depth += 1,
                ')' if !in_string => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lints = args[..end]
            .split(',')
            .map(str::trim)
            .take_while(|a| !a.starts_with("reason"))
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        found.push((scope, lints));
    }
    found
}

/// Test and benchmark code: the only places a module-wide waiver may live.
fn is_test_or_bench(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["tests/", "fuzz/", "bench/"].iter().any(|p| path.starts_with(p))
        || path.contains("/benches/")
        || path.contains("/tests/")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "testing.rs"
}

/// The repository's waivers as `LIST` writes them: `path scope lint count`, sorted.
fn listing(root: &Path) -> (String, Vec<String>) {
    let mut files = Vec::new();
    for dir in ["proto", "bridge", "mcp-front", "httpd", "envfile", "bench", "tests", "fuzz"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "the walk found only {} files: is the root right?", files.len());
    let mut counts: BTreeMap<(String, Scope, String), usize> = BTreeMap::new();
    let mut misplaced = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (scope, lints) in waivers(&text) {
            if scope == Scope::Module && !is_test_or_bench(&rel) {
                misplaced.push(format!("{rel}: #![…({})]", lints.join(", ")));
            }
            for lint in lints {
                *counts.entry((rel.clone(), scope, lint)).or_default() += 1;
            }
        }
    }
    let mut out = String::new();
    for ((path, scope, lint), n) in counts {
        let scope = if scope == Scope::Module { "module" } else { "item" };
        out.push_str(&format!("{path} {scope} {lint} {n}\n"));
    }
    (out, misplaced)
}

#[test]
fn module_wide_waivers_live_only_in_test_and_benchmark_code() {
    let (_, misplaced) = listing(&root());
    assert!(
        misplaced.is_empty(),
        "module-wide waivers outside test and benchmark code (waive the lint on the item that needs it, \
         with an expect attribute and its reason):\n{}",
        misplaced.join("\n")
    );
}

#[test]
fn every_waiver_is_in_the_committed_list() {
    let root = root();
    let (actual, _) = listing(&root);
    let committed = std::fs::read_to_string(root.join(LIST)).unwrap_or_default();
    let committed: String =
        committed.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|l| format!("{l}\n")).collect();
    if committed != actual {
        let (old, new): (Vec<&str>, Vec<&str>) = (committed.lines().collect(), actual.lines().collect());
        let gone: Vec<&&str> = old.iter().filter(|l| !new.contains(l)).collect();
        let added: Vec<&&str> = new.iter().filter(|l| !old.contains(l)).collect();
        panic!(
            "the repository's waivers differ from {LIST}\nnot in the code any more: {gone:#?}\nnew or changed: {added:#?}\n\
             when the change is meant, write the list again: cargo test -p e2e --test e2e -- waivers --nocapture \
             prints it below\n{actual}"
        );
    }
}

#[test]
fn the_waiver_scan_sees_each_form() {
    // Built from pieces, so that this file does not hold the forms it tests.
    let (module, item) = ("#!", "#");
    let source = format!(
        "//! x\n{module}[allow(\n    clippy::disallowed_methods,\n    reason = \"a (parenthesised) reason\"\n)]\n\
         {item}[expect(unsafe_code, reason = \"x\")]\nfn f() {{}}\n{item}[allow(dead_code)]\nfn g() {{}}\n"
    );
    let found = waivers(&source);
    assert_eq!(
        found,
        vec![
            (Scope::Module, vec!["clippy::disallowed_methods".to_owned()]),
            (Scope::Item, vec!["unsafe_code".to_owned()]),
            (Scope::Item, vec!["dead_code".to_owned()]),
        ]
    );
    assert!(!is_test_or_bench("bridge/src/lease.rs"));
    assert!(is_test_or_bench("bridge/src/provider/worktree_tests.rs"));
    assert!(is_test_or_bench("bridge/benches/socket.rs"));
}
