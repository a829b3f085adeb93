//! pacman: the arguments the packages kind runs it with, and pure parsers of what it prints
//! (`-Qi`, `-Si`, `-Sp`, `-Rsp`, `-Qq`, `-Qmq`, `-v`, and its stderr's lock and not-found errors), with
//! pacman's version order (`vercmp`) and its cache file names. pacman runs with `LC_ALL=C`
//! (`exec`), so these read its untranslated messages.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// pacman's arguments for one target: the running system, or a mounted root.
#[derive(Debug, Clone, Copy)]
pub struct Pacman<'a> {
    sysroot: Option<&'a str>,
}

/// Why a package is installed, as `-Qi` says and `-D` sets. The packages kind keeps it in the
/// ledger for an adopted package (as `"explicit"` or `"dependency"`), so that releasing the
/// package puts it back; an adopted entry without one (written by an older version for an
/// explicitly installed package) counts as `Explicit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstallReason {
    Explicit,
    Dependency,
}

impl<'a> Pacman<'a> {
    /// On the running system.
    pub fn running() -> Pacman<'a> {
        Pacman { sysroot: None }
    }

    /// On a mounted root (`--sysroot`: pacman works on it with its own configuration). A root
    /// that is not UTF-8 is refused: falling back to `/` would change the running system instead.
    pub fn mounted(root: &'a Path) -> Result<Pacman<'a>, String> {
        let root = root.to_str().ok_or_else(|| {
            format!(
                "root {} is not UTF-8; pacman's --sysroot cannot be given it",
                root.display()
            )
        })?;
        Ok(Pacman {
            sysroot: Some(root),
        })
    }

    fn args(&self, args: &[&str]) -> Vec<String> {
        let root = self.sysroot.map(|root| ["--sysroot", root]);
        root.iter()
            .flatten()
            .chain(args)
            .map(|a| a.to_string())
            .collect()
    }

    /// `-Qi`: installed packages, for `parse_info`. Exits 1 when some are not installed.
    pub fn query_info(&self) -> Vec<String> {
        self.args(&["-Qi"])
    }

    /// Whether a query (`-Qi`) answered: it exits 1 when only some names were not found.
    pub fn answered(code: Option<i32>) -> bool {
        matches!(code, Some(0) | Some(1))
    }

    /// `-Si`: sync packages, for `parse_sync_info`. Exits 1 when some are not found.
    pub fn sync_info(&self) -> Vec<String> {
        self.args(&["-Si"])
    }

    /// Installs what is not installed yet, from the sync databases as they are.
    pub fn install(&self) -> Vec<String> {
        self.args(&["-S", "--needed", "--noconfirm"])
    }

    /// A full upgrade (refreshing the databases) that also installs the names given, holding
    /// back `held`.
    pub fn upgrade(&self, held: &[String]) -> Vec<String> {
        let ignore = format!("--ignore={}", held.join(","));
        self.args(&["-Syu", &ignore, "--needed", "--noconfirm"])
    }

    /// The keyrings' own transaction before a full upgrade: refreshes the databases and upgrades
    /// the keyrings named (those already current are skipped). The `-u` follows in the same run.
    pub fn keyrings_first(&self) -> Vec<String> {
        self.args(&["-Sy", "--needed", "--noconfirm"])
    }

    /// The installed packages' names, one a line (`parse_names`).
    pub fn installed_names(&self) -> Vec<String> {
        self.args(&["-Qq"])
    }

    /// The foreign packages' names (installed, in no sync database), one a line:
    /// `parse_foreign`. It exits 1 when there are none.
    pub fn foreign_names(&self) -> Vec<String> {
        self.args(&["-Qmq"])
    }

    /// What `install` would download, changing nothing: `parse_preview`.
    pub fn install_preview(&self) -> Vec<String> {
        self.args(&["-Sp", "--needed", "--print-format", PREVIEW_FORMAT])
    }

    /// What `upgrade` would download from the databases as they are (no refresh): `parse_preview`.
    pub fn upgrade_preview(&self, held: &[String]) -> Vec<String> {
        let ignore = format!("--ignore={}", held.join(","));
        self.args(&[
            "-Sup",
            &ignore,
            "--needed",
            "--print-format",
            PREVIEW_FORMAT,
        ])
    }

    /// Removes packages with the dependencies nothing else needs.
    pub fn remove(&self) -> Vec<String> {
        self.args(&["-Rs", "--noconfirm"])
    }

    /// What `remove` would remove, one name a line (`parse_removal`); changes nothing.
    pub fn removal_preview(&self) -> Vec<String> {
        self.args(&["-Rsp", "--print-format", "%n"])
    }

    /// Sets the install reason of installed packages.
    pub fn mark(&self, reason: InstallReason) -> Vec<String> {
        self.args(&[
            "-D",
            match reason {
                InstallReason::Explicit => "--asexplicit",
                InstallReason::Dependency => "--asdeps",
            },
        ])
    }

    /// A dependency test of nothing: prints only the paths pacman is configured with
    /// (`parse_db_path`).
    pub fn paths(&self) -> Vec<String> {
        self.args(&["-v", "-T"])
    }
}

/// The pacman.conf a pacman command line reads: its `--config FILE`, else pacman's default.
pub fn conf_file(command: &[String]) -> PathBuf {
    let named = command
        .iter()
        .enumerate()
        .find_map(|(i, arg)| match arg.as_str() {
            "--config" => command.get(i + 1).map(String::as_str),
            _ => arg.strip_prefix("--config="),
        });
    PathBuf::from(named.unwrap_or("/etc/pacman.conf"))
}

