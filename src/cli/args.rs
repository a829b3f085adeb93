//! Command-line parsing on lexopt (as ripgrep's): arguments are `OsString`s, so a path that is not
//! UTF-8 is still a path. Options may come before or after the command; an option without a value
//! takes none (`--json=false` is an error, not `--json`).

use std::ffi::OsString;
use std::path::PathBuf;

use lexopt::Arg::{Long, Short, Value};

use crate::engine::Options;

mod help;
mod table;

pub use help::{command_usage, usage};
pub use table::{command_doc, CommandDoc, Operand, OptionDoc, COMMANDS, EXIT_CODES, OPTIONS};

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

/// Parses the command line: its options wherever they are, then the command its words name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut given = Given::read(args)?;
    let command = if given.help {
        // The command's own help when the first word names one (`apply --help`, `help apply`).
        let mut named = given.words.iter().filter_map(|w| w.to_str());
        let first = named.next();
        let topic = match first {
            Some("help") => named.next(),
            other => other,
        };
        Command::Help(topic.and_then(command_doc).map(|c| c.name))
    } else if given.version {
        Command::Version
    } else {
        given.command()?
    };
    if given.quiet && given.verbose {
        return Err("--quiet and --verbose cannot be given together".into());
    }
    Ok(Args {
        command,
        state_dir: given.state_dir,
        config: given.config,
        root: given.root,
        wait: given.wait,
        json: given.json,
        trace_commands: given.trace_commands,
        quiet: given.quiet,
        verbose: given.verbose,
        detailed_exitcode: given.detailed_exitcode,
    })
}

/// The options as given and the words among them, before the command is known: which options
/// a command takes is checked once its word is found (`check_scope`).
#[derive(Default)]
struct Given {
    state_dir: Option<PathBuf>,
    config: Option<PathBuf>,
    root: Option<PathBuf>,
    wait: bool,
    json: bool,
    trace_commands: bool,
    quiet: bool,
    verbose: bool,
    detailed_exitcode: bool,
    control_plane: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    ca_hash: Option<String>,
    force: bool,
    trust_keys: Vec<String>,
    out: Option<PathBuf>,
    key: Option<PathBuf>,
    confirm: Option<u64>,
    to: Option<u64>,
    help: bool,
    version: bool,
    words: Vec<OsString>,
    /// The options given, by their long name, for the scope check against `OPTIONS`.
    longs: Vec<&'static str>,
}

impl Given {
    /// Every argument read: an option by the table's name for it, with its value.
    fn read(args: impl IntoIterator<Item = OsString>) -> Result<Given, String> {
        let mut g = Given::default();
        let mut parser = lexopt::Parser::from_args(args);
        while let Some(arg) = parser.next().map_err(no_value)? {
            let long = match &arg {
                Short(c) => OPTIONS.iter().find(|o| o.short == Some(*c)).map(|o| o.long),
                Long(name) => OPTIONS.iter().find(|o| o.long == *name).map(|o| o.long),
                Value(_) => None,
            };
            // An option the table does not name is unknown, even with an arm below: the table
            // is where help, the manual and the completions come from.
            match (&arg, long) {
                (Short(c), None) => return Err(format!("unknown option -{c}")),
                (Long(name), None) => return Err(format!("unknown option --{name}")),
                _ => g.longs.extend(long),
            }
            match arg {
                Long("state-dir") => g.state_dir = Some(path(&mut parser, "--state-dir")?),
                Long("config") => g.config = Some(path(&mut parser, "--config")?),
                Long("root") => g.root = Some(path(&mut parser, "--root")?),
                Long("control-plane") => {
                    g.control_plane = Some(text(&mut parser, "--control-plane")?)
                }
                Long("token") => g.token = Some(text(&mut parser, "--token")?),
                Long("token-file") => g.token_file = Some(path(&mut parser, "--token-file")?),
                Long("ca-hash") => g.ca_hash = Some(text(&mut parser, "--ca-hash")?),
                Long("force") => g.force = true,
                Long("trust-key") => g.trust_keys.push(text(&mut parser, "--trust-key")?),
                Long("out") => g.out = Some(path(&mut parser, "--out")?),
                Long("key") => g.key = Some(path(&mut parser, "--key")?),
                Long("confirm") => g.confirm = Some(duration(&text(&mut parser, "--confirm")?)?),
                Long("to") => g.to = Some(number(&mut parser, "--to")?),
                Long("wait") => g.wait = true,
                Long("json") => g.json = true,
                Long("trace-commands") => g.trace_commands = true,
                Short('q') | Long("quiet") => g.quiet = true,
                Short('v') | Long("verbose") => g.verbose = true,
                Long("detailed-exitcode") => g.detailed_exitcode = true,
                Short('h') | Long("help") => g.help = true,
                Short('V') | Long("version") => g.version = true,
                Short(c) => return Err(format!("unknown option -{c}")),
                Long(name) => return Err(format!("unknown option --{name}")),
                Value(word) => g.words.push(word),
            }
        }
        Ok(g)
    }

    /// The command the first word names, with its operands; each option given checked to be
    /// one it takes.
    fn command(&mut self) -> Result<Command, String> {
        let mut words = std::mem::take(&mut self.words).into_iter();
        let verb = words.next().ok_or("no command given")?;
        let name = verb.to_string_lossy();
        let command = match self.verb(&verb, &mut words)? {
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
        check_scope(&self.longs, &name)?;
        // Checked here, where it was given, so that the error names the flag: the config only
        // checks its own `state_dir`.
        if let Some(dir) = self.state_dir.as_deref().filter(|d| !d.is_absolute()) {
            return Err(format!(
                "--state-dir: {} is not an absolute path",
                dir.display()
            ));
        }
        Ok(command)
    }

    /// The command `verb` names, with the operands and options it needs.
    fn verb(
        &mut self,
        verb: &OsString,
        words: &mut impl Iterator<Item = OsString>,
    ) -> Result<Command, String> {
        let name = verb.to_string_lossy();
        let mut file = || -> Result<PathBuf, String> {
            words
                .next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{name} needs a declaration FILE"))
        };
        Ok(match verb.to_str() {
            Some("check") => Command::Check(file()?),
            Some("plan") => Command::Plan(words.next().map(PathBuf::from)),
            Some("show") => Command::Show,
            Some("apply") => Command::Apply(file()?, self.confirm.take()),
            Some("confirm") => Command::Confirm,
            Some("rollback") => Command::Rollback {
                to: self.to.take(),
                force: self.force,
            },
            Some("reconcile") => Command::Reconcile,
            Some("owned") => Command::Owned,
            Some("status") => Command::Status,
            Some("run") => Command::Run,
            Some("reload") => Command::Reload(None),
            Some("join") => Command::Join(join(
                self.control_plane.take(),
                self.token.take(),
                self.token_file.take(),
                self.ca_hash.take(),
                self.force,
                std::mem::take(&mut self.trust_keys),
            )?),
            Some("keygen") => Command::Keygen {
                out: (self.out.take())
                    .ok_or("keygen needs --out FILE (where the private key goes)")?,
            },
            Some("sign") => Command::Sign {
                key: (self.key.take())
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
        })
    }
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
