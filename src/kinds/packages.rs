//! pacman packages. One `pacman -Qi` observes them all; missing ones install in one
//! `pacman -S --needed` (or a full `-Syu` when the declaration asks: never a partial upgrade), and
//! removals go in one `pacman -Rs`. Only packages the host installed are removed on release.
//! Declared packages are kept explicitly installed, so no `-Rs` (the host's or a person's) takes
//! one away as a dependency nobody needs any more.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    batch_then_each, check_argument, query_by_halves, Action, Change, Env, Kind, LedgerAfter,
    Observations, Outcome, RunContext, Step, STOPPING,
};
use crate::config::{Identity, Limits};
use crate::declaration::{Declaration, Fields};
use crate::exec::{CommandError, Failure};
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
    ) -> Result<Observations<Observed>, String> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args = with_root(env, &["-Qi"])?;
        let results = query_by_halves(env.runner, "`pacman -Qi`", &names, |batch| {
            let output = env.runner.query(&env.config.pacman, &args, batch)?;
            // Exit 1 only means "some were not found"; anything else is a real failure.
            if !matches!(output.code, Some(0) | Some(1)) {
                return Err(CommandError {
                    command: "pacman -Qi".into(),
                    failure: Failure::Exit(output.code, output.stderr),
                });
            }
            let stdout = output.stdout_text();
            let mut installed = parse_info(&stdout);
            Ok(batch
                .iter()
                .map(|name| installed.remove(name).unwrap_or(Observed::Missing))
                .collect())
        });
        Ok(keys.iter().cloned().zip(results).collect())
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
        let host_packages = &env.config.identity.package_names;
        // The host's package is never upgraded with the rest (a static binary with no
        // dependencies, so holding it back is no partial upgrade).
        let ignore = format!("--ignore={}", host_packages.join(","));
        let upgrade = cx.declaration.packages_upgrade;
        // Once pacman itself fails (lock held past the wait, timeout, not startable), every later
        // transaction of this run fails the same way without running: retrying would only wait again.
        let pacman_failure: RefCell<Option<String>> = RefCell::new(None);
        // Checked before each transaction (never within one): once the host is stopping, the
        // packages of the transactions left wait for the next run.
        let stopped: RefCell<BTreeSet<String>> = RefCell::new(BTreeSet::new());
        let transaction = |args: &[&str], names: &[&str]| -> Vec<Result<(), String>> {
            if !names.is_empty() && (env.interrupted)() {
                stopped
                    .borrow_mut()
                    .extend(names.iter().map(|n| n.to_string()));
                return names.iter().map(|_| Err(STOPPING.to_string())).collect();
            }
            let args = match with_root(env, args) {
                Ok(args) => args,
                Err(e) => return names.iter().map(|_| Err(e.clone())).collect(),
            };
            let mut results = batch_then_each(env.runner, names, |batch| {
                if let Some(e) = pacman_failure.borrow().as_ref() {
                    return Err(e.clone());
                }
                run_waiting_for_lock(env, &args, batch).map_err(|e| match e {
                    TransactionError::Packages(e) => e,
                    TransactionError::Pacman(e) => pacman_failure.borrow_mut().insert(e).clone(),
                })
            });
            // Cut short by the host stopping: the rest were not attempted.
            let left = &names[results.len()..];
            stopped
                .borrow_mut()
                .extend(left.iter().map(|n| n.to_string()));
            results.extend(left.iter().map(|_| Err(STOPPING.to_string())));
            results
        };
        let mut results: BTreeMap<&str, Result<(), String>> = BTreeMap::new();
        // Marked explicit before any removal, so the `-Rs` cannot take a declared package along.
        let names = pick(Op::MarkExplicit);
        let outcomes = transaction(&["-D", "--asexplicit"], &names);
        results.extend(names.into_iter().zip(outcomes));

        // What would be installed is checked against pacman's own metadata first: a package that
        // replaces, conflicts with or provides the host's would take the host over.
        let wanted = pick(Op::Install);
        let (checked, unknown) = check_sync_packages(env, &wanted, host_packages, &mut results);
        if upgrade && !(checked.is_empty() && unknown.is_empty()) {
            let args = ["-Syu", ignore.as_str(), "--needed", "--noconfirm"];
            let outcomes = if checked.is_empty() {
                // Only packages the stale databases do not know: upgrade (which refreshes them)
                // first, then check and install those below.
                let outcome = match with_root(env, &args) {
                    Ok(args) => run_waiting_for_lock(env, &args, &[]).map_err(|e| match e {
                        TransactionError::Packages(e) | TransactionError::Pacman(e) => e,
                    }),
                    Err(e) => Err(e),
                };
                if let Err(e) = outcome {
                    *pacman_failure.borrow_mut() = Some(e);
                }
                Vec::new()
            } else {
                transaction(&args, &checked)
            };
            results.extend(checked.iter().copied().zip(outcomes));
            if !unknown.is_empty() {
                let failure = pacman_failure.borrow().clone();
                if let Some(e) = failure {
                    for name in &unknown {
                        results.insert(name, Err(e.clone()));
                    }
                } else {
                    // The databases are fresh now and the system upgraded: `-S` is no partial upgrade.
                    let (checked, unknown) =
                        check_sync_packages(env, &unknown, host_packages, &mut results);
                    for name in unknown {
                        results.insert(name, Err(not_found(name)));
                    }
                    let outcomes = transaction(&["-S", "--needed", "--noconfirm"], &checked);
                    results.extend(checked.into_iter().zip(outcomes));
                }
            }
        } else {
            for name in unknown {
                results.insert(name, Err(not_found(name)));
            }
            let outcomes = transaction(&["-S", "--needed", "--noconfirm"], &checked);
            results.extend(checked.into_iter().zip(outcomes));
        }

        let removals = pick(Op::Remove);
        let removals = check_removals(env, &removals, host_packages, &mut results);
        let outcomes = transaction(&["-Rs", "--noconfirm"], &removals);
        results.extend(removals.into_iter().zip(outcomes));
        let names = pick(Op::MarkDependency);
        let outcomes = transaction(&["-D", "--asdeps"], &names);
        results.extend(names.into_iter().zip(outcomes));
        let stopped = stopped.into_inner();
        changes
            .iter()
            .map(|c| match results.get(c.key.as_str()) {
                _ if stopped.contains(&c.key) => Outcome::Stopped,
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

/// Looks `names` up in the sync databases with one `pacman -Si`. Those that replace, conflict with,
/// provide or depend on a host package fail here with that reason (so does every name, if pacman cannot
/// answer); returns the names that may be installed, and those no sync database has.
fn check_sync_packages<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), String>>,
) -> (Vec<&'n str>, Vec<&'n str>) {
    if names.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let output = with_root(env, &["-Si"]).and_then(|args| {
        let output = env
            .runner
            .query(&env.config.pacman, &args, names)
            .map_err(|e| e.to_string())?;
        // Its exit status counts the names not found; any other complaint is a real failure.
        let complaint = output.stderr.lines().any(|line| {
            let not_found =
                line.starts_with("error: package '") && line.ends_with("' was not found");
            !(line.trim().is_empty() || not_found || line.starts_with("warning: "))
        });
        match output.code {
            Some(_) if !complaint => Ok((output.stdout_text(), output.stderr)),
            code => Err(format!(
                "`pacman -Si` (checking what would be installed) exited with status {code:?}: {}",
                output.stderr.trim()
            )),
        }
    });
    let (stdout, stderr) = match output {
        Ok(output) => output,
        Err(e) => {
            for name in names {
                results.insert(name, Err(e.clone()));
            }
            return (Vec::new(), Vec::new());
        }
    };
    let infos = parse_sync_info(&stdout);
    let (mut checked, mut unknown) = (Vec::new(), Vec::new());
    for &name in names {
        let Some(info) = infos.iter().find(|i| i.name == name) else {
            // Not found, as pacman says; a tool that says nothing of it leaves the judgement
            // to the transaction (real pacman always says one or the other).
            if stderr.contains(&format!("error: package '{name}' was not found")) {
                unknown.push(name);
            } else {
                checked.push(name);
            }
            continue;
        };
        match takes_over(info, host_packages) {
            Some(why) => {
                results.insert(name, Err(why));
            }
            None => checked.push(name),
        }
    }
    (checked, unknown)
}

