//! systemd units. One `systemctl show` and one `is-enabled` (of the loaded ones) observe them all
//! (asked again by halves when one name fails the batch; masked, aliased, symlinked or oversized
//! unit files fail or are reported only for their own unit, never followed);
//! unit files the declaration carries are written atomically to the unit directory with one
//! `daemon-reload` when any changed (or the files kind changed a unit file or drop-in, even with
//! no unit declared), before anything is enabled or started; enable, disable, start, stop,
//! restart and reload each go in one batched call. A restart or reload owed to a changed file is
//! read from the store (`store::Owed`) until it is done. A unit the host found enabled or running
//! gets that state back when it is released; a unit file the host wrote is removed. Under
//! `--root`, only enable/disable (offline) and unit files are done; the rest is deferred.

use super::{Change, Env, Hints, Kind, KindError, Observations, Outcome, Place, RunContext, Step};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::units::{is_secret, watched_files, Original, Spec, Units};
use crate::model::spec::KindSpec;
use crate::store::{Digest, Entry, Ledger};

mod apply;
mod confirm;
mod observe;
mod plan;
mod state;

use apply::{apply_file, owing};
use observe::unit_dir;
use plan::{plan_absent, plan_present, plan_release};
pub use state::{Enablement, FileChange, Observed, Op};

impl Kind for Units {
    // In phases over every unit (stop, disable, files, one daemon-reload, then each verb in one
    // systemctl call): split, a unit would start before a unit file it needs is written and
    // read, and every chunk would cost a daemon-reload.
    const APPLIED_IN_CHUNKS: bool = false;
    type Observed = Observed;
    type Op = Op;
    type Facts = ();

    fn digest_observed(spec: &Spec, _: Option<&Observed>) -> Digest {
        Self::digest(spec)
    }

