//! Prometheus metrics for node_exporter's textfile collector: a pure renderer from a `Snapshot`
//! of the host's state to the text exposition format, and the atomic write of `metrics_file`
//! (temp file, rename), so the collector never reads half a file. The series names are an
//! interface, documented in docs/metrics.md.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use crate::model::run::{Failing, RunOutcome};
use crate::os::fsutil::Dir;
use crate::store::{LastRun, RunStats};

/// The run outcomes `mesh_host_last_run_outcome` lists, each 1 or 0.
const OUTCOMES: [RunOutcome; 4] = [
    RunOutcome::Converged,
    RunOutcome::Failed,
    RunOutcome::Interrupted,
    RunOutcome::Error,
];
/// The states `mesh_host_resources` lists for every kind, zeros included.
pub const STATES: [&str; 5] = ["in_sync", "drifted", "failed", "missing", "deferred"];
const SOURCES: [&str; 2] = ["control_plane", "local"];
/// The confirmation states `mesh_host_declaration_confirmation` lists, each 1 or 0.
const CONFIRMATIONS: [&str; 3] = ["confirmed", "pending", "unconfirmed"];

/// Whether the declaration in force is confirmed, and the last revert (the store's generations).
pub struct Confirmation {
    /// `confirmed`, `pending` or `unconfirmed` (pending past its deadline with nothing to go
    /// back to).
    pub state: &'static str,
    /// Unix seconds, while pending.
    pub deadline: Option<u64>,
    /// Unix seconds of the last revert, until a declaration is next put in force.
    pub reverted: Option<u64>,
}

/// The declaration in force, as the metrics show it.
pub struct DeclarationInfo {
    pub revision: Option<u64>,
    /// Unix seconds it became the one in force.
    pub since: u64,
    /// `control_plane` or `local`.
    pub source: &'static str,
}

/// Everything the metrics say, gathered at one moment `now` (Unix seconds). The `.pacnew` files
/// are the statistics' (the last run's).
pub struct Snapshot<'a> {
    pub now: u64,
    pub version: &'a str,
    pub stats: &'a RunStats,
    pub failing: &'a [Failing],
    pub declaration: Option<DeclarationInfo>,
    /// `None` for a store that keeps no generations yet.
    pub confirmation: Option<Confirmation>,
    pub link_up: bool,
    pub outbox_reports: usize,
}

