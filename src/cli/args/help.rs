//! `--help` and `COMMAND --help`: the argument table as text, wrapped to 100 columns.

use super::table::{CommandDoc, OptionDoc, COMMANDS, EXIT_CODES, OPTIONS};

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

/// `-h, --help` or `--state-dir DIR`.
fn option_synopsis(o: &OptionDoc) -> String {
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
