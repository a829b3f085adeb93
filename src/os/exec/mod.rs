//! The one place that spawns external commands. Every call has a timeout (the tool's, from the
//! config), runs with `LC_ALL=C` so output parses the same everywhere and with nothing else of
//! the host's process (`StartClean`), captures stderr into the error, and puts the names it acts
//! on after `--` so no value from a declaration can become an option. Each call is counted, so a
//! run can show that a no-op costs a fixed number of queries per tool, however many resources
//! there are. A tool that reaches its timeout is stopped the way that tool is safely stopped
//! (pacman by SIGINT, which never leaves a half-done commit), given a bounded grace, and only
//! then killed; the error says which happened. How a tool's process starts is `start.rs`; its
//! pipes are read by `pipes.rs`.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::util::progress::{Event, Sink};

mod pipes;
mod start;

use pipes::Pipes;
use start::kill_group;

/// The captured result of a command that ran to completion.
#[derive(Debug, Default)]
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

    /// Adds the output of a further invocation of the same command (more of its names): outputs
    /// in order, and the first exit code that is not 0.
    fn join(mut self, next: Output) -> Output {
        if self.code == Some(0) {
            self.code = next.code;
        }
        self.stdout.extend(next.stdout);
        self.stderr.push_str(&next.stderr);
        self
    }
}

/// What the kernel allows one exec for arguments, less the environment and a margin: the
/// names of one batch beyond it go to another invocation (`E2BIG` would fail them all).
fn argv_budget() -> usize {
    // SAFETY: sysconf(3) takes no pointer and only reads a limit.
    let max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    let max = usize::try_from(max).unwrap_or(0).max(128 * 1024);
    let environment: usize = std::env::vars_os()
        .map(|(k, v)| k.len() + v.len() + 2 + std::mem::size_of::<usize>())
        .sum();
    max.saturating_sub(environment).saturating_sub(64 * 1024) / 2
}

/// The argv bytes (strings, their NULs and pointers) one argument costs.
fn arg_bytes(arg: &str) -> usize {
    arg.len() + 1 + std::mem::size_of::<usize>()
}

/// What every invocation of `tool args --` costs before its names.
fn fixed_bytes(tool: &Tool, args: &[&str]) -> usize {
    tool.command.iter().map(|a| arg_bytes(a)).sum::<usize>()
        + args.iter().map(|a| arg_bytes(a)).sum::<usize>()
        + arg_bytes("--")
}

/// `names` split, in order, into runs whose command lines fit in `budget` bytes: one run when
/// they all fit (the usual case), always at least one, and a name too long for any alone.
fn chunks<'a>(fixed: usize, names: &'a [&'a str], budget: usize) -> Vec<&'a [&'a str]> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, fixed);
    for (i, name) in names.iter().enumerate() {
        let cost = arg_bytes(name);
        if i > start && used + cost > budget {
            out.push(&names[start..i]);
            (start, used) = (i, fixed);
        }
        used += cost;
    }
    out.push(&names[start..]);
    out
}

/// One external tool: its argv prefix and how long any one call may take.
#[derive(Debug, Clone)]
pub struct Tool {
    pub command: Vec<String>,
    pub timeout: Duration,
    /// How it is asked to stop at its timeout, and how long it then has before SIGKILL.
    pub stop: Stop,
    pub grace: Duration,
}

/// How a tool is asked to stop when it reaches its timeout; after the tool's grace, whatever is
/// left of its process group gets SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT, as a person's Ctrl-C: pacman aborts cleanly before a commit, finishes the commit
    /// it is in, and releases its lock (SIGTERM would leave `db.lck` and maybe a half-done commit).
    Interrupt,
    /// SIGTERM: what systemctl and podman handle by cleaning up.
    Terminate,
}

impl Stop {
    fn signal(self) -> (libc::c_int, &'static str) {
        match self {
            Stop::Interrupt => (libc::SIGINT, "SIGINT"),
            Stop::Terminate => (libc::SIGTERM, "SIGTERM"),
        }
    }
}

