//! The look itself: the running release from /proc, the root's module directories and pacman's
//! local database, then every process's maps and cgroup. Reads only (no process is spawned):
//! a process that ends meanwhile, or a file that cannot be read, is simply not counted.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use super::{
    deleted_under, installed_version, look_again, placement, reboot_reason, Kernels, Looked, Needs,
    Placement, StaleProcess, Stamps, Where,
};

/// What the look's answer depends on beside the processes, read now (`Stamps`).
pub fn stamps(at: &Where) -> Stamps {
    let modules = at.root.join("usr/lib/modules");
    let running = read_to("/proc/sys/kernel/osrelease");
    Stamps {
        boot: read_to("/proc/sys/kernel/random/boot_id")
            .trim()
            .to_string(),
        local_db: modified_ns(&at.db.join("local")),
        modules: modified_ns(&modules),
        running_modules: modified_ns(&modules.join(running.trim())),
    }
}

/// A file's modification time in nanoseconds, if it can be read.
pub fn modified_ns(path: &Path) -> Option<u64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_nanos()).ok()
}

/// Whether every process the last look found stale still maps a deleted file under `ROOT/usr`
/// from the same unit: reads only their maps. One gone, restarted, re-executed (PID 1's
/// `daemon-reexec`) or moved means the answer changed.
pub fn still_stale(at: &Where, stale: &[StaleProcess]) -> bool {
    let usr = usr_prefix(&at.root);
    let mut maps = String::new();
    stale.iter().all(|p| {
        let proc = Path::new("/proc").join(p.pid.to_string());
        maps_deleted(&proc, &usr, &mut maps) && placement(&read_to(proc.join("cgroup"))) == p.placed
    })
}

/// What the machine needs, pacman's root and database `at` (the files an upgrade replaced are
/// under `ROOT/usr`), and the processes found mapping such files.
pub fn look(at: &Where) -> (Needs, Vec<StaleProcess>) {
    let (root, db) = (at.root.as_path(), at.db.as_path());
    let running = read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let running = running.trim();
    let modules = root.join("usr/lib/modules");
    let mut releases: Vec<String> = std::fs::read_dir(&modules)
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    releases.sort();
    let pkgbase = read(modules.join(running).join("pkgbase"))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let installed = pkgbase.as_deref().and_then(|name| {
        std::fs::read_dir(db.join("local"))
            .ok()?
            .flatten()
            .find_map(|e| {
                let entry = e.file_name().into_string().ok()?;
                installed_version(&entry, name).map(str::to_string)
            })
    });
    let reboot = reboot_reason(&Kernels {
        running,
        releases,
        pkgbase,
        installed,
    });
    let processes = stale_processes(root);
    let (restart, reexec) = stale(&processes);
    let needs = Needs {
        reboot,
        restart,
        reexec,
    };
    (needs, processes)
}

/// The units whose processes map a deleted file under pacman's root's usr/: what a declared
/// unit's `restart_when_stale` restarts. The `last` look's answer while it stands (as for the
/// look after the run: `look_again`, its stale processes still so), else read from /proc.
pub fn stale_units(at: &Where, last: Option<&Looked>, now_secs: u64) -> Vec<String> {
    match last {
        Some(last)
            if look_again(Some(last), &stamps(at), now_secs, false).is_none()
                && still_stale(at, &last.stale) =>
        {
            last.needs.restart.clone()
        }
        _ => stale(&stale_processes(&at.root)).0,
    }
}

/// The units of `processes` (those mapping a deleted file under `ROOT/usr`), and whether PID 1
/// is systemd and is one of them.
fn stale(processes: &[StaleProcess]) -> (Vec<String>, bool) {
    let mut units = BTreeSet::new();
    let mut reexec = false;
    for process in processes {
        match &process.placed {
            _ if process.pid == 1 => reexec |= read_to("/proc/1/comm").trim() == "systemd",
            Placement::Unit(unit) => {
                units.insert(unit.clone());
            }
            Placement::Manager | Placement::None => {}
        }
    }
    (units.into_iter().collect(), reexec)
}

/// Every process mapping a deleted file under `ROOT/usr`, with where its cgroup places it.
fn stale_processes(root: &Path) -> Vec<StaleProcess> {
    let usr = usr_prefix(root);
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut maps = String::new();
    for process in processes.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if maps_deleted(&process.path(), &usr, &mut maps) {
            let placed = placement(&read_to(process.path().join("cgroup")));
            found.push(StaleProcess { pid, placed });
        }
    }
    found
}

fn usr_prefix(root: &Path) -> String {
    format!("{}/", root.join("usr").display())
}

/// Whether the process at `proc` (`/proc/PID`) maps a deleted file under `usr`; `maps` is a
/// buffer kept between processes.
fn maps_deleted(proc: &Path, usr: &str, maps: &mut String) -> bool {
    maps.clear();
    let read = std::fs::File::open(proc.join("maps")).and_then(|mut f| f.read_to_string(maps));
    read.is_ok() && maps.lines().any(|line| deleted_under(line, usr).is_some())
}

/// A small file of the root or /proc; anything else there (a FIFO, a device) is not read.
fn read(path: impl AsRef<Path>) -> Option<String> {
    crate::os::input::read_text(path.as_ref(), crate::os::input::MAX_SMALL_INPUT).ok()
}

fn read_to(path: impl AsRef<Path>) -> String {
    read(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    /// This test's process maps a file under a scratch root's usr/, which is then deleted: the
    /// process is found, and its unit named (if the cgroup it runs in is one), no other.
    #[test]
    fn a_process_mapping_a_deleted_file_is_seen() {
        let tmp = TempDir::new("upkeep-look");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::create_dir_all(root.join("var/lib/pacman/local")).unwrap();
        let lib = root.join("usr/lib/libmesh.so");
        std::fs::write(&lib, vec![7u8; 4096]).unwrap();
        let file = std::fs::File::open(&lib).unwrap();
        let mapping = crate::os::process::Mapping::of(&file).unwrap();
        let at = Where {
            root: root.to_path_buf(),
            db: root.join("var/lib/pacman"),
        };
        let (before, mapped_before) = look(&at);
        std::fs::remove_file(&lib).unwrap();
        let (after, mapped) = look(&at);
        let ours = placement(&read_to("/proc/self/cgroup"));
        let stale_while_mapped = still_stale(&at, &mapped);
        drop(mapping);
        assert!(stale_while_mapped);
        assert!(!still_stale(&at, &mapped), "unmapped: the answer changed");
        assert_eq!(before.restart, Vec::<String>::new());
        assert_eq!(
            before.reboot, None,
            "no module directory: no kernel of its own"
        );
        assert!(mapped_before.is_empty(), "{mapped_before:?}");
        let me = std::process::id();
        let placed = ours.clone();
        assert_eq!(mapped, vec![StaleProcess { pid: me, placed }]);
        match ours {
            Placement::Unit(unit) => assert_eq!(after.restart, vec![unit]),
            Placement::Manager | Placement::None => assert!(after.restart.is_empty()),
        }
        assert!(!after.reexec);
    }

    #[test]
    fn a_root_whose_modules_lack_the_running_release_needs_a_reboot() {
        let tmp = TempDir::new("upkeep-modules");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("usr/lib/modules/0.0.1-mesh")).unwrap();
        let (needs, _) = look(&Where {
            root: root.to_path_buf(),
            db: root.join("var/lib/pacman"),
        });
        let reason = needs.reboot.expect("reboot");
        assert!(reason.contains("(installed: 0.0.1-mesh)"), "{reason}");
    }
}
