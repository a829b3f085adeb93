//! Thin wrappers over the Linux facilities the service loop multiplexes: a monotonic clock, a
//! `timerfd`, a `signalfd`, randomness for jitter, and `sd_notify` (a datagram to a unix
//! socket; no library needed).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A uniform number in [0, 1) from the kernel's generator, for jitter.
pub fn random() -> f64 {
    let mut bytes = [0u8; 8];
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
        let fd = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
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
        check(unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut()) })
            .map(drop)
    }

    /// Clears the expiry so the fd stops being readable.
    pub fn drain(&self) {
        let mut expirations = 0u64;
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
    /// survives fork and exec (std's `Command` keeps it): `exec.rs` empties it in every tool.
    pub fn new() -> io::Result<SignalFd> {
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::sigemptyset(&mut set) };
        for signal in HANDLED {
            unsafe { libc::sigaddset(&mut set, signal) };
        }
        check(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
        let fd =
            check(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
        Ok(SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The next pending signal, if any.
    pub fn read(&self) -> Option<libc::c_int> {
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
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

/// Sends `signal` (`Hangup` or `User2`: what one mesh-host asks of another) to process `pid`.
pub fn send_signal(pid: u32, signal: Signal) -> io::Result<()> {
    let number = match signal {
        Signal::Terminate(n) => n,
        Signal::Hangup => libc::SIGHUP,
        Signal::User1 => libc::SIGUSR1,
        Signal::User2 => libc::SIGUSR2,
    };
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    check(unsafe { libc::kill(pid, number) }).map(drop)
}

/// Waits at most `millis` (1 to 1000) for `fd` to take writes; whether it would.
pub fn wait_writable(fd: RawFd, millis: u64) -> bool {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let millis = millis.clamp(1, 1000) as libc::c_int;
    // SAFETY: one valid pollfd on the stack, and a count of one.
    unsafe { libc::poll(&mut pollfd, 1, millis) > 0 }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_fires_and_drains() {
        let timer = TimerFd::new().unwrap();
        timer.arm(1).unwrap();
        let mut fds = [libc::pollfd {
            fd: timer.raw(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(unsafe { libc::poll(fds.as_mut_ptr(), 1, 2000) }, 1);
        timer.drain();
        assert_eq!(unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) }, 0);
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