/// The text exposition format (version 0.0.4) of `s`.
pub fn render(s: &Snapshot) -> String {
    let mut out = Out::default();
    out.family(
        "mesh_host_info",
        "gauge",
        "The running mesh-host's version (always 1).",
    );
    out.sample("mesh_host_info", &[("version", s.version)], 1);

    let last = s.stats.last_run.as_ref();
    out.family(
        "mesh_host_last_run_timestamp_seconds",
        "gauge",
        "Unix time the last run ended (0: never ran).",
    );
    out.sample(
        "mesh_host_last_run_timestamp_seconds",
        &[],
        last.map_or(0, |r| r.ended),
    );
    out.family(
        "mesh_host_last_run_duration_seconds",
        "gauge",
        "How long the last run took, in seconds (to the millisecond).",
    );
    out.sample(
        "mesh_host_last_run_duration_seconds",
        &[],
        Seconds(last.map_or(0, LastRun::duration_ms)),
    );
    out.family(
        "mesh_host_last_success_timestamp_seconds",
        "gauge",
        "Unix time the last converged run ended (0: never converged).",
    );
    out.sample(
        "mesh_host_last_success_timestamp_seconds",
        &[],
        s.stats.last_success.unwrap_or(0),
    );
    out.family(
        "mesh_host_last_run_outcome",
        "gauge",
        "1 for the outcome of the last run, 0 for the others.",
    );
    for outcome in OUTCOMES {
        let is = last.is_some_and(|r| r.outcome == outcome);
        out.sample(
            "mesh_host_last_run_outcome",
            &[("outcome", outcome.name())],
            u64::from(is),
        );
    }
    out.family(
        "mesh_host_runs_total",
        "counter",
        "Runs since the store was made, by first trigger and outcome.",
    );
    for (trigger, outcomes) in &s.stats.runs_total {
        for (outcome, n) in outcomes {
            out.sample(
                "mesh_host_runs_total",
                &[("trigger", trigger), ("outcome", outcome)],
                *n,
            );
        }
    }
    out.family(
        "mesh_host_resources",
        "gauge",
        "Declared and owned resources by kind and state, as the last run found them.",
    );
    for kind in crate::model::spec::NAMES {
        let counts = s.stats.resources.get(*kind);
        for state in STATES {
            let n = counts.and_then(|c| c.get(state)).copied().unwrap_or(0);
            out.sample(
                "mesh_host_resources",
                &[("kind", kind), ("state", state)],
                n,
            );
        }
    }
    out.family(
        "mesh_host_resource_failing_since_timestamp_seconds",
        "gauge",
        "Unix time a failing resource's streak of failed runs began.",
    );
    for f in s.failing {
        out.sample(
            "mesh_host_resource_failing_since_timestamp_seconds",
            &[("kind", &f.kind), ("key", &f.key)],
            f.first_seen,
        );
    }
    if let Some(d) = &s.declaration {
        if let Some(revision) = d.revision {
            out.family(
                "mesh_host_declaration_revision",
                "gauge",
                "The revision of the declaration in force.",
            );
            out.sample("mesh_host_declaration_revision", &[], revision);
        }
        out.family(
            "mesh_host_declaration_age_seconds",
            "gauge",
            "Seconds since the declaration in force was put in force (as of the write).",
        );
        out.sample(
            "mesh_host_declaration_age_seconds",
            &[],
            s.now.saturating_sub(d.since),
        );
    }
    out.family(
        "mesh_host_declaration_source",
        "gauge",
        "1 for where the declaration in force came from (all 0: none in force).",
    );
    for source in SOURCES {
        let is = s.declaration.as_ref().is_some_and(|d| d.source == source);
        out.sample(
            "mesh_host_declaration_source",
            &[("source", source)],
            u64::from(is),
        );
    }
    if let Some(c) = &s.confirmation {
        out.family(
            "mesh_host_declaration_confirmation",
            "gauge",
            "1 for whether the declaration in force is confirmed, pending or unconfirmed.",
        );
        for state in CONFIRMATIONS {
            out.sample(
                "mesh_host_declaration_confirmation",
                &[("state", state)],
                u64::from(c.state == state),
            );
        }
        if let Some(deadline) = c.deadline {
            out.family(
                "mesh_host_declaration_confirm_deadline_timestamp_seconds",
                "gauge",
                "Unix time the pending declaration in force is reverted unless confirmed.",
            );
            out.sample(
                "mesh_host_declaration_confirm_deadline_timestamp_seconds",
                &[],
                deadline,
            );
        }
        if let Some(at) = c.reverted {
            out.family(
                "mesh_host_declaration_reverted_timestamp_seconds",
                "gauge",
                "Unix time the last declaration not confirmed in time was reverted.",
            );
            out.sample("mesh_host_declaration_reverted_timestamp_seconds", &[], at);
        }
    }
    out.family(
        "mesh_host_link_up",
        "gauge",
        "1 while the service's link to the control plane is up.",
    );
    out.sample("mesh_host_link_up", &[], u64::from(s.link_up));
    out.family(
        "mesh_host_outbox_reports",
        "gauge",
        "Reports waiting for the control plane's acknowledgement.",
    );
    out.sample("mesh_host_outbox_reports", &[], s.outbox_reports as u64);
    out.family(
        "mesh_host_pacnew_files",
        "gauge",
        "Owned files with a .pacnew or .pacsave beside them.",
    );
    out.sample("mesh_host_pacnew_files", &[], s.stats.pacnew.len() as u64);
    out.family(
        "mesh_host_pacnew_diff_lines",
        "gauge",
        "Lines that differ between an owned file and the .pacnew or .pacsave beside it.",
    );
    for p in &s.stats.pacnew {
        out.sample(
            "mesh_host_pacnew_diff_lines",
            &[("path", &p.path), ("suffix", &p.suffix)],
            (p.added + p.removed) as u64,
        );
    }
    // Left out until a run has looked (`upkeep`): a host that never looked does not say 0.
    if let Some(needs) = &s.stats.needs {
        out.family(
            "mesh_host_reboot_required",
            "gauge",
            "1 when the machine needs a reboot (the running kernel's modules are gone, or a newer kernel is installed), with why.",
        );
        let reason = needs.reboot.as_deref().unwrap_or_default();
        out.sample(
            "mesh_host_reboot_required",
            &[("reason", reason)],
            u64::from(needs.reboot.is_some()),
        );
        out.family(
            "mesh_host_reexec_required",
            "gauge",
            "1 when PID 1 (systemd) maps files an upgrade deleted: systemctl daemon-reexec.",
        );
        out.sample("mesh_host_reexec_required", &[], u64::from(needs.reexec));
        out.family(
            "mesh_host_restart_required",
            "gauge",
            "1 for each unit whose processes map files an upgrade deleted under /usr.",
        );
        for unit in &needs.restart {
            out.sample("mesh_host_restart_required", &[("unit", unit)], 1);
        }
    }
    out.text
}

