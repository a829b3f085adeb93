//! Command-line parsing on lexopt (as ripgrep's): arguments are `OsString`s, so a path that is not
//! UTF-8 is still a path. Options may come before or after the command; an option without a value
//! takes none (`--json=false` is an error, not `--json`).

use std::ffi::OsString;
use std::path::PathBuf;

use lexopt::Arg::{Long, Short, Value};

use crate::engine::Options;

/// The help text: the kinds it manages (from the registry of kinds), then `USAGE`.
pub fn usage() -> String {
    format!(
        "mesh-host: converges this machine to a declaration ({})\n\n{USAGE}",
        crate::model::spec::ABOUT.join(", ")
    )
}

const USAGE: &str = "\
Usage: mesh-host [OPTIONS] COMMAND [ARGS]

Commands:
  check FILE        validate a declaration or signed envelope, say who signed it; changes
                    nothing (exit 0 valid, 2 invalid or not signed as trusted_keys require)
  plan [FILE]       show what applying FILE would change, or with no FILE what `reconcile`
                    would change now; changes nothing (with --detailed-exitcode: exit 5 when
                    there are changes)
  apply [--confirm DURATION] FILE
                    validate, lock, converge, record; FILE becomes the declaration in force;
                    with --confirm, pending: reverted to the last confirmed generation unless
                    `mesh-host confirm` runs within DURATION (300, 90s, 5m, 1h; at most 7d)
  confirm           confirm the pending declaration in force
  rollback [--to REVISION] [--force]
                    put an earlier generation back in force (the one before, or REVISION's) and
                    converge to it; one whose signature has expired needs --force
  reconcile         converge again to the declaration in force in the store
  owned             every resource the host owns, as observed now (with --detailed-exitcode:
                    exit 5 when one is drifted, missing or pending release)
  show              print the declaration in force as it was declared (--json: as a value)
  status            the service and its link, the declaration in force, its generations
                    (pending, confirmed, reverted), the recent runs
  reload [PID]      make the service re-read its config (SIGHUP to PID, what systemd's
                    $MAINPID is, or to the service the store names); what ExecReload= runs
  run               the service: hold the link to the control plane and reconcile on start,
                    on each declaration, on the drift timer and on reconnect (SIGHUP reloads
                    the config, SIGUSR1 reconciles now, SIGUSR2 re-reads the pending
                    declaration's deadline, SIGTERM stops after the current resource); a
                    pending declaration not confirmed by its deadline is reverted
  join --control-plane https://HOST:PORT --token-file FILE --ca-hash sha256:HEX [--force]
       [--trust-key ed25519:KEY ...]
                    trade a one-time token for this node's identity: write the config's
                    control_plane section, ca.pem and secret beside the config (as root), and
                    make a running service reconnect (SIGHUP); --force replaces an earlier join;
                    --trust-key (repeatable) sets trusted_keys: only declarations signed by
                    them are accepted from the control plane. The token comes from FILE, from
                    standard input with --token -, or from the command line with --token TOKEN
                    (visible to every user in ps)
  keygen --out FILE write a new ed25519 private key to FILE (0600, never overwritten) and
                    print its public key (ed25519:BASE64)
  sign --key FILE DECLARATION
                    print a signed envelope of DECLARATION (a declaration, or an envelope to
                    add this key's signature to)

Options:
  --state-dir DIR       the store (default /var/lib/mesh-host, or the config's state_dir)
  --config FILE         the host's config (default /etc/mesh-host/config.json)
  --root DIR            apply into a mounted root (rescue): what needs the running system is deferred
  --wait                apply/reconcile: wait for another reconcile's lock instead of exiting 3
  --json                machine-readable output (docs/json.md)
  --detailed-exitcode   plan/owned: exit 5 when there is something to change (changes, drift)
  --trace-commands      list every external command run (stderr; in --json output as `commands`)
  -h, --help            this text
  -V, --version         the version

Exit codes: 0 converged/valid/joined, 1 some resources failed (the rest applied), 2 invalid or
refused (nothing changed), 3 another reconcile holds the lock, 4 the host could not run (store,
I/O, stdout) or could not complete the join (control plane unreachable, files not written),
5 plan/owned with --detailed-exitcode: changes to make, 6 status: degraded (the headline says
why). A closed stdout (`| head`) keeps the exit code.
Logs go to stderr; set RUST_LOG=debug for more.";

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
    Help,
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
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(no_value)? {
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
            Long("detailed-exitcode") => detailed_exitcode = true,
            Short('h') | Long("help") => help = true,
            Short('V') | Long("version") => version = true,
            Short(c) => return Err(format!("unknown option -{c}")),
            Long(name) => return Err(format!("unknown option --{name}")),
            Value(word) => words.push(word),
        }
    }
    let command = if help {
        Command::Help
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
            Some("help") => Command::Help,
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
        let join_only = [
            ("--control-plane", control_plane.is_some()),
            ("--token", token.is_some()),
            ("--token-file", token_file.is_some()),
            ("--ca-hash", ca_hash.is_some()),
            ("--trust-key", !trust_keys.is_empty()),
        ];
        if let Some((option, _)) = join_only.iter().find(|(_, given)| *given) {
            return Err(format!("{option} is only for join"));
        }
        for (option, given, verb) in [
            ("--out", out.is_some(), "keygen"),
            ("--key", key.is_some(), "sign"),
            ("--confirm", confirm.is_some(), "apply"),
            ("--to", to.is_some(), "rollback"),
            (
                "--detailed-exitcode",
                detailed_exitcode && !matches!(command, Command::Plan(_) | Command::Owned),
                "plan and owned",
            ),
            (
                "--force",
                force && !matches!(command, Command::Join(_) | Command::Rollback { .. }),
                "join and rollback",
            ),
        ] {
            if given {
                return Err(format!("{option} is only for {verb}"));
            }
        }
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
    Ok(Args {
        command,
        state_dir,
        config,
        root,
        wait,
        json,
        trace_commands,
        detailed_exitcode,
    })
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
        assert_eq!(parse_str("status --help").unwrap().command, Command::Help);
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
        assert_eq!(parse_str("-hV").unwrap().command, Command::Help);
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