/// The local database directory a pacman.conf sets: `DBPath` of `[options]` (pacman's default
/// /var/lib/pacman/ when unset), then `local`.
pub fn conf_local_db(conf: &str) -> PathBuf {
    let mut section = "";
    let mut db = None;
    for line in conf.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
        } else if let Some((key, value)) = line.split_once('=') {
            if section == "options" && key.trim() == "DBPath" && !value.trim().is_empty() {
                db = Some(value.trim());
            }
        }
    }
    Path::new(db.unwrap_or("/var/lib/pacman/")).join("local")
}

/// Name and download size in bytes of each package a transaction would take (0 for a file
/// already in the cache).
const PREVIEW_FORMAT: &str = "%n %s";

/// One package a transaction would install (`-Sp --print-format '%n %s %l'`).
#[derive(Debug, PartialEq)]
pub struct Preview<'a> {
    pub name: &'a str,
    /// Its download size, in bytes.
    pub download: u64,
}

/// `-Sp` output in `PREVIEW_FORMAT`, one package a line; lines not of that form (pacman prints
/// none, but a wrapper might) are skipped.
pub fn parse_preview(stdout: &str) -> Vec<Preview<'_>> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, size) = (words.next()?, words.next()?);
            Some(Preview {
                name,
                download: size.parse().ok()?,
            })
        })
        .collect()
}

/// The value of one padded `Field : value` line of a `-Qi`/`-Si` block.
fn info_field<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    block.lines().find_map(|line| {
        let (key, value) = line.split_once(" : ")?;
        (key.trim_end() == name).then(|| value.trim())
    })
}

/// `Installed Size` of each package in `-Si` or `-Qi` output, in bytes (pacman prints it
/// rounded to two decimals of its unit: the figure is within 0.5% of the real one).
pub fn parse_installed_sizes(stdout: &str) -> BTreeMap<&str, u64> {
    let mut sizes = BTreeMap::new();
    for block in stdout.split("\n\n") {
        let field = |name: &str| info_field(block, name);
        if let (Some(name), Some(size)) =
            (field("Name"), field("Installed Size").and_then(parse_size))
        {
            sizes.insert(name, size);
        }
    }
    sizes
}

/// A size as pacman prints it: `331.00 B`, `1.50 MiB` (binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let (number, unit) = text.split_once(' ')?;
    let number: f64 = number.parse().ok()?;
    let scale = match unit {
        "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    (number >= 0.0).then(|| (number * scale as f64).round() as u64)
}

/// `-Qq` output: one name a line.
pub fn parse_names(stdout: &str) -> Vec<&str> {
    parse_removal(stdout)
}

/// How many foreign packages a `-Qmq` (`foreign_names`) listed: exit 1 with nothing printed is
/// none, not a failure. None for any other exit, or an exit 1 that printed names.
pub fn parse_foreign(code: Option<i32>, stdout: &str) -> Option<u64> {
    let names = parse_names(stdout).len() as u64;
    match code {
        Some(0) => Some(names),
        Some(1) if names == 0 => Some(0),
        _ => None,
    }
}

/// The installed keyrings among `names`: Arch's convention names them `*-keyring`
/// (`archlinux-keyring`, `archlinuxarm-keyring`, a third-party repo's own).
pub fn keyrings<'a>(names: &[&'a str]) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| n.len() > "-keyring".len() && n.ends_with("-keyring"))
        .collect()
}

/// A package file in pacman's cache: `NAME-PKGVER-PKGREL-ARCH.pkg.tar[.EXT][.sig]`.
#[derive(Debug, PartialEq, Eq)]
pub struct CacheFile<'a> {
    pub name: &'a str,
    /// `[EPOCH:]PKGVER-PKGREL`, as `vercmp` orders them.
    pub version: &'a str,
    /// The detached signature beside a package file.
    pub signature: bool,
}

/// A cache file's name read as pacman writes them; anything else (a partial download, a
/// stranger's file) is `None` and left alone.
pub fn parse_cache_file(file: &str) -> Option<CacheFile<'_>> {
    let (package, signature) = match file.strip_suffix(".sig") {
        Some(package) => (package, true),
        None => (file, false),
    };
    let (base, ext) = package.split_once(".pkg.tar")?;
    if ext.contains(".part") || ext.contains('/') {
        return None;
    }
    let mut parts = base.rsplitn(4, '-');
    let (_arch, rel, ver, name) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if name.is_empty() || ver.is_empty() || rel.is_empty() {
        return None;
    }
    let version = &base[name.len() + 1..base.len() - _arch.len() - 1];
    Some(CacheFile {
        name,
        version,
        signature,
    })
}

/// pacman's version order (libalpm's `alpm_pkg_vercmp`, what `vercmp` prints): epoch first, then
/// the version, then the release when both have one.
pub fn vercmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    if a == b {
        return Equal;
    }
    let (epoch_a, version_a, release_a) = split_evr(a);
    let (epoch_b, version_b, release_b) = split_evr(b);
    let order = rpmvercmp(epoch_a, epoch_b).then_with(|| rpmvercmp(version_a, version_b));
    match (order, release_a, release_b) {
        (Equal, Some(ra), Some(rb)) => rpmvercmp(ra, rb),
        (order, _, _) => order,
    }
}

