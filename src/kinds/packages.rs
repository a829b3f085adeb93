//! pacman packages. One `pacman -Qi` observes them all; missing ones install in one
//! `pacman -S --needed` (or a full `-Syu` when the declaration asks: never a partial upgrade), and
//! removals go in one `pacman -Rs`. Only packages the host installed are removed on release.
//! Declared packages are kept explicitly installed, so no `-Rs` (the host's or a person's) takes
//! one away as a dependency nobody needs any more.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

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
    Installed {
        version: String,
        /// pacman's install reason: explicitly installed, or only as a dependency.
        explicit: bool,
        /// Installed packages that depend on it (`Required By`).
        required_by: Vec<String>,
    },
    Missing,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    Install,
    /// `pacman -D --asexplicit`: a declared package installed as a dependency.
    MarkExplicit,
    Remove,
    /// `pacman -D --asdeps`: an adopted package goes back to being a dependency on release.
    MarkDependency,
    Forget,
}

/// What the ledger keeps of an adopted package that was installed as a dependency.
const WAS_DEPENDENCY: &str = "dependency";

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
        let args = with_root(env, &["-Qi"])?;
        let output = env
            .runner
            .query(&env.config.pacman, &args, &names)
            .map_err(|e| e.to_string())?;
        // Exit 1 only means "some were not found"; anything else is a real failure.
        if !matches!(output.code, Some(0) | Some(1)) {
            return Err(format!(
                "`pacman -Qi` exited with status {:?}: {}",
                output.code,
                output.stderr.trim()
            ));
        }
        let stdout = output.stdout_text();
        let mut installed = parse_info(&stdout);
        Ok(keys
            .iter()
            .map(|k| {
                let observed = installed.remove(k.as_str()).unwrap_or(Observed::Missing);
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
        let dependency = matches!(
            observed,
            Observed::Installed {
                explicit: false,
                ..
            }
        );
        let required_by = match observed {
            Observed::Installed { required_by, .. } => required_by.join(" "),
            Observed::Missing => String::new(),
        };
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
            // Else a `-Rs` of what needed it would remove it with it.
            (Some(Spec { present: true }), true, owned) if dependency => change(
                Action::Update,
                "installed as a dependency; mark explicitly installed",
                owned
                    .is_none()
                    .then(|| Entry::new(Origin::Adopted, json!(WAS_DEPENDENCY))),
                applied,
                Op::MarkExplicit,
            ),
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
            // `-Rs` would fail on every run; pacman removes it once nothing needs it.
            (None, true, Some(e)) if e.origin == Origin::Created && !required_by.is_empty() => {
                change(
                    Action::Update,
                    &format!(
                    "released; still required by {required_by}, so marked installed as a dependency"
                ),
                    None,
                    LedgerAfter::Disown,
                    Op::MarkDependency,
                )
            }
            (None, true, Some(e)) if e.origin == Origin::Created => change(
                Action::Remove,
                "released; mesh-host installed it",
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            (None, true, Some(e)) if e.original == json!(WAS_DEPENDENCY) => change(
                Action::Update,
                "released; was installed as a dependency before mesh-host, marked so again",
                None,
                LedgerAfter::Disown,
                Op::MarkDependency,
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
        // Once pacman itself fails (lock held past the wait, timeout, not startable), every later
        // transaction of this run fails the same way without running: retrying would only wait again.
        let mut pacman_failure: Option<String> = None;
        let mut transaction = |args: &[&str], names: &[&str]| -> Vec<Result<(), String>> {
            let args = match with_root(env, args) {
                Ok(args) => args,
                Err(e) => return names.iter().map(|_| Err(e.clone())).collect(),
            };
            batch_then_each(names, |batch| {
                if let Some(e) = &pacman_failure {
                    return Err(e.clone());
                }
                run_waiting_for_lock(
                    env.runner,
                    &env.config.pacman,
                    &args,
                    batch,
                    env.config.pacman_lock_wait,
                )
                .map_err(|e| match e {
                    TransactionError::Packages(e) => e,
                    TransactionError::Pacman(e) => pacman_failure.insert(e).clone(),
                })
            })
        };
        // Marked explicit before any removal, so the `-Rs` cannot take a declared package along.
        let steps: [(Op, &[&str]); 4] = [
            (Op::MarkExplicit, &["-D", "--asexplicit"]),
            (Op::Install, install_args),
            (Op::Remove, &["-Rs", "--noconfirm"]),
            (Op::MarkDependency, &["-D", "--asdeps"]),
        ];
        let mut results: BTreeMap<&str, Result<(), String>> = BTreeMap::new();
        for (op, args) in steps {
            let names = pick(op);
            let outcomes = transaction(args, &names);
            results.extend(names.into_iter().zip(outcomes));
        }
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

/// Under `--root`, pacman works on the mounted system with its own configuration. A root that is
/// not UTF-8 is refused: falling back to `/` would change the running system instead.
fn with_root<'a>(env: &'a Env, args: &[&'a str]) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::with_capacity(args.len() + 2);
    if env.offline {
        let root = env.root.to_str().ok_or_else(|| {
            format!(
                "root {} is not UTF-8; pacman's --sysroot cannot be given it",
                env.root.display()
            )
        })?;
        out.push("--sysroot");
        out.push(root);
    }
    out.extend_from_slice(args);
    Ok(out)
}

/// Why a pacman transaction failed.
enum TransactionError {
    /// pacman refused the packages (one not found, a dependency broken): each alone may succeed.
    Packages(String),
    /// pacman could not run at all (lock held past the wait, timeout, not startable).
    Pacman(String),
}

/// Runs a transaction, waiting (bounded) while someone else holds pacman's database lock. The lock
/// file is never removed: only its owner knows whether a transaction is half done.
fn run_waiting_for_lock(
    runner: &Runner,
    tool: &Tool,
    args: &[&str],
    names: &[&str],
    wait: Duration,
) -> Result<(), TransactionError> {
    let deadline = Instant::now() + wait;
    loop {
        match runner.run(tool, args, names) {
            Ok(_) => return Ok(()),
            Err(e) => match locked_by(&e) {
                Some(lock) if Instant::now() < deadline => {
                    log::info!("pacman's database is locked ({lock}); waiting");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Some(lock) => {
                    return Err(TransactionError::Pacman(format!(
                        "pacman's database lock {lock} was held by someone else for more than {} \
                         s; it was left alone (remove it only if no package manager is running)",
                        wait.as_secs()
                    )))
                }
                None if matches!(e.failure, Failure::Exit(Some(_), _)) => {
                    return Err(TransactionError::Packages(e.to_string()))
                }
                None => return Err(TransactionError::Pacman(e.to_string())),
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

/// `pacman -Qi` output: one block of padded `Field : value` lines per installed package, blank-line
/// separated. Blocks without a name are skipped.
pub fn parse_info(stdout: &str) -> BTreeMap<&str, Observed> {
    let mut packages = BTreeMap::new();
    for block in stdout.split("\n\n") {
        let field = |name: &str| {
            block.lines().find_map(|line| {
                let (key, value) = line.split_once(" : ")?;
                (key.trim_end() == name).then(|| value.trim())
            })
        };
        let Some(name) = field("Name") else { continue };
        packages.insert(
            name,
            Observed::Installed {
                version: field("Version").unwrap_or_default().to_string(),
                explicit: field("Install Reason") == Some("Explicitly installed"),
                // pacman wraps a long list onto indented lines; the first line says whether any.
                required_by: match field("Required By") {
                    None | Some("None") => Vec::new(),
                    Some(names) => names.split_whitespace().map(str::to_string).collect(),
                },
            },
        );
    }
    packages
}

/// pacman's local database directory, `DBPath/local`, as seen from this process: a transaction
/// adds or removes an entry in it, which the service's watcher takes as a hint to check packages.
/// `pacman -v -T` (a dependency test of nothing) prints the paths pacman was configured with.
pub fn local_db_dir(env: &Env) -> Result<PathBuf, String> {
    let args = with_root(env, &["-v", "-T"])?;
    let output = env
        .runner
        .run(&env.config.pacman, &args, &[])
        .map_err(|e| e.to_string())?;
    let db = parse_db_path(&output.stdout_text())
        .ok_or_else(|| "`pacman -v -T` printed no `DB Path`".to_string())?;
    // Under --sysroot pacman prints the paths inside the mounted root.
    let db = match env.offline {
        true => env.root.join(db.strip_prefix("/").unwrap_or(&db)),
        false => db,
    };
    Ok(db.join("local"))
}

/// The `DB Path   : DIR/` line of `pacman -v` output.
pub fn parse_db_path(stdout: &str) -> Option<PathBuf> {
    stdout.lines().find_map(|line| {
        let (field, value) = line.split_once(" : ")?;
        (field.trim() == "DB Path" && !value.trim().is_empty()).then(|| PathBuf::from(value.trim()))
    })
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

    fn installed(version: &str, explicit: bool) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit,
            required_by: Vec::new(),
        }
    }

    /// Installed as a dependency of `by`.
    fn required(version: &str, by: &[&str]) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit: false,
            required_by: by.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn parses_info_output_with_install_reasons() {
        let out = parse_info(include_str!("../../tests/fixtures/pacman-Qi.txt"));
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![
                ("mesh-a", required("1.0-1", &["mesh-b"])),
                ("mesh-b", installed("1.0-1", true)),
                ("mesh-e", installed("1.0-1", true)),
            ]
        );
    }

    #[test]
    fn parses_info_output_when_some_are_missing() {
        // Exit 1, the missing one named on stderr only.
        let out = parse_info(include_str!(
            "../../tests/fixtures/pacman-Qi-missing.stdout"
        ));
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![("mesh-a", required("1.0-1", &["mesh-b"]))]
        );
        assert!(parse_info("").is_empty());
    }

    #[test]
    fn recognises_the_lock_error_in_real_output() {
        let e = CommandError {
            command: "pacman -S".into(),
            failure: Failure::Exit(
                Some(1),
                include_str!("../../tests/fixtures/pacman-S-dblck.stderr").into(),
            ),
        };
        assert_eq!(
            locked_by(&e).as_deref(),
            Some("/tmp/mesh-sandbox/pacman/root/var/lib/pacman/db.lck")
        );
        let not_found = CommandError {
            command: "pacman -S".into(),
            failure: Failure::Exit(
                Some(1),
                include_str!("../../tests/fixtures/pacman-S-notfound.stderr").into(),
            ),
        };
        assert_eq!(locked_by(&not_found), None);
    }

    #[test]
    fn planner_cases() {
        let d = crate::declaration::tests::parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let created = Entry::new(Origin::Created, Value::Null);
        let adopted = Entry::new(Origin::Adopted, Value::Null);
        let was_dependency = Entry::new(Origin::Adopted, json!(WAS_DEPENDENCY));
        let dependency = installed("1", false);
        let installed = installed("1", true);
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
        let needed = required("1", &["web", "db"]);
        assert_eq!(
            plan(None, &needed, Some(&created)),
            "MarkDependency released; still required by web db, so marked installed as a dependency"
        );
        assert_eq!(
            plan(None, &installed, Some(&adopted)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(plan(None, &installed, None), "in sync");
        assert_eq!(
            plan(Some(&present), &dependency, None),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(Some(&present), &dependency, Some(&created)),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(None, &installed, Some(&was_dependency)),
            "MarkDependency released; was installed as a dependency before mesh-host, marked so again"
        );
        assert_eq!(
            plan(None, &Observed::Missing, Some(&was_dependency)),
            "Forget released; already gone"
        );
    }

    #[test]
    fn db_path_from_verbose_output() {
        assert_eq!(
            parse_db_path(include_str!("../../tests/fixtures/pacman-v-T.txt")),
            Some(PathBuf::from(
                "/tmp/mesh-sandbox/pacman/root/var/lib/pacman/"
            ))
        );
        assert_eq!(parse_db_path("Root      : /\n"), None);
    }
}
