//! What the commands print: each command's output as its own type (the CLI's, apart from the
//! run record and the wire report), shown as text for people or, with `--json`, as JSON whose
//! keys are sorted (the shape scripts and the tests read; pinned by the tests below).

use std::io::IsTerminal;
use std::path::Path;

use serde::Serialize;

use crate::engine::reconcile::{OwnedRow, Planned};
use crate::model::pacnew::Pacnew;
use crate::model::run::{Failing, ResourceResult, RunOutcome, RunRecord};
use crate::model::upkeep::Needs;
use crate::store::{
    words_revision, Confirmer, Generations, InForce, InForceHead, LinkStatus, ServicePhase,
    ServiceState, Source, State as GenerationState, WatchMode, WatchState,
};
use crate::util::diff::{Body, ContentDiff, Tag};
use crate::util::words::{age, duration_words, expiry};

use super::out::{errln, out, outln, Out};

/// The version of every `--json` document's shape (docs/json.md): its `version` member.
pub const JSON_VERSION: u64 = 1;

/// Prints `output` as pretty JSON with its `version`. Through `serde_json::Value`, so every
/// object's keys come out sorted, nested records included, whatever the order of their fields.
pub fn print_json(out: &Out, output: &impl Serialize) {
    let mut value = serde_json::to_value(output).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("version".into(), JSON_VERSION.into());
    }
    outln!(
        out,
        "{}",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    );
}

/// One signature on a checked envelope.
#[derive(Debug, Serialize)]
pub struct SignatureLine {
    pub key: String,
    /// `valid`, `invalid` or `unknown key`, as `envelope` names them.
    pub state: &'static str,
}

/// `check`'s answer for a valid declaration.
#[derive(Debug, Serialize)]
pub struct Checked<'a> {
    #[serde(skip)]
    pub file: &'a Path,
    pub valid: bool,
    pub revision: Option<u64>,
    pub digest: &'a str,
    pub resources: usize,
    pub signed: bool,
    pub signatures: Vec<SignatureLine>,
    pub signatures_accepted: bool,
    pub refusal: Option<String>,
    pub expires: Option<u64>,
}

pub fn check(out: &Out, json: bool, checked: &Checked, now: u64) {
    if json {
        return print_json(out, checked);
    }
    outln!(
        out,
        "{}: valid ({} resources, sha256 {})",
        checked.file.display(),
        checked.resources,
        checked.digest
    );
    for s in &checked.signatures {
        outln!(out, "signed by {}: {}", s.key, s.state);
    }
    if let Some(expires) = checked.expires {
        outln!(out, "{}", expiry(expires, now));
    }
}

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
    pub planned: &'a [Planned],
    pub diffs: &'a [(usize, Box<ContentDiff>)],
}

