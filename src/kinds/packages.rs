//! pacman packages. One `pacman -Q` observes them all; missing ones install in one
//! `pacman -S --needed` (or a full `-Syu` when the declaration asks: never a partial upgrade), and
//! removals go in one `pacman -Rs`. Only packages the host installed are removed on release.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{
    batch_then_each, check_argument, Action, Change, Env, Kind, LedgerAfter, Outcome, RunContext,
    Step,
};
use crate::config::{Identity, Limits, Tool};
use crate::declaration::{Declaration, Fields};
use crate::exec::{CommandError, Failure, Runner};
use crate::store::{Entry, Ledger, Origin};

pub struct Packages;

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub present: bool,
}

#[derive(Debug, PartialEq)]
pub enum Observed {
    Installed { version: String },
    Missing,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    Install,
    Remove,
    Forget,
}

impl Kind for Packages {
    const NAME: &'static str = "packages";
    type Spec = Spec;
    type Observed = Observed;
    type Op = Op;

    fn check_key(key: &str) -> Result<(), String> {
        check_argument("package", key)?;
        // pacman's rules: alphanumerics and @._+-, not starting with '-' or '.'.
        if key.starts_with('.') {
            return Err(format!("package name {key:?} starts with '.'"));
        }
        if let Some(c) = key
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "@._+-".contains(*c)))
        {
            return Err(format!(
                "package name {key:?} contains {c:?}; pacman allows letters, digits and @._+-"
            ));
        }
        if key.len() > 255 {
            return Err("package name is longer than 255 bytes".into());
        }
        Ok(())
    }

    fn parse(_key: &str, fields: &mut Fields, _limits: &Limits) -> Option<Spec> {
        Some(Spec {
            present: fields.present(),
        })
    }

    fn refuse_self(key: &str, _spec: &Spec, identity: &Identity) -> Option<String> {
        identity.package_names.iter().any(|p| p == key).then(|| {
            format!(
                "{key} is the host's own package; the package manager upgrades it, not the mesh"
            )
        })
    }

    fn desired(declaration: &Declaration) -> &BTreeMap<String, Spec> {
        &declaration.packages
    }

    fn digest(spec: &Spec) -> String {
        digest(spec)
    }

    fn observe(
        env: &Env,
        _cx: &RunContext,
        keys: &[String],
    ) -> Result<BTreeMap<String, Observed>, String> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args = with_root(env, &["-Q"]);
        let output = env
            .runner
            .query(&env.config.pacman, &args, &names)
            .map_err(|e| e.to_string())?;
        // Exit 1 only means "some were not found"; anything else is a real failure.
        if !matches!(output.code, Some(0) | Some(1)) {
            return Err(format!(
                "`pacman -Q` exited with status {:?}: {}",
                output.code,
                output.stderr.trim()
            ));
        }
        let stdout = output.stdout_text();
        let installed = parse_query(&stdout);
        Ok(keys
            .iter()
            .map(|k| {
                let observed = match installed.get(k.as_str()) {
                    Some(version) => Observed::Installed {
                        version: version.to_string(),
                    },
                    None => Observed::Missing,
                };
                (k.clone(), observed)
            })
            .collect())
    }

    fn plan(
        _cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry>,
    ) -> Step<Op> {
        let Some(observed) = observed else {
            return Step::Fail(format!("package {key} was not observed"));
        };
        let installed = matches!(observed, Observed::Installed { .. });
        let change = |action, detail: &str, intent, after, op| {
            Step::Change(Change {
                key: key.to_string(),
                action,
                details: vec![detail.to_string()],
                intent,
                backup: None,
                after,
                op,
            })
        };
        let applied = LedgerAfter::Applied(digest(&Spec { present: true }));
        match (desired, installed, owned) {
            (Some(Spec { present: true }), true, Some(_)) => Step::InSync,
            (Some(Spec { present: true }), true, None) => Step::Adopt {
                intent: Entry::new(Origin::Adopted, Value::Null),
                backup: None,
            },
            (Some(Spec { present: true }), false, owned) => change(
                Action::Create,
                "install",
                owned
                    .is_none()
                    .then(|| Entry::new(Origin::Created, Value::Null)),
                applied,
                Op::Install,
            ),
            (Some(Spec { present: false }), true, _) => change(
                Action::Remove,
                "declared absent",
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            (Some(Spec { present: false }), false, None) => Step::InSync,
            (Some(Spec { present: false }), false, Some(_)) => change(
                Action::Remove,
                "already absent",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
            (None, _, None) => Step::InSync,
            (None, true, Some(e)) if e.origin == Origin::Created => change(
                Action::Remove,
                "released; mesh-host installed it",
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            (None, true, Some(_)) => change(
                Action::Update,
                "released; was installed before mesh-host, left installed",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
            (None, false, Some(_)) => change(
                Action::Remove,
                "released; already gone",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
        }
    }

    fn apply(
        env: &Env,
        cx: &RunContext,
        _ledger: &mut Ledger,
        changes: &[Change<Op>],
    ) -> Vec<Outcome> {
        let pick = |op: Op| -> Vec<&str> {
            changes
                .iter()
                .filter(|c| c.op == op)
                .map(|c| c.key.as_str())
                .collect()
        };
        let install_args: &[&str] = if cx.declaration.packages_upgrade {
            &["-Syu", "--needed", "--noconfirm"]
        } else {
            &["-S", "--needed", "--noconfirm"]
        };
        let install = pick(Op::Install);
        let remove = pick(Op::Remove);
        let transaction = |args: &[&str], names: &[&str]| -> Vec<Result<(), String>> {
            let args = with_root(env, args);
            batch_then_each(names, |batch| {
                run_waiting_for_lock(
                    env.runner,
                    &env.config.pacman,
                    &args,
                    batch,
                    env.config.pacman_lock_wait,
                )
            })
        };
        let mut results: BTreeMap<&str, Result<(), String>> = BTreeMap::new();
        results.extend(
            install
                .iter()
                .copied()
                .zip(transaction(install_args, &install)),
        );
        results.extend(
            remove
                .iter()
                .copied()
                .zip(transaction(&["-Rs", "--noconfirm"], &remove)),
        );
        changes
            .iter()
            .map(|c| match results.get(c.key.as_str()) {
                Some(Err(e)) => Outcome::Failed(e.clone()),
                _ => Outcome::Done,
            })
            .collect()
    }

    fn note(cx: &mut RunContext, change: &Change<Op>, outcome: &Outcome) {
        if change.op == Op::Install && *outcome != Outcome::Done {
            cx.failed_packages.insert(change.key.clone());
        }
    }
}

pub fn digest(spec: &Spec) -> String {
    crate::codec::sha256_hex(if spec.present { b"present" } else { b"absent" })
}

/// Under `--root`, pacman works on the mounted system with its own configuration.
fn with_root<'a>(env: &'a Env, args: &[&'a str]) -> Vec<&'a str> {
    let mut out = Vec::with_capacity(args.len() + 2);
    if env.offline {
        out.push("--sysroot");
        out.push(env.root.to_str().unwrap_or("/"));
    }
    out.extend_from_slice(args);
    out
}

/// Runs a transaction, waiting (bounded) while someone else holds pacman's database lock. The lock
/// file is never removed: only its owner knows whether a transaction is half done.
fn run_waiting_for_lock(
    runner: &Runner,
    tool: &Tool,
    args: &[&str],
    names: &[&str],
    wait: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    loop {
        match runner.run(tool, args, names) {
            Ok(_) => return Ok(()),
            Err(e) => match locked_by(&e) {
                Some(lock) if Instant::now() < deadline => {
                    log::info!("pacman's database is locked ({lock}); waiting");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Some(lock) => return Err(format!(
                    "pacman's database lock {lock} was held by someone else for more than {} s; \
                         it was left alone (remove it only if no package manager is running)",
                    wait.as_secs()
                )),
                None => return Err(e.to_string()),
            },
        }
    }
}

/// The lock file named in pacman's "unable to lock database" error, if that is the failure.
fn locked_by(error: &CommandError) -> Option<String> {
    let Failure::Exit(_, stderr) = &error.failure else {
        return None;
    };
    if !stderr.contains("unable to lock database") && !stderr.contains("could not lock database") {
        return None;
    }
    let path = stderr
        .split_whitespace()
        .find(|w| w.ends_with("db.lck"))
        .unwrap_or("db.lck");
    Some(path.to_string())
}

/// `pacman -Q` output: `name version` per line.
pub fn parse_query(stdout: &str) -> BTreeMap<&str, &str> {
    stdout
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, version)| (name, version.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::tests::{check_refused, problems};

    #[test]
    fn names_follow_pacmans_rules_and_never_become_options() {
        for (name, message) in [
            ("-Syu", "starts with '-'"),
            ("--config=/tmp/x", "starts with '-'"),
            (".hidden", "starts with '.'"),
            ("a b", "whitespace"),
            ("nginx;rm", "contains ';'"),
            ("", "empty"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "packages": {{{}: {{}}}}}}"#,
                Value::String(name.into())
            );
            check_refused(&json, &[message]);
        }
        assert!(problems(r#"{"schema": 1, "packages": {"lib32-gcc-libs": {}, "gtk+3": {}, "x@y_z.1": {"state": "absent"}}}"#).is_empty());
    }

    #[test]
    fn refuses_the_hosts_own_package() {
        check_refused(
            r#"{"schema": 1, "packages": {"nox-mesh-host": {"state": "absent"}}}"#,
            &[
                "packages[\"nox-mesh-host\"]: refused",
                "the host's own package",
            ],
        );
    }

    #[test]
    fn parses_query_output() {
        let out = parse_query("mesh-a 1.0-1\nmesh-b 2:1.0-3\n");
        assert_eq!(out.get("mesh-b"), Some(&"2:1.0-3"));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn recognises_the_lock_error() {
        let e = CommandError {
            command: "pacman -S".into(),
            failure: Failure::Exit(
                Some(1),
                "error: failed to init transaction (unable to lock database)\nerror: could not lock database: File exists\n  if you're sure a package manager is not already running, you can remove /tmp/r/var/lib/pacman/db.lck\n".into(),
            ),
        };
        assert_eq!(
            locked_by(&e).as_deref(),
            Some("/tmp/r/var/lib/pacman/db.lck")
        );
    }

    #[test]
    fn planner_cases() {
        let d = crate::declaration::tests::parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext {
            declaration: &d,
            changed_files: Default::default(),
            failed_packages: Default::default(),
            offline: false,
        };
        let created = Entry::new(Origin::Created, Value::Null);
        let adopted = Entry::new(Origin::Adopted, Value::Null);
        let installed = Observed::Installed {
            version: "1".into(),
        };
        let present = Spec { present: true };
        let absent = Spec { present: false };
        let op = |s: Step<Op>| match s {
            Step::InSync => "in sync".to_string(),
            Step::Adopt { .. } => "adopt".into(),
            Step::Change(c) => format!("{:?} {}", c.op, c.details.join("")),
            Step::Fail(e) | Step::Skip(e) => e,
        };
        let plan = |d, o, e| op(Packages::plan(&cx, "p", d, Some(o), e));
        assert_eq!(
            plan(Some(&present), &Observed::Missing, None),
            "Install install"
        );
        assert_eq!(plan(Some(&present), &installed, None), "adopt");
        assert_eq!(plan(Some(&present), &installed, Some(&created)), "in sync");
        assert_eq!(
            plan(Some(&absent), &installed, None),
            "Remove declared absent"
        );
        assert_eq!(
            plan(None, &installed, Some(&created)),
            "Remove released; mesh-host installed it"
        );
        assert_eq!(
            plan(None, &installed, Some(&adopted)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(plan(None, &installed, None), "in sync");
    }
}