/// `[EPOCH:]VERSION[-RELEASE]`; the epoch is `0` when absent.
fn split_evr(evr: &str) -> (&str, &str, Option<&str>) {
    let digits = evr.len() - evr.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (epoch, rest) = match evr[digits..].strip_prefix(':') {
        Some(rest) if digits > 0 => (&evr[..digits], rest),
        Some(rest) => ("0", rest),
        None => ("0", evr),
    };
    match rest.rsplit_once('-') {
        Some((version, release)) => (epoch, version, Some(release)),
        None => (epoch, rest, None),
    }
}

/// rpm's segment comparison, as libalpm has it: alternating runs of digits and letters compared
/// numerically or by bytes, separators compared by their length, a digit run newer than a
/// letter run, and a trailing letter run older than nothing (`1.0rc1 < 1.0`).
fn rpmvercmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    if a == b {
        return Equal;
    }
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut one, mut two) = (0, 0);
    let run = |s: &[u8], from: usize, f: fn(&u8) -> bool| {
        from + s[from..].iter().take_while(|c| f(c)).count()
    };
    while one < a.len() && two < b.len() {
        let (start1, start2) = (one, two);
        one = run(a, one, |c| !c.is_ascii_alphanumeric());
        two = run(b, two, |c| !c.is_ascii_alphanumeric());
        if one >= a.len() || two >= b.len() {
            break;
        }
        if one - start1 != two - start2 {
            return (one - start1).cmp(&(two - start2));
        }
        let numeric = a[one].is_ascii_digit();
        let class: fn(&u8) -> bool = if numeric {
            u8::is_ascii_digit
        } else {
            u8::is_ascii_alphabetic
        };
        let (end1, end2) = (run(a, one, class), run(b, two, class));
        if end2 == two {
            return if numeric { Greater } else { Less };
        }
        let (mut seg1, mut seg2) = (&a[one..end1], &b[two..end2]);
        if numeric {
            let zeros = |s: &[u8]| s.iter().take_while(|c| **c == b'0').count();
            seg1 = &seg1[zeros(seg1)..];
            seg2 = &seg2[zeros(seg2)..];
            if seg1.len() != seg2.len() {
                return seg1.len().cmp(&seg2.len());
            }
        }
        match seg1.cmp(seg2) {
            Equal => {}
            order => return order,
        }
        (one, two) = (end1, end2);
    }
    let (rest1, rest2) = (a.get(one), b.get(two));
    match (rest1, rest2) {
        (None, None) => Equal,
        (None, Some(c)) if !c.is_ascii_alphabetic() => Less,
        (Some(c), _) if c.is_ascii_alphabetic() => Less,
        _ => Greater,
    }
}

/// What `-Qi` says of one installed package.
#[derive(Debug, Clone, PartialEq)]
pub struct Installed {
    pub version: String,
    pub reason: InstallReason,
    /// Installed packages that depend on it (`Required By`).
    pub required_by: Vec<String>,
}

/// `pacman -Qi` output: one block of padded `Field : value` lines per installed package,
/// blank-line separated, by name. Blocks without a name are skipped.
pub fn parse_info(stdout: &str) -> BTreeMap<&str, Installed> {
    let mut packages = BTreeMap::new();
    for block in stdout.split("\n\n") {
        let field = |name: &str| info_field(block, name);
        let Some(name) = field("Name") else { continue };
        packages.insert(
            name,
            Installed {
                version: field("Version").unwrap_or_default().to_string(),
                reason: match field("Install Reason") {
                    Some("Explicitly installed") => InstallReason::Explicit,
                    _ => InstallReason::Dependency,
                },
                // pacman wraps a long list onto indented lines; the first line says whether any.
                required_by: match field("Required By") {
                    None | Some("None") => Vec::new(),
                    Some(names) => names.split_whitespace().map(str::to_string).collect(),
                },
            },
        );
    }
    packages
}

/// What `pacman -Si` says of one sync package that matters to the host.
#[derive(Debug, PartialEq)]
pub struct SyncInfo<'a> {
    pub name: &'a str,
    pub replaces: Vec<&'a str>,
    pub conflicts: Vec<&'a str>,
    pub provides: Vec<&'a str>,
    pub depends: Vec<&'a str>,
}

/// `pacman -Si` output: one block per package, as `-Qi` prints them. List entries may carry a
/// version constraint (`nox-mesh-host>=1.0`), kept as printed.
pub fn parse_sync_info(stdout: &str) -> Vec<SyncInfo<'_>> {
    let mut out = Vec::new();
    for block in stdout.split("\n\n") {
        // `Field : value` lines; a list pacman wraps continues on lines that start blank.
        let mut fields: Vec<(&str, Vec<&str>)> = Vec::new();
        for line in block.lines() {
            match (
                line.starts_with(char::is_whitespace),
                line.split_once(" : "),
            ) {
                (false, Some((key, value))) => {
                    fields.push((key.trim_end(), value.split_whitespace().collect()))
                }
                (true, _) => {
                    if let Some((_, words)) = fields.last_mut() {
                        words.extend(line.split_whitespace());
                    }
                }
                (false, None) => {}
            }
        }
        let list = |name: &str| -> Vec<&str> {
            match fields.iter().find(|(key, _)| *key == name) {
                Some((_, words)) if words.as_slice() != ["None"] => words.clone(),
                _ => Vec::new(),
            }
        };
        let Some(&name) = list("Name").first() else {
            continue;
        };
        out.push(SyncInfo {
            name,
            replaces: list("Replaces"),
            conflicts: list("Conflicts With"),
            provides: list("Provides"),
            depends: list("Depends On"),
        });
    }
    out
}

