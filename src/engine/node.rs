//! What the node is, for the link's hello and reports (`link::Node`, docs/protocol.md "Facts"):
//! read from os-release, uname, /proc and pacman's local database directly, with no process
//! spawned (the service loop waits for nothing here). The foreign packages' count is the one
//! exception: a run counts them with pacman (`reconcile`), and the node carries the store's count.

use std::path::Path;

use crate::link::Node;
use crate::os::input;

/// The most of a package's `files` list read (linux-firmware's is a few MiB).
const MAX_FILES_LIST: u64 = 64 << 20;

/// What the node is now. `root` holds os-release; `local_db` is pacman's `DBPath/local`.
pub fn collect(root: &Path, local_db: &Path) -> Node {
    let os = ["etc/os-release", "usr/lib/os-release"]
        .iter()
        .find_map(|p| input::read_text(&root.join(p), input::MAX_SMALL_INPUT).ok())
        .unwrap_or_default();
    let field = |key: &str| os_release_field(&os, key);
    let (kernel_running, arch) = crate::os::host::uname();
    let db = read_local_db(local_db);
    Node {
        os_id: field("ID"),
        os_version_id: field("VERSION_ID"),
        os_build_id: field("BUILD_ID"),
        kernel_running,
        kernels_installed: db.as_ref().map(|d| d.kernels.clone()).unwrap_or_default(),
        arch,
        boot_id: read_proc("sys/kernel/random/boot_id").map(|b| b.trim().to_string()),
        uptime_secs: read_proc("uptime")
            .and_then(|u| uptime_secs(&u))
            .unwrap_or(0),
        cpus: crate::os::host::cpus_online(),
        memory_bytes: read_proc("meminfo").and_then(|m| mem_total_bytes(&m)),
        packages: db.as_ref().map(|d| d.packages),
        pacman_version: db.and_then(|d| d.pacman_version),
        // Counted and looked for by runs (pacman reads the sync databases; the look is after a
        // transaction); the service adds what the last run found.
        foreign_packages: None,
        needs: None,
    }
}

/// The latest modification, in nanoseconds, of pacman's local database directory and its sync
/// databases (`db` is `DBPath`): a transaction or a refresh moves it, so a foreign count made at
/// an equal stamp still holds. None when the local database cannot be read.
pub fn pacman_db_stamp(db: &Path) -> Option<u64> {
    let ns = |m: std::fs::Metadata| {
        m.modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_nanos() as u64)
    };
    let local = ns(std::fs::metadata(db.join("local")).ok()?)?;
    let sync = std::fs::read_dir(db.join("sync"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| ns(e.metadata().ok()?));
    sync.chain([local]).max()
}

fn read_proc(path: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc").join(path)).ok()
}

/// One field of an os-release file (os-release(5): `KEY=value`, the value maybe quoted with
/// backslash escapes); None when absent or empty.
pub fn os_release_field(text: &str, key: &str) -> Option<String> {
    let value = text.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        (k == key).then_some(v)
    })?;
    let unquoted = match value.as_bytes().first() {
        Some(q @ (b'"' | b'\'')) if value.len() >= 2 && value.as_bytes()[value.len() - 1] == *q => {
            let mut out = String::new();
            let mut chars = value[1..value.len() - 1].chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => out.extend(chars.next()),
                    c => out.push(c),
                }
            }
            out
        }
        _ => value.to_string(),
    };
    (!unquoted.is_empty()).then_some(unquoted)
}

/// /proc/meminfo's `MemTotal`, in bytes (the file says kB, meaning KiB).
pub fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

/// /proc/uptime's first number, whole seconds.
pub fn uptime_secs(uptime: &str) -> Option<u64> {
    let first = uptime.split_whitespace().next()?;
    first.split('.').next()?.parse().ok()
}

/// One field of a local database entry's `desc` (`%NAME%` then its value lines, a blank line
/// after): the first value line.
pub fn desc_field<'a>(desc: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = desc.lines();
    lines.find(|l| l.strip_prefix('%').and_then(|l| l.strip_suffix('%')) == Some(name))?;
    lines.next().filter(|v| !v.is_empty())
}

/// The package name of a local database entry's directory, `NAME-VERSION-RELEASE`.
pub fn entry_name(dir: &str) -> Option<&str> {
    let mut parts = dir.rsplitn(3, '-');
    let (_rel, _ver) = (parts.next()?, parts.next()?);
    parts.next().filter(|n| !n.is_empty())
}

