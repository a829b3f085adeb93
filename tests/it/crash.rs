//! Crash anywhere: `kill -9` the host at seeded random points of applies (a first apply, a change,
//! a release) of a declaration of many files into a scratch root, then check what a crash must
//! never break: the store loads, the ledger covers every file the host changed (write-ahead), no
//! file is torn, the next run converges and a release gives back the root byte for byte.
//! The same for the outbox: kill -9 aimed at the end of applies, where the report is written, and
//! every recorded run's report must still reach the control plane, under contiguous ids.
//! `MESH_FAULT_SEED=N` replays a run with the seed it printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::control_plane::{ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::ways::{Driver, Way};
use crate::support::{fault_seed, snapshot, wait_until, Scratch, XorShift};

const FILES: usize = 200;
const ITERATIONS: usize = 50;
/// Files `i` with `i.is_multiple_of(ADOPT_EVERY)` exist before the first apply (adopted); the rest are
/// created in directories that do not exist yet.
const ADOPT_EVERY: usize = 4;
const TMP_SUFFIX: &str = ".mesh-host.tmp";

fn path(i: usize) -> String {
    if i.is_multiple_of(ADOPT_EVERY) {
        format!("/etc/crash/adopted-{i}.conf")
    } else {
        format!("/etc/crash/new/d{}/f{i}.conf", i % 10)
    }
}

fn original(i: usize) -> Vec<u8> {
    format!("original {i}\n").repeat(1 + i % 5).into_bytes()
}

/// Declaration A: every file, contents of varied sizes.
fn content_a(i: usize) -> String {
    format!("declared A {i} ").repeat(1 + (i * 37) % 300) + "\n"
}

/// Declaration B (a change): a fifth of A's files released, the rest rewritten, 20 new ones.
fn files_b() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for i in (0..FILES).filter(|i| !i.is_multiple_of(5)) {
        out.insert(path(i), format!("declared B {i}\n"));
    }
    for i in 0..20 {
        out.insert(
            format!("/etc/crash/new/b/g{i}.conf"),
            format!("new in B {i}\n"),
        );
    }
    out
}

fn files_a() -> BTreeMap<String, String> {
    (0..FILES).map(|i| (path(i), content_a(i))).collect()
}

fn declaration(files: &BTreeMap<String, String>) -> String {
    let files: serde_json::Map<String, Value> = files
        .iter()
        .map(|(p, c)| (p.clone(), serde_json::json!({"content": c, "mode": "0644"})))
        .collect();
    serde_json::json!({"schema": 1, "files": files}).to_string()
}

/// A fresh scratch host with the adopted files' originals in place (mode 0600).
fn prepared() -> Scratch {
    use std::os::unix::fs::PermissionsExt;
    let host = Scratch::new("crash");
    std::fs::create_dir_all(host.target("/etc/crash")).expect("dir");
    for i in (0..FILES).filter(|i| i.is_multiple_of(ADOPT_EVERY)) {
        let target = host.target(&path(i));
        std::fs::write(&target, original(i)).expect("original");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    host
}

/// `mesh-host ARGS` on `host`, silent: the kill tests look at the store and root, not the output.
fn command(host: &Scratch, args: &[&str]) -> Command {
    let mut command = host.command(args);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Starts `apply FILE` and SIGKILLs it after `delay`; true if it was killed before it ended.
fn apply_killed(host: &Scratch, file: &Path, delay: Duration) -> bool {
    let mut child = command(host, &["apply", file.to_str().expect("utf-8")])
        .spawn()
        .expect("spawn mesh-host");
    std::thread::sleep(delay);
    let finished = matches!(child.try_wait(), Ok(Some(_)));
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    !finished
}

/// Wall time of one complete apply of `json` on a fresh host.
fn time_apply(json: &str) -> Duration {
    let host = prepared();
    let file = host.declaration("a.json", json);
    let started = Instant::now();
    host.apply(&file, 0);
    started.elapsed()
}

/// Every regular file and directory under `dir`, relative to the root as target paths.
fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    snapshot(root)
        .into_iter()
        .map(|(p, bytes, mode)| {
            let rel = format!("/{}", p.strip_prefix(root).expect("under root").display());
            let is_dir = mode & 0o170000 == 0o040000;
            (rel, (!is_dir).then_some(bytes))
        })
        .collect()
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir)
        .into_iter()
        .map(|(p, _, _)| p)
        .filter(|p| p.to_string_lossy().ends_with(TMP_SUFFIX))
        .collect()
}