impl<'a> Changes<'a> {
    /// Each change with its diff, in order.
    fn each(self) -> impl Iterator<Item = (&'a Planned, Option<&'a ContentDiff>)> {
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
    change: &'a Planned,
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
            out!(out, "{}", diff_text(c.kind, &c.key, diff, colour));
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
    fn for_stdout() -> Colour {
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

/// `owned`'s answer.
#[derive(Debug, Serialize)]
pub struct Owned<'a> {
    pub owned: &'a [OwnedRow],
}

pub fn owned(out: &Out, json: bool, owned: &Owned, now: u64) {
    if json {
        return print_json(out, owned);
    }
    if owned.owned.is_empty() {
        outln!(out, "mesh-host owns nothing");
    }
    let colour = Colour::for_stdout();
    for r in owned.owned {
        let origin = format!("{:?}", r.origin).to_lowercase();
        let detail = if r.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", r.detail)
        };
        outln!(
            out,
            "{:<10} {:<40} {:<8} {}{detail}",
            r.kind,
            r.key,
            origin,
            r.state
        );
        if let Some(diff) = &r.diff {
            out!(out, "{}", diff_text(r.kind, &r.key, diff, colour));
        }
        if let Some(f) = &r.failing {
            outln!(out, "    ! {}", failing_words(f, now));
        }
        for p in &r.pacnew {
            outln!(out, "    ? {}", pacnew_advice(p));
        }
    }
}

/// A key that signed the declaration in force, and whether the config trusts it now.
#[derive(Debug, Serialize)]
pub struct SignedBy {
    pub key: String,
    pub trusted: bool,
}

/// The declaration in force, as `status` shows it.
#[derive(Debug, Serialize)]
pub struct InForceStatus {
    pub source: Source,
    pub revision: Option<u64>,
    pub digest: String,
    pub since: u64,
    pub control_plane_revision: Option<u64>,
    pub signed_by: Vec<SignedBy>,
    pub expires: Option<u64>,
    pub expired: bool,
}

impl InForceStatus {
    pub fn new(f: InForceHead, trusts: impl Fn(&str) -> bool, now: u64) -> InForceStatus {
        InForceStatus {
            signed_by: f
                .signed_by
                .iter()
                .map(|key| SignedBy {
                    key: key.clone(),
                    trusted: trusts(key),
                })
                .collect(),
            expired: f.expires.is_some_and(|e| e <= now),
            source: f.source,
            revision: f.revision,
            digest: f.digest,
            since: f.since,
            control_plane_revision: f.control_plane_revision,
            expires: f.expires,
        }
    }
}

/// Whether the service runs, as `status` judges it: what it last said, and whether its pid is
/// alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Liveness {
    #[serde(rename = "running")]
    Running,
    #[serde(rename = "stopped")]
    Stopped,
    /// It said `running`, but its process is gone.
    #[serde(rename = "not running (it did not stop cleanly)")]
    Died,
}

impl Liveness {
    fn words(self) -> &'static str {
        match self {
            Liveness::Running => "running",
            Liveness::Stopped => "stopped",
            Liveness::Died => "not running (it did not stop cleanly)",
        }
    }
}

/// The service, as `status` shows it: what it last published, judged alive or not now.
#[derive(Debug, Serialize)]
pub struct ServiceStatus {
    pub pid: u32,
    pub started: u64,
    pub link: LinkStatus,
    pub link_at: Option<u64>,
    /// Since when the link has been down (Unix seconds); absent while connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_down_since: Option<u64>,
    pub last_error: Option<String>,
    pub next_timer: u64,
    pub state: Liveness,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchState>,
}

impl ServiceStatus {
    pub fn new(s: ServiceState, alive: impl Fn(u32) -> bool) -> ServiceStatus {
        let state = match s.state {
            ServicePhase::Stopped => Liveness::Stopped,
            ServicePhase::Running if alive(s.pid) => Liveness::Running,
            ServicePhase::Running => Liveness::Died,
        };
        ServiceStatus {
            pid: s.pid,
            started: s.started,
            link: s.link,
            link_at: s.link_at,
            link_down_since: s.link_down_since,
            last_error: s.last_error,
            next_timer: s.next_timer,
            state,
            watch: s.watch,
        }
    }
}

/// Whether the host runs well, as `status`'s headline and exit code say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    Healthy,
    /// It runs, not well: exit 6.
    Degraded,
    /// It cannot run as it stands, or its last run could not: exit 4.
    Error,
}

impl HealthState {
    fn words(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Degraded => "degraded",
            HealthState::Error => "error",
        }
    }
}

/// `status`'s headline: whether the host runs well, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    pub state: HealthState,
    /// Each reason, for people; empty when healthy.
    pub reasons: Vec<String>,
}

