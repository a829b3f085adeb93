//! Files systemd itself acts on (tmpfiles.d, fstab, units): the machine's own are accepted by
//! `check`; every tmpfiles.d line `check` refuses is one the real systemd-tmpfiles, run on a
//! scratch root holding the host's paths, turns against them (and the lines it accepts do not);
//! fstab lines and mount unit names are refused exactly when the real systemd-fstab-generator
//! mounts over, or exposes, a host path.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use crate::support::{require_root, Scratch};

/// `check` of `files` (path -> content) and `units` (name -> content): the keys it refused.
fn refused(
    host: &Scratch,
    files: &BTreeMap<String, String>,
    units: &BTreeMap<String, String>,
) -> Vec<String> {
    let files: serde_json::Map<String, serde_json::Value> = files
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::json!({ "content": v })))
        .collect();
    let units: serde_json::Map<String, serde_json::Value> = units
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::json!({ "content": v })))
        .collect();
    let json = serde_json::json!({"schema": 1, "files": files, "units": units}).to_string();
    let out = check(&host.declaration("d.json", &json));
    assert!(out.code == 0 || out.code == 2, "{out:?}");
    let keys: Vec<String> = out
        .stderr
        .lines()
        .filter(|l| l.contains("refused:"))
        .map(str::to_string)
        .collect();
    assert_eq!(out.code == 2, !keys.is_empty(), "{out:?}");
    keys
}

/// `check FILE` with the default config and store, as on a real host: a scratch config or store
/// under /tmp would make the machine's own `D /tmp` touch it. `check` writes nothing.
fn check(file: &Path) -> support::Output {
    support::Output::from(
        support::mesh_host()
            .args(["check", file.to_str().expect("utf-8")])
            .output()
            .expect("run mesh-host"),
    )
}

/// Regular files directly in `dir` (symlinks, such as aliases, left out), by name.
fn texts_in(dir: &Path, suffix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if !is_file || !name.ends_with(suffix) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(entry.path()) {
            out.push((name, text));
        }
    }
    out
}

#[test]
fn every_tmpfiles_d_and_unit_file_the_machine_ships_is_accepted() {
    let host = Scratch::new("shipped");
    let mut files = BTreeMap::new();
    let mut units = BTreeMap::new();
    let tmpfiles = texts_in(Path::new("/usr/lib/tmpfiles.d"), ".conf");
    assert!(
        !tmpfiles.is_empty(),
        "no /usr/lib/tmpfiles.d/*.conf on this machine"
    );
    for (name, text) in tmpfiles {
        files.insert(format!("/etc/tmpfiles.d/{name}"), text);
    }
    let unit_dir = Path::new("/usr/lib/systemd/system");
    let shipped = texts_in(unit_dir, "");
    assert!(
        shipped.len() > 50,
        "too few unit files in {}",
        unit_dir.display()
    );
    for (name, text) in shipped {
        files.insert(format!("/etc/systemd/system/{name}"), text.clone());
        units.insert(name, text);
    }
    for entry in std::fs::read_dir(unit_dir).expect("unit dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".d") && path.is_dir() {
            for (conf, text) in texts_in(&path, ".conf") {
                files.insert(format!("/etc/systemd/system/{name}/{conf}"), text);
            }
        }
    }
    if Path::new("/usr/lib/systemd/user").is_dir() {
        for (name, text) in texts_in(Path::new("/usr/lib/systemd/user"), "") {
            files.insert(format!("/etc/systemd/user/{name}"), text);
        }
    }
    for path in ["/etc/fstab", "/etc/crypttab"] {
        if let Ok(text) = std::fs::read_to_string(path) {
            files.insert(path.into(), text);
        }
    }
    // The unit files as files, then as units: one declaration may not give a unit's file both
    // ways.
    let mut found = refused(&host, &files, &BTreeMap::new());
    found.extend(refused(&host, &BTreeMap::new(), &units));
    assert!(found.is_empty(), "false refusals: {found:#?}");
}