/// Of `names` to remove with `-Rs`, those whose removal would take a host package along (one
/// installed as their dependency) fail with that reason, asked of `pacman -Rsp` (which changes
/// nothing); returns the rest. Each is asked alone when the batch would take a host package or
/// pacman refuses the batch (one name's broken dependency hides what the others would remove).
fn check_removals<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), String>>,
) -> Vec<&'n str> {
    if names.is_empty() {
        return Vec::new();
    }
    let removed_hosts = |batch: &[&str]| -> Option<Vec<String>> {
        let args = with_root(env, &["-Rsp", "--print-format", "%n"]).ok()?;
        let output = env.runner.query(&env.config.pacman, &args, batch).ok()?;
        (output.code == Some(0)).then(|| {
            output
                .stdout_text()
                .lines()
                .filter(|line| host_packages.iter().any(|h| h == line.trim()))
                .map(|line| line.trim().to_string())
                .collect()
        })
    };
    match removed_hosts(names) {
        Some(hosts) if hosts.is_empty() => return names.to_vec(),
        None if names.len() == 1 => return names.to_vec(),
        _ => {}
    }
    let mut allowed = Vec::new();
    for &name in names {
        match removed_hosts(&[name]).and_then(|hosts| hosts.into_iter().next()) {
            Some(host) => {
                results.insert(
                    name,
                    Err(format!(
                        "refused: removing {name} with its dependencies would remove {host}, \
                         the host's own package (installed as its dependency; pacman -Rsp); \
                         mesh-host never manages itself"
                    )),
                );
            }
            None => allowed.push(name),
        }
    }
    allowed
}

