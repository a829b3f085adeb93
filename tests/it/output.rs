//! What scripts read (issue 31): every command ends quietly with its own exit code when stdout
//! is a closed pipe, and exit 4 with a message when stdout is a full disk; a `--json` error is one
//! JSON document on stdout; exit codes name the outcome.

// System calls the test needs (Cargo.toml, [lints]): each block says why it holds.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use crate::support;
use crate::support::{Output, Scratch};

const DECLARATION: &str = r#"{"schema": 1, "files": {
    "/etc/a.conf": {"content": "a\n"}, "/etc/b.conf": {"content": "b\n"}}}"#;

/// The write end of a pipe whose read end is already closed: `cmd | head -c0` without the race.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made by pipe2 and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

/// Every command line to try, on a host that applied `DECLARATION` once: each reads or changes
/// the same state every time it runs, so each run's exit code is comparable. `keygen` writes a
/// new key each time (`{n}` in its path). `run` (the service) prints nothing on stdout.
fn every_command(host: &Scratch) -> Vec<Vec<String>> {
    let file = host.declaration("d.json", DECLARATION);
    let file = file.to_str().expect("utf-8 path").to_string();
    let key = host.dir.join("signing.pem");
    let key = key.to_str().expect("utf-8 path").to_string();
    assert_eq!(host.run(&["keygen", "--out", &key]).code, 0);
    let token = host.declaration("token", "t0k\n");
    let token = token.to_str().expect("utf-8 path").to_string();
    let keygen_out = host.dir.join("new-{n}.pem");
    let lines = [
        "--help".to_string(),
        "--version".into(),
        format!("check {file}"),
        format!("plan {file}"),
        "plan".into(),
        format!("apply {file}"),
        "reconcile".into(),
        "owned".into(),
        "status".into(),
        "show".into(),
        "confirm".into(),
        "rollback".into(),
        "reload".into(),
        format!("keygen --out {}", keygen_out.display()),
        format!("sign --key {key} {file}"),
        format!(
            "join --control-plane https://127.0.0.1:1 --token-file {token} --ca-hash sha256:{}",
            "0".repeat(64)
        ),
        "frobnicate".into(),
    ];
    lines
        .iter()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

/// Runs `line` (with `--json` when `json`) with stdout to `stdout`, or captured when None.
fn run(host: &Scratch, line: &[String], json: bool, n: usize, stdout: Option<Stdio>) -> Output {
    run_to(host, line, json, n, stdout, None)
}

/// `run`, with stderr to `stderr` too (captured when None).
fn run_to(
    host: &Scratch,
    line: &[String],
    json: bool,
    n: usize,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
) -> Output {
    let line: Vec<String> = line
        .iter()
        .map(|w| w.replace("{n}", &n.to_string()))
        .collect();
    let mut args: Vec<&str> = line.iter().map(String::as_str).collect();
    if json {
        args.push("--json");
    }
    let mut command = host.command(&args);
    if let Some(stdout) = stdout {
        command.stdout(stdout);
    }
    if let Some(stderr) = stderr {
        command.stderr(stderr);
    }
    Output::from(command.output().expect("run mesh-host"))
}

#[test]
fn every_command_into_a_closed_pipe_keeps_its_exit_code_and_a_full_disk_is_exit_4() {
    let host = Scratch::new("output-pipes");
    let file = host.declaration("d.json", DECLARATION);
    host.apply(&file, 0);
    let mut n = 0;
    for line in every_command(&host) {
        for json in [false, true] {
            n += 1;
            let shown = format!("{} (json: {json})", line.join(" "));
            let base = run(&host, &line, json, n, None);
            assert!(!base.stderr.contains("panicked"), "{shown}: {base:?}");
            n += 1;
            let piped = run(&host, &line, json, n, Some(closed_pipe()));
            assert_eq!(
                piped.code, base.code,
                "{shown} into a closed pipe: {piped:?}"
            );
            assert!(!piped.stderr.contains("panicked"), "{shown}: {piped:?}");
            assert!(
                !piped.stderr.contains("standard output"),
                "{shown}: a closed pipe is no error: {piped:?}"
            );
            n += 1;
            let full = run(&host, &line, json, n, Some(dev_full()));
            assert!(!full.stderr.contains("panicked"), "{shown}: {full:?}");
            if base.stdout.is_empty() {
                assert_eq!(full.code, base.code, "{shown} on /dev/full: {full:?}");
            } else {
                assert_eq!(full.code, 4, "{shown} on /dev/full: {full:?}");
                full.assert_stderr(
                    "mesh-host: cannot write to standard output: No space left on device",
                );
            }
        }
    }
}

/// `mesh-host ... 2>&1 | head -1`: what a command says on stderr (errors, warnings, progress) is
/// lost when stderr closes, never its exit code (a panic would exit 101).
#[test]
fn every_command_with_stderr_into_a_closed_pipe_keeps_its_exit_code() {
    let host = Scratch::new("output-stderr");
    let file = host.declaration("d.json", DECLARATION);
    host.apply(&file, 0);
    let mut n = 0;
    for line in every_command(&host) {
        for json in [false, true] {
            n += 1;
            let base = run(&host, &line, json, n, None);
            n += 1;
            let closed = run_to(&host, &line, json, n, None, Some(closed_pipe()));
            assert_eq!(
                closed.code,
                base.code,
                "{} (json: {json}) with stderr closed: {closed:?}",
                line.join(" ")
            );
        }
    }
}

#[test]
fn an_error_with_json_is_one_document_on_stdout_and_prose_on_stderr() {
    let host = Scratch::new("output-json-errors");
    for (args, kind, code) in [
        (&["plan", "/nonexistent.json", "--json"][..], "invalid", 2),
        (&["--json", "status", "--bogus"], "usage", 2),
        (&["--json", "confirm"], "invalid", 2),
    ] {
        let out = host.run(args);
        assert_eq!(out.code, code, "{args:?}: {out:?}");
        let json = out.json();
        assert_eq!(json["version"], 1, "{out:?}");
        assert_eq!(json["error"]["kind"], kind, "{out:?}");
        assert_eq!(json["error"]["exit_code"], code, "{out:?}");
        let message = json["error"]["message"].as_str().expect("a message");
        out.assert_stderr(&format!("mesh-host: {message}"));
    }
}

#[test]
fn plan_and_owned_with_detailed_exitcode_exit_5_on_changes_and_drift() {
    let host = Scratch::new("output-exit-codes");
    let file = host.declaration("d.json", DECLARATION);
    let file = file.to_str().expect("utf-8 path");
    // Without the flag, a plan that succeeds exits 0 however much it would change.
    assert_eq!(host.run(&["plan", file]).code, 0);
    let plan = host.run(&["plan", "--detailed-exitcode", file]);
    assert_eq!(plan.code, 5, "{plan:?}");
    plan.assert_stdout("2 would change");
    assert_eq!(host.run(&["apply", file]).code, 0);
    assert_eq!(host.run(&["plan", "--detailed-exitcode", file]).code, 0);
    assert_eq!(host.run(&["owned", "--detailed-exitcode"]).code, 0);
    std::fs::remove_file(host.target("/etc/a.conf")).expect("remove");
    let owned = host.run(&["owned", "--detailed-exitcode"]);
    assert_eq!(owned.code, 5, "{owned:?}");
    assert_eq!(host.run(&["owned"]).code, 0);
    let refused = host.run(&["status", "--detailed-exitcode"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    refused.assert_stderr("--detailed-exitcode is only for plan and owned");
}

#[test]
fn status_has_a_headline_and_exits_6_when_resources_fail() {
    let host = Scratch::new("output-degraded");
    let file = host.declaration("d.json", DECLARATION);
    assert_eq!(host.apply(&file, 0).code, 0);
    let status = host.run(&["status"]);
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(status.stdout.lines().next(), Some("healthy"), "{status:?}");
    // The digest is a prefix in text; whole in JSON.
    let json = host.run(&["status", "--json"]).json();
    let digest = json["in_force"]["digest"].as_str().expect("a digest");
    assert_eq!(digest.len(), 64);
    assert!(!status.stdout.contains(digest), "{status:?}");
    status.assert_stdout(&format!("sha256 {},", &digest[..12]));
    // A directory where a file is declared: the file fails, run after run.
    std::fs::remove_file(host.target("/etc/a.conf")).expect("remove");
    std::fs::create_dir(host.target("/etc/a.conf")).expect("mkdir");
    assert_eq!(host.run(&["reconcile"]).code, 1);
    let status = host.run(&["status"]);
    assert_eq!(status.code, 6, "{status:?}");
    assert_eq!(
        status.stdout.lines().next(),
        Some("degraded: 1 resource failing"),
        "{status:?}"
    );
    let json = host.run(&["status", "--json"]);
    assert_eq!(json.code, 6, "{json:?}");
    assert_eq!(json.json()["health"]["state"], "degraded", "{json:?}");
}

#[test]
fn show_prints_the_declaration_in_force_and_plan_without_a_file_plans_it() {
    let host = Scratch::new("output-show");
    let none = host.run(&["show"]);
    assert_eq!(none.code, 2, "{none:?}");
    none.assert_stderr("no declaration in force");
    let file = host.declaration("d.json", DECLARATION);
    host.apply(&file, 0);
    let shown = host.run(&["show"]);
    assert_eq!((shown.code, shown.stdout.as_str()), (0, DECLARATION));
    let json = host.run(&["show", "--json"]).json();
    assert_eq!(json["version"], 1);
    assert_eq!(
        json["declaration"]["files"]["/etc/a.conf"]["content"],
        "a\n"
    );
    // What `reconcile` would do now: put back what was removed.
    std::fs::remove_file(host.target("/etc/a.conf")).expect("remove");
    let plan = host.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(plan.code, 5, "{plan:?}");
    plan.assert_stdout("+ files /etc/a.conf");
    plan.assert_stdout("1 would change, 1 in sync");
    // The store's record is not a declaration: said, with what to run instead.
    let record = host.state().join("declaration.json");
    let out = host.run(&["plan", record.to_str().expect("utf-8 path")]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("`mesh-host plan` with no FILE plans it");
}

#[test]
fn a_root_that_does_not_exist_is_refused_before_anything_is_made() {
    let host = Scratch::new("output-no-root");
    let file = host.declaration("d.json", DECLARATION);
    let missing = host.dir.join("no-such-root");
    let out = support::mesh_host()
        .arg("--state-dir")
        .arg(host.state())
        .arg("--config")
        .arg(host.dir.join("config.json"))
        .arg("--root")
        .arg(&missing)
        .arg("apply")
        .arg(&file)
        .output()
        .expect("run mesh-host");
    let out = Output::from(out);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr(&format!(
        "--root {}: No such file or directory",
        missing.display()
    ));
    assert!(!host.state().exists(), "a store was made: {out:?}");
    assert!(!missing.exists(), "the root was made: {out:?}");
}

/// Issue 32, item 3: `apply --confirm 18446744073709551615` wrapped the deadline into the past
/// (reverted at once) or panicked; it is refused naming the value and the maximum.
#[test]
fn issue32_apply_confirm_u64_max_is_refused_naming_the_value_and_the_maximum() {
    let host = Scratch::new("output-confirm");
    let file = host.declaration("d.json", DECLARATION);
    let file = file.to_str().expect("utf-8 path");
    for (value, want) in [
        (
            "18446744073709551615",
            r#"--confirm: "18446744073709551615" is more than the maximum of 7 days (604800 s)"#,
        ),
        (file, &format!("--confirm: {file:?} is not a duration")),
    ] {
        let out = host.run(&["apply", "--confirm", value, file]);
        assert_eq!(out.code, 2, "{out:?}");
        out.assert_stderr(want);
        assert!(!host.state().exists(), "a store was made: {out:?}");
    }
    let out = host.run(&["apply", "--confirm", "5m", file]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stderr(" UTC (in 5 min) unless `mesh-host confirm` runs first");
}