/// The temp files in `dir` that no write in progress explains: a running service writes its
/// state (service.json) on its own, and its generations (generations.json) when the control
/// plane's ack confirms a declaration, between runs; so either one's temp file may be a write
/// caught half way (a crash's is removed by the next run, as every store file's is).
fn temp_files_left(dir: &Path, f: &Findings) -> Vec<PathBuf> {
    let live = [".service.json", ".generations.json"].map(|name| format!("{name}{TMP_SUFFIX}"));
    temp_files(dir)
        .into_iter()
        .filter(|p| !(f.way == Way::Service && live.iter().any(|l| p.ends_with(l))))
        .collect()
}

/// What one iteration found wrong, each line naming the iteration.
struct Findings {
    iteration: usize,
    way: Way,
    phase: &'static str,
    problems: Vec<String>,
}

impl Findings {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(format!(
                "{:?} iteration {} ({}): {}",
                self.way,
                self.iteration,
                self.phase,
                what()
            ));
        }
    }
}

/// The owned rows as `key -> (origin, state)`, or `None` (and a problem) if `owned` failed.
fn owned(host: &Scratch, f: &mut Findings) -> Option<BTreeMap<String, (String, String)>> {
    let out = host.run(&["owned", "--json"]);
    f.check(out.code == 0, || format!("owned --json failed: {out:?}"));
    if out.code != 0 {
        return None;
    }
    let value: Value = serde_json::from_str(&out.stdout).ok()?;
    Some(
        value["owned"]
            .as_array()?
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("key"), (s("origin"), s("state")))
            })
            .collect(),
    )
}

/// The invariants that must hold right after a crash.
fn check_after_crash(
    host: &Scratch,
    initial: &BTreeMap<String, Option<Vec<u8>>>,
    declared: &[&BTreeMap<String, String>],
    f: &mut Findings,
) {
    // Read whole: healthy, or degraded (6) when the killed service is found gone.
    let status = host.run(&["status", "--json"]);
    f.check([0, 6].contains(&status.code), || {
        format!("status --json failed: {status:?}")
    });
    let Some(owned) = owned(host, f) else { return };
    let now = tree(&host.root());
    for (path, bytes) in &now {
        if path.ends_with(TMP_SUFFIX) {
            continue; // judged after the next run
        }
        let Some(bytes) = bytes else { continue };
        let before = initial.get(path).cloned().flatten();
        // No torn file: the original, or one of the declared contents, whole.
        let whole = before.as_deref() == Some(bytes.as_slice())
            || declared
                .iter()
                .any(|d| d.get(path).map(String::as_bytes) == Some(bytes.as_slice()));
        f.check(whole, || {
            format!("{path} is torn: {} bytes matching nothing", bytes.len())
        });
        // Write-ahead: a file whose content the host changed is in the ledger.
        if before.as_deref() != Some(bytes.as_slice()) {
            f.check(owned.contains_key(path), || {
                format!("{path} was changed by the host but the ledger does not list it")
            });
        }
    }
    for (key, (origin, state)) in &owned {
        let existed = initial.get(key).is_some_and(Option::is_some);
        let want = if existed { "adopted" } else { "created" };
        f.check(origin == want, || {
            format!("{key}: the ledger says {origin}, but it is {want}")
        });
        let exists = now.get(key).is_some_and(Option::is_some);
        f.check(
            exists || state == "missing" || state == "pending release",
            || format!("{key}: does not exist, yet the ledger's view says {state:?}"),
        );
    }
}

