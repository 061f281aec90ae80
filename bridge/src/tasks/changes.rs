//! A task's change set from its snapshot's output: the files added, modified, deleted or
//! renamed with their line counts, and the unified diff cut into one section per file,
//! redacted, bounded (a cut diff says where it was cut) and stored inline or spooled.

use std::path::Path;

use serde_json::{Value, json};

use super::diffs::Span;
use super::redact::Redactor;
use crate::error::ToolError;
use crate::model::ResultStorage;
use crate::provider::snapshot::{Method, PATCH_LIMIT, RawChangeSet};
use crate::store::accounting::NewChanges;

/// The most files the public summary lists (the counts and the diff cover them all).
const LISTED_FILES: usize = 500;

/// One changed file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange {
    /// The path relative to the workdir.
    pub path: String,
    /// The previous path, for a rename or a copy.
    pub old_path: Option<String>,
    /// `added`, `modified`, `deleted`, `renamed`, `copied` or `type_changed`.
    pub status: &'static str,
    /// Lines added (0 for a binary file).
    pub added: u64,
    /// Lines removed (0 for a binary file).
    pub removed: u64,
    /// A binary file: named, its content not shown.
    pub binary: bool,
}

/// A parsed change set.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeSet {
    /// The changed files, in git's order.
    pub files: Vec<FileChange>,
    /// The unified diff (redacted; cut at the bound, with a marker).
    pub diff: String,
    /// Each file's section of `diff`, when every section could be matched to its file.
    pub spans: Vec<Span>,
    /// The diff was cut at its bound.
    pub truncated: bool,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses `git diff-tree -z --name-status` output.
pub fn parse_status(raw: &[u8]) -> Result<Vec<FileChange>, String> {
    let mut fields = raw.split(|b| *b == 0);
    let mut files = Vec::new();
    while let Some(code) = fields.next() {
        if code.is_empty() {
            continue;
        }
        let mut path = || fields.next().filter(|p| !p.is_empty()).map(text).ok_or("a path is missing");
        let (status, old_path, path) = match code.first() {
            Some(b'A') => ("added", None, path()?),
            Some(b'M') => ("modified", None, path()?),
            Some(b'D') => ("deleted", None, path()?),
            Some(b'T') => ("type_changed", None, path()?),
            Some(b'R') => ("renamed", Some(path()?), path()?),
            Some(b'C') => ("copied", Some(path()?), path()?),
            _ => return Err(format!("an unknown change status {:?}", text(code))),
        };
        files.push(FileChange { path, old_path, status, added: 0, removed: 0, binary: false });
    }
    Ok(files)
}

/// Adds `git diff-tree -z --numstat` counts to `files` (same order; checked path by path).
pub fn add_counts(files: &mut [FileChange], raw: &[u8]) -> Result<(), String> {
    let mut fields = raw.split(|b| *b == 0).peekable();
    for file in files.iter_mut() {
        let head = fields.next().filter(|h| !h.is_empty()).ok_or("the line counts end early")?;
        let mut parts = head.splitn(3, |b| *b == b'\t');
        let (added, removed) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let path = match parts.next() {
            Some(p) if !p.is_empty() => text(p),
            // A rename: the two paths follow as fields of their own.
            _ => {
                let _old = fields.next().ok_or("a renamed file's old path is missing")?;
                text(fields.next().ok_or("a renamed file's new path is missing")?)
            }
        };
        if path != file.path {
            return Err("the line counts and the file list disagree".to_owned());
        }
        match (added, removed) {
            (b"-", b"-") => file.binary = true,
            _ => {
                let count = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok());
                file.added = count(added).ok_or("a line count is not a number")?;
                file.removed = count(removed).ok_or("a line count is not a number")?;
            }
        }
    }
    if fields.any(|f| !f.is_empty()) {
        return Err("the line counts name more files than the file list".to_owned());
    }
    Ok(())
}

/// Where each file's section starts in a patch (every `diff --git ` at a line start).
fn section_starts(patch: &[u8]) -> Vec<usize> {
    const HEAD: &[u8] = b"diff --git ";
    let mut starts = Vec::new();
    let mut at = 0;
    while at < patch.len() {
        if patch[at..].starts_with(HEAD) {
            starts.push(at);
        }
        match patch[at..].iter().position(|b| *b == b'\n') {
            Some(nl) => at += nl + 1,
            None => break,
        }
    }
    starts
}

