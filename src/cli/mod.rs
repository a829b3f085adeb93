//! The command line: its arguments (`args`), the commands that print what the engine found or
//! did (`commands`, `render`), and those that need no engine (`join`, `keys`). `main_with_args`
//! parses, dispatches, prints an error once and picks the exit code.

pub mod args;
mod commands;
mod join;
mod keys;
pub mod manual;
mod out;
mod progress;
mod render;

use std::ffi::OsString;

use crate::engine::{self, Fatal, Host};
use crate::{service, util};
use args::Command;
use commands::Commands;
use out::{errln, outln, Out};

/// Sets up logging for the command line `args`: the service logs at info, other commands warn,
/// and with `-q` only say errors.
pub fn init_logging(args: &[OsString]) {
    let level = match args::parse(args.iter().cloned()) {
        Ok(a) if a.command == Command::Run => log::LevelFilter::Info,
        Ok(a) if a.quiet => log::LevelFilter::Error,
        _ => log::LevelFilter::Warn,
    };
    util::logging::init(level);
}

/// Runs the command line `args` (without the program name; any bytes, as `args_os` gives them)
/// and returns the exit code. With `--json`, an error is also a JSON document on stdout
/// (docs/json.md) unless the command printed its own; a closed stdout keeps the exit code, any
/// other failure to print is exit 4.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    let args: Vec<OsString> = args.into_iter().collect();
    let out = Out::stdout();
    let code = match args::parse(args.iter().cloned()) {
        Err(e) => {
            errln!("mesh-host: {e}\nTry `mesh-host --help`.");
            // Unparsed, `--json` is still what the person asked for.
            if args.iter().any(|a| a == "--json") {
                error_json(&out, "usage", &e, engine::EXIT_INVALID);
            }
            engine::EXIT_INVALID
        }
        Ok(args) => match run(&out, &args) {
            Ok(code) => code,
            Err(fatal) => {
                errln!("mesh-host: {}", fatal.message());
                if args.json && !out.written() {
                    error_json(&out, fatal.kind(), &fatal.message(), fatal.exit_code());
                }
                fatal.exit_code()
            }
        },
    };
    match out.finish() {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => {
            errln!("mesh-host: cannot write to standard output: {e}");
            engine::EXIT_ERROR
        }
    }
}

/// `{"version": 1, "error": {"kind", "message", "exit_code"}}`: the one shape of every error.
fn error_json(out: &Out, kind: &str, message: &str, exit_code: i32) {
    let error = serde_json::json!({
        "error": {"kind": kind, "message": message, "exit_code": exit_code}
    });
    render::print_json(out, &error);
}

fn run(out: &Out, args: &args::Args) -> Result<i32, Fatal> {
    // A run may hold a directory open for each file of a chunk it writes.
    crate::os::sys::raise_open_files();
    // A command ends soon: its small blocks come from an arena never given back (os/alloc.rs).
    if args.command != Command::Run {
        crate::os::alloc::use_arena();
    }
    match &args.command {
        Command::Help(topic) => {
            match topic.and_then(args::command_doc) {
                Some(command) => outln!(out, "{}", args::command_usage(command)),
                None => outln!(out, "{}", args::usage()),
            }
            return Ok(engine::EXIT_OK);
        }
        Command::Version if args.json => {
            let version = serde_json::json!({ "mesh_host": env!("CARGO_PKG_VERSION") });
            render::print_json(out, &version);
            return Ok(engine::EXIT_OK);
        }
        Command::Version => {
            outln!(out, "mesh-host {}", env!("CARGO_PKG_VERSION"));
            return Ok(engine::EXIT_OK);
        }
        // Before the config is loaded: what systemd runs must work whatever the config says.
        Command::Reload(Some(pid)) => return service::signal_reload(*pid),
        // Before the config is loaded: join may be what creates it.
        Command::Join(join) => return join::run(out, args, join),
        // On the operator's offline machine: no config, no store.
        Command::Keygen { out: file } => return keys::keygen(out, args, file),
        _ => {}
    }
    let options = engine::Options {
        progress: progress::sink(args),
        ..args.engine_options()
    };
    let mut host = Host::new(options)?;
    let commands = || Commands {
        host: &host,
        json: args.json,
        wait: args.wait,
        detailed_exitcode: args.detailed_exitcode,
        out,
    };
    match args.command.clone() {
        Command::Check(file) => commands().check(&file),
        Command::Plan(file) => commands().plan(file.as_deref()),
        Command::Show => commands().show(),
        Command::Apply(file, confirm) => commands().apply(&file, confirm),
        Command::Confirm => commands().confirm(),
        Command::Rollback { to, force } => commands().rollback(to, force),
        Command::Reconcile => commands().reconcile(),
        Command::Owned => commands().owned(),
        Command::Status => commands().status(),
        Command::Reload(pid) => service::reload(&host, pid),
        Command::Run => service::run(&mut host),
        Command::Sign { key, file } => keys::sign(out, &host, &key, &file),
        Command::Join(_) | Command::Keygen { .. } | Command::Help(_) | Command::Version => {
            Ok(engine::EXIT_OK)
        }
    }
}
