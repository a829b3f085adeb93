//! The core end to end with files: the real binary against scratch roots (`--root`), no sandbox
//! needed. Each test is one behaviour a person relies on.

// System calls the test needs (Cargo.toml, [lints]): each block says why it holds.
#![allow(unsafe_code)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::support;
use crate::support::{snapshot, Scratch};

/// A host that applied the one file `/etc/a` ("a"), and that declaration.
fn applied_one_file(label: &str) -> (Scratch, std::path::PathBuf) {
    let host = Scratch::new(label);
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}}}"#,
    );
    host.apply(&file, 0);
    (host, file)
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn apply_creates_then_changes_nothing_and_says_so() {
    let host = Scratch::new("create");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "revision": 7, "files": {
            "/etc/app/app.conf": {"content": "port = 80\n", "mode": "0640"},
            "/etc/blob.bin": {"content_base64": "AAEC/w=="}}}"#,
    );
    let out = host.apply(&file, 0);
    out.assert_stdout("+ files /etc/app/app.conf");
    assert_eq!(
        std::fs::read(host.target("/etc/app/app.conf")).unwrap(),
        b"port = 80\n"
    );
    assert_eq!(mode(&host.target("/etc/app/app.conf")), 0o640);
    assert_eq!(
        std::fs::read(host.target("/etc/blob.bin")).unwrap(),
        [0, 1, 2, 255]
    );
    assert_eq!(mode(&host.target("/etc/blob.bin")), 0o644);

    let again = host.apply(&file, 0);
    again.assert_stdout("0 changed, 2 in sync");
    let status = host.run(&["status"]);
    status.assert_stdout("revision 7, from local file");
    status.assert_stdout("apply converged (0 changed");
    let owned = host.run(&["owned", "--json"]).json();
    let states: Vec<&str> = owned["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["in sync", "in sync"]);
}

#[test]
fn drift_is_seen_by_owned_and_repaired() {
    let host = Scratch::new("drift");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "hello\n", "mode": "0644"}}}"#,
    );
    host.apply(&file, 0);
    let target = host.target("/etc/motd");
    std::fs::write(&target, "edited by hand\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let owned = host.run(&["owned"]);
    owned.assert_stdout("drifted: content (15 -> 6 bytes), mode 0600 -> 0644");
    let out = host.run(&["reconcile"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("~ files /etc/motd");
    assert_eq!(std::fs::read(&target).unwrap(), b"hello\n");
    assert_eq!(mode(&target), 0o644);
    // chmod alone is drift too, repaired without rewriting the content.
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = host.apply(&file, 0);
    out.assert_stdout("mode 0666 -> 0644");
    assert_eq!(mode(&target), 0o644);
}

#[test]
fn an_edit_that_keeps_size_and_mtime_is_still_drift() {
    let host = Scratch::new("index-drift");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "hello\n"}}}"#,
    );
    host.apply(&file, 0);
    let target = host.target("/etc/motd");
    // The files index keeps a stamp only once the file clock is past the file's last change
    // (git's "racy" case): wait for that on the real clock, as it is the kernel's ctime that
    // is tested here.
    let written = std::fs::symlink_metadata(&target).expect("written");
    let changed_ns = written.ctime() as i128 * 1_000_000_000 + written.ctime_nsec() as i128;
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128
        <= changed_ns + 100_000_000
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    host.apply(&file, 0).assert_stdout("0 changed, 1 in sync");
    let index = std::fs::read(host.state().join("files-index")).expect("the index is kept");
    assert!(index.windows(9).any(|w| w == b"/etc/motd"), "{index:?}");

    // Same size, and the mtime put back as `touch -r` would: only the ctime tells.
    std::fs::write(&target, "HELLO\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&target)
        .unwrap()
        .set_modified(written.modified().unwrap())
        .unwrap();
    let edited = std::fs::symlink_metadata(&target).unwrap();
    assert_eq!(
        (edited.len(), edited.mtime(), edited.mtime_nsec()),
        (written.len(), written.mtime(), written.mtime_nsec())
    );
    host.run(&["owned"])
        .assert_stdout("drifted: content (6 -> 6 bytes)");
    let out = host.apply(&file, 0);
    out.assert_stdout("~ files /etc/motd");
    assert_eq!(std::fs::read(&target).unwrap(), b"hello\n");
}

