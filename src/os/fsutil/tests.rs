//! fsutil's unit tests, over every file of it.

use super::write::{target_temp_name, temp_name};
use super::*;
use crate::util::testutil::TempDir;
use std::ffi::OsString;

#[test]
fn write_read_and_replace() {
    let tmp = TempDir::new("fsutil-write");
    let dir = Dir::open(tmp.path()).unwrap();
    dir.write_atomic(OsStr::new("a"), b"one", 0o640, None)
        .unwrap();
    let (st, bytes) = dir.read(OsStr::new("a"), 100).unwrap().unwrap();
    assert_eq!((st.mode, bytes.as_slice()), (0o640, b"one".as_slice()));
    dir.write_atomic(OsStr::new("a"), b"two", 0o600, None)
        .unwrap();
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"two");
    assert!(dir.read(OsStr::new("a"), 2).is_err());
    assert!(dir.read(OsStr::new("missing"), 2).unwrap().is_none());
}

/// A secret's temp file has its declared mode before its first byte: what the fill (the
/// writing of the content) finds when it starts, for modes narrower and wider than the
/// umask's, is the mode declared and an empty file; only what the mode allows can read it.
#[test]
fn a_temp_file_has_its_mode_before_any_byte_is_written() {
    let tmp = TempDir::new("fsutil-temp-mode");
    let dir = Dir::open(tmp.path()).unwrap();
    let name = OsStr::new("secret");
    for mode in [0o600, 0o640, 0o400, 0o000, 0o644, 0o755] {
        let mut seen = None;
        let pending = dir
            .write_temp(
                temp_name(name).unwrap(),
                name,
                mode,
                None,
                false,
                |mut file| {
                    let st = calls::fstat(std::os::fd::AsFd::as_fd(file))?;
                    seen = Some((st.st_mode & 0o7777, st.st_size));
                    io::Write::write_all(&mut file, b"canary")
                },
            )
            .unwrap();
        assert_eq!(seen, Some((mode, 0)), "declared {mode:04o}");
        dir.rename_pending(pending).unwrap();
        let st = dir.stat(OsStr::new("secret")).unwrap().unwrap();
        assert_eq!(st.mode, mode);
    }
}

#[test]
fn names_for_system_calls_are_nul_terminated_on_the_stack_or_heap() {
    let text = |name: &str| with_c_name(OsStr::new(name), |c| Ok(c.to_bytes().to_vec()));
    assert_eq!(text("a.conf").unwrap(), b"a.conf");
    let long = "x".repeat(300);
    assert_eq!(text(&long).unwrap(), long.as_bytes());
    assert!(text("a\0b").is_err());
    assert!(text(&format!("{long}\0")).is_err());
}

/// A declared file's temp is 47 bytes whatever its name (a 255-byte name is written), one
/// per name, and left by a crash it is found again by the name alone.
#[test]
fn a_declared_files_temp_fits_any_name_and_is_found_again() {
    let tmp = TempDir::new("fsutil-target-temp");
    let dir = Dir::open(tmp.path()).unwrap();
    let long = OsString::from("n".repeat(255));
    assert_eq!(target_temp_name(&long).as_bytes().len(), 47);
    assert_ne!(
        target_temp_name(OsStr::new("motd")),
        target_temp_name(OsStr::new("motd2"))
    );
    let pending = dir.write_temp_unsynced(&long, b"one", 0o644, None).unwrap();
    dir.rename_pending(pending).unwrap();
    dir.replace_unsynced(&long, b"two", 0o600, None, &[])
        .unwrap();
    assert_eq!(std::fs::read(tmp.path().join(&long)).unwrap(), b"two");
    dir.write_temp_unsynced(&long, b"left by a crash", 0o644, None)
        .unwrap();
    std::fs::write(
        tmp.path().join(".motd.mesh-host.tmp"),
        "an earlier version's",
    )
    .unwrap();
    dir.remove_temp(&long).unwrap();
    dir.remove_temp(OsStr::new("motd")).unwrap();
    assert_eq!(dir.names_where(|_| true).unwrap(), vec![long]);
}