/// Lines `check` refuses that real systemd-tmpfiles acts on as the refusal says. Tested in
/// `selfref::tmpfiles` alone: lines refused for what comes after them (a symlink to a host
/// path), for what cannot be known here (`%h`, a host name), for another systemd's reading
/// (`\x2d`, a `-` to later versions, is `x2d` to 252's), specifiers of directories (252's
/// `--root` puts the root in front twice) and extended attributes (`t`, `T`).
const REFUSED: &[&str] = &[
    "R /var/lib/mesh-host",
    "r /var/lib/mesh-host/ledger.json",
    "f+ /etc/mesh-host/config.json 0644 - - - {}",
    "w /etc/mesh-host/config.json - - - - {}",
    "w+ /etc/mesh-host/config.json - - - - x",
    "F /etc/mesh-host/config.json",
    "d /var/lib/mesh-host 0777 nobody",
    "D /var/lib 0755 root root -",
    "R /var/lib/*",
    "R! /var/lib/*",
    "R /var/{cache,lib}/mesh-*",
    "Z /etc 0777 nobody nobody",
    "z /var/lib 0777 - -",
    "d /var/lib 0755 nobody -",
    "e /var/lib/mesh-host - - - 0",
    "d /var/lib 0755 - - 0",
    "a+ /var/lib - - - - u:nobody:rwx",
    "A+ /etc - - - - u:nobody:rwx",
    "L+ /var/lib/mesh-host - - - - /nonexistent-mesh-x",
    "L+ /var/lib - - - - /nonexistent-mesh-x",
    "p+ /etc/mesh-host/config.json",
    "C /usr/local/lib/systemd/system/new.service - - - - /etc/os-release",
    "f /etc/systemd/system.control/new.service",
    "R /lib/systemd/system/x.service",
    "R /usr/lib64/systemd",
    "f /var/run/systemd/system/new.service",
    "R /usr/sbin/mesh-host",
    "R \"/var/lib/mesh-host\"",
    "R '/var/lib/mesh'-host",
    "f /etc/tmpfiles.d/evil.conf 0644 - - - R /var/lib/mesh-host",
    "w+ /etc/fstab - - - - tmpfs /var/lib tmpfs",
    "v /var/lib/mesh-host/new",
    "q /etc/mesh-host/new",
    "Q /run/systemd/system.control 0777",
    "R /var/lib/mesh\\-host",
];

/// Refused lines that later systemds reject whole ("Failed to parse line"), with the last
/// version known to act on them: 252 reads `\-` as `-`, 262 refuses the escape (versions
/// between are untested). The model refuses them for the older systemd; a newer one must leave
/// the host's paths alone and say that it cannot parse the line.
const REJECTED_AFTER: &[(&str, u32)] = &[("R /var/lib/mesh\\-host", 252)];

/// The version of the systemd-tmpfiles this test runs (`systemd 262 (262.1-1)`).
fn tmpfiles_version() -> u32 {
    let out = Command::new("systemd-tmpfiles")
        .arg("--version")
        .output()
        .expect("systemd-tmpfiles --version (needs systemd installed)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no version in systemd-tmpfiles --version: {text:?}"))
}

/// Lines `check` accepts beside the machine's own tmpfiles.d files: tmpfiles must leave the
/// host's paths as they are.
const ACCEPTED: &[&str] = &[
    "q /var 0755 - - -",
    "d /var/lib 0755 - - -",
    "d /run/systemd 0755 root root -",
    "d /etc ~0755 :nobody :nobody -",
    "L /var/run - - - - ../run",
    "x /var/lib/mesh-host",
    "X /etc/mesh-host/*",
    "R! /tmp/systemd-private-*",
    "d /var/lib/mesh-hostile 0777 nobody",
    "R /etc/mesh-hostile",
    "f /var/log/wtmp 0664 root utmp -",
    "e /var/tmp - - - 1s",
];