fn not_found(name: &str) -> String {
    format!(
        "target not found: {name} (no sync database has a package of that name; mesh-host \
         declares packages by name, not groups or provisions)"
    )
}

/// What `pacman -Si` says of one sync package that matters to the host.
#[derive(Debug, PartialEq)]
pub struct SyncInfo<'a> {
    pub name: &'a str,
    pub replaces: Vec<&'a str>,
    pub conflicts: Vec<&'a str>,
    pub provides: Vec<&'a str>,
    pub depends: Vec<&'a str>,
}

/// `pacman -Si` output: one block per package, as `-Qi` prints them. List entries may carry a
/// version constraint (`nox-mesh-host>=1.0`), kept as printed.
pub fn parse_sync_info(stdout: &str) -> Vec<SyncInfo<'_>> {
    let mut out = Vec::new();
    for block in stdout.split("\n\n") {
        // `Field : value` lines; a list pacman wraps continues on lines that start blank.
        let mut fields: Vec<(&str, Vec<&str>)> = Vec::new();
        for line in block.lines() {
            match (
                line.starts_with(char::is_whitespace),
                line.split_once(" : "),
            ) {
                (false, Some((key, value))) => {
                    fields.push((key.trim_end(), value.split_whitespace().collect()))
                }
                (true, _) => {
                    if let Some((_, words)) = fields.last_mut() {
                        words.extend(line.split_whitespace());
                    }
                }
                (false, None) => {}
            }
        }
        let list = |name: &str| -> Vec<&str> {
            match fields.iter().find(|(key, _)| *key == name) {
                Some((_, words)) if words.as_slice() != ["None"] => words.clone(),
                _ => Vec::new(),
            }
        };
        let Some(&name) = list("Name").first() else {
            continue;
        };
        out.push(SyncInfo {
            name,
            replaces: list("Replaces"),
            conflicts: list("Conflicts With"),
            provides: list("Provides"),
            depends: list("Depends On"),
        });
    }
    out
}

