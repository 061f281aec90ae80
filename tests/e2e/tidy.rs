//! The tidy checks: every Rust file opens with a `//!` line saying what it is for,
//! ARCHITECTURE.md's code map has an entry for every directory of Rust code, the documents'
//! relative links resolve and cite nothing a reader lacks, and the `.env` syntax is read in
//! one place (rust-analyzer's tidy test is the model). They read the repository's files; they
//! start nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository root (this crate is `tests/`).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository root").to_owned()
}

/// Every `.rs` file under `dir`, skipping build output and the tools' installs.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "target" | "node_modules" | ".runtimes" | ".tools" | ".git") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The crate directories, whose Rust code the tidy checks walk.
const CRATES: &[&str] = &["proto", "bridge", "mcp-front", "httpd", "envfile", "bench", "tests"];

#[test]
fn every_rust_file_opens_with_its_purpose() {
    let root = root();
    let mut files = Vec::new();
    for dir in CRATES.iter().chain(&["fuzz"]) {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "the walk found only {} files: is the root right?", files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            !text.lines().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(missing.is_empty(), "these files do not open with a `//!` line saying what they are for: {missing:?}");
}

/// The part of ARCHITECTURE.md from `## Code map` to the next `## ` heading.
fn code_map(text: &str) -> &str {
    let start = text.find("## Code map").expect("ARCHITECTURE.md has a `## Code map`");
    let map = &text[start..];
    let end = map[1..].find("\n## ").map_or(map.len(), |e| e + 1);
    &map[..end]
}

/// The directories the code map has an entry for: a `### ` heading or a `- ` item that opens
/// with a directory in backquotes (`` ### `bridge/src/` `` or `` - `bridge/src/tasks/` — … ``).
/// A directory named inside a sentence is not an entry.
fn map_entries(map: &str) -> BTreeSet<String> {
    map.lines()
        .filter_map(|line| line.strip_prefix("### `").or_else(|| line.strip_prefix("- `")))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name))
        .filter(|name| name.ends_with('/'))
        .map(str::to_owned)
        .collect()
}

/// Every directory under `dirs` (relative to `root`) that directly holds a `.rs` file, as
/// `path/` relative to `root`.
fn source_dirs(root: &Path, dirs: &[&str]) -> BTreeSet<String> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    files
        .iter()
        .filter_map(|f| f.parent())
        .map(|d| format!("{}/", d.strip_prefix(root).expect("under the root").display()))
        .collect()
}

/// What the code map lacks (source directories without an entry) and what it has too much
/// (entries naming no directory).
fn code_map_problems(root: &Path, dirs: &[&str], map: &str) -> (Vec<String>, Vec<String>) {
    let entries = map_entries(map);
    let missing = source_dirs(root, dirs).into_iter().filter(|d| !entries.contains(d)).collect();
    let stale = entries.into_iter().filter(|e| !root.join(e).is_dir()).collect();
    (missing, stale)
}

#[test]
fn the_code_map_has_an_entry_for_every_source_directory() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let map = code_map(&text);
    let dirs: Vec<&str> = CRATES.iter().chain(&["fuzz"]).copied().collect();
    assert!(source_dirs(&root, &dirs).len() > 20, "the walk found too few directories: is the root right?");
    let (missing, stale) = code_map_problems(&root, &dirs, map);
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map has no entry (a `### ` heading or a `- ` item opening with the \
         directory in backquotes) for these directories of Rust code: {missing:?}"
    );
    assert!(stale.is_empty(), "ARCHITECTURE.md's code map names directories that do not exist: {stale:?}");
}

