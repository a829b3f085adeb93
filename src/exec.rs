//! The one place that spawns external commands. Every call has a timeout (the tool's, from the
//! config), runs with `LC_ALL=C` so output parses the same everywhere, captures stderr into the
//! error, and puts the names it acts on after `--` so no value from a declaration can become an
//! option. Each call is counted, so a run can show that a no-op costs a fixed number of queries
//! per tool, however many resources there are.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Tool;

/// A crash of the host closes the read ends of a tool's pipes: the tool must not then die of
/// SIGPIPE at its next write (pacman between two packages of a transaction, leaving it half done
/// and db.lck stale). With SIGPIPE ignored (inherited through exec), the write fails with EPIPE
/// and the tool goes on. std resets SIGPIPE to its default in every child, hence `pre_exec`.
trait IgnoreSigpipe {
    fn ignore_sigpipe(&mut self) -> &mut Self;
}

impl IgnoreSigpipe for Command {
    fn ignore_sigpipe(&mut self) -> &mut Self {
        // SAFETY: signal(2) is async-signal-safe, and the closure touches nothing else.
        unsafe {
            self.pre_exec(|| {
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                Ok(())
            })
        }
    }
}

/// The captured result of a command that ran to completion.
#[derive(Debug)]
pub struct Output {
    /// Exit code; `None` if a signal ended it.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Output {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

#[derive(Debug)]
pub enum Failure {
    Spawn(io::Error),
    Timeout(Duration, String),
    Exit(Option<i32>, String),
}

/// A command that could not be run, hung, or failed; carries the command line and its stderr.
#[derive(Debug)]
pub struct CommandError {
    pub command: String,
    pub failure: Failure,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            Failure::Spawn(e) => write!(f, "`{}` could not be started: {e}", self.command),
            Failure::Timeout(t, stderr) => {
                write!(
                    f,
                    "`{}` was killed after its timeout of {} s",
                    self.command,
                    t.as_secs()
                )?;
                write_stderr(f, stderr)
            }
            Failure::Exit(code, stderr) => {
                match code {
                    Some(c) => write!(f, "`{}` exited with status {c}", self.command)?,
                    None => write!(f, "`{}` was killed by a signal", self.command)?,
                }
                write_stderr(f, stderr)
            }
        }
    }
}

fn write_stderr(f: &mut fmt::Formatter<'_>, stderr: &str) -> fmt::Result {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        Ok(())
    } else {
        write!(f, ": {trimmed}")
    }
}

/// Runs commands and counts them.
#[derive(Default)]
pub struct Runner {
    count: Cell<usize>,
    trace: Option<RefCell<Vec<String>>>,
}

impl Runner {
    /// With `trace`, every command line is kept (for `--trace-commands`).
    pub fn new(trace: bool) -> Runner {
        Runner {
            count: Cell::new(0),
            trace: trace.then(|| RefCell::new(Vec::new())),
        }
    }

    /// Commands run so far.
    pub fn count(&self) -> usize {
        self.count.get()
    }