/// A scratch root holding the host's paths (each unit directory with a unit in it), Arch's
/// merged-/usr links (relative, so nothing leads out of the root) and the accounts tmpfiles
/// looks up there.
fn scratch_root(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let file = |path: &str, text: &str| {
        let path = dir.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    file("/var/lib/mesh-host/ledger.json", "{}");
    file("/etc/mesh-host/config.json", "{\"trusted_keys\": []}");
    file("/usr/bin/mesh-host", "#!/bin/sh\n");
    file(
        "/etc/passwd",
        "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
    );
    file("/etc/group", "root:x:0:\nnobody:x:65534:\nutmp:x:43:\n");
    file("/etc/os-release", "ID=test\n");
    file("/etc/fstab", "# none\n");
    for dir in ROOT_UNIT_DIRS {
        file(
            &format!("{dir}/x.service"),
            "[Service]\nExecStart=/bin/true\n",
        );
    }
    file("/usr/lib/systemd/system/mesh-host.service", "[Service]\n");
    for d in ["/tmp", "/var/tmp", "/var/log", "/var/cache", "/srv"] {
        std::fs::create_dir_all(dir.join(&d[1..])).expect("mkdir");
    }
    for (link, target) in [
        ("lib", "usr/lib"),
        ("lib64", "usr/lib"),
        ("bin", "usr/bin"),
        ("sbin", "usr/bin"),
        ("usr/sbin", "bin"),
        ("usr/lib64", "lib"),
        ("var/run", "../run"),
    ] {
        std::os::unix::fs::symlink(target, dir.join(link)).expect("symlink");
    }
    // Old enough for any age to clean them.
    let status = Command::new("find")
        .arg(dir)
        .args(["-exec", "touch", "-h", "-d", "2000-01-01", "{}", "+"])
        .status()
        .expect("find");
    assert!(status.success());
    for d in walk(dir) {
        let meta = std::fs::symlink_metadata(&d).expect("stat");
        if meta.is_dir() {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let p = out[i].clone();
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            for entry in std::fs::read_dir(&p).expect("read_dir") {
                out.push(entry.expect("entry").path());
            }
        }
        i += 1;
    }
    out
}

/// The unit directories the scratch root is given a unit in, and whose state is compared.
const ROOT_UNIT_DIRS: [&str; 8] = [
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
];

/// What tmpfiles could change of the host's paths, everything below them and every directory
/// above: type, mode, owner, content or link, extended attributes (ACLs among them).
fn host_state(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let hosts = ["/var/lib/mesh-host", "/etc/mesh-host", "/usr/bin/mesh-host"]
        .into_iter()
        .chain(ROOT_UNIT_DIRS)
        .chain(["/etc/tmpfiles.d", "/etc/fstab"]);
    for host in hosts {
        let top = root.join(&host[1..]);
        let mut paths: Vec<PathBuf> = top
            .ancestors()
            .take_while(|p| p.starts_with(root))
            .map(Path::to_path_buf)
            .collect();
        paths.extend(walk(&top).into_iter().skip(1));
        for p in paths {
            out.insert(p.clone(), describe(&p));
        }
    }
    out
}

fn describe(p: &Path) -> String {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return "absent".into();
    };
    let body = if meta.file_type().is_symlink() {
        format!("-> {:?}", std::fs::read_link(p).ok())
    } else if meta.is_file() {
        format!("{:?}", std::fs::read(p).ok())
    } else {
        String::new()
    };
    let xattrs = Command::new("getfattr")
        .args(["-h", "-d", "-m", "-", "--absolute-names"])
        .arg(p)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    format!(
        "{:o} {}:{} {body} {}",
        meta.mode(),
        meta.uid(),
        meta.gid(),
        xattrs.lines().skip(1).collect::<Vec<_>>().join(",")
    )
}

/// Runs the real systemd-tmpfiles over `root` with `conf` as its only extra file; what it changed
/// of the host's paths, and its stderr.
fn tmpfiles_changes(root: &Path, conf: &str) -> (Vec<String>, String) {
    scratch_root(root);
    let dir = root.join("etc/tmpfiles.d");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("test.conf"), conf).expect("conf");
    let before = host_state(root);
    let out = Command::new("systemd-tmpfiles")
        .arg(format!("--root={}", root.display()))
        .args(["--create", "--remove", "--clean", "--boot"])
        .output()
        .expect("systemd-tmpfiles (needs systemd installed)");
    let after = host_state(root);
    let mut changed: Vec<String> = before
        .iter()
        .filter(|(p, s)| after.get(*p) != Some(s))
        .map(|(p, s)| format!("{}: {s} -> {:?}", p.display(), after.get(p)))
        .collect();
    changed.extend(
        after
            .keys()
            .filter(|p| !before.contains_key(*p))
            .map(|p| format!("{}: new", p.display())),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if changed.is_empty() {
        eprintln!("tmpfiles stderr for {conf:?}: {stderr}");
    }
    (changed, stderr)
}