#[test]
fn the_tidy_walk_sees_a_missing_directory() {
    // The check must be able to fail both ways: a directory of Rust code without an entry, and
    // an entry for a directory that is gone.
    let dir = tempfile::tempdir().expect("temp dir");
    for file in ["a/src/lib.rs", "a/src/x/mod.rs", "a/src/x/y/deep.rs", "b/tests/t.rs"] {
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, "//! A module.\n").expect("write");
    }
    std::fs::write(dir.path().join("a/README.md"), "no code here\n").expect("write");
    let map = "## Code map\n### `a/src/` (crate)\n- `a/src/x/` — x, beside `a/src/x/y/` in a sentence\n\
               - `b/tests/` — tests\n- `a/src/gone/` — moved away\n## Next\n- `c/` — not in the map\n";
    let (missing, stale) = code_map_problems(dir.path(), &["a", "b"], code_map(map));
    assert_eq!(missing, ["a/src/x/y/"]);
    assert_eq!(stale, ["a/src/gone/"]);
    let (missing, stale) = code_map_problems(dir.path(), &["a"], "## Code map\n- `a/src/` — a\n");
    assert_eq!(missing, ["a/src/x/", "a/src/x/y/"]);
    assert!(stale.is_empty());
}

/// The documents whose links and wording the tidy tests check: the README, ARCHITECTURE.md,
/// every page of `docs/`, and the READMEs of `bench/` and `fuzz/`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "bench/README.md", "fuzz/README.md"].iter().map(|d| root.join(d)).collect();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// The lines of a markdown text outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown text's headings (a repeated heading's later ones get `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else { continue };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The relative links of a markdown file (`[text](target)`, outside code blocks) whose file
/// does not exist, or whose `#anchor` names no heading of a markdown target.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().expect("a file in a directory");
    let mut broken = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            rest = &after[end..];
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                text.to_owned()
            } else {
                let resolved = dir.join(path);
                if !resolved.exists() {
                    broken.push(format!("{target} (no such file)"));
                    continue;
                }
                if resolved.extension().is_none_or(|x| x != "md") {
                    continue;
                }
                std::fs::read_to_string(&resolved).unwrap_or_default()
            };
            if !anchor.is_empty() && !anchors(&linked).contains(anchor) {
                broken.push(format!("{target} (no such heading)"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let docs = documents(&root);
    assert!(docs.len() >= 8, "found only {} documents: is docs/ there?", docs.len());
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for link in broken_links(doc, &text) {
            broken.push(format!("{}: {link}", doc.strip_prefix(&root).unwrap_or(doc).display()));
        }
    }
    assert!(broken.is_empty(), "these relative links point at nothing: {broken:?}");
}

#[test]
fn the_link_check_sees_a_broken_link() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("docs")).expect("mkdir");
    std::fs::write(dir.path().join("docs/a.md"), "# Page A\n## The `fake` runtime\n").expect("write");
    let file = dir.path().join("README.md");
    let text = "[a](docs/a.md), [b](docs/b.md), [c](docs/a.md#the-fake-runtime), [d](docs/a.md#nowhere)\n\
                [web](https://example.com/x) [self](#top) [gone](#gone)\n```\n[in code](docs/none.md)\n```\n# Top\n";
    assert_eq!(
        broken_links(&file, text),
        ["docs/b.md (no such file)", "docs/a.md#nowhere (no such heading)", "#gone (no such heading)"]
    );
    assert_eq!(slug("Remote connectors with OAuth (`/mcp-oauth`)"), "remote-connectors-with-oauth-mcp-oauth");
}

/// What a reader of the repository cannot follow: a tracker issue ("issue 17", "issue #3"), a
/// section of a design note outside it ("DESIGN §4", "DESIGN.md"), a seed ("seed 001").
fn cites_the_unreadable(line: &str) -> bool {
    let lower = line.to_lowercase();
    let followed_by_number = |word: &str| {
        lower.match_indices(word).any(|(at, _)| {
            let rest = lower[at + word.len()..].trim_start_matches(['s', ' ']);
            rest.starts_with(|c: char| c.is_ascii_digit() || c == '#')
        })
    };
    followed_by_number("issue")
        || followed_by_number("seed")
        || lower.contains("design §")
        || lower.contains("design.md")
}

#[test]
fn no_document_cites_an_issue_a_design_section_or_a_seed() {
    let root = root();
    let mut files = documents(&root);
    files.push(root.join(".env.example"));
    let mut deployment = Vec::new();
    for entry in std::fs::read_dir(root.join("deployment")).expect("read deployment/").flatten() {
        if entry.path().is_file() {
            deployment.push(entry.path());
        }
    }
    files.extend(deployment);
    for file in &files {
        assert!(file.is_file(), "{} is missing", file.display());
    }
    refuse_citations(&root, &files, cites_the_unreadable);
}

