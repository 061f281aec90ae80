//! The seccomp filter of every task sandbox: it refuses the two `ioctl`s that push input into
//! a terminal (`TIOCSTI`, which queues bytes as if typed, and `TIOCLINUX`, whose selection
//! paste does the same on a virtual console), so a task that reaches a terminal cannot type
//! into the operator's shell. Everything else is allowed; the sandbox's own session
//! (`--new-session`) already leaves a task without a controlling terminal, and this is the
//! second wall.
//!
//! The program is written here, classic BPF, rather than with `seccompiler`: its filters check
//! one architecture and leave the x32 ABI's system calls (another `ioctl` number, same audit
//! architecture) unmatched, and kill a process of any other architecture; libseccomp handles
//! both, but it is a C library to build against, for two `ioctl`s. Here: on x86_64, native
//! `ioctl` (16) and i386's (54) are checked, and any x32 call is refused; on aarch64, native
//! `ioctl` (29) and arm's (54). The request is compared on its low 32 bits, as the kernel
//! reads it (a 64-bit value with high bits set reaches the same `ioctl`). bwrap loads the
//! program (`--seccomp FD`) after `PR_SET_NO_NEW_PRIVS`, in the sandbox, before the program.

use nix::libc::{self, sock_filter};

/// The errno a refused `ioctl` returns.
const REFUSED: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

/// `TIOCSTI` and `TIOCLINUX` (the same numbers on x86 and arm).
const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;

/// Offsets in `struct seccomp_data`: `nr`, `arch`, and the low word of `args[1]` (little
/// endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG1_LOW: u32 = 24;

const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
const AUDIT_ARCH_ARM: u32 = 40 | 0x4000_0000;
const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// The x32 ABI's system calls carry this bit in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code: code as u16, jt, jf, k }
}

const LD_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

/// What the filter checks on this machine's architecture.
struct Target {
    /// The native architecture's audit value and `ioctl` number.
    native: (u32, u32),
    /// Its 32-bit companion's.
    compat: (u32, u32),
    /// Whether the native one has the x32 ABI.
    x32: bool,
}

/// `None` where no filter is built (the sandbox then says so, and
/// `SERVERFS_AGENT_SANDBOX=required` refuses tasks).
fn target() -> Option<Target> {
    if cfg!(target_arch = "x86_64") {
        Some(Target { native: (AUDIT_ARCH_X86_64, 16), compat: (AUDIT_ARCH_I386, 54), x32: true })
    } else if cfg!(target_arch = "aarch64") {
        Some(Target { native: (AUDIT_ARCH_AARCH64, 29), compat: (AUDIT_ARCH_ARM, 54), x32: false })
    } else {
        None
    }
}

/// The filter, as instructions (a jump goes `jt`/`jf` instructions past the next one):
///
/// ```text
///  0  ld arch
///  1  jeq native       → 3, else 2
///  2  jeq compat       → 6, else 11 (another architecture: allow)
///  3  ld nr
///  4  jge x32 bit      → 12 (refuse every x32 call), else 5   (aarch64: only nr = -1)
///  5  jeq ioctl        → 8, else 11
///  6  ld nr                                                   (compat)
///  7  jeq compat ioctl → 8, else 11
///  8  ld args[1], low word
///  9  jeq TIOCSTI      → 12, else 10
/// 10  jeq TIOCLINUX    → 12, else 11
/// 11  ret allow
/// 12  ret errno EPERM
/// ```
pub fn instructions() -> Option<Vec<sock_filter>> {
    let Target { native: (native, native_ioctl), compat: (compat, compat_ioctl), x32 } = target()?;
    Some(vec![
        stmt(LD_ABS, ARCH),
        jump(JEQ, native, 1, 0),
        jump(JEQ, compat, 3, 8),
        stmt(LD_ABS, NR),
        jump(JGE, if x32 { X32_SYSCALL_BIT } else { u32::MAX }, 7, 0),
        jump(JEQ, native_ioctl, 2, 5),
        stmt(LD_ABS, NR),
        jump(JEQ, compat_ioctl, 0, 3),
        stmt(LD_ABS, ARG1_LOW),
        jump(JEQ, TIOCSTI, 2, 0),
        jump(JEQ, TIOCLINUX, 1, 0),
        stmt(RET, ALLOW),
        stmt(RET, REFUSED),
    ])
}