#[test]
#[ignore = "needs root and systemd-tmpfiles (chown, ACLs, xattrs on a scratch root)"]
fn what_check_refuses_in_tmpfiles_d_real_systemd_tmpfiles_turns_on_the_hosts_paths() {
    require_root("systemd-tmpfiles --root chowns and sets ACLs");
    let host = Scratch::new("tmpfiles");
    let mut files = BTreeMap::new();
    for (i, line) in REFUSED.iter().chain(ACCEPTED).enumerate() {
        files.insert(format!("/etc/tmpfiles.d/{i:03}.conf"), format!("{line}\n"));
    }
    let found = refused(&host, &files, &BTreeMap::new());
    for (i, line) in REFUSED.iter().chain(ACCEPTED).enumerate() {
        let key = format!("files[\"/etc/tmpfiles.d/{i:03}.conf\"]");
        let is_refused = found.iter().any(|f| f.contains(&key));
        assert_eq!(is_refused, i < REFUSED.len(), "{line}: {found:#?}");
    }
    let root = host.dir.join("tmpfiles-root");
    let version = tmpfiles_version();
    let mut untouched = Vec::new();
    let mut not_rejected = Vec::new();
    for line in REFUSED {
        let (changed, stderr) = tmpfiles_changes(&root, &format!("{line}\n"));
        let rejected = REJECTED_AFTER
            .iter()
            .any(|(l, last)| l == line && version > *last);
        if rejected {
            if !changed.is_empty() || !stderr.contains("Failed to parse") {
                not_rejected.push(format!("{line}: {changed:?} {stderr}"));
            }
        } else if changed.is_empty() {
            untouched.push(*line);
        }
    }
    assert!(
        untouched.is_empty(),
        "refused, yet systemd-tmpfiles {version} left the host's paths alone: {untouched:#?}"
    );
    assert!(
        not_rejected.is_empty(),
        "systemd-tmpfiles {version} was expected to reject these lines whole: {not_rejected:#?}"
    );
    let mut accepted = ACCEPTED.join("\n");
    for (name, text) in texts_in(Path::new("/usr/lib/tmpfiles.d"), ".conf") {
        accepted.push_str(&format!("\n# {name}\n{text}"));
    }
    let (changed, _) = tmpfiles_changes(&root, &accepted);
    assert!(
        changed.is_empty(),
        "accepted lines changed the host's paths: {changed:#?}"
    );
}

#[test]
fn a_declaration_with_a_refused_line_is_refused_whole_and_nothing_is_written() {
    let host = Scratch::new("refused-whole");
    let json = serde_json::json!({"schema": 1, "files": {
        "/etc/motd": {"content": "hello\n"},
        "/etc/tmpfiles.d/web.conf": {"content": "d /srv/web 0755\nZ /etc 0777 nobody nobody\n"},
        "/etc/fstab": {"content": "UUID=1 / ext4 defaults 0 1\ntmpfs /var/lib tmpfs\n"},
    }, "units": {
        "x.service": {"content": "[Service]\nExecStart=/bin/true\nStateDirectory=mesh-host\n"},
    }})
    .to_string();
    let file = host.declaration("d.json", &json);
    for command in ["check", "apply"] {
        let out = host.run(&[command, file.to_str().expect("utf-8")]);
        assert_eq!(out.code, 2, "{out:?}");
        out.assert_stderr(
            "files[\"/etc/tmpfiles.d/web.conf\"]: refused: /etc/tmpfiles.d/web.conf is read by \
             systemd-tmpfiles: line 2 \"Z /etc 0777 nobody nobody\": type Z on an ancestor",
        );
        out.assert_stderr(
            "would have systemd-tmpfiles touch /etc, which holds /etc/mesh-host, the host's own \
             configuration; mesh-host never manages itself",
        );
        out.assert_stderr(
            "files[\"/etc/fstab\"]: refused: /etc/fstab is read by systemd-fstab-generator: line 2",
        );
        out.assert_stderr(
            "units[\"x.service\"]: refused: x.service: [Service] StateDirectory=mesh-host (line 3)",
        );
        assert!(!host.target("/etc/motd").exists());
        assert!(!host.state().exists(), "the store was touched");
    }
}

/// The host's paths as the defaults give them (`selfref::paths::host_paths`), for judging what
/// real systemd derives.
const HOST_PATHS: &[&str] = &[
    "/var/lib/mesh-host",
    "/etc/mesh-host",
    "/usr/bin/mesh-host",
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/run/systemd/generator.late",
    "/etc/tmpfiles.d",
    "/run/tmpfiles.d",
    "/usr/local/lib/tmpfiles.d",
    "/usr/lib/tmpfiles.d",
    "/etc/fstab",
    "/etc/crypttab",
];