/// Fails naming every line of `files` that `cites` finds.
fn refuse_citations(root: &Path, files: &[PathBuf], cites: fn(&str) -> bool) {
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for (n, line) in text.lines().enumerate().filter(|(_, l)| cites(l)) {
            found.push(format!("{}:{}: {}", file.strip_prefix(root).unwrap_or(file).display(), n + 1, line.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "these lines cite what a reader of the repository does not have (an issue, a design-note \
         section, a seed): say what is meant instead:\n{}",
        found.join("\n")
    );
}

/// The repository's code and scripts, for the citation rule: every source, script and
/// fixture file outside build output and the tools' installs (this file holds its test data).
fn code_and_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".runtimes" | ".tools" | ".git" | "docs") {
                code_and_scripts(&path, out);
            }
        } else if path.parent().is_some_and(|p| p.file_name().is_some_and(|n| n == ".ci"))
            || ["rs", "py", "mjs", "js", "sh", "toml", "yml", "json", "css", "html"]
                .iter()
                .any(|ext| path.extension().is_some_and(|x| x == *ext))
            || name == "quickstart"
        {
            out.push(path);
        }
    }
}

/// The citation rule for code, stricter about "seed" (a random seed is no citation): an
/// issue number, a design-note section, a seed document (`seed 000`…`seed 002`).
fn code_cites_the_unreadable(line: &str) -> bool {
    let lower = line.to_lowercase();
    let issue = lower.match_indices("issue").any(|(at, _)| {
        let rest = lower[at + "issue".len()..].trim_start_matches(['s', ' ']);
        rest.starts_with(|c: char| c.is_ascii_digit() || c == '#')
    });
    issue || lower.contains("design §") || lower.contains("design.md") || lower.contains("seed 00")
}

#[test]
fn no_code_comment_or_script_cites_an_issue_a_design_section_or_a_seed() {
    let root = root();
    let mut files = Vec::new();
    code_and_scripts(&root, &mut files);
    assert!(files.len() > 200, "the walk found only {} files: is the root right?", files.len());
    let this = root.join("tests/e2e/tidy.rs");
    files.retain(|f| *f != this);
    refuse_citations(&root, &files, code_cites_the_unreadable);
}

#[test]
fn the_code_citation_rule_sees_a_citation_and_not_a_random_seed() {
    for cited in ["// measured in issue 17", "# (issue #31)", "/// DESIGN §10", "//! seed 001 §4"] {
        assert!(code_cites_the_unreadable(cited), "{cited}");
    }
    for plain in ["let seed = 42;", "seeds 10,000 tasks", "an issuer's keys", "// the design of the board"] {
        assert!(!code_cites_the_unreadable(plain), "{plain}");
    }
}

#[test]
fn the_citation_rule_sees_a_citation() {
    for cited in ["the code issue 17 started from", "(issue #31)", "see DESIGN §10", "DESIGN.md says", "seed 001 §4"]
    {
        assert!(cites_the_unreadable(cited), "{cited}");
    }
    for plain in ["an IdP that issues tokens", "the issuer's keys", "seed corpora", "the design of the board"] {
        assert!(!cites_the_unreadable(plain), "{plain}");
    }
}

/// How a line is split at its `=` into a key and a value (spaces removed from the source
/// first).
const SPLITS_AT_EQUALS: &[&str] = &[
    "split_once('=')",
    "split_once(\"=\")",
    "rsplit_once('=')",
    "splitn(2,'=')",
    "find('=')",
    "=='='",
    "==b'='",
    "'='=>",
    "b'='=>",
];

/// How a `#` comment line is recognised (spaces removed from the source first).
const SKIPS_COMMENTS: &[&str] = &[
    "starts_with('#')",
    "starts_with(\"#\")",
    "strip_prefix('#')",
    "strip_prefix(\"#\")",
    "=='#'",
    "==b'#'",
    "'#'=>",
    "b'#'=>",
];

