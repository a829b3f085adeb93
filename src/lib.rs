//! mesh-host as a library: everything the `mesh-host` binary does, behind one entry point,
//! plus the parsers the fuzz targets drive. The modules stay private; the code map is in
//! ARCHITECTURE.md.

// Set up first, by `init_logging`: the journal's priorities.
mod logging;

mod accounts;
mod cli;
mod codec;
mod commands;
mod config;
mod declaration;
mod diff;
mod envelope;
mod exec;
mod facts;
mod fsutil;
mod join;
mod json_in_place;
mod keys;
mod kinds;
mod link;
mod lockfile;
mod metrics;
mod pacnew;
mod process;
mod reconcile;
mod selfref;
mod service;
mod sorted;
mod store;
#[cfg(test)]
mod testutil;
mod tools;
mod unitfile;
mod upkeep;
mod words;

use std::ffi::OsString;

use cli::Command;
use commands::{Fatal, Host};

/// Sets up logging for the command line `args`: the service logs at info, other commands warn.
pub fn init_logging(args: &[OsString]) {
    let service = cli::parse(args.iter().cloned()).is_ok_and(|a| a.command == Command::Run);
    logging::init(service);
}

/// Runs the command line `args` (without the program name; any bytes, as `args_os` gives them)
/// and returns the exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    match cli::parse(args) {
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
    }
}

fn run(args: cli::Args) -> Result<i32, Fatal> {
    match &args.command {
        Command::Help => {
            println!("{}", cli::usage());
            return Ok(commands::EXIT_OK);
        }
        Command::Version => {
            println!("mesh-host {}", env!("CARGO_PKG_VERSION"));
            return Ok(commands::EXIT_OK);
        }
        // Before the config is loaded: what systemd runs must work whatever the config says.
        Command::Reload(Some(pid)) => return service::signal_reload(*pid),
        // Before the config is loaded: join may be what creates it.
        Command::Join(join) => return join::run(&args, join),
        // On the operator's offline machine: no config, no store.
        Command::Keygen { out } => return keys::keygen(&args, out),
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
        Command::Reload(pid) => service::reload(&host, pid),
        Command::Run => service::run(&mut host),
        Command::Sign { key, file } => keys::sign(&host, &key, &file),
        Command::Join(_) | Command::Keygen { .. } | Command::Help | Command::Version => {
            Ok(commands::EXIT_OK)
        }
    }
}

/// Entry points for fuzzing: each takes arbitrary bytes and must never panic.
pub mod fuzzing {
    /// Parses and validates a declaration with the default limits and identity.
    pub fn declaration(bytes: &[u8]) {
        if let Ok(config) = crate::config::Config::parse("{}", None) {
            let _ = crate::declaration::parse(
                bytes,
                &crate::declaration::Context {
                    limits: &config.limits,
                    identity: &config.identity,
                },
            );
        }
    }

    /// Takes bytes as the `declaration` of a `declare` frame on a host that trusts one key (RFC
    /// 8032's first test key, which signs the seed corpus): envelope, signatures, declaration,
    /// revision and expiry, as the service decides; then prints the envelope again.
    pub fn envelope(bytes: &[u8]) {
        use crate::envelope::{accept, open, Arrival, PublicKey, Trust};
        let (Ok(config), Ok(key)) = (
            crate::config::Config::parse("{}", None),
            PublicKey::parse("ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="),
        ) else {
            return;
        };
        if let Ok(Some(envelope)) = open(bytes) {
            let _ = envelope.to_json();
        }
        let trust = Trust {
            keys: vec![key],
            required: 1,
        };
        let arrival = Arrival {
            revision: 7,
            newest: Some(3),
            now: 1_800_000_000,
            trust: Some(&trust),
        };
        let text = String::from_utf8_lossy(bytes).into_owned();
        let _ = accept(text, &arrival, |b| {
            crate::declaration::parse(
                b,
                &crate::declaration::Context {
                    limits: &config.limits,
                    identity: &config.identity,
                },
            )
        });
    }

    /// Feeds bytes to a link that is up, as a control plane would send them.
    pub fn link_input(bytes: &[u8]) {
        use crate::link::{Link, Message};
        let hello = Message::Ping {};
        let mut link = Link::new(0, hello, 30_000, 1 << 20);
        let mut welcome = Vec::new();
        crate::link::frame::encode(br#"{"type": "welcome"}"#, &mut welcome);
        let _ = link.handle_input(1, &welcome);
        let _ = link.handle_input(2, bytes);
        while link.poll_event().is_some() {}
        // The deadlines (a frame left incomplete, silence) judged on what is left.
        let _ = link.handle_timeout(link.poll_timeout());
    }
}