/// Mode and owner of a file with another link are set on a new file: the other link, the
/// inode it names, keeps its mode, owner and content.
#[test]
fn attributes_of_a_linked_file_reach_only_its_name() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = TempDir::new("fsutil-links");
    let dir = Dir::open(tmp.path()).unwrap();
    let (name, other) = (tmp.path().join("conf"), tmp.path().join("key"));
    std::fs::write(&other, "secret").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&other, &name).unwrap();
    assert_eq!(dir.stat(OsStr::new("conf")).unwrap().unwrap().links, 2);
    let me = std::fs::metadata(&other).unwrap().uid();
    // Another owner only where this process may give one (as root, which the tests run as).
    let owner = (me == 0).then_some((65534, 65534));
    dir.set_attributes(OsStr::new("conf"), 0o644, owner)
        .unwrap();
    let (named, kept) = (
        std::fs::metadata(&name).unwrap(),
        std::fs::metadata(&other).unwrap(),
    );
    let owner_uid = owner.map_or(me, |(uid, _)| uid);
    assert_eq!(
        (named.mode() & 0o7777, named.uid(), named.nlink()),
        (0o644, owner_uid, 1)
    );
    assert_eq!(
        (kept.mode() & 0o7777, kept.uid(), kept.nlink()),
        (0o600, me, 1)
    );
    assert_eq!(std::fs::read(&name).unwrap(), b"secret");
    // Its only link now: in place.
    dir.set_attributes(OsStr::new("conf"), 0o640, None).unwrap();
    assert_eq!(std::fs::metadata(&name).unwrap().ino(), named.ino());
    assert_eq!(dir.names_where(|_| true).unwrap().len(), 2);
}

#[test]
fn a_pending_write_is_in_place_only_once_renamed() {
    let tmp = TempDir::new("fsutil-pending");
    let dir = Dir::open(tmp.path()).unwrap();
    std::fs::write(tmp.path().join("a"), "old").unwrap();
    let pending = dir
        .write_temp_unsynced(OsStr::new("a"), b"new", 0o640, None)
        .unwrap();
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"old");
    dir.sync_filesystem().unwrap();
    dir.rename_pending(pending).unwrap();
    let (st, bytes) = dir.read(OsStr::new("a"), 10).unwrap().unwrap();
    assert_eq!((st.mode, bytes.as_slice()), (0o640, b"new".as_slice()));
    // Discarded, or left by a crash and removed: no temp file stays.
    let pending = dir
        .write_temp_unsynced(OsStr::new("a"), b"newer", 0o640, None)
        .unwrap();
    dir.discard_pending(pending);
    dir.write_temp_unsynced(OsStr::new("b"), b"b", 0o600, None)
        .unwrap();
    dir.remove_temp(OsStr::new("b")).unwrap();
    dir.remove_temp(OsStr::new("b")).unwrap();
    assert_eq!(
        dir.names_where(|_| true).unwrap(),
        vec![OsString::from("a")]
    );
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"new");
}

#[test]
fn a_streamed_write_replaces_whole_or_not_at_all() {
    let tmp = TempDir::new("fsutil-streamed");
    let dir = Dir::open(tmp.path()).unwrap();
    let big = vec![b'x'; 200_000];
    dir.write_atomic_streamed(OsStr::new("a"), 0o600, |out| {
        out.write_all(b"[")?;
        out.write_all(&big)?;
        out.write_all(b"]")
    })
    .unwrap();
    let (st, bytes) = dir.read(OsStr::new("a"), 1 << 20).unwrap().unwrap();
    assert_eq!((st.mode, bytes.len()), (0o600, 200_002));
    // A writer that fails halfway leaves the old file and no temp file.
    let failed = dir.write_atomic_streamed(OsStr::new("a"), 0o600, |out| {
        out.write_all(&big)?;
        Err(io::Error::other("serialiser failed"))
    });
    assert!(failed.is_err());
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap().len(), 200_002);
    assert_eq!(
        dir.names_where(|_| true).unwrap(),
        vec![OsString::from("a")]
    );
}

/// Two writers of one file overlapping (the files index: a check without the store's lock
/// while a run writes it under the lock). Sharing a temp name, the second removes the first's
/// half-written temp and renames its own in place, and the first's rename then fails; each
/// with its own temp, both complete and the last rename wins.
#[test]
fn overlapping_writers_of_one_file_each_write_their_own_temp() {
    let tmp = TempDir::new("fsutil-own-temp");
    let dir = Dir::open(tmp.path()).unwrap();
    let name = OsStr::new("files-index");
    let shared = dir.write_atomic_streamed(name, 0o600, |out| {
        out.write_all(b"first, ")?;
        dir.write_atomic_streamed(name, 0o600, |inner| inner.write_all(b"second"))
            .unwrap();
        out.write_all(b"whole")
    });
    assert_eq!(
        shared.unwrap_err().kind(),
        io::ErrorKind::NotFound,
        "the collision this guards against"
    );
    let mut inner_temps = Vec::new();
    dir.write_atomic_streamed_own(name, 0o600, |out| {
        out.write_all(b"first, ")?;
        dir.write_atomic_streamed_own(name, 0o600, |inner| {
            inner_temps = dir.own_temps(name)?;
            inner.write_all(b"second")
        })?;
        assert_eq!(std::fs::read(tmp.path().join(name)).unwrap(), b"second");
        out.write_all(b"whole")
    })
    .unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join(name)).unwrap(),
        b"first, whole"
    );
    let pid = std::process::id();
    assert_eq!(inner_temps.len(), 2, "{inner_temps:?}");
    assert!(
        inner_temps.iter().all(|(_, p)| *p == pid),
        "{inner_temps:?}"
    );
    assert_eq!(
        dir.names_where(|_| true).unwrap(),
        vec![name.to_os_string()]
    );
    // Only the temps of this file, of this form, are taken for a writer's.
    for other in [
        ".files-index.mesh-host.tmp",
        ".files-index.12-x.mesh-host.tmp",
        ".ledger.json.12-3.mesh-host.tmp",
    ] {
        std::fs::write(tmp.path().join(other), "").unwrap();
    }
    std::fs::write(tmp.path().join(".files-index.12-3.mesh-host.tmp"), "").unwrap();
    assert_eq!(
        dir.own_temps(name).unwrap(),
        vec![(OsString::from(".files-index.12-3.mesh-host.tmp"), 12)]
    );
}

