//! The descriptor limit: raise the soft `RLIMIT_NOFILE` to the hard one at start, and keep
//! a server's connection cap within what the descriptors allow.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The descriptor limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit in force now.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (an "unlimited" hard limit stops at the
/// kernel's per-process ceiling, `/proc/sys/fs/nr_open`). Both daemons call it at start.
/// Never fails the caller's start: a refusal is returned with the reason, the limit unchanged.
pub fn raise_nofile_limit() -> Result<NofileLimit, String> {
    let (before, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit(RLIMIT_NOFILE): {e}"))?;
    let target = if hard == nix::libc::RLIM_INFINITY { nr_open().unwrap_or(before.max(1 << 20)) } else { hard };
    if before >= target {
        return Ok(NofileLimit { before, soft: before, hard });
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => Ok(NofileLimit { before, soft: target, hard }),
        Err(e) => Err(format!("cannot raise RLIMIT_NOFILE from {before} to {target}: {e}")),
    }
}

#[expect(clippy::disallowed_methods, reason = "read once at start, before serving: /proc/sys is kernel memory")]
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open").ok()?.trim().parse().ok()
}

/// The connection cap that fits `nofile` descriptors: `wanted`, or fewer so that `reserve`
/// descriptors stay free for everything else (the listener, logs, upstream connections,
/// refusals); at least 1.
pub fn connection_cap(wanted: usize, nofile: u64, reserve: usize) -> usize {
    let available = usize::try_from(nofile).unwrap_or(usize::MAX).saturating_sub(reserve);
    wanted.min(available).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_keeps_the_reserve_free() {
        assert_eq!(connection_cap(4096, 1_048_576, 700), 4096);
        assert_eq!(connection_cap(4096, 1024, 700), 324);
        assert_eq!(connection_cap(4096, 512, 700), 1);
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let limit = raise_nofile_limit().expect("the limit can be raised to the hard one");
        assert!(limit.soft >= limit.before);
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!((soft, hard), (limit.soft, limit.hard));
    }
}