/// The text being written; a family's HELP and TYPE go out with its first sample, so a family
/// without samples (no resource failing) is left out rather than written empty.
#[derive(Default)]
struct Out {
    text: String,
    header: Option<String>,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.header = Some(format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        if let Some(header) = self.header.take() {
            self.text.push_str(&header);
        }
        self.text.push_str(name);
        if !labels.is_empty() {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", labels.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// Milliseconds written as seconds with their fraction (`0.042`), as Prometheus wants durations.
struct Seconds(u64);

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 % 1000 {
            0 => write!(f, "{}", self.0 / 1000),
            ms => write!(f, "{}.{ms:03}", self.0 / 1000),
        }
    }
}

/// A label value as the exposition format quotes it: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

/// Replaces `path` with `text` atomically (a temp file beside it that the collector ignores, as
/// it reads only `*.prom`, then a rename), readable by all (node_exporter runs as its own user).
/// Without fsync: written after every run (a no-op too) and at the service's start, so a crash
/// loses only what the next write puts back.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("metrics_file {}: not a file path", path.display()));
    };
    Dir::open(parent)
        .and_then(|dir| dir.write_atomic_volatile(name, text.as_bytes(), 0o644))
        .map_err(|e| format!("metrics_file {}: cannot be written: {e}", path.display()))
}

