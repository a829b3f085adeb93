//! The operating system, as mesh-host uses it: files walked without following symlinks, the one
//! place processes are spawned, clocks and file descriptors, other processes and their locks,
//! accounts, this process and machine. Nothing here knows what a declaration is. The only
//! `unsafe` of the crate is here, each block with a `// SAFETY:` comment saying why it holds.

pub mod accounts;
pub mod alloc;
pub mod clock;
pub mod exec;
pub mod fsutil;
pub mod host;
pub mod inotify;
pub mod input;
pub mod lockfile;
pub mod process;
pub mod sys;
