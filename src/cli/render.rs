//! What the commands print: each command's output as its own type (the CLI's, apart from the
//! run record and the wire report), shown as text for people or, with `--json`, as JSON whose
//! keys are sorted (the shape scripts and the tests read; pinned by the tests below). A run's
//! output (`plan`, `apply`, `reconcile`) is in `run.rs`, `status`'s in `status.rs`; the rest here.

use std::io::IsTerminal;
use std::path::Path;

use serde::Serialize;

use crate::engine::reconcile::OwnedRow;
use crate::model::pacnew::Pacnew;
use crate::model::run::Failing;
use crate::model::upkeep::Needs;
use crate::store::{InForce, Source};
use crate::util::words::{duration_words, expiry};

use super::out::{out, outln, Out};

mod run;
mod status;

pub use run::{diff_text, run, Changes, Colour, RunOutput};
pub use status::{status, Health, HealthState, InForceStatus, ServiceStatus, Status};

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

/// `owned`'s answer.
#[derive(Debug, Serialize)]
pub struct Owned<'a> {
    pub owned: &'a [OwnedRow<'a>],
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
            out!(out, "{}", diff_text(r.kind, r.key, diff, colour));
        }
        if let Some(f) = &r.failing {
            outln!(out, "    ! {}", failing_words(f, now));
        }
        for p in &r.pacnew {
            outln!(out, "    ? {}", pacnew_advice(p));
        }
    }
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
    use crate::engine::reconcile;
    use crate::kinds::Action;
    use crate::model::run::{
        ResourceResult, ResultAction, RunOutcome, RunRecord, Trigger, Triggers,
    };
    use crate::store::{
        InForceHead, LinkStatus, Origin, ServicePhase, ServiceState, WatchMode, WatchState,
    };
    use crate::util::diff::ContentDiff;
    use status::Liveness;

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
        let mut changes = reconcile::Changes::default();
        let details = vec!["content".into(), "mode 0644".into()].into();
        changes.push("files", "/etc/x", Action::Create, details);
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
        let mut changes = reconcile::Changes::default();
        for (key, detail) in [
            ("/etc/a", "content (2 -> 2 bytes)"),
            ("/etc/b", "mode 0600 -> 0644"),
        ] {
            changes.push("files", key, Action::Update, vec![detail.into()].into());
        }
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
            key: "/etc/x",
            origin: Origin::Adopted,
            state: crate::engine::reconcile::OwnedState::Drifted,
            detail: "content".into(),
            diff: None,
            failing: None,
            pacnew: Box::default(),
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
