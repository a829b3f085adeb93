//! Command-line parsing on lexopt (as ripgrep's): arguments are `OsString`s, so a path that is not
//! UTF-8 is still a path. Options may come before or after the command; an option without a value
//! takes none (`--json=false` is an error, not `--json`).

use std::ffi::OsString;
use std::path::PathBuf;

use lexopt::Arg::{Long, Short, Value};

use crate::engine::Options;

/// A command of the command line, as its help, the man page and the completions show it.
pub struct CommandDoc {
    pub name: &'static str,
    /// What follows the name in its usage line: its own options and its operands.
    pub usage: &'static str,
    /// What it does, one paragraph (wrapped where it is shown).
    pub about: &'static str,
    /// What its operands are, for the completions.
    pub operand: Operand,
}

/// What a command's operands are, so that a shell completes them.
#[derive(Clone, Copy, PartialEq)]
pub enum Operand {
    None,
    File,
    Pid,
    Command,
}

/// An option: `--long` (and `-s`), the name of its value (`None`: a flag, which takes none),
/// what it does, and the commands it is for (empty: every command). Parsing refuses it with any
/// other command, so this table is also where an option's scope is decided.
pub struct OptionDoc {
    pub long: &'static str,
    pub short: Option<char>,
    pub value: Option<&'static str>,
    pub about: &'static str,
    pub commands: &'static [&'static str],
}

/// The commands, in the order the help and the man page list them. Adding one is an entry here
/// and an arm in `parse` (tests check that each option scoped to it is in its usage line).
pub const COMMANDS: &[CommandDoc] = &[
    CommandDoc {
        name: "check",
        usage: "FILE",
        about: "Validate a declaration or signed envelope and say who signed it; changes nothing \
                (exit 0 valid, 2 invalid or not signed as trusted_keys require).",
        operand: Operand::File,
    },
    CommandDoc {
        name: "plan",
        usage: "[--detailed-exitcode] [FILE]",
        about: "Show what applying FILE would change, or with no FILE what `reconcile` would \
                change now; changes nothing (with --detailed-exitcode: exit 5 when there are \
                changes).",
        operand: Operand::File,
    },
    CommandDoc {
        name: "apply",
        usage: "[--confirm DURATION] FILE",
        about: "Validate, lock, converge, record: FILE becomes the declaration in force. With \
                --confirm it is pending: reverted to the last confirmed generation unless \
                `mesh-host confirm` runs within DURATION (300, 90s, 5m, 1h; at most 7d).",
        operand: Operand::File,
    },
    CommandDoc {
        name: "confirm",
        usage: "",
        about: "Confirm the pending declaration in force.",
        operand: Operand::None,
    },
    CommandDoc {
        name: "rollback",
        usage: "[--to REVISION] [--force]",
        about: "Put an earlier generation back in force (the one before, or REVISION's) and \
                converge to it; one whose signature has expired needs --force.",
        operand: Operand::None,
    },
    CommandDoc {
        name: "reconcile",
        usage: "",
        about: "Converge again to the declaration in force in the store.",
        operand: Operand::None,
    },
    CommandDoc {
        name: "owned",
        usage: "[--detailed-exitcode]",
        about: "Every resource the host owns, as observed now (with --detailed-exitcode: exit 5 \
                when one is drifted, missing or pending release).",
        operand: Operand::None,
    },
    CommandDoc {
        name: "show",
        usage: "",
        about: "Print the declaration in force as it was declared (--json: as a JSON value).",
        operand: Operand::None,
    },
    CommandDoc {
        name: "status",
        usage: "",
        about: "The service and its link, the declaration in force, its generations (pending, \
                confirmed, reverted), the recent runs, under a headline: healthy, degraded (exit \
                6) or error (exit 4), and why.",
        operand: Operand::None,
    },
    CommandDoc {
        name: "reload",
        usage: "[PID]",
        about: "Make the service re-read its config (SIGHUP to PID, what systemd's $MAINPID is, \
                or to the service the store names); what ExecReload= runs.",
        operand: Operand::Pid,
    },
    CommandDoc {
        name: "run",
        usage: "",
        about: "The service: hold the link to the control plane and reconcile on start, on each \
                declaration, on the drift timer and on reconnect (SIGHUP reloads the config, \
                SIGUSR1 reconciles now, SIGUSR2 re-reads the pending declaration's deadline, \
                SIGTERM stops after the current resource); a pending declaration not confirmed \
                by its deadline is reverted.",
        operand: Operand::None,
    },
    CommandDoc {
        name: "join",
        usage: "--control-plane https://HOST:PORT --token-file FILE --ca-hash sha256:HEX \
                [--force] [--trust-key ed25519:KEY ...]",
        about: "Trade a one-time token for this node's identity: write the control plane's \
                section (join.json), ca.pem and secret beside the config (as root), and make a \
                running service reconnect (SIGHUP); --force replaces an earlier join; \
                --trust-key (repeatable) sets trusted_keys: only declarations signed by them are \
                accepted from the control plane. The token comes from FILE, from standard input \
                with --token -, or from the command line with --token TOKEN (visible to every \
                user in ps).",
        operand: Operand::None,
    },
    CommandDoc {
        name: "keygen",
        usage: "--out FILE",
        about: "Write a new ed25519 private key to FILE (0600, never overwritten) and print its \
                public key (ed25519:BASE64).",
        operand: Operand::None,
    },
    CommandDoc {
        name: "sign",
        usage: "--key FILE DECLARATION",
        about: "Print a signed envelope of DECLARATION (a declaration, or an envelope to add \
                this key's signature to).",
        operand: Operand::File,
    },
    CommandDoc {
        name: "help",
        usage: "[COMMAND]",
        about: "This text, or COMMAND's.",
        operand: Operand::Command,
    },
];

