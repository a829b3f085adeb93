//! Command-line parsing, by hand: a few options do not justify a crate in a binary meant to stay
//! small and auditable. Options may come before or after the command.

use std::path::PathBuf;

pub const USAGE: &str = "\
mesh-host: converges this machine to a declaration (packages, files under /etc, units, containers)

Usage: mesh-host [OPTIONS] COMMAND [ARGS]

Commands:
  check FILE        validate a declaration; changes nothing (exit 0 valid, 2 invalid)
  plan FILE         show what applying FILE would change; changes nothing
  apply FILE        validate, lock, converge, record; FILE becomes the declaration in force
  reconcile         converge again to the declaration in force in the store
  owned             every resource the host owns, as observed now
  status            the service and its link, the declaration in force, the recent runs
  run               the service: hold the link to the control plane and reconcile on start,
                    on each declaration, on the drift timer and on reconnect (SIGHUP reloads
                    the config, SIGUSR1 reconciles now, SIGTERM stops after the current resource)

Options:
  --state-dir DIR       the store (default /var/lib/mesh-host, or the config's state_dir)
  --config FILE         the host's config (default /etc/mesh-host/config.json)
  --root DIR            apply into a mounted root (rescue): what needs the running system is deferred
  --wait                apply/reconcile: wait for another reconcile's lock instead of exiting 3
  --json                machine-readable output
  --trace-commands      list every external command run (stderr; in --json output as `commands`)
  -h, --help            this text
  -V, --version         the version

Exit codes: 0 converged/valid, 1 some resources failed (the rest applied), 2 invalid or refused
(nothing changed), 3 another reconcile holds the lock, 4 the host could not run (store, I/O).
Logs go to stderr; set RUST_LOG=debug for more.";

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Check(PathBuf),
    Plan(PathBuf),
    Apply(PathBuf),
    Reconcile,
    Owned,
    Status,
    Run,
    Help,
    Version,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub command: Command,
    pub state_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub wait: bool,
    pub json: bool,
    pub trace_commands: bool,
}

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut state_dir = None;
    let mut config = None;
    let mut root = None;
    let mut wait = false;
    let mut json = false;
    let mut trace_commands = false;
    let mut help = false;
    let mut version = false;
    let mut words = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<PathBuf, String> {
            match inline.clone().or_else(|| args.next()) {
                Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
                _ => Err(format!("{name} needs a value")),
            }
        };
        match name.as_str() {
            "--state-dir" => state_dir = Some(value("--state-dir")?),
            "--config" => config = Some(value("--config")?),
            "--root" => root = Some(value("--root")?),
            "--wait" => wait = true,
            "--json" => json = true,
            "--trace-commands" => trace_commands = true,
            "-h" | "--help" => help = true,
            "-V" | "--version" => version = true,
            "--" => words.extend(args.by_ref()),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option {s}")),
            _ => words.push(arg),
        }
    }
    let command = if help {
        Command::Help
    } else if version {
        Command::Version
    } else {
        let mut words = words.into_iter();
        let verb = words.next().ok_or("no command given")?;
        let mut file = || -> Result<PathBuf, String> {
            words
                .next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{verb} needs a declaration FILE"))
        };
        let command = match verb.as_str() {
            "check" => Command::Check(file()?),
            "plan" => Command::Plan(file()?),
            "apply" => Command::Apply(file()?),
            "reconcile" => Command::Reconcile,
            "owned" => Command::Owned,
            "status" => Command::Status,
            "run" => Command::Run,
            "help" => Command::Help,
            other => return Err(format!("unknown command {other:?}")),
        };
        if let Some(extra) = words.next() {
            return Err(format!("unexpected argument {extra:?}"));
        }
        command
    };
    Ok(Args {
        command,
        state_dir,
        config,
        root,
        wait,
        json,
        trace_commands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn commands_and_options_anywhere() {
        let a = parse_str("--state-dir /s apply --wait x.json --json").unwrap();
        assert_eq!(a.command, Command::Apply("x.json".into()));
        assert_eq!(a.state_dir, Some("/s".into()));
        assert!(a.wait && a.json);
        let a = parse_str("plan --root=/mnt f").unwrap();
        assert_eq!(a.root, Some("/mnt".into()));
        assert_eq!(parse_str("status --help").unwrap().command, Command::Help);
        assert_eq!(parse_str("--version").unwrap().command, Command::Version);
    }

    #[test]
    fn usage_errors() {
        assert_eq!(parse_str("").unwrap_err(), "no command given");
        assert_eq!(
            parse_str("apply").unwrap_err(),
            "apply needs a declaration FILE"
        );
        assert_eq!(
            parse_str("frobnicate").unwrap_err(),
            "unknown command \"frobnicate\""
        );
        assert_eq!(
            parse_str("status --bogus").unwrap_err(),
            "unknown option --bogus"
        );
        assert_eq!(
            parse_str("check a b").unwrap_err(),
            "unexpected argument \"b\""
        );
        assert_eq!(
            parse_str("plan f --root").unwrap_err(),
            "--root needs a value"
        );
    }
}