#[test]
fn release_removes_created_files_and_restores_adopted_ones_byte_for_byte() {
    let host = Scratch::new("release");
    let adopted = host.target("/etc/hosts.allow");
    let original: Vec<u8> = (0..=255u8).chain(b"original\n".iter().copied()).collect();
    std::fs::write(&adopted, &original).unwrap();
    std::fs::set_permissions(&adopted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let declared = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {
            "/etc/hosts.allow": {"content": "ALL: LOCAL\n", "mode": "0644"},
            "/etc/new/deep/app.conf": {"content": "x\n"}}}"#,
    );
    host.apply(&declared, 0);
    assert_eq!(std::fs::read(&adopted).unwrap(), b"ALL: LOCAL\n");
    let owned = host.run(&["owned"]);
    owned.assert_stdout("adopted");

    let empty = host.declaration("empty.json", r#"{"schema": 1}"#);
    let out = host.apply(&empty, 0);
    out.assert_stdout("- files /etc/new/deep/app.conf: released; mesh-host created it");
    out.assert_stdout("~ files /etc/hosts.allow: released; original restored");
    assert_eq!(std::fs::read(&adopted).unwrap(), original);
    assert_eq!(mode(&adopted), 0o600);
    assert!(
        !host.target("/etc/new").exists(),
        "directories the host created are removed once empty"
    );
    assert!(
        host.target("/etc").exists(),
        "directories the host did not create stay"
    );
    assert_eq!(host.run(&["owned"]).stdout.trim(), "mesh-host owns nothing");
    let backups = std::fs::read_dir(host.state().join("backups"))
        .unwrap()
        .count();
    assert_eq!(backups, 0, "the original's backup is dropped once restored");
}

#[test]
fn pruning_never_touches_what_the_ledger_does_not_list() {
    let host = Scratch::new("prune");
    std::fs::create_dir_all(host.target("/etc/app")).unwrap();
    std::fs::write(host.target("/etc/app/mine.conf"), "hand made").unwrap();
    let one = host.declaration(
        "one.json",
        r#"{"schema": 1, "files": {"/etc/app/a.conf": {"content": "a"}}}"#,
    );
    host.apply(&one, 0);
    let empty = host.declaration("empty.json", r#"{"schema": 1}"#);
    host.apply(&empty, 0);
    assert_eq!(
        std::fs::read(host.target("/etc/app/mine.conf")).unwrap(),
        b"hand made"
    );
    assert!(!host.target("/etc/app/a.conf").exists());
    assert!(host.target("/etc/app").is_dir());
}

#[test]
fn absent_removes_a_file_the_host_does_not_own() {
    let host = Scratch::new("absent");
    std::fs::write(host.target("/etc/old.conf"), "old").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/old.conf": {"state": "absent"}}}"#,
    );
    let out = host.apply(&file, 0);
    out.assert_stdout("- files /etc/old.conf: declared absent");
    assert!(!host.target("/etc/old.conf").exists());
    let status = host.run(&["status", "--json"]).json();
    let run = &status["runs"][0];
    assert_eq!(run["changes"][0]["key"], "/etc/old.conf");
    assert_eq!(run["changes"][0]["action"], "remove");
}

#[test]
fn an_invalid_declaration_changes_nothing_at_all() {
    let (host, _) = applied_one_file("invalid");
    let before = (snapshot(&host.root()), snapshot(&host.state()));
    let bad = host.declaration(
        "bad.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "changed"}, "/etc/b": {"content": "b", "mode": "0999"},
            "/etc/c": {"content": "c", "ownr": "root"}}}"#,
    );
    let out = host.apply(&bad, 2);
    out.assert_stderr("2 problems; nothing was applied");
    out.assert_stderr(r#"files["/etc/b"].mode: "0999" is not an octal mode"#);
    out.assert_stderr(r#"files["/etc/c"]: unknown field "ownr""#);
    assert_eq!((snapshot(&host.root()), snapshot(&host.state())), before);
    // Not JSON at all, and over the size limit: the same.
    let garbage = host.declaration("garbage.json", "{\"schema\": 1,");
    assert!(host.apply(&garbage, 2).stderr.contains("not valid JSON"));
    assert_eq!((snapshot(&host.root()), snapshot(&host.state())), before);
}

#[test]
fn the_hosts_own_files_are_refused_and_nothing_is_applied() {
    let host = Scratch::new("self");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/ok.conf": {"content": "fine"},
            "/etc/mesh-host/config.json": {"content": "{}"}}}"#,
    );
    let out = host.apply(&file, 2);
    out.assert_stderr("refused: /etc/mesh-host is the host's own configuration");
    assert!(!host.target("/etc/ok.conf").exists());
    assert!(
        !host.state().exists(),
        "a refused declaration does not even create the store"
    );
}

