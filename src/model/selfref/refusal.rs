//! What the self-refusal model refuses and why, typed: each variant names the resource's part
//! that reaches the host and the host's own thing it reaches. `Display` is the message people
//! read (the declaration's problem says "refused: MESSAGE; mesh-host never manages itself").

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

/// Why a declared resource would reach the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The host's own package.
    OwnPackage { package: String },
    /// The host's own service unit.
    OwnUnit { unit: String },
    /// An activation sibling of the host's service (`.socket`, `.timer`, `.path`).
    Activates { unit: String, service: String },
    /// A unit's content acts on the host's unit.
    Content(Acting),
    /// A unit whose name or content has PID 1 touch a host path (`pid1.rs`, in its words).
    UnitPath { unit: String, why: String },
    /// A file in the host's configuration directory.
    OwnConfig(PathBuf),
    /// The host's configuration or credential file itself.
    OwnConfigFile(PathBuf),
    /// A file in the host's store.
    OwnStore(PathBuf),
    /// The unit file of one of the host's units.
    OwnUnitFile { path: String, unit: String },
    /// A file in a directory systemd reads beside the host's unit: drop-ins or dependencies.
    UnitDir {
        path: String,
        dir: String,
        drop_ins: bool,
        unit: String,
    },
    /// A link to the host's unit in a dependency directory.
    UnitLink {
        path: String,
        unit: String,
        dir: String,
    },
    /// A file systemd or one of its generators reads, which has it act on the host.
    ReadBy {
        path: String,
        reader: Reader,
        why: Reason,
    },
    /// An entry of a `.wants/` (or `.requires/`, `.upholds/`) directory starting a unit that
    /// touches a host path.
    Starts {
        path: String,
        unit: String,
        why: String,
    },
    /// A container's volume.
    Volume { volume: String, why: Mount },
    /// A refusal of a secret's content: said with the secret's text withheld.
    Secret {
        refusal: Box<Refusal>,
        withheld: Vec<String>,
    },
}

/// What reads a file the host's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    UnitFile,
    Tmpfiles,
    FstabGenerator,
    CryptsetupGenerator,
}

/// Why what systemd reads acts on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Unit-file text acting on the host's unit.
    Acting(Acting),
    /// What PID 1, systemd-tmpfiles or a generator does to a host path, in their words
    /// (`pid1.rs`, `tmpfiles.rs`).
    Touches(String),
}

/// How unit-file text acts on one of the host's units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acting {
    /// Text systemd may read otherwise than it looks (`unitfile::unplain`).
    Unplain { line: usize, odd: &'static str },
    /// A directive (`at`: section, key, value and line) whose specifiers cannot be resolved
    /// here and could name the host's `unit`.
    Unresolved {
        at: String,
        unknown: Vec<String>,
        unit: String,
    },
    /// A directive naming the host's `unit`; `read_as`, the word systemd reads when it is not
    /// the value as written.
    Names {
        at: String,
        unit: String,
        read_as: Option<String>,
    },
}

/// How a container's mount reaches the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// A source with `..`, which cannot be resolved without following symlinks; `writes`, how
    /// it is mounted when that matters.
    Unresolvable {
        source: String,
        writes: Option<String>,
    },
    /// A source that is, holds or is inside one of the host's own paths, mounted `writes`.
    Protected {
        source: String,
        writes: String,
        relation: &'static str,
        path: String,
        what: &'static str,
    },
    /// `/proc` or a process's directory in it.
    Processes { source: String },
    /// procfs, sysfs or cgroupfs mounted read-write.
    KernelWritable { source: String },
    /// A directory of sockets handing out control of the host, or one above it.
    Sockets {
        source: String,
        relation: &'static str,
        dir: &'static str,
        what: &'static str,
    },
}

