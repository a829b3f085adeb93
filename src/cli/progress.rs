//! Progress where a person waits: what a run starts doing (each kind's steps with the resources,
//! each command, a pacman transaction's own lines as they come), on stderr as it happens. Only
//! when stderr is a terminal, never with `--json` or `-q`, never for the service (its logs go to
//! the journal); stdout stays the command's result. `-v` adds each command's exit and time and
//! what each kind's observation came to.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::args::{Args, Command};
use crate::util::progress::{Event, Sink, Step};

/// The sink a command line's runs tell their progress to, when it is shown at all.
pub fn sink(args: &Args) -> Option<Sink> {
    let shown = !args.json
        && !args.quiet
        && args.command != Command::Run
        && std::io::stderr().is_terminal();
    let verbose = args.verbose;
    shown.then(|| Sink::new(move |event| show(event, verbose)))
}

fn show(event: &Event, verbose: bool) {
    if let Some(text) = line(event, verbose) {
        // A terminal gone away is no reason to stop a run: the line is lost, the run goes on.
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }
}

/// How many hex digits of the declaration's digest a run's first line shows.
const DIGEST_SHOWN: usize = 12;

/// What `event` shows on the terminal, if anything at this verbosity: makepkg's marks, `==>` for
/// a run's steps, `->` for a command, the tool's own lines indented under it.
fn line(event: &Event, verbose: bool) -> Option<String> {
    let text = match event {
        Event::Run {
            triggers,
            revision,
            digest,
        } => {
            let digest = digest.get(..DIGEST_SHOWN).unwrap_or(digest);
            match revision {
                Some(r) => format!("==> {triggers}: revision {r}, declaration {digest}"),
                None => format!("==> {triggers}: declaration {digest}"),
            }
        }
        Event::Step {
            kind,
            step,
            total,
            named,
        } => {
            let doing = match step {
                Step::Observe => format!("observing {total}"),
                Step::Apply => format!("changing {total}"),
                Step::Verify => format!("checking {total} again"),
            };
            let mut list: Vec<String> = (named.iter())
                .map(|(sign, key)| match sign {
                    Some(sign) => format!("{sign} {key}"),
                    None => key.to_string(),
                })
                .collect();
            if *total > named.len() {
                list.push(format!("and {} more", total - named.len()));
            }
            format!("==> {kind}: {doing}: {}", list.join(", "))
        }
        Event::Planned { .. } if !verbose => return None,
        Event::Planned {
            kind,
            in_sync,
            adopted,
            changes,
            failed,
        } => {
            let counts: Vec<String> = [
                (*in_sync, "in sync"),
                (*adopted, "adopted"),
                (*changes, "to change"),
                (*failed, "failed"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            match counts.is_empty() {
                true => format!("==> {kind}: nothing found"),
                false => format!("==> {kind}: {}", counts.join(", ")),
            }
        }
        Event::Command(command) => format!("  -> {command}"),
        Event::Line(text) => format!("     {text}"),
        Event::Exited { .. } if !verbose => return None,
        Event::Exited { code, took } => match code {
            Some(code) => format!("     exit {code} after {}", seconds(*took)),
            None => format!("     killed by a signal after {}", seconds(*took)),
        },
        Event::Waiting(what) => format!("  -> waiting: {what}"),
    };
    Some(printable(&text))
}

fn seconds(took: Duration) -> String {
    format!("{:.2} s", took.as_secs_f64())
}

/// `text` with every control character (a tool's colour, a cursor move, a name's escape) shown
/// as `?`: what reaches the terminal is only text.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(event: Event, verbose: bool, want: Option<&str>) {
        assert_eq!(line(&event, verbose).as_deref(), want, "{event:?}");
    }

    #[test]
    fn steps_name_their_first_resources_and_count_the_rest() {
        let seven = ["a", "b", "c", "d", "e", "f", "g"];
        check(
            Event::Step {
                kind: "files",
                step: Step::Observe,
                total: 7,
                named: seven[..5].iter().map(|k| (None, *k)).collect(),
            },
            false,
            Some("==> files: observing 7: a, b, c, d, e, and 2 more"),
        );
        check(
            Event::Step {
                kind: "packages",
                step: Step::Apply,
                total: 2,
                named: vec![(Some('+'), "mesh-slow"), (Some('-'), "mesh-old")],
            },
            false,
            Some("==> packages: changing 2: + mesh-slow, - mesh-old"),
        );
        check(
            Event::Step {
                kind: "units",
                step: Step::Verify,
                total: 1,
                named: vec![(None, "web.service")],
            },
            false,
            Some("==> units: checking 1 again: web.service"),
        );
    }

    #[test]
    fn a_run_a_command_and_its_lines() {
        let run = |revision| Event::Run {
            triggers: "apply".into(),
            revision,
            digest: "0123456789abcdef0123",
        };
        check(
            run(Some(4)),
            false,
            Some("==> apply: revision 4, declaration 0123456789ab"),
        );
        check(
            run(None),
            false,
            Some("==> apply: declaration 0123456789ab"),
        );
        check(
            Event::Command("pacman -S -- a"),
            false,
            Some("  -> pacman -S -- a"),
        );
        check(
            Event::Line("installing a..."),
            false,
            Some("     installing a..."),
        );
        check(
            Event::Waiting("pacman's lock"),
            false,
            Some("  -> waiting: pacman's lock"),
        );
    }

    #[test]
    fn verbose_adds_exits_and_what_was_found() {
        let exited = |code| Event::Exited {
            code,
            took: Duration::from_millis(1250),
        };
        check(exited(Some(0)), false, None);
        check(exited(Some(1)), true, Some("     exit 1 after 1.25 s"));
        check(
            exited(None),
            true,
            Some("     killed by a signal after 1.25 s"),
        );
        let planned = |in_sync, changes, failed| Event::Planned {
            kind: "files",
            in_sync,
            adopted: 0,
            changes,
            failed,
        };
        check(planned(3, 1, 0), false, None);
        check(
            planned(3, 1, 2),
            true,
            Some("==> files: 3 in sync, 1 to change, 2 failed"),
        );
        check(planned(0, 0, 0), true, Some("==> files: nothing found"));
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        check(
            Event::Line("\u{1b}[31mred\u{1b}[0m\tdone\u{7}"),
            false,
            Some("     ?[31mred?[0m\tdone?"),
        );
    }
}
