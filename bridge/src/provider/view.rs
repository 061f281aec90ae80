//! A task sandbox's filesystem view, built from nothing: bwrap's root is an empty tmpfs and
//! only what this module lists is mounted into it. The system read-only (`/usr`, `/bin`,
//! `/sbin`, `/lib*`, `/etc`, `/opt`), a `/proc` of the task's own PID namespace and a minimal
//! `/dev`; a private `/tmp` and `/var/tmp`; an empty, private `$HOME`; the task's workdir
//! (read-write, or read-only for a read-only workdir or the `review` profile: the mount
//! enforces it, not the agent); the running runtime's own home; what its program needs (its
//! package, the interpreter its `#!` line names); and what the operator added by name
//! (`SERVERFS_AGENT_SANDBOX_READ|WRITE`, per workdir too). Nothing else of the user's home
//! exists in the view, and no ancestor of a path the bridge keeps private is writable, so a
//! task cannot rename its way to one.
//!
//! Mounts are laid out shallowest first, so a path inside another (a runtime home inside the
//! private `$HOME`, a workdir inside the private `/tmp`, a writable cache inside a read-only
//! tree) is mounted over its parent's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The system directories every view holds, read-only (as symlinks where the host has one).
const SYSTEM: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// One system entry, decided at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemEntry {
    /// A directory bound read-only at the same path.
    Dir(PathBuf),
    /// A symlink recreated in the view (`/bin -> usr/bin` on a merged-`/usr` system).
    Symlink(PathBuf, PathBuf),
    /// A file outside the system directories that one of them points to (`/etc/resolv.conf`
    /// into `/run`), bound read-only.
    File(PathBuf),
}

/// The system part of every view, from this host. Blocking (reads a few links).
#[expect(clippy::disallowed_methods, reason = "decided once at start, on a blocking thread")]
pub fn system() -> Vec<SystemEntry> {
    let mut entries = Vec::new();
    for dir in SYSTEM {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    entries.push(SystemEntry::Symlink(target, path.to_owned()));
                }
            }
            Ok(m) if m.is_dir() => entries.push(SystemEntry::Dir(path.to_owned())),
            _ => {}
        }
    }
    // The resolver's configuration often lives under /run (systemd-resolved, resolvconf).
    if let Ok(target) = Path::new("/etc/resolv.conf").canonicalize()
        && !target.starts_with("/etc")
        && !target.starts_with("/usr")
    {
        entries.push(SystemEntry::File(target));
    }
    entries
}

/// How a path is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only.
    Read,
    /// Read-write.
    Write,
    /// An empty private tmpfs (the private `$HOME`, `/var/tmp`).
    Empty,
}

/// What one child's view holds beyond the system part.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    entries: Vec<(PathBuf, Access)>,
    /// Files mounted at another path (a task's egress gate), read-write, last.
    elsewhere: Vec<(PathBuf, PathBuf)>,
}

impl Mounts {
    /// Adds `path` with `access` (a later entry for the same path replaces an earlier one).
    pub fn add(&mut self, path: PathBuf, access: Access) {
        self.entries.retain(|(p, _)| *p != path);
        self.entries.push((path, access));
    }

    /// Mounts the host's `source` at `dest` in the view, read-write.
    pub fn add_at(&mut self, source: PathBuf, dest: PathBuf) {
        self.elsewhere.push((source, dest));
    }

    /// The entries, shallowest first (ties keep their order).
    fn ordered(&self) -> Vec<(PathBuf, Access)> {
        let mut entries = self.entries.clone();
        entries.sort_by_key(|(p, _)| p.components().count());
        entries
    }

    /// What the view holds, for the operator's view (`doctor`): each path with `ro`, `rw` or
    /// `empty`.
    pub fn describe(&self) -> Vec<(PathBuf, &'static str)> {
        self.ordered()
            .into_iter()
            .map(|(p, a)| {
                (
                    p,
                    match a {
                        Access::Read => "ro",
                        Access::Write => "rw",
                        Access::Empty => "empty",
                    },
                )
            })
            .collect()
    }
}