    fn observe<'k>(
        env: &Env,
        cx: &RunContext,
        keys: &[&'k str],
    ) -> Result<Observations<'k, Observed>, KindError> {
        observe::observe(env, cx, keys)
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let Some(obs) = observed else {
            return Step::Fail(format!("unit {key} was not observed"));
        };
        match desired {
            Some(spec) if spec.present => plan_present(cx, key, spec, obs, owned),
            Some(_) => plan_absent(key, obs, obs.file_diff(cx), owned),
            None => match owned {
                Some(entry) => plan_release(cx, key, obs, entry),
                None => Step::InSync,
            },
        }
    }

    /// Later kinds need nothing of units.
    fn note(_: &Declaration, _: &mut (), _: &Change<Op, Original>, _: &Outcome) {}

    /// In three phases over every unit: deactivation (stop and disable while the unit files
    /// are still there), configuration (every unit file written, templates included, and the
    /// manager reloaded, also for drop-ins the files kind wrote), then activation (enable,
    /// start, restart, reload): an instance finds its template, and a unit its drop-ins, however
    /// the declaration orders them. What units owed to changed files is settled last.
    fn apply(
        env: &Env,
        cx: &RunContext,
        ledger: &mut Ledger,
        changes: &[Change<Op, Original>],
    ) -> Vec<Outcome> {
        apply::apply(env, cx, ledger, changes)
    }

    /// Unit files and drop-ins the files kind changed in this run, or other files in systemd's
    /// directories: the manager is reloaded for them and, on a live machine, systemd confirms
    /// them, even when no unit is declared or owned.
    fn called_by_facts(facts: &super::Facts) -> bool {
        !facts.files.unit_config.is_empty() || !facts.files.in_systemd_dirs.is_empty()
    }

    fn take_refused(_: &mut ()) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Units declared present that restart or reload on a file the files kind changed.
    fn owing<'d>(declaration: &'d Declaration, facts: &super::Facts) -> Vec<(&'d str, &'d str)> {
        owing(declaration, &facts.files.changed)
    }

    fn pacnew(_: &Env, _: &Declaration, _: &Ledger, _: &mut QuietDirs) -> Vec<Pacnew> {
        Vec::new()
    }

    /// The files each declared unit restarts or reloads on (files the declaration writes, so
    /// watched as files too), and the unit files the declaration carries.
    fn watch<'d>(declaration: &'d Declaration, _: &'d Ledger, hints: &mut dyn Hints<'d>) {
        for (unit, spec) in &declaration.units {
            for file in watched_files(spec) {
                hints.path_touches(file, unit);
            }
            if spec.content.is_some() {
                hints.entry(Place::UnitDir, unit, unit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::apply::still_owed;
    use super::state::Activation;
    use super::*;
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};
    use crate::model::spec::units::digest;
    use crate::tools::systemctl::{ActiveState, LoadState, UnitFileState};
    use crate::util::diff::Body;

    #[test]
    fn unit_names() {
        for (name, message) in [
            ("nginx", "no known suffix"),
            ("-x.service", "starts with '-'"),
            (".service", "nothing before its suffix"),
            ("a b.service", "whitespace"),
            ("a/b.service", "contains '/'"),
            ("@b.service", "starts with '@'"),
            ("x.scope", "no known suffix"),
            ("x.service.d", "no known suffix"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "units": {{{}: {{}}}}}}"#,
                serde_json::Value::String(name.into())
            );
            check_refused(&json, &[message]);
        }
        assert!(problems(r#"{"schema": 1, "units": {"getty@tty1.service": {}, "backup.timer": {"enabled": true}, "a\\x2db.mount": {}}}"#).is_empty());
        let long = format!("{}.service", "a".repeat(248));
        check_refused(
            &format!(r#"{{"schema": 1, "units": {{"{long}": {{}}}}}}"#),
            &["longer than 255 bytes"],
        );
        // The instance is everything after the first '@', further '@'s included.
        assert!(
            problems(r#"{"schema": 1, "units": {"foo@bar@baz.service": {"active": true}}}"#)
                .is_empty()
        );
    }

    #[test]
    fn a_template_ships_its_file_but_is_never_enabled_or_started() {
        assert!(problems(
            r#"{"schema": 1, "units": {"web@.service": {"content": "[Service]\nExecStart=/bin/true %i\n"}, "web@a.service": {"active": true}}}"#
        )
        .is_empty());
        for field in ["enabled", "active"] {
            check_refused(
                &format!(r#"{{"schema": 1, "units": {{"web@.service": {{"{field}": true}}}}}}"#),
                &[
                    &format!(r#"units["web@.service"].{field}: web@.service is a template"#),
                    "web@NAME.service",
                ],
            );
        }
    }

    #[test]
    fn refuses_the_hosts_own_unit() {
        check_refused(
            r#"{"schema": 1, "units": {"mesh-host.service": {"enabled": true}}}"#,
            &["refused", "own unit"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"mesh-host.service": {"active": false}}}"#,
            &["refused"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"agent.service": {"active": true}}}"#,
            &["refused", "agent.service"],
        );
    }

    #[test]
    fn fields() {
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"enabeld": true}}}"#,
            &["unknown field \"enabeld\""],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"enabled": "yes"}}}"#,
            &["enabled: must be true or false"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"restart_on": ["relative"]}}}"#,
            &["restart_on[0]: path is not absolute"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"state": "absent", "enabled": true}}}"#,
            &["makes no sense"],
        );
    }

    #[test]
    fn offline_plans_start_so_that_it_is_deferred() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "x", "enabled": true, "active": true}}}"#,
        )
        .unwrap();
        let cx = RunContext::new(&d, true);
        let Step::Change(c) = Units::plan(
            &cx,
            "a.service",
            d.units.get("a.service"),
            Some(&Observed::default()),
            None,
        ) else {
            panic!("expected a change");
        };
        let details: Vec<&str> = c.details.iter().collect();
        assert_eq!(details, ["unit file written", "enable", "start"]);
        assert_eq!(c.op.activation, Activation::Start);
    }

    #[test]
    fn a_unit_file_written_or_removed_carries_its_diff() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "[Service]\nExecStart=/bin/b\n"},
                "gone.service": {"state": "absent"}}}"#,
        )
        .unwrap();
        let mut cx = RunContext::new(&d, true);
        cx.diffs = true;
        let obs = |file: &str| Observed {
            file: Some(file.as_bytes().to_vec()),
            ..Observed::default()
        };
        let diff = |key: &str, obs: Observed| {
            let Step::Change(c) = Units::plan(&cx, key, d.units.get(key), Some(&obs), None) else {
                panic!("expected a change of {key}");
            };
            let diff = c.diff.expect("a diff");
            let Body::Text { hunks, .. } = diff.body else {
                panic!("{diff:?}");
            };
            let lines: Vec<String> = (hunks.iter().flat_map(|h| &h.lines))
                .map(|l| format!("{}{}", l.tag.mark(), l.text))
                .collect();
            (diff.from, diff.to, lines)
        };
        assert_eq!(
            diff("a.service", obs("[Service]\nExecStart=/bin/a\n")),
            (
                "on the machine",
                "declared",
                vec![
                    " [Service]".into(),
                    "-ExecStart=/bin/a".into(),
                    "+ExecStart=/bin/b".into()
                ]
            )
        );
        assert_eq!(diff("a.service", Observed::default()).1, "declared",);
        assert_eq!(
            diff("gone.service", obs("[Service]\n")),
            ("on the machine", "absent", vec!["-[Service]".into()])
        );
    }

    fn plan(
        spec_json: &str,
        obs: Observed,
        owned: Option<&Entry<Original>>,
        changed: &[&str],
    ) -> String {
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/app.conf": {{"content": ""}}}}, "units": {{"a.service": {spec_json}}}}}"#
        ))
        .unwrap();
        let mut cx = RunContext::new(&d, false);
        cx.facts.files.changed = changed.iter().map(|s| s.to_string()).collect();
        match Units::plan(
            &cx,
            "a.service",
            d.units.get("a.service"),
            Some(&obs),
            owned,
        ) {
            Step::InSync => "in sync".into(),
            Step::Adopt { intent, .. } => format!("adopt {:?}", intent.origin),
            Step::Change(c) => format!("{} {}", c.action.symbol(), c.details.join(", ")),
            Step::Fail(e) => format!("fail: {e}"),
            Step::Skip(e) => format!("skip: {e}"),
        }
    }

    fn loaded(active: &str, enablement: &str) -> Observed {
        Observed {
            load: Some(LoadState::Loaded),
            active: Some(ActiveState::parse(active)),
            enablement: Some(UnitFileState::parse(enablement)),
            ..Observed::default()
        }
    }

    #[test]
    fn masked_and_symlinked_units_fail_only_themselves() {
        let masked = Observed {
            load: Some(LoadState::Masked),
            active: Some(ActiveState::Inactive),
            enablement: Some(UnitFileState::Masked),
            link: Some("/dev/null".into()),
            ..Observed::default()
        };
        let owned = Entry::created();
        let fail = plan(r#"{"active": true}"#, masked.clone(), None, &[]);
        assert!(
            fail.starts_with("fail: unit a.service is masked") && fail.contains("systemctl unmask"),
            "{fail}"
        );
        assert!(plan(r#"{"enabled": true}"#, masked.clone(), None, &[]).contains("is masked"));
        // Wanting it stopped or disabled: a masked unit is both already.
        assert_eq!(
            plan(
                r#"{"active": false, "enabled": false}"#,
                masked.clone(),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert_eq!(
            plan(r#"{"state": "absent"}"#, masked.clone(), None, &[]),
            "in sync"
        );
        // Its file is a link: never written through, never removed as if it were the host's.
        let fail = plan(r#"{"content": "[Service]\n"}"#, masked.clone(), None, &[]);
        assert!(
            fail.contains("symlink to /dev/null") && fail.contains("never writes through"),
            "{fail}"
        );
        let alias = Observed {
            link: Some("gdm.service".into()),
            ..loaded("active", "alias")
        };
        assert_eq!(
            plan(
                r#"{"enabled": true, "active": true}"#,
                alias.clone(),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert!(plan(r#"{"content": "x"}"#, alias, None, &[]).contains("symlink to gdm.service"));
    }

    #[test]
    fn a_unit_is_secret_only_when_declared_so() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "[Service]\n", "secret": true},
                "b.service": {"content": "[Service]\n"}}}"#,
        )
        .unwrap();
        assert!(is_secret(&d.units["a.service"]));
        assert!(!is_secret(&d.units["b.service"]));
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"state": "absent", "secret": true}}}"#,
            &["secret: makes no sense for a unit declared absent"],
        );
    }

    /// A secret unit's file that others can read is written again 0600, without a restart;
    /// one already private, or not secret, is left alone.
    #[test]
    fn a_secret_units_file_readable_by_others_is_made_private() {
        let owned = Entry::created();
        let file = |mode| Observed {
            file: Some(b"[Service]\n".to_vec()),
            file_mode: Some(mode),
            ..loaded("active", "enabled")
        };
        let secret = r#"{"content": "[Service]\n", "active": true, "secret": true}"#;
        let plain = r#"{"content": "[Service]\n", "active": true}"#;
        assert_eq!(
            plan(secret, file(0o644), Some(&owned), &[]),
            "~ unit file mode 0644 -> 0600 (secret)"
        );
        assert_eq!(plan(secret, file(0o600), Some(&owned), &[]), "in sync");
        assert_eq!(plan(plain, file(0o644), Some(&owned), &[]), "in sync");
    }

    #[test]
    fn content_has_the_file_size_limit() {
        let big = "x".repeat((8 << 20) + 1);
        check_refused(
            &format!(r#"{{"schema": 1, "units": {{"a.service": {{"content": "{big}"}}}}}}"#),
            &[
                "units[\"a.service\"].content",
                "is 8388609 bytes, more than the limit of 8388608 bytes",
            ],
        );
    }

    #[test]
    fn planner_cases() {
        let owned = Entry::adopted(Some(Original {
            enabled: false,
            active: false,
            file_backup: None,
        }));
        let missing = Observed {
            load: Some(LoadState::NotFound),
            ..Observed::default()
        };
        let with_file = Observed {
            file: Some(b"old".to_vec()),
            ..loaded("active", "enabled")
        };
        let running = || loaded("active", "enabled");
        let restart_on = r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#;
        let reload_on = r#"{"active": true, "reload_on": ["/etc/app.conf"]}"#;
        let changed: &[&str] = &["/etc/app.conf"];
        /// The spec, what was observed, the ledger's entry, the files changed in the run, the plan.
        type Case<'a> = (
            &'a str,
            Observed,
            Option<&'a Entry<Original>>,
            &'a [&'a str],
            &'a str,
        );
        let cases: [Case; 10] = [
            (
                r#"{"enabled": true, "active": true}"#,
                loaded("inactive", "disabled"),
                None,
                &[],
                "~ enable, start",
            ),
            (
                r#"{"enabled": true, "active": true}"#,
                running(),
                None,
                &[],
                "adopt Adopted",
            ),
            (
                r#"{"enabled": true, "active": true}"#,
                running(),
                Some(&owned),
                &[],
                "in sync",
            ),
            (
                restart_on,
                running(),
                Some(&owned),
                changed,
                "~ restart (/etc/app.conf changed)",
            ),
            (restart_on, running(), Some(&owned), &[], "in sync"),
            (
                reload_on,
                running(),
                Some(&owned),
                changed,
                "~ reload (/etc/app.conf changed)",
            ),
            (
                r#"{"active": false}"#,
                running(),
                Some(&owned),
                &[],
                "~ stop",
            ),
            (
                r#"{"content": "[Service]\n", "active": true}"#,
                missing.clone(),
                None,
                &[],
                "+ unit file written, start",
            ),
            (
                r#"{"content": "new"}"#,
                with_file,
                Some(&owned),
                &[],
                "~ unit file changed, restart (its unit file changed)",
            ),
            (
                r#"{"state": "absent"}"#,
                running(),
                None,
                &[],
                "- declared absent, stop, disable",
            ),
        ];
        for (spec, observed, owned, changed, want) in cases {
            assert_eq!(plan(spec, observed, owned, changed), want, "{spec}");
        }
        assert!(plan(r#"{"active": true}"#, missing, None, &[])
            .starts_with("fail: unit a.service is not loaded"));
    }

    #[test]
    fn a_unit_restarts_when_stale_only_if_it_asked_and_runs() {
        let stale = |active: &str| Observed {
            stale: true,
            ..loaded(active, "enabled")
        };
        let owned = Entry::created();
        for (spec, obs, want) in [
            (
                r#"{"restart_when_stale": true}"#,
                stale("active"),
                "~ restart (it maps files an upgrade deleted)",
            ),
            (r#"{}"#, stale("active"), "in sync"),
            (
                r#"{"restart_when_stale": true}"#,
                stale("inactive"),
                "in sync",
            ),
            (
                r#"{"restart_when_stale": true}"#,
                loaded("active", "enabled"),
                "in sync",
            ),
        ] {
            assert_eq!(plan(spec, obs, Some(&owned), &[]), want, "{spec}");
        }
        check_refused_units(
            r#"{"state": "absent", "restart_when_stale": true}"#,
            "restart_when_stale: makes no sense for a unit declared absent",
        );
    }

    fn check_refused_units(spec_json: &str, want: &str) {
        let problems = crate::model::declaration::tests::problems(&format!(
            r#"{{"schema": 1, "units": {{"a.service": {spec_json}}}}}"#
        ));
        assert!(problems.iter().any(|p| p.contains(want)), "{problems:?}");
    }

    #[test]
    fn a_restart_owed_since_an_earlier_run_is_planned_until_settled() {
        let owed = Observed {
            owed: ["/etc/app.conf".to_string()].into(),
            ..loaded("active", "enabled")
        };
        let owned = Entry::created();
        for (spec, want) in [
            (
                r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#,
                "~ restart (/etc/app.conf changed)",
            ),
            (
                r#"{"active": true, "reload_on": ["/etc/app.conf"]}"#,
                "~ reload (/etc/app.conf changed)",
            ),
            // Stopped: no process runs the old file.
            (
                r#"{"active": false, "restart_on": ["/etc/app.conf"]}"#,
                "~ stop",
            ),
        ] {
            assert_eq!(plan(spec, owed.clone(), Some(&owned), &[]), want, "{spec}");
        }
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/app.conf": {"content": ""},
                "/etc/b.conf": {"content": ""}},
                "units": {"a.service": {"restart_on": ["/etc/app.conf"]},
                          "b.service": {"reload_on": ["/etc/app.conf", "/etc/b.conf"]},
                          "c.service": {"state": "absent"}}}"#,
        )
        .unwrap();
        let files = ["/etc/app.conf".to_string()].into();
        assert_eq!(
            owing(&d, &files),
            [
                ("a.service", "/etc/app.conf"),
                ("b.service", "/etc/app.conf")
            ]
        );
        assert!(still_owed(&d, "b.service", "/etc/b.conf"));
        assert!(!still_owed(&d, "a.service", "/etc/b.conf"));
        assert!(!still_owed(&d, "c.service", "/etc/app.conf"));
    }

    #[test]
    fn an_instance_of_a_declared_template_and_a_unit_whose_drop_in_changed() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"web@.service": {"content": "[Service]\n"},
                "web@a.service": {"enabled": true, "active": true}, "db@a.service": {"active": true}}}"#,
        )
        .unwrap();
        let mut cx = RunContext::new(&d, false);
        let not_found = Observed {
            load: Some(LoadState::NotFound),
            ..Observed::default()
        };
        let details = |cx: &RunContext, key: &str, obs: &Observed| match Units::plan(
            cx,
            key,
            d.units.get(key),
            Some(obs),
            None,
        ) {
            Step::Change(c) => c.details.join(", "),
            Step::Fail(e) => format!("fail: {e}"),
            _ => "other".into(),
        };
        // Not loaded yet: its template is written and the manager reloaded before the start.
        assert_eq!(details(&cx, "web@a.service", &not_found), "enable, start");
        assert!(details(&cx, "db@a.service", &not_found)
            .starts_with("fail: unit db@a.service is not loaded"));
        // Running when its template is rewritten: restarted to take it.
        let stale = Observed {
            template_differs: true,
            ..loaded("active", "enabled")
        };
        assert_eq!(
            details(&cx, "web@a.service", &stale),
            "restart (its template changed)"
        );
        // Its unit file written by the files kind in this run: loaded once the manager reloads.
        cx.facts.files.unit_config = ["db@a.service".to_string()].into();
        assert_eq!(details(&cx, "db@a.service", &not_found), "start");
        // Running when a drop-in of its template changed: restarted to take it.
        cx.facts.files.unit_config = ["web@.service".to_string()].into();
        assert_eq!(
            details(&cx, "web@a.service", &loaded("active", "enabled")),
            "restart (a unit file or drop-in of it changed)"
        );
    }

    #[test]
    fn release_restores_an_adopted_units_state() {
        let d = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let owned = Entry::adopted(Some(Original {
            enabled: true,
            active: true,
            file_backup: None,
        }));
        let Step::Change(c) = Units::plan(
            &cx,
            "a.service",
            None,
            Some(&loaded("inactive", "disabled")),
            Some(&owned),
        ) else {
            panic!("expected a change");
        };
        assert_eq!(
            c.op,
            Op {
                file: FileChange::Keep,
                enablement: Enablement::Enable,
                activation: Activation::Start
            }
        );
        let created = Entry::created();
        let obs = Observed {
            file: Some(b"x".to_vec()),
            ..loaded("active", "enabled")
        };
        let Step::Change(c) = Units::plan(&cx, "a.service", None, Some(&obs), Some(&created))
        else {
            panic!("expected a change");
        };
        assert_eq!(
            c.op,
            Op {
                file: FileChange::Remove,
                enablement: Enablement::Disable,
                activation: Activation::Stop
            }
        );
    }

    #[test]
    fn skipped_when_its_package_failed() {
        let d = parse_with_defaults(r#"{"schema": 1, "packages": {"web": {}}, "units": {"web.service": {"package": "web", "active": true}}}"#).unwrap();
        let mut cx = RunContext::new(&d, false);
        cx.facts.packages.failed = ["web".to_string()].into();
        let step = Units::plan(
            &cx,
            "web.service",
            d.units.get("web.service"),
            Some(&Observed::default()),
            None,
        );
        assert!(matches!(step, Step::Skip(ref why) if why.contains("package web failed")));
    }

    /// The ledger's digests, pinned (a unit a package ships, one declared absent, unicode and
    /// secret content, lists), and one written out byte by byte.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        let unit =
            |present, enabled, active, content: Option<&str>, restart: &[&str], reload: &[&str]| {
                Spec {
                    present,
                    enabled,
                    active,
                    content: content.map(str::to_string),
                    restart_on: restart.iter().map(|s| s.to_string()).collect(),
                    reload_on: reload.iter().map(|s| s.to_string()).collect(),
                    package: None,
                    secret: false,
                    restart_when_stale: false,
                }
            };
        let shipped = unit(true, None, None, None, &[], &[]);
        let secret = Spec {
            secret: true,
            package: Some("app".into()),
            restart_when_stale: true,
            ..unit(
                true,
                Some(false),
                None,
                Some("[Service]\nEnvironment=TOKEN=s3cret \u{2713}\nExecStart=/bin/true\n"),
                &["/etc/a", "/etc/\u{e9}.conf"],
                &["/etc/owned"],
            )
        };
        for (spec, hex) in [
            (
                unit(
                    true,
                    Some(true),
                    Some(true),
                    Some("[Service]\nExecStart=/bin/true\n"),
                    &[],
                    &[],
                ),
                "384a7279967b5777e3e8ff1347ae787563004ac35dbbd70765cc3558f9da5b3e",
            ),
            (
                shipped.clone(),
                "a4230303ca3bf32e209216d2c9efa16e75c7ee82df792678ff394d9ee599d653",
            ),
            (
                unit(false, None, None, None, &[], &[]),
                "a81ef8a78daa3a23a9579055aea67322d2e4d3552fbd1bbe6ddc47a4220123ea",
            ),
            (
                secret,
                "4d9bba4c98b4b4acfc6d7affd6b4a7c17e2d222897e994e55f3c29bc8454b2f8",
            ),
        ] {
            assert_eq!(digest(&spec).to_string(), hex, "{spec:?}");
        }
        // present, enabled none, active none, content none, two empty lists.
        let by_hand = b"units\x00\x01\x01\x00\x00\x00\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        assert_eq!(
            digest(&shipped),
            Digest::Sha256(crate::util::codec::sha256(by_hand))
        );
    }
}