/// `-Rsp --print-format %n` output: the names that would be removed.
pub fn parse_removal(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect()
}

/// The `DB Path   : DIR/` line of `pacman -v` output.
pub fn parse_db_path(stdout: &str) -> Option<PathBuf> {
    verbose_path(stdout, "DB Path")
}

/// The `Root      : DIR/` line of `pacman -v` output.
pub fn parse_root(stdout: &str) -> Option<PathBuf> {
    verbose_path(stdout, "Root")
}

/// The first of the `Cache Dirs: DIR/  DIR2/` of `pacman -v` output: where pacman downloads.
pub fn parse_cache_dir(stdout: &str) -> Option<PathBuf> {
    verbose_path(stdout, "Cache Dirs")
}

/// Where the paths pacman printed (`-v`, the lock in its errors) are, seen from this process.
/// Under `--sysroot`, pacman 6 chroots into the root and prints paths inside it (`Root : /`);
/// pacman 7 no longer chroots and prints them with the root in front, resolved (`Root : /mnt/`
/// for `--sysroot /mnt/./`). Which of the two is told by the `Root` it printed, not by its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    /// The root to put in front of a printed path, when pacman printed it inside the root.
    inside: Option<PathBuf>,
}

impl Printed {
    /// From the `--sysroot` pacman was given, as given and resolved (`realpath`), none on the
    /// running system, and the `Root` it printed (`parse_root`).
    pub fn new(sysroot: Option<(&Path, &Path)>, printed_root: &Path) -> Printed {
        let inside = sysroot
            .filter(|(given, real)| {
                !printed_root.starts_with(given) && !printed_root.starts_with(real)
            })
            .map(|(given, _)| given.to_path_buf());
        Printed { inside }
    }

    /// A path pacman printed, as this process reaches it.
    pub fn seen(&self, path: &Path) -> PathBuf {
        match &self.inside {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_path_buf(),
        }
    }
}

/// The first path of a `Field : PATH  PATH2` line of `pacman -v` (the colon may follow the field
/// without a space: `Cache Dirs:`; pacman separates several paths by two spaces).
fn verbose_path(stdout: &str, name: &str) -> Option<PathBuf> {
    stdout.lines().find_map(|line| {
        let (field, value) = line.split_once(':')?;
        let value = value.trim().split("  ").next().unwrap_or_default().trim();
        (field.trim() == name && !value.is_empty()).then(|| PathBuf::from(value))
    })
}

/// One line of pacman's stderr, as far as mesh-host tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// `error: package 'NAME' was not found` (`-Si`, `-Qi`).
    PackageNotFound(&'a str),
    /// `error: target not found: NAME` (`-S`, `-R`).
    TargetNotFound(&'a str),
    /// `error: failed to init transaction (unable to lock database)` or `error: could not lock
    /// database: ...`: someone holds its database lock (`locked_database` names it).
    Locked,
    /// `error: unresolvable package conflicts detected` and `error: failed to prepare transaction
    /// (conflicting dependencies)`: installing would remove a package it conflicts with, which
    /// `--noconfirm` declines (the pair is named on stdout, `:: A and B are in conflict`).
    Conflict,
    /// `warning: ...`.
    Warning(&'a str),
    /// Anything else: another error, or a line continuing one.
    Other(&'a str),
}

/// pacman's stderr, line by line; blank lines are left out.
pub fn parse_messages(stderr: &str) -> Vec<Message<'_>> {
    stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            if let Some(name) = line
                .strip_prefix("error: package '")
                .and_then(|rest| rest.strip_suffix("' was not found"))
            {
                Message::PackageNotFound(name)
            } else if let Some(name) = line.strip_prefix("error: target not found: ") {
                Message::TargetNotFound(name.trim())
            } else if line.contains("unable to lock database")
                || line.contains("could not lock database")
            {
                Message::Locked
            } else if line.starts_with("error: ") && line.contains("conflict") {
                Message::Conflict
            } else if let Some(text) = line.strip_prefix("warning: ") {
                Message::Warning(text)
            } else {
                Message::Other(line)
            }
        })
        .collect()
}

/// The lock file named in pacman's "unable to lock database" error (it takes four lines, the
/// path on the last), if that is what stderr says; `db.lck` if it names none.
pub fn locked_database(stderr: &str) -> Option<&str> {
    if !parse_messages(stderr).contains(&Message::Locked) {
        return None;
    }
    Some(
        stderr
            .split_whitespace()
            .find(|w| w.ends_with("db.lck"))
            .unwrap_or("db.lck"),
    )
}

