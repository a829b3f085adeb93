//! What scripts read (issue 31): every command ends quietly with its own exit code when stdout
//! is a closed pipe, and exit 4 with a message when stdout is a full disk; a `--json` error is one
//! JSON document on stdout; exit codes name the outcome.

mod support;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use support::{Output, Scratch};

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