#[test]
fn a_symlinked_parent_is_refused_and_never_followed() {
    let host = Scratch::new("symlink");
    let outside = host.dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, host.target("/etc/app")).unwrap();
    std::os::unix::fs::symlink(&outside, host.target("/etc/link.conf")).unwrap();
    std::fs::create_dir_all(host.target("/etc/dir.conf")).unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/app/conf": {"content": "x"}, "/etc/link.conf": {"content": "x"},
            "/etc/dir.conf": {"content": "x"}, "/etc/fine.conf": {"content": "x"}}}"#,
    );
    let out = host.apply(&file, 1);
    out.assert_stdout("/etc/app is a symlink; mesh-host never follows symlinks");
    out.assert_stdout("/etc/link.conf is a symlink; mesh-host does not replace it");
    out.assert_stdout("/etc/dir.conf is a directory; mesh-host does not replace it");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written through the symlink"
    );
    assert!(host.target("/etc/dir.conf").is_dir());
    assert_eq!(
        std::fs::read(host.target("/etc/fine.conf")).unwrap(),
        b"x",
        "the others still converge"
    );
}

#[test]
#[ignore = "needs root (chown): run ./tests/run.sh as root"]
fn owners_resolve_against_the_target_roots_own_accounts() {
    support::require_root("it chowns files to the declared owners");
    let host = Scratch::new("owners");
    std::fs::write(
        host.target("/etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nweb:x:4321:4321::/srv:/usr/bin/nologin\n",
    )
    .unwrap();
    std::fs::write(host.target("/etc/group"), "root:x:0:\nweb:x:4322:\n").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/web.conf": {"content": "w", "owner": "web", "group": "web"},
            "/etc/num.conf": {"content": "n", "owner": "77", "group": "78"},
            "/etc/bad.conf": {"content": "b", "owner": "nobody-here"}}}"#,
    );
    let out = host.apply(&file, 1);
    out.assert_stdout(r#"owner: user "nobody-here" does not exist in the target's /etc/passwd"#);
    let meta = std::fs::metadata(host.target("/etc/web.conf")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4321, 4322));
    let meta = std::fs::metadata(host.target("/etc/num.conf")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (77, 78));
    assert!(!host.target("/etc/bad.conf").exists());
}

#[test]
fn under_root_links_in_the_mounted_disk_never_lead_onto_the_rescue_system() {
    let host = Scratch::new("rescue-links");
    // The rescue system's own tables and unit directory, outside the mounted root.
    let rescue = host.dir.join("rescue");
    std::fs::create_dir_all(rescue.join("systemd")).unwrap();
    std::fs::write(rescue.join("passwd"), "rescue:x:4242:4242::/:/bin/sh\n").unwrap();
    std::os::unix::fs::symlink(rescue.join("passwd"), host.target("/etc/passwd")).unwrap();
    std::os::unix::fs::symlink(rescue.join("systemd"), host.target("/etc/systemd")).unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1,
            "files": {"/etc/app.conf": {"content": "x", "owner": "rescue"},
                      "/etc/plain.conf": {"content": "y"}},
            "units": {"app.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
    );
    let out = host.apply(&file, 1);
    assert!(
        out.stdout.contains("/etc/passwd cannot be read")
            && out
                .stdout
                .contains("is a symlink; mesh-host never follows symlinks"),
        "{out:?}"
    );
    assert!(
        out.stdout.contains("! units app.service")
            && out.stdout.contains("/etc/systemd is a symlink"),
        "{out:?}"
    );
    // Nothing was written onto the rescue system; the file that needed neither converged.
    assert_eq!(
        std::fs::read_dir(rescue.join("systemd")).unwrap().count(),
        0
    );
    assert!(!host.target("/etc/app.conf").exists());
    assert_eq!(std::fs::read(host.target("/etc/plain.conf")).unwrap(), b"y");
}