/// What stopping a tool at its timeout came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// It exited within the grace after the signal (with this exit code, `None` for a signal).
    Exited {
        signal: &'static str,
        code: Option<i32>,
    },
    /// It was still running after the signal and the grace: killed with SIGKILL.
    Killed {
        signal: &'static str,
        grace: Duration,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Could not be started (or its pipes read): the OS error, as text.
    Spawn(String),
    /// Reached its timeout; how it was stopped; its stderr.
    Timeout(Duration, Stopped, String),
    Exit(Option<i32>, String),
}

/// A command that could not be run, hung, or failed; carries the command line and its stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandError {
    pub command: String,
    pub failure: Failure,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            Failure::Spawn(e) => write!(f, "`{}` could not be started: {e}", self.command),
            Failure::Timeout(t, stopped, stderr) => {
                write!(
                    f,
                    "`{}` reached its timeout of {} s: ",
                    self.command,
                    t.as_secs()
                )?;
                match stopped {
                    Stopped::Exited { signal, code } => {
                        let how = match code {
                            Some(c) => format!("status {c}"),
                            None => "a signal".to_string(),
                        };
                        write!(f, "sent {signal}, it exited ({how}) within its grace")?
                    }
                    Stopped::Killed { signal, grace } => write!(
                        f,
                        "sent {signal}, it was still running {} s later and was killed (SIGKILL)",
                        grace.as_secs()
                    )?,
                }
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

/// How often a command's wait gives the caller's pulse a turn.
const PULSE: Duration = Duration::from_millis(200);

/// Runs commands and counts them.
#[derive(Default)]
pub struct Runner<'p> {
    count: Cell<usize>,
    retries: Cell<usize>,
    notes: RefCell<Vec<String>>,
    trace: Option<RefCell<Vec<String>>>,
    /// Called about every `PULSE` while a command runs, and its answer ignored: the service reads
    /// its signals and keeps its link answered there, on this one thread, however long pacman
    /// takes. It never cuts a command short.
    pulse: Option<(&'p dyn Fn() -> bool, Cell<Instant>)>,
    /// Secret texts scrubbed from every stderr captured (`withhold`).
    withheld: RefCell<Vec<String>>,
    /// Where each command is told as it starts, and a transaction's lines as they come.
    progress: Option<Sink>,
}

/// What a person watching is told of one command.
#[derive(Clone, Copy)]
struct Shown {
    /// Its command line as it starts, and its exit as it ends.
    command: bool,
    /// Its stdout's and its stderr's lines as they come.
    lines: [bool; 2],
}

impl Shown {
    const COMMAND: Shown = Shown {
        command: true,
        lines: [false, false],
    };
}

/// The shortest text `redact` scrubs: shorter pieces are words of every message.
pub const MIN_REDACTED: usize = 4;

/// `text` with every occurrence of each of `secrets` replaced by `[secret withheld]`, longest
/// first (so a line goes whole before the value inside it). A tool that echoes a line of a
/// secret unit or an env file in its complaint leaves nothing of it in the error, the run
/// record, the report, the failure history or the log.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_string();
    let mut by_length: Vec<&String> = secrets.iter().collect();
    by_length.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in by_length.into_iter().filter(|s| s.len() >= MIN_REDACTED) {
        if text.contains(secret.as_str()) {
            text = text.replace(secret.as_str(), "[secret withheld]");
        }
    }
    text
}

