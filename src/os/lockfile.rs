//! Who is behind a lock file another program keeps (pacman's `db.lck`): the processes that have
//! that very file open, found in /proc, and whether the file predates this boot. A lock nobody
//! holds, or older than the boot, is stale: whoever made it is gone. Processes in another PID
//! namespace are not visible here; the boot test still holds for them.

use std::path::Path;

use crate::os::fsutil::FileIdentity;

/// A process that has the file open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub name: String,
}

/// Every process with `file` open, by any of its descriptors.
pub fn holders(file: &FileIdentity) -> Vec<Holder> {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for process in processes.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        // A process that ends meanwhile, or a descriptor closed meanwhile, is simply not counted.
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::metadata(fd.path()).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.dev() == file.device && m.ino() == file.inode
            })
        });
        if holds {
            let name = std::fs::read_to_string(process.path().join("comm")).unwrap_or_default();
            out.push(Holder {
                pid,
                name: name.trim().to_string(),
            });
        }
    }
    out
}

/// When this machine booted (unix seconds), from /proc/stat.
pub fn boot_time() -> Option<i64> {
    parse_boot_time(&std::fs::read_to_string(Path::new("/proc/stat")).ok()?)
}

/// The `btime` line of /proc/stat.
fn parse_boot_time(stat: &str) -> Option<i64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|t| t.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::fsutil::Dir;
    use crate::util::testutil::TempDir;
    use std::ffi::OsStr;

    #[test]
    fn parses_boot_time() {
        let stat = "cpu  1 2 3\nintr 5\nctxt 6\nbtime 1764576000\nprocesses 7\n";
        assert_eq!(parse_boot_time(stat), Some(1_764_576_000));
        assert_eq!(parse_boot_time("cpu 1\n"), None);
        assert!(boot_time().is_some_and(|t| t > 0));
    }

    #[test]
    fn finds_the_process_holding_a_file_open() {
        let tmp = TempDir::new("lockfile-holders");
        std::fs::write(tmp.path().join("db.lck"), "").unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let id = dir.identity(OsStr::new("db.lck")).unwrap().unwrap();
        assert!(holders(&id).is_empty());
        let open = std::fs::File::open(tmp.path().join("db.lck")).unwrap();
        let found = holders(&id);
        assert!(
            found.iter().any(|h| h.pid == std::process::id()),
            "{found:?}"
        );
        drop(open);
    }
}