/// The options, global ones first. Adding one is an entry here, an arm in `parse` and a field
/// where its value goes.
pub const OPTIONS: &[OptionDoc] = &[
    OptionDoc {
        long: "state-dir",
        short: None,
        value: Some("DIR"),
        about: "The store (default /var/lib/mesh-host, or the config's state_dir).",
        commands: &[],
    },
    OptionDoc {
        long: "config",
        short: None,
        value: Some("FILE"),
        about: "The host's config (default /etc/mesh-host/config.json).",
        commands: &[],
    },
    OptionDoc {
        long: "root",
        short: None,
        value: Some("DIR"),
        about: "Apply into a mounted root (rescue): what needs the running system is deferred.",
        commands: &[],
    },
    OptionDoc {
        long: "wait",
        short: None,
        value: None,
        about: "Wait for another run's lock instead of exiting 3.",
        commands: &[],
    },
    OptionDoc {
        long: "json",
        short: None,
        value: None,
        about: "Machine-readable output (docs/json.md); an error too, as a JSON document.",
        commands: &[],
    },
    OptionDoc {
        long: "trace-commands",
        short: None,
        value: None,
        about: "List every external command run (stderr; in --json output as `commands`).",
        commands: &[],
    },
    OptionDoc {
        long: "quiet",
        short: Some('q'),
        value: None,
        about: "No progress and no warnings on stderr: only errors and the result.",
        commands: &[],
    },
    OptionDoc {
        long: "verbose",
        short: Some('v'),
        value: None,
        about: "More progress on a terminal: each command's exit and time, what each kind found.",
        commands: &[],
    },
    OptionDoc {
        long: "help",
        short: Some('h'),
        value: None,
        about: "This text; after a command, that command's.",
        commands: &[],
    },
    OptionDoc {
        long: "version",
        short: Some('V'),
        value: None,
        about: "The version.",
        commands: &[],
    },
    OptionDoc {
        long: "confirm",
        short: None,
        value: Some("DURATION"),
        about: "The declaration is pending until `mesh-host confirm`; reverted after DURATION \
                (300, 90s, 5m, 1h, 2d; at most 7 days).",
        commands: &["apply"],
    },
    OptionDoc {
        long: "detailed-exitcode",
        short: None,
        value: None,
        about: "Exit 5 when there is something to change (plan: changes; owned: drift).",
        commands: &["plan", "owned"],
    },
    OptionDoc {
        long: "to",
        short: None,
        value: Some("REVISION"),
        about: "The generation of this revision, not the one before.",
        commands: &["rollback"],
    },
    OptionDoc {
        long: "force",
        short: None,
        value: None,
        about: "join: replace an earlier join; rollback: go back to a generation whose \
                signature has expired.",
        commands: &["join", "rollback"],
    },
    OptionDoc {
        long: "control-plane",
        short: None,
        value: Some("URL"),
        about: "The control plane, https://HOST:PORT.",
        commands: &["join"],
    },
    OptionDoc {
        long: "token-file",
        short: None,
        value: Some("FILE"),
        about: "The one-time token, read from FILE.",
        commands: &["join"],
    },
    OptionDoc {
        long: "token",
        short: None,
        value: Some("TOKEN"),
        about: "The one-time token; `-` reads it from standard input (given on the command \
                line, every user sees it in ps).",
        commands: &["join"],
    },
    OptionDoc {
        long: "ca-hash",
        short: None,
        value: Some("sha256:HEX"),
        about: "The SHA-256 of the control plane's CA certificate (DER), the only CA trusted.",
        commands: &["join"],
    },
    OptionDoc {
        long: "trust-key",
        short: None,
        value: Some("ed25519:KEY"),
        about: "Accept only declarations signed by this key (repeatable): the config's \
                trusted_keys.",
        commands: &["join"],
    },
    OptionDoc {
        long: "out",
        short: None,
        value: Some("FILE"),
        about: "Where the new private key goes.",
        commands: &["keygen"],
    },
    OptionDoc {
        long: "key",
        short: None,
        value: Some("FILE"),
        about: "The private key keygen wrote.",
        commands: &["sign"],
    },
];

