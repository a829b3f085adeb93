//! File operations relative to an open directory, for the files kind and the store alike. Paths are
//! walked one component at a time with `O_NOFOLLOW`, so a symlink anywhere below the starting
//! directory is refused rather than followed, and every replacement is atomic and durable: a temp
//! file beside the target, fsync, rename over it, fsync the directory.

use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What a name in a directory is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Other,
}

impl FileType {
    pub fn describe(self) -> &'static str {
        match self {
            FileType::Regular => "a regular file",
            FileType::Directory => "a directory",
            FileType::Symlink => "a symlink",
            FileType::Other => "a special file",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub file_type: FileType,
    /// Permission bits, including setuid/setgid/sticky (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Hard links to it (`st_nlink`): more than one, and a change in place would reach the
    /// others.
    pub links: u64,
}

/// How long before an observation a file must have last changed for its stamp to be trusted.
/// A change within the same tick of the file clock as the host's read would keep the stamp the
/// host recorded (git's "racy" case), so such a stamp is not kept. Filesystems with nanosecond
/// timestamps tick with the kernel's coarse clock (at most 10 ms); a stamp whose nanoseconds are
/// both zero is taken to come from a filesystem that keeps whole seconds (or two, as FAT).
const RACY_NS: i64 = 20_000_000;
const RACY_WHOLE_SECONDS_NS: i64 = 2_000_000_000;

/// Whether a file with `stamp`, looked at by an observation that began when the file clock read
/// `observed_from_ns` (`fsutil::file_clock_now_ns`), can be trusted by its stamp from now on: it
/// last changed clearly before that, so any later change gets another ctime.
pub fn is_cacheable(stamp: &Stamp, observed_from_ns: i64) -> bool {
    let whole_seconds = stamp.ctime_ns % 1_000_000_000 == 0 && stamp.mtime_ns % 1_000_000_000 == 0;
    let margin = match whole_seconds {
        true => RACY_WHOLE_SECONDS_NS,
        false => RACY_NS,
    };
    let cutoff = observed_from_ns.saturating_sub(margin);
    stamp.ctime_ns < cutoff && stamp.mtime_ns < cutoff
}

/// Everything `fstatat` says of a file that changes when its content or attributes do, as git's
/// index keeps it: no user process can set the ctime, so any write, chmod or chown changes the
/// stamp (see `store::FilesIndex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub device: u64,
    pub inode: u64,
    pub size: u64,
    /// The whole `st_mode`: type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Unix nanoseconds.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// The time the kernel stamps files with (`CLOCK_REALTIME_COARSE`), in unix nanoseconds: a file
/// changed from now on gets a ctime at least this.
pub fn file_clock_now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Cannot fail for a valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec.saturating_mul(1_000_000_000) + ts.tv_nsec
}

/// A file's identity and modification time (unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    pub device: u64,
    pub inode: u64,
    pub modified: i64,
}

/// What is at a name, found without following it: a symlink is reported with its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Nothing,
    File(Stat, Vec<u8>),
    Link(PathBuf),
}

/// Why a path could not be walked: names the offending component.
#[derive(Debug)]
pub enum WalkError {
    /// A component is a symlink or not a directory (for `read_below`, the file itself a
    /// symlink); mesh-host never follows symlinks.
    NotADirectory {
        path: PathBuf,
        found: FileType,
    },
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// A directory on the way is the `Fence`'s: the host's own store.
    Fenced {
        path: PathBuf,
        store: PathBuf,
    },
}

/// A directory no walk may enter, known by device and inode, so no spelling of a path reaches
/// it (a symlinked or bind-mounted parent, a `--root` that holds it): the host's own store.
#[derive(Debug, Clone)]
pub struct Fence {
    pub device: u64,
    pub inode: u64,
    /// How the host names it, for the error.
    pub path: PathBuf,
}

impl Fence {
    /// The fence around directory `dir`, opened at `path`.
    pub fn around(dir: &Dir, path: &Path) -> io::Result<Fence> {
        let stamp = dir.stamp()?;
        Ok(Fence {
            device: stamp.device,
            inode: stamp.inode,
            path: path.to_path_buf(),
        })
    }

    /// Refuses `dir`, walked to at `at`, when it is the fenced directory: asked of the open
    /// directory itself, so nothing swapped in after a look gets past.
    fn check(&self, dir: &Dir, at: &Path) -> Result<(), WalkError> {
        let stamp = dir.stamp().map_err(|error| WalkError::Io {
            path: at.to_path_buf(),
            error,
        })?;
        match (stamp.device, stamp.inode) == (self.device, self.inode) {
            true => Err(WalkError::Fenced {
                path: at.to_path_buf(),
                store: self.path.clone(),
            }),
            false => Ok(()),
        }
    }
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::NotADirectory {
                path,
                found: FileType::Symlink,
            } => write!(
                f,
                "{} is a symlink; mesh-host never follows symlinks",
                path.display()
            ),
            WalkError::NotADirectory { path, found } => {
                write!(
                    f,
                    "{} is {}, not a directory",
                    path.display(),
                    found.describe()
                )
            }
            WalkError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            WalkError::Fenced { path, store } => write!(
                f,
                "{} is the host's own store {} (the same directory, by device and inode); \
                 mesh-host never writes into it",
                path.display(),
                store.display()
            ),
        }
    }
}

