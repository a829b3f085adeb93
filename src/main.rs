//! mesh-host: the node agent of a self-hosted fleet mesh. `main` parses the command line,
//! dispatches, prints any error once, and picks the exit code.

mod accounts;
mod cli;
mod codec;
mod commands;
mod config;
mod declaration;
mod exec;
mod fsutil;
mod kinds;
mod link;
mod reconcile;
mod service;
mod store;
#[cfg(test)]
mod testutil;

use cli::Command;
use commands::{Fatal, Host};

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let code = match cli::parse(std::env::args().skip(1)) {
        Err(e) => {
            eprintln!("mesh-host: {e}\nTry `mesh-host --help`.");
            commands::EXIT_INVALID
        }
        Ok(args) => match run(args) {
            Ok(code) => code,
            Err(fatal) => {
                eprintln!("mesh-host: {}", fatal.message());
                fatal.exit_code()
            }
        },
    };
    std::process::exit(code);
}

fn run(args: cli::Args) -> Result<i32, Fatal> {
    match args.command {
        Command::Help => {
            println!("{}", cli::USAGE);
            return Ok(commands::EXIT_OK);
        }
        Command::Version => {
            println!("mesh-host {}", env!("CARGO_PKG_VERSION"));
            return Ok(commands::EXIT_OK);
        }
        _ => {}
    }
    let command = args.command.clone();
    let mut host = Host::new(args)?;
    match command {
        Command::Check(file) => host.check(&file),
        Command::Plan(file) => host.plan(&file),
        Command::Apply(file) => host.apply(&file),
        Command::Reconcile => host.reconcile(),
        Command::Owned => host.owned(),
        Command::Status => host.status(),
        Command::Run => service::run(&mut host),
        Command::Help | Command::Version => Ok(commands::EXIT_OK),
    }
}
