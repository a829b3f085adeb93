//! What the machine needs after package upgrades, which no run can do for it: a reboot (the
//! running kernel's modules are gone, or a newer kernel package is installed) and restarts (units
//! whose processes still map files an upgrade deleted under /usr; PID 1 itself: a
//! `daemon-reexec`). This module is pure: the lines of `/proc/PID/maps` and `/proc/PID/cgroup`,
//! pacman's version comparison and the decision; `upkeep/look.rs` reads /proc and the root.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod look;

pub use look::{look, modified_ns, stale_units, stamps, still_stale};

/// Where the look is made: pacman's root (`/` on a real machine; a sandbox's is a directory)
/// and its database (`DBPath`), as `pacman -v -T` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Where {
    pub root: PathBuf,
    pub db: PathBuf,
}

/// What the machine needs, as the last look found it. Shown by `status`, carried by every
/// report and the metrics; the same type goes into the hello's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// Why the machine should reboot, when it should.
    #[serde(rename = "reboot_required", default)]
    pub reboot: Option<String>,
    /// Units whose processes map files deleted under /usr (an upgrade replaced them), sorted;
    /// a user manager's units as `user@UID.service/UNIT`.
    #[serde(rename = "restart_required", default)]
    pub restart: Vec<String>,
    /// PID 1 is systemd and maps files deleted under /usr: `systemctl daemon-reexec`.
    #[serde(rename = "reexec_required", default)]
    pub reexec: bool,
}

impl Needs {
    pub fn is_empty(&self) -> bool {
        self.reboot.is_none() && self.restart.is_empty() && !self.reexec
    }
}

/// The file a `/proc/PID/maps` line maps, when it was deleted and is under `usr` (`/usr/`, or
/// the pacman root's `ROOT/usr/`). Fields: address, perms, offset, device, inode, then the path
/// (which may hold spaces), padded.
pub fn deleted_under<'a>(line: &'a str, usr: &str) -> Option<&'a str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start().split_once(' ')?.1;
    }
    let path = rest.trim_start().strip_suffix(" (deleted)")?;
    path.starts_with(usr).then_some(path)
}

/// What the look's answer depends on beside the processes, read before each look: while none
/// moved, and every process the look found stale still is, its answer stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stamps {
    /// `/proc/sys/kernel/random/boot_id`: a new one is a reboot.
    pub boot: String,
    /// Modification time (ns) of pacman's `local/` database directory: every transaction adds
    /// or removes an entry there, whoever ran it (the host or a person's `pacman -U`).
    pub local_db: Option<u64>,
    /// Of the root's `usr/lib/modules` (a kernel added or removed) and of the running release's
    /// directory in it (its modules replaced or taken away).
    pub modules: Option<u64>,
    pub running_modules: Option<u64>,
}

/// A process the look found mapping a deleted file under usr/, and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaleProcess {
    pub pid: u32,
    pub placed: Placement,
}

/// The last look: when (unix seconds), on what stamps, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Looked {
    pub at: u64,
    pub stamps: Stamps,
    pub needs: Needs,
    pub stale: Vec<StaleProcess>,
}

/// The longest a look's answer stands: a library replaced outside pacman (by hand, `make
/// install`) moves no stamp, and is seen within this many seconds.
pub const LOOK_AT_LEAST_EVERY: u64 = 3600;

/// Why the look is made again rather than its last answer reported (`None`: the answer stands,
/// once its stale processes are checked to still be so). A process started since the last look
/// maps what is on disk now: only a file replaced since, which a transaction does (pacman's
/// database moves), can make it stale. `changed`: the run changed something (its own
/// transaction, restarts).
pub fn look_again(
    last: Option<&Looked>,
    now: &Stamps,
    now_secs: u64,
    changed: bool,
) -> Option<&'static str> {
    let Some(last) = last else {
        return Some("no look kept");
    };
    let was = &last.stamps;
    if changed {
        Some("the run changed something")
    } else if was.boot != now.boot {
        Some("the machine booted")
    } else if was.local_db != now.local_db {
        Some("pacman's local database changed")
    } else if (was.modules, was.running_modules) != (now.modules, now.running_modules) {
        Some("the kernel modules changed")
    } else if now_secs < last.at || now_secs - last.at >= LOOK_AT_LEAST_EVERY {
        Some("the last look is an hour old")
    } else {
        None
    }
}

/// Where a process is, from its `/proc/PID/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// In this unit (a user manager's as `user@UID.service/UNIT`; a user manager's own process
    /// as `user@UID.service`).
    Unit(String),
    /// The system manager's own cgroup (`/init.scope`): PID 1.
    Manager,
    /// In no unit: nothing a manager could restart.
    None,
}