#[test]
fn names_lists_a_directory_once_and_reads_take_one_pass() {
    let tmp = TempDir::new("fsutil-names");
    let dir = Dir::open(tmp.path()).unwrap();
    for name in ["b", "a", "a.pacnew"] {
        dir.write_atomic_unsynced(OsStr::new(name), name.as_bytes(), 0o644, None)
            .unwrap();
    }
    dir.sync().unwrap();
    let mut names = dir.names_where(|_| true).unwrap();
    names.sort();
    assert_eq!(names, ["a", "a.pacnew", "b"]);
    // Empty and exactly-sized files read whole; the limit still holds.
    dir.write_atomic(OsStr::new("empty"), b"", 0o644, None)
        .unwrap();
    assert_eq!(dir.read(OsStr::new("empty"), 10).unwrap().unwrap().1, b"");
    assert_eq!(dir.read(OsStr::new("b"), 1).unwrap().unwrap().1, b"b");
}

#[test]
fn created_directories_get_exactly_their_mode_and_links_are_read_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new("fsutil-modes");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // 0777 survives whatever the umask (022 or 077 would take bits off a plain mkdir).
    let root = Dir::open(tmp.path()).unwrap();
    assert!(root.mkdir(OsStr::new("open"), 0o777).unwrap());
    assert_eq!(mode(&tmp.path().join("open")), 0o777);
    assert!(!root.mkdir(OsStr::new("open"), 0o700).unwrap());
    assert_eq!(
        mode(&tmp.path().join("open")),
        0o777,
        "an existing one is left"
    );
    create_dir_all(&tmp.path().join("a/b/c"), 0o777).unwrap();
    for dir in ["a", "a/b", "a/b/c"] {
        assert_eq!(mode(&tmp.path().join(dir)), 0o777, "{dir}");
    }
    let unit_dir = walk_to_dir(&root, Path::new("/etc/systemd/system"), true)
        .unwrap()
        .unwrap();
    assert_eq!(mode(&tmp.path().join("etc/systemd/system")), 0o755);
    std::os::unix::fs::symlink("/dev/null", tmp.path().join("etc/systemd/system/m.service"))
        .unwrap();
    assert_eq!(
        unit_dir.read_link(OsStr::new("m.service")).unwrap(),
        Some(PathBuf::from("/dev/null"))
    );
    assert!(unit_dir.identity(OsStr::new("none")).unwrap().is_none());
    std::os::unix::fs::symlink("/tmp", tmp.path().join("etc/linked")).unwrap();
    let err = walk_to_dir(&root, Path::new("/etc/linked"), true)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "/etc/linked is a symlink; mesh-host never follows symlinks"
    );
    assert!(walk_to_dir(&root, Path::new("/etc/none"), false)
        .unwrap()
        .is_none());
}

#[test]
fn walk_creates_and_refuses_symlinks() {
    let tmp = TempDir::new("fsutil-walk");
    let root = Dir::open(tmp.path()).unwrap();
    let parent = walk_to_parent(&root, Path::new("/etc/app/sub/conf"), true)
        .unwrap()
        .unwrap();
    assert_eq!(
        parent.created,
        vec![
            PathBuf::from("/etc"),
            PathBuf::from("/etc/app"),
            PathBuf::from("/etc/app/sub")
        ]
    );
    assert_eq!(parent.name, "conf");
    std::os::unix::fs::symlink("/root", tmp.path().join("etc/link")).unwrap();
    let err = walk_to_parent(&root, Path::new("/etc/link/conf"), true)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "/etc/link is a symlink; mesh-host never follows symlinks"
    );
    assert!(walk_to_parent(&root, Path::new("/etc/none/x"), false)
        .unwrap()
        .is_none());
    std::fs::write(tmp.path().join("etc/file"), "").unwrap();
    let err = walk_to_parent(&root, Path::new("/etc/file/x"), false)
        .err()
        .unwrap();
    assert!(err
        .to_string()
        .contains("is a regular file, not a directory"));
}