/// The filter as bwrap's `--seccomp` reads it: the instructions' bytes, in order.
pub fn program() -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    for i in instructions()? {
        bytes.extend_from_slice(&i.code.to_ne_bytes());
        bytes.push(i.jt);
        bytes.push(i.jf);
        bytes.extend_from_slice(&i.k.to_ne_bytes());
    }
    Some(bytes)
}

/// The program in a pipe, as bwrap reads it (`--seccomp FD`): the read end, the whole program
/// in it, its write end closed.
pub fn program_pipe() -> std::io::Result<std::os::fd::OwnedFd> {
    let program = program().ok_or_else(|| std::io::Error::other("no seccomp filter here"))?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // 104 bytes into an empty pipe: the write is whole and never blocks.
    let written = nix::unistd::write(&write, &program)?;
    if written != program.len() {
        return Err(std::io::Error::other("the seccomp filter was not written whole"));
    }
    Ok(read)
}

#[cfg(test)]
#[allow(clippy::disallowed_types, reason = "the test runs python3 under the filter")]
mod tests {
    use super::*;

    /// What python3 reports of the terminal `ioctl`s on a pty it made its controlling
    /// terminal: `TIOCSTI`, `TIOCLINUX`, `TIOCSTI` with high bits set in the request (passed
    /// as a 64-bit value), and `TCGETS`, each `ok` or its errno's name.
    const PROBE: &str = r#"
import ctypes, errno, fcntl, os, termios
os.setsid()
m, s = os.openpty()
fcntl.ioctl(s, termios.TIOCSCTTY, 0)
libc = ctypes.CDLL(None, use_errno=True)
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
c = ctypes.c_char(b"x")
out = []
for name, req in (("sti", 0x5412), ("linux", 0x541C), ("sti_high", 0x5412 | (1 << 32))):
    r = libc.ioctl(s, req, ctypes.byref(c))
    out.append(name + "=" + ("ok" if r == 0 else errno.errorcode[ctypes.get_errno()]))
try:
    fcntl.ioctl(s, termios.TCGETS, bytes(64))
    out.append("tcgets=ok")
except OSError as e:
    out.append("tcgets=" + errno.errorcode[e.errno])
print(" ".join(out))
"#;

    #[expect(
        unsafe_code,
        reason = "the test installs the filter itself between fork and exec: PR_SET_SECCOMP, which nix does not wrap"
    )]
    fn probe(filtered: bool) -> String {
        use std::os::unix::process::CommandExt;
        let program = instructions().expect("a filter for this architecture");
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", PROBE]);
        if filtered {
            // SAFETY: between fork and exec, two prctl calls on memory the closure owns.
            unsafe {
                cmd.pre_exec(move || {
                    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                        || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let out = cmd.output().expect("python3 runs (the test suite needs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Under the filter both `ioctl`s are refused, also with high bits in the request, and
    /// other `ioctl`s work; without it the same `TIOCSTI` is not refused by the filter's errno
    /// (it succeeds, or a kernel without legacy `TIOCSTI` says `EIO`).
    #[test]
    fn the_filter_refuses_typing_into_a_terminal_and_nothing_else() {
        assert_eq!(probe(true), "sti=EPERM linux=EPERM sti_high=EPERM tcgets=ok");
        let open = probe(false);
        assert!(open.starts_with("sti=ok ") || open.starts_with("sti=EIO "), "{open}");
        assert!(open.ends_with("tcgets=ok"), "{open}");
        assert!(!open.contains("linux=EPERM"), "{open}");
    }

    #[test]
    fn the_program_is_whole_instructions_and_every_jump_lands_inside_it() {
        let program = instructions().expect("a filter");
        assert_eq!(program.len(), 13);
        for (i, ins) in program.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + (ins.jt as usize) < program.len() && i + 1 + (ins.jf as usize) < program.len());
            }
        }
        assert_eq!(program.last().map(|i| i.k), Some(REFUSED));
        assert_eq!(super::program().map(|b| b.len()), Some(13 * 8));
    }
}