impl Health {
    /// Judges `status` at `now`: what a run would refuse or the last run's error is `error`;
    /// failing or contested resources, a pending declaration past its deadline, the service
    /// gone, or the link down past `link_down_degraded` seconds are `degraded`.
    pub fn of(status: &Status, now: u64, link_down_degraded: u64) -> Health {
        let mut errors = status.problems.clone();
        if let Some(run) = status
            .runs
            .last()
            .filter(|r| r.outcome == RunOutcome::Error)
        {
            errors.push(format!(
                "the last run ({}, {} ago) ended in error",
                run.trigger,
                age(now.saturating_sub(run.ended))
            ));
        }
        if !errors.is_empty() {
            return Health {
                state: HealthState::Error,
                reasons: errors,
            };
        }
        let mut reasons = Vec::new();
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let failing = status.failing.len();
        if failing > 0 {
            reasons.push(format!("{failing} resource{} failing", plural(failing)));
        } else if let Some(run) = status.runs.last().filter(|r| !r.failures.is_empty()) {
            let n = run.failures.len();
            reasons.push(format!("{n} resource{} failed in the last run", plural(n)));
        }
        if let Some(s) = &status.service {
            let contested = s.watch.as_ref().map_or(0, |w| w.contested.len());
            if s.state == Liveness::Running && contested > 0 {
                reasons.push(format!(
                    "{contested} resource{} drifting again after each repair (contested)",
                    plural(contested)
                ));
            }
            if s.state == Liveness::Died {
                reasons.push("the service did not stop cleanly and is not running".into());
            }
            let down = s.link_down_since.map(|at| now.saturating_sub(at));
            if let Some(down) =
                down.filter(|&d| s.state == Liveness::Running && d >= link_down_degraded)
            {
                reasons.push(format!(
                    "the link to the control plane has been down for {}",
                    duration_words(down)
                ));
            }
        }
        let in_force = status.generations.list.last();
        if let Some(GenerationState::Pending { deadline, .. }) = in_force.map(|g| g.state) {
            if deadline <= now {
                reasons.push(format!(
                    "the pending declaration passed its deadline {} ago (the next run reverts it)",
                    age(now - deadline)
                ));
            }
        }
        Health {
            state: match reasons.is_empty() {
                true => HealthState::Healthy,
                false => HealthState::Degraded,
            },
            reasons,
        }
    }
}

/// `status`'s answer.
#[derive(Debug, Serialize)]
pub struct Status<'a> {
    pub health: Health,
    pub state_dir: &'a Path,
    pub in_force: Option<InForceStatus>,
    pub service: Option<ServiceStatus>,
    pub runs: Vec<RunRecord>,
    pub failing: Vec<Failing>,
    pub pacnew: Vec<Pacnew>,
    /// What the machine needed after the last run that looked (`upkeep`): a reboot, restarts.
    pub needs: Option<Needs>,
    /// Store files a run would refuse (the declaration in force not matching its digest, an
    /// unreadable ledger): nothing is applied until they are put right.
    pub problems: Vec<String>,
    /// The declarations last in force, oldest first, and the last revert (left out when none).
    #[serde(skip_serializing_if = "Generations::is_empty")]
    pub generations: Generations,
}

/// `show --json`: the declaration in force as a value, with where it came from.
#[derive(Serialize)]
struct Shown<'a> {
    declaration: serde_json::Value,
    digest: &'a str,
    revision: Option<u64>,
    source: &'a Source,
    since: u64,
}

/// The declaration in force: its text as it was declared, or as JSON (`Shown`).
pub fn show(out: &Out, json: bool, in_force: &InForce) {
    if json {
        return print_json(
            out,
            &Shown {
                // Validated on its way in, and checked against its digest since: JSON.
                declaration: serde_json::from_slice(&in_force.text).unwrap_or_default(),
                digest: &in_force.digest,
                revision: in_force.revision,
                source: &in_force.source,
                since: in_force.since,
            },
        );
    }
    // Validated on its way in (UTF-8), and checked against its digest since.
    out!(out, "{}", String::from_utf8_lossy(&in_force.text));
    // A terminal gets its prompt on a line of its own; a file gets the text byte for byte.
    if !in_force.text.ends_with(b"\n") && std::io::stdout().is_terminal() {
        outln!(out);
    }
}

/// What `confirm` and `rollback` did, in a sentence (`{"said": ...}` as JSON).
pub fn said(out: &Out, json: bool, said: &str) {
    if json {
        return print_json(out, &serde_json::json!({ "said": said }));
    }
    outln!(out, "{said}");
}

