//! The reconciler: for each kind in order, observe (one batched query) -> plan (pure) -> apply ->
//! record. It owns the ledger's write-ahead discipline: originals are backed up and new ownership
//! is recorded durably *before* anything is touched, and outcomes are recorded after, so the
//! ledger never lies about what the host owns. A failing resource never stops the others.

use crate::kinds::{self, Env, Kind, RunContext, Visit};
use crate::model::declaration::Declaration;
use crate::store::{Ledger, Store, StoreError};

mod after;
mod hooks;
mod kind;
mod owned;
mod report;
mod scope;

use after::{count_foreign, needs_now, remove_unreferenced_backups};
use hooks::{fail_refused, pacnew_found};
pub use owned::{owned, OwnedRow, OwnedState};
pub use report::{Changes, Planned, Report, DIFFS_KEPT};
use scope::secret_context;
pub use scope::{Mode, Scope};

/// Converges (or plans) every kind. Errors are the store's only: a resource's failure is reported
/// in the `Report`, while a store that cannot record ownership must stop the run.
pub fn run(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
) -> Result<Report, StoreError> {
    run_scoped(env, declaration, ledger, mode, &Scope::All)
}

/// `run` over the resources `scope` names only.
pub fn run_scoped(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
) -> Result<Report, StoreError> {
    match run_scoped_reporting(env, declaration, ledger, mode, scope) {
        (report, None) => Ok(report),
        (_, Some(e)) => Err(e),
    }
}

/// `run_scoped`, with what the run did before a store error stopped it (changes already made,
/// to be recorded and reported with the error).
pub fn run_scoped_reporting(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
) -> (Report, Option<StoreError>) {
    let mut run = Converging {
        env,
        cx: secret_context(env, declaration),
        ledger,
        mode,
        scope,
        report: Report::default(),
        failed: None,
    };
    kinds::each(&mut run);
    let Converging {
        ledger,
        mut report,
        failed,
        ..
    } = run;
    if let Some(e) = failed {
        return (report, Some(e));
    }
    if let (Mode::Apply, Some(store)) = (mode, env.store) {
        if let Err(e) = remove_unreferenced_backups(store, ledger) {
            return (report, Some(e));
        }
    }
    // After the run's pacman transactions, and on every run (someone else may have upgraded).
    let mut quiet = env.store.map(Store::pacnew_quiet_dirs).unwrap_or_default();
    let before = quiet.clone();
    report.pacnew = pacnew_found(env, declaration, ledger, &mut quiet)
        .into_iter()
        .flat_map(|(_, found)| found)
        .collect();
    // After the run's transactions and restarts; planning (the watcher's checks) leaves it.
    if let (Mode::Apply, Some(at)) = (mode, env.upkeep) {
        report.needs = Some(needs_now(env, at, !report.changes.is_empty()));
        report.foreign = count_foreign(env, at);
    }
    // Only a run writes it: it holds the store's lock (planning and `owned` do not).
    if let (Mode::Apply, Some(store), true) = (mode, env.store, quiet != before) {
        if let Err(e) = store.save_pacnew_quiet_dirs(&quiet) {
            log::warn!("{e}; the next run lists every directory for .pacnew files");
        }
    }
    (report, None)
}

/// One run's kinds, converged in the registry's order; a store error or the host being stopped
/// ends it before the next kind.
struct Converging<'r, 'a> {
    env: &'r Env<'a>,
    cx: RunContext<'r>,
    ledger: &'r mut Ledger,
    mode: Mode,
    scope: &'r Scope,
    report: Report,
    failed: Option<StoreError>,
}

