//! The tidy checks: every Rust file opens with a `//!` line saying what it is for,
//! ARCHITECTURE.md's code map names every module of every crate, and the `.env` syntax is
//! read in one place (rust-analyzer's tidy test is the model). They read the repository's
//! files; they start nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository root (this crate is `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository root").to_owned()
}

/// Every `.rs` file under `dir`, skipping build output and the tools' installs.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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

/// The crate directories, each with its code map section (`### `dir/``).
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

/// The code map's section of one crate: from the `### ` heading that names `` `dir/` `` to the
/// next heading.
fn section<'a>(map: &'a str, dir: &str) -> &'a str {
    let needle = format!("### `{dir}/`");
    let start = map.find(&needle).unwrap_or_else(|| panic!("ARCHITECTURE.md has no code map section `{needle}`"));
    let rest = &map[start + needle.len()..];
    let end = rest.find("\n## ").into_iter().chain(rest.find("\n### ")).min().unwrap_or(rest.len());
    &rest[..end]
}

/// The modules a section must name, for a crate whose modules live under `src`: each file as
/// `` `name.rs` `` (or with its folder, `` `folder/name.rs` ``), each folder as `` `folder/` ``.
/// Crate roots (`lib.rs`, `main.rs`) and `mod.rs` are their folder; unit-test files
/// (`tests.rs`, `*_tests.rs`, and everything under a `tests/` folder) belong to their parent;
/// fuzz modules (`*_fuzz.rs`) are listed in the fuzz section by path.
fn expected_names(src: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let name = parts.last().expect("a file name").clone();
        let folders = &parts[..parts.len() - 1];
        if folders.iter().any(|f| f == "tests")
            || name == "tests.rs"
            || name.ends_with("_tests.rs")
            || name.ends_with("_fuzz.rs")
        {
            continue;
        }
        for folder in folders {
            names.insert(format!("{folder}/"));
        }
        if !matches!(name.as_str(), "lib.rs" | "main.rs" | "mod.rs") {
            names.insert(name);
        }
    }
    names
}

fn mentions(section: &str, name: &str) -> bool {
    section.contains(&format!("`{name}"))
        || section.contains(&format!("/{name}`"))
        || section.contains(&format!("/{name}:"))
}

#[test]
fn the_code_map_names_every_module() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let map_start = text.find("## Code map").expect("ARCHITECTURE.md has a `## Code map`");
    let map = &text[map_start..];
    let map = &map[..map.find("\n## Cross-cutting").unwrap_or(map.len())];
    let mut missing = Vec::new();
    for dir in CRATES {
        let section = section(map, dir);
        // The e2e crate's library is `harness/` beside its test binaries, whose modules are
        // areas of the suite, not parts of the architecture.
        let names = if *dir == "tests" {
            let mut names = expected_names(&root.join("tests").join("harness"));
            names.insert("harness/".to_owned());
            names
        } else {
            expected_names(&root.join(dir).join("src"))
        };
        for name in names {
            if !mentions(section, &name) {
                missing.push(format!("{dir}: {name}"));
            }
        }
    }
    let fuzz = section(map, "fuzz");
    for dir in CRATES {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for file in files.iter().filter(|f| f.to_string_lossy().ends_with("_fuzz.rs")) {
            let rel = file.strip_prefix(&root).expect("under the root").display().to_string();
            if !fuzz.contains(&format!("`{rel}`")) {
                missing.push(format!("fuzz: {rel}"));
            }
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md's code map does not name these modules: {missing:?}");
}

#[test]
fn the_tidy_walk_sees_a_missing_module() {
    // The check must be able to fail: a name no section holds is reported.
    let map = "## Code map\n### `proto/` (crate)\n`envelope.rs` and `codes.rs`\n### `bridge/`\n";
    assert!(mentions(section(map, "proto"), "envelope.rs"));
    assert!(!mentions(section(map, "proto"), "framing.rs"));
    assert!(!mentions(section(map, "bridge"), "envelope.rs"));
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