/// The exit codes, shown by `--help` and the man page.
pub const EXIT_CODES: &[(i32, &str)] = &[
    (0, "converged, valid or joined"),
    (1, "some resources failed (the rest applied)"),
    (2, "invalid or refused (nothing changed)"),
    (3, "another run holds the lock"),
    (
        4,
        "the host could not run (store, I/O, stdout) or could not complete the join (control \
         plane unreachable, files not written)",
    ),
    (
        5,
        "plan or owned with --detailed-exitcode: there is something to change",
    ),
    (6, "status: degraded (the headline says why)"),
];

/// The help text: the kinds it manages (from the registry of kinds), the commands, the options
/// every command takes, the exit codes.
pub fn usage() -> String {
    let mut out = format!(
        "mesh-host: converges this machine to a declaration ({})\n\n\
         Usage: mesh-host [OPTIONS] COMMAND [ARGS]\n\nCommands:\n",
        crate::model::spec::ABOUT.join(", ")
    );
    for c in COMMANDS {
        item(&mut out, &format!("{} {}", c.name, c.usage), c.about);
    }
    global_options(&mut out);
    out.push_str("\n`mesh-host COMMAND --help` shows a command's own options.\n\n");
    out.push_str(&exit_codes());
    out
}

/// `mesh-host COMMAND --help`: its usage, what it does, its own options, then the global ones.
pub fn command_usage(command: &CommandDoc) -> String {
    let mut out = String::new();
    let synopsis = format!("mesh-host [OPTIONS] {} {}", command.name, command.usage);
    wrap(&mut out, &format!("Usage: {synopsis}"), 7, WIDTH);
    out.push('\n');
    wrap(&mut out, command.about, 0, WIDTH);
    let own: Vec<&OptionDoc> = OPTIONS
        .iter()
        .filter(|o| o.commands.contains(&command.name))
        .collect();
    if !own.is_empty() {
        out.push_str(&format!("\nOptions of {}:\n", command.name));
        for o in own {
            item(&mut out, &option_synopsis(o), o.about);
        }
    }
    global_options(&mut out);
    out.push('\n');
    out.push_str(&exit_codes());
    out
}

/// The options every command takes, as both helps list them.
fn global_options(out: &mut String) {
    out.push_str("\nOptions (every command):\n");
    for o in OPTIONS.iter().filter(|o| o.commands.is_empty()) {
        item(out, &option_synopsis(o), o.about);
    }
}

/// The command of this name in `COMMANDS`.
pub fn command_doc(name: &str) -> Option<&'static CommandDoc> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// `-h, --help` or `--state-dir DIR`.
pub fn option_synopsis(o: &OptionDoc) -> String {
    let short = o.short.map(|c| format!("-{c}, ")).unwrap_or_default();
    match o.value {
        Some(v) => format!("{short}--{} {v}", o.long),
        None => format!("{short}--{}", o.long),
    }
}

fn exit_codes() -> String {
    let codes: Vec<String> = EXIT_CODES.iter().map(|(c, s)| format!("{c} {s}")).collect();
    let mut out = String::new();
    wrap(
        &mut out,
        &format!("Exit codes: {}.", codes.join("; ")),
        0,
        WIDTH,
    );
    out.push_str("A closed stdout (`| head`) keeps the exit code.\n");
    out.push_str("Logs go to stderr; set RUST_LOG=debug for more.");
    out
}

/// The help's width, and where an item's description starts.
const WIDTH: usize = 100;
const INDENT: usize = 24;

/// One item of a list: its synopsis, then its description from column `INDENT`, on the next
/// line when the synopsis is too long.
fn item(out: &mut String, synopsis: &str, about: &str) {
    out.push_str("  ");
    if synopsis.len() + 3 <= INDENT {
        out.push_str(&format!("{synopsis:width$}", width = INDENT - 2));
    } else {
        wrap(out, synopsis, 7, WIDTH);
        out.push_str(&" ".repeat(INDENT));
    }
    wrap(out, about, INDENT, WIDTH);
}

/// `text`'s words wrapped at `width`, the first line continuing what `out` has, the next ones
/// indented by `indent`; ends with a newline.
fn wrap(out: &mut String, text: &str, indent: usize, width: usize) {
    let mut column = out.len() - out.rfind('\n').map_or(0, |i| i + 1);
    let mut first = true;
    for word in text.split_whitespace() {
        if !first && column + 1 + word.len() > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
        } else if !first {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += word.len();
        first = false;
    }
    out.push('\n');
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Check(PathBuf),
    /// The file, or the declaration in force.
    Plan(Option<PathBuf>),
    Show,
    /// The file, and `--confirm DURATION` in seconds.
    Apply(PathBuf, Option<u64>),
    Confirm,
    Rollback {
        to: Option<u64>,
        force: bool,
    },
    Reconcile,
    Owned,
    Status,
    Run,
    Reload(Option<u32>),
    Join(Join),
    Keygen {
        out: PathBuf,
    },
    Sign {
        key: PathBuf,
        file: PathBuf,
    },
    /// `--help` or `help`, with the command it was given to, if any.
    Help(Option<&'static str>),
    Version,
}

/// `join`'s arguments, checked for form here; what they lead to is checked in `join.rs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Join {
    /// `host:port` (port 443 when the URL gives none), from `https://HOST[:PORT][/]`.
    pub authority: String,
    pub token: Token,
    /// The CA's SHA-256 (of its DER encoding), lower-case hex.
    pub ca_hash: String,
    pub force: bool,
    /// `--trust-key`, each already checked to be a public key: the config's `trusted_keys`.
    pub trust_keys: Vec<String>,
}