/// `(kind -> state -> count)` for `STATES`, from `(kind, state, how many)`: the in-sync
/// resources of a kind come as one count, not one item each (every resource, in a no-op).
pub fn count_states<'a>(
    states: impl IntoIterator<Item = (&'a str, &'static str, u64)>,
) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (kind, state, n) in states {
        let by_state = match out.get_mut(kind) {
            Some(by_state) => by_state,
            None => out.entry(kind.to_string()).or_default(),
        };
        match by_state.get_mut(state) {
            Some(count) => *count += n,
            None => {
                by_state.insert(state.to_string(), n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pacnew::Pacnew;
    use crate::store::LastRun;

    fn sample<'t>(text: &'t str, series: &str) -> Option<&'t str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn renders_every_series_with_its_help_and_type() {
        let mut stats = RunStats::default();
        stats.record(
            Some(crate::model::run::Trigger::Timer),
            LastRun {
                started: 100,
                ended: 103,
                outcome: RunOutcome::Failed,
                took_ms: Some(2_742),
            },
            count_states([
                ("files", "failed", 1),
                ("files", "in_sync", 1),
                ("files", "in_sync", 1),
            ]),
            Some(vec![Pacnew {
                path: "/etc/x.conf".into(),
                suffix: "pacnew".into(),
                added: 2,
                removed: 1,

                secret: false,
            }]),
            Some(crate::model::upkeep::Needs {
                reboot: Some("linux 6.12.2.arch1-1 is installed".into()),
                restart: vec!["nginx.service".into()],
                reexec: false,
            }),
        );
        let failing = [Failing {
            kind: "files".into(),
            key: "/etc/a \"b\"\\c".into(),
            first_seen: 50,
            last_seen: 103,
            runs: 4,
            last_error: "plan failed: x".into(),
        }];
        let text = render(&Snapshot {
            now: 200,
            version: "1.2.3",
            stats: &stats,
            failing: &failing,
            declaration: Some(DeclarationInfo {
                revision: Some(42),
                since: 150,
                source: "control_plane",
            }),
            confirmation: Some(Confirmation {
                state: "pending",
                deadline: Some(400),
                reverted: Some(120),
            }),
            link_up: true,
            outbox_reports: 2,
        });
        for (series, value) in [
            (r#"mesh_host_info{version="1.2.3"}"#, "1"),
            ("mesh_host_last_run_timestamp_seconds", "103"),
            ("mesh_host_last_run_duration_seconds", "2.742"),
            ("mesh_host_last_success_timestamp_seconds", "0"),
            (r#"mesh_host_last_run_outcome{outcome="failed"}"#, "1"),
            (r#"mesh_host_last_run_outcome{outcome="converged"}"#, "0"),
            (
                r#"mesh_host_runs_total{trigger="timer",outcome="failed"}"#,
                "1",
            ),
            (r#"mesh_host_resources{kind="files",state="in_sync"}"#, "2"),
            (r#"mesh_host_resources{kind="files",state="failed"}"#, "1"),
            (r#"mesh_host_resources{kind="units",state="drifted"}"#, "0"),
            (
                r#"mesh_host_resource_failing_since_timestamp_seconds{kind="files",key="/etc/a \"b\"\\c"}"#,
                "50",
            ),
            ("mesh_host_declaration_revision", "42"),
            ("mesh_host_declaration_age_seconds", "50"),
            (
                r#"mesh_host_declaration_source{source="control_plane"}"#,
                "1",
            ),
            (r#"mesh_host_declaration_source{source="local"}"#, "0"),
            (
                r#"mesh_host_declaration_confirmation{state="pending"}"#,
                "1",
            ),
            (
                r#"mesh_host_declaration_confirmation{state="confirmed"}"#,
                "0",
            ),
            (
                "mesh_host_declaration_confirm_deadline_timestamp_seconds",
                "400",
            ),
            ("mesh_host_declaration_reverted_timestamp_seconds", "120"),
            ("mesh_host_link_up", "1"),
            ("mesh_host_outbox_reports", "2"),
            ("mesh_host_pacnew_files", "1"),
            (
                r#"mesh_host_pacnew_diff_lines{path="/etc/x.conf",suffix="pacnew"}"#,
                "3",
            ),
            (
                r#"mesh_host_reboot_required{reason="linux 6.12.2.arch1-1 is installed"}"#,
                "1",
            ),
            ("mesh_host_reexec_required", "0"),
            (r#"mesh_host_restart_required{unit="nginx.service"}"#, "1"),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        for family in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = family.split(' ').next().unwrap_or_default();
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        }
    }

    #[test]
    fn a_host_that_never_ran_says_so_with_zeros() {
        let stats = RunStats::default();
        let text = render(&Snapshot {
            now: 0,
            version: "1",
            stats: &stats,
            failing: &[],
            declaration: None,
            confirmation: None,
            link_up: false,
            outbox_reports: 0,
        });
        assert_eq!(
            sample(&text, "mesh_host_last_success_timestamp_seconds"),
            Some("0")
        );
        assert_eq!(sample(&text, "mesh_host_declaration_revision"), None);
        assert_eq!(
            sample(&text, r#"mesh_host_declaration_source{source="local"}"#),
            Some("0")
        );
        assert!(
            !text.contains("_required"),
            "never looked: not said\n{text}"
        );
    }

    #[test]
    fn the_file_is_replaced_whole_and_readable_by_all() {
        let tmp = crate::util::testutil::TempDir::new("metrics");
        let path = tmp.path().join("mesh_host.prom");
        write(&path, "a 1\n").unwrap();
        write(&path, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temp file left");
    }
}