/// Parses the raw output into a change set; the diff is redacted section by section.
pub fn parse(raw: &RawChangeSet, redactor: &Redactor) -> Result<ChangeSet, String> {
    if raw.list_cut {
        return Err("more files changed than the bridge lists".to_owned());
    }
    let mut files = parse_status(&raw.status)?;
    add_counts(&mut files, &raw.numstat)?;
    let mut patch: &[u8] = &raw.patch;
    if raw.patch_cut {
        // Cut at the last whole line.
        let end = patch.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
        patch = &patch[..end];
    }
    let starts = section_starts(patch);
    let matched = if raw.patch_cut { starts.len() <= files.len() } else { starts.len() == files.len() };
    let mut diff = String::with_capacity(patch.len());
    let mut spans = Vec::new();
    if !patch.is_empty() && starts.first() != Some(&0) {
        return Err("the diff does not start with a file's section".to_owned());
    }
    for (i, start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(patch.len());
        let offset = diff.len() as u64;
        diff.push_str(&redactor.text(&text(&patch[*start..end])));
        if raw.patch_cut && i + 1 == starts.len() {
            let whole = starts.len().saturating_sub(1);
            diff.push_str(&format!(
                "\n# agent-bridge: the diff is cut here at its {} MiB bound; {whole} of {} files are shown whole\n",
                PATCH_LIMIT >> 20,
                files.len()
            ));
        }
        if matched && let Some(file) = files.get(i) {
            spans.push(Span {
                path: file.path.clone(),
                old_path: file.old_path.clone(),
                offset,
                len: diff.len() as u64 - offset,
            });
        }
    }
    if !matched {
        tracing::warn!(sections = starts.len(), files = files.len(), "the diff's sections do not match its files");
    }
    Ok(ChangeSet { files, diff, spans, truncated: raw.patch_cut })
}

/// The public summary of a change set.
pub fn summary(set: &ChangeSet, method: Method) -> Value {
    let listed: Vec<Value> = set
        .files
        .iter()
        .take(LISTED_FILES)
        .map(|f| {
            let mut v = json!({ "path": f.path, "status": f.status, "added": f.added, "removed": f.removed });
            if let Some(old) = &f.old_path {
                v["old_path"] = json!(old);
            }
            if f.binary {
                v["binary"] = json!(true);
            }
            v
        })
        .collect();
    json!({
        "method": method.as_str(),
        "files_changed": set.files.len(),
        "added": set.files.iter().map(|f| f.added).sum::<u64>(),
        "removed": set.files.iter().map(|f| f.removed).sum::<u64>(),
        "binary_files": set.files.iter().filter(|f| f.binary).count(),
        "truncated": set.truncated,
        "diff_size_bytes": set.diff.len(),
        "files": listed,
        "files_listed": set.files.len().min(LISTED_FILES),
    })
}

/// The row for a recorded change set: the diff inline up to `threshold` bytes, else spooled
/// (`<state>/diffs/<task>.diff`). Blocking.
pub fn recorded(
    state_dir: &Path,
    task_id: &str,
    set: &ChangeSet,
    method: Method,
    threshold: u64,
) -> Result<NewChanges, ToolError> {
    let size = set.diff.len() as u64;
    let storage = match size {
        0 => None,
        s if s <= threshold => Some(ResultStorage::Inline),
        _ => {
            super::diffs::spool(state_dir, task_id, &set.diff)?;
            Some(ResultStorage::Spool)
        }
    };
    Ok(NewChanges {
        status: "recorded",
        reason: None,
        method: Some(method.as_str().to_owned()),
        files_changed: set.files.len() as i64,
        added: set.files.iter().map(|f| f.added as i64).sum(),
        removed: set.files.iter().map(|f| f.removed as i64).sum(),
        truncated: set.truncated,
        summary_json: Some(summary(set, method).to_string()),
        index_json: Some(serde_json::to_string(&set.spans).unwrap_or_else(|_| "[]".to_owned())),
        diff_storage: storage,
        diff_text: (storage == Some(ResultStorage::Inline)).then(|| set.diff.clone()),
        diff_size_bytes: size as i64,
        diff_sha256: (size > 0).then(|| super::results::sha256_hex(set.diff.as_bytes())),
    })
}

/// The row for a change set that could not be recorded, and why.
pub fn not_recorded(reason: String, method: Option<Method>) -> NewChanges {
    NewChanges {
        status: "not_recorded",
        reason: Some(reason),
        method: method.map(|m| m.as_str().to_owned()),
        files_changed: 0,
        added: 0,
        removed: 0,
        truncated: false,
        summary_json: None,
        index_json: None,
        diff_storage: None,
        diff_text: None,
        diff_size_bytes: 0,
        diff_sha256: None,
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