/// Where `join` takes its token from. A token on the command line is in every user's `ps`, so
/// the file and standard input are the ones the docs recommend.
#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// `--token TOKEN`.
    Given(String),
    /// `--token -`.
    Stdin,
    /// `--token-file FILE`.
    File(PathBuf),
}

/// A token's form: one word of printable ASCII.
pub fn check_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    if token.chars().any(|c| !c.is_ascii_graphic()) {
        return Err("the token must be printable ASCII without spaces".into());
    }
    Ok(())
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
    /// `-q`: no progress, no warnings.
    pub quiet: bool,
    /// `-v`: more progress.
    pub verbose: bool,
    /// `--detailed-exitcode`: plan and owned exit 5 when there is something to change.
    pub detailed_exitcode: bool,
}

impl Args {
    /// What the engine is asked to work with, from this command line.
    pub fn engine_options(&self) -> Options {
        Options {
            config: self.config.clone(),
            state_dir: self.state_dir.clone(),
            root: self.root.clone(),
            trace_commands: self.trace_commands,
            service: self.command == Command::Run,
            // What the terminal shows (`cli/progress.rs`): set beside the config in `cli/mod.rs`.
            progress: None,
            clock: crate::os::clock::Clock::system(),
        }
    }
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut state_dir = None;
    let mut config = None;
    let mut root = None;
    let mut wait = false;
    let mut json = false;
    let mut trace_commands = false;
    let (mut quiet, mut verbose) = (false, false);
    let mut detailed_exitcode = false;
    let mut control_plane = None;
    let mut token = None;
    let mut token_file = None;
    let mut ca_hash = None;
    let mut force = false;
    let mut trust_keys = Vec::new();
    let mut out = None;
    let mut key = None;
    let mut confirm = None;
    let mut to = None;
    let mut help = false;
    let mut version = false;
    let mut words = Vec::new();
    // The options given, by their long name, for the scope check against `OPTIONS`.
    let mut given: Vec<&'static str> = Vec::new();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(no_value)? {
        let long = match &arg {
            Short(c) => OPTIONS.iter().find(|o| o.short == Some(*c)).map(|o| o.long),
            Long(name) => OPTIONS.iter().find(|o| o.long == *name).map(|o| o.long),
            Value(_) => None,
        };
        // An option the table does not name is unknown, even with an arm below: the table is
        // where help, the manual and the completions come from.
        match (&arg, long) {
            (Short(c), None) => return Err(format!("unknown option -{c}")),
            (Long(name), None) => return Err(format!("unknown option --{name}")),
            _ => given.extend(long),
        }
        match arg {
            Long("state-dir") => state_dir = Some(path(&mut parser, "--state-dir")?),
            Long("config") => config = Some(path(&mut parser, "--config")?),
            Long("root") => root = Some(path(&mut parser, "--root")?),
            Long("control-plane") => control_plane = Some(text(&mut parser, "--control-plane")?),
            Long("token") => token = Some(text(&mut parser, "--token")?),
            Long("token-file") => token_file = Some(path(&mut parser, "--token-file")?),
            Long("ca-hash") => ca_hash = Some(text(&mut parser, "--ca-hash")?),
            Long("force") => force = true,
            Long("trust-key") => trust_keys.push(text(&mut parser, "--trust-key")?),
            Long("out") => out = Some(path(&mut parser, "--out")?),
            Long("key") => key = Some(path(&mut parser, "--key")?),
            Long("confirm") => confirm = Some(duration(&text(&mut parser, "--confirm")?)?),
            Long("to") => to = Some(number(&mut parser, "--to")?),
            Long("wait") => wait = true,
            Long("json") => json = true,
            Long("trace-commands") => trace_commands = true,
            Short('q') | Long("quiet") => quiet = true,
            Short('v') | Long("verbose") => verbose = true,
            Long("detailed-exitcode") => detailed_exitcode = true,
            Short('h') | Long("help") => help = true,
            Short('V') | Long("version") => version = true,
            Short(c) => return Err(format!("unknown option -{c}")),
            Long(name) => return Err(format!("unknown option --{name}")),
            Value(word) => words.push(word),
        }
    }
    let command = if help {
        // The command's own help when the first word names one (`apply --help`, `help apply`).
        let mut named = words.iter().filter_map(|w| w.to_str());
        let first = named.next();
        let topic = match first {
            Some("help") => named.next(),
            other => other,
        };
        Command::Help(topic.and_then(command_doc).map(|c| c.name))
    } else if version {
        Command::Version
    } else {
        let mut words = words.into_iter();
        let verb = words.next().ok_or("no command given")?;
        let name = verb.to_string_lossy();
        let mut file = || -> Result<PathBuf, String> {
            words
                .next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{name} needs a declaration FILE"))
        };
        let command = match verb.to_str() {
            Some("check") => Command::Check(file()?),
            Some("plan") => Command::Plan(words.next().map(PathBuf::from)),
            Some("show") => Command::Show,
            Some("apply") => Command::Apply(file()?, confirm.take()),
            Some("confirm") => Command::Confirm,
            Some("rollback") => Command::Rollback {
                to: to.take(),
                force,
            },
            Some("reconcile") => Command::Reconcile,
            Some("owned") => Command::Owned,
            Some("status") => Command::Status,
            Some("run") => Command::Run,
            Some("reload") => Command::Reload(None),
            Some("join") => Command::Join(join(
                control_plane.take(),
                token.take(),
                token_file.take(),
                ca_hash.take(),
                force,
                std::mem::take(&mut trust_keys),
            )?),
            Some("keygen") => Command::Keygen {
                out: out
                    .take()
                    .ok_or("keygen needs --out FILE (where the private key goes)")?,
            },
            Some("sign") => Command::Sign {
                key: key
                    .take()
                    .ok_or("sign needs --key FILE (the private key keygen wrote)")?,
                file: file()?,
            },
            Some("help") => {
                let topic = words.next();
                Command::Help(
                    topic
                        .as_deref()
                        .and_then(|t| t.to_str())
                        .and_then(command_doc)
                        .map(|c| c.name),
                )
            }
            _ => return Err(format!("unknown command {verb:?}")),
        };
        let command = match command {
            Command::Reload(None) => Command::Reload(match words.next() {
                Some(pid) => Some(
                    pid.to_str()
                        .and_then(|p| p.parse().ok())
                        .filter(|&p| p > 0)
                        .ok_or_else(|| format!("reload: {pid:?} is not a process id"))?,
                ),
                None => None,
            }),
            command => command,
        };
        if let Some(extra) = words.next() {
            return Err(format!("unexpected argument {extra:?}"));
        }
        check_scope(&given, &name)?;
        // Checked here, where it was given, so that the error names the flag: the config only
        // checks its own `state_dir`.
        if let Some(dir) = state_dir.as_deref().filter(|d| !d.is_absolute()) {
            return Err(format!(
                "--state-dir: {} is not an absolute path",
                dir.display()
            ));
        }
        command
    };
    if quiet && verbose {
        return Err("--quiet and --verbose cannot be given together".into());
    }
    Ok(Args {
        command,
        state_dir,
        config,
        root,
        wait,
        json,
        trace_commands,
        quiet,
        verbose,
        detailed_exitcode,
    })
}