/// The generations in `status`, newest first: the first is the declaration in force.
fn generations_lines(out: &Out, generations: &Generations, now: u64) {
    if generations.list.is_empty() {
        return;
    }
    outln!(out, "generations (newest first):");
    for (i, g) in generations.list.iter().rev().enumerate() {
        let source = match &g.source {
            Source::Local { path } => format!("local file {path}"),
            Source::ControlPlane => "the control plane".to_string(),
        };
        let state = match g.state {
            GenerationState::Pending { deadline, .. } if deadline <= now => format!(
                "pending, past its deadline {} ago: reverted by the next run",
                age(now - deadline)
            ),
            GenerationState::Pending { deadline, by, .. } => format!(
                "pending: reverted in {} unless {}",
                age(deadline.saturating_sub(now)),
                match by {
                    Confirmer::Person => "`mesh-host confirm` runs",
                    Confirmer::ControlPlane => "the control plane acknowledges its run's report",
                }
            ),
            GenerationState::Reverted { at } => {
                format!("reverted {} ago", age(now.saturating_sub(at)))
            }
            other => other.name().to_string(),
        };
        let expired = match g.expired(now) {
            true => ", signature expired",
            false => "",
        };
        // The state first: a line of status ending `ago: ...` is a run's.
        outln!(
            out,
            "  {} revision {} ({state}), from {source}, sha256 {}, put in force {} ago{expired}",
            if i == 0 { "*" } else { " " },
            words_revision(g.revision),
            short_digest(&g.digest),
            age(now.saturating_sub(g.applied)),
        );
    }
    if let Some(r) = &generations.reverted {
        outln!(
            out,
            "reverted: revision {} {} ago, back to revision {}: {}{}",
            words_revision(r.revision),
            age(now.saturating_sub(r.at)),
            words_revision(r.to_revision),
            r.why,
            if r.signature_expired {
                " (its signature has expired: held to get the machine back)"
            } else {
                ""
            }
        );
    }
}

pub fn status(out: &Out, json: bool, status: &Status, now: u64) {
    if json {
        return print_json(out, status);
    }
    match status.health.reasons.is_empty() {
        true => outln!(out, "{}", status.health.state.words()),
        false => outln!(
            out,
            "{}: {}",
            status.health.state.words(),
            status.health.reasons.join("; ")
        ),
    }
    outln!(out, "store: {}", status.state_dir.display());
    for problem in &status.problems {
        outln!(out, "  ! {problem}");
    }
    match &status.service {
        None => outln!(out, "service: never ran"),
        Some(s) if s.state != Liveness::Running => outln!(out, "service: {}", s.state.words()),
        Some(s) => {
            let link = match (s.link, s.link_at) {
                (LinkStatus::Connected, Some(at)) => {
                    format!("connected since {} ago", age(now.saturating_sub(at)))
                }
                (LinkStatus::Retrying, Some(at)) => {
                    format!("retrying in {}", age(at.saturating_sub(now)))
                }
                (other, _) => other.to_string(),
            };
            let error = s
                .last_error
                .as_ref()
                .map(|e| format!(" (last error: {e})"))
                .unwrap_or_default();
            outln!(
                out,
                "service: running (pid {}), link {link}{error}, next timer run in {}",
                s.pid,
                age(s.next_timer.saturating_sub(now))
            );
            if let Some(w) = &s.watch {
                watch(out, w, now);
            }
        }
    }
    match &status.in_force {
        None => outln!(out, "declaration in force: none"),
        Some(f) => {
            let source = match &f.source {
                Source::Local { path } => format!("local file {path}"),
                Source::ControlPlane => "the control plane".to_string(),
            };
            let revision = f
                .revision
                .map(|r| format!("revision {r}, "))
                .unwrap_or_default();
            outln!(
                out,
                "declaration in force: {revision}from {source}, sha256 {}, since {} ago",
                short_digest(&f.digest),
                age(now.saturating_sub(f.since))
            );
            for s in &f.signed_by {
                let trust = if s.trusted {
                    "trusted"
                } else {
                    "not trusted here"
                };
                outln!(out, "    signed by {} ({trust})", s.key);
            }
            if let Some(expires) = f.expires {
                let held = if f.expired {
                    "; held until a newer one arrives"
                } else {
                    ""
                };
                outln!(out, "    {}{held}", expiry(expires, now));
            }
        }
    }
    generations_lines(out, &status.generations, now);
    if !status.failing.is_empty() {
        outln!(out, "failing: {} resources", status.failing.len());
        for f in &status.failing {
            outln!(out, "  ! {} {}: {}", f.kind, f.key, failing_words(f, now));
        }
    }
    for p in &status.pacnew {
        outln!(out, "? files {}: {}", p.path, pacnew_advice(p));
    }
    if let Some(needs) = &status.needs {
        needs_lines(out, needs);
    }
    if status.runs.is_empty() {
        outln!(out, "no runs recorded");
    }
    for run in status.runs.iter().rev().take(10) {
        run_lines(out, run, now);
    }
}