    /// The command lines run so far, when tracing.
    pub fn traced(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.borrow().clone())
            .unwrap_or_default()
    }

    /// Runs `tool args -- names` and fails unless it exits 0.
    pub fn run(&self, tool: &Tool, args: &[&str], names: &[&str]) -> Result<Output, CommandError> {
        let (command, output) = self.spawn(tool, args, names)?;
        if output.code == Some(0) {
            Ok(output)
        } else {
            Err(CommandError {
                command,
                failure: Failure::Exit(output.code, output.stderr),
            })
        }
    }

    /// Runs `tool args -- names` and returns its output whatever its exit code (for queries whose
    /// exit code means "some were missing").
    pub fn query(
        &self,
        tool: &Tool,
        args: &[&str],
        names: &[&str],
    ) -> Result<Output, CommandError> {
        self.spawn(tool, args, names).map(|(_, output)| output)
    }

    fn spawn(
        &self,
        tool: &Tool,
        args: &[&str],
        names: &[&str],
    ) -> Result<(String, Output), CommandError> {
        let mut argv: Vec<&str> = tool.command.iter().map(String::as_str).collect();
        argv.extend_from_slice(args);
        if !names.is_empty() {
            argv.push("--");
            argv.extend_from_slice(names);
        }
        let command = argv.join(" ");
        self.count.set(self.count.get() + 1);
        if let Some(trace) = &self.trace {
            trace.borrow_mut().push(command.clone());
        }
        log::debug!("running `{command}`");
        let error = |failure| CommandError {
            command: command.clone(),
            failure,
        };
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .ignore_sigpipe()
            // Its own process group, so a timeout kills whatever it started too.
            .process_group(0)
            .spawn()
            .map_err(|e| error(Failure::Spawn(e)))?;
        let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take())
        else {
            return Err(error(Failure::Spawn(io::Error::other("no pipes"))));
        };
        let deadline = Instant::now() + tool.timeout;
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut open = [true, true];
        let mut timed_out = false;
        while open[0] || open[1] {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                timed_out = true;
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: if open[0] { stdout.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if open[1] { stderr.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let millis = left.as_millis().min(i32::MAX as u128) as libc::c_int;
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis.max(1)) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error(Failure::Spawn(e)));
            }
            for (i, fd) in fds.iter().enumerate() {
                if fd.revents == 0 {
                    continue;
                }
                let mut buf = [0u8; 16384];
                let n = if i == 0 {
                    stdout.read(&mut buf)
                } else {
                    stderr.read(&mut buf)
                };
                match n {
                    Ok(0) | Err(_) => open[i] = false,
                    Ok(n) => {
                        if i == 0 {
                            out.extend_from_slice(&buf[..n]);
                        } else {
                            err.extend_from_slice(&buf[..n]);
                        }
                    }
                }
            }
        }
        let status = loop {
            if timed_out {
                unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
                let _ = child.wait();
                let stderr = String::from_utf8_lossy(&err).into_owned();
                return Err(error(Failure::Timeout(tool.timeout, stderr)));
            }
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => timed_out = true,
                // Pipes closed but the process lingers: wait a little without busy-looping.
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(error(Failure::Spawn(e))),
            }
        };
        Ok((
            command,
            Output {
                code: status.code(),
                stdout: out,
                stderr: String::from_utf8_lossy(&err).into_owned(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(timeout_ms: u64) -> Tool {
        Tool {
            command: vec!["sh".into(), "-c".into()],
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn captures_output_and_locale() {
        let runner = Runner::new(true);
        let out = runner
            .run(&sh(5000), &["echo $LC_ALL; echo err >&2"], &[])
            .unwrap();
        assert_eq!(out.stdout_text(), "C\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(runner.count(), 1);
        assert_eq!(runner.traced(), vec!["sh -c echo $LC_ALL; echo err >&2"]);
    }

    #[test]
    fn names_come_after_double_dash() {
        let runner = Runner::new(false);
        // sh -c SCRIPT -- a b: $0 is "--", so "$@" holds exactly the names.
        let out = runner
            .run(&sh(5000), &["printf '%s,' \"$0\" \"$@\""], &["-Syu", "b"])
            .unwrap();
        assert_eq!(out.stdout_text(), "--,-Syu,b,");
    }

    /// A crash of the host must not kill its tools through their pipes: they start with SIGPIPE
    /// ignored (and so do their children), so a write to a dead reader fails with EPIPE instead.
    #[test]
    fn tools_start_with_sigpipe_ignored() {
        let out = Runner::new(false)
            .run(&sh(5000), &["grep ^SigIgn: /proc/self/status"], &[])
            .unwrap();
        let line = out.stdout_text();
        let mask = u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).unwrap();
        assert_ne!(mask & 1 << (libc::SIGPIPE - 1), 0, "SigIgn: {mask:x}");
    }

    #[test]
    fn failure_carries_status_and_stderr() {
        let err = Runner::new(false)
            .run(&sh(5000), &["echo broken >&2; exit 4"], &[])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`sh -c echo broken >&2; exit 4` exited with status 4: broken"
        );
    }

    #[test]
    fn hung_command_is_killed_at_its_timeout() {
        let started = Instant::now();
        let err = Runner::new(false)
            .run(&sh(300), &["echo started >&2; sleep 30"], &[])
            .unwrap_err();
        assert!(matches!(err.failure, Failure::Timeout(..)), "{err}");
        assert!(err.to_string().contains("started"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn missing_program() {
        let tool = Tool {
            command: vec!["/nonexistent/tool".into()],
            timeout: Duration::from_secs(1),
        };
        let err = Runner::new(false).run(&tool, &[], &[]).unwrap_err();
        assert!(err.to_string().contains("could not be started"), "{err}");
    }
}
