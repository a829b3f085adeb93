//! What `plan`, `apply` and `reconcile` print: a run's resources by what happened to them, with
//! each change's content diff (`diff -u`, coloured on a terminal).

use std::io::IsTerminal;

use serde::Serialize;

use crate::engine::reconcile::{self, Planned};
use crate::model::pacnew::Pacnew;
use crate::model::run::ResourceResult;
use crate::model::upkeep::Needs;
use crate::util::diff::{Body, ContentDiff, Tag};

use super::{needs_lines, pacnew_advice, print_json};
use crate::cli::out::{errln, out, outln, Out};

/// What `plan`, `apply` and `reconcile` print: a run's resources by what happened to them.
#[derive(Debug, Serialize)]
pub struct RunOutput<'a> {
    pub changes: Changes<'a>,
    pub failures: &'a [ResourceResult],
    pub deferred: &'a [ResourceResult],
    pub adopted: &'a [ResourceResult],
    pub in_sync: usize,
    pub pacnew: &'a [Pacnew],
    /// What the machine needs after the run (`upkeep`); absent when not looked (planning,
    /// `--root`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<&'a Needs>,
    pub command_count: usize,
    /// Every command run, with `--trace-commands` (the text output lists them on stderr).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commands: Option<&'a [String]>,
    /// Only `plan`: the summary says "would change".
    #[serde(skip)]
    pub planning: bool,
    /// What the run did beside its resources (text only: JSON has no room for them today).
    #[serde(skip)]
    pub notes: &'a [String],
    /// Changes were listed without their diff, the run's diffs having reached
    /// `reconcile::DIFFS_KEPT`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub diffs_cut: bool,
}

/// A run's changes and the diffs of those that have one (`reconcile::Report::diffs`): in JSON,
/// each change with its `diff`.
#[derive(Debug, Clone, Copy)]
pub struct Changes<'a> {
    pub planned: &'a reconcile::Changes,
    pub diffs: &'a [(usize, Box<ContentDiff>)],
}

impl<'a> Changes<'a> {
    /// Each change with its diff, in order.
    fn each(self) -> impl Iterator<Item = (Planned<'a>, Option<&'a ContentDiff>)> {
        let mut diffs = self.diffs.iter().peekable();
        self.planned.iter().enumerate().map(move |(i, c)| {
            let diff = diffs.next_if(|(at, _)| *at == i).map(|(_, d)| &**d);
            (c, diff)
        })
    }
}

/// A change as `--json` shows it: its fields, and its diff if it has one.
#[derive(Serialize)]
struct ChangeShown<'a> {
    #[serde(flatten)]
    change: Planned<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<&'a ContentDiff>,
}

impl Serialize for Changes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.each()
                .map(|(change, diff)| ChangeShown { change, diff }),
        )
    }
}

pub fn run(out: &Out, json: bool, run: &RunOutput, traced: &[String]) {
    if json {
        return print_json(out, run);
    }
    let colour = Colour::for_stdout();
    for (c, diff) in run.changes.each() {
        outln!(
            out,
            "{} {} {}: {}",
            c.symbol,
            c.kind,
            c.key,
            c.details.join(", ")
        );
        if let Some(diff) = diff {
            out!(out, "{}", diff_text(c.kind, c.key, diff, colour));
        }
    }
    for a in run.adopted {
        outln!(out, "= {} {}: adopted, already as declared", a.kind, a.key);
    }
    for d in run.deferred {
        outln!(out, "> {} {}: deferred: {}", d.kind, d.key, d.detail);
    }
    for f in run.failures {
        outln!(
            out,
            "! {} {}: {} failed: {}",
            f.kind,
            f.key,
            f.action,
            f.detail
        );
    }
    for p in run.pacnew {
        outln!(out, "? files {}: {}", p.path, pacnew_advice(p));
    }
    if let Some(needs) = run.needs.filter(|n| !n.is_empty()) {
        needs_lines(out, needs);
    }
    let verb = if run.planning {
        "would change"
    } else {
        "changed"
    };
    outln!(
        out,
        "{} {verb}, {} in sync, {} adopted, {} deferred, {} failed ({} commands run)",
        run.changes.planned.len(),
        run.in_sync,
        run.adopted.len(),
        run.deferred.len(),
        run.failures.len(),
        run.command_count,
    );
    for command in traced {
        errln!("command: {command}");
    }
    for note in run.notes {
        outln!(out, "note: {note}");
    }
    if run.diffs_cut {
        outln!(out,
            "note: the diffs shown reached {} KiB; the changes after them are listed without theirs",
            crate::engine::reconcile::DIFFS_KEPT >> 10
        );
    }
}

/// Whether diffs are coloured: on a terminal, unless `NO_COLOR` is set to anything
/// (no-color.org).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    On,
    Off,
}

impl Colour {
    pub(super) fn for_stdout() -> Colour {
        let asked_not = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        match std::io::stdout().is_terminal() && !asked_not {
            true => Colour::On,
            false => Colour::Off,
        }
    }

    /// `text` in the ANSI colour `code` (31 red, 32 green, 36 cyan, 1 bold), when on.
    fn paint(self, code: &str, text: &str) -> String {
        match self {
            Colour::On => format!("\x1b[{code}m{text}\x1b[0m"),
            Colour::Off => text.to_string(),
        }
    }
}

/// A resource's content diff as text: `diff -u`'s, its header naming the resource and each
/// side (`--- files /etc/a (on the machine)`, `+++ files /etc/a (declared)`), a line saying how
/// many lines the cap left out; binary content as sizes and SHA-256s, secret content as sizes.
pub fn diff_text(kind: &str, key: &str, diff: &ContentDiff, colour: Colour) -> String {
    let side = |label: &str, size: usize, sha: Option<&str>| match (label, sha) {
        ("absent", _) => "absent".to_string(),
        (label, Some(sha)) => format!("{label}, {size} bytes, sha256 {sha}"),
        (label, None) => format!("{label}, {size} bytes"),
    };
    let mut out = String::new();
    match &diff.body {
        Body::Binary {
            old_sha256,
            new_sha256,
        } => {
            out += &format!(
                "    binary content not shown: {} -> {}\n",
                side(diff.from, diff.old_size, Some(old_sha256)),
                side(diff.to, diff.new_size, Some(new_sha256))
            );
        }
        Body::Secret => {
            out += &format!(
                "    (secret: content not shown) {} -> {}\n",
                side(diff.from, diff.old_size, None),
                side(diff.to, diff.new_size, None)
            );
        }
        Body::Text {
            hunks,
            omitted_lines,
        } => {
            for (mark, side) in [("---", diff.from), ("+++", diff.to)] {
                out += &colour.paint("1", &format!("{mark} {kind} {key} ({side})"));
                out.push('\n');
            }
            for hunk in hunks {
                out += &colour.paint("36", &hunk.header());
                out.push('\n');
                for line in &hunk.lines {
                    let text = format!("{}{}", line.tag.mark(), line.text);
                    out += &match line.tag {
                        Tag::Context => text,
                        Tag::Removed => colour.paint("31", &text),
                        Tag::Added => colour.paint("32", &text),
                    };
                    out.push('\n');
                    if line.no_newline {
                        out += "\\ No newline at end of file\n";
                    }
                }
            }
            if *omitted_lines > 0 {
                out += &format!("    ({omitted_lines} more lines of the diff not shown)\n");
            }
        }
    }
    out
}