/// The unit suffixes a process can be placed in.
const PROCESS_UNITS: [&str; 5] = [".service", ".scope", ".socket", ".mount", ".swap"];

/// The unit a `/proc/PID/cgroup` places the process in: the unified hierarchy's line (`0::PATH`),
/// else the `name=systemd` one (systemd's on a hybrid or legacy machine); the last path component
/// that is a unit, qualified by the user manager it is under.
pub fn placement(cgroup: &str) -> Placement {
    let path = |want: fn(&str) -> bool| {
        cgroup.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            want(controllers).then_some(path)
        })
    };
    let unified = path(str::is_empty).map(placed_in);
    match unified {
        Some(Placement::None) | None => {
            path(|c| c == "name=systemd").map_or(Placement::None, placed_in)
        }
        Some(found) => found,
    }
}

fn placed_in(path: &str) -> Placement {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let is_unit = |p: &&str| PROCESS_UNITS.iter().any(|s| p.ends_with(s));
    let Some(last) = parts.iter().rposition(is_unit) else {
        return Placement::None;
    };
    let manager = parts[..last]
        .iter()
        .rev()
        .find(|p| p.starts_with("user@") && p.ends_with(".service"));
    match (parts[last], manager) {
        ("init.scope", None) if last == 0 => Placement::Manager,
        ("init.scope", Some(manager)) => Placement::Unit(manager.to_string()),
        (unit, Some(manager)) => Placement::Unit(format!("{manager}/{unit}")),
        (unit, None) => Placement::Unit(unit.to_string()),
    }
}

/// The package version an Arch kernel release (`uname -r`) was built from, given its package
/// base: Arch's kernels append `-PKGREL` and the base's suffix (`linux-lts`: `-lts`) to the
/// source's version, whose first `-` stands for pkgver's `.` (`6.12.1-arch1-1` is `linux`
/// `6.12.1.arch1-1`; `6.6.63-1-lts` is `linux-lts` `6.6.63-1`). `None` for a release that does
/// not end as its base says, or has no release.
pub fn kernel_version(release: &str, pkgbase: &str) -> Option<String> {
    let suffix = pkgbase.strip_prefix("linux")?;
    let rest = release.strip_suffix(suffix)?;
    let (source, pkgrel) = rest.rsplit_once('-')?;
    if source.is_empty() || pkgrel.is_empty() {
        return None;
    }
    Some(format!("{}-{pkgrel}", source.replace('-', ".")))
}

/// What a root's kernels say, as `look` reads them.
#[derive(Debug, Default)]
pub struct Kernels<'a> {
    /// The running release (`/proc/sys/kernel/osrelease`).
    pub running: &'a str,
    /// Releases with a directory in `/usr/lib/modules`.
    pub releases: Vec<String>,
    /// The running release's `pkgbase` file: the kernel package it came from.
    pub pkgbase: Option<String>,
    /// That package's installed version (pacman's local database).
    pub installed: Option<String>,
}

/// Why the machine should reboot, if it should. A root with no module directory at all runs
/// no kernel of its own (a container): nothing is said.
pub fn reboot_reason(k: &Kernels) -> Option<String> {
    if k.releases.is_empty() {
        return None;
    }
    if !k.releases.iter().any(|r| r == k.running) {
        return Some(format!(
            "the running kernel {}'s modules are gone from /usr/lib/modules (installed: {})",
            k.running,
            k.releases.join(", ")
        ));
    }
    let (pkgbase, installed) = (k.pkgbase.as_deref()?, k.installed.as_deref()?);
    let running = kernel_version(k.running, pkgbase)?;
    (crate::tools::pacman::vercmp(installed, &running) == std::cmp::Ordering::Greater).then(|| {
        format!(
            "{pkgbase} {installed} is installed; the running kernel is {running} ({})",
            k.running
        )
    })
}

