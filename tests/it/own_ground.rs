//! What a declaration can never reach, whatever the machine looks like: another link of a
//! declared file, the host's own store (by any path), its temp files' names; and what the host
//! never loses: an original kept in the store, the store's own owner. Each test is a case an
//! operator tried on a hostile machine (issue 32), through `apply` and, where a declaration can
//! reach it, through the service too.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::Value;

use crate::support;
use crate::support::ways::{Driver, Way};
use crate::support::{failures, Scratch};

/// Mode, owner and link count of `path`.
fn meta(path: &Path) -> (u32, u32, u64) {
    let m = std::fs::symlink_metadata(path).expect("exists");
    (m.mode() & 0o7777, m.uid(), m.nlink())
}

/// The failures of a run record, as "key: detail" lines.
fn failed(record: &Value) -> Vec<String> {
    failures(record)
        .into_iter()
        .map(|f| format!("{}: {}", f.key, f.detail))
        .collect()
}

/// Mode and owner declared for a file with other hard links (one outside /etc, one the store's
/// own digest key) reach only the declared name: the other links keep their mode, owner and
/// content, and the run says the file was written anew.
#[test]
#[ignore = "needs root (chown): run ./tests/run.sh as root"]
fn a_change_reaches_only_the_file_declared_never_its_other_links() {
    support::require_root("it chowns files to the declared owner");
    for way in Way::BOTH {
        let host = Scratch::new(&format!("links-{}", way.name()));
        let keep = host.target("/srv/keep");
        std::fs::create_dir_all(keep.parent().expect("parent")).unwrap();
        std::fs::write(&keep, "k\n").unwrap();
        std::fs::set_permissions(&keep, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&keep, host.target("/etc/linked.conf")).unwrap();
        let mut driver = Driver::start(way, host);
        // A secret file makes the store's digest key.
        let ran = driver
            .converge(r#"{"schema": 1, "files": {"/etc/s": {"content": "s", "mode": "0600"}}}"#);
        assert!(failed(&ran.record).is_empty(), "{:#}", ran.record);
        let key = driver.host().state().join("digest-key");
        // A key the declaration can spell (32 bytes, as the store reads it), in place.
        let key_bytes = "k".repeat(32);
        std::fs::write(&key, &key_bytes).expect("the digest key");
        std::fs::hard_link(&key, driver.host().target("/etc/key-link")).unwrap();
        let ran = driver.converge(&format!(
            r#"{{"schema": 1, "files": {{
                "/etc/s": {{"content": "s", "mode": "0600"}},
                "/etc/linked.conf": {{"content": "k\n", "mode": "0644", "owner": "65534"}},
                "/etc/key-link": {{"content": "{key_bytes}", "mode": "0644", "owner": "65534"}}}}}}"#
        ));
        assert!(failed(&ran.record).is_empty(), "{way:?}: {:#}", ran.record);
        let host = driver.host();
        assert_eq!(
            meta(&keep),
            (0o600, 0, 1),
            "{way:?}: the other link keeps its own"
        );
        assert_eq!(
            meta(&key),
            (0o600, 0, 1),
            "{way:?}: the store's key keeps its own"
        );
        assert_eq!(std::fs::read(&key).unwrap(), key_bytes.as_bytes());
        assert_eq!(std::fs::read(&keep).unwrap(), b"k\n");
        for declared in ["/etc/linked.conf", "/etc/key-link"] {
            assert_eq!(
                meta(&host.target(declared)),
                (0o644, 65534, 1),
                "{way:?}: {declared}"
            );
        }
        let record = ran.record.to_string();
        assert!(
            record.contains("written as a new file: its other hard link keeps its own"),
            "{way:?}: {record}"
        );
        // Released: the originals go back as new files too; the other links are untouched.
        driver.converge(r#"{"schema": 1}"#);
        let host = driver.host();
        assert_eq!(meta(&keep), (0o600, 0, 1), "{way:?}");
        assert_eq!(meta(&key), (0o600, 0, 1), "{way:?}");
        assert_eq!(meta(&host.target("/etc/linked.conf")), (0o600, 0, 1));
    }
}