/// bwrap's mount arguments for a view: the system part, `/proc`, `/dev`, the private `/tmp`,
/// then `mounts` shallowest first, then `hidden` paths that fall inside one of them covered
/// again (an empty read-only directory, `/dev/null` for a file).
pub fn args(system: &[SystemEntry], private_tmp: Option<&Path>, mounts: &Mounts, hidden: &[PathBuf]) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| args.extend(items.iter().map(|i| i.to_os_string()));
    for entry in system {
        match entry {
            SystemEntry::Dir(p) => push(&["--ro-bind".as_ref(), p.as_os_str(), p.as_os_str()]),
            SystemEntry::Symlink(target, p) => push(&["--symlink".as_ref(), target.as_os_str(), p.as_os_str()]),
            SystemEntry::File(p) => push(&["--ro-bind-try".as_ref(), p.as_os_str(), p.as_os_str()]),
        }
    }
    push(&["--proc".as_ref(), "/proc".as_ref(), "--dev".as_ref(), "/dev".as_ref()]);
    push(&["--tmpfs".as_ref(), "/dev/shm".as_ref()]);
    match private_tmp {
        Some(tmp) => push(&["--bind".as_ref(), tmp.as_os_str(), "/tmp".as_ref()]),
        None => push(&["--tmpfs".as_ref(), "/tmp".as_ref()]),
    }
    let ordered = mounts.ordered();
    for (path, access) in &ordered {
        match access {
            Access::Read => push(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]),
            Access::Write => push(&["--bind".as_ref(), path.as_os_str(), path.as_os_str()]),
            Access::Empty => push(&["--tmpfs".as_ref(), path.as_os_str()]),
        }
    }
    // A private path inside a mounted tree (a workdir holding the state directory) is covered
    // again; what the child itself needs inside it (the fake runtime's session store) comes
    // back; then the covers are made read-only.
    let inside = |h: &PathBuf| ordered.iter().any(|(p, a)| *a != Access::Empty && h.starts_with(p) && h != p);
    let covered: Vec<&PathBuf> = hidden.iter().filter(|h| inside(h) && h.exists()).collect();
    let mut read_only = Vec::new();
    for path in &covered {
        if path.is_dir() {
            push(&["--tmpfs".as_ref(), path.as_os_str()]);
            read_only.push(path.to_path_buf());
        } else {
            push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), path.as_os_str()]);
        }
    }
    for (path, access) in ordered.iter().filter(|(p, _)| covered.iter().any(|h| p.starts_with(h))) {
        match access {
            Access::Read => push(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]),
            Access::Write => push(&["--bind".as_ref(), path.as_os_str(), path.as_os_str()]),
            Access::Empty => push(&["--tmpfs".as_ref(), path.as_os_str()]),
        }
    }
    for path in read_only {
        push(&["--remount-ro".as_ref(), path.as_os_str()]);
    }
    for (source, dest) in &mounts.elsewhere {
        push(&["--bind".as_ref(), source.as_os_str(), dest.as_os_str()]);
    }
    args
}

/// What a program needs to run, read-only, as paths to bind: its package (the topmost
/// `node_modules` it lies in, else its directory) and the interpreter its `#!` line names
/// (found on `path_var` for `#!/usr/bin/env NAME`) with that interpreter's installation (the
/// parent of its `bin`). A tree that would show more than it should — the home directory or
/// an ancestor of it, or one that `refuse` says holds something private — shrinks to the file
/// itself. Blocking (reads the program's first line).
pub fn program_needs(
    program: &Path,
    path_var: Option<&std::ffi::OsStr>,
    refuse: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let mut needs = Vec::new();
    let Ok(program) = program.canonicalize() else { return needs };
    let package = program
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_path_buf)
        .or_else(|| program.parent().map(Path::to_path_buf));
    needs.push(narrow(package, &program, refuse));
    if let Some(interpreter) = interpreter(&program, path_var).and_then(|i| i.canonicalize().ok()) {
        let parent = interpreter.parent();
        let install = match parent {
            Some(bin) if bin.file_name().is_some_and(|n| n == "bin") => bin.parent().map(Path::to_path_buf),
            _ => parent.map(Path::to_path_buf),
        };
        needs.push(narrow(install, &interpreter, refuse));
    }
    needs.dedup();
    needs
}

/// `tree` when it is safe to show, else `file` alone.
fn narrow(tree: Option<PathBuf>, file: &Path, refuse: &dyn Fn(&Path) -> bool) -> PathBuf {
    match tree {
        Some(tree) if tree.components().count() > 1 && !refuse(&tree) => tree,
        _ => file.to_owned(),
    }
}

/// The interpreter a script's `#!` line names: the path itself, or `NAME` looked up on
/// `path_var` for `/usr/bin/env NAME`.
#[expect(clippy::disallowed_methods, reason = "called by Containment::wrap, on its blocking thread")]
fn interpreter(program: &Path, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = std::str::from_utf8(line.split(|b| *b == b'\n').next()?).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        super::env::which(name, path_var)
    } else {
        Some(PathBuf::from(first))
    }
}