/// Whether `path` is at, inside or above one of the host's paths (component-wise).
fn near_host(path: &str) -> bool {
    let path = Path::new(path);
    HOST_PATHS
        .iter()
        .any(|h| path.starts_with(h) || Path::new(h).starts_with(path))
}

/// fstab lines, each read by `check` and by the real systemd-fstab-generator: `check` refuses
/// exactly the lines for which the generator writes a mount unit whose `Where=` (other than the
/// root file system) or path `What=` is at, inside or above a host path; and each generated
/// unit, declared by its name, is refused exactly when its `Where=` is.
#[test]
fn fstab_lines_and_mount_unit_names_as_systemd_reads_them() {
    let generator = Path::new("/lib/systemd/system-generators/systemd-fstab-generator");
    assert!(
        generator.exists(),
        "{} is needed (systemd)",
        generator.display()
    );
    let host = Scratch::new("fstab");
    // The second: refused for another reader's reading (every `\NNN` decoded, `\055` a `-`),
    // where libmount 2.38 keeps the text.
    for (line, other_reading) in [
        ("UUID=1 / ext4 defaults 0 1", false),
        ("/dev/sdb1 /etc/mesh\\055host ext4 defaults 0 2", true),
        ("/dev/sdb1 /etc/mesh\\040host ext4 defaults 0 2", false),
        ("/dev/sdb1 /srv/a\\134b ext4 defaults 0 2", false),
        ("/dev/sdb1\t/var\txfs\tdefaults\t0\t2", false),
        ("/dev/sdb1 /var/lib/mesh-host/sub ext4 defaults", false),
        ("/dev/sdb1 /usr/local ext4 defaults", false),
        ("/dev/sdb1 /etc/tmpfiles.d ext4 defaults", false),
        (
            "/dev/sdb1 /srv/data xfs defaults,x-systemd.automount 0 2",
            false,
        ),
        ("/dev/sdb1 //etc//systemd/ ext4 defaults", false),
        ("/etc/mesh-host /srv/cfg none bind 0 0", false),
        ("/etc /srv/etc none bind,ro 0 0", false),
        ("/srv/data/www /var/www none bind 0 0", false),
        ("tmpfs /tmp tmpfs mode=1777 0 0", false),
        ("tmpfs /var/lib/mesh-hostile tmpfs defaults", false),
        ("server:/export /mnt/nfs nfs defaults 0 0", false),
    ] {
        let dir = host.dir.join("gen");
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["n", "e", "l"] {
            std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
        let fstab = dir.join("fstab");
        std::fs::write(&fstab, format!("{line}\n")).expect("fstab");
        let out = Command::new(generator)
            .env("SYSTEMD_FSTAB", &fstab)
            .args([dir.join("n"), dir.join("e"), dir.join("l")])
            .output()
            .expect("systemd-fstab-generator");
        assert!(out.status.success(), "{line}: {out:?}");
        let mut systemd_refuses = false;
        let mut units = BTreeMap::new();
        for (name, text) in texts_in(&dir.join("n"), ".mount") {
            let value = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .unwrap_or_default()
                    .to_string()
            };
            let (what, place) = (value("What="), value("Where="));
            let reaches =
                (place != "/" && near_host(&place)) || (what.starts_with('/') && near_host(&what));
            systemd_refuses |= reaches;
            // Declared by its name alone, the unit must be refused exactly when its path is.
            units.insert(name, (place != "/" && near_host(&place), place));
        }
        let files = BTreeMap::from([("/etc/fstab".to_string(), format!("{line}\n"))]);
        let found = refused(&host, &files, &BTreeMap::new());
        let expected = systemd_refuses || other_reading;
        assert_eq!(!found.is_empty(), expected, "{line}: {found:#?}");
        for (name, (near, place)) in units {
            let json = serde_json::json!({"schema": 1, "units": {&name: {"active": true}}});
            let file = host.declaration("unit.json", &json.to_string());
            let out = check(&file);
            assert_eq!(
                out.code == 2,
                near || place == "/",
                "{name} ({place}): {out:?}"
            );
        }
    }
}