/// What the machine needs, as the last run found it: the host does none of it by itself (a
/// declared unit's `restart_when_stale` aside).
fn needs_lines(out: &Out, needs: &Needs) {
    if needs.is_empty() {
        outln!(out, "needs: no reboot, no restart");
    }
    if let Some(why) = &needs.reboot {
        outln!(out, "needs: a reboot: {why}");
    }
    if !needs.restart.is_empty() {
        outln!(
            out,
            "needs: a restart of {} (mapping files an upgrade deleted)",
            needs.restart.join(", ")
        );
    }
    if needs.reexec {
        outln!(
            out,
            "needs: systemctl daemon-reexec (PID 1 maps files an upgrade deleted)"
        );
    }
}

/// One recorded run in `status`: when, why, how it ended, and what went wrong.
fn run_lines(out: &Out, run: &RunRecord, now: u64) {
    outln!(
        out,
        "{} ago: {} {} ({} changed, {} failed, {} deferred, {} in sync, {} commands)",
        age(now.saturating_sub(run.ended)),
        run.trigger,
        run.outcome,
        run.changes.len(),
        run.failures.len(),
        run.deferred.len(),
        run.in_sync,
        run.commands
    );
    for note in &run.notes {
        outln!(out, "    note: {note}");
    }
    if run.retries > 0 {
        outln!(
            out,
            "    ({} of the commands were retries of failed batched queries)",
            run.retries
        );
    }
    for f in &run.failures {
        outln!(out, "    ! {} {}: {}", f.kind, f.key, f.detail);
    }
    if run.omitted > 0 {
        outln!(
            out,
            "    ({} more resources not kept in the history)",
            run.omitted
        );
    }
}

/// The watcher's lines of `status`: what it watches, what it cannot, what it leaves to the timer.
fn watch(out: &Out, w: &WatchState, now: u64) {
    let detail = w
        .detail
        .as_ref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    match w.state {
        WatchMode::Off => outln!(out, "watch: off{detail}; drift is found by the timer alone"),
        state => outln!(out, "watch: {state}, {} directories{detail}", w.directories),
    }
    if let Some(at) = w.last_overflow {
        outln!(
            out,
            "    the event queue overflowed {} times, last {} ago: each time a full run",
            w.overflows,
            age(now.saturating_sub(at))
        );
    }
    for c in &w.contested {
        outln!(out,
            "    contested: {} {} since {} ago ({} repairs within a minute, changed again {} ago): \
             another process keeps changing it; left to the timer until it is left alone",
            c.kind,
            c.key,
            age(now.saturating_sub(c.since)),
            c.repairs,
            age(now.saturating_sub(c.last_change))
        );
    }
}