#[test]
fn below_the_root_a_symlink_is_refused_at_every_component() {
    let tmp = TempDir::new("fsutil-below");
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("etc/app")).unwrap();
    std::fs::write(root.join("etc/app/conf"), "inside").unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("app")).unwrap();
    std::fs::write(outside.join("app/conf"), "outside").unwrap();
    let read = |path: &str| read_below(&root, Path::new(path), 100);
    assert_eq!(read("/etc/app/conf").unwrap().unwrap().1, b"inside");
    assert!(read("/etc/app/none").unwrap().is_none());
    assert!(read("/etc/none/conf").unwrap().is_none());
    assert!(read("/etc/app/conf").is_ok_and(|f| f.unwrap().0.size == 6));
    assert!(read_below(&root, Path::new("/etc/app/conf"), 2).is_err());
    // A link as the first component, a middle one, and the file itself: each refused by name,
    // whatever it points at.
    let cases = [
        ("etc2", outside.clone(), "/etc2/app/conf", "/etc2"),
        (
            "etc/app2",
            outside.join("app"),
            "/etc/app2/conf",
            "/etc/app2",
        ),
        (
            "etc/app/conf2",
            outside.join("app/conf"),
            "/etc/app/conf2",
            "/etc/app/conf2",
        ),
    ];
    for (link, target, path, named) in cases {
        std::os::unix::fs::symlink(&target, root.join(link)).unwrap();
        let err = read(path).err().unwrap().to_string();
        assert_eq!(
            err,
            format!("{named} is a symlink; mesh-host never follows symlinks"),
            "{path}"
        );
    }
    let err = open_dir_below(&root, Path::new("/etc/app2"), true, None)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "/etc/app2 is a symlink; mesh-host never follows symlinks"
    );
    assert!(open_dir_below(&root, Path::new("/etc2/app"), false, None).is_err());
    assert!(!outside.join("app/app").exists());
    let made = open_dir_below(&root, Path::new("/etc/new/dir"), true, None).unwrap();
    assert!(made.is_some() && root.join("etc/new/dir").is_dir());
}

#[test]
fn read_entry_reports_a_link_with_its_target_and_never_follows_it() {
    let tmp = TempDir::new("fsutil-entry");
    let dir = Dir::open(tmp.path()).unwrap();
    std::fs::write(tmp.path().join("file"), "bytes").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("link")).unwrap();
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    let entry = |name: &str| dir.read_entry(OsStr::new(name), 100);
    assert!(matches!(entry("file").unwrap(), Found::File(st, b) if st.size == 5 && b == b"bytes"));
    assert_eq!(
        entry("link").unwrap(),
        Found::Link(PathBuf::from("/etc/passwd"))
    );
    assert_eq!(entry("none").unwrap(), Found::Nothing);
    assert!(entry("sub").is_err(), "a directory is not a file");
    assert!(dir.read_entry(OsStr::new("file"), 4).is_err());
}

/// A regular file's stamp with this ctime (and mtime), for unit tests here and in the store.
pub fn stamp(ctime_ns: i64) -> Stamp {
    Stamp {
        device: 1,
        inode: 2,
        size: 3,
        mode: 0o100644,
        uid: 4,
        gid: 5,
        mtime_ns: ctime_ns,
        ctime_ns,
    }
}

#[test]
fn a_stamp_is_trusted_only_once_its_tick_is_past() {
    let now = 1_700_000_000_123_456_789;
    assert!(is_cacheable(&stamp(now - 3_000_000_000), now));
    assert!(is_cacheable(&stamp(now - RACY_NS - 1), now));
    // Changed within the racy window before the observation, or after it began.
    assert!(!is_cacheable(&stamp(now - RACY_NS), now));
    assert!(!is_cacheable(&stamp(now), now));
    assert!(!is_cacheable(&stamp(now + 5), now));
    // A whole-seconds filesystem: the second it changed in must be well past.
    let second = 1_700_000_000_000_000_000;
    assert!(!is_cacheable(&stamp(second), second + 1_500_000_000));
    assert!(is_cacheable(&stamp(second), second + 2_500_000_000));
    // An mtime set into the future keeps it uncached, whatever the ctime.
    let mut future = stamp(now - 3_000_000_000);
    future.mtime_ns = now + 1;
    assert!(!is_cacheable(&future, now));
}
