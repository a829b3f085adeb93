//! Where the commands print: standard output through one writer that never panics. A closed
//! pipe (`mesh-host status | head -1`) ends the output quietly and the command keeps the exit
//! code it would have had, as ripgrep and coreutils do; any other write error (stdout on a full
//! disk) is kept for `main_with_args` to say on stderr, exit 4.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, Write};

/// Standard output as the commands see it: formatted text in, the first error kept.
pub struct Out {
    writer: RefCell<Box<dyn Write>>,
    error: RefCell<Option<io::Error>>,
    /// Whether anything was printed: a `--json` error is a document of its own only when the
    /// command printed none.
    written: Cell<bool>,
}

impl Out {
    pub fn stdout() -> Out {
        Out::to(Box::new(io::stdout()))
    }

    /// Output thrown away, for unit tests of what prints.
    #[cfg(test)]
    pub fn sink() -> Out {
        Out::to(Box::new(io::sink()))
    }

    fn to(writer: Box<dyn Write>) -> Out {
        Out {
            writer: RefCell::new(writer),
            error: RefCell::new(None),
            written: Cell::new(false),
        }
    }

    /// Writes `args`; after a first error, nothing more (the rest would fail the same way).
    pub fn write(&self, args: fmt::Arguments) {
        self.written.set(true);
        let mut error = self.error.borrow_mut();
        if error.is_none() {
            if let Err(e) = self.writer.borrow_mut().write_fmt(args) {
                *error = Some(e);
            }
        }
    }

    pub fn written(&self) -> bool {
        self.written.get()
    }

    /// Flushes; the first error of the whole output, if any.
    pub fn finish(self) -> Result<(), io::Error> {
        let flushed = self.writer.borrow_mut().flush();
        match self.error.into_inner() {
            Some(e) => Err(e),
            None => flushed,
        }
    }
}

/// `println!` onto an `Out`.
macro_rules! outln {
    ($out:expr) => {
        $out.write(format_args!("\n"))
    };
    ($out:expr, $($arg:tt)*) => {
        $out.write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` onto an `Out`.
macro_rules! out {
    ($out:expr, $($arg:tt)*) => {
        $out.write(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: a closed or full stderr (`2>&1 | head`) loses the message,
/// never the command's exit code.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub(crate) use {errln, out, outln};

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer failing as `kind` after `room` bytes.
    struct Failing {
        room: usize,
        kind: io::ErrorKind,
        seen: std::rc::Rc<RefCell<Vec<u8>>>,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(self.kind.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.seen.borrow_mut().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_first_error_is_kept_and_nothing_is_written_after_it() {
        let seen = std::rc::Rc::new(RefCell::new(Vec::new()));
        let out = Out::to(Box::new(Failing {
            room: 4,
            kind: io::ErrorKind::BrokenPipe,
            seen: seen.clone(),
        }));
        outln!(out, "ab");
        outln!(out, "cd");
        outln!(out, "ef");
        assert!(out.written());
        assert_eq!(*seen.borrow(), b"ab\nc");
        assert_eq!(out.finish().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