#[test]
fn a_second_apply_while_the_lock_is_held_exits_3_at_once() {
    use std::os::fd::AsRawFd;
    let (host, file) = applied_one_file("lock");
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(host.state().join("lock"))
        .unwrap();
    std::fs::write(host.state().join("lock"), "pid 1 (test) since unix time 0").unwrap();
    assert_eq!(
        // SAFETY: flock takes no pointer; the descriptor is `lock`'s, open for the call.
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let out = host.apply(&file, 3);
    out.assert_stderr("another reconcile holds the lock (pid 1 (test) since unix time 0)");
    drop(lock);
    host.apply(&file, 0);
}

#[test]
fn check_and_plan_change_nothing() {
    let host = Scratch::new("plan");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}}}"#,
    );
    let out = host.run(&["check", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("valid (1 resources");
    let out = host.run(&["plan", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("+ files /etc/a: 1 bytes, mode 0644");
    out.assert_stdout("1 would change");
    assert!(!host.target("/etc/a").exists());
    assert!(!host.state().exists());
    let bad = host.declaration(
        "bad.json",
        r#"{"schema": 1, "files": {"/root/x": {"content": "a"}}}"#,
    );
    let out = host.run(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr(r#"files["/root/x"]: path is not under /etc"#);
}

#[test]
fn an_unreadable_store_is_reported_and_left_alone() {
    let (host, file) = applied_one_file("corrupt");
    std::fs::write(host.state().join("ledger.json"), "{ torn").unwrap();
    let out = host.apply(&file, 4);
    out.assert_stderr("ledger.json: cannot be read");
    assert_eq!(
        std::fs::read(host.state().join("ledger.json")).unwrap(),
        b"{ torn"
    );
}

#[test]
fn usage_errors_exit_2_with_help_pointer() {
    let host = Scratch::new("usage");
    let out = host.run(&["frobnicate"]);
    assert_eq!(out.code, 2);
    out.assert_stderr("unknown command \"frobnicate\"");
    let out = host.run(&["--help"]);
    assert_eq!(out.code, 0);
    out.assert_stdout("Exit codes");
}

/// Issue 26: `--json=false` turned JSON on. An option without a value takes none.
#[test]
fn json_false_is_refused_not_read_as_json() {
    let host = Scratch::new("json-false");
    let out = host.run(&["--json=false", "status"]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr(
        "mesh-host: --json takes no value (given \"false\")\nTry `mesh-host --help`.",
    );
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// Issue 26: an argument that is not UTF-8 panicked. A path is bytes on Linux, so it works as
/// one; where text is needed, the error names the option.
#[test]
fn arguments_that_are_not_utf8_are_paths_or_named_errors() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let host = Scratch::new("non-utf8");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}}}"#,
    );
    let renamed = file.with_file_name(OsStr::from_bytes(b"d\xff.json"));
    std::fs::rename(&file, &renamed).unwrap();
    let out = support::Output::from(host.command(&["apply"]).arg(&renamed).output().unwrap());
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read(host.target("/etc/a")).unwrap(), b"a");
    let out = support::Output::from(
        host.command(&["join", "--token"])
            .arg(OsStr::from_bytes(b"t\xff"))
            .output()
            .unwrap(),
    );
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("mesh-host: --token: \"t\\xFF\" is not UTF-8\n");
}

/// Issue 26: a relative `--state-dir` was refused as the default config file's `state_dir`, a
/// file that did not exist and a key nobody wrote. The error names where the value came from.
#[test]
fn a_relative_state_dir_is_refused_naming_where_it_came_from() {
    let host = Scratch::with_config("relative-state", r#"{"state_dir": "state"}"#);
    let out = host.run(&["--state-dir", "state", "status"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        "mesh-host: --state-dir: state is not an absolute path\nTry `mesh-host --help`.\n"
    );
    let config = host.dir.join("config.json");
    let out = support::Output::from(
        support::mesh_host()
            .arg("--config")
            .arg(&config)
            .arg("status")
            .output()
            .unwrap(),
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "mesh-host: config {}: state_dir: state is not an absolute path\n",
            config.display()
        )
    );
}

#[test]
fn directories_the_host_creates_are_0755_whatever_the_umask() {
    let host = Scratch::new("umask");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1,
            "files": {"/etc/app/conf.d/app.conf": {"content": "x\n", "mode": "0640"}},
            "units": {"app.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
    );
    let out = host.run_with_umask(Some(0o077), &["apply", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    for dir in [
        "/etc/app",
        "/etc/app/conf.d",
        "/etc/systemd",
        "/etc/systemd/system",
    ] {
        assert_eq!(mode(&host.target(dir)), 0o755, "{dir}: {out:?}");
    }
    assert_eq!(mode(&host.target("/etc/app/conf.d/app.conf")), 0o640);
    assert_eq!(mode(&host.target("/etc/systemd/system/app.service")), 0o644);
}

#[test]
fn a_store_left_readable_is_made_0700_again_with_a_warning() {
    let (host, file) = applied_one_file("store-mode");
    assert_eq!(mode(&host.state()), 0o700);
    std::fs::set_permissions(host.state(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = host.apply(&file, 0);
    out.assert_stderr("had mode 0755; set to 0700");
    assert_eq!(mode(&host.state()), 0o700);
    let out = host.apply(&file, 0);
    assert!(
        !out.stderr.contains("set to 0700"),
        "once fixed, quiet: {out:?}"
    );
}

#[test]
fn a_corrupt_run_history_is_set_aside_and_the_run_still_recorded() {
    let (host, _) = applied_one_file("runs-corrupt");
    std::fs::write(host.state().join("runs.json"), "[{ torn").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "b"}}}"#,
    );
    // The run changes the machine: it exits 0 and is recorded, never exit 4 with no record.
    let out = host.apply(&file, 0);
    out.assert_stderr("runs.json was unreadable");
    assert_eq!(std::fs::read(host.target("/etc/a")).unwrap(), b"b");
    let aside: Vec<String> = std::fs::read_dir(host.state())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n.starts_with("runs.json.unreadable-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(out.stderr.contains(&aside[0]), "named: {out:?}");
    assert_eq!(
        std::fs::read(host.state().join(&aside[0])).unwrap(),
        b"[{ torn"
    );
    let status = host.run(&["status", "--json"]).json();
    let runs = status["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "{status:#}");
}

/// More files than a run applies at once (files are applied 2,048 at a time): every chunk is
/// written ahead, applied and recorded, a file that fails in the first chunk fails only itself,
/// an adopted file in a later chunk keeps its original, and the release crosses chunks too,
/// removing the directories the host made.
#[test]
fn a_converge_of_several_chunks_owns_and_releases_every_file() {
    const N: usize = 9000;
    let host = Scratch::new("chunks");
    std::fs::write(host.target("/etc/a-blocker"), "a file, not a directory").unwrap();
    std::fs::create_dir_all(host.target("/etc/zz")).unwrap();
    std::fs::write(host.target("/etc/zz/adopted.conf"), "original").unwrap();
    let path = |i: usize| format!("/etc/many/d{}/f{i:05}.conf", i / 500);
    let mut files = serde_json::Map::new();
    for i in 0..N {
        files.insert(
            path(i),
            serde_json::json!({"content": format!("file {i}\n")}),
        );
    }
    files.insert(
        "/etc/a-blocker/x.conf".into(),
        serde_json::json!({"content": "x"}),
    );
    files.insert(
        "/etc/zz/adopted.conf".into(),
        serde_json::json!({"content": "declared"}),
    );
    let text = serde_json::json!({"schema": 1, "files": files}).to_string();
    let file = host.declaration("d.json", &text);
    let out = host.apply(&file, 1);
    out.assert_stdout(&format!(
        "{} changed, 0 in sync, 0 adopted, 0 deferred, 1 failed",
        N + 1
    ));
    out.assert_stdout("! files /etc/a-blocker/x.conf");
    for i in [0, 2047, 2048, 4096, N - 1] {
        let content = std::fs::read_to_string(host.target(&path(i))).unwrap();
        assert_eq!(content, format!("file {i}\n"));
    }
    let owned = host.run(&["owned", "--json"]).json();
    let owned = owned["owned"].as_array().unwrap();
    assert_eq!(
        owned.len(),
        N + 1,
        "every written file is owned, the failed one is not"
    );
    assert!(owned.iter().all(|row| row["state"] == "in sync"));

    let again = host.apply(&file, 1);
    again.assert_stdout(&format!("0 changed, {} in sync", N + 1));

    let empty = host.declaration("empty.json", r#"{"schema": 1}"#);
    let released = host.apply(&empty, 0);
    released.assert_stdout(&format!("{} changed", N + 1));
    assert!(
        !host.target("/etc/many").exists(),
        "the directories it made are gone"
    );
    assert_eq!(
        std::fs::read(host.target("/etc/zz/adopted.conf")).unwrap(),
        b"original"
    );
    assert_eq!(host.run(&["owned"]).stdout.trim(), "mesh-host owns nothing");
}

/// A host holding `/etc/app.conf` (nine lines, `port = 80` the fifth) as declared, and the
/// declaration changing that line.
fn applied_config(label: &str) -> (Scratch, std::path::PathBuf) {
    let host = Scratch::new(label);
    let lines = |port: &str| format!("1\\n2\\n3\\n4\\nport = {port}\\n6\\n7\\n8\\n9\\n");
    let declare = |name: &str, port: &str| {
        host.declaration(
            name,
            &format!(
                r#"{{"schema": 1, "files": {{"/etc/app.conf": {{"content": "{}"}}}}}}"#,
                lines(port)
            ),
        )
    };
    host.apply(&declare("d.json", "80"), 0);
    let changed = declare("changed.json", "8080");
    (host, changed)
}

const CHANGED_LINE: &str = "\
~ files /etc/app.conf: content (26 -> 28 bytes)
--- files /etc/app.conf (on the machine)
+++ files /etc/app.conf (declared)
@@ -2,7 +2,7 @@
 2
 3
 4
-port = 80
+port = 8080
 6
 7
 8
";

#[test]
fn plan_and_apply_show_the_changed_line_as_diff_u_does() {
    let (host, changed) = applied_config("diff-line");
    let plan = host.run(&["plan", changed.to_str().unwrap()]);
    plan.assert_stdout(CHANGED_LINE);
    // The same hunk GNU diff makes of the two contents.
    let apply = host.apply(&changed, 0);
    apply.assert_stdout(CHANGED_LINE);
    // Drift by hand: `owned` shows it, from the machine's side to the declared.
    let target = host.target("/etc/app.conf");
    let text = std::fs::read_to_string(&target).unwrap();
    std::fs::write(&target, text.replace("port = 8080", "port = 9")).unwrap();
    let owned = host.run(&["owned"]);
    owned.assert_stdout("-port = 9\n+port = 8080\n");
}

#[test]
fn an_added_file_is_all_plus_and_a_released_one_shows_what_goes_back() {
    let host = Scratch::new("diff-add-release");
    std::fs::write(host.target("/etc/adopted.conf"), "original\n").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/new.conf": {"content": "a\nb"},
            "/etc/adopted.conf": {"content": "ours\n"}}}"#,
    );
    let plan = host.run(&["plan", file.to_str().unwrap()]);
    plan.assert_stdout(
        "--- files /etc/new.conf (absent)\n+++ files /etc/new.conf (declared)\n\
         @@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n",
    );
    plan.assert_stdout("@@ -1 +1 @@\n-original\n+ours\n");
    host.apply(&file, 0);
    // Released: the created file is removed, the adopted one gets its original back.
    let empty = host.declaration("empty.json", r#"{"schema": 1}"#);
    let plan = host.run(&["plan", empty.to_str().unwrap()]);
    plan.assert_stdout(
        "--- files /etc/adopted.conf (on the machine)\n+++ files /etc/adopted.conf (original)\n\
         @@ -1 +1 @@\n-ours\n+original\n",
    );
    plan.assert_stdout(
        "--- files /etc/new.conf (on the machine)\n+++ files /etc/new.conf (absent)\n\
         @@ -1,2 +0,0 @@\n-a\n-b\n",
    );
}

#[test]
fn binary_content_is_summarised_never_dumped() {
    let host = Scratch::new("diff-binary");
    std::fs::write(host.target("/etc/blob.bin"), b"secret\0bytes").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/blob.bin": {"content_base64": "AAEC/w=="}}}"#,
    );
    let plan = host.run(&["plan", file.to_str().unwrap()]);
    plan.assert_stdout(
        "~ files /etc/blob.bin: content (12 -> 4 bytes)\n    binary content not shown: \
         on the machine, 12 bytes, \
         sha256 b98e5c0294b8fb2f37e9845ca440a7a2645fc4cea3dfa8e82acd86e156139c29 -> \
         declared, 4 bytes, \
         sha256 3d1f57c984978ef98a18378c8166c1cb8ede02c03eeb6aee7e2f121dfeee3e56\n",
    );
    assert!(!plan.stdout.contains("secret"), "{plan:?}");
}

#[test]
fn a_large_diff_is_capped_and_says_how_many_lines_were_left_out() {
    let host = Scratch::new("diff-cap");
    let content: String = (0..1000).map(|i| format!("line {i}\\n")).collect();
    let file = host.declaration(
        "d.json",
        &format!(r#"{{"schema": 1, "files": {{"/etc/big.conf": {{"content": "{content}"}}}}}}"#),
    );
    let plan = host.run(&["plan", file.to_str().unwrap()]);
    plan.assert_stdout("@@ -0,0 +1,1000 @@\n+line 0\n");
    plan.assert_stdout("+line 199\n    (800 more lines of the diff not shown)\n");
    assert!(!plan.stdout.contains("+line 200\n"), "{plan:?}");
    let json = host.run(&["--json", "plan", file.to_str().unwrap()]).json();
    let diff = &json["changes"][0]["diff"];
    assert_eq!(diff["omitted_lines"], 800);
    assert_eq!(diff["hunks"][0]["lines"].as_array().unwrap().len(), 200);
}

#[test]
fn json_carries_the_hunks() {
    let (host, changed) = applied_config("diff-json");
    let json = host
        .run(&["--json", "plan", changed.to_str().unwrap()])
        .json();
    let diff = &json["changes"][0]["diff"];
    assert_eq!(diff["content"], "text");
    assert_eq!(
        (diff["from"].as_str(), diff["to"].as_str()),
        (Some("on the machine"), Some("declared"))
    );
    assert_eq!(
        (diff["old_size"].as_u64(), diff["new_size"].as_u64()),
        (Some(26), Some(28))
    );
    let hunk = &diff["hunks"][0];
    let numbers: Vec<u64> = ["old_start", "old_lines", "new_start", "new_lines"]
        .iter()
        .map(|k| hunk[k].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 7, 2, 7]);
    let lines: Vec<String> = hunk["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l["tag"].as_str().unwrap(),
                l["text"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            "context 2",
            "context 3",
            "context 4",
            "removed port = 80",
            "added port = 8080",
            "context 6",
            "context 7",
            "context 8"
        ]
    );
}

/// On a terminal (`script` gives it one) the diff is coloured, unless `NO_COLOR` is set; piped,
/// never.
#[test]
fn diffs_are_coloured_on_a_terminal_unless_no_color() {
    let (host, changed) = applied_config("diff-colour");
    let on_a_terminal = |no_color: Option<&str>| {
        let command = host.command(&["plan", changed.to_str().unwrap()]);
        let line: Vec<String> = std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|a| format!("'{}'", a.to_str().unwrap()))
            .collect();
        let mut script = std::process::Command::new("script");
        script.args(["-qec", &line.join(" "), "/dev/null"]);
        script.env_remove("NO_COLOR");
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        let out = script.output().expect("script(1) runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let coloured = on_a_terminal(None);
    assert!(
        coloured.contains("\x1b[31m-port = 80\x1b[0m"),
        "{coloured:?}"
    );
    assert!(
        coloured.contains("\x1b[32m+port = 8080\x1b[0m"),
        "{coloured:?}"
    );
    assert!(
        coloured.contains("\x1b[36m@@ -2,7 +2,7 @@\x1b[0m"),
        "{coloured:?}"
    );
    // An empty NO_COLOR is as good as none (no-color.org).
    assert!(on_a_terminal(Some("")).contains("\x1b[31m"));
    let plain = on_a_terminal(Some("1"));
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("-port = 80"), "{plain:?}");
    let piped = host.run(&["plan", changed.to_str().unwrap()]);
    assert!(!piped.stdout.contains('\x1b'), "{piped:?}");
}

/// A run keeps about 256 KiB of diffs: past that, changes are listed without theirs, and it says
/// so; every change is still listed.
#[test]
fn a_run_keeps_a_bounded_amount_of_diffs() {
    let host = Scratch::new("diff-bound");
    let content: String = (0..200).map(|i| format!("line {i}\\n")).collect();
    let files: Vec<String> = (0..300)
        .map(|i| format!(r#""/etc/many/f{i:03}.conf": {{"content": "{content}"}}"#))
        .collect();
    let file = host.declaration(
        "d.json",
        &format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(", ")),
    );
    let json = host.run(&["--json", "plan", file.to_str().unwrap()]).json();
    let changes = json["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 300);
    let with_diff = changes.iter().filter(|c| c.get("diff").is_some()).count();
    assert!((10..300).contains(&with_diff), "{with_diff} diffs kept");
    assert!(changes[0].get("diff").is_some() && changes[299].get("diff").is_none());
    assert_eq!(json["diffs_cut"], true);
    let plan = host.run(&["plan", file.to_str().unwrap()]);
    plan.assert_stdout(
        "note: the diffs shown reached 256 KiB; the changes after them are listed without theirs",
    );
    plan.assert_stdout("300 would change");
}

/// A secret file (0600 by default, or `"secret": true`) never has its content in a diff: sizes
/// only, whether it is changed, created or released.
#[test]
fn a_secret_files_diff_shows_sizes_only() {
    let host = Scratch::new("diff-secret");
    let canary = "canary-4f1e9b";
    let declare = |name: &str, password: &str| {
        host.declaration(
            name,
            &format!(
                r#"{{"schema": 1, "files": {{"/etc/app.key": {{"content": "pw={password}\n", "mode": "0600"}},
                    "/etc/flagged.conf": {{"content": "pw={password}\n", "secret": true}}}}}}"#
            ),
        )
    };
    let first = declare("d.json", canary);
    let plan = host.run(&["plan", first.to_str().unwrap()]);
    plan.assert_stdout("    (secret: content not shown) absent -> declared, 17 bytes\n");
    host.apply(&first, 0);
    let second = declare("e.json", &format!("{canary}-2"));
    let second_path = second.to_str().unwrap();
    for args in [&["plan", second_path][..], &["--json", "plan", second_path]] {
        let out = host.run(args);
        assert!(!out.stdout.contains(canary), "{out:?}");
    }
    let plan = host.run(&["plan", second.to_str().unwrap()]);
    plan.assert_stdout(
        "    (secret: content not shown) on the machine, 17 bytes -> declared, 19 bytes\n",
    );
    // Released: the file is 0600 on the machine, so what it held is not shown either.
    let empty = host.declaration("empty.json", r#"{"schema": 1}"#);
    let plan = host.run(&["plan", empty.to_str().unwrap()]);
    assert!(!plan.stdout.contains(canary), "{plan:?}");
    plan.assert_stdout("    (secret: content not shown) on the machine, 17 bytes -> absent\n");
}

/// The declaration 21d51db applied to write `LEDGER_21D51DB` (`--root`, as root).
const DECLARATION_21D51DB: &str = r#"{"schema": 1, "files": {
  "/etc/a": {"content": "a"},
  "/etc/empty": {"content": "", "mode": "0600"},
  "/etc/unicode ✓": {"content": "héllo ✓\n", "mode": "0644", "owner": "0", "group": "0"},
  "/etc/secret.conf": {"content": "token = s3cret ✓\n", "secret": true, "mode": "0640", "group": "0"}
}}"#;