impl<'p> Runner<'p> {
    /// With `trace`, every command line is kept (for `--trace-commands`).
    pub fn new(trace: bool) -> Runner<'p> {
        Runner {
            count: Cell::new(0),
            retries: Cell::new(0),
            notes: RefCell::new(Vec::new()),
            trace: trace.then(|| RefCell::new(Vec::new())),
            pulse: None,
            withheld: RefCell::new(Vec::new()),
            progress: None,
        }
    }

    /// Tells `progress` each command as it starts (and the lines of transactions as they come).
    pub fn with_progress(mut self, progress: Option<Sink>) -> Runner<'p> {
        self.progress = progress;
        self
    }

    /// Tells the progress sink, if there is one, the event `event` makes (only then made).
    pub fn tell<'e>(&self, event: impl FnOnce() -> Event<'e>) {
        if let Some(sink) = &self.progress {
            sink.send(&event());
        }
    }

    /// Scrubs `secrets` from the stderr of every command run from now on (`redact`): what a
    /// tool prints is the one text from outside that may quote a secret back.
    /// Holds a copy of them (their total size) for the run, sorted as `redact` takes them, so
    /// its sort of each stderr's list finds it already in order (one pass).
    pub fn withhold(&self, mut secrets: Vec<String>) {
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        *self.withheld.borrow_mut() = secrets;
    }

    /// A command's captured stderr (or a line of its output passed on), as text with the
    /// secrets scrubbed.
    fn stderr_text(&self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        let secrets = self.withheld.borrow();
        match secrets.is_empty() || text.is_empty() {
            true => text.into_owned(),
            false => redact(&text, &secrets),
        }
    }

    /// Gives `pulse` a turn about every 200 ms while a command runs (bounded cost: it must not block).
    pub fn with_pulse(mut self, pulse: &'p dyn Fn() -> bool) -> Runner<'p> {
        self.pulse = Some((pulse, Cell::new(Instant::now())));
        self
    }

    fn beat(&self) {
        if let Some((pulse, last)) = &self.pulse {
            if last.get().elapsed() >= PULSE {
                pulse();
                last.set(Instant::now());
            }
        }
    }

    /// Gives the pulse a turn now and returns its answer: whether the host is stopping (never,
    /// without a pulse). For a caller between commands, as the kinds are between resources.
    pub fn stopping(&self) -> bool {
        self.pulse.as_ref().is_some_and(|(pulse, last)| {
            last.set(Instant::now());
            pulse()
        })
    }

    /// Commands run so far.
    pub fn count(&self) -> usize {
        self.count.get()
    }

    /// Notes that the next command repeats part of a batch that failed as a whole, to find the
    /// names that caused it.
    pub fn count_retry(&self) {
        self.retries.set(self.retries.get() + 1);
    }

    /// Commands run so far that were retries of part of a failed batch.
    pub fn retries(&self) -> usize {
        self.retries.get()
    }

    /// Records something the run did beside its resources that its record must show (a stale
    /// lock it removed).
    pub fn note(&self, text: String) {
        log::warn!("{text}");
        self.notes.borrow_mut().push(text);
    }

    /// What was noted so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.borrow().clone()
    }

    /// The command lines run so far, when tracing.
    pub fn traced(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.borrow().clone())
            .unwrap_or_default()
    }

    /// Runs `tool args -- names` and fails unless it exits 0. Names beyond what one command line
    /// can carry go to further invocations of the same command, in order; the first failure ends it.
    pub fn run<S: AsRef<str>>(
        &self,
        tool: &Tool,
        args: &[S],
        names: &[&str],
    ) -> Result<Output, CommandError> {
        self.invocations(tool, args, names, true, Shown::COMMAND)
    }

    /// `run` for a transaction a person may wait minutes for: what it prints is passed on to
    /// the progress sink line by line as it comes (and still captured whole).
    pub fn transaction<S: AsRef<str>>(
        &self,
        tool: &Tool,
        args: &[S],
        names: &[&str],
    ) -> Result<Output, CommandError> {
        let shown = Shown {
            command: true,
            lines: [true, true],
        };
        self.invocations(tool, args, names, true, shown)
    }

    /// `transaction` tried again while another process holds pacman's lock (twice a second, for
    /// minutes): not told again, nor its complaint about the lock (stderr); what it prints on
    /// stdout, once it has the lock and runs, is passed on.
    pub fn transaction_again<S: AsRef<str>>(
        &self,
        tool: &Tool,
        args: &[S],
        names: &[&str],
    ) -> Result<Output, CommandError> {
        let shown = Shown {
            command: false,
            lines: [true, false],
        };
        self.invocations(tool, args, names, true, shown)
    }

    /// Runs `tool args -- names` and returns its output whatever its exit code (for queries whose
    /// exit code means "some were missing"). Split as `run` is, the outputs are joined in order and
    /// the exit code is the first that is not 0.
    pub fn query<S: AsRef<str>>(
        &self,
        tool: &Tool,
        args: &[S],
        names: &[&str],
    ) -> Result<Output, CommandError> {
        self.invocations(tool, args, names, false, Shown::COMMAND)
    }

    /// `tool args -- names` over as many invocations as the names need, their outputs joined;
    /// with `exit_zero`, the first that does not exit 0 ends it as a failure.
    fn invocations<S: AsRef<str>>(
        &self,
        tool: &Tool,
        args: &[S],
        names: &[&str],
        exit_zero: bool,
        shown: Shown,
    ) -> Result<Output, CommandError> {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let mut all: Option<Output> = None;
        for chunk in chunks(fixed_bytes(tool, &args), names, argv_budget()) {
            let (command, output) = self.spawn(tool, &args, chunk, shown)?;
            if exit_zero && output.code != Some(0) {
                return Err(CommandError {
                    command,
                    failure: Failure::Exit(output.code, output.stderr),
                });
            }
            all = Some(match all {
                Some(all) => all.join(output),
                None => output,
            });
        }
        Ok(all.unwrap_or_default())
    }

    fn spawn(
        &self,
        tool: &Tool,
        args: &[&str],
        names: &[&str],
        shown: Shown,
    ) -> Result<(String, Output), CommandError> {
        let argv = argv(tool, args, names);
        let command = argv.join(" ");
        self.count.set(self.count.get() + 1);
        if let Some(trace) = &self.trace {
            trace.borrow_mut().push(command.clone());
        }
        log::debug!("running `{command}`");
        let shown = match self.progress {
            Some(_) => shown,
            None => Shown {
                command: false,
                lines: [false, false],
            },
        };
        if shown.command {
            self.tell(|| Event::Command(&command));
        }
        let started = Instant::now();
        let error = |failure| CommandError {
            command: command.clone(),
            failure,
        };
        let (mut child, stdout, stderr) =
            start::start(&argv).map_err(|e| error(Failure::Spawn(e.to_string())))?;
        let pass = |line: &[u8]| {
            let line = self.stderr_text(line);
            self.tell(|| Event::Line(&line));
        };
        let mut pipes = Pipes {
            stdout,
            stderr,
            open: [true, true],
            out: Vec::new(),
            err: Vec::new(),
            passing: shown.lines,
            passed: [0, 0],
            pass: &pass,
        };
        let deadline = Instant::now() + tool.timeout;
        let beat = || self.beat();
        let status = match pipes.wait(&mut child, deadline, false, &beat) {
            Ok(Some(status)) => status,
            Ok(None) => {
                let stopped = stop(tool, &mut child, &mut pipes, &beat);
                let stderr = self.stderr_text(&pipes.err);
                return Err(error(Failure::Timeout(tool.timeout, stopped, stderr)));
            }
            Err(e) => {
                kill_group(&child, libc::SIGKILL);
                let _ = child.wait();
                return Err(error(Failure::Spawn(e.to_string())));
            }
        };
        if shown.command {
            self.tell(|| Event::Exited {
                code: status.code(),
                took: started.elapsed(),
            });
        }
        Ok((
            command,
            Output {
                code: status.code(),
                stdout: pipes.out,
                stderr: self.stderr_text(&pipes.err),
            },
        ))
    }
}

