//! What `status` prints: its headline (healthy, degraded or error, and why: `Health`), the
//! service and its link, the declaration in force, the generations, what is failing and the
//! recent runs.

use std::path::Path;

use serde::Serialize;

use crate::model::pacnew::Pacnew;
use crate::model::run::{Failing, RunOutcome, RunRecord};
use crate::model::upkeep::Needs;
use crate::store::{
    words_revision, Confirmer, Generations, InForceHead, LinkStatus, ServicePhase, ServiceState,
    Source, State as GenerationState, WatchMode, WatchState,
};
use crate::util::words::{age, duration_words, expiry};

use super::{failing_words, needs_lines, pacnew_advice, print_json};
use crate::cli::out::{outln, Out};

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
    service_lines(out, status.service.as_ref(), now);
    in_force_lines(out, status.in_force.as_ref(), now);
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

/// The service's line of `status`: whether it runs, its link, its next timer run, its watcher.
fn service_lines(out: &Out, service: Option<&ServiceStatus>, now: u64) {
    match service {
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
}

/// The declaration in force in `status`: where from, its digest, who signed it, its expiry.
fn in_force_lines(out: &Out, in_force: Option<&InForceStatus>, now: u64) {
    match in_force {
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
