//! The caller's relative `path`: syntax checks, then resolution inside the workdir.

use std::path::{Component, Path, PathBuf};

use crate::error::{ToolError, code};

/// Normalizes a caller-supplied relative path: refuses NUL, backslashes, absolute paths and
/// `..`; drops `.` and empty components. The workdir root is `""`.
pub fn normalize(path: &str) -> Result<String, ToolError> {
    let bad = |why: &str| ToolError::new(code::INVALID_WORKDIR_PATH, format!("path {why}"));
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    if path.contains('\\') {
        return Err(bad("contains a backslash; use '/'"));
    }
    if path.starts_with('/') || path.starts_with('~') {
        return Err(bad("must be relative to the workdir"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(bad("must not contain '..'")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// Resolves a normalized relative path under `root` (a canonical directory), following
/// symlinks, and checks it stays inside and is a directory (blocking: call off the reactor).
pub fn resolve(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let candidate = if relative.is_empty() { root.to_owned() } else { root.join(relative) };
    let resolved = match candidate.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ToolError::new(
                code::WORKDIR_PATH_NOT_FOUND,
                format!("path {relative:?} does not exist in the workdir"),
            ));
        }
        Err(_) => {
            return Err(ToolError::new(code::INVALID_WORKDIR_PATH, format!("path {relative:?} cannot be resolved")));
        }
    };
    let inside =
        resolved.strip_prefix(root).is_ok_and(|rest| rest.components().all(|c| matches!(c, Component::Normal(_))));
    if !inside {
        return Err(ToolError::new(code::INVALID_WORKDIR_PATH, format!("path {relative:?} escapes the workdir")));
    }
    if !resolved.is_dir() {
        return Err(ToolError::new(code::INVALID_WORKDIR_PATH, format!("path {relative:?} is not a directory")));
    }
    Ok(resolved)
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_refuses() {
        assert_eq!(normalize("").unwrap(), "");
        assert_eq!(normalize("./a//b/./").unwrap(), "a/b");
        for bad in ["/etc", "a/../b", "..", "a\\b", "a\0b", "~/x"] {
            assert_eq!(normalize(bad).unwrap_err().code, code::INVALID_WORKDIR_PATH, "{bad:?}");
        }
    }

    #[test]
    fn resolution_stays_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("escape")).unwrap();
        let root = root.canonicalize().unwrap();
        assert_eq!(resolve(&root, "").unwrap(), root);
        assert_eq!(resolve(&root, "sub").unwrap(), root.join("sub"));
        assert_eq!(resolve(&root, "missing").unwrap_err().code, code::WORKDIR_PATH_NOT_FOUND);
        assert_eq!(resolve(&root, "file").unwrap_err().code, code::INVALID_WORKDIR_PATH);
        let err = resolve(&root, "escape").unwrap_err();
        assert_eq!(err.code, code::INVALID_WORKDIR_PATH);
        assert!(!err.message.contains(dir.path().to_str().unwrap()), "no host path in {err:?}");
    }
}