/// The next runs converge the declaration that was being applied: `reconcile` and `apply FILE`
/// on the command line; the service started again, its start run and the control plane's
/// declaration (which it asks for again if the crash came before it was in force).
fn recover(driver: &mut Driver, file: &Path, f: &mut Findings) {
    if driver.way == Way::Service {
        let record = driver.rerun();
        f.check(
            record["revision"] == driver.revision() && record["outcome"] == "converged",
            || format!("the service started again never converged: {record:#}"),
        );
        return;
    }
    let host = driver.host();
    let status = host.run(&["status", "--json"]);
    if [0, 6].contains(&status.code) && status.json()["in_force"].is_object() {
        let out = host.run(&["reconcile"]);
        f.check(out.code == 0, || {
            format!("the reconcile after the crash failed: {out:?}")
        });
    }
    let out = host.run(&["apply", file.to_str().expect("utf-8")]);
    f.check(out.code == 0, || {
        format!("the apply after the crash failed: {out:?}")
    });
}

/// After the next runs: every file of `want` as declared, the rest as it was, all in sync, no
/// temp file left.
fn check_converged(
    host: &Scratch,
    want: &BTreeMap<String, String>,
    initial: &BTreeMap<String, Option<Vec<u8>>>,
    f: &mut Findings,
) {
    for (path, content) in want {
        let got = std::fs::read(host.target(path)).ok();
        f.check(got.as_deref() == Some(content.as_bytes()), || {
            format!("{path} is not as declared after the next run")
        });
    }
    // What `want` no longer declares is back as it was.
    for (path, bytes) in tree(&host.root()) {
        if bytes.is_some() && !want.contains_key(&path) {
            f.check(initial.get(&path) == Some(&bytes), || {
                format!("{path} exists after the next run but is neither declared nor original")
            });
        }
    }
    if let Some(owned) = owned(host, f) {
        let wrong: Vec<_> = owned
            .iter()
            .filter(|(_, (_, state))| state != "in sync")
            .collect();
        f.check(wrong.is_empty(), || {
            format!("not in sync after the next run: {wrong:?}")
        });
    }
    for dir in [host.root(), host.state()] {
        let left = temp_files_left(&dir, f);
        f.check(left.is_empty(), || {
            format!("temp files survive the next run: {left:?}")
        });
    }
}

