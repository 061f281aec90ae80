//! Writes the bridge's private JSON config: owner-only (0600), atomically, never through a symlink.
//!
//! The JSON goes to a fresh temporary file in the output's directory (created exclusively,
//! without following symlinks, mode 0600), is flushed to disk, renamed over the output, and
//! the directory is flushed so the rename survives a crash. A reader sees the old file or the
//! new one, never a mix.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::BridgeConfig;

/// The only mode the rendered file may have.
const PRIVATE_MODE: u32 = 0o600;

/// How many temporary names are tried before giving up.
const TEMP_ATTEMPTS: u32 = 16;

/// Why the private config could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The output path is a symbolic link, which is never written through.
    #[error("refusing to write {path}: it is a symbolic link")]
    Symlink {
        /// The output path.
        path: PathBuf,
    },
    /// The output path exists and is not a regular file.
    #[error("refusing to write {path}: it exists and is not a regular file")]
    NotAFile {
        /// The output path.
        path: PathBuf,
    },
    /// The output path names no file.
    #[error("{path} does not name a file")]
    NoFileName {
        /// The output path.
        path: PathBuf,
    },
    /// The directory that should hold the output does not exist.
    #[error("the directory {dir} does not exist: create it (mode 0700) first")]
    MissingParent {
        /// The missing directory.
        dir: PathBuf,
    },
    /// The output's parent exists but is not a directory.
    #[error("{dir} is not a directory")]
    ParentNotADirectory {
        /// The parent path.
        dir: PathBuf,
    },
    /// The config could not be serialized.
    #[error("cannot serialize the config: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A file-system step failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RenderError {
    let path = path.to_owned();
    move |source| RenderError::Io { action, path, source }
}

/// Writes `config` as pretty JSON to `output`, atomically and readable by its owner only.
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
pub fn write_private_json(config: &BridgeConfig, output: &Path) -> Result<(), RenderError> {
    let mut json = serde_json::to_string_pretty(config)?;
    json.push('\n');

    let file_name = output.file_name().ok_or_else(|| RenderError::NoFileName { path: output.to_owned() })?;
    let dir = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(RenderError::ParentNotADirectory { dir }),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(RenderError::MissingParent { dir });
        }
        Err(e) => return Err(io_error("inspect", &dir)(e)),
    }
    match std::fs::symlink_metadata(output) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(RenderError::Symlink { path: output.to_owned() });
        }
        Ok(meta) if !meta.is_file() => {
            return Err(RenderError::NotAFile { path: output.to_owned() });
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("inspect", output)(e)),
    }

    let (temp_path, mut file) = create_temp(&dir, &file_name.to_string_lossy())?;
    let written = write_and_sync(&mut file, &temp_path, json.as_bytes())
        .and_then(|()| std::fs::rename(&temp_path, output).map_err(io_error("rename onto", output)));
    drop(file);
    if let Err(e) = written {
        // The temporary file is ours; removing it is best effort.
        let _ = std::fs::remove_file(&temp_path);
        return Err(e);
    }
    File::open(&dir).and_then(|d| d.sync_all()).map_err(io_error("flush the directory", &dir))
}

/// Creates a new private file beside the output, never following a symlink.
fn create_temp(dir: &Path, file_name: &str) -> Result<(PathBuf, File), RenderError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut last_error = None;
    for _ in 0..TEMP_ATTEMPTS {
        let serial = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{file_name}.{}.{nanos}.{serial}.tmp", std::process::id());
        let path = dir.join(name);
        match open_new_private(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(io_error("create", &path)(e)),
        }
    }
    let source = last_error.unwrap_or_else(|| std::io::Error::from(ErrorKind::AlreadyExists));
    Err(RenderError::Io { action: "create a temporary file in", path: dir.to_owned(), source })
}

/// Creates `path` exclusively (`O_EXCL`), mode 0600, refusing to follow a symlink (`O_NOFOLLOW`).
#[expect(
    clippy::disallowed_methods,
    reason = "configuration is read once, before the runtime serves, or in a CLI command"
)]
fn open_new_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(PRIVATE_MODE).custom_flags(nix::libc::O_NOFOLLOW).open(path)
}