/// Whether Rust source reads `KEY=value` lines with `#` comments, the shape of a `.env`
/// reader: it both splits at `=` and recognises `#` ([`SPLITS_AT_EQUALS`], [`SKIPS_COMMENTS`]).
fn reads_env_lines(source: &str) -> bool {
    let code: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    SPLITS_AT_EQUALS.iter().any(|n| code.contains(n)) && SKIPS_COMMENTS.iter().any(|n| code.contains(n))
}

#[test]
fn only_envfile_reads_the_env_syntax() {
    // `bridge-envfile` is the one `.env` parser; the bridge and the front take its entries and
    // errors. A second reader elsewhere would drift from it (two copies were once kept equal by
    // a differential test). This file names the patterns, so it is left out.
    let root = root();
    let mut files = Vec::new();
    for dir in CRATES.iter().filter(|d| **d != "envfile").chain(&["fuzz"]) {
        rust_files(&root.join(dir), &mut files);
    }
    let this = root.join("tests/e2e/tidy.rs");
    let readers: Vec<String> = files
        .iter()
        .filter(|f| **f != this && reads_env_lines(&std::fs::read_to_string(f).unwrap_or_default()))
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        readers.is_empty(),
        "these files split lines at `=` and skip `#` comments, as a `.env` reader does: \
         read the file with `bridge_envfile::parse` instead: {readers:?}"
    );
    let envfile = std::fs::read_to_string(root.join("envfile/src/lib.rs")).expect("read envfile/src/lib.rs");
    assert!(reads_env_lines(&envfile), "the rule no longer recognises the one `.env` parser itself");
}

#[test]
fn the_env_reader_rule_sees_a_second_reader() {
    let reader = "for line in text.lines() {\n    if line.trim().starts_with( '#' ) { continue; }\n    \
                  let (key, value) = line.split_once('=')?;\n}";
    assert!(reads_env_lines(reader));
    let bytes = "match b { b'#' => comment = true, b'=' => split = i, _ => {} }";
    assert!(reads_env_lines(bytes));
    // Splitting `KEY=value` alone (an environment block, a query string) is not a file reader.
    assert!(!reads_env_lines("let (k, v) = pair.split_once('=')?;"));
}

/// Rust source as tokens: identifiers (and numbers) whole, `::` as one token, every other
/// character but whitespace as its own (comments and strings are not told apart).
fn tokens(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut word = c.to_string();
            while let Some(&next) = chars.peek().filter(|n| n.is_alphanumeric() || **n == '_') {
                word.push(next);
                chars.next();
            }
            out.push(word);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push("::".into());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// Whether Rust source names the notifier (`bridge/src/notify/`): `crate::notify` or
/// `super::…::notify`, or a `crate::{…}` / `super::{…}` group with `notify` among its own items.
/// `config::notify`, tokio's `Notify` and `notify_…` names are not the notifier.
fn names_the_notifier(source: &str) -> bool {
    let t = tokens(source);
    for i in 0..t.len() {
        if !matches!(t[i].as_str(), "crate" | "super") || t.get(i + 1).map(String::as_str) != Some("::") {
            continue;
        }
        match t.get(i + 2).map(String::as_str) {
            Some("notify") => return true,
            Some("{") => {
                let (mut depth, mut item_start) = (0usize, true);
                for token in &t[i + 3..] {
                    match token.as_str() {
                        "{" => depth += 1,
                        "}" if depth == 0 => break,
                        "}" => depth -= 1,
                        "," if depth == 0 => {
                            item_start = true;
                            continue;
                        }
                        "notify" if depth == 0 && item_start => return true,
                        _ => {}
                    }
                    item_start = false;
                }
            }
            _ => {}
        }
    }
    false
}

#[test]
fn the_store_never_names_the_notifier() {
    // The store records one neutral fact per change and keeps the outbox; who gets what, the
    // wording and the links are the notifier's. A store module calling into `notify/` would
    // bring back the cycle between them.
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("bridge/src/store"), &mut files);
    assert!(files.len() > 10, "the walk found only {} store files: is the root right?", files.len());
    let naming: Vec<String> = files
        .iter()
        .filter(|f| names_the_notifier(&std::fs::read_to_string(f).unwrap_or_default()))
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        naming.is_empty(),
        "these store files name `crate::notify` (the store records facts; the notifier reads them): {naming:?}"
    );
    // The rule recognises the notifier where it is named.
    let links = std::fs::read_to_string(root.join("bridge/src/registry/links.rs")).expect("read registry/links.rs");
    assert!(names_the_notifier(&links), "the rule no longer sees the registry's use of the notifier");
}