/// Each option given is one `OPTIONS` gives to `verb` (or to every command).
fn check_scope(given: &[&str], verb: &str) -> Result<(), String> {
    for long in given {
        let Some(option) = OPTIONS.iter().find(|o| o.long == *long) else {
            continue;
        };
        if !option.commands.is_empty() && !option.commands.contains(&verb) {
            return Err(format!(
                "--{long} is only for {}",
                option.commands.join(" and ")
            ));
        }
    }
    Ok(())
}

/// An option's value; an empty one is as much a mistake as none.
fn value(parser: &mut lexopt::Parser, option: &str) -> Result<OsString, String> {
    match parser.value() {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(format!("{option} needs a value")),
    }
}

/// A path option's value: any bytes, as Linux paths are.
fn path(parser: &mut lexopt::Parser, option: &str) -> Result<PathBuf, String> {
    value(parser, option).map(PathBuf::from)
}

/// A whole number of at least 1 (`--to REVISION`).
fn number(parser: &mut lexopt::Parser, option: &str) -> Result<u64, String> {
    let word = text(parser, option)?;
    word.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{option}: {word:?} is not a whole number of at least 1"))
}

/// The longest `--confirm`: a week, past any window a person means to come back within.
pub const MAX_CONFIRM_SECS: u64 = 7 * 86_400;

/// `--confirm`'s duration in seconds: `300`, `90s`, `5m`, `1h`, `2d`; at least 1 s, at most
/// `MAX_CONFIRM_SECS`, computed without overflow (issue 32: a huge number never wraps).
pub fn duration(word: &str) -> Result<u64, String> {
    let unit = |c: char| match c {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        _ => None,
    };
    let (digits, scale) = match word.chars().last().and_then(unit) {
        Some(scale) => (&word[..word.len() - 1], scale),
        None => (word, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "--confirm: {word:?} is not a duration (give seconds, or a number with s, m, h or \
             d: 300, 90s, 5m, 1h); the declaration FILE comes after it"
        ));
    }
    let max = MAX_CONFIRM_SECS;
    let too_long = || {
        format!(
            "--confirm: {word:?} is more than the maximum of {} ({max} s)",
            crate::util::words::age(max)
        )
    };
    let secs = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(too_long)?;
    match secs {
        0 => Err(format!("--confirm: {word:?} is no time; give at least 1 s")),
        s if s > max => Err(too_long()),
        s => Ok(s),
    }
}