impl Refusal {
    /// This refusal of secret `content`, said with what it quotes of the content withheld
    /// (`exec::redact`): a refusal is shown and reported like any problem.
    pub fn of_secret(self, content: &[u8]) -> Refusal {
        let mut texts = BTreeSet::new();
        crate::model::fields::content_secrets(content, &mut texts);
        Refusal::Secret {
            refusal: Box::new(self),
            withheld: texts.into_iter().collect(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::OwnPackage { package } => write!(
                f,
                "{package} is the host's own package; the package manager upgrades it, not the mesh"
            ),
            Refusal::OwnUnit { unit } => write!(
                f,
                "{unit} is the host's own unit; nothing may enable, start, stop or replace it"
            ),
            Refusal::Activates { unit, service } => {
                write!(
                    f,
                    "{unit} is the host's own unit: by default it starts {service}"
                )
            }
            Refusal::Content(acting) => write!(f, "content: {acting}"),
            Refusal::UnitPath { unit, why } => write!(f, "{unit}: {why}"),
            Refusal::OwnConfig(dir) => {
                write!(f, "{} is the host's own configuration", dir.display())
            }
            Refusal::OwnConfigFile(file) => write!(
                f,
                "{} is the host's own configuration or credential file",
                file.display()
            ),
            Refusal::OwnStore(store) => write!(f, "{} is the host's own store", store.display()),
            Refusal::OwnUnitFile { path, unit } => write!(
                f,
                "{path} is the host's own unit {unit} (its unit file, read by systemd)"
            ),
            Refusal::UnitDir {
                path,
                dir,
                drop_ins,
                unit,
            } => {
                let what = if *drop_ins {
                    "drop-ins"
                } else {
                    "dependencies"
                };
                write!(
                    f,
                    "{path} is in {dir}/, where systemd reads {what} of the host's own unit {unit}"
                )
            }
            Refusal::UnitLink { path, unit, dir } => {
                write!(
                    f,
                    "{path} is a link to the host's own unit {unit} in {dir}/"
                )
            }
            Refusal::ReadBy { path, reader, why } => {
                write!(f, "{path} is read by {reader}: {why}")
            }
            Refusal::Starts { path, unit, why } => {
                write!(f, "{path} has systemd start {unit}: {why}")
            }
            Refusal::Volume { volume, why } => write!(f, "volume {volume:?}: {why}"),
            Refusal::Secret { refusal, withheld } => {
                f.write_str(&crate::os::exec::redact(&refusal.to_string(), withheld))
            }
        }
    }
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reader::UnitFile => "systemd as a unit file",
            Reader::Tmpfiles => "systemd-tmpfiles",
            Reader::FstabGenerator => "systemd-fstab-generator",
            Reader::CryptsetupGenerator => "systemd-cryptsetup-generator",
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Acting(acting) => write!(f, "{acting}"),
            Reason::Touches(why) => f.write_str(why),
        }
    }
}

impl fmt::Display for Acting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Acting::Unplain { line, odd } => write!(f, "line {line} has {odd}"),
            Acting::Unresolved { at, unknown, unit } => write!(
                f,
                "{at}: {} cannot be resolved safely here, and could make it name {unit}, the \
                 host's own unit",
                unknown.join(" ")
            ),
            Acting::Names { at, unit, read_as } => {
                write!(f, "{at} names {unit}, the host's own unit")?;
                match read_as {
                    Some(word) => write!(
                        f,
                        " (systemd may read {word:?} in it; write unit names plainly, one per word)"
                    ),
                    None => Ok(()),
                }
            }
        }
    }
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DOTS: &str =
            "and its '..' cannot be resolved without following symlinks (give the path without it)";
        match self {
            Mount::Unresolvable {
                source,
                writes: Some(writes),
            } => write!(f, "it mounts {source} {writes}, {DOTS}"),
            Mount::Unresolvable {
                source,
                writes: None,
            } => write!(f, "it mounts {source}, {DOTS}"),
            Mount::Protected {
                source,
                writes,
                relation,
                path,
                what,
            } => write!(
                f,
                "it mounts {source} {writes}, {relation} {path}, the host's own {what}"
            ),
            Mount::Processes { source } => write!(
                f,
                "it mounts {source}: /proc/N/root, /proc/N/cwd and /proc/N/fd lead into the \
                 host's filesystem, writable, whatever the mount's options"
            ),
            Mount::KernelWritable { source } => write!(
                f,
                "it mounts {source} read-write: procfs, sysfs and cgroupfs act on the whole host \
                 (/proc/sysrq-trigger, the host's own cgroup.kill)"
            ),
            Mount::Sockets {
                source,
                relation,
                dir,
                what,
            } => write!(
                f,
                "it mounts {source}, {relation} {dir}, {what}: connect() to a socket ignores a \
                 read-only mount"
            ),
        }
    }
}
