//! The command line: its arguments (`args`), the commands that print what the engine found or
//! did (`commands`, `render`), and those that need no engine (`join`, `keys`). `main_with_args`
//! parses, dispatches, prints an error once and picks the exit code.

pub mod args;
mod commands;
mod join;
mod keys;
pub mod manual;
mod progress;
mod render;

use std::ffi::OsString;

use crate::engine::{self, Fatal, Host};
use crate::{service, util};
use args::Command;
use commands::Commands;

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
/// and returns the exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    match args::parse(args) {
        Err(e) => {
            eprintln!("mesh-host: {e}\nTry `mesh-host --help`.");
            engine::EXIT_INVALID
        }
        Ok(args) => match run(args) {
            Ok(code) => code,
            Err(fatal) => {
                eprintln!("mesh-host: {}", fatal.message());
                fatal.exit_code()
            }
        },
    }
}

fn run(args: args::Args) -> Result<i32, Fatal> {
    match &args.command {
        Command::Help(topic) => {
            match topic.and_then(args::command_doc) {
                Some(command) => println!("{}", args::command_usage(command)),
                None => println!("{}", args::usage()),
            }
            return Ok(engine::EXIT_OK);
        }
        Command::Version => {
            println!("mesh-host {}", env!("CARGO_PKG_VERSION"));
            return Ok(engine::EXIT_OK);
        }
        // Before the config is loaded: what systemd runs must work whatever the config says.
        Command::Reload(Some(pid)) => return service::signal_reload(*pid),
        // Before the config is loaded: join may be what creates it.
        Command::Join(join) => return join::run(&args, join),
        // On the operator's offline machine: no config, no store.
        Command::Keygen { out } => return keys::keygen(&args, out),
        _ => {}
    }
    let options = engine::Options {
        progress: progress::sink(&args),
        ..args.engine_options()
    };
    let mut host = Host::new(options)?;
    let commands = || Commands {
        host: &host,
        json: args.json,
        wait: args.wait,
    };
    match args.command.clone() {
        Command::Check(file) => commands().check(&file),
        Command::Plan(file) => commands().plan(&file),
        Command::Apply(file, confirm) => commands().apply(&file, confirm),
        Command::Confirm => commands().confirm(),
        Command::Rollback { to, force } => commands().rollback(to, force),
        Command::Reconcile => commands().reconcile(),
        Command::Owned => commands().owned(),
        Command::Status => commands().status(),
        Command::Reload(pid) => service::reload(&host, pid),
        Command::Run => service::run(&mut host),
        Command::Sign { key, file } => keys::sign(&host, &key, &file),
        Command::Join(_) | Command::Keygen { .. } | Command::Help(_) | Command::Version => {
            Ok(engine::EXIT_OK)
        }
    }
}