/// A text option's value (a URL, token, hash or key), which must be UTF-8.
fn text(parser: &mut lexopt::Parser, option: &str) -> Result<String, String> {
    value(parser, option)?
        .into_string()
        .map_err(|v| format!("{option}: {v:?} is not UTF-8"))
}

/// The one error lexopt's `next` gives: a value attached to an option that takes none
/// (`--json=false`), refused rather than read as the option given.
fn no_value(e: lexopt::Error) -> String {
    match e {
        lexopt::Error::UnexpectedValue { option, value } => {
            format!("{option} takes no value (given {value:?})")
        }
        e => e.to_string(),
    }
}

fn join(
    control_plane: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    ca_hash: Option<String>,
    force: bool,
    trust_keys: Vec<String>,
) -> Result<Join, String> {
    let need = |v: Option<String>, option: &str, what: &str| {
        v.ok_or_else(|| format!("join needs {option} {what}"))
    };
    let url = need(control_plane, "--control-plane", "https://HOST:PORT")?;
    let token = match (token, token_file) {
        (Some(_), Some(_)) => return Err("join takes --token or --token-file, not both".into()),
        (Some(t), None) if t == "-" => Token::Stdin,
        (Some(t), None) => {
            check_token(&t).map_err(|e| format!("--token: {e}"))?;
            Token::Given(t)
        }
        (None, Some(file)) => Token::File(file),
        (None, None) => {
            return Err(
                "join needs --token-file FILE (or --token -, read from standard input) \
                 with the one-time token the control plane issued"
                    .into(),
            )
        }
    };
    let ca_hash = need(
        ca_hash,
        "--ca-hash",
        "sha256:HEX (the control plane's CA hash)",
    )?;
    let authority = https_authority(&url)?;
    let hex = ca_hash
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("--ca-hash: {ca_hash:?} does not start with sha256:"))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "--ca-hash: {ca_hash:?} is not sha256: and 64 hex digits"
        ));
    }
    for key in &trust_keys {
        crate::model::trust::PublicKey::parse(key).map_err(|e| format!("--trust-key: {e}"))?;
    }
    Ok(Join {
        authority,
        token,
        ca_hash: hex.to_ascii_lowercase(),
        force,
        trust_keys,
    })
}