/// The installed version of `name`, from the name of its local database entry
/// (`NAME-PKGVER-PKGREL`), when `entry` is one of `name`'s.
pub fn installed_version<'a>(entry: &'a str, name: &str) -> Option<&'a str> {
    let version = entry.strip_prefix(name)?.strip_prefix('-')?;
    (version.matches('-').count() == 1).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::Equal;

    #[test]
    fn maps_lines_name_deleted_files_under_usr() {
        let usr = "/usr/";
        for (line, want) in [
            (
                "7f2a1c000000-7f2a1c022000 r--p 00000000 fd:01 1835 /usr/lib/libc.so.6 (deleted)",
                Some("/usr/lib/libc.so.6"),
            ),
            (
                "7f2a1c000000-7f2a1c022000 r-xp 00001000 08:02 99   /usr/lib/my lib.so (deleted)",
                Some("/usr/lib/my lib.so"),
            ),
            (
                "7f2a1c000000-7f2a1c022000 r--p 00000000 fd:01 1835 /usr/lib/libc.so.6",
                None,
            ),
            (
                "7f2a1c000000-7f2a1c022000 rw-s 00000000 00:01 7 /memfd:x (deleted)",
                None,
            ),
            (
                "7f2a1c000000-7f2a1c022000 rw-s 00000000 00:01 7 /tmp/usr/x (deleted)",
                None,
            ),
            (
                "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0          [stack]",
                None,
            ),
            ("7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0", None),
            ("", None),
        ] {
            assert_eq!(deleted_under(line, usr), want, "{line}");
        }
        let line = "5600-5700 r--p 0 fd:01 3 /tmp/sb/root/usr/lib/x.so (deleted)";
        assert_eq!(
            deleted_under(line, "/tmp/sb/root/usr/"),
            Some("/tmp/sb/root/usr/lib/x.so")
        );
        assert_eq!(deleted_under(line, "/usr/"), None);
    }

    #[test]
    fn cgroups_place_a_process_in_its_unit() {
        for (cgroup, want) in [
            (
                "0::/system.slice/nginx.service\n",
                Placement::Unit("nginx.service".into()),
            ),
            (
                "0::/system.slice/system-getty.slice/getty@tty1.service\n",
                Placement::Unit("getty@tty1.service".into()),
            ),
            ("0::/init.scope\n", Placement::Manager),
            (
                "0::/user.slice/user-1000.slice/session-3.scope\n",
                Placement::Unit("session-3.scope".into()),
            ),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service\n",
                Placement::Unit("user@1000.service/foo.service".into()),
            ),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
                Placement::Unit("user@1000.service".into()),
            ),
            // The sandbox's user manager, run as root in a cgroup of its own.
            (
                "0::/mesh-sandbox-42/app.slice/x.service\n",
                Placement::Unit("x.service".into()),
            ),
            // Hybrid: systemd tracks in name=systemd when the unified line says nothing.
            (
                "12:pids:/\n1:name=systemd:/system.slice/sshd.service\n0::/\n",
                Placement::Unit("sshd.service".into()),
            ),
            (
                "9:name=systemd:/\n4:memory:/process_api/ec10\n0::/\n",
                Placement::None,
            ),
            ("", Placement::None),
        ] {
            assert_eq!(placement(cgroup), want, "{cgroup}");
        }
    }

    #[test]
    fn arch_kernel_releases_name_their_package_version() {
        for (release, pkgbase, want) in [
            ("6.12.1-arch1-1", "linux", Some("6.12.1.arch1-1")),
            ("6.6.63-1-lts", "linux-lts", Some("6.6.63-1")),
            ("6.12.1-zen1-1-zen", "linux-zen", Some("6.12.1.zen1-1")),
            (
                "6.12.1-hardened1-1-hardened",
                "linux-hardened",
                Some("6.12.1.hardened1-1"),
            ),
            ("6.6.63-1-lts", "linux-zen", None),
            ("6.1.0", "linux", None),
            ("6.12.1-arch1-1", "my-kernel", None),
        ] {
            assert_eq!(
                kernel_version(release, pkgbase).as_deref(),
                want,
                "{release}"
            );
        }
        assert_eq!(
            crate::tools::pacman::vercmp(
                "6.12.1.arch1-1",
                &kernel_version("6.12.1-arch1-1", "linux").unwrap()
            ),
            Equal
        );
    }

    #[test]
    fn reboot_when_the_running_modules_are_gone_or_a_newer_kernel_is_installed() {
        let kernels = |releases: &[&str], pkgbase: Option<&str>, installed: Option<&str>| Kernels {
            running: "6.12.1-arch1-1",
            releases: releases.iter().map(|r| r.to_string()).collect(),
            pkgbase: pkgbase.map(str::to_string),
            installed: installed.map(str::to_string),
        };
        assert_eq!(
            reboot_reason(&kernels(&[], None, None)),
            None,
            "no kernel here"
        );
        let gone = reboot_reason(&kernels(&["6.12.2-arch1-1"], None, Some("6.12.2.arch1-1")));
        assert_eq!(
            gone.as_deref(),
            Some("the running kernel 6.12.1-arch1-1's modules are gone from /usr/lib/modules (installed: 6.12.2-arch1-1)")
        );
        let same = kernels(&["6.12.1-arch1-1"], Some("linux"), Some("6.12.1.arch1-1"));
        assert_eq!(reboot_reason(&same), None);
        // The running modules kept (kernel-modules-hook copies them back), a newer package in.
        let kept = kernels(
            &["6.12.1-arch1-1", "6.12.2-arch1-1"],
            Some("linux"),
            Some("6.12.2.arch1-1"),
        );
        assert_eq!(
            reboot_reason(&kept).as_deref(),
            Some("linux 6.12.2.arch1-1 is installed; the running kernel is 6.12.1.arch1-1 (6.12.1-arch1-1)")
        );
        let unknown = kernels(&["6.12.1-arch1-1"], None, None);
        assert_eq!(reboot_reason(&unknown), None);
    }

    #[test]
    fn local_database_entries_give_the_installed_version() {
        assert_eq!(
            installed_version("linux-6.12.1.arch1-1", "linux"),
            Some("6.12.1.arch1-1")
        );
        assert_eq!(installed_version("linux-lts-6.6.63-1", "linux"), None);
        assert_eq!(
            installed_version("linux-lts-6.6.63-1", "linux-lts"),
            Some("6.6.63-1")
        );
        assert_eq!(installed_version("linux-1:6.1-2", "linux"), Some("1:6.1-2"));
        assert_eq!(installed_version("linuxx-1.0-1", "linux"), None);
    }

    #[test]
    fn the_look_is_made_again_only_when_its_answer_can_have_changed() {
        let stamps = Stamps {
            boot: "b1".into(),
            local_db: Some(10),
            modules: Some(20),
            running_modules: Some(30),
        };
        let last = Looked {
            at: 1000,
            stamps: stamps.clone(),
            needs: Needs::default(),
            stale: Vec::new(),
        };
        let again =
            |now: &Stamps, secs: u64, changed: bool| look_again(Some(&last), now, secs, changed);
        assert_eq!(again(&stamps, 1000 + LOOK_AT_LEAST_EVERY - 1, false), None);
        assert_eq!(look_again(None, &stamps, 1000, false), Some("no look kept"));
        assert_eq!(
            again(&stamps, 1001, true),
            Some("the run changed something")
        );
        let moved = |edit: fn(&mut Stamps)| {
            let mut now = stamps.clone();
            edit(&mut now);
            again(&now, 1001, false)
        };
        assert_eq!(moved(|s| s.boot = "b2".into()), Some("the machine booted"));
        assert_eq!(
            moved(|s| s.local_db = Some(11)),
            Some("pacman's local database changed")
        );
        assert_eq!(
            moved(|s| s.running_modules = None),
            Some("the kernel modules changed")
        );
        assert_eq!(
            moved(|s| s.modules = Some(21)),
            Some("the kernel modules changed")
        );
        let old = Some("the last look is an hour old");
        assert_eq!(again(&stamps, 1000 + LOOK_AT_LEAST_EVERY, false), old);
        assert_eq!(again(&stamps, 999, false), old, "the clock went back");
    }

    /// upkeep.json keeps the last look: its shape is pinned.
    #[test]
    fn a_look_keeps_its_json_shape() {
        let looked = Looked {
            at: 7,
            stamps: Stamps {
                boot: "b".into(),
                local_db: Some(1),
                modules: None,
                running_modules: Some(2),
            },
            needs: Needs::default(),
            stale: vec![
                StaleProcess {
                    pid: 1,
                    placed: Placement::Manager,
                },
                StaleProcess {
                    pid: 9,
                    placed: Placement::Unit("a.service".into()),
                },
                StaleProcess {
                    pid: 8,
                    placed: Placement::None,
                },
            ],
        };
        let text = serde_json::to_string(&looked).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"at":7,"stamps":{"boot":"b","local_db":1,"modules":null,"running_modules":2},"#,
                r#""needs":{"reboot_required":null,"restart_required":[],"reexec_required":false},"#,
                r#""stale":[{"pid":1,"placed":"manager"},{"pid":9,"placed":{"unit":"a.service"}},"#,
                r#"{"pid":8,"placed":"none"}]}"#
            )
        );
        assert_eq!(serde_json::from_str::<Looked>(&text).unwrap(), looked);
    }

    #[test]
    fn needs_keep_their_json_shape() {
        let needs = Needs {
            reboot: Some("why".into()),
            restart: vec!["a.service".into()],
            reexec: true,
        };
        assert_eq!(
            serde_json::to_string(&needs).unwrap(),
            r#"{"reboot_required":"why","restart_required":["a.service"],"reexec_required":true}"#
        );
        assert_eq!(
            serde_json::from_str::<Needs>("{}").unwrap(),
            Needs::default()
        );
    }
}