/// What a worktree task's own sandbox holds of its repository (besides its worktree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeGit {
    /// The checkout the worktree belongs to: the workdir's policy (its paths, its hosts) is
    /// looked up by it. Not in the view.
    pub checkout: PathBuf,
    /// The repository's common git directory: read-only.
    pub common: PathBuf,
    /// The worktree's own entry (`<common>/worktrees/<task>`: its `HEAD`, index): read-write.
    pub entry: PathBuf,
    /// The private object directory the task's git writes to: read-write.
    pub objects: PathBuf,
}

impl TreeGit {
    /// The environment that sends the task's new objects to its private directory (and keeps
    /// git from packing the repository's refs or objects, which it could not write anyway).
    pub fn env(&self) -> [(OsString, OsString); 7] {
        [
            ("GIT_OBJECT_DIRECTORY".into(), self.objects.clone().into_os_string()),
            ("GIT_ALTERNATE_OBJECT_DIRECTORIES".into(), self.common.join("objects").into_os_string()),
            ("GIT_CONFIG_COUNT".into(), "2".into()),
            ("GIT_CONFIG_KEY_0".into(), "gc.auto".into()),
            ("GIT_CONFIG_VALUE_0".into(), "0".into()),
            ("GIT_CONFIG_KEY_1".into(), "maintenance.auto".into()),
            ("GIT_CONFIG_VALUE_1".into(), "false".into()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "the tests set up their own files and processes")]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn mounts_go_shallowest_first_and_a_private_path_inside_one_is_covered_again() {
        let mut m = Mounts::default();
        m.add(PathBuf::from("/home/op/.codex"), Access::Write);
        m.add(PathBuf::from("/home/op"), Access::Empty);
        m.add(PathBuf::from("/srv/repo"), Access::Read);
        let system = vec![
            SystemEntry::Dir(PathBuf::from("/usr")),
            SystemEntry::Symlink(PathBuf::from("usr/bin"), PathBuf::from("/bin")),
        ];
        let hidden = vec![PathBuf::from("/srv/repo/.state"), PathBuf::from("/var/lib/private")];
        let args = strings(&args(&system, Some(Path::new("/state/tmp/agt_1")), &m, &hidden));
        let at = |needle: &str| args.iter().position(|a| a == needle).unwrap_or_else(|| panic!("{needle}: {args:?}"));
        assert_eq!(&args[..6], ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin"]);
        assert!(at("/home/op") < at("/home/op/.codex"), "the private home before what is bound into it: {args:?}");
        assert_eq!(args[at("/srv/repo") - 1], "--ro-bind", "{args:?}");
        assert_eq!(args[at("/home/op/.codex") - 1], "--bind");
        assert!(!args.iter().any(|a| a == "/var/lib/private"), "a private path outside the view needs nothing");
        // /srv/repo/.state does not exist here: nothing to cover.
        assert!(!args.iter().any(|a| a == "/srv/repo/.state"));
        assert!(!args.iter().any(|a| a == "/"), "never the host's root: {args:?}");
    }

    #[test]
    fn a_program_brings_its_package_and_its_interpreter_and_never_the_home() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().canonicalize().expect("canonical");
        let bin = root.join("tools/node/bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::write(bin.join("node"), "").expect("node");
        std::fs::set_permissions(bin.join("node"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let pkg = root.join("cli/node_modules/@x/tool/bin");
        std::fs::create_dir_all(&pkg).expect("pkg");
        let script = pkg.join("tool.js");
        std::fs::write(&script, "#!/usr/bin/env -S node --flag\nconsole.log(1)\n").expect("script");
        let path = std::ffi::OsString::from(bin.as_os_str());
        let needs = program_needs(&script, Some(&path), &|_| false);
        assert_eq!(needs, vec![root.join("cli/node_modules"), root.join("tools/node")]);
        // The interpreter's installation would show something private: the file alone.
        let needs = program_needs(&script, Some(&path), &|p| p == root.join("tools/node"));
        assert_eq!(needs[1], bin.join("node"));
        // A program with no package of its own: its directory.
        let plain = root.join("plain");
        std::fs::create_dir_all(&plain).expect("dir");
        std::fs::write(plain.join("prog"), "\u{7f}ELF").expect("prog");
        assert_eq!(program_needs(&plain.join("prog"), None, &|_| false), vec![plain.clone()]);
    }
}
