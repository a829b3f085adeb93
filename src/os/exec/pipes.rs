//! A running tool's stdout and stderr, read as they come (one `poll` of both), its lines handed
//! on as they complete while still captured whole.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStderr, ChildStdout, ExitStatus};
use std::time::{Duration, Instant};

use super::PULSE;

/// A child's stdout and stderr, read as they come so neither pipe fills and blocks it; the
/// lines of those `passing` are handed to `pass` as they complete (a last line without its line
/// break once its pipe closes), while still captured whole.
pub(super) struct Pipes<'l> {
    pub(super) stdout: ChildStdout,
    pub(super) stderr: ChildStderr,
    pub(super) open: [bool; 2],
    pub(super) out: Vec<u8>,
    pub(super) err: Vec<u8>,
    pub(super) passing: [bool; 2],
    /// How much of `out` and `err` was handed to `pass`.
    pub(super) passed: [usize; 2],
    pub(super) pass: &'l dyn Fn(&[u8]),
}

impl Pipes<'_> {
    /// Reads until both pipes close and the child exits, or `deadline`: `Ok(None)` then. With
    /// `leader_only`, returns as soon as the child itself exits, pipes open or not (something it
    /// left behind may hold them). `beat` gets a turn at least every `PULSE` (the service answers
    /// its link meanwhile); it never cuts the wait short.
    pub(super) fn wait(
        &mut self,
        child: &mut Child,
        deadline: Instant,
        leader_only: bool,
        beat: &dyn Fn(),
    ) -> io::Result<Option<ExitStatus>> {
        loop {
            beat();
            if leader_only || !(self.open[0] || self.open[1]) {
                if let Some(status) = child.try_wait()? {
                    return Ok(Some(status));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if self.open[0] || self.open[1] {
                // Short polls while waiting for the child itself, so its exit is seen promptly.
                let slice = if leader_only {
                    left.min(Duration::from_millis(20))
                } else {
                    left.min(PULSE)
                };
                self.poll(slice)?;
            } else {
                // Pipes closed but the process lingers: wait a little without busy-looping.
                std::thread::sleep(left.min(Duration::from_millis(2)));
            }
        }
    }

    /// One `poll` of the open pipes for at most `left`, reading what is ready.
    fn poll(&mut self, left: Duration) -> io::Result<()> {
        let mut fds = [
            libc::pollfd {
                fd: if self.open[0] {
                    self.stdout.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if self.open[1] {
                    self.stderr.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let millis = left.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is an array of two pollfd, as the count says, alive for the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis.max(1)) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for (i, fd) in fds.iter().enumerate() {
            if fd.revents == 0 {
                continue;
            }
            let mut buf = [0u8; 16384];
            let n = if i == 0 {
                self.stdout.read(&mut buf)
            } else {
                self.stderr.read(&mut buf)
            };
            match n {
                Ok(0) | Err(_) => self.open[i] = false,
                Ok(n) => {
                    let sink = if i == 0 { &mut self.out } else { &mut self.err };
                    sink.extend_from_slice(&buf[..n]);
                }
            }
            if self.passing[i] {
                self.pass_lines(i);
            }
        }
        Ok(())
    }

    /// Hands pipe `i`'s lines completed since the last call to `pass`, and the rest once the
    /// pipe is closed. Of a line redrawn with carriage returns (a progress bar), what a terminal
    /// would show last; blank lines are skipped.
    fn pass_lines(&mut self, i: usize) {
        let text = if i == 0 { &self.out } else { &self.err };
        let mut from = self.passed[i];
        while from < text.len() {
            let end = match text[from..].iter().position(|&b| b == b'\n') {
                Some(at) => from + at,
                None if self.open[i] => break,
                None => text.len(),
            };
            let line = &text[from..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let shown = match line.iter().rposition(|&b| b == b'\r') {
                Some(at) => &line[at + 1..],
                None => line,
            };
            if !shown.iter().all(u8::is_ascii_whitespace) {
                (self.pass)(shown);
            }
            from = (end + 1).min(text.len());
        }
        self.passed[i] = from;
    }
}