/// Why pacman 7's download sandbox stopped it, from its stderr: pacman.conf's `DownloadUser`
/// (Arch sets `alpm`) makes it download as that user, confined with Landlock. A kernel without
/// Landlock, or a user that does not exist, fails every download (the user, every command).
/// The reason names the cause and the pacman.conf option that turns it off (pacman.conf(5)).
pub fn download_sandbox(stderr: &str) -> Option<String> {
    let errors = || {
        stderr
            .lines()
            .filter_map(|l| l.trim().strip_prefix("error: "))
    };
    let user = errors().find_map(|e| {
        let quoted = e
            .strip_prefix("problem setting DownloadUser '")
            .or_else(|| e.strip_prefix("download user '"))?;
        quoted.split_once('\'').map(|(name, _)| name)
    });
    if let Some(user) = user {
        return Some(format!(
            "pacman's download user '{user}' (DownloadUser in pacman.conf) does not exist: create \
             it (Arch's pacman package makes `alpm` with systemd-sysusers) or remove DownloadUser \
             from pacman.conf"
        ));
    }
    if let Some(landlock) = errors().find(|e| e.contains("Landlock")) {
        let cause = match landlock.contains("not supported by the kernel") {
            // Also what a container's seccomp filter (systemd-nspawn's) makes of a kernel that has it.
            true => {
                "Landlock is not available to pacman (the kernel lacks it, or a container's \
                     system call filter refuses it)"
            }
            false => "Landlock failed",
        };
        return Some(format!(
            "pacman's download sandbox failed: {cause} ({landlock}); DisableSandboxFilesystem \
             (or DisableSandbox) in pacman.conf's [options] turns that part off, as does removing \
             DownloadUser"
        ));
    }
    if let Some(seccomp) = errors().find(|e| e.contains("seccomp")) {
        return Some(format!(
            "pacman's download sandbox failed: its system call filter ({seccomp}); \
             DisableSandboxSyscalls (or DisableSandbox) in pacman.conf's [options] turns that \
             part off, as does removing DownloadUser"
        ));
    }
    let switching = errors().find(|e| e.starts_with("switching to sandbox user"))?;
    Some(format!(
        "pacman could not download as its DownloadUser ({switching}); without DownloadUser in \
         pacman.conf it downloads as root"
    ))
}