#[test]
fn the_notifier_rule_sees_each_way_of_naming_it() {
    for named in [
        "use crate::notify::links;",
        "let t = crate :: notify::format::title(&fact);",
        "super::super::notify::route::route_pending(s, &t, &mut u)",
        "use crate::{model::TaskStatus, notify::links};",
        "use super::super::{\n    notify,\n    store,\n};",
        "use crate::{notify};",
        "use crate::{store, notify as n};",
    ] {
        assert!(names_the_notifier(named), "not seen: {named}");
    }
    for other in [
        "use crate::config::notify::NotifyEvent;",
        "use crate::{config::notify::NotifyEvent, model};",
        "use crate::{config::{notify::NotifyEvent, Role}, model};",
        "self.outbox_wake.notify_one();",
        "outbox_wake: tokio::sync::Notify::new(),",
        "INSERT INTO notify_outbox (message_id) VALUES (?1)",
        "use super::notify_pages;",
        "use crate::{notifyish, model};",
    ] {
        assert!(!names_the_notifier(other), "seen where it is not: {other}");
    }
}

/// A scratch crate with `body` as its library, checked by clippy under the repository's
/// `clippy.toml`; the output and whether it passed.
fn clippy_scratch(body: &str) -> (bool, String) {
    let dir = tempfile::Builder::new().prefix("ab-tidy-").tempdir().expect("temp dir");
    std::fs::copy(root().join("clippy.toml"), dir.path().join("clippy.toml")).expect("copy clippy.toml");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[workspace]\n",
    )
    .expect("write Cargo.toml");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::write(dir.path().join("src/lib.rs"), body).expect("write lib.rs");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["clippy", "--offline", "--quiet", "--", "-D", "warnings"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo clippy");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn clippy_refuses_a_deliberate_violation_of_each_rule() {
    let (passed, out) = clippy_scratch(
        "//! A scratch crate breaking the rules.\n\
         pub fn spawn() { let _ = std::process::Command::new(\"true\"); }\n\
         pub fn setting() -> Option<std::ffi::OsString> { std::env::var_os(\"HOME\") }\n\
         pub fn blocking() -> std::io::Result<String> { std::fs::read_to_string(\"/etc/hostname\") }\n",
    );
    assert!(!passed, "clippy accepted a crate that spawns, reads the environment and blocks:\n{out}");
    for (what, expected) in [
        ("a process spawned outside provider/spawner.rs", "std::process::Command"),
        ("the environment read outside config/", "std::env::var_os"),
        ("blocking file I/O", "std::fs::read_to_string"),
    ] {
        assert!(out.contains(expected), "clippy did not name {what} (`{expected}`):\n{out}");
    }
    assert!(out.contains("only provider/spawner.rs builds a Command"), "the reason is shown:\n{out}");
    // The one sanctioned way out: an `expect` on the item, with its reason.
    let (passed, out) = clippy_scratch(
        "//! A scratch crate with a sanctioned exception.\n\
         #[expect(clippy::disallowed_methods, reason = \"this module is the configuration\")]\n\
         pub fn setting() -> Option<std::ffi::OsString> { std::env::var_os(\"HOME\") }\n",
    );
    assert!(passed, "an item-level expect with a reason should pass:\n{out}");
}

#[test]
fn every_clippy_rule_gives_its_reason() {
    let text = std::fs::read_to_string(root().join("clippy.toml")).expect("read clippy.toml");
    let rules: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("{ path = ")).collect();
    assert!(rules.len() >= 10, "clippy.toml holds {} rules", rules.len());
    for rule in rules {
        assert!(rule.contains("reason = \""), "a rule without its reason: {rule}");
    }
}
