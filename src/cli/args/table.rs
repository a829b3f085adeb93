//! The argument table: every command and option with what it does, and the exit codes. The help
//! (`help.rs`), the man page, the completions (`cli/manual.rs`) and each option's scope in
//! `parse` all come from it, so they cannot drift apart.

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

/// The command of this name in `COMMANDS`.
pub fn command_doc(name: &str) -> Option<&'static CommandDoc> {
    COMMANDS.iter().find(|c| c.name == name)
}