impl Visit for Converging<'_, '_> {
    type Out = ();
    fn visit<K: Kind>(&mut self) {
        if self.failed.is_some() || self.report.interrupted {
            return;
        }
        if self.mode == Mode::Apply && (self.env.interrupted)() {
            self.report.interrupted = true;
            return;
        }
        let (env, cx, mode, scope) = (self.env, &mut self.cx, self.mode, self.scope);
        let converged = kind::converge::<K>(env, cx, self.ledger, mode, scope, &mut self.report)
            .and_then(|()| fail_refused(env, &mut cx.facts, self.ledger, &mut self.report));
        if let Err(e) = converged {
            self.failed = Some(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::scope::APPLIED_AT_ONCE;
    use super::*;
    use crate::kinds::Action;
    use crate::model::declaration::tests::{parse_with_defaults, test_config};
    use crate::model::run::ResultAction;
    use crate::model::spec::{files::Files, Named as _};
    use crate::os::exec::Runner;
    use crate::util::diff::ContentDiff;
    use crate::util::progress;
    use crate::util::testutil::TempDir;

    /// A file the files kind changed and systemd's confirmation (in the units kind) put back
    /// leaves the run's changes for its failures, with what systemd said; the others stay.
    #[test]
    fn files_the_confirmation_put_back_fail_by_name() {
        let declaration = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let (config, runner) = (test_config(), Runner::new(false));
        let env = Env {
            root: std::path::Path::new("/nonexistent"),
            offline: false,
            config: &config,
            runner: &runner,
            store: None,
            interrupted: &|| false,
            upkeep: None,
            clock: &crate::os::clock::Clock::system(),
            diffs: false,
        };
        let mut cx = RunContext::new(&declaration, false);
        let d = "/etc/systemd/system/mesh-host.service.d/x.conf";
        let diff = |key: &str| {
            let new = format!("{key}\n");
            Some(Box::new(ContentDiff::new(
                "(absent)",
                "(declared)",
                None,
                Some(new.as_bytes()),
                true,
            )))
        };
        let mut report = Report::default();
        for key in ["/etc/a.conf", d, "/etc/b.conf"] {
            report.push_change(Files::NAME, key, Action::Create, vec![].into(), diff(key));
        }
        fail_refused(&env, &mut cx.facts, &Ledger::default(), &mut report).unwrap();
        assert_eq!(report.changes.len(), 3);
        kinds::files::refused(&cx, d, "systemd says the host's units changed");
        fail_refused(&env, &mut cx.facts, &Ledger::default(), &mut report).unwrap();
        let keys: Vec<&str> = report.changes.iter().map(|c| c.key).collect();
        assert_eq!(keys, ["/etc/a.conf", "/etc/b.conf"]);
        // Each remaining change keeps its own diff.
        assert_eq!(
            report.diffs,
            [
                (0, diff("/etc/a.conf").unwrap()),
                (1, diff("/etc/b.conf").unwrap())
            ]
        );
        let failed = &report.failures[0];
        assert_eq!((failed.kind.as_str(), failed.key.as_str()), ("files", d));
        assert_eq!(failed.action, ResultAction::Create);
        assert_eq!(failed.detail, "systemd says the host's units changed");
        // Taken once: the next kind finds none.
        assert!(cx.facts.files.take_refused().is_empty());
    }

    /// A run tells each kind's steps as they start: what it observes, what that came to, what it
    /// changes (with each change's sign) and what it checks again, naming the first few.
    #[test]
    fn a_run_tells_each_step_as_it_starts() {
        let scratch = TempDir::new("reconcile-progress");
        let root = scratch.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/g"), "as declared\n").unwrap();
        let store = Store::open(&scratch.path().join("state"), true)
            .unwrap()
            .unwrap();
        let files: Vec<String> = ["a", "b", "c", "d", "e", "f", "g"]
            .iter()
            .map(|name| format!(r#""/etc/{name}": {{"content": "as declared\n"}}"#))
            .collect();
        let text = format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(", "));
        let declaration = parse_with_defaults(&text).unwrap();
        let told = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let keep = std::rc::Rc::clone(&told);
        let sink = progress::Sink::new(move |event| keep.borrow_mut().push(format!("{event:?}")));
        let config = test_config();
        let runner = Runner::new(false).with_progress(Some(sink));
        let env = Env {
            root: &root,
            offline: true,
            config: &config,
            runner: &runner,
            store: Some(&store),
            interrupted: &|| false,
            upkeep: None,
            clock: &crate::os::clock::Clock::system(),
            diffs: false,
        };
        let mut ledger = store.ledger().unwrap();
        run(&env, &declaration, &mut ledger, Mode::Apply).unwrap();
        let named = |sign: Option<char>, keys: &[&str]| {
            keys.iter()
                .map(|k| format!("({sign:?}, \"/etc/{k}\")"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let step = |step: &str, total: usize, named: String| {
            format!(r#"Step {{ kind: "files", step: {step}, total: {total}, named: [{named}] }}"#)
        };
        assert_eq!(
            *told.borrow(),
            [
                step("Observe", 7, named(None, &["a", "b", "c", "d", "e"])),
                r#"Planned { kind: "files", in_sync: 0, adopted: 1, changes: 6, failed: 0 }"#
                    .to_string(),
                step("Apply", 6, named(Some('+'), &["a", "b", "c", "d", "e"])),
                step("Verify", 6, named(None, &["a", "b", "c", "d", "e"])),
            ]
        );
    }

    /// Applies `text` in a scratch root (with an empty `/etc`) and store, the host starting to
    /// stop once `stopping(root)` holds: the scratch (kept until the caller is done), the root,
    /// the store and the run's report.
    fn apply_until_stopping(
        label: &str,
        text: &str,
        offline: bool,
        stopping: impl Fn(&std::path::Path) -> bool,
    ) -> (TempDir, std::path::PathBuf, Store, Report) {
        let scratch = TempDir::new(label);
        let root = scratch.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let store = Store::open(&scratch.path().join("state"), true)
            .unwrap()
            .unwrap();
        let declaration = parse_with_defaults(text).unwrap();
        let (config, runner) = (test_config(), Runner::new(false));
        let interrupted = || stopping(&root);
        let env = Env {
            root: &root,
            offline,
            config: &config,
            runner: &runner,
            store: Some(&store),
            interrupted: &interrupted,
            upkeep: None,
            clock: &crate::os::clock::Clock::system(),
            diffs: false,
        };
        let mut ledger = store.ledger().unwrap();
        let report = run(&env, &declaration, &mut ledger, Mode::Apply).unwrap();
        (scratch, root, store, report)
    }

    /// Stopping between the chunks of a kind applied in chunks, as between kinds: what the first
    /// chunk did is recorded, the chunks after are not observed, the run is interrupted.
    #[test]
    fn a_host_stopping_between_chunks_keeps_the_first_and_leaves_the_rest() {
        let path = |i: usize| format!("/etc/many/f{i:05}.conf");
        let files: Vec<String> = (0..APPLIED_AT_ONCE + 10)
            .map(|i| format!(r#""{}": {{"content": "{i}"}}"#, path(i)))
            .collect();
        let text = format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(","));
        // The host starts stopping once the first chunk's files are in place.
        let last_of_first = path(APPLIED_AT_ONCE - 1);
        let (_scratch, root, store, report) =
            apply_until_stopping("chunks-stop", &text, true, |root| {
                root.join(&last_of_first[1..]).exists()
            });
        assert!(report.interrupted);
        assert_eq!(report.changes.len(), APPLIED_AT_ONCE);
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert!(report.deferred.is_empty(), "{:?}", report.deferred);
        assert!(root.join(&last_of_first[1..]).exists());
        assert!(!root.join(&path(APPLIED_AT_ONCE)[1..]).exists());
        // The stored ledger says the same: the first chunk owned, with its digests; the rest not.
        let stored = store.ledger().unwrap();
        assert_eq!(stored.owned_keys::<Files>().count(), APPLIED_AT_ONCE);
        let first = stored.get::<Files>(&path(0)).unwrap();
        assert!(first.applied.is_some());
    }

    /// What units owe is written before the files change and kept when the run stops before
    /// the units' turn; what was written ahead for a file that did not change is taken back.
    #[test]
    fn restarts_owed_are_written_ahead_and_taken_back_for_files_left_unchanged() {
        let text = r#"{"schema": 1, "files": {"/etc/a.conf": {"content": "a"},
                "/etc/b.conf": {"content": "b"}},
                "units": {"a.service": {"restart_on": ["/etc/a.conf"]},
                          "b.service": {"reload_on": ["/etc/b.conf"]}}}"#;
        // The host starts stopping once the first file is being written (its new content put
        // beside it): the second is not written, and the units kind is not reached (nothing is
        // spawned).
        let (_scratch, root, store, report) =
            apply_until_stopping("owed-ahead", text, false, |root| {
                std::fs::read_dir(root.join("etc")).is_ok_and(|mut d| d.next().is_some())
            });
        assert!(report.interrupted);
        assert!(root.join("etc/a.conf").exists());
        assert!(!root.join("etc/b.conf").exists());
        let owed = store.owed().unwrap();
        let owed: Vec<(&str, Vec<&str>)> = (owed.units.iter())
            .map(|(u, f)| (u.as_str(), f.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(owed, [("a.service", vec!["/etc/a.conf"])]);
    }
}