/// A store inside the target root, reached by a declared path: refused by device and inode
/// whichever way the store was named (`--state-dir` through a symlink to it, or its own path
/// under `--root`), and its files left as they are.
#[test]
fn a_declaration_never_reaches_the_store_whatever_the_path() {
    for way in Way::BOTH {
        let host = Scratch::new(&format!("store-fence-{}", way.name()));
        let inside = host.target("/etc/mstore");
        std::fs::create_dir_all(&inside).unwrap();
        // The store's path as the host is told it is a symlink: no text names /etc/mstore.
        std::os::unix::fs::symlink(&inside, host.state()).unwrap();
        let mut driver = Driver::start(way, host);
        let ran = driver.converge(
            r#"{"schema": 1, "files": {
                "/etc/mstore/declaration.json": {"state": "absent"},
                "/etc/mstore/backups/x": {"content": "x"},
                "/etc/ok": {"content": "ok"}}}"#,
        );
        let failures = failed(&ran.record);
        assert_eq!(failures.len(), 2, "{way:?}: {failures:?}");
        for f in &failures {
            assert!(
                f.contains("/etc/mstore is the host's own store")
                    && f.contains("by device and inode"),
                "{way:?}: {f}"
            );
        }
        let host = driver.host();
        assert!(inside.join("declaration.json").is_file(), "{way:?}");
        assert!(!inside.join("backups/x").exists(), "{way:?}");
        assert_eq!(std::fs::read(host.target("/etc/ok")).unwrap(), b"ok");
    }
    // Named by its own path under --root: the same.
    let host = Scratch::new("store-fence-direct");
    let store = host.target("/etc/mstore");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/mstore/declaration.json": {"state": "absent"}}}"#,
    );
    let out = host.run(&[
        "--state-dir",
        store.to_str().unwrap(),
        "apply",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    out.assert_stdout("/etc/mstore is the host's own store");
    assert!(store.join("declaration.json").is_file(), "{out:?}");
}

/// Names in the host's own temp namespace are refused when declared, before anything is
/// applied; a declared name of 250 bytes is written (its temp name is not 265 bytes).
#[test]
fn the_hosts_temp_names_cannot_be_declared_and_any_valid_name_is_written() {
    let host = Scratch::new("temp-names");
    std::fs::write(host.target("/etc/motd"), "before").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "m"},
            "/etc/.motd.mesh-host.tmp": {"content": "t"}}}"#,
    );
    let out = host.apply(&file, 2);
    out.assert_stderr(r#"ends with ".mesh-host.tmp": mesh-host names its own temp files so"#);
    assert_eq!(std::fs::read(host.target("/etc/motd")).unwrap(), b"before");

    let long = format!("/etc/{}", "l".repeat(250));
    let file = host.declaration(
        "long.json",
        &format!(r#"{{"schema": 1, "files": {{"{long}": {{"content": "long"}}}}}}"#),
    );
    host.apply(&file, 0);
    assert_eq!(std::fs::read(host.target(&long)).unwrap(), b"long");
    let left: Vec<_> = std::fs::read_dir(host.target("/etc"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".mesh-host.tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A store given away (`chown -R nobody`) is taken back when it is next opened, with a
/// warning, as its mode is: its backups and its digest key among the rest.
#[test]
#[ignore = "needs root (chown): run ./tests/run.sh as root"]
fn a_store_given_away_is_taken_back_with_a_warning() {
    support::require_root("it chowns the store");
    let host = Scratch::new("store-owner");
    std::fs::write(host.target("/etc/adopted"), "original").unwrap();
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/adopted": {"content": "declared"},
            "/etc/s": {"content": "s", "mode": "0600"}}}"#,
    );
    host.apply(&file, 0);
    let state = host.state();
    let backup = std::fs::read_dir(state.join("backups"))
        .unwrap()
        .flatten()
        .next()
        .expect("the original's backup")
        .path();
    let given = [
        state.clone(),
        state.join("backups"),
        backup,
        state.join("digest-key"),
        state.join("ledger.json"),
    ];
    let status = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(status.success());
    let out = host.apply(&file, 0);
    out.assert_stderr("had another owner");
    out.assert_stderr("given back to 0:0");
    for path in &given {
        let m = std::fs::symlink_metadata(path).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0), "{}", path.display());
    }
    let out = host.apply(&file, 0);
    assert!(
        !out.stderr.contains("another owner"),
        "once taken back, quiet: {out:?}"
    );
}

/// `getfattr -d -m -` of `path`: every extended attribute it has, by name, as `getfattr` dumps them.
fn xattrs(path: &Path) -> String {
    let out = std::process::Command::new("getfattr")
        .args(["--absolute-names", "-d", "-m", "-", "-e", "hex"])
        .arg(path)
        .output()
        .expect("getfattr (apt-get install attr)");
    let text = String::from_utf8_lossy(&out.stdout);
    // The first line names the file.
    text.lines().skip(1).collect::<Vec<_>>().join("\n")
}

fn run(command: &str, args: &[&str], path: &Path) {
    let status = std::process::Command::new(command)
        .args(args)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("{command}: {e} (see tests/sandbox/apt-packages)"));
    assert!(status.success(), "{command} {args:?} {}", path.display());
}

