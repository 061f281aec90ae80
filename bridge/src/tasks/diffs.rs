//! A task's diff at rest: inline in its change-set row up to the spool threshold, else in a
//! private spool file (`<state>/diffs/<task>.diff`, 0600, written atomically), and read back
//! whole or one file's section at a time in chunks that never split a character.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ToolError, code};
use crate::model::ResultStorage;
use crate::store::accounting::ChangesRow;

/// One file's section of the stored diff.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// The path relative to the workdir.
    pub path: String,
    /// The file's previous path, for a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// Byte offset of its section in the diff.
    pub offset: u64,
    /// Byte length of its section.
    pub len: u64,
}

fn diff_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("diffs")
}

fn diff_path(state_dir: &Path, task_id: &str) -> PathBuf {
    diff_dir(state_dir).join(format!("{task_id}.diff"))
}

/// Writes a task's diff to its private spool file (0600, atomically). Blocking.
pub fn spool(state_dir: &Path, task_id: &str, text: &str) -> Result<(), ToolError> {
    super::results::write_spool(&diff_dir(state_dir), &format!("{task_id}.diff"), text, "the task's diff")
}

/// Reads a chunk of a task's diff — the whole diff, or the section of the file at `path`
/// (its new or, for a rename, old path) — at most `max_bytes` from `offset` within it,
/// never splitting a character. Blocking.
pub fn read_chunk(
    state_dir: &Path,
    task_id: &str,
    row: &ChangesRow,
    path: Option<&str>,
    offset: u64,
    max_bytes: usize,
) -> Result<Value, ToolError> {
    let (start, len) = match path {
        None => (0, row.diff_size_bytes.max(0) as u64),
        Some(wanted) => {
            let spans: Vec<Span> =
                row.index_json.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
            let span = spans
                .iter()
                .find(|s| s.path == wanted)
                .or_else(|| spans.iter().find(|s| s.old_path.as_deref() == Some(wanted)))
                .ok_or_else(|| {
                    ToolError::new(code::INVALID_ARGUMENT, "parameter 'path' names no file of this change set")
                })?;
            (span.offset, span.len)
        }
    };
    if offset > len {
        return Err(ToolError::new(
            code::INVALID_RESULT_OFFSET,
            format!("offset_bytes {offset} is past the end ({len} bytes)"),
        ));
    }
    // Up to three bytes more than asked so a character cut at the end can be detected.
    let want = (max_bytes as u64).min(len - offset) as usize;
    let take = (want + 3).min((len - offset) as usize);
    let buf = read_bytes(state_dir, task_id, row, start + offset, take)?;
    let text = super::results::utf8_chunk(&buf, want, offset, max_bytes)?;
    let next = offset + text.len() as u64;
    Ok(json!({
        "task_id": task_id,
        "path": path,
        "text": text,
        "offset_bytes": offset,
        "next_offset_bytes": next,
        "size_bytes": len,
        "eof": next >= len,
        "truncated": row.truncated,
    }))
}

#[expect(
    clippy::disallowed_methods,
    reason = "the spool is written and read on a blocking thread (its callers use spawn_blocking)"
)]
fn read_bytes(state_dir: &Path, task_id: &str, row: &ChangesRow, at: u64, n: usize) -> Result<Vec<u8>, ToolError> {
    let broken = |why: &str| ToolError::new(code::AGENT_RESULT_STORAGE_ERROR, why.to_owned());
    match row.diff_storage {
        None => Ok(Vec::new()),
        Some(ResultStorage::Inline) => {
            let text = row.diff_text.as_deref().unwrap_or("").as_bytes();
            let from = (at as usize).min(text.len());
            Ok(text[from..(from + n).min(text.len())].to_vec())
        }
        Some(ResultStorage::Spool) => {
            let path = diff_path(state_dir, task_id);
            let mut file =
                OpenOptions::new().read(true).custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits()).open(&path).map_err(
                    |e| match e.kind() {
                        std::io::ErrorKind::NotFound => {
                            ToolError::new(code::AGENT_RESULT_NOT_RETRIEVABLE, "the spooled diff is gone")
                        }
                        _ => broken("the spooled diff cannot be opened"),
                    },
                )?;
            let meta = file.metadata().map_err(|_| broken("the spooled diff cannot be inspected"))?;
            crate::files::check_private(&path, &meta, false)
                .map_err(|_| broken("the diff spool file is not private"))?;
            if meta.len() != row.diff_size_bytes.max(0) as u64 {
                return Err(broken("the diff spool file does not match the recorded size"));
            }
            let mut buf = vec![0u8; n];
            file.seek(SeekFrom::Start(at)).map_err(|_| broken("cannot seek the diff spool file"))?;
            file.read_exact(&mut buf).map_err(|_| broken("cannot read the diff spool file"))?;
            Ok(buf)
        }
    }
}