/// Why installing `info` would take a host package over, if it would.
fn takes_over(info: &SyncInfo, host_packages: &[String]) -> Option<String> {
    let names = |entries: &[&str]| -> Option<String> {
        entries.iter().find_map(|entry| {
            let bare = entry.split(['<', '>', '=']).next().unwrap_or(entry);
            host_packages
                .iter()
                .find(|h| h.as_str() == bare)
                .map(|h| h.to_string())
        })
    };
    for (relation, entries, effect) in [
        ("replaces", &info.replaces, "would remove the host"),
        ("conflicts with", &info.conflicts, "would remove the host"),
        ("provides", &info.provides, "would stand in for the host"),
        // --ignore or not: `--noconfirm` answers yes to installing an ignored dependency.
        (
            "depends on",
            &info.depends,
            "would install or upgrade the host",
        ),
    ] {
        if let Some(host) = names(entries) {
            return Some(format!(
                "refused: {} {relation} {host}, the host's own package (pacman -Si); installing \
                 it {effect}; mesh-host never manages itself",
                info.name
            ));
        }
    }
    None
}

/// Why a pacman transaction failed.
enum TransactionError {
    /// pacman refused the packages (one not found, a dependency broken): each alone may succeed.
    Packages(String),
    /// pacman could not run at all (lock held past the wait, timeout, not startable).
    Pacman(String),
}