/// An original is never overwritten: with the ledger lost and the backup still in the store,
/// the next run adopts the file again as the host left it but keeps the first original, and
/// says so; a release then puts back that original, with its mode, owner, `user.*` attribute,
/// POSIX ACL and file capability.
#[test]
#[ignore = "needs root (chown, setcap): run ./tests/run.sh as root"]
fn an_original_survives_a_lost_ledger_with_its_attributes() {
    support::require_root("it sets file capabilities and owners");
    for way in Way::BOTH {
        let host = Scratch::new(&format!("original-{}", way.name()));
        let motd = host.target("/etc/motd");
        std::fs::write(&motd, "the original\n").unwrap();
        std::fs::set_permissions(&motd, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(&motd, Some(65534), Some(65534)).unwrap();
        run("setfattr", &["-n", "user.origin", "-v", "kept"], &motd);
        run("setfacl", &["-m", "u:65533:r"], &motd);
        run("setcap", &["cap_net_raw+ep"], &motd);
        let before = (meta(&motd), xattrs(&motd));
        assert!(
            before.1.contains("user.origin")
                && before.1.contains("system.posix_acl_access")
                && before.1.contains("security.capability"),
            "{}",
            before.1
        );
        let mut driver = Driver::start(way, host);
        let declared = r#"{"schema": 1, "files": {"/etc/motd": {"content": "declared\n", "mode": "0644", "owner": "0", "group": "0"}}}"#;
        let ran = driver.converge(declared);
        assert!(failed(&ran.record).is_empty(), "{way:?}: {:#}", ran.record);
        assert_eq!(std::fs::read(&motd).unwrap(), b"declared\n");
        assert_eq!(
            xattrs(&motd),
            "",
            "{way:?}: the declared file is as declared"
        );

        std::fs::remove_file(driver.host().state().join("ledger.json")).unwrap();
        let ran = driver.converge(&declared.replace("declared\\n", "declared again\\n"));
        assert!(failed(&ran.record).is_empty(), "{way:?}: {:#}", ran.record);
        let record = ran.record.to_string();
        assert!(
            record.contains(
                "the original kept in the store from an earlier adoption stays the original"
            ),
            "{way:?}: {record}"
        );

        driver.converge(r#"{"schema": 1}"#);
        assert_eq!(std::fs::read(&motd).unwrap(), b"the original\n", "{way:?}");
        assert_eq!((meta(&motd), xattrs(&motd)), before, "{way:?}");
        let backups = std::fs::read_dir(driver.host().state().join("backups"))
            .unwrap()
            .count();
        assert_eq!(backups, 0, "{way:?}: released, the backup goes");
    }
}

/// Puts something at a backup's name (the first path); the second is a scratch path outside.
type Plant = fn(&Path, &Path);

/// A backup's name for `/etc/motd` (`kinds::backup_key`): SHA-256 of `files:/etc/motd`.
const MOTD_BACKUP: &str = "97d128133a0f3fe18b369cceaca5641e12ccc09f34ce60215633cef7d6f9a4fa";

/// Something that is not a backup the host wrote, where the original of a file about to be
/// adopted goes (a symlink, a FIFO, a directory, a hard link to another file): refused before
/// the file is touched, naming it; once it is gone, the file is adopted and its release puts the
/// real original back. It used to be taken for an original kept from an earlier adoption: the
/// real one was overwritten, and the release failed on the symlink.
#[test]
fn a_backup_mesh_host_did_not_write_is_never_taken_for_an_original() {
    let plants: [(&str, Plant); 4] = [
        ("symlink", |at, _| {
            std::os::unix::fs::symlink("/etc/hostname", at).unwrap()
        }),
        ("special file", |at, _| run("mkfifo", &[], at)),
        ("directory", |at, _| std::fs::create_dir(at).unwrap()),
        ("file with 2 hard links", |at, other| {
            std::fs::write(other, "not the original\n").unwrap();
            std::fs::hard_link(other, at).unwrap();
        }),
    ];
    for (what, plant) in plants {
        let host = Scratch::new("planted-backup");
        let first = host.declaration(
            "first.json",
            r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}}}"#,
        );
        host.apply(&first, 0);
        let motd = host.target("/etc/motd");
        std::fs::write(&motd, "the original\n").unwrap();
        let planted = host.state().join("backups").join(MOTD_BACKUP);
        plant(&planted, &host.dir.join("elsewhere"));
        let file = host.declaration(
            "d.json",
            r#"{"schema": 1, "files": {"/etc/motd": {"content": "declared\n"}}}"#,
        );
        let out = host.apply(&file, 4);
        out.assert_stderr(&format!(
            "backups/{MOTD_BACKUP}: cannot hold this resource's original: it is a {what}"
        ));
        assert_eq!(std::fs::read(&motd).unwrap(), b"the original\n", "{what}");
        match std::fs::symlink_metadata(&planted).unwrap().is_dir() {
            true => std::fs::remove_dir(&planted).unwrap(),
            false => std::fs::remove_file(&planted).unwrap(),
        }
        host.apply(&file, 0);
        assert_eq!(std::fs::read(&motd).unwrap(), b"declared\n", "{what}");
        host.apply(&first, 0);
        assert_eq!(std::fs::read(&motd).unwrap(), b"the original\n", "{what}");
    }
}