/// The kernel releases an entry's `files` list ships: `usr/lib/modules/RELEASE/vmlinuz`, the
/// image every Arch kernel package installs there (so `linux-firmware` or headers count none).
pub fn kernel_releases(files: &str) -> Vec<&str> {
    files
        .lines()
        .filter_map(|l| l.strip_prefix("usr/lib/modules/")?.strip_suffix("/vmlinuz"))
        .filter(|r| !r.is_empty() && !r.contains('/'))
        .collect()
}

#[derive(Default)]
struct LocalDb {
    packages: u64,
    pacman_version: Option<String>,
    kernels: Vec<String>,
}

/// Counts the entries of the local database and reads the two that say something: `pacman`'s
/// version and the `linux*` packages' kernel releases (their `files`, read only for those).
fn read_local_db(dir: &Path) -> Option<LocalDb> {
    let mut db = LocalDb::default();
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(dir_name) = file_name.to_str() else {
            continue;
        };
        let Some(name) = entry_name(dir_name) else {
            continue;
        };
        if !entry.path().join("desc").is_file() {
            continue;
        }
        db.packages += 1;
        if name == "pacman" {
            let desc = input::read_text(&entry.path().join("desc"), input::MAX_SMALL_INPUT)
                .unwrap_or_default();
            db.pacman_version = desc_field(&desc, "VERSION").map(str::to_string);
        } else if name.starts_with("linux") {
            let files =
                input::read_text(&entry.path().join("files"), MAX_FILES_LIST).unwrap_or_default();
            db.kernels
                .extend(kernel_releases(&files).into_iter().map(str::to_string));
        }
    }
    db.kernels.sort();
    Some(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_fields_unquoted_and_unescaped() {
        let arch = "NAME=\"Arch Linux\"\nPRETTY_NAME=\"Arch Linux\"\nID=arch\nBUILD_ID=rolling\n\
                    ANSI_COLOR=\"38;2;23;147;209\"\n";
        assert_eq!(os_release_field(arch, "ID").as_deref(), Some("arch"));
        assert_eq!(
            os_release_field(arch, "BUILD_ID").as_deref(),
            Some("rolling")
        );
        assert_eq!(os_release_field(arch, "VERSION_ID"), None);
        assert_eq!(
            os_release_field(arch, "NAME").as_deref(),
            Some("Arch Linux")
        );
        let debian = "# comment\nID='debian'\nVERSION_ID=\"12\"\nX=\"a \\\"b\\\" \\\\c\"\nE=\n";
        assert_eq!(os_release_field(debian, "ID").as_deref(), Some("debian"));
        assert_eq!(
            os_release_field(debian, "VERSION_ID").as_deref(),
            Some("12")
        );
        assert_eq!(
            os_release_field(debian, "X").as_deref(),
            Some("a \"b\" \\c")
        );
        assert_eq!(os_release_field(debian, "E"), None);
        // A key is matched whole, never as a prefix.
        assert_eq!(os_release_field("VERSION_IDX=1\n", "VERSION_ID"), None);
    }

    #[test]
    fn meminfo_total_in_bytes() {
        let meminfo = "MemTotal:        8029184 kB\nMemFree:          123456 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(8029184 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: 12\n"), None);
        assert_eq!(uptime_secs("12345.67 23456.78\n"), Some(12345));
        assert_eq!(uptime_secs(""), None);
    }

    #[test]
    fn local_db_desc_names_and_kernels() {
        let desc = "%NAME%\npacman\n\n%VERSION%\n7.0.0.r6.gc685ae6-2\n\n%BASE%\npacman\n\n";
        assert_eq!(desc_field(desc, "VERSION"), Some("7.0.0.r6.gc685ae6-2"));
        assert_eq!(desc_field(desc, "NAME"), Some("pacman"));
        assert_eq!(desc_field(desc, "URL"), None);
        assert_eq!(desc_field("%VERSION%\n\n", "VERSION"), None);
        assert_eq!(entry_name("pacman-7.0.0.r6.gc685ae6-2"), Some("pacman"));
        assert_eq!(entry_name("linux-lts-6.6.63-1"), Some("linux-lts"));
        assert_eq!(entry_name("1-2"), None);
        let files = "%FILES%\nusr/\nusr/lib/\nusr/lib/modules/\nusr/lib/modules/6.12.1-arch1-1/\n\
                     usr/lib/modules/6.12.1-arch1-1/vmlinuz\nusr/lib/modules/6.12.1-arch1-1/pkgbase\n";
        assert_eq!(kernel_releases(files), vec!["6.12.1-arch1-1"]);
        assert!(kernel_releases("%FILES%\nusr/lib/firmware/x.bin\n").is_empty());
    }
}
