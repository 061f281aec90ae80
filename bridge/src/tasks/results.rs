//! Final results: inline up to the spool threshold, spooled to a private file up to 8 MiB,
//! read back in UTF-8-safe chunks; the SHA-256 of the full text is always recorded.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::MAX_SPOOLED_RESULT_BYTES;
use crate::error::{ToolError, code};
use crate::model::ResultStorage;
use crate::store::tasks::ResultFields;

/// The preview kept in the task row for a spooled result.
pub const PREVIEW_BYTES: usize = 65_536;
/// The largest chunk `read_agent_task_result` returns.
pub const MAX_CHUNK_BYTES: usize = 65_536;

/// SHA-256 as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::ids::hex(&Sha256::digest(bytes))
}

/// The spool directory inside the state directory.
pub fn spool_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("results")
}

fn spool_path(state_dir: &Path, task_id: &str) -> PathBuf {
    spool_dir(state_dir).join(format!("{task_id}.txt"))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn utf8_prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Stores a (redacted) final response: inline, or spooled atomically to a 0600 file.
/// Blocking: call off the reactor.
pub fn store(state_dir: &Path, task_id: &str, text: &str, threshold: u64) -> Result<ResultFields, ToolError> {
    let size = text.len() as u64;
    let sha256 = sha256_hex(text.as_bytes());
    if size <= threshold {
        return Ok(ResultFields {
            final_response: text.to_owned(),
            storage: ResultStorage::Inline,
            size_bytes: size as i64,
            sha256,
        });
    }
    if size > MAX_SPOOLED_RESULT_BYTES {
        return Err(ToolError::new(
            code::AGENT_RESULT_TOO_LARGE,
            format!("the final response is {size} bytes; the most the bridge keeps is {MAX_SPOOLED_RESULT_BYTES}"),
        ));
    }
    write_spool(&spool_dir(state_dir), &format!("{task_id}.txt"), text, "the task result")?;
    Ok(ResultFields {
        final_response: utf8_prefix(text, PREVIEW_BYTES.min(threshold as usize)).to_owned(),
        storage: ResultStorage::Spool,
        size_bytes: size as i64,
        sha256,
    })
}

/// Reads a chunk of a spooled result: at most `max_bytes` from `offset`, never splitting a
/// character. Blocking: call off the reactor.
#[expect(
    clippy::disallowed_methods,
    reason = "the spool is written and read on a blocking thread (its callers use Store::call or spawn_blocking)"
)]
pub fn read_chunk(
    state_dir: &Path,
    task_id: &str,
    size: u64,
    offset: u64,
    max_bytes: usize,
) -> Result<Value, ToolError> {
    if offset > size {
        return Err(ToolError::new(
            code::INVALID_RESULT_OFFSET,
            format!("offset_bytes {offset} is past the end ({size} bytes)"),
        ));
    }
    let path = spool_path(state_dir, task_id);
    let unreadable = |why: String| ToolError::new(code::AGENT_RESULT_STORAGE_ERROR, why);
    let mut file =
        OpenOptions::new().read(true).custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits()).open(&path).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => {
                    ToolError::new(code::AGENT_RESULT_NOT_RETRIEVABLE, "the spooled result is gone")
                }
                _ => unreadable("the spooled result cannot be opened".into()),
            }
        })?;
    let meta = file.metadata().map_err(|_| unreadable("the spooled result cannot be inspected".into()))?;
    crate::files::check_private(&path, &meta, false).map_err(|_| unreadable("the spool file is not private".into()))?;
    if meta.len() != size {
        return Err(unreadable("the spool file does not match the recorded size".into()));
    }
    // Read up to three bytes more than asked so a character cut at the end can be detected.
    let want = (max_bytes as u64).min(size - offset) as usize;
    let mut buf = vec![0u8; (want + 3).min((size - offset) as usize)];
    file.seek(SeekFrom::Start(offset)).map_err(|_| unreadable("cannot seek the spool file".into()))?;
    file.read_exact(&mut buf).map_err(|_| unreadable("cannot read the spool file".into()))?;
    let text = utf8_chunk(&buf, want, offset, max_bytes)?;
    let next = offset + text.len() as u64;
    Ok(json!({
        "text": text,
        "offset_bytes": offset,
        "next_offset_bytes": next,
        "eof": next >= size,
    }))
}