/// A file of another owner hard-linked into the store (beside its files, and in `backups/` of a
/// store given away): the store's name is taken back on a copy, with a warning; the other link,
/// outside the store, keeps its owner. Taking the store back used to `chown` the shared inode,
/// so a user's file linked into the store became root's.
#[test]
#[ignore = "needs root (chown): run ./tests/run.sh as root"]
fn taking_the_store_back_never_reaches_a_file_linked_into_it() {
    support::require_root("it chowns files");
    let host = Scratch::new("store-owner-links");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}}}"#,
    );
    host.apply(&file, 0);
    let outside = [host.dir.join("users-file"), host.dir.join("users-other")];
    let inside = [
        host.state().join("planted"),
        host.state().join("backups").join("planted"),
    ];
    for (out, into) in outside.iter().zip(&inside) {
        std::fs::write(out, "the user's\n").unwrap();
        std::os::unix::fs::chown(out, Some(65534), Some(65534)).unwrap();
        std::fs::hard_link(out, into).unwrap();
    }
    // Given away, so the walk goes down into backups/ too.
    std::os::unix::fs::chown(host.state(), Some(65534), Some(65534)).unwrap();
    let out = host.apply(&file, 0);
    out.assert_stderr("given back to 0:0");
    for (out, into) in outside.iter().zip(&inside) {
        let m = std::fs::metadata(out).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.nlink()),
            (65534, 65534, 1),
            "{}",
            out.display()
        );
        assert_eq!(std::fs::read(out).unwrap(), b"the user's\n");
        let m = std::fs::metadata(into).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.nlink()),
            (0, 0, 1),
            "{}",
            into.display()
        );
        assert_eq!(std::fs::read(into).unwrap(), b"the user's\n");
    }
}

/// A store that is the unit directory (`--state-dir` a symlink to `ROOT/etc/systemd/system`):
/// a declared unit is refused by device and inode, as a declared file there is, and nothing is
/// written into the store. Unit files used to be written into it: the unit directory's walk was
/// not fenced.
#[test]
fn a_unit_is_never_written_into_the_store() {
    for way in Way::BOTH {
        let host = Scratch::new(&format!("store-units-{}", way.name()));
        let unit_dir = host.target("/etc/systemd/system");
        std::fs::create_dir_all(&unit_dir).unwrap();
        std::os::unix::fs::symlink(&unit_dir, host.state()).unwrap();
        let mut driver = Driver::start(way, host);
        let ran = driver.converge(
            r#"{"schema": 1, "files": {"/etc/ok": {"content": "ok"}},
                "units": {"x.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
        );
        let failures = failed(&ran.record);
        assert_eq!(failures.len(), 1, "{way:?}: {failures:?}");
        assert!(
            failures[0].starts_with("x.service: ")
                && failures[0].contains("/etc/systemd/system is the host's own store"),
            "{way:?}: {failures:?}"
        );
        assert!(!unit_dir.join("x.service").exists(), "{way:?}");
        assert_eq!(
            std::fs::read(driver.host().target("/etc/ok")).unwrap(),
            b"ok"
        );
    }
}

/// A unit's file declared as a file too: refused by path before anything is applied. It used to
/// be written by both kinds in turn, each undoing the other on every run.
#[test]
fn a_units_file_is_declared_in_one_place() {
    let host = Scratch::new("unit-file-twice");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1,
            "files": {"/etc/systemd/system/x.service": {"content": "[Service]\nExecStart=/bin/false\n"}},
            "units": {"x.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
    );
    let out = host.apply(&file, 2);
    out.assert_stderr(
        r#"files["/etc/systemd/system/x.service"]: is where systemd reads units["x.service"]"#,
    );
    assert!(
        !host.target("/etc/systemd/system/x.service").exists(),
        "{out:?}"
    );
}