/// The ledger 21d51db wrote applying `DECLARATION_21D51DB`, as it wrote it: its digests hashed
/// Rust's `{:?}` text of each spec.
const LEDGER_21D51DB: &str = r#"{
"version":1,
"resources":{
"files":{
"/etc/a":{"origin":"created","applied":"497bcea5b564ff49d1e8351cd9351090f32672ce93e957d8f07e147adae6cc3e"},
"/etc/empty":{"origin":"created","applied":"751c89782981669e80e9f9296a7824574fd76ad16502d98b746fc0e9113417a2"},
"/etc/secret.conf":{"origin":"created","applied":"e6546d8786c37206525898219891054e7b5cb7ae6015bb2d8431f5b9c947b952"},
"/etc/unicode ✓":{"origin":"created","applied":"6d46f49351a3bf1862443a394baac4165ae3aeb7d9a180baf6193d054ada8884"}}},
"directories":[]}"#;

/// A store and files 21d51db left (before digests had their canonical encoding): `plan` and
/// `apply` find every file in sync and rewrite none; `apply` brings the ledger's digests up to
/// the canonical ones (those `kinds::files`' unit test pins), and the next run writes nothing.
#[test]
#[ignore = "needs root (chown): run ./tests/run.sh as root"]
fn a_ledger_written_by_21d51db_is_in_sync_and_no_file_is_rewritten() {
    support::require_root("its files are owned by root as declared");
    let host = Scratch::new("ledger-21d51db");
    let file = host.declaration("d.json", DECLARATION_21D51DB);
    for (path, content, mode) in [
        ("/etc/a", "a", 0o644),
        ("/etc/empty", "", 0o600),
        ("/etc/unicode ✓", "héllo ✓\n", 0o644),
        ("/etc/secret.conf", "token = s3cret ✓\n", 0o640),
    ] {
        let target = host.target(path);
        std::fs::write(&target, content).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::create_dir(host.state()).unwrap();
    std::fs::set_permissions(host.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let ledger = host.state().join("ledger.json");
    std::fs::write(&ledger, LEDGER_21D51DB).unwrap();
    let stamps = || {
        let paths = ["/etc/a", "/etc/empty", "/etc/unicode ✓", "/etc/secret.conf"];
        paths.map(|path| {
            let meta = std::fs::symlink_metadata(host.target(path)).unwrap();
            (
                meta.ino(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
            )
        })
    };
    let before = stamps();
    let out = host.run(&["plan", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("0 would change, 4 in sync");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), LEDGER_21D51DB);
    host.apply(&file, 0).assert_stdout("0 changed, 4 in sync");
    assert_eq!(stamps(), before, "a file was rewritten");
    let read: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ledger).unwrap()).unwrap();
    for (path, digest) in [
        (
            "/etc/a",
            "c91ca32061cdb2f9949baa0522e740bdc4a6431346349e8abfea4a0996fdccbd",
        ),
        (
            "/etc/empty",
            "885a21c7e247344d8bfa613d6c772b6d4ea6f43a6dbf1e6808362cdf4db0ece6",
        ),
        (
            "/etc/unicode ✓",
            "c1c3e1870650384b0559e488ce62afa7d023178fff7c19d11f1c889256f1b67d",
        ),
        (
            "/etc/secret.conf",
            "2de80b889511c825f56dc78606eaff7d36ba1176124763d8f913330f391f0ad3",
        ),
    ] {
        let entry = &read["resources"]["files"][path];
        assert_eq!(entry["applied"], digest, "{path}");
        assert_eq!(entry["origin"], "created", "{path}");
    }
    let written = std::fs::read(&ledger).unwrap();
    host.apply(&file, 0).assert_stdout("0 changed, 4 in sync");
    assert_eq!(std::fs::read(&ledger).unwrap(), written);
    assert_eq!(stamps(), before, "a file was rewritten");
}

/// Files in more directories than the limit on open files a service starts with (1,024 under
/// systemd; 256 here) are written, then found in sync: a run holds a directory open for each
/// file of a chunk it writes, so the host raises its own limit (its tools get it back), and it
/// holds few open while it looks.
#[test]
fn files_in_more_directories_than_the_limit_on_open_files_converge_and_stay_so() {
    use std::os::unix::process::CommandExt;
    let host = Scratch::new("many-dirs");
    let files: Vec<String> = (0..600)
        .map(|i| format!(r#""/etc/many/d{i}/f.conf": {{"content": "{i}\n"}}"#))
        .collect();
    let file = host.declaration(
        "d.json",
        &format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(", ")),
    );
    let apply = || {
        let mut command = host.command(&["apply", file.to_str().expect("utf-8 path")]);
        // SAFETY: between fork and exec, getrlimit and setrlimit on a value on the stack:
        // async-signal-safe, nothing allocated.
        unsafe {
            command.pre_exec(|| {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
                limit.rlim_cur = 256;
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                Ok(())
            });
        }
        support::Output::from(command.output().expect("run mesh-host"))
    };
    let out = apply();
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("600 changed, 0 in sync");
    let again = apply();
    assert_eq!(again.code, 0, "{again:?}");
    again.assert_stdout("0 changed, 600 in sync");
}