/// An open directory; the anchor of every operation here.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// A temp file written beside its target and not yet renamed over it (`Dir::write_temp_unsynced`).
#[derive(Debug)]
pub struct PendingWrite {
    tmp: CString,
    target: CString,
}

/// What every temp file mesh-host makes ends with: a declared file may not (`model::spec::files`),
/// so no declared name is ever one of the host's temps.
pub const TEMP_SUFFIX: &str = ".mesh-host.tmp";

/// `.NAME.mesh-host.tmp`: where an atomic write of store file `name` (a name the host chose) is
/// prepared.
fn temp_name(name: &OsStr) -> io::Result<CString> {
    temp_name_with(name, "")
}

/// `.HASH.mesh-host.tmp`, HASH the first 128 bits of the SHA-256 of `name` in hex: where a write
/// of a declared file `name` is prepared. 47 bytes whatever the name's length (a 255-byte name
/// has a temp within NAME_MAX), one per name (so a crash's is found again), and in the host's
/// own namespace, which no declared name may enter.
fn target_temp_name(name: &OsStr) -> CString {
    let digest = crate::util::codec::hex(&crate::util::codec::sha256(name.as_bytes())[..16]);
    let mut tmp_name = Vec::with_capacity(1 + 32 + TEMP_SUFFIX.len());
    tmp_name.push(b'.');
    tmp_name.extend_from_slice(digest.as_bytes());
    tmp_name.extend_from_slice(TEMP_SUFFIX.as_bytes());
    // Hex digits and a fixed suffix: no NUL.
    CString::new(tmp_name).unwrap_or_default()
}

/// `.NAME.PID-N.mesh-host.tmp`: a temp of `name` no other writer uses, this process's `N`th.
fn own_temp_name(name: &OsStr) -> io::Result<CString> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    temp_name_with(name, &format!(".{}-{n}", std::process::id()))
}

