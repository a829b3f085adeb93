//! Each system call fsutil makes, as a safe function: the only `unsafe` of fsutil. Names are
//! `&CStr` and descriptors `BorrowedFd`, so a caller cannot hand the kernel a string without its
//! NUL or a descriptor it has closed; every buffer is a slice whose length goes with its pointer.

use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: isize) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
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

/// A descriptor the kernel has just returned, owned from now on.
fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` is a descriptor open(2) or openat(2) has just returned (`check` let only a
    // non-negative one through): open, and owned by nothing else in this process.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `open(2)` of `path` with `flags` (never creating), retried on EINTR.
pub(super) fn open(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated and outlives the call; without O_CREAT no mode is read.
    retry(|| unsafe { libc::open(path.as_ptr(), flags) }).map(owned)
}

/// `openat(2)` of `name` in `dir` with `flags` and, when they create, `mode`; retried on EINTR.
pub(super) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and outlives the call; the mode is passed as the
    // variadic argument open(2) reads as an unsigned int when the flags create.
    retry(|| unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) })
        .map(owned)
}

/// `fstat(2)`.
pub(super) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable memory of the struct's size, which fstat fills on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat returned 0, so it wrote the whole struct.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(2)` of `name` in `dir`, never following a symlink; retried on EINTR.
#[inline]
pub(super) fn lstatat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: `name` is NUL-terminated and `st` writable memory of the struct's size; both
    // outlive the call.
    retry(|| unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat returned 0, so it wrote the whole struct.
    Ok(unsafe { st.assume_init() })
}

/// `fstatvfs(3)`.
pub(super) fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<libc::statvfs> {
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `st` is writable memory of the struct's size, which fstatvfs fills on success.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstatvfs returned 0, so it wrote the whole struct.
    Ok(unsafe { st.assume_init() })
}

/// `fsync(2)`.
pub(super) fn fsync(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: no pointer is passed; a bad descriptor is an error, not undefined behaviour.
    check(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
}

/// `syncfs(2)`.
pub(super) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: no pointer is passed; a bad descriptor is an error, not undefined behaviour.
    check(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

/// `fchmod(2)`.
pub(super) fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: no pointer is passed; a bad descriptor is an error, not undefined behaviour.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
}

/// `fchown(2)`.
pub(super) fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: no pointer is passed; a bad descriptor is an error, not undefined behaviour.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }).map(drop)
}

/// `fchownat(2)` of `name` in `dir`, never following a symlink; retried on EINTR.
pub(super) fn lchownat(dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    retry(|| unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, flags) }).map(drop)
}

/// `mkdirat(2)`; retried on EINTR.
pub(super) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call.
    retry(|| unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
        .map(drop)
}

/// `unlinkat(2)` with `flags` (0, or `AT_REMOVEDIR`); retried on EINTR.
pub(super) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call.
    retry(|| unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat(2)` of `from` over `to`, both in `dir`; retried on EINTR.
pub(super) fn renameat(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> io::Result<()> {
    let dir = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated and outlive the call.
    retry(|| unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) }).map(drop)
}

/// `readlinkat(2)` into `buf`: the bytes it wrote (no NUL is added).
pub(super) fn readlinkat(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated; readlinkat writes at most `buf.len()` bytes into `buf`.
    check_size(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// `flistxattr(2)` into `buf` (empty: the size it needs).
pub(super) fn flistxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: flistxattr writes at most `buf.len()` bytes into `buf` (none when it is empty).
    check_size(unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `fgetxattr(2)` of `name` into `buf` (empty: the size it needs).
pub(super) fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated; fgetxattr writes at most `buf.len()` bytes into `buf`.
    check_size(unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// `fsetxattr(2)` of `name` to `value`.
pub(super) fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; fsetxattr reads `value.len()` bytes of `value`.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// The names in directory `dir` (not `.` and `..`) that `keep` accepts, through
/// `fdopendir(3)`/`readdir(3)` on a descriptor of its own.
pub(super) fn names_where(
    dir: BorrowedFd<'_>,
    keep: impl Fn(&OsStr) -> bool,
) -> io::Result<Vec<OsString>> {
    // fdopendir takes the descriptor it is given: give it a fresh one of this same directory.
    let fd = openat(
        dir,
        c".",
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is an open directory descriptor nothing else owns; the stream takes it.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // The stream did not take it: owned again, and closed on drop.
        drop(owned(raw));
        return Err(e);
    }
    let mut names = Vec::new();
    let result = loop {
        // readdir returns NULL both at the end and on error; errno tells them apart.
        // SAFETY: __errno_location is this thread's errno, always a valid pointer.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is the open, non-null stream fdopendir returned, used by this thread
        // alone and closed only below.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: a non-null entry from readdir is valid until the next readdir on `stream`, and
        // its `d_name` is NUL-terminated; the name is copied before that.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        let name = OsStr::from_bytes(name.to_bytes());
        if name != "." && name != ".." && keep(name) {
            names.push(name.to_os_string());
        }
    };
    // SAFETY: `stream` is open and closed once, here; no entry of it is used after.
    unsafe { libc::closedir(stream) };
    result.map(|()| names)
}

/// `clock_gettime(2)` of `CLOCK_REALTIME_COARSE`.
pub(super) fn realtime_coarse() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call cannot fail for this clock id.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts
}