/// Runs a transaction, waiting (bounded) while someone else holds pacman's database lock. A lock
/// no process holds is stale: reported at once, by name, rather than waited on; the lock file is
/// never removed unless `pacman_remove_stale_lock` allows it and it also predates this boot
/// (only then is it sure that no transaction is half done under it).
fn run_waiting_for_lock(env: &Env, args: &[&str], names: &[&str]) -> Result<(), TransactionError> {
    let wait = env.config.pacman_lock_wait;
    let deadline = Instant::now() + wait;
    // pacman closes its lock a moment before it unlinks it: one sighting of a lock nobody
    // holds is checked again before it is called stale.
    let mut unheld_before = false;
    // Said once per holder, not at every retry (twice a second for minutes).
    let mut said_busy: Option<String> = None;
    loop {
        let e = match env.runner.run(&env.config.pacman, args, names) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let Some(lock) = locked_by(&e) else {
            return Err(match e.failure {
                Failure::Exit(Some(_), _) => TransactionError::Packages(e.to_string()),
                _ => TransactionError::Pacman(e.to_string()),
            });
        };
        let state = match lock_state(env, &lock) {
            Ok(state) => state,
            Err(why) => LockState::Held(format!("a process it could not check ({why})")),
        };
        match state {
            LockState::Gone => unheld_before = false,
            LockState::Held(by) if Instant::now() < deadline => {
                unheld_before = false;
                if said_busy.as_ref() != Some(&by) {
                    log::info!("pacman is busy: its database lock {lock} is held by {by}; waiting");
                    said_busy = Some(by);
                }
            }
            LockState::Held(by) => {
                return Err(TransactionError::Pacman(format!(
                    "pacman is busy: its database lock {lock} was held by {by} for more than {} \
                     s; it was left alone",
                    wait.as_secs()
                )))
            }
            LockState::Unheld { predates_boot }
                if predates_boot && env.config.pacman_remove_stale_lock =>
            {
                remove_lock(env, &lock).map_err(TransactionError::Pacman)?;
                env.runner.note(format!(
                    "removed pacman's stale database lock {lock}: no process had it open and it \
                     predated this boot (pacman_remove_stale_lock)"
                ));
                continue;
            }
            LockState::Unheld { predates_boot } if predates_boot || unheld_before => {
                let why = if predates_boot {
                    "no process has it open and it predates this boot"
                } else {
                    "no process has it open"
                };
                return Err(TransactionError::Pacman(format!(
                    "pacman's database lock {lock} is stale: {why}; it was left alone (remove it \
                     if no package manager is running; pacman_remove_stale_lock lets mesh-host \
                     remove a stale lock older than the boot)"
                )));
            }
            LockState::Unheld { .. } => unheld_before = true,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What is behind a `db.lck` pacman reported.
enum LockState {
    /// Gone since pacman reported it: try again.
    Gone,
    /// Held by these processes (or assumed held when they could not be checked).
    Held(String),
    Unheld {
        predates_boot: bool,
    },
}

/// The lock pacman named, as this process reaches it: under `--root`, pacman ran chrooted
/// into the root, so its path is inside it. Opened through the no-symlink walk.
fn lock_parent(env: &Env, lock: &str) -> Result<Option<crate::fsutil::Parent>, String> {
    let root = if env.offline {
        env.root
    } else {
        std::path::Path::new("/")
    };
    let dir = crate::fsutil::Dir::open(root).map_err(|e| format!("{}: {e}", root.display()))?;
    crate::fsutil::walk_to_parent(&dir, std::path::Path::new(lock), false)
        .map_err(|e| e.to_string())
}

fn lock_state(env: &Env, lock: &str) -> Result<LockState, String> {
    let at = |e: std::io::Error| format!("{lock}: {e}");
    let Some(parent) = lock_parent(env, lock)? else {
        return Ok(LockState::Gone);
    };
    let Some(identity) = parent.dir.identity(&parent.name).map_err(at)? else {
        return Ok(LockState::Gone);
    };
    let holders = crate::lockfile::holders(&identity);
    if !holders.is_empty() {
        let list: Vec<String> = holders
            .iter()
            .map(|h| format!("pid {} ({})", h.pid, h.name))
            .collect();
        return Ok(LockState::Held(list.join(", ")));
    }
    let predates_boot = crate::lockfile::boot_time().is_some_and(|boot| identity.modified < boot);
    Ok(LockState::Unheld { predates_boot })
}

fn remove_lock(env: &Env, lock: &str) -> Result<(), String> {
    let parent = lock_parent(env, lock)?.ok_or_else(|| format!("{lock}: its directory is gone"))?;
    parent
        .dir
        .remove(&parent.name)
        .map(drop)
        .map_err(|e| format!("pacman's stale database lock {lock} could not be removed: {e}"))
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
        assert!(problems(
            r#"{"schema": 1, "packages": {"nox-mesh-hostile": {}, "mesh-host": {}, "Nox-Mesh-Host": {}}}"#
        )
        .is_empty());
    }

    #[test]
    fn sync_info_shows_what_would_take_the_host_over() {
        let stdout = include_str!("../../tests/fixtures/pacman-Si.txt");
        let infos = parse_sync_info(stdout);
        assert_eq!(
            infos,
            vec![
                SyncInfo {
                    name: "mesh-usurper",
                    replaces: vec!["nox-mesh-host"],
                    conflicts: vec!["nox-mesh-host"],
                    provides: vec!["nox-mesh-host=9.0"],
                    depends: vec![],
                },
                SyncInfo {
                    name: "mesh-a",
                    replaces: vec![],
                    conflicts: vec![],
                    provides: vec![],
                    depends: vec![],
                },
            ]
        );
        // A list pacman wraps onto further lines is read whole.
        let wrapped = "Name            : x\nProvides        : a  b\n                  nox-mesh-host=2\nDepends On      : None\n";
        assert_eq!(
            parse_sync_info(wrapped)[0].provides,
            vec!["a", "b", "nox-mesh-host=2"]
        );
        let host = vec!["nox-mesh-host".to_string()];
        let why = takes_over(&infos[0], &host).unwrap();
        assert!(
            why.contains("mesh-usurper replaces nox-mesh-host, the host's own package"),
            "{why}"
        );
        assert_eq!(takes_over(&infos[1], &host), None);
        for (field, entry, relation) in [
            ("conflicts", "nox-mesh-host>=1.0", "conflicts with"),
            ("provides", "nox-mesh-host", "provides"),
            ("depends", "nox-mesh-host>1.0", "depends on"),
        ] {
            let mut info = SyncInfo {
                name: "x",
                replaces: vec![],
                conflicts: vec![],
                provides: vec![],
                depends: vec![],
            };
            match field {
                "conflicts" => info.conflicts.push(entry),
                "provides" => info.provides.push(entry),
                _ => info.depends.push(entry),
            }
            let why = takes_over(&info, &host).unwrap();
            assert!(
                why.contains(&format!("x {relation} nox-mesh-host")),
                "{why}"
            );
        }
        // A look-alike is not the host's package.
        let info = SyncInfo {
            name: "x",
            replaces: vec!["nox-mesh-hostile"],
            conflicts: vec!["nox-mesh"],
            provides: vec!["mesh-host"],
            depends: vec!["nox-mesh-host-tools"],
        };
        assert_eq!(takes_over(&info, &host), None);
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