/// A digest's first 12 hex digits, as people compare them (`--json` carries the whole).
fn short_digest(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// What a `.pacnew` beside an owned file means, for people.
fn pacnew_advice(p: &Pacnew) -> String {
    format!(
        "{}: the package's default changed since the host took the file; review the declaration",
        p.describe()
    )
}

/// `failing since 3 h 10 min, 19 runs: update failed: ...`
fn failing_words(f: &Failing, now: u64) -> String {
    format!(
        "failing since {}, {} run{}: {}",
        duration_words(now.saturating_sub(f.first_seen)),
        f.runs,
        if f.runs == 1 { "" } else { "s" },
        f.last_error
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Action;
    use crate::model::run::{ResultAction, RunOutcome, Trigger, Triggers};
    use crate::store::Origin;

    /// The JSON `--json` prints, compact: the same keys, sorted, and the same values.
    fn json(output: &impl Serialize) -> String {
        serde_json::to_value(output).unwrap().to_string()
    }

    fn result(action: ResultAction) -> ResourceResult {
        ResourceResult {
            kind: "files".into(),
            key: "/etc/x".into(),
            action,
            detail: "d".into(),
        }
    }

    #[test]
    fn check_keeps_its_json_shape() {
        let checked = Checked {
            file: Path::new("d.json"),
            valid: true,
            revision: Some(2),
            digest: "ab",
            resources: 3,
            signed: true,
            signatures: vec![SignatureLine {
                key: "ed25519:k".into(),
                state: "valid",
            }],
            signatures_accepted: false,
            refusal: Some("no trusted key".into()),
            expires: None,
        };
        assert_eq!(
            json(&checked),
            concat!(
                r#"{"digest":"ab","expires":null,"refusal":"no trusted key","resources":3,"#,
                r#""revision":2,"signatures":[{"key":"ed25519:k","state":"valid"}],"#,
                r#""signatures_accepted":false,"signed":true,"valid":true}"#
            )
        );
    }

    #[test]
    fn a_run_keeps_its_json_shape_with_and_without_the_commands() {
        let changes = [Planned {
            kind: "files",
            key: "/etc/x".into(),
            symbol: '+',
            action: Action::Create,
            details: vec!["content".into(), "mode 0644".into()].into(),
        }];
        let failures = [result(ResultAction::Plan)];
        let deferred = [result(ResultAction::Remove)];
        let adopted = [result(ResultAction::Adopt)];
        let pacnew = [Pacnew {
            path: "/etc/x".into(),
            suffix: "pacsave".into(),
            added: 0,
            removed: 1,

            secret: false,
        }];
        let traced = ["pacman -Q".to_string()];
        let mut run = RunOutput {
            changes: Changes {
                planned: &changes,
                diffs: &[],
            },
            failures: &failures,
            deferred: &deferred,
            adopted: &adopted,
            in_sync: 4,
            pacnew: &pacnew,
            needs: None,
            command_count: 1,
            commands: None,
            planning: true,
            notes: &[],
            diffs_cut: false,
        };
        let r = r#"{"action":"ACTION","detail":"d","key":"/etc/x","kind":"files"}"#;
        let expected = [
            &format!(r#"{{"adopted":[{}],"#, r.replace("ACTION", "adopt")),
            r#""changes":[{"action":"create","details":["content","mode 0644"],"#,
            r#""key":"/etc/x","kind":"files","symbol":"+"}],"command_count":1,COMMANDS"#,
            &format!(r#""deferred":[{}],"#, r.replace("ACTION", "remove")),
            &format!(
                r#""failures":[{}],"in_sync":4,"#,
                r.replace("ACTION", "plan")
            ),
            r#""pacnew":[{"added":0,"path":"/etc/x","removed":1,"suffix":"pacsave"}]}"#,
        ]
        .concat();
        assert_eq!(json(&run), expected.replace("COMMANDS", ""));
        run.commands = Some(&traced);
        assert_eq!(
            json(&run),
            expected.replace("COMMANDS", r#""commands":["pacman -Q"],"#)
        );
    }

    #[test]
    fn a_change_carries_its_diff_in_json_and_text() {
        let changes = [
            Planned {
                kind: "files",
                key: "/etc/a".into(),
                symbol: '~',
                action: Action::Update,
                details: vec!["content (2 -> 2 bytes)".into()].into(),
            },
            Planned {
                kind: "files",
                key: "/etc/b".into(),
                symbol: '~',
                action: Action::Update,
                details: vec!["mode 0600 -> 0644".into()].into(),
            },
        ];
        let diff = ContentDiff::new(
            "on the machine",
            "declared",
            Some(b"a\n"),
            Some(b"b\n"),
            true,
        );
        let diffs = [(0, Box::new(diff.clone()))];
        let shown = Changes {
            planned: &changes,
            diffs: &diffs,
        };
        let json = json(&shown);
        assert!(json.starts_with(r#"[{"action":"update","details":["content (2 -> 2 bytes)"],"diff":{"content":"text","#), "{json}");
        assert!(
            json.ends_with(r#""key":"/etc/b","kind":"files","symbol":"~"}]"#),
            "{json}"
        );
        assert_eq!(
            diff_text("files", "/etc/a", &diff, Colour::Off),
            "--- files /etc/a (on the machine)\n+++ files /etc/a (declared)\n@@ -1 +1 @@\n-a\n+b\n"
        );
        // The secret hook's answer: sizes only.
        let secret = ContentDiff::new(
            "on the machine",
            "declared",
            Some(b"pw=1\n"),
            Some(b"pw=22\n"),
            false,
        );
        assert_eq!(
            diff_text("files", "/etc/a", &secret, Colour::On),
            "    (secret: content not shown) on the machine, 5 bytes -> declared, 6 bytes\n"
        );
    }

    #[test]
    fn owned_keeps_its_json_shape() {
        let rows = [OwnedRow {
            kind: "files",
            key: "/etc/x".into(),
            origin: Origin::Adopted,
            state: crate::engine::reconcile::OwnedState::Drifted,
            detail: "content".into(),
            diff: None,
            failing: None,
            pacnew: Vec::new(),
        }];
        assert_eq!(
            json(&Owned { owned: &rows }),
            concat!(
                r#"{"owned":[{"detail":"content","key":"/etc/x","kind":"files","#,
                r#""origin":"adopted","state":"drifted"}]}"#
            )
        );
    }

    fn service(state: ServicePhase) -> ServiceState {
        ServiceState {
            pid: 42,
            started: 1,
            link: LinkStatus::Retrying,
            link_at: Some(9),
            link_down_since: Some(5),
            last_error: Some("refused".into()),
            next_timer: 7,
            state,
            watch: Some(WatchState {
                state: WatchMode::Partial,
                detail: Some("on the timer only: packages".into()),
                directories: 3,
                overflows: 0,
                last_overflow: None,
                contested: Vec::new(),
            }),
        }
    }

    #[test]
    fn a_service_that_said_running_and_is_gone_did_not_stop_cleanly() {
        let judged = |phase, alive| ServiceStatus::new(service(phase), |_| alive).state;
        assert_eq!(judged(ServicePhase::Running, true), Liveness::Running);
        assert_eq!(judged(ServicePhase::Running, false), Liveness::Died);
        assert_eq!(judged(ServicePhase::Stopped, false), Liveness::Stopped);
    }

    #[test]
    fn status_keeps_its_json_shape() {
        let in_force = InForceHead {
            source: Source::Local {
                path: "/root/d.json".into(),
            },
            revision: None,
            digest: "ab".into(),
            since: 2,
            control_plane_revision: Some(5),
            signed_by: vec!["ed25519:k".into()],
            expires: Some(3),
        };
        let run = RunRecord {
            trigger: Triggers::from_iter([Trigger::Start, Trigger::Timer]),
            started: 1,
            ended: 2,
            outcome: RunOutcome::Failed,
            revision: None,
            digest: None,
            changes: Vec::new(),
            failures: vec![result(ResultAction::Observe)],
            deferred: Vec::new(),
            in_sync: 0,
            commands: 1,
            retries: 0,
            notes: Vec::new(),
            omitted: 0,
        };
        let status = Status {
            health: Health {
                state: HealthState::Degraded,
                reasons: vec!["why".into()],
            },
            state_dir: Path::new("/var/lib/mesh-host"),
            in_force: Some(InForceStatus::new(in_force, |_| true, 4)),
            service: Some(ServiceStatus::new(service(ServicePhase::Running), |_| {
                false
            })),
            runs: vec![run],
            failing: Vec::new(),
            pacnew: Vec::new(),
            needs: Some(Needs {
                reboot: None,
                restart: vec!["nginx.service".into()],
                reexec: true,
            }),
            problems: vec!["store /s/ledger.json: cannot be read".into()],
            generations: Default::default(),
        };
        assert_eq!(
            json(&status),
            [
                r#"{"failing":[],"health":{"reasons":["why"],"state":"degraded"},"#,
                r#""in_force":{"control_plane_revision":5,"digest":"ab","#,
                r#""expired":true,"expires":3,"revision":null,"signed_by":[{"key":"ed25519:k","#,
                r#""trusted":true}],"since":2,"source":{"kind":"local","path":"/root/d.json"}},"#,
                r#""needs":{"reboot_required":null,"reexec_required":true,"#,
                r#""restart_required":["nginx.service"]},"#,
                r#""pacnew":[],"problems":["store /s/ledger.json: cannot be read"],"#,
                r#""runs":[{"changes":[],"commands":1,"deferred":[],"digest":null,"#,
                r#""ended":2,"failures":[{"action":"observe","detail":"d","key":"/etc/x","#,
                r#""kind":"files"}],"in_sync":0,"outcome":"failed","revision":null,"started":1,"#,
                r#""trigger":"start, timer"}],"service":{"last_error":"refused","link":"retrying","#,
                r#""link_at":9,"link_down_since":5,"next_timer":7,"pid":42,"started":1,"#,
                r#""state":"not running (it did not stop cleanly)","#,
                r#""watch":{"contested":[],"detail":"on the timer only: packages","#,
                r#""directories":3,"overflows":0,"state":"partial"}},"#,
                r#""state_dir":"/var/lib/mesh-host"}"#,
            ]
            .concat()
        );
    }

    #[test]
    fn health_names_each_reason_and_the_link_only_past_its_threshold() {
        let judge = |edit: &dyn Fn(&mut Status), now: u64| {
            let mut status = Status {
                health: Health {
                    state: HealthState::Healthy,
                    reasons: Vec::new(),
                },
                state_dir: Path::new("/s"),
                in_force: None,
                service: None,
                runs: Vec::new(),
                failing: Vec::new(),
                pacnew: Vec::new(),
                needs: None,
                problems: Vec::new(),
                generations: Default::default(),
            };
            edit(&mut status);
            Health::of(&status, now, 900)
        };
        let healthy = judge(&|_| {}, 1000);
        assert_eq!(healthy.state, HealthState::Healthy);
        assert!(healthy.reasons.is_empty());
        let link = |s: &mut Status| {
            let mut service = ServiceStatus::new(service(ServicePhase::Running), |_| true);
            service.link_down_since = Some(100);
            service.watch = None;
            s.service = Some(service);
        };
        assert_eq!(judge(&link, 999).state, HealthState::Healthy);
        assert_eq!(
            judge(&link, 1000).reasons,
            ["the link to the control plane has been down for 15 min"]
        );
        let failing = |s: &mut Status| {
            s.failing.push(Failing {
                kind: "files".into(),
                key: "/etc/x".into(),
                first_seen: 1,
                last_seen: 2,
                runs: 2,
                last_error: "e".into(),
            })
        };
        assert_eq!(judge(&failing, 10).reasons, ["1 resource failing"]);
        let died = |s: &mut Status| {
            s.service = Some(ServiceStatus::new(service(ServicePhase::Running), |_| {
                false
            }))
        };
        assert_eq!(judge(&died, 10).state, HealthState::Degraded);
        // What a run would refuse outranks the rest: error, exit 4.
        let broken = |s: &mut Status| {
            failing(s);
            s.problems
                .push("store /s/ledger.json: cannot be read".into());
        };
        let error = judge(&broken, 10);
        assert_eq!(error.state, HealthState::Error);
        assert_eq!(error.reasons, ["store /s/ledger.json: cannot be read"]);
    }
}