/// Forces the mode to 0600 whatever the umask, writes the bytes and flushes them to disk.
fn write_and_sync(file: &mut File, path: &Path, bytes: &[u8]) -> Result<(), RenderError> {
    file.set_permissions(Permissions::from_mode(PRIVATE_MODE)).map_err(io_error("set the mode of", path))?;
    file.write_all(bytes).map_err(io_error("write", path))?;
    file.sync_all().map_err(io_error("flush", path))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::config::{AgentMode, Limits, McpAuth, RuntimeBinary, RuntimeName, Workdir};

    fn sample(workdir: &Path) -> BridgeConfig {
        BridgeConfig {
            socket_path: PathBuf::from("/run/user/1000/agent-bridge/bridge.sock"),
            state_dir: PathBuf::from("/home/op/.local/state/agent-bridge"),
            lock_dir: PathBuf::from("/home/op/.local/share/agent-bridge/runtime/locks"),
            allowed_peer_uid: Some(1000),
            allowed_peer_gid: None,
            allow_root: false,
            enable_fake_runtime: true,
            fake_exec: false,
            limits: Limits::default(),
            mcp_auth: McpAuth::default(),
            oauth: None,
            notify: Default::default(),
            codex: RuntimeBinary { bin: None, home: Some(PathBuf::from("/home/op/.codex")) },
            claude: RuntimeBinary::default(),
            workdirs: vec![Workdir {
                slot: 1,
                alias: "scratch".into(),
                path: workdir.to_owned(),
                description: "A scratch directory.".into(),
                read_only: false,
                agent_mode: AgentMode::WorkspaceWrite,
                runtimes: vec![RuntimeName::Fake],
                sandbox_read: vec![],
                sandbox_write: vec![],
                egress_allow: vec![],
                isolation: Default::default(),
            }],
            board_addr: crate::config::default_board_addr(),
            board_socket: None,
            log_level: crate::config::LogLevel::Warning,
            sandbox: crate::config::SandboxSettings::default(),
            branch_prefix: crate::config::default_branch_prefix(),
            config_file: None,
        }
    }

    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
    }

    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn writes_0600_atomically_and_round_trips() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let config = sample(dir.path());
        let output = dir.path().join("config.json");
        std::fs::write(&output, "old contents")?;
        std::fs::set_permissions(&output, Permissions::from_mode(0o644))?;

        // A permissive umask must not widen the file's mode.
        let previous = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let result = write_private_json(&config, &output);
        nix::sys::stat::umask(previous);
        result?;

        assert_eq!(mode_of(&output), 0o600);
        assert_eq!(entries(dir.path()), vec!["config.json".to_owned()], "no temporary file is left");
        let text = std::fs::read_to_string(&output)?;
        assert!(text.starts_with("{\n  \"socket_path\""), "pretty JSON in field order: {text}");
        assert_eq!(crate::config::load_json(&output)?, config);

        // Rendering the same config again yields the same bytes.
        write_private_json(&config, &output)?;
        assert_eq!(std::fs::read_to_string(&output)?, text);
        Ok(())
    }

    /// A config rendered before the board existed has no `board_addr`, one rendered before the
    /// log level was read has no `log_level`: each loads with its default.
    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn a_config_rendered_before_the_board_loads_with_its_default() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut value = serde_json::to_value(sample(dir.path()))?;
        value.as_object_mut().ok_or("an object")?.remove("board_addr");
        let output = dir.path().join("old.json");
        std::fs::write(&output, value.to_string())?;
        let loaded = crate::config::load_json(&output)?;
        assert_eq!(loaded.board_addr, crate::config::default_board_addr());
        assert_eq!(loaded, sample(dir.path()));

        value.as_object_mut().ok_or("an object")?.remove("log_level");
        std::fs::write(&output, value.to_string())?;
        assert_eq!(crate::config::load_json(&output)?.log_level, crate::config::LogLevel::Info);

        value["log_level"] = "LOUD".into();
        std::fs::write(&output, value.to_string())?;
        let refused = crate::config::load_json(&output).expect_err("an unknown level is refused");
        assert!(refused.to_string().contains("LOUD"), "{refused}");
        Ok(())
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn refuses_a_symlink_and_leaves_its_target_alone() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("target.json");
        std::fs::write(&target, "precious")?;
        let link = dir.path().join("config.json");
        symlink(&target, &link)?;

        let error = write_private_json(&sample(dir.path()), &link).err();
        assert!(matches!(error, Some(RenderError::Symlink { .. })), "{error:?}");
        assert_eq!(std::fs::read_to_string(&target)?, "precious");
        assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());
        assert_eq!(entries(dir.path()), vec!["config.json".to_owned(), "target.json".to_owned()]);

        let dangling = dir.path().join("dangling.json");
        symlink(dir.path().join("nowhere.json"), &dangling)?;
        let error = write_private_json(&sample(dir.path()), &dangling).err();
        assert!(matches!(error, Some(RenderError::Symlink { .. })), "{error:?}");
        assert!(!dir.path().join("nowhere.json").exists());
        Ok(())
    }

    #[test]
    fn refuses_a_missing_parent_and_a_directory() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let output = dir.path().join("missing").join("config.json");
        let error = write_private_json(&sample(dir.path()), &output).err();
        assert!(matches!(error, Some(RenderError::MissingParent { .. })), "{error:?}");
        let message = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("does not exist"), "{message}");

        let error = write_private_json(&sample(dir.path()), dir.path()).err();
        assert!(matches!(error, Some(RenderError::NotAFile { .. })), "{error:?}");
        Ok(())
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn the_temporary_file_is_never_opened_through_a_symlink() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("target");
        std::fs::write(&target, "precious")?;
        let planted = dir.path().join("planted");
        symlink(&target, &planted)?;
        assert!(open_new_private(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&target)?, "precious");

        let dangling = dir.path().join("dangling");
        symlink(dir.path().join("nowhere"), &dangling)?;
        assert!(open_new_private(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
        Ok(())
    }
}