/// `host:port` of `https://HOST[:PORT][/]`; nothing else (no path, user or query) is accepted.
fn https_authority(url: &str) -> Result<String, String> {
    let bad = |why: &str| format!("--control-plane: {url:?} {why}; give https://HOST:PORT");
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| bad("is not an https:// URL"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err(bad("has a path, query or user, or no host"));
    }
    if authority
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad("has spaces"));
    }
    // An IPv6 literal is bracketed, so its port follows "]:".
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("has no host"));
    }
    match port {
        None => Ok(format!("{host}:443")),
        Some(p) if p.parse::<u16>().is_ok_and(|p| p > 0) => Ok(authority.to_string()),
        Some(p) => Err(bad(&format!("has port {p:?}, not 1-65535"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(OsString::from))
    }

    #[test]
    fn commands_and_options_anywhere() {
        let a = parse_str("--state-dir /s apply --wait x.json --json").unwrap();
        assert_eq!(a.command, Command::Apply("x.json".into(), None));
        assert_eq!(a.state_dir, Some("/s".into()));
        assert!(a.wait && a.json);
        let a = parse_str("plan --root=/mnt f").unwrap();
        assert_eq!(a.root, Some("/mnt".into()));
        assert_eq!(
            parse_str("status --help").unwrap().command,
            Command::Help(Some("status"))
        );
        assert_eq!(
            parse_str("help apply").unwrap().command,
            Command::Help(Some("apply"))
        );
        assert_eq!(
            parse_str("--help help join").unwrap().command,
            Command::Help(Some("join"))
        );
        assert_eq!(parse_str("--help").unwrap().command, Command::Help(None));
        assert_eq!(parse_str("--version").unwrap().command, Command::Version);
        assert_eq!(parse_str("reload").unwrap().command, Command::Reload(None));
        assert_eq!(
            parse_str("reload 42").unwrap().command,
            Command::Reload(Some(42))
        );
        assert_eq!(
            parse_str("reload 0").unwrap_err(),
            "reload: \"0\" is not a process id"
        );
    }

    #[test]
    fn the_tables_and_the_parser_agree() {
        for command in COMMANDS {
            // Each is a command the parser knows (it may then want more than its name).
            let err = parse_str(command.name).err().unwrap_or_default();
            assert!(
                !err.starts_with("unknown command"),
                "{}: {err}",
                command.name
            );
            for option in OPTIONS
                .iter()
                .filter(|o| o.commands.contains(&command.name))
            {
                let shown = format!("--{}", option.long);
                assert!(command.usage.contains(&shown), "{}: {shown}", command.name);
            }
            // `help --help` is the whole help.
            let help = parse_str(&format!("{} --help", command.name)).unwrap();
            let topic = Some(command.name).filter(|&name| name != "help");
            assert_eq!(help.command, Command::Help(topic));
        }
        for option in OPTIONS {
            let value = option.value.map_or("", |_| "=1");
            let line = format!("--{}{value}", option.long);
            let err = parse_str(&line).err().unwrap_or_default();
            assert!(!err.starts_with("unknown option"), "{line}: {err}");
            for command in option.commands {
                assert!(
                    command_doc(command).is_some(),
                    "--{}: {command}",
                    option.long
                );
            }
        }
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
        assert_eq!(
            parse_str("status --token t").unwrap_err(),
            "--token is only for join"
        );
    }

    #[test]
    fn options_without_a_value_take_none() {
        for flag in [
            "--json",
            "--wait",
            "--trace-commands",
            "--quiet",
            "--verbose",
            "--force",
            "--help",
            "--version",
        ] {
            assert_eq!(
                parse_str(&format!("status {flag}=false")).unwrap_err(),
                format!("{flag} takes no value (given \"false\")")
            );
        }
        assert_eq!(
            parse_str("status --json=").unwrap_err(),
            "--json takes no value (given \"\")"
        );
        assert!(parse_str("status --json").unwrap().json);
        assert_eq!(parse_str("-hV").unwrap().command, Command::Help(None));
    }

    #[test]
    fn quiet_or_verbose_but_not_both() {
        let (q, v) = (
            parse_str("-q apply f").unwrap(),
            parse_str("apply --verbose f").unwrap(),
        );
        assert!(q.quiet && !q.verbose && v.verbose && !v.quiet);
        assert_eq!(
            parse_str("apply f -v").unwrap().command,
            Command::Apply("f".into(), None)
        );
        assert_eq!(
            parse_str("-qv apply f").unwrap_err(),
            "--quiet and --verbose cannot be given together"
        );
    }

    #[test]
    fn arguments_that_are_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let os = |b: &[u8]| OsString::from(std::ffi::OsStr::from_bytes(b));
        let parse_os = |line: &[u8]| parse(line.split(|&b| b == b' ').map(os));
        let a = parse_os(b"--state-dir /s\xff check d\xfe.json").unwrap();
        assert_eq!(a.command, Command::Check(os(b"d\xfe.json").into()));
        assert_eq!(a.state_dir, Some(os(b"/s\xff").into()));
        for (line, want) in [
            (&b"fr\xffb"[..], r#"unknown command "fr\xFFb""#),
            (b"reload 4\xff", r#"reload: "4\xFF" is not a process id"#),
            (b"status x\xff", r#"unexpected argument "x\xFF""#),
            (b"join --token t\xff", r#"--token: "t\xFF" is not UTF-8"#),
            (
                b"join --control-plane=https://\xff",
                r#"--control-plane: "https://\xFF" is not UTF-8"#,
            ),
            (b"status --st\xffte", "unknown option --st\u{fffd}te"),
        ] {
            assert_eq!(parse_os(line).unwrap_err(), want, "{line:?}");
        }
    }

    #[test]
    fn a_relative_state_dir_is_refused_naming_the_flag() {
        assert_eq!(
            parse_str("--state-dir state status").unwrap_err(),
            "--state-dir: state is not an absolute path"
        );
        assert_eq!(
            parse_str("apply f --state-dir=./s").unwrap_err(),
            "--state-dir: ./s is not an absolute path"
        );
        // A relative --config or --root is a path all the same: the config names its file when
        // it refuses one of its keys, and the root is where the files go.
        let a = parse_str("--config c.json --root mnt status").unwrap();
        assert_eq!(
            (a.config, a.root),
            (Some("c.json".into()), Some("mnt".into()))
        );
    }

    #[test]
    fn join_arguments() {
        let hash = format!("sha256:{}", "AB".repeat(32));
        let a = parse_str(&format!(
            "join --control-plane https://cp.example:8443/ --token t0k --ca-hash {hash} --force"
        ))
        .unwrap();
        assert_eq!(
            a.command,
            Command::Join(Join {
                authority: "cp.example:8443".into(),
                token: Token::Given("t0k".into()),
                ca_hash: "ab".repeat(32),
                force: true,
                trust_keys: Vec::new(),
            })
        );
        let join = |url: &str, hash: &str| {
            parse_str(&format!(
                "join --control-plane {url} --token t --ca-hash {hash}"
            ))
            .map(|a| match a.command {
                Command::Join(j) => j.authority,
                other => panic!("{other:?}"),
            })
        };
        let good = format!("sha256:{}", "0".repeat(64));
        assert_eq!(join("https://cp", &good).unwrap(), "cp:443");
        assert_eq!(join("https://[::1]:9", &good).unwrap(), "[::1]:9");
        assert_eq!(join("https://[::1]", &good).unwrap(), "[::1]:443");
        for (url, hash, want) in [
            ("http://cp:1", good.as_str(), "is not an https:// URL"),
            ("https://cp:1/v1", &good, "has a path"),
            ("https://cp:0", &good, "not 1-65535"),
            ("https://cp:x", &good, "not 1-65535"),
            ("https://:1", &good, "has no host"),
            ("https://cp:1", "0000", "does not start with sha256:"),
            ("https://cp:1", "sha256:00", "64 hex digits"),
        ] {
            let err = join(url, hash).unwrap_err();
            assert!(err.contains(want), "{url} {hash}: {err}");
        }
        assert_eq!(
            parse_str("join --token t").unwrap_err(),
            "join needs --control-plane https://HOST:PORT"
        );
    }

    #[test]
    fn keys_and_signing_arguments() {
        let key = "ed25519:iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=";
        let a = parse_str(&format!(
            "join --control-plane https://cp:1 --token t --ca-hash sha256:{} --trust-key {key} \
             --trust-key={key}",
            "0".repeat(64)
        ))
        .unwrap();
        match a.command {
            Command::Join(j) => assert_eq!(j.trust_keys, vec![key, key]),
            other => panic!("{other:?}"),
        }
        let bad = parse_str(&format!(
            "join --control-plane https://cp:1 --token t --ca-hash sha256:{} --trust-key x",
            "0".repeat(64)
        ));
        assert!(bad
            .unwrap_err()
            .contains("--trust-key: \"x\" is not a public key"));
        assert_eq!(
            parse_str("keygen --out k").unwrap().command,
            Command::Keygen { out: "k".into() }
        );
        assert_eq!(
            parse_str("sign d.json --key k").unwrap().command,
            Command::Sign {
                key: "k".into(),
                file: "d.json".into()
            }
        );
        for (line, want) in [
            ("keygen", "keygen needs --out FILE"),
            ("sign d.json", "sign needs --key FILE"),
            ("sign --key k", "sign needs a declaration FILE"),
            ("check d.json --key k", "--key is only for sign"),
            ("sign --key k d --out o", "--out is only for keygen"),
            (
                &format!("status --trust-key {key}"),
                "--trust-key is only for join",
            ),
        ] {
            let err = parse_str(line).unwrap_err();
            assert!(err.starts_with(want), "{line}: {err}");
        }
    }

    #[test]
    fn join_takes_its_token_from_a_file_stdin_or_the_command_line() {
        let token = |options: &str| {
            let hash = format!("sha256:{}", "0".repeat(64));
            parse_str(&format!(
                "join --control-plane https://cp {options} --ca-hash {hash}"
            ))
            .map(|a| match a.command {
                Command::Join(j) => j.token,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(
            token("--token-file /root/tok").unwrap(),
            Token::File("/root/tok".into())
        );
        assert_eq!(token("--token -").unwrap(), Token::Stdin);
        assert_eq!(token("--token t0k").unwrap(), Token::Given("t0k".into()));
        assert!(token("--token a --token-file f")
            .unwrap_err()
            .contains("not both"));
        assert!(token("").unwrap_err().contains("--token-file FILE"));
        assert!(token("--token=a\u{7f}b").unwrap_err().contains("printable"));
        assert_eq!(
            parse_str("status --token-file f").unwrap_err(),
            "--token-file is only for join"
        );
    }

    #[test]
    fn confirm_takes_a_duration_and_names_a_value_it_refuses() {
        let confirm = |w: &str| parse_str(&format!("apply --confirm {w} f")).map(|a| a.command);
        for (word, secs) in [
            ("300", 300),
            ("90s", 90),
            ("5m", 300),
            ("1h", 3600),
            ("7d", 604_800),
        ] {
            assert_eq!(
                confirm(word),
                Ok(Command::Apply("f".into(), Some(secs))),
                "{word}"
            );
        }
        for (word, want) in [
            ("f.json", r#"--confirm: "f.json" is not a duration"#),
            ("5x", r#"--confirm: "5x" is not a duration"#),
            ("m", r#"--confirm: "m" is not a duration"#),
            ("-5", r#"--confirm: "-5" is not a duration"#),
            ("0", r#"--confirm: "0" is no time"#),
            (
                "8d",
                r#"--confirm: "8d" is more than the maximum of 7 days (604800 s)"#,
            ),
        ] {
            let err = confirm(word).unwrap_err();
            assert!(err.starts_with(want), "{word}: {err}");
        }
    }

    /// Issue 32, item 3: a deadline past u64 never wraps into the past.
    #[test]
    fn issue32_confirm_of_u64_max_is_refused_naming_the_value_and_the_maximum() {
        for word in [
            "18446744073709551615",
            "18446744073709551616",
            "307445734561825861m",
        ] {
            let err = duration(word).unwrap_err();
            assert_eq!(
                err,
                format!("--confirm: {word:?} is more than the maximum of 7 days (604800 s)")
            );
        }
    }
}
