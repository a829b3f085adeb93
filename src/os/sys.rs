//! Thin wrappers over the Linux facilities the service loop multiplexes: a monotonic clock, a
//! `timerfd`, a `signalfd`, randomness for jitter, and `sd_notify` (a datagram to a unix
//! socket; no library needed); and the process's limit on open files.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Milliseconds on the monotonic clock: the only clock the loop and its state machines use.
pub fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call cannot fail for this clock id.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A uniform number in [0, 1) from the kernel's generator, for jitter.
pub fn random() -> f64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != 8 {
        // Jitter only spreads load; the clock's low bits are an acceptable fallback.
        bytes = (now_ms().wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes();
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// A monotonic one-shot timer readable through an fd.
pub struct TimerFd(OwnedFd);

impl TimerFd {
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: timerfd_create takes no pointer.
        let fd = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` is the descriptor timerfd_create just returned (`check` let only a valid
        // one through), owned by nothing else.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Fires once, `delay_ms` from now (at least 1 ms, since zero would disarm it).
    pub fn arm(&self, delay_ms: u64) -> io::Result<()> {
        let delay_ms = delay_ms.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                // `as _`: `time_t` is deprecated on musl (it is moving to 64 bits); the delay
                // is clamped so it fits either width.
                tv_sec: (delay_ms / 1000).min(i32::MAX as u64) as _,
                tv_nsec: ((delay_ms % 1000) * 1_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec alive for the call; the old value is not asked.
        check(unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut()) })
            .map(drop)
    }

    /// Clears the expiry so the fd stops being readable.
    pub fn drain(&self) {
        let mut expirations = 0u64;
        // SAFETY: read(2) writes at most 8 bytes into `expirations`, a u64.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut expirations as *mut u64).cast(), 8) };
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The signals the service handles, delivered through an fd instead of handlers.
pub struct SignalFd(OwnedFd);

pub const HANDLED: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

impl SignalFd {
    /// Blocks the handled signals for this (single-threaded) process and opens the fd. The mask
    /// survives fork and exec (std's `Command` keeps it): `exec/start.rs` empties it in every
    /// tool.
    pub fn new() -> io::Result<SignalFd> {
        // SAFETY: sigset_t is plain data, for which all zeroes is a valid value.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t on this stack.
        unsafe { libc::sigemptyset(&mut set) };
        for signal in HANDLED {
            // SAFETY: as above; every handled signal is a valid signal number.
            unsafe { libc::sigaddset(&mut set, signal) };
        }
        // SAFETY: `set` is valid for the call; the old mask is not asked.
        check(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
        let flags = libc::SFD_NONBLOCK | libc::SFD_CLOEXEC;
        // SAFETY: `set` is valid for the call; -1 asks for a new descriptor.
        let fd = check(unsafe { libc::signalfd(-1, &set, flags) })?;
        // SAFETY: `fd` is the descriptor signalfd just returned, owned by nothing else.
        Ok(SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The next pending signal, if any.
    pub fn read(&self) -> Option<libc::c_int> {
        // SAFETY: signalfd_siginfo is plain integers, for which all zeroes is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: read(2) writes at most `size` bytes into `info`, which is that size.
        let n = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (n == size as isize).then_some(info.ssi_signo as libc::c_int)
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A signal the service handles, by what it is (`SignalFd::next`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// SIGTERM or SIGINT, with its number for the log.
    Terminate(i32),
    Hangup,
    User1,
    User2,
}

impl SignalFd {
    /// The next pending signal the service handles, if any (others are skipped).
    pub fn next(&self) -> Option<Signal> {
        while let Some(signal) = self.read() {
            match signal {
                libc::SIGTERM | libc::SIGINT => return Some(Signal::Terminate(signal)),
                libc::SIGHUP => return Some(Signal::Hangup),
                libc::SIGUSR1 => return Some(Signal::User1),
                libc::SIGUSR2 => return Some(Signal::User2),
                _ => {}
            }
        }
        None
    }
}

/// What `wait_until` waits for on a descriptor.
#[derive(Debug, Clone, Copy)]
pub enum Ready {
    /// Only tests wait to read (the loop has mio for that).
    #[cfg(test)]
    Readable,
    Writable,
}

/// Whether `fd` becomes `ready` within `timeout_ms`; an interrupted wait is `Ok(false)`, as a
/// timeout is.
pub fn wait_until(fd: RawFd, ready: Ready, timeout_ms: libc::c_int) -> io::Result<bool> {
    let events = match ready {
        #[cfg(test)]
        Ready::Readable => libc::POLLIN,
        Ready::Writable => libc::POLLOUT,
    };
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    // SAFETY: `fds` is an array of one pollfd, as the count says, alive for the call.
    match unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) } {
        n if n >= 0 => Ok(n == 1),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            e => Err(e),
        },
    }
}

/// Tells systemd about the service's state when it runs us with `Type=notify`. Failures are only
/// logged: a missing notify socket must never stop the host.
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let result = (|| -> io::Result<()> {
        let socket = std::os::unix::net::UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        } else {
            socket.send_to(state.as_bytes(), &path)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        log::warn!("sd_notify {state:?}: {e}");
    }
}

/// How far `raise_open_files` raises the soft limit on open files: a run holds a directory open
/// for each file of a chunk it writes (2,048) until it syncs them.
const OPEN_FILES: u64 = 16_384;

/// The soft limit on open files the process started with, which the tools it runs get back
/// (`restore_open_files`); 0 while it was not raised.
static STARTED_WITH: AtomicU64 = AtomicU64::new(0);

/// Raises the soft limit on open files towards the hard one (up to `OPEN_FILES`): systemd starts
/// services at 1,024 (what `select` can watch), which a run writing files in as many directories
/// reaches ("No file descriptors available"). The tools it runs get the limit back, as systemd
/// advises. Nothing else changes when the limit cannot be raised.
pub fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is writable memory of the struct's size, which getrlimit fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let wanted = limit.rlim_max.min(OPEN_FILES);
    if wanted <= limit.rlim_cur {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit only reads `raised`.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        STARTED_WITH.store(limit.rlim_cur, Ordering::Relaxed);
    }
}

/// In a child between fork and exec: the soft limit on open files the process started with
/// (`raise_open_files`). Async-signal-safe: an atomic load and two system calls on the stack.
pub fn restore_open_files() {
    let started_with = STARTED_WITH.load(Ordering::Relaxed);
    if started_with == 0 {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as in `raise_open_files`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur = started_with;
        // SAFETY: setrlimit only reads `limit`.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_fires_and_drains() {
        let timer = TimerFd::new().unwrap();
        timer.arm(1).unwrap();
        assert!(wait_until(timer.raw(), Ready::Readable, 2000).unwrap());
        timer.drain();
        assert!(!wait_until(timer.raw(), Ready::Readable, 0).unwrap());
    }

    #[test]
    fn random_is_in_range() {
        for _ in 0..100 {
            let r = random();
            assert!((0.0..1.0).contains(&r));
        }
    }

    #[test]
    fn notify_reaches_a_socket() {
        let dir = crate::util::testutil::TempDir::new("notify");
        let path = dir.path().join("notify");
        let server = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // Only this test sets NOTIFY_SOCKET, and it is read at the call.
        std::env::set_var("NOTIFY_SOCKET", &path);
        sd_notify("READY=1");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