/// The names `-Si` (or `-Qi`) said it has no package of.
pub fn not_found(stderr: &str) -> BTreeSet<&str> {
    parse_messages(stderr)
        .into_iter()
        .filter_map(|m| match m {
            Message::PackageNotFound(name) => Some(name),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{assert_recorded, generations};

    const PACMAN: &[&str] = &["pacman", "--config", "/tmp/mesh-sandbox/pacman/pacman.conf"];

    fn installed(version: &str, reason: InstallReason, by: &[&str]) -> Installed {
        Installed {
            version: version.into(),
            reason,
            required_by: by.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_local_database_from_pacman_conf() {
        let command = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(
            conf_file(&command(&["pacman"])),
            Path::new("/etc/pacman.conf")
        );
        assert_eq!(
            conf_file(&command(&["pacman", "--config", "/sb/pacman.conf"])),
            Path::new("/sb/pacman.conf")
        );
        assert_eq!(
            conf_file(&command(&["pacman", "--config=/x.conf"])),
            Path::new("/x.conf")
        );
        let conf = "[options]\nRootDir = /sb/root\nDBPath       = /sb/root/var/lib/pacman/\n\
                    [core]\nDBPath = /wrong\n";
        assert_eq!(
            conf_local_db(conf),
            Path::new("/sb/root/var/lib/pacman/local")
        );
        assert_eq!(
            conf_local_db("#DBPath = /x\n[options]\nHoldPkg = pacman\n"),
            Path::new("/var/lib/pacman/local")
        );
    }

    #[test]
    fn builds_the_mounted_root_form() {
        let root = Pacman::mounted(Path::new("/mnt")).unwrap();
        assert_eq!(root.query_info(), ["--sysroot", "/mnt", "-Qi"]);
        assert_eq!(
            Pacman::running().upgrade(&["nox-mesh-host".into(), "b".into()]),
            [
                "-Syu",
                "--ignore=nox-mesh-host,b",
                "--needed",
                "--noconfirm"
            ]
        );
        assert_eq!(
            Pacman::running().mark(InstallReason::Dependency),
            ["-D", "--asdeps"]
        );
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/mnt/\xff"));
        assert!(Pacman::mounted(odd).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn parses_info_output_with_install_reasons() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-Qi.cmd"),
                PACMAN,
                &Pacman::running().query_info(),
                &["mesh-a", "mesh-b", "mesh-e"],
            );
            let out_text = g.read("pacman-Qi.txt");
            let out = parse_info(&out_text);
            assert_eq!(
                out.into_iter().collect::<Vec<_>>(),
                vec![
                    (
                        "mesh-a",
                        installed("1.0-1", InstallReason::Dependency, &["mesh-b"])
                    ),
                    ("mesh-b", installed("1.0-1", InstallReason::Explicit, &[])),
                    ("mesh-e", installed("1.0-1", InstallReason::Explicit, &[])),
                ]
            );
        }
    }

    #[test]
    fn parses_info_output_when_some_are_missing() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-Qi-missing.cmd"),
                PACMAN,
                &Pacman::running().query_info(),
                &["mesh-a", "mesh-nope"],
            );
            // Exit 1, the missing one named on stderr only.
            let out_text = g.read("pacman-Qi-missing.stdout");
            let out = parse_info(&out_text);
            assert_eq!(
                out.into_iter().collect::<Vec<_>>(),
                vec![(
                    "mesh-a",
                    installed("1.0-1", InstallReason::Dependency, &["mesh-b"])
                )]
            );
            assert_eq!(
                not_found(&g.read("pacman-Qi-missing.stderr")),
                BTreeSet::from(["mesh-nope"])
            );
            assert!(parse_info("").is_empty());
        }
    }

    #[test]
    fn parses_sync_info_and_what_it_did_not_find() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-Si.cmd"),
                PACMAN,
                &Pacman::running().sync_info(),
                &["mesh-usurper", "mesh-a", "mesh-nope"],
            );
            let infos_text = g.read("pacman-Si.txt");
            let infos = parse_sync_info(&infos_text);
            assert_eq!(
                infos,
                vec![
                    SyncInfo {
                        name: "mesh-usurper",
                        replaces: vec!["nox-mesh-host"],
                        conflicts: vec!["nox-mesh-host"],
                        provides: vec!["nox-mesh-host=9.0"],
                        depends: vec![],
                    },
                    SyncInfo {
                        name: "mesh-a",
                        replaces: vec![],
                        conflicts: vec![],
                        provides: vec![],
                        depends: vec![],
                    },
                ]
            );
            let stderr = &g.read("pacman-Si.stderr");
            assert_eq!(
                parse_messages(stderr),
                [Message::PackageNotFound("mesh-nope")]
            );
            // A list pacman wraps onto further lines is read whole.
            let wrapped = "Name            : x\nProvides        : a  b\n                  nox-mesh-host=2\nDepends On      : None\n";
            assert_eq!(
                parse_sync_info(wrapped)[0].provides,
                vec!["a", "b", "nox-mesh-host=2"]
            );
        }
    }

    #[test]
    fn counts_the_foreign_packages() {
        for g in generations("pacman") {
            for recorded in [&g.read("pacman-Qmq.cmd"), &g.read("pacman-Qmq-none.cmd")] {
                assert_recorded(recorded, PACMAN, &Pacman::running().foreign_names(), &[]);
            }
            let one = &g.read("pacman-Qmq.txt");
            assert_eq!(parse_foreign(Some(0), one), Some(1));
            // None foreign: pacman exits 1 and prints nothing.
            let none = &g.read("pacman-Qmq-none.txt");
            assert_eq!(parse_foreign(Some(1), none), Some(0));
            assert_eq!(parse_foreign(Some(1), one), None);
            assert_eq!(parse_foreign(None, ""), None);
        }
    }

    #[test]
    fn parses_what_a_removal_would_take() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-Rsp.cmd"),
                PACMAN,
                &Pacman::running().removal_preview(),
                &["mesh-b"],
            );
            // mesh-a was installed as mesh-b's dependency: it would go too.
            assert_eq!(
                parse_removal(&g.read("pacman-Rsp.txt")),
                ["mesh-b", "mesh-a"]
            );
        }
    }

    #[test]
    fn recognises_the_lock_not_found_and_conflict_errors_in_real_output() {
        for g in generations("pacman") {
            for fixture in [
                &g.read("pacman-S-dblck.cmd"),
                &g.read("pacman-S-notfound.cmd"),
                &g.read("pacman-S-conflict.cmd"),
            ] {
                let name = fixture.split_whitespace().last().unwrap_or_default();
                assert_recorded(fixture, PACMAN, &Pacman::running().install(), &[name]);
            }
            let locked = &g.read("pacman-S-dblck.stderr");
            assert_eq!(
                locked_database(locked),
                Some("/tmp/mesh-sandbox/pacman/root/var/lib/pacman/db.lck")
            );
            assert_eq!(
                parse_messages(locked)[..2],
                [Message::Locked, Message::Locked]
            );
            let not_found = &g.read("pacman-S-notfound.stderr");
            assert_eq!(locked_database(not_found), None);
            assert_eq!(
                parse_messages(not_found),
                [Message::TargetNotFound("mesh-nope")]
            );
            let conflict = &g.read("pacman-S-conflict.stderr");
            assert_eq!(
                parse_messages(conflict),
                [Message::Conflict, Message::Conflict]
            );
            assert_eq!(locked_database(conflict), None);
        }
    }

    #[test]
    fn db_path_from_verbose_output() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-v-T.cmd"),
                PACMAN,
                &Pacman::running().paths(),
                &[],
            );
            assert_eq!(
                parse_db_path(&g.read("pacman-v-T.txt")),
                Some(PathBuf::from(
                    "/tmp/mesh-sandbox/pacman/root/var/lib/pacman/"
                ))
            );
            assert_eq!(parse_db_path("Root      : /\n"), None);
            assert_eq!(
                parse_root(&g.read("pacman-v-T.txt")),
                Some(PathBuf::from("/tmp/mesh-sandbox/pacman/root/"))
            );
        }
    }

    #[test]
    fn parses_what_an_install_would_download() {
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-Sp.cmd"),
                PACMAN,
                &Pacman::running().install_preview(),
                &["mesh-b", "mesh-e"],
            );
            let preview_text = g.read("pacman-Sp.txt");
            let preview = parse_preview(&preview_text);
            let pairs: Vec<(&str, u64)> = preview.iter().map(|p| (p.name, p.download)).collect();
            // mesh-e's file is in the cache already: nothing to download. The others' sizes
            // are their compressed files', a few hundred bytes.
            let names: Vec<&str> = pairs.iter().map(|p| p.0).collect();
            assert_eq!(names, ["mesh-a", "mesh-b", "mesh-e"], "{}", g.name);
            assert!(
                pairs[..2].iter().all(|p| (300..400).contains(&p.1)) && pairs[2].1 == 0,
                "{}: {pairs:?}",
                g.name
            );
            assert_eq!(
                Pacman::running().upgrade_preview(&["nox-mesh-host".into()]),
                [
                    "-Sup",
                    "--ignore=nox-mesh-host",
                    "--needed",
                    "--print-format",
                    "%n %s"
                ]
            );
            let sizes_text = g.read("pacman-Si.txt");
            let sizes = parse_installed_sizes(&sizes_text);
            assert_eq!(
                sizes.into_iter().collect::<Vec<_>>(),
                [("mesh-a", 13), ("mesh-usurper", 19)]
            );
            let installed_text = g.read("pacman-Qi.txt");
            let installed = parse_installed_sizes(&installed_text);
            assert_eq!(installed.get("mesh-b"), Some(&13));
            for (text, bytes) in [
                ("331.00 B", Some(331)),
                ("1.50 KiB", Some(1536)),
                ("2.00 MiB", Some(2 << 20)),
                ("1.25 GiB", Some(5 << 28)),
                ("12 parsecs", None),
                ("-1.00 B", None),
            ] {
                assert_eq!(parse_size(text), bytes, "{text}");
            }
        }
    }

    #[test]
    fn paths_from_verbose_output() {
        for g in generations("pacman") {
            let out = &g.read("pacman-v-T.txt");
            assert_eq!(
                parse_root(out),
                Some(PathBuf::from("/tmp/mesh-sandbox/pacman/root/"))
            );
            assert_eq!(
                parse_cache_dir(out),
                Some(PathBuf::from(
                    "/tmp/mesh-sandbox/pacman/root/var/cache/pacman/pkg/"
                ))
            );
            assert_eq!(
                parse_cache_dir("Cache Dirs: /a/  /b/  \n"),
                Some(PathBuf::from("/a/"))
            );
        }
    }

    /// Under `--sysroot`, pacman 6 prints paths inside the root (`Root : /`) and pacman 7 with
    /// the root in front: either way they are the same paths seen from here.
    #[test]
    fn paths_printed_under_sysroot_are_seen_the_same_in_every_generation() {
        let given = Path::new("/tmp/mesh-sandbox/tmp/sysroot");
        for g in generations("pacman") {
            assert_recorded(
                &g.read("pacman-v-T-sysroot.cmd"),
                &["pacman"],
                &Pacman::mounted(given).unwrap().paths(),
                &[],
            );
            let out = g.read("pacman-v-T-sysroot.txt");
            let root = parse_root(&out).unwrap();
            let printed = Printed::new(Some((given, given)), &root);
            let seen = |parse: fn(&str) -> Option<PathBuf>| printed.seen(&parse(&out).unwrap());
            assert_eq!(
                seen(parse_db_path),
                Path::new("/tmp/mesh-sandbox/tmp/sysroot/var/lib/pacman/"),
                "{}",
                g.name
            );
            assert_eq!(
                seen(parse_cache_dir),
                Path::new("/tmp/mesh-sandbox/tmp/sysroot/var/cache/pacman/pkg/"),
                "{}",
                g.name
            );
            assert!(seen(parse_root).starts_with(given), "{}: {root:?}", g.name);
            // The root given another way (pacman 7 prints it resolved): known by either.
            let dotted = Path::new("/tmp/mesh-sandbox/tmp/../tmp/sysroot");
            let printed = Printed::new(Some((dotted, given)), &root);
            let db = printed.seen(&parse_db_path(&out).unwrap());
            assert!(
                db == Path::new("/tmp/mesh-sandbox/tmp/sysroot/var/lib/pacman/")
                    || db == Path::new("/tmp/mesh-sandbox/tmp/../tmp/sysroot/var/lib/pacman/"),
                "{}: {db:?}",
                g.name
            );
            // On the running system what pacman printed is where it is.
            let running = g.read("pacman-v-T.txt");
            let printed = Printed::new(None, &parse_root(&running).unwrap());
            assert_eq!(
                printed.seen(&parse_db_path(&running).unwrap()),
                parse_db_path(&running).unwrap()
            );
        }
        // pacman 6's `Root : /` under a root `/mnt`, and pacman 7's `Root : /mnt/`.
        let mnt = Some((Path::new("/mnt"), Path::new("/mnt")));
        let six = Printed::new(mnt, Path::new("/"));
        let seven = Printed::new(mnt, Path::new("/mnt/"));
        assert_eq!(
            six.seen(Path::new("/var/lib/pacman/db.lck")),
            Path::new("/mnt/var/lib/pacman/db.lck")
        );
        assert_eq!(
            seven.seen(Path::new("/mnt/var/lib/pacman/db.lck")),
            Path::new("/mnt/var/lib/pacman/db.lck")
        );
    }

    /// pacman 7's download sandbox failing (pacman.conf's `DownloadUser`): named with its cause
    /// and the option; pacman 6 only warns of the directive it does not know, and installs.
    #[test]
    fn the_download_sandbox_failures_are_told_apart() {
        for g in generations("pacman") {
            let user = download_sandbox(&g.read("pacman-S-nouser.stderr"));
            let landlock = download_sandbox(&g.read("pacman-S-landlock.stderr"));
            for other in ["pacman-S-notfound.stderr", "pacman-S-dblck.stderr"] {
                assert_eq!(download_sandbox(&g.read(other)), None, "{}", g.name);
            }
            if g.name == "pacman-6.0.2" {
                assert_eq!((user, landlock), (None, None));
                continue;
            }
            let user = user.expect("the missing user");
            assert!(
                user.starts_with(
                    "pacman's download user 'mesh-no-such-user' (DownloadUser in pacman.conf) \
                     does not exist"
                ),
                "{}: {user}",
                g.name
            );
            assert!(user.contains("remove DownloadUser"), "{user}");
            let landlock = landlock.expect("Landlock");
            assert!(
                landlock.starts_with(
                    "pacman's download sandbox failed: Landlock is not available to pacman (the \
                     kernel lacks it, or a container's system call filter refuses it) (restricting filesystem access failed because Landlock is not supported by \
                     the kernel!); DisableSandboxFilesystem (or DisableSandbox) in pacman.conf's \
                     [options] turns that part off"
                ),
                "{}: {landlock}",
                g.name
            );
        }
        let other = download_sandbox(
            "error: restricting filesystem access failed because the Landlock ruleset could not \
             be applied: Operation not permitted\n",
        )
        .unwrap();
        assert!(other.contains("Landlock failed (restricting"), "{other}");
        let switching = download_sandbox("error: switching to sandbox user 'alpm' failed!\n");
        assert!(switching.unwrap().contains("without DownloadUser"));
    }

    #[test]
    fn keyrings_are_told_by_their_name() {
        let names = parse_names(
            "archlinux-keyring\nglibc\nkeyring\n-keyring\nchaotic-keyring\ngnome-keyring-tools\n",
        );
        assert_eq!(keyrings(&names), ["archlinux-keyring", "chaotic-keyring"]);
        assert_eq!(
            Pacman::running().keyrings_first(),
            ["-Sy", "--needed", "--noconfirm"]
        );
    }

    #[test]
    fn cache_file_names() {
        assert_eq!(
            parse_cache_file("linux-firmware-20240115.9b6d0b08-2-any.pkg.tar.zst"),
            Some(CacheFile {
                name: "linux-firmware",
                version: "20240115.9b6d0b08-2",
                signature: false
            })
        );
        assert_eq!(
            parse_cache_file("python-3:1.0-1-x86_64.pkg.tar.xz.sig"),
            Some(CacheFile {
                name: "python",
                version: "3:1.0-1",
                signature: true
            })
        );
        for odd in [
            "mesh-a-1.0-1-any.pkg.tar.zst.part",
            "download-abc123",
            "1.0-1-any.pkg.tar.zst",
            "x.pkg.tar.zst",
        ] {
            assert_eq!(parse_cache_file(odd), None, "{odd}");
        }
    }

    /// Each pair as the real `vercmp` (pacman 6.0.2) orders it (-1, 0, 1).
    const VERCMP: &[(&str, &str, i32)] = &[
        ("1.0-1", "1.0-2", -1),
        ("1:1.0", "2.0", 1),
        ("1.0a", "1.0", -1),
        ("1.0.1", "1.0", 1),
        ("1.0", "1.0.0", -1),
        ("1.0rc1", "1.0", -1),
        ("1.0.a", "1.0.1", -1),
        ("1_0", "1.0", 0),
        ("2.0-1", "2.0-1.1", -1),
        ("1.0", "1.0-1", 0),
        ("1.0..1", "1.0.1", 1),
        ("010", "10", 0),
        ("1.2.3", "1.2.3", 0),
        ("a", "b", -1),
        ("1.0alpha", "1.0beta", -1),
        ("1.0", "1.0a1", 1),
        ("2:1.0-1", "1:9.9-9", 1),
        ("1.0-10", "1.0-9", 1),
        ("20230101", "2.0", 1),
        ("1.0+git1", "1.0", 1),
        ("1.0~rc1", "1.0", 1),
        ("1.a", "1.1", -1),
        ("0:1.0", "1.0", 0),
        ("1.0-1", "1.0-1.0", -1),
        ("r123.abc", "r99.def", 1),
        // Arch kernels' package versions, as the reboot check compares them.
        ("6.12.1.arch1-1", "6.12.10.arch1-1", -1),
        ("6.12.2.arch1-1", "6.12.1.arch1-1", 1),
        ("6.12.1.arch2-1", "6.12.1.arch1-1", 1),
        ("6.12.1.arch1-2", "6.12.1.arch1-1", 1),
    ];

    #[test]
    fn vercmp_orders_as_pacman_does() {
        for &(a, b, expected) in VERCMP {
            assert_eq!(vercmp(a, b) as i32, expected, "vercmp {a} {b}");
            assert_eq!(vercmp(b, a) as i32, -expected, "vercmp {b} {a}");
        }
    }

    /// The table again, and more pairs, against the real binary where pacman is installed (the
    /// sandbox's machines); skipped elsewhere.
    #[test]
    fn vercmp_agrees_with_the_real_binary() {
        let Ok(real) = std::fs::metadata("/usr/bin/vercmp") else {
            return;
        };
        assert!(real.is_file());
        let versions = [
            "1", "1.0", "1.0.0", "1.0a", "1.0rc1", "1.0-1", "1.0-2", "1:0.1", "2:1", "1.0+1",
            "1..0", "1.00", "0.9.9", "a", "1a", "1.b", "1_1", "r10", "r9.g1", "1.0-1.1",
        ];
        for a in versions {
            for b in versions {
                let out = std::process::Command::new("/usr/bin/vercmp")
                    .args([a, b])
                    .output()
                    .expect("vercmp");
                let text = String::from_utf8_lossy(&out.stdout);
                let real: i32 = text.trim().parse().expect("vercmp prints a number");
                assert_eq!(vercmp(a, b) as i32, real.signum(), "vercmp {a} {b}");
            }
        }
    }
}