/// Deletes these tasks' diff spool files, those present, off the reactor.
#[expect(
    clippy::disallowed_methods,
    reason = "the spool is written and read on a blocking thread (its callers use spawn_blocking)"
)]
pub async fn delete(state_dir: PathBuf, task_ids: Vec<String>) {
    if task_ids.is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for task_id in task_ids {
            let _ = std::fs::remove_file(diff_path(&state_dir, &task_id));
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "diff --git a/a.txt b/a.txt\n+é€😀\ndiff --git a/b.txt b/b.txt\n-old\n+new\n";

    fn row(storage: ResultStorage, state: &Path) -> ChangesRow {
        let second = DIFF.find("diff --git a/b.txt").unwrap() as u64;
        let spans = vec![
            Span { path: "a.txt".into(), old_path: None, offset: 0, len: second },
            Span {
                path: "b.txt".into(),
                old_path: Some("old-b.txt".into()),
                offset: second,
                len: DIFF.len() as u64 - second,
            },
        ];
        if storage == ResultStorage::Spool {
            crate::files::ensure_private_dir(state).unwrap();
            spool(state, "agt_1", DIFF).unwrap();
        }
        ChangesRow {
            status: "recorded".into(),
            reason: None,
            summary_json: None,
            index_json: Some(serde_json::to_string(&spans).unwrap()),
            diff_storage: Some(storage),
            diff_text: (storage == ResultStorage::Inline).then(|| DIFF.to_owned()),
            diff_size_bytes: DIFF.len() as i64,
            diff_sha256: None,
            truncated: false,
        }
    }

    fn read_all(state: &Path, row: &ChangesRow, path: Option<&str>, max: usize) -> String {
        let mut out = String::new();
        let mut offset = 0;
        loop {
            let chunk = read_chunk(state, "agt_1", row, path, offset, max).unwrap();
            out.push_str(chunk["text"].as_str().unwrap());
            offset = chunk["next_offset_bytes"].as_u64().unwrap();
            if chunk["eof"] == true {
                return out;
            }
        }
    }

    #[test]
    fn inline_and_spooled_diffs_read_back_whole_and_per_file_in_every_chunk_size() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        for storage in [ResultStorage::Inline, ResultStorage::Spool] {
            let row = row(storage, &state);
            for max in [4usize, 5, 7, 64, 65_536] {
                assert_eq!(read_all(&state, &row, None, max), DIFF, "{storage:?} {max}");
                let a = read_all(&state, &row, Some("a.txt"), max);
                assert!(a.starts_with("diff --git a/a.txt") && !a.contains("b.txt"), "{a}");
                let b = read_all(&state, &row, Some("old-b.txt"), max);
                assert!(b.starts_with("diff --git a/b.txt") && b.ends_with("+new\n"), "{b}");
            }
        }
    }

    #[test]
    fn bad_offsets_limits_and_paths_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let row = row(ResultStorage::Inline, &state);
        let inside = DIFF.find('é').unwrap() as u64 + 1;
        assert_eq!(read_chunk(&state, "agt_1", &row, None, inside, 10).unwrap_err().code, code::INVALID_RESULT_OFFSET);
        let emoji = DIFF.find('😀').unwrap() as u64;
        assert_eq!(read_chunk(&state, "agt_1", &row, None, emoji, 3).unwrap_err().code, code::INVALID_RESULT_LIMIT);
        let past = DIFF.len() as u64 + 1;
        assert_eq!(read_chunk(&state, "agt_1", &row, None, past, 3).unwrap_err().code, code::INVALID_RESULT_OFFSET);
        let err = read_chunk(&state, "agt_1", &row, Some("../etc/passwd"), 0, 10).unwrap_err();
        assert_eq!(err.code, code::INVALID_ARGUMENT);
        assert!(err.message.contains("'path'"), "{}", err.message);
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn a_spool_file_that_changed_size_or_went_away_is_an_error_not_a_wrong_answer() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let row = row(ResultStorage::Spool, &state);
        std::fs::write(diff_path(&state, "agt_1"), "short").unwrap();
        assert_eq!(read_chunk(&state, "agt_1", &row, None, 0, 10).unwrap_err().code, code::AGENT_RESULT_STORAGE_ERROR);
        std::fs::remove_file(diff_path(&state, "agt_1")).unwrap();
        assert_eq!(
            read_chunk(&state, "agt_1", &row, None, 0, 10).unwrap_err().code,
            code::AGENT_RESULT_NOT_RETRIEVABLE
        );
    }
}