/// What runs for `tool args -- names`: the configured command, the arguments, and the names after
/// `--` (no `--` when there are none).
fn argv<'a>(tool: &'a Tool, args: &[&'a str], names: &[&'a str]) -> Vec<&'a str> {
    let mut argv: Vec<&str> = tool.command.iter().map(String::as_str).collect();
    argv.extend_from_slice(args);
    if !names.is_empty() {
        argv.push("--");
        argv.extend_from_slice(names);
    }
    argv
}

/// The command line `run` and `query` show (in errors and traces) for `tool args -- names`.
#[cfg(test)]
pub fn command_line<S: AsRef<str>>(tool: &Tool, args: &[S], names: &[&str]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    argv(tool, &args, names).join(" ")
}

/// Stops a tool that reached its timeout: its stop signal to its process group, as a Ctrl-C
/// reaches a terminal's foreground job (what pacman is built to handle, and what reaches the
/// tool through a wrapper such as `sh -c` or `env` in its configured command), the grace to
/// exit, then SIGKILL to whatever is left of the group.
fn stop(tool: &Tool, child: &mut Child, pipes: &mut Pipes, beat: &dyn Fn()) -> Stopped {
    let (signal, name) = tool.stop.signal();
    kill_group(child, signal);
    let grace_deadline = Instant::now() + tool.grace;
    let stopped = match pipes.wait(child, grace_deadline, true, beat) {
        Ok(Some(status)) => Stopped::Exited {
            signal: name,
            code: status.code(),
        },
        _ => Stopped::Killed {
            signal: name,
            grace: tool.grace,
        },
    };
    log::warn!(
        "`{}` reached its timeout of {} s: {stopped:?}",
        tool.command.join(" "),
        tool.timeout.as_secs()
    );
    kill_group(child, libc::SIGKILL);
    let _ = child.wait();
    // What it wrote on its way out (why it stopped) is still in the pipes.
    let _ = pipes.wait(child, Instant::now() + Duration::from_secs(1), false, beat);
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ARGS: &[&str] = &[];

    fn sh(timeout_ms: u64) -> Tool {
        Tool {
            command: vec!["sh".into(), "-c".into()],
            timeout: Duration::from_millis(timeout_ms),
            stop: Stop::Terminate,
            grace: Duration::from_secs(5),
        }
    }

    #[test]
    fn tools_get_back_the_limit_on_open_files_the_host_raised() {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is writable memory of the struct's size; setrlimit reads it.
        let lowered = unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_max >= 1024 && {
                let low = libc::rlimit {
                    rlim_cur: 300,
                    rlim_max: limit.rlim_max,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &low) == 0
            }
        };
        if !lowered {
            return;
        }
        crate::os::sys::raise_open_files();
        let out = Runner::new(false).run(&sh(5000), &["ulimit -Sn"], &[]);
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        assert_eq!(out.unwrap().stdout_text(), "300\n");
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

    /// A sink keeping what it was told, as text.
    fn told() -> (Sink, std::rc::Rc<RefCell<Vec<String>>>) {
        let seen = std::rc::Rc::new(RefCell::new(Vec::new()));
        let keep = std::rc::Rc::clone(&seen);
        let sink = Sink::new(move |event| {
            keep.borrow_mut().push(match event {
                Event::Command(c) => format!("command {c}"),
                Event::Line(l) => format!("line {l}"),
                Event::Exited { code, .. } => format!("exited {code:?}"),
                other => format!("{other:?}"),
            })
        });
        (sink, seen)
    }

    /// A transaction's lines reach the sink (a redrawn line as a terminal would show it last,
    /// no blank ones, stderr's scrubbed of secrets, a last one without its line break), between
    /// its command and its exit, and are captured whole as ever.
    #[test]
    fn a_transaction_passes_its_lines_on_and_still_captures_them_whole() {
        let (sink, seen) = told();
        let runner = Runner::new(false).with_progress(Some(sink));
        runner.withhold(vec!["canary-42".into()]);
        let script = "echo one; printf 'bar 10%%\\rbar 100%%\\r\\n\\n'; s=canary; \
                      echo \"warned $s-42\" >&2; printf last";
        let out = runner.transaction(&sh(5000), &[script], &[]).unwrap();
        assert_eq!(out.stdout_text(), "one\nbar 10%\rbar 100%\r\n\nlast");
        assert_eq!(out.stderr, "warned [secret withheld]\n");
        let seen = seen.borrow();
        assert_eq!(seen.first(), Some(&format!("command sh -c {script}")));
        assert_eq!(seen.last().map(String::as_str), Some("exited Some(0)"));
        assert_eq!(seen.len(), 6, "{seen:?}");
        // Two pipes: how stdout's lines and stderr's interleave is the kernel's.
        let stdout: Vec<&str> = (seen.iter().map(String::as_str))
            .filter(|l| l.starts_with("line ") && !l.contains("warned"))
            .collect();
        assert_eq!(stdout, ["line one", "line bar 100%", "line last"]);
        assert!(seen.contains(&"line warned [secret withheld]".to_string()));
    }

    /// A line is passed on when it is printed, not when the command ends: this one waits, after
    /// its first line, for the file the sink makes on seeing that line (and would reach its
    /// timeout otherwise).
    #[test]
    fn a_transaction_line_is_passed_on_while_the_command_still_runs() {
        let dir = crate::util::testutil::TempDir::new("exec-lines");
        let go = dir.path().join("go");
        let made = go.clone();
        let sink = Sink::new(move |event| {
            if *event == Event::Line("waiting") {
                let _ = std::fs::write(&made, "");
            }
        });
        let runner = Runner::new(false).with_progress(Some(sink));
        let script = format!(
            "echo waiting; while [ ! -e {} ]; do sleep 0.01; done; echo went",
            go.display()
        );
        let out = runner.transaction(&sh(20_000), &[script], &[]);
        assert_eq!(out.map(|o| o.stdout_text()), Ok("waiting\nwent\n".into()));
    }

    /// Tried again while pacman's lock is held elsewhere, a transaction is not told again, nor
    /// its complaint on stderr; its stdout is. Queries and other commands are told, never their
    /// output; without a sink nothing is made.
    #[test]
    fn what_each_way_of_running_tells() {
        let script = "echo out; echo err >&2";
        let telling = |run: &dyn Fn(&Runner) -> Result<Output, CommandError>| {
            let (sink, seen) = told();
            run(&Runner::new(false).with_progress(Some(sink))).unwrap();
            let seen = seen.borrow().clone();
            seen
        };
        let command = format!("command sh -c {script}");
        assert_eq!(
            telling(&|r| r.transaction_again(&sh(5000), &[script], &[])),
            ["line out"]
        );
        assert_eq!(
            telling(&|r| r.run(&sh(5000), &[script], &[])),
            [command.as_str(), "exited Some(0)"]
        );
        assert_eq!(
            telling(&|r| r.query(&sh(5000), &[format!("{script}; exit 3")], &[])),
            [format!("{command}; exit 3").as_str(), "exited Some(3)"]
        );
        let out = Runner::new(false)
            .transaction(&sh(5000), &[script], &[])
            .unwrap();
        assert_eq!(
            (out.stdout_text().as_str(), out.stderr.as_str()),
            ("out\n", "err\n")
        );
    }

    #[test]
    fn names_beyond_one_command_line_go_to_further_invocations_in_order() {
        let names: Vec<String> = (0..10).map(|i| format!("name{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let each = arg_bytes("name0");
        // Everything fits: one invocation, as before.
        assert_eq!(chunks(10, &names, 10_000), vec![&names[..]]);
        // Three names fit beside the fixed part: 3 + 3 + 3 + 1, in order.
        let split = chunks(10, &names, 10 + 3 * each);
        assert_eq!(
            split.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        assert_eq!(split.concat(), names);
        // No names still runs the command once; a name too long for any run has its own.
        assert_eq!(chunks(10, &[], 0).len(), 1);
        assert_eq!(chunks(10, &names[..2], 1).len(), 2);
        // musl's ARG_MAX may be its 128 KiB floor (what a static build's check() sees).
        assert!(argv_budget() >= 16 * 1024);
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

    /// The service blocks its signals for its signalfd; an ignored signal or a descriptor left
    /// open without close-on-exec would also pass through exec: a tool starts with none of them
    /// but SIGPIPE ignored (a crash of the host must not kill its tools through their pipes), in
    /// `/`, with only its standard descriptors.
    #[test]
    fn a_tool_inherits_no_blocked_or_ignored_signal_nor_descriptor_of_the_host() {
        let blocked = [libc::SIGHUP, libc::SIGINT, libc::SIGTERM, libc::SIGUSR1];
        // SAFETY: sigset_t is plain data, for which all zeroes is a valid (empty) value.
        let (mut set, mut before): (libc::sigset_t, libc::sigset_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: the sets are valid and live on this stack; signal and dup take no pointer.
        let leaked = unsafe {
            libc::sigemptyset(&mut set);
            for signal in blocked {
                libc::sigaddset(&mut set, signal);
            }
            // This thread's mask, which a child forked from it inherits, as the service's does.
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut before);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            libc::dup(2)
        };
        let out = Runner::new(false).run(
            &sh(5000),
            // ls first and alone: the shell holds no other descriptor while it runs.
            &["ls /proc/$$/fd; grep -E '^Sig(Blk|Ign):' /proc/self/status; pwd"],
            &[],
        );
        // SAFETY: `before` is the mask pthread_sigmask filled above; `leaked` is the descriptor
        // dup returned, owned by this test alone and closed once.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            libc::close(leaked);
        }
        let text = out.unwrap().stdout_text();
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(
            text,
            format!("0\n1\n2\nSigBlk:\t{:016x}\nSigIgn:\t{sigpipe:016x}\n/\n", 0),
            "leaked descriptor {leaked}"
        );
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

    /// A tool that quotes a secret line back (podman about an env file line, systemd about a
    /// unit's) has it scrubbed before its stderr becomes an error, whole lines first.
    #[test]
    fn stderr_is_scrubbed_of_withheld_secrets() {
        let runner = Runner::new(false);
        runner.withhold(vec![
            "TOKEN=canary-42".into(),
            "canary-42".into(),
            "abc".into(),
        ]);
        let err = runner
            .run(
                &sh(5000),
                &["echo 'invalid line TOKEN=canary-42 (value canary-42), abc' >&2; exit 125"],
                &[],
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`sh -c echo 'invalid line TOKEN=canary-42 (value canary-42), abc' >&2; exit 125` \
             exited with status 125: invalid line [secret withheld] (value [secret withheld]), abc"
        );
        assert_eq!(
            redact("no secret here", &["canary-42".into()]),
            "no secret here"
        );
    }

    #[test]
    fn hung_command_is_killed_at_its_timeout() {
        let err = Runner::new(false)
            .run(&sh(300), &["echo started >&2; sleep 30"], &[])
            .unwrap_err();
        assert!(matches!(err.failure, Failure::Timeout(..)), "{err}");
        assert!(err.to_string().contains("started"), "{err}");
    }

    /// A tool that traps signals, to see which one reached it at its timeout.
    fn trapping(stop: Stop, grace_ms: u64, on_signal: &str) -> Tool {
        Tool {
            command: vec![
                "bash".into(),
                "-c".into(),
                format!(
                    "trap 'echo got INT >&2; {on_signal}' INT; \
                     trap 'echo got TERM >&2; {on_signal}' TERM; \
                     echo started >&2; while :; do sleep 0.05; done"
                ),
            ],
            // Long enough for bash to have set its traps even on a loaded machine.
            timeout: Duration::from_millis(1000),
            stop,
            grace: Duration::from_millis(grace_ms),
        }
    }

    #[test]
    fn interrupt_policy_sends_sigint_and_waits_for_a_clean_exit() {
        let err = Runner::new(false)
            .run(&trapping(Stop::Interrupt, 5000, "exit 130"), NO_ARGS, &[])
            .unwrap_err();
        let Failure::Timeout(_, stopped, stderr) = &err.failure else {
            panic!("{err}");
        };
        assert_eq!(
            *stopped,
            Stopped::Exited {
                signal: "SIGINT",
                code: Some(130)
            }
        );
        assert!(stderr.contains("got INT"), "{err}");
        assert!(
            err.to_string().contains(
                "reached its timeout of 1 s: sent SIGINT, it exited (status 130) within its grace"
            ),
            "{err}"
        );
    }

    #[test]
    fn terminate_policy_sends_sigterm_then_kills_after_the_grace() {
        let err = Runner::new(false)
            .run(&trapping(Stop::Terminate, 300, "true"), NO_ARGS, &[])
            .unwrap_err();
        let Failure::Timeout(_, stopped, stderr) = &err.failure else {
            panic!("{err}");
        };
        assert_eq!(
            *stopped,
            Stopped::Killed {
                signal: "SIGTERM",
                grace: Duration::from_millis(300)
            }
        );
        assert!(stderr.contains("got TERM"), "{err}");
        assert!(err.to_string().contains("was killed (SIGKILL)"), "{err}");
    }

    #[test]
    fn a_long_command_gives_the_pulse_turns_and_is_not_cut_short() {
        let beats = Cell::new(0);
        let pulse = || {
            beats.set(beats.get() + 1);
            true
        };
        let runner = Runner::new(false).with_pulse(&pulse);
        let out = runner.run(&sh(5000), &["sleep 1; echo done"], &[]).unwrap();
        assert_eq!(out.stdout_text(), "done\n");
        assert!((2..=50).contains(&beats.get()), "{} beats", beats.get());
    }

    #[test]
    fn missing_program() {
        let tool = Tool {
            command: vec!["/nonexistent/tool".into()],
            timeout: Duration::from_secs(1),
            stop: Stop::Terminate,
            grace: Duration::from_secs(1),
        };
        let err = Runner::new(false).run(&tool, NO_ARGS, &[]).unwrap_err();
        assert!(err.to_string().contains("could not be started"), "{err}");
    }
}
