//! How a tool's process starts: with nothing of the host's but what it is given (no blocked or
//! ignored signal but SIGPIPE, no descriptor but 0, 1 and 2, umask 022, in `/`, `LC_ALL=C`), in a
//! process group of its own, which is how it is stopped.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};

/// Variables systemd gives the host's own process (its notify socket, its socket-activation and
/// watchdog descriptors, its journal stream) that must not reach a tool: podman, for one, reads
/// `NOTIFY_SOCKET` and would talk to systemd about the host's service.
const HOST_ONLY_ENV: [&str; 7] = [
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "JOURNAL_STREAM",
];

/// The umask every tool starts with (systemd's default for a service), whatever the host's.
const TOOL_UMASK: libc::mode_t = 0o022;

/// A tool starts with nothing of the host's process but what it is given (docs/systemd.md, "What a
/// tool starts with"): the service blocks SIGHUP, SIGINT, SIGTERM and SIGUSR1 for its signalfd,
/// and a blocked mask survives fork and exec (std resets neither the mask nor an ignored signal);
/// pacman with SIGINT blocked cannot be stopped at its timeout and leaves db.lck behind.
trait StartClean {
    fn start_clean(&mut self) -> &mut Self;
}

impl StartClean for Command {
    fn start_clean(&mut self) -> &mut Self {
        for name in HOST_ONLY_ENV {
            self.env_remove(name);
        }
        self.env("LC_ALL", "C").current_dir("/");
        // SAFETY: the closure runs in the forked child before exec: it calls only
        // async-signal-safe system calls (sigaction, sigprocmask, umask, close_range, getrlimit,
        // fcntl, setrlimit) on values on its stack, and allocates nothing.
        unsafe { self.pre_exec(clean_child) }
    }
}

/// In the child between fork and exec: every signal at its default but SIGPIPE, ignored (a crash
/// of the host closes the read ends of a tool's pipes; the tool must not then die of SIGPIPE at
/// its next write, pacman between two packages of a transaction, leaving it half done and db.lck
/// stale: the write fails with EPIPE and the tool goes on; children inherit it through exec); an
/// empty signal mask (after the dispositions, so nothing pending reaches a handler of the host's);
/// the tool umask; every descriptor but 0, 1 and 2 closed at exec (std's own error pipe is
/// already close-on-exec, so a failed exec is still reported); and the limit on open files the
/// host started with (`sys::raise_open_files`).
fn clean_child() -> io::Result<()> {
    // SAFETY: async-signal-safe calls on stack values (see `start_clean`).
    unsafe {
        // The system call, not the C library's wrapper, which refuses the signals it keeps for
        // itself (glibc's 32 and 33) and so would leave one ignored by whoever started the host.
        // All zeros is SIG_DFL, no flags, an empty mask, whatever the architecture's layout.
        let default = [0u64; 8];
        for signal in 1..=64 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                // Every argument a full word: `syscall` is variadic and reads words.
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal as libc::c_long,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8 as libc::c_long,
                );
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::umask(TOOL_UMASK);
        let done = libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_long,
            libc::c_uint::MAX as libc::c_long,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_long,
        );
        if done != 0 {
            // Before Linux 5.11: one descriptor at a time, up to the limit on their number.
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(io::Error::last_os_error());
            }
            let last = limit.rlim_cur.min(libc::c_int::MAX as libc::rlim_t) as libc::c_int;
            for fd in 3..last {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
    crate::os::sys::restore_open_files();
    Ok(())
}

/// `argv` started clean (`StartClean`) in its own process group, so a timeout stops whatever it
/// started too, with stdout and stderr piped.
pub(super) fn start(argv: &[&str]) -> io::Result<(Child, ChildStdout, ChildStderr)> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start_clean()
        .process_group(0)
        .spawn()?;
    match (child.stdout.take(), child.stderr.take()) {
        (Some(stdout), Some(stderr)) => Ok((child, stdout, stderr)),
        _ => Err(io::Error::other("no pipes")),
    }
}

/// Sends `signal` to `child`'s process group.
pub(super) fn kill_group(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) takes no pointer; the group is the child's own (`process_group(0)`), which
    // this process has not yet reaped, so its id names no other group.
    unsafe { libc::kill(-(child.id() as libc::pid_t), signal) };
}
