//! Room on disk and pacman's cache: a transaction that would not fit is not started, and
//! `cache_keep` prunes the cache after.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::kinds::pacman::{pacman_failed, pacman_paths, target};
use crate::kinds::Env;
use crate::kinds::KindError;
use crate::tools::pacman;

/// Fails `names` (all of them: the transaction is not started) when what it would download and
/// install does not fit on the filesystems of pacman's cache and root with `disk_margin_mib` to
/// spare. The sizes are pacman's own: `-Sp` for the downloads (0 for a file already in the
/// cache), `-Si` and `-Qi` for the installed sizes of the new and the replaced versions. A
/// preview pacman refuses (a name it does not know) is left to the transaction to report.
pub(super) fn check_room(env: &Env, preview: &[String], names: &[&str]) -> Result<(), KindError> {
    let pacman = target(env)?;
    let query = |args: &[String], names: &[&str]| {
        env.runner
            .query(&env.config.pacman, args, names)
            .map_err(|e| pacman_failed("check the room on disk", e))
    };
    let output = query(preview, names)?;
    if output.code != Some(0) {
        return Ok(());
    }
    let stdout = output.stdout_text();
    let taken = pacman::parse_preview(&stdout);
    if taken.is_empty() {
        return Ok(());
    }
    let taken_names: Vec<&str> = taken.iter().map(|p| p.name).collect();
    let download: u64 = taken.iter().map(|p| p.download).sum();
    let new = query(&pacman.sync_info(), &taken_names)?.stdout_text();
    let old = query(&pacman.query_info(), &taken_names)?.stdout_text();
    let (new, old) = (
        pacman::parse_installed_sizes(&new),
        pacman::parse_installed_sizes(&old),
    );
    let install = new
        .values()
        .sum::<u64>()
        .saturating_sub(old.values().sum::<u64>());
    let short = short_of_room(env, download, install)?;
    if short.is_empty() {
        return Ok(());
    }
    Err(KindError::from(format!(
        "not enough room on disk for {} ({} to download, {} more installed; pacman -Sp, -Si): \
         {}; nothing was changed",
        taken_names.join(" "),
        size(download),
        size(install),
        short.join("; ")
    )))
}

/// What is missing, per filesystem, for `download` bytes in pacman's cache and `install` more
/// in its root, with `disk_margin_mib` to spare: nothing when it fits.
fn short_of_room(env: &Env, download: u64, install: u64) -> Result<Vec<String>, KindError> {
    let paths = pacman_paths(env)?;
    let cache = paths.path(pacman::parse_cache_dir, "Cache Dirs")?;
    let root = paths.path(pacman::parse_root, "Root")?;
    let filesystem = |path: &std::path::Path| {
        crate::os::fsutil::Dir::open(path)
            .and_then(|dir| Ok((dir.device()?, dir.free_space()?)))
            .map_err(|e| {
                KindError::from(format!(
                    "checking the room on disk: {}: {e}",
                    path.display()
                ))
            })
    };
    let (cache_device, cache_free) = filesystem(&cache)?;
    let (root_device, root_free) = filesystem(&root)?;
    let needs = if cache_device == root_device {
        vec![(
            format!("{} (pacman's cache and root)", cache.display()),
            download + install,
            cache_free,
        )]
    } else {
        vec![
            (
                format!("{} (pacman's cache)", cache.display()),
                download,
                cache_free,
            ),
            (
                format!("{} (pacman's root)", root.display()),
                install,
                root_free,
            ),
        ]
    };
    let margin = env.config.disk_margin_bytes;
    let short = needs
        .into_iter()
        .filter(|(_, need, free)| need.saturating_add(margin) > *free)
        .map(|(place, need, free)| {
            format!(
                "{} missing on the filesystem of {place}: {} needed with the margin of {} \
                 (disk_margin_mib), {} free",
                size(need.saturating_add(margin) - free),
                size(need.saturating_add(margin)),
                size(margin),
                size(free)
            )
        })
        .collect();
    Ok(short)
}

/// A size for people, in pacman's binary units.
pub(super) fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1 << 10 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b => format!("{:.2} GiB", b as f64 / (1 << 30) as f64),
    }
}

/// What `prune_cache` removed.
pub(super) struct Pruned {
    pub(super) dir: PathBuf,
    pub(super) files: usize,
    pub(super) bytes: u64,
}

/// `cache_keep`: the newest `keep` versions of each package stay in pacman's cache, older ones
/// go with their signatures (what `paccache -rk N` does). Files not named as pacman names them
/// are left alone.
pub(super) fn prune_cache(env: &Env, keep: usize) -> Result<Pruned, String> {
    let path = pacman_paths(env)?.path(pacman::parse_cache_dir, "Cache Dirs")?;
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let dir = crate::os::fsutil::Dir::open(&path).map_err(at)?;
    let names = dir
        .names_where(|name| name.to_str().and_then(pacman::parse_cache_file).is_some())
        .map_err(at)?;
    let files: Vec<(&str, pacman::CacheFile)> = names
        .iter()
        .filter_map(|n| n.to_str())
        .filter_map(|n| Some((n, pacman::parse_cache_file(n)?)))
        .collect();
    let mut by_package: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (_, file) in &files {
        let versions = by_package.entry(file.name).or_default();
        if !versions.contains(&file.version) {
            versions.push(file.version);
        }
    }
    let mut pruned = Pruned {
        dir: path.clone(),
        files: 0,
        bytes: 0,
    };
    for (package, mut versions) in by_package {
        versions.sort_by(|a, b| pacman::vercmp(b, a));
        for old in versions.iter().skip(keep) {
            for (name, _) in files
                .iter()
                .filter(|(_, f)| f.name == package && f.version == *old)
            {
                let name = std::ffi::OsStr::new(name);
                let bytes = dir.stat(name).map_err(at)?.map_or(0, |s| s.size);
                if dir.remove(name).map_err(at)? {
                    pruned.files += 1;
                    pruned.bytes += bytes;
                }
            }
        }
    }
    Ok(pruned)
}