/// Writes `text` as `name` in the private spool directory `dir`, atomically: a 0600 temporary
/// file, synced, then renamed; an existing file of that name is refused. `what` names the text
/// in errors. Blocking.
#[expect(
    clippy::disallowed_methods,
    reason = "the spool is written and read on a blocking thread (its callers use Store::call or spawn_blocking)"
)]
pub fn write_spool(dir: &Path, name: &str, text: &str, what: &str) -> Result<(), ToolError> {
    let storage_error = |e: std::io::Error| ToolError::internal(&format!("cannot spool {what}"), e);
    crate::files::ensure_private_dir(dir)
        .map_err(|e| ToolError::internal(&format!("cannot create the spool for {what}"), e))?;
    let target = dir.join(name);
    let temp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&temp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&temp)
        .map_err(storage_error)?;
    file.write_all(text.as_bytes()).map_err(storage_error)?;
    file.sync_all().map_err(storage_error)?;
    drop(file);
    if std::fs::symlink_metadata(&target).is_ok() {
        let _ = std::fs::remove_file(&temp);
        return Err(ToolError::new(
            code::AGENT_RESULT_STORAGE_ERROR,
            format!("a spool file for {what} already exists"),
        ));
    }
    std::fs::rename(&temp, &target).map_err(storage_error)
}

/// The text of a chunk: `buf` holds the bytes from `offset` on — `want` asked for and up to
/// three more, so a character cut at the end is seen — and the chunk ends before any partial
/// character. An offset inside a character, or a limit that cannot hold the next one, is
/// refused by name.
pub fn utf8_chunk(buf: &[u8], want: usize, offset: u64, max_bytes: usize) -> Result<&str, ToolError> {
    if buf.first().is_some_and(|b| (0x80..0xC0).contains(b)) {
        return Err(ToolError::new(
            code::INVALID_RESULT_OFFSET,
            format!("offset_bytes {offset} falls inside a character"),
        ));
    }
    let mut end = want.min(buf.len());
    while end > 0 && end < buf.len() && (0x80..0xC0).contains(&buf[end]) {
        end -= 1;
    }
    if end == 0 && want > 0 {
        return Err(ToolError::new(
            code::INVALID_RESULT_LIMIT,
            format!("max_bytes {max_bytes} cannot hold the next character"),
        ));
    }
    std::str::from_utf8(&buf[..end])
        .map_err(|_| ToolError::new(code::AGENT_RESULT_STORAGE_ERROR, "the stored text is not valid UTF-8"))
}

/// Deletes these tasks' spool files, those present, off the reactor.
#[expect(
    clippy::disallowed_methods,
    reason = "the spool is written and read on a blocking thread (its callers use Store::call or spawn_blocking)"
)]
pub async fn delete(state_dir: PathBuf, task_ids: Vec<String>) {
    if task_ids.is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for task_id in task_ids {
            let _ = std::fs::remove_file(spool_path(&state_dir, &task_id));
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::fake_agent::big_text;

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn inline_below_threshold_spool_above() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        crate::files::ensure_private_dir(&state).unwrap();
        let small = store(&state, "agt_1", "hello", 10).unwrap();
        assert_eq!(small.storage, ResultStorage::Inline);
        let text = big_text(1000);
        let big = store(&state, "agt_2", &text, 100).unwrap();
        assert_eq!(big.storage, ResultStorage::Spool);
        assert!(big.final_response.len() <= 100);
        assert_eq!(big.sha256, sha256_hex(text.as_bytes()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join("results/agt_2.txt")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let huge = "x".repeat(MAX_SPOOLED_RESULT_BYTES as usize + 1);
        assert_eq!(store(&state, "agt_3", &huge, 100).unwrap_err().code, code::AGENT_RESULT_TOO_LARGE);
    }

    #[test]
    fn chunked_reads_reassemble_exactly_for_every_chunk_size() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        crate::files::ensure_private_dir(&state).unwrap();
        let text = big_text(5000);
        store(&state, "agt_x", &text, 10).unwrap();
        for max in [4usize, 5, 7, 13, 64, 4096, 65_536] {
            let mut out = String::new();
            let mut offset = 0u64;
            loop {
                let chunk = read_chunk(&state, "agt_x", text.len() as u64, offset, max).unwrap();
                out.push_str(chunk["text"].as_str().unwrap());
                offset = chunk["next_offset_bytes"].as_u64().unwrap();
                if chunk["eof"].as_bool().unwrap() {
                    break;
                }
            }
            assert_eq!(out, text, "max_bytes {max}");
        }
        let mid = text.char_indices().find(|(_, c)| c.len_utf8() > 1).unwrap().0 + 1;
        let err = read_chunk(&state, "agt_x", text.len() as u64, mid as u64, 100).unwrap_err();
        assert_eq!(err.code, code::INVALID_RESULT_OFFSET);
        let four = text.char_indices().find(|(_, c)| c.len_utf8() == 4).unwrap().0;
        let err = read_chunk(&state, "agt_x", text.len() as u64, four as u64, 3).unwrap_err();
        assert_eq!(err.code, code::INVALID_RESULT_LIMIT);
        let err = read_chunk(&state, "agt_x", text.len() as u64, text.len() as u64 + 1, 3).unwrap_err();
        assert_eq!(err.code, code::INVALID_RESULT_OFFSET);
    }
}
