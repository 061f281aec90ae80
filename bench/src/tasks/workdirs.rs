//! The workdirs the task measures run in: a generated tree of files (in directories of 500,
//! with the agent's probe script at the top), committed as a git repository or left plain.

use std::path::Path;

use anyhow::{Context, bail};

/// Runs git in `dir` and returns its output; fails naming the command.
pub fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git").args(args).current_dir(dir).output().context("run git")?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes `files` files of `bytes` bytes under `dir` (each different: its number leads) and
/// `probe.py`; with `repository`, commits them all on `main`. The files are dated an hour back,
/// as a checkout a user works in is older than its index: files as new as the index would be
/// "racily clean" to git, which then hashes every one of them again on each status or add.
pub fn generate(dir: &Path, files: usize, bytes: usize, probe: &str, repository: bool) -> anyhow::Result<()> {
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    let body: String = line.repeat(bytes / line.len() + 1)[..bytes].to_owned();
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for i in 0..files {
        let sub = dir.join(format!("d{:04}", i / 500));
        if i % 500 == 0 {
            std::fs::create_dir_all(&sub).with_context(|| format!("create {}", sub.display()))?;
        }
        std::fs::write(sub.join(format!("f{i}.txt")), format!("{i}\n{body}")).context("write a file")?;
    }
    std::fs::write(dir.join("probe.py"), probe).context("write probe.py")?;
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let mut files_seen = 0;
    for entry in walk(dir)? {
        std::fs::File::options().write(true).open(&entry)?.set_modified(past)?;
        files_seen += 1;
    }
    if files_seen < files {
        bail!("{} holds {files_seen} files, not {files}", dir.display());
    }
    if repository {
        git(dir, &["init", "-q", "-b", "main"])?;
        git(dir, &["add", "-A"])?;
        let who = ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "gc.auto=0"];
        git(dir, &[&who[..], &["commit", "-qm", "generated"]].concat())?;
        // Packed, as a real repository's history is, and now: the commit's automatic `gc`
        // would otherwise pack it in the background while the first measures run.
        git(dir, &["repack", "-adq"])?;
        git(dir, &["prune"])?;
    }
    Ok(())
}

/// The regular files under `dir` (not `.git`).
fn walk(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() && entry.file_name() != ".git" {
                stack.push(entry.path());
            } else if kind.is_file() {
                found.push(entry.path());
            }
        }
    }
    Ok(found)
}