/// A release (an empty declaration, the same way) gives the root back byte for byte, modes and
/// directories too.
fn release(driver: &mut Driver, initial_snapshot: &[(PathBuf, Vec<u8>, u32)], f: &mut Findings) {
    let ran = driver.converge(r#"{"schema": 1}"#);
    let done = match &ran.output {
        Some(out) => out.code == 0,
        None => ran.record["outcome"] == "converged",
    };
    f.check(done, || {
        format!("the release failed: {:#} {:?}", ran.record, ran.output)
    });
    let host = driver.host();
    let now = snapshot(&host.root());
    if now != initial_snapshot {
        let before: BTreeSet<_> = initial_snapshot.iter().collect();
        let after: BTreeSet<_> = now.iter().collect();
        let show = |set: Vec<&&(PathBuf, Vec<u8>, u32)>| -> Vec<String> {
            set.iter()
                .take(8)
                .map(|(p, b, m)| format!("{} ({} bytes, mode {m:o})", p.display(), b.len()))
                .collect()
        };
        let gone = show(before.difference(&after).collect());
        let extra = show(after.difference(&before).collect());
        f.check(false, || {
            format!(
                "the release did not give the root back: missing or different {gone:?}; left over {extra:?}"
            )
        });
    }
    let owned = host.run(&["owned"]);
    f.check(owned.stdout.trim() == "mesh-host owns nothing", || {
        format!("the host still owns something after the release: {owned:?}")
    });
    let backups = std::fs::read_dir(host.state().join("backups"))
        .map(|d| d.count())
        .unwrap_or(0);
    f.check(backups == 0, || {
        format!("{backups} entries left in backups/ after the release")
    });
    let left = temp_files_left(&host.state(), f);
    f.check(left.is_empty(), || {
        format!("temp files left in the store: {left:?}")
    });
}

/// Starts converging `json` (`apply`, or the control plane's declaration to the service) and
/// SIGKILLs mesh-host after `delay`; true if it was killed before the run ended.
fn killed_after(driver: &mut Driver, json: &str, delay: Duration) -> bool {
    let child = driver.begin(json);
    std::thread::sleep(delay);
    match (child, driver.service()) {
        (Some(mut child), _) => {
            let finished = matches!(child.try_wait(), Ok(Some(_)));
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            !finished
        }
        (None, Some(service)) => {
            service.signal(libc::SIGKILL);
            assert!(
                wait_until(Duration::from_secs(10), || !service.alive()),
                "the service outlived SIGKILL"
            );
            let revision = driver.revision();
            !driver.runs().iter().any(|r| r["revision"] == revision)
        }
        (None, None) => unreachable!("a driver spawns apply or drives a service"),
    }
}

/// Under `apply` (50 iterations) and under the service (20: each starts a service and its
/// control plane), the kill landing in the run the declaration started.
#[test]
fn kill_9_anywhere_during_applies_loses_nothing() {
    let started = Instant::now();
    let seed = fault_seed(0x6d65_7368_2d63_7261);
    eprintln!("crash: seed {seed} (replay with MESH_FAULT_SEED={seed})");
    let mut rng = XorShift::new(seed);
    let a = files_a();
    let b = files_b();
    let none = BTreeMap::new();
    let json_a = declaration(&a);
    let json_b = declaration(&b);
    let mut times: Vec<Duration> = (0..3).map(|_| time_apply(&json_a)).collect();
    times.sort();
    let budget = times[1];
    eprintln!("crash: a complete apply of {FILES} files takes {budget:?}; kills fall in 0..that");

    let mut problems = Vec::new();
    for (way, iterations) in [(Way::Apply, ITERATIONS), (Way::Service, ITERATIONS * 2 / 5)] {
        // The machine is shared: an apply's length drifts with the load. The kills follow it, as
        // in the outbox test: a run that ended before its kill shortens the next budgets, one
        // killed lengthens them, so the kills keep falling inside the runs however long they take.
        let mut budget_us = budget.as_micros() as u64;
        let mut killed = 0;
        for iteration in 0..iterations {
            let phase = ["first apply", "change", "release"][rng.below(3) as usize];
            let delay = Duration::from_micros(rng.below(budget_us + 1));
            let host = prepared();
            let initial_snapshot = snapshot(&host.root());
            let initial = tree(&host.root());
            let file_a = host.declaration("a.json", &json_a);
            let file_b = host.declaration("b.json", &json_b);
            let file_empty = host.declaration("empty.json", r#"{"schema": 1}"#);
            let mut f = Findings {
                iteration,
                way,
                phase,
                problems: Vec::new(),
            };
            let (target, json, want, declared): (
                &Path,
                &str,
                &BTreeMap<_, _>,
                Vec<&BTreeMap<_, _>>,
            ) = match phase {
                "first apply" => (&file_a, &json_a, &a, vec![&a]),
                "change" => (&file_b, &json_b, &b, vec![&a, &b]),
                _ => (&file_empty, r#"{"schema": 1}"#, &none, vec![&a]),
            };
            let mut driver = Driver::start(way, host);
            if phase != "first apply" {
                let ran = driver.converge(&json_a);
                assert_eq!(
                    ran.record["outcome"], "converged",
                    "{way:?}: {:#}",
                    ran.record
                );
            }
            if killed_after(&mut driver, json, delay) {
                killed += 1;
                budget_us += budget_us / 10;
            } else {
                budget_us = (budget_us * 3 / 4).max(200);
            }
            check_after_crash(driver.host(), &initial, &declared, &mut f);
            recover(&mut driver, target, &mut f);
            check_converged(driver.host(), want, &initial, &mut f);
            release(&mut driver, &initial_snapshot, &mut f);
            if !f.problems.is_empty() {
                eprintln!(
                    "crash: {way:?} iteration {iteration} ({phase}, killed after {delay:?}) kept at {}",
                    driver.host().dir.display()
                );
                problems.append(&mut f.problems);
                if let Some(service) = driver.service() {
                    let _ = service.stop();
                }
                std::mem::forget(driver); // keep the scratch for inspection
            }
        }
        eprintln!(
            "crash: {way:?}: {iterations} iterations, {killed} killed mid-run, {:?} so far",
            started.elapsed()
        );
        assert!(
            killed >= iterations / 4,
            "{way:?}: only {killed} of {iterations} runs were killed mid-run: the delays miss them"
        );
    }
    assert!(
        problems.is_empty(),
        "seed {seed}: {} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ------------------------------------------------------------------------------------ outbox

const OUTBOX_ITERATIONS: usize = 40;

/// The reports in a host's outbox, by id, and the names of anything else in it.
fn outbox(host: &Scratch) -> (BTreeMap<u64, Value>, Vec<String>) {
    let mut reports = BTreeMap::new();
    let mut others = Vec::new();
    let Ok(entries) = std::fs::read_dir(host.state().join("outbox")) else {
        return (reports, others);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        match name
            .strip_suffix(".json")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(id) => {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let report = serde_json::from_str(&text).unwrap_or(Value::Null);
                reports.insert(id, report);
            }
            None if name == ".lock" => {}
            None => others.push(name),
        }
    }
    (reports, others)
}

/// kill -9 aimed at the window where a run's report goes into the outbox (the end of a run), many
/// times, both ways: every run the history recorded has its report delivered, under ids that
/// stay contiguous.
#[test]
fn kill_9_at_the_outbox_write_loses_no_report() {
    let seed = fault_seed(0x6f75_7462_6f78);
    eprintln!("outbox crash: seed {seed} (replay with MESH_FAULT_SEED={seed})");
    outbox_kills_under_apply(seed);
    outbox_kills_under_the_service(seed);
}

/// Whether the control plane received `run`'s report.
fn same_run(run: &Value, report: &Value) -> bool {
    run["started"] == report["started"]
        && run["ended"] == report["ended"]
        && run["outcome"] == report["outcome"]
        && run["digest"] == report["digest"]
}

/// Applies killed at their end, the control plane down (the reports queue); then a clean apply
/// and a service connecting to it. No temp file survives the next start.
fn outbox_kills_under_apply(seed: u64) {
    let mut rng = XorShift::new(seed);
    let pki = Pki::new();
    // A port for the control plane, which starts only at the end: until then applies queue.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let host = Scratch::new("outbox-crash");
    pki.write(&host.dir).expect("pki");
    std::fs::write(host.dir.join("secret"), "s3cret\n").expect("secret");
    let config = format!(
        r#"{{"control_plane": {{"address": "{address}", "server_name": "localhost", "ca_file": "{}", "node": "n1", "secret_file": "{}"}},
            "interval_secs": 600, "heartbeat_secs": 1}}"#,
        host.dir.join("ca.pem").display(),
        host.dir.join("secret").display()
    );
    std::fs::write(host.dir.join("config.json"), config).expect("config");
    let decl = |i: usize| {
        host.declaration(
            "d.json",
            &format!(
                r#"{{"schema": 1, "files": {{"/etc/outbox-crash": {{"content": "run {i}\n"}}}}}}"#
            ),
        )
    };
    // The fastest of five: a load spike while measuring must not push the kills past the applies.
    let budget = (0..5)
        .map(|i| {
            let file = decl(1000 + i);
            let started = Instant::now();
            host.apply(&file, 0);
            started.elapsed()
        })
        .min()
        .unwrap_or(Duration::from_millis(20));
    eprintln!("outbox crash: an apply takes {budget:?}; kills fall in its last half and after");

    // The machine is shared: an apply's length drifts with the load. The kills follow it: an
    // apply that ended before its kill shortens the next delays, one killed lengthens them, so
    // they stay around the end of an apply (where the report is written) however long that is.
    let mut budget_us = budget.as_micros() as u64;
    let mut killed = 0;
    let mut i = 0;
    while i < OUTBOX_ITERATIONS || (killed < OUTBOX_ITERATIONS / 8 && i < 4 * OUTBOX_ITERATIONS) {
        let half = budget_us / 2;
        let delay = Duration::from_micros(half + rng.below(half + half / 2));
        if apply_killed(&host, &decl(i), delay) {
            killed += 1;
            budget_us += budget_us / 10;
        } else {
            budget_us = (budget_us * 3 / 4).max(200);
        }
        let (reports, _) = outbox(&host);
        let ids: Vec<u64> = reports.keys().copied().collect();
        let want: Vec<u64> = (1..=ids.len() as u64).collect();
        assert_eq!(ids, want, "iteration {i}: ids not contiguous");
        i += 1;
    }
    let iterations = i;
    host.apply(&decl(iterations), 0);
    let (reports, others) = outbox(&host);
    assert!(others.is_empty(), "left in the outbox: {others:?}");
    let runs: Vec<Value> = std::fs::read_to_string(host.state().join("runs.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .expect("runs.json");
    eprintln!(
        "outbox crash: {iterations} applies, {killed} killed before they ended; {} runs \
         recorded, {} reports queued",
        runs.len(),
        reports.len()
    );
    assert!(
        killed >= OUTBOX_ITERATIONS / 8,
        "only {killed} killed: the delays miss the applies"
    );
    for run in &runs {
        assert!(
            reports.values().any(|r| same_run(run, r)),
            "a recorded run without its report: {run:#}"
        );
    }

    // Every queued report reaches the control plane, ids contiguous.
    let cp = ControlPlane::start(
        &pki,
        CpConfig {
            bind: Some(address),
            ..CpConfig::new("n1", "s3cret")
        },
    );
    let queued = reports.len();
    let service = Service::start(host);
    assert!(
        cp.wait_for(|r| r.len() > queued, Duration::from_secs(30)),
        "{} of {queued} reports arrived\n{}",
        cp.reports().len(),
        service.log()
    );
    let delivered = cp.reports();
    let mut ids: Vec<u64> = delivered.iter().filter_map(|r| r["id"].as_u64()).collect();
    ids.sort_unstable();
    let want: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, want, "delivered ids not contiguous");
    for run in &runs {
        assert!(
            delivered.iter().any(|r| same_run(run, r)),
            "a recorded run whose report never arrived: {run:#}"
        );
    }
}

/// The service linked to the control plane all along, killed after a declaration at about the
/// end of its run, and started again: the reports it had queued are sent, the rest made again.
fn outbox_kills_under_the_service(seed: u64) {
    let mut rng = XorShift::new(seed);
    let mut driver = Driver::start(Way::Service, Scratch::new("outbox-crash-run"));
    let decl = |i: usize| {
        format!(r#"{{"schema": 1, "files": {{"/etc/outbox-crash": {{"content": "run {i}\n"}}}}}}"#)
    };
    // Every recorded run's report arrived (once the restarted service has sent its outbox).
    let delivered = |driver: &Driver| {
        let reports = driver.control_plane().expect("control plane").reports();
        driver
            .runs()
            .iter()
            .all(|run| reports.iter().any(|r| same_run(run, r)))
    };
    // From the declaration to its run's record, the fastest of five.
    let budget = (0..5)
        .map(|i| {
            let started = Instant::now();
            driver.converge(&decl(1000 + i));
            started.elapsed()
        })
        .min()
        .unwrap_or(Duration::from_millis(20));
    eprintln!("outbox crash (run): a declaration's run takes {budget:?}");
    let mut budget_us = budget.as_micros() as u64;
    let mut killed = 0;
    let iterations = OUTBOX_ITERATIONS / 2;
    for i in 0..iterations {
        let half = budget_us / 2;
        let delay = Duration::from_micros(half + rng.below(half + half / 2));
        if killed_after(&mut driver, &decl(i), delay) {
            killed += 1;
            budget_us += budget_us / 10;
        } else {
            budget_us = (budget_us * 3 / 4).max(200);
        }
        if let Some(service) = driver.service() {
            service.restart(&[]);
        }
        assert!(
            wait_until(Duration::from_secs(30), || delivered(&driver)),
            "iteration {i}: a recorded run whose report never arrived: {:#?}",
            driver.runs()
        );
    }
    let reports = driver.control_plane().expect("control plane").reports();
    eprintln!(
        "outbox crash (run): {iterations} declarations, {killed} killed before their run was \
         recorded; {} runs recorded, {} reports delivered",
        driver.runs().len(),
        reports.len()
    );
    assert!(
        killed >= iterations / 8,
        "only {killed} killed: the delays miss the runs"
    );
    let mut ids: Vec<u64> = reports.iter().filter_map(|r| r["id"].as_u64()).collect();
    ids.sort_unstable();
    let want: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, want, "delivered ids not contiguous");
}