fn temp_name_with(name: &OsStr, writer: &str) -> io::Result<CString> {
    let mut tmp_name = Vec::from(b".".as_slice());
    tmp_name.extend_from_slice(name.as_bytes());
    tmp_name.extend_from_slice(writer.as_bytes());
    tmp_name.extend_from_slice(TEMP_SUFFIX.as_bytes());
    CString::new(tmp_name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// The pid in an `own_temp_name` of `name`, if `entry` is one.
fn own_temp_pid(name: &OsStr, entry: &OsStr) -> Option<u32> {
    let rest = entry.as_bytes().strip_prefix(b".")?;
    let rest = rest.strip_prefix(name.as_bytes())?.strip_prefix(b".")?;
    let writer = rest.strip_suffix(b".mesh-host.tmp")?;
    let (pid, n) = std::str::from_utf8(writer).ok()?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Runs `f` with `name` as a NUL-terminated string for a system call: in a buffer on the stack
/// when it is short (every name under 256 bytes, which is every name most filesystems allow), so
/// looking at thousands of files allocates nothing, and the buffer is never moved.
fn with_c_name<T>(
    name: &OsStr,
    f: impl FnOnce(*const libc::c_char) -> io::Result<T>,
) -> io::Result<T> {
    let bytes = name.as_bytes();
    if bytes.len() >= 256 {
        return f(cstring(name)?.as_ptr());
    }
    if bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"));
    }
    let mut buffer = [0u8; 256];
    buffer[..bytes.len()].copy_from_slice(bytes);
    f(buffer.as_ptr() as *const libc::c_char)
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Retries a system call interrupted by a signal.
fn retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        match check(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

impl Dir {
    /// Opens a directory the caller names (a root, the store); symlinks in it are the caller's choice.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = cstring(path.as_os_str())?;
        let fd = retry(|| unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// `openat` of `name` in this directory with `flags` (never creating), retried on EINTR.
    fn open_at(&self, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        let fd = with_c_name(name, |c| {
            retry(|| unsafe { libc::openat(self.raw(), c, flags) })
        })?;
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Opens child directory `name` without following a symlink.
    pub fn child(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        Ok(Dir { fd })
    }

    /// This directory's own `Stamp`.
    pub fn stamp(&self) -> io::Result<Stamp> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(self.raw(), &mut st) })?;
        Ok(stamp_of(&st))
    }

    /// `None` when `name` does not exist.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match with_c_name(name, |c| {
            retry(|| unsafe { libc::fstatat(self.raw(), c, &mut st, libc::AT_SYMLINK_NOFOLLOW) })
        }) {
            Ok(_) => Ok(Some(stat_of(&st))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `stat` with the file's `Stamp`, from the same one system call.
    pub fn stat_stamped(&self, name: &OsStr) -> io::Result<Option<(Stat, Stamp)>> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match with_c_name(name, |c| {
            retry(|| unsafe { libc::fstatat(self.raw(), c, &mut st, libc::AT_SYMLINK_NOFOLLOW) })
        }) {
            Ok(_) => Ok(Some((stat_of(&st), stamp_of(&st)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads regular file `name` (never through a symlink) with its metadata, refusing files larger
    /// than `max` bytes. `None` when it does not exist.
    pub fn read(&self, name: &OsStr, max: u64) -> io::Result<Option<(Stat, Vec<u8>)>> {
        let mut bytes = Vec::new();
        Ok(self
            .read_into(name, max, &mut bytes)?
            .map(|stat| (stat, bytes)))
    }

    /// Regular file `name` (never through a symlink) opened to be read as a stream, no further
    /// than `max` bytes (a larger file is refused), for a caller that parses as it reads rather
    /// than holding the whole file. `None` when it does not exist.
    pub fn open_reader(
        &self,
        name: &OsStr,
        max: u64,
    ) -> io::Result<Option<io::Take<std::fs::File>>> {
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(None);
        };
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        let stat = stat_of(&st);
        readable(&stat, max)?;
        Ok(Some(io::Read::take(std::fs::File::from(fd), max)))
    }

    /// `read` into `bytes` (cleared first), so a caller reading many files to compare them reuses
    /// one buffer instead of allocating one per file.
    pub fn read_into(
        &self,
        name: &OsStr,
        max: u64,
        bytes: &mut Vec<u8>,
    ) -> io::Result<Option<Stat>> {
        bytes.clear();
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(None);
        };
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        let stat = stat_of(&st);
        read_opened(fd, &stat, max, bytes)?;
        Ok(Some(stat))
    }

    /// `read_into` of a file the caller has just looked at (`stat`, from `Dir::stat`), without a
    /// second look through the opened file: one system call less a file when observing
    /// thousands. A file swapped meanwhile is still never read through a symlink (`O_NOFOLLOW`),
    /// a directory fails the read, and a longer file is read to its end within `max`; at worst
    /// the caller gets content newer than `stat`, which the next run sees. `false` when gone.
    pub fn read_after_stat(
        &self,
        name: &OsStr,
        stat: &Stat,
        max: u64,
        bytes: &mut Vec<u8>,
    ) -> io::Result<bool> {
        bytes.clear();
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(false);
        };
        read_opened(fd, stat, max, bytes)?;
        Ok(true)
    }

    /// Opens `name` for reading, never through a symlink and never blocking on a FIFO.
    fn open_to_read(&self, name: &OsStr) -> io::Result<Option<OwnedFd>> {
        match self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Which file `name` is (device and inode) and when it was last modified, without following
    /// a symlink: to tell whether some process has that very file open. `None` when absent.
    pub fn identity(&self, name: &OsStr) -> io::Result<Option<FileIdentity>> {
        let c = cstring(name)?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match retry(|| unsafe {
            libc::fstatat(self.raw(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
        }) {
            Ok(_) => Ok(Some(FileIdentity {
                device: st.st_dev,
                inode: st.st_ino,
                modified: st.st_mtime,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Where symlink `name` points (read, never followed); `None` when it does not exist.
    pub fn read_link(&self, name: &OsStr) -> io::Result<Option<PathBuf>> {
        let c = cstring(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        let n = unsafe {
            libc::readlinkat(
                self.raw(),
                c.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound => Ok(None),
                _ => Err(e),
            };
        }
        buf.truncate(n as usize);
        Ok(Some(PathBuf::from(OsStr::from_bytes(&buf))))
    }

    /// What is at `name`: a regular file read (within `max` bytes, as `read`), a symlink's target
    /// (never followed), or nothing. Anything else (a directory, a device) is an error.
    pub fn read_entry(&self, name: &OsStr, max: u64) -> io::Result<Found> {
        match self.stat(name)? {
            None => Ok(Found::Nothing),
            Some(st) if st.file_type == FileType::Symlink => {
                Ok(self.read_link(name)?.map_or(Found::Nothing, Found::Link))
            }
            Some(_) => Ok(self
                .read(name, max)?
                .map_or(Found::Nothing, |(st, bytes)| Found::File(st, bytes))),
        }
    }

    /// Creates child directory `name` with exactly `mode` (set after creation, so the umask never
    /// decides it); `Ok(false)` when it already existed, whose mode is left as it is.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<bool> {
        let c = cstring(name)?;
        match retry(|| unsafe { libc::mkdirat(self.raw(), c.as_ptr(), mode as libc::mode_t) }) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        let created = self.child(name)?;
        check(unsafe { libc::fchmod(created.raw(), mode as libc::mode_t) })?;
        Ok(true)
    }

    /// `mkdir`, then, when it created the directory, fsyncs this one so the new entry survives a
    /// crash: the store's subdirectories, and directories made outside a target root.
    pub fn mkdir_durable(&self, name: &OsStr, mode: u32) -> io::Result<bool> {
        let created = self.mkdir(name, mode)?;
        if created {
            self.sync()?;
        }
        Ok(created)
    }

    /// Replaces `name` atomically and durably with `bytes`, `mode` and, if given, `owner` (uid, gid),
    /// all set on the temp file before the rename so the target never has the wrong attributes.
    pub fn write_atomic(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        self.write_atomic_unsynced(name, bytes, mode, owner)?;
        self.sync()
    }

    /// `write_atomic` of what `fill` writes, streamed to the temp file through a buffer: a large
    /// store file (the ledger, the declaration in force) is never built whole in memory first.
    pub fn write_atomic_streamed(
        &self,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.write_streamed(temp_name(name)?, name, mode, fill)
    }

    /// `write_atomic_streamed` through a temp file of this writer's own (`own_temp_name`), for a
    /// file written by writers that do not exclude each other (the files index, written by runs
    /// under the store's lock and by checks without it): one writer's temp is never removed or
    /// renamed by another, the last rename wins. A crash leaves the temp, for the store to remove
    /// once its process is gone (`own_temps`).
    pub fn write_atomic_streamed_own(
        &self,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.write_streamed(own_temp_name(name)?, name, mode, fill)
    }

    fn write_streamed(
        &self,
        tmp: CString,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let pending = self.write_temp(tmp, name, mode, None, true, |file| {
            let mut out = io::BufWriter::with_capacity(64 * 1024, file);
            fill(&mut out)?;
            io::Write::flush(&mut out)
        })?;
        self.rename_pending(pending)?;
        self.sync()
    }

    /// The temps of `name` writers made with `write_atomic_streamed_own`, with each writer's pid:
    /// one whose process is gone was left by a crash.
    pub fn own_temps(&self, name: &OsStr) -> io::Result<Vec<(OsString, u32)>> {
        let names = self.names_where(|entry| own_temp_pid(name, entry).is_some())?;
        Ok(names
            .into_iter()
            .filter_map(|entry| {
                let pid = own_temp_pid(name, &entry)?;
                Some((entry, pid))
            })
            .collect())
    }

    /// `write_atomic` whose rename is durable only once the caller syncs this directory: many
    /// files written into one directory then cost one directory fsync, not one each. The file's
    /// own bytes are durable before the rename, so the name never points at unwritten data.
    pub fn write_atomic_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        self.write_temp_then_rename(name, mode, owner, |mut file| {
            io::Write::write_all(&mut file, bytes)
        })
    }

    /// `write_atomic` with no fsync at all: readers see the old file or the new one whole, but a
    /// crash may lose the write or leave the file empty. For store files whose loss costs nothing
    /// a person needs (no-op runs, caches), which a reader that cannot parse takes as absent.
    pub fn write_atomic_volatile(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        let pending = self.write_temp(temp_name(name)?, name, mode, None, false, |mut file| {
            io::Write::write_all(&mut file, bytes)
        })?;
        self.rename_pending(pending)
    }

    /// The temp file beside `name`, filled by `fill`, given its attributes, synced and renamed
    /// over `name`; removed again on any failure.
    fn write_temp_then_rename(
        &self,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
        fill: impl FnOnce(&std::fs::File) -> io::Result<()>,
    ) -> io::Result<()> {
        let pending = self.write_temp(temp_name(name)?, name, mode, owner, true, fill)?;
        self.rename_pending(pending)
    }

    /// The first half of an atomic write: the temp file beside `name`, filled by `fill` and given
    /// its attributes, fsynced when `sync` is set. Without it, the caller makes the data durable
    /// for many files at once (`sync_filesystem`) before any of them is renamed.
    fn write_temp(
        &self,
        tmp: CString,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
        sync: bool,
        fill: impl FnOnce(&std::fs::File) -> io::Result<()>,
    ) -> io::Result<PendingWrite> {
        let target = cstring(name)?;
        // A temp file left by a crash is ours: remove it so O_EXCL can create a fresh one.
        let _ = retry(|| unsafe { libc::unlinkat(self.raw(), tmp.as_ptr(), 0) });
        // Created with no permission at all (whatever the umask), then given its owner and its
        // exact mode, and only then filled: a secret file is never readable by anyone its
        // declaration does not allow, not even while it is written.
        let fd = retry(|| unsafe {
            libc::openat(
                self.raw(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0 as libc::c_uint,
            )
        })?;
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let chmod = || check(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) });
        let result = (|| {
            if let Some((uid, gid)) = owner {
                check(unsafe { libc::fchown(file.as_raw_fd(), uid, gid) })?;
            }
            // After fchown, which clears setuid/setgid bits.
            chmod()?;
            fill(&file)?;
            // A write by a process without CAP_FSETID clears setuid/setgid bits again.
            if mode & 0o6000 != 0 {
                chmod()?;
            }
            if sync {
                file.sync_all()?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(PendingWrite { tmp, target }),
            Err(e) => {
                let _ = unsafe { libc::unlinkat(self.raw(), tmp.as_ptr(), 0) };
                Err(e)
            }
        }
    }

    /// `write_atomic_unsynced` in two halves for writing many files: this one leaves the temp
    /// file beside `name` written but neither synced nor renamed. Once every file is written,
    /// `sync_filesystem` makes all their data durable at once (one call, not an fsync each), and
    /// only then does `rename_pending` put each in place, so a name never points at unwritten
    /// data. A crash before the rename leaves the old file and a temp that the next write of
    /// `name`, or `remove_temp`, removes.
    pub fn write_temp_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<PendingWrite> {
        self.write_temp(
            target_temp_name(name),
            name,
            mode,
            owner,
            false,
            |mut file| io::Write::write_all(&mut file, bytes),
        )
    }

    /// `write_atomic_unsynced` of a declared file with its extended attributes (an original put
    /// back): through its own temp name (`target_temp_name`), which fits whatever the name's
    /// length. The attributes this process may not set are named in what it returns.
    pub fn replace_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        xattrs: &[Xattr],
    ) -> io::Result<Vec<String>> {
        let mut refused = Vec::new();
        let tmp = target_temp_name(name);
        let pending = self.write_temp(tmp, name, mode, owner, true, |mut file| {
            io::Write::write_all(&mut file, bytes)?;
            refused = set_xattrs(file, xattrs);
            Ok(())
        })?;
        self.rename_pending(pending)?;
        Ok(refused)
    }

    /// Renames a written temp file over its target (removing it if that fails); durable once the
    /// caller syncs this directory.
    pub fn rename_pending(&self, pending: PendingWrite) -> io::Result<()> {
        let result = retry(|| unsafe {
            libc::renameat(
                self.raw(),
                pending.tmp.as_ptr(),
                self.raw(),
                pending.target.as_ptr(),
            )
        });
        if result.is_err() {
            let _ = unsafe { libc::unlinkat(self.raw(), pending.tmp.as_ptr(), 0) };
        }
        result.map(drop)
    }

    /// Removes a written temp file instead of renaming it.
    pub fn discard_pending(&self, pending: PendingWrite) {
        let _ = unsafe { libc::unlinkat(self.raw(), pending.tmp.as_ptr(), 0) };
    }

    /// Removes the temp file a crash may have left beside declared file `name` (nothing when
    /// there is none), and the one an earlier version named `.NAME.mesh-host.tmp`.
    pub fn remove_temp(&self, name: &OsStr) -> io::Result<()> {
        let temps = [Some(target_temp_name(name)), temp_name(name).ok()];
        for tmp in temps.into_iter().flatten() {
            match retry(|| unsafe { libc::unlinkat(self.raw(), tmp.as_ptr(), 0) }) {
                Ok(_) => {}
                // ENAMETOOLONG: an earlier version could not have written it either.
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ENAMETOOLONG) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Flushes every written file of this directory's filesystem to disk (`syncfs`).
    pub fn sync_filesystem(&self) -> io::Result<()> {
        check(unsafe { libc::syncfs(self.raw()) }).map(drop)
    }

    /// The device this directory is on: which filesystem `sync_filesystem` flushes.
    pub fn device(&self) -> io::Result<u64> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(self.raw(), &mut st) })?;
        Ok(st.st_dev)
    }

    /// The bytes an unprivileged writer may still use on this directory's filesystem (`fstatvfs`:
    /// blocks available times the fragment size).
    pub fn free_space(&self) -> io::Result<u64> {
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstatvfs(self.raw(), &mut st) })?;
        Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }

    /// Sets mode and owner of an existing regular file, without following a symlink: in place
    /// when `name` is its only link; otherwise on a copy renamed over `name` (synced; durable
    /// once the caller syncs this directory), so its other links, which may be anywhere on the
    /// filesystem (the store's key), keep theirs. Judged on the file opened, so a link made
    /// since it was observed is never changed either.
    pub fn set_attributes(
        &self,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if st.st_nlink > 1 {
            readable(&stat_of(&st), u64::MAX)?;
            let mut source = std::fs::File::from(fd);
            let tmp = target_temp_name(name);
            let pending = self.write_temp(tmp, name, mode, owner, true, |mut file| {
                io::copy(&mut source, &mut file).map(drop)
            })?;
            return self.rename_pending(pending);
        }
        if let Some((uid, gid)) = owner {
            check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
        }
        check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) })?;
        check(unsafe { libc::fsync(fd.as_raw_fd()) })?;
        Ok(())
    }

    /// The extended attributes of regular file `name` (never through a symlink), names with
    /// their values: `user.*`, `trusted.*`, `security.*` (file capabilities, SELinux labels) and
    /// POSIX ACLs (`system.posix_acl_access`), as far as this process may read them. None on a
    /// filesystem without them.
    pub fn xattrs(&self, name: &OsStr) -> io::Result<Vec<Xattr>> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )?;
        let fd = fd.as_raw_fd();
        let unsupported = |e: &io::Error| e.raw_os_error() == Some(libc::ENOTSUP);
        // Each asked for its size first; grown and asked again if it grew meanwhile (ERANGE).
        let sized = |get: &dyn Fn(&mut [u8]) -> isize| -> io::Result<Vec<u8>> {
            loop {
                let size = check_size(get(&mut []))?;
                let mut buf = vec![0u8; size];
                match check_size(get(&mut buf)) {
                    Ok(n) => {
                        buf.truncate(n);
                        return Ok(buf);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let list =
            match sized(&|buf| unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) })
            {
                Ok(list) => list,
                Err(e) if unsupported(&e) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
        let mut found = Vec::new();
        for attr in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let c = CString::new(attr)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in a name"))?;
            match sized(&|buf| unsafe {
                libc::fgetxattr(fd, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            }) {
                Ok(value) => found.push(Xattr {
                    name: attr.to_vec(),
                    value,
                }),
                // Removed meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Renames `from` to `to` in this directory (replacing `to`); `Ok(false)` when `from` is
    /// absent. Durable once the caller syncs this directory.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<bool> {
        let (from, to) = (cstring(from)?, cstring(to)?);
        match retry(|| unsafe {
            libc::renameat(self.raw(), from.as_ptr(), self.raw(), to.as_ptr())
        }) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes non-directory `name` (a symlink itself, never its target); `Ok(false)` if absent.
    pub fn remove(&self, name: &OsStr) -> io::Result<bool> {
        self.unlink(name, 0)
    }

    /// Removes empty directory `name`; `Ok(false)` if absent.
    pub fn rmdir(&self, name: &OsStr) -> io::Result<bool> {
        self.unlink(name, libc::AT_REMOVEDIR)
    }

    fn unlink(&self, name: &OsStr, flags: libc::c_int) -> io::Result<bool> {
        let c = cstring(name)?;
        match retry(|| unsafe { libc::unlinkat(self.raw(), c.as_ptr(), flags) }) {
            Ok(_) => {
                self.sync()?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The names in this directory (not `.` and `..`) that `keep` accepts, read in one pass:
    /// cheaper than asking after each of many names that are usually absent, and only the names
    /// kept are copied.
    pub fn names_where(&self, keep: impl Fn(&OsStr) -> bool) -> io::Result<Vec<OsString>> {
        // fdopendir takes the descriptor it is given: give it a fresh one of this same directory.
        let fd = retry(|| unsafe {
            libc::openat(
                self.raw(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        let stream = unsafe { libc::fdopendir(fd) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let mut names = Vec::new();
        let result = loop {
            // readdir returns NULL both at the end and on error; errno tells them apart.
            unsafe { *libc::__errno_location() = 0 };
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                break if e.raw_os_error() == Some(0) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let name = OsStr::from_bytes(name.to_bytes());
            if name != "." && name != ".." && keep(name) {
                names.push(name.to_os_string());
            }
        };
        unsafe { libc::closedir(stream) };
        result.map(|()| names)
    }

    /// Makes renames and removals in this directory durable.
    pub fn sync(&self) -> io::Result<()> {
        check(unsafe { libc::fsync(self.raw()) }).map(drop)
    }

    /// Gives this directory, and what is in it, the owner `uid` and group `gid` where they have
    /// another, never following a symlink: every name in it is looked at, and a directory's
    /// contents too when it or one above it had another owner (a `chown -R`), so a directory of
    /// many files with the right owner costs one look. A file with other hard links (which may be
    /// anywhere) gets it on a copy (`set_attributes`), so they keep theirs. The paths changed
    /// (below this directory) with the owner each had.
    pub fn enforce_owner(&self, uid: u32, gid: u32) -> io::Result<Vec<(PathBuf, u32, u32)>> {
        let mut changed = Vec::new();
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(self.raw(), &mut st) })?;
        let deep = (st.st_uid, st.st_gid) != (uid, gid);
        if deep {
            check(unsafe { libc::fchown(self.raw(), uid, gid) })?;
            changed.push((PathBuf::from("."), st.st_uid, st.st_gid));
        }
        self.enforce_owner_below(Path::new(""), uid, gid, deep, &mut changed)?;
        Ok(changed)
    }

    fn enforce_owner_below(
        &self,
        at: &Path,
        uid: u32,
        gid: u32,
        deep: bool,
        changed: &mut Vec<(PathBuf, u32, u32)>,
    ) -> io::Result<()> {
        for name in self.names_where(|_| true)? {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            let found = with_c_name(&name, |c| {
                retry(|| unsafe {
                    libc::fstatat(self.raw(), c, &mut st, libc::AT_SYMLINK_NOFOLLOW)
                })
            });
            match found {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            let wrong = (st.st_uid, st.st_gid) != (uid, gid);
            // A name a writer removed meanwhile (the outbox, written without the lock) is skipped.
            let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
            let kind = st.st_mode & libc::S_IFMT;
            if wrong && kind != libc::S_IFDIR && st.st_nlink > 1 {
                // Another link, anywhere on the filesystem, would change owner too: a regular
                // file gets it on a copy renamed over this name; anything else is left as it is.
                if kind == libc::S_IFREG {
                    match self.set_attributes(&name, st.st_mode & 0o7777, Some((uid, gid))) {
                        Ok(()) => changed.push((at.join(&name), st.st_uid, st.st_gid)),
                        Err(e) if gone(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            if wrong {
                match with_c_name(&name, |c| {
                    retry(|| unsafe {
                        libc::fchownat(self.raw(), c, uid, gid, libc::AT_SYMLINK_NOFOLLOW)
                    })
                }) {
                    Ok(_) => changed.push((at.join(&name), st.st_uid, st.st_gid)),
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(e),
                }
            }
            if (deep || wrong) && kind == libc::S_IFDIR {
                match self.child(&name) {
                    Ok(dir) => dir.enforce_owner_below(&at.join(&name), uid, gid, true, changed)?,
                    Err(e) if gone(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Gives this directory exactly the permission bits `mode`; the bits it had if they differed.
    pub fn enforce_mode(&self, mode: u32) -> io::Result<Option<u32>> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(self.raw(), &mut st) })?;
        let had = st.st_mode & 0o7777;
        if had == mode {
            return Ok(None);
        }
        check(unsafe { libc::fchmod(self.raw(), mode as libc::mode_t) })?;
        Ok(Some(had))
    }
}

/// An extended attribute: its whole name (`user.x`, `security.capability`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// Sets `xattrs` on an open file; the names of those this process may not set (a
/// `security.*` one without the privilege, any on a filesystem without them), for the caller to
/// say. File capabilities go last: a change of owner, or a write, clears them.
fn set_xattrs(file: &std::fs::File, xattrs: &[Xattr]) -> Vec<String> {
    let mut refused = Vec::new();
    let capability = |x: &&Xattr| x.name == b"security.capability";
    let ordered = xattrs.iter().filter(|x| !capability(x));
    for xattr in ordered.chain(xattrs.iter().filter(capability)) {
        let named = String::from_utf8_lossy(&xattr.name).into_owned();
        let Ok(c) = CString::new(xattr.name.clone()) else {
            refused.push(named);
            continue;
        };
        let set = check(unsafe {
            libc::fsetxattr(
                file.as_raw_fd(),
                c.as_ptr(),
                xattr.value.as_ptr().cast(),
                xattr.value.len(),
                0,
            )
        });
        if let Err(e) = set {
            refused.push(format!("{named} ({e})"));
        }
    }
    refused
}

fn check_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Refuses a file that is not regular or is larger than `max`, before it is read.
fn readable(stat: &Stat, max: u64) -> io::Result<()> {
    if stat.file_type != FileType::Regular {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is {}", stat.file_type.describe()),
        ));
    }
    if stat.size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is {} bytes, more than the limit of {max}", stat.size),
        ));
    }
    Ok(())
}

/// Reads an opened file of `stat`'s type and size into `bytes` (empty), refusing one that is not
/// regular or is larger than `max`.
fn read_opened(fd: OwnedFd, stat: &Stat, max: u64, bytes: &mut Vec<u8>) -> io::Result<()> {
    readable(stat, max)?;
    let mut file = std::fs::File::from(fd);
    // One read of the size the stat gave, with no second read to find the end: on a no-op over
    // thousands of files that probe is a system call per file. A file that grew meanwhile
    // (the read filled the extra byte) is read on to its end, within the limit.
    let size = stat.size as usize;
    bytes.resize(size + 1, 0);
    let mut filled = 0;
    loop {
        match io::Read::read(&mut file, &mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if (size > 0 && filled == size) || filled == bytes.len() {
            break;
        }
    }
    bytes.truncate(filled);
    if filled > size {
        let rest = (max + 1).saturating_sub(filled as u64);
        io::Read::read_to_end(&mut io::Read::take(&mut file, rest), bytes)?;
    }
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("grew past the limit of {max} bytes while being read"),
        ));
    }
    Ok(())
}

fn stat_of(st: &libc::stat) -> Stat {
    let file_type = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileType::Regular,
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        _ => FileType::Other,
    };
    Stat {
        file_type,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        links: st.st_nlink,
    }
}

fn stamp_of(st: &libc::stat) -> Stamp {
    let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
    Stamp {
        device: st.st_dev,
        inode: st.st_ino,
        size: st.st_size as u64,
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
        ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
    }
}

/// The parent directory of an absolute, normalised `path` below `root`, and the final name.
/// With `create`, missing directories are made (mode 0755) and returned, outermost first, as
/// absolute paths; otherwise a missing directory gives `Ok(None)`.
pub struct Parent {
    pub dir: Dir,
    pub name: std::ffi::OsString,
    pub created: Vec<PathBuf>,
}

pub fn walk_to_parent(root: &Dir, path: &Path, create: bool) -> Result<Option<Parent>, WalkError> {
    walk_to_parent_fenced(root, path, create, None)
}

/// `walk_to_parent` that refuses to enter `fence`'s directory (the root included) at any
/// component.
pub fn walk_to_parent_fenced(
    root: &Dir,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Parent>, WalkError> {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = names.split_last() else {
        return Err(WalkError::Io {
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"),
        });
    };
    let mut current = PathBuf::from("/");
    let mut created = Vec::new();
    let mut dir = root.child(OsStr::new(".")).map_err(|error| WalkError::Io {
        path: current.clone(),
        error,
    });
    for name in dirs {
        let parent = dir?;
        if let Some(fence) = fence {
            fence.check(&parent, &current)?;
        }
        current.push(name);
        let io_error = |error| WalkError::Io {
            path: current.clone(),
            error,
        };
        match parent.stat(name).map_err(io_error)? {
            Some(st) if st.file_type == FileType::Directory => {}
            Some(st) => {
                return Err(WalkError::NotADirectory {
                    path: current,
                    found: st.file_type,
                })
            }
            None if !create => return Ok(None),
            None => {
                if parent.mkdir(name, 0o755).map_err(io_error)? {
                    parent.sync().map_err(io_error)?;
                    created.push(current.clone());
                }
            }
        }
        dir = parent
            .child(name)
            .map_err(|error| match error.raw_os_error() {
                // Replaced by a symlink between the stat and the open: still never followed.
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => WalkError::NotADirectory {
                    path: current.clone(),
                    found: FileType::Symlink,
                },
                _ => WalkError::Io {
                    path: current.clone(),
                    error,
                },
            });
    }
    let dir = dir?;
    if let Some(fence) = fence {
        fence.check(&dir, &current)?;
    }
    Ok(Some(Parent {
        dir,
        name: last.to_os_string(),
        created,
    }))
}

/// Opens directory `path` below `root` the same way as `walk_to_parent`, never through a
/// symlink; with `create`, missing directories are made (mode 0755). `Ok(None)` when it is
/// missing and not to be created.
pub fn walk_to_dir(root: &Dir, path: &Path, create: bool) -> Result<Option<Dir>, WalkError> {
    walk_to_dir_fenced(root, path, create, None)
}

/// `walk_to_dir` that refuses to enter `fence`'s directory at any component, the last included.
fn walk_to_dir_fenced(
    root: &Dir,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Dir>, WalkError> {
    let Some(parent) = walk_to_parent_fenced(root, path, create, fence)? else {
        return Ok(None);
    };
    let io_error = |error| WalkError::Io {
        path: path.to_path_buf(),
        error,
    };
    match parent.dir.stat(&parent.name).map_err(io_error)? {
        Some(st) if st.file_type == FileType::Directory => {}
        Some(st) => {
            return Err(WalkError::NotADirectory {
                path: path.to_path_buf(),
                found: st.file_type,
            })
        }
        None if !create => return Ok(None),
        None => {
            if parent.dir.mkdir(&parent.name, 0o755).map_err(io_error)? {
                parent.dir.sync().map_err(io_error)?;
            }
        }
    }
    let dir = (parent.dir.child(&parent.name)).map_err(|error| match error.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => WalkError::NotADirectory {
            path: path.to_path_buf(),
            found: FileType::Symlink,
        },
        _ => io_error(error),
    })?;
    if let Some(fence) = fence {
        fence.check(&dir, path)?;
    }
    Ok(Some(dir))
}

/// Opens the target root `root`, as the walks below start from it.
fn open_root(root: &Path) -> Result<Dir, WalkError> {
    Dir::open(root).map_err(|error| WalkError::Io {
        path: root.to_path_buf(),
        error,
    })
}

/// `walk_to_dir` from the target root at `root`: directory `path` (absolute, as seen on the
/// target) opened one component at a time, never through a symlink; with `create`, missing
/// directories are made (0755), never in `fence`'s directory, nor it. `Ok(None)` when it is
/// missing and not to be created.
pub fn open_dir_below(
    root: &Path,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Dir>, WalkError> {
    walk_to_dir_fenced(&open_root(root)?, path, create, fence)
}

/// Reads regular file `path` (absolute, as seen on the target) below the target root at `root`,
/// within `max` bytes, never through a symlink: one anywhere on the way, or the file itself, is
/// refused and named. `Ok(None)` when it or a directory on the way is missing.
pub fn read_below(
    root: &Path,
    path: &Path,
    max: u64,
) -> Result<Option<(Stat, Vec<u8>)>, WalkError> {
    let Some(parent) = walk_to_parent(&open_root(root)?, path, false)? else {
        return Ok(None);
    };
    parent
        .dir
        .read(&parent.name, max)
        .map_err(|error| match error.raw_os_error() {
            // O_NOFOLLOW's answer when the file itself is a symlink.
            Some(libc::ELOOP) => WalkError::NotADirectory {
                path: path.to_path_buf(),
                found: FileType::Symlink,
            },
            _ => WalkError::Io {
                path: path.to_path_buf(),
                error,
            },
        })
}

/// Creates `path` and any missing parents, each with exactly `mode` (never the umask's) and
/// durably (its parent fsynced), for directories the host makes outside a target root (its config
/// directory, the store's parents). Existing ones are left as they are; symlinks on the way are
/// followed, as for any path an operator names.
pub fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = path;
    while !current.as_os_str().is_empty() && std::fs::symlink_metadata(current).is_err() {
        missing.push(current);
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    for dir in missing.into_iter().rev() {
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            continue;
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        Dir::open(parent)?.mkdir_durable(name, mode)?;
    }
    Ok(())
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

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
                        let mut st: libc::stat = unsafe { std::mem::zeroed() };
                        check(unsafe { libc::fstat(file.as_raw_fd(), &mut st) })?;
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
        let text = |name: &str| {
            with_c_name(OsStr::new(name), |c| {
                Ok(unsafe { std::ffi::CStr::from_ptr(c) }.to_bytes().to_vec())
            })
        };
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
        assert!(
            matches!(entry("file").unwrap(), Found::File(st, b) if st.size == 5 && b == b"bytes")
        );
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
}
