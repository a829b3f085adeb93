//! What pacman says a transaction would do, asked before it runs (`-Si`, `-Rsp`, which change
//! nothing): a package that would take the host's own over is refused by name.

use std::collections::BTreeMap;

use crate::kinds::pacman::{pacman_failed, target};
use crate::kinds::{Env, KindError};
use crate::os::exec::{CommandError, Failure};
use crate::tools::pacman::{self, SyncInfo};

/// Looks `names` up in the sync databases with one `pacman -Si`. Those that replace, conflict with,
/// provide or depend on a host package fail here with that reason (so does every name, if pacman cannot
/// answer); returns the names that may be installed, and those no sync database has.
pub(super) fn check_sync_packages<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), KindError>>,
) -> (Vec<&'n str>, Vec<&'n str>) {
    if names.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let output = target(env).map_err(KindError::from).and_then(|tool| {
        let output = env
            .runner
            .query(&env.config.pacman, &tool.sync_info(), names)
            .map_err(|e| pacman_failed("check what would be installed", e))?;
        // Its exit status counts the names not found; any other complaint is a real failure.
        let complaint = pacman::parse_messages(&output.stderr).iter().any(|m| {
            !matches!(
                m,
                pacman::Message::PackageNotFound(_) | pacman::Message::Warning(_)
            )
        });
        match output.code {
            Some(_) if !complaint => Ok((output.stdout_text(), output.stderr)),
            code if pacman::download_sandbox(&output.stderr).is_some() => Err(pacman_failed(
                "check what would be installed",
                CommandError {
                    command: "pacman -Si".into(),
                    failure: Failure::Exit(code, output.stderr),
                },
            )),
            code => Err(KindError::from(format!(
                "`pacman -Si` (checking what would be installed) exited with status {code:?}: {}",
                output.stderr.trim()
            ))),
        }
    });
    let (stdout, stderr) = match output {
        Ok(output) => output,
        Err(e) => {
            for name in names {
                results.insert(name, Err(e.clone()));
            }
            return (Vec::new(), Vec::new());
        }
    };
    let infos = pacman::parse_sync_info(&stdout);
    let missing = pacman::not_found(&stderr);
    let (mut checked, mut unknown) = (Vec::new(), Vec::new());
    for &name in names {
        let Some(info) = infos.iter().find(|i| i.name == name) else {
            // Not found, as pacman says; a tool that says nothing of it leaves the judgement
            // to the transaction (real pacman always says one or the other).
            if missing.contains(name) {
                unknown.push(name);
            } else {
                checked.push(name);
            }
            continue;
        };
        match takes_over(info, host_packages) {
            Some(why) => {
                results.insert(name, Err(why.into()));
            }
            None => checked.push(name),
        }
    }
    (checked, unknown)
}

/// Of `names` to remove with `-Rs`, those whose removal would take a host package along (one
/// installed as their dependency) fail with that reason, asked of `pacman -Rsp` (which changes
/// nothing); returns the rest. Each is asked alone when the batch would take a host package or
/// pacman refuses the batch (one name's broken dependency hides what the others would remove).
pub(super) fn check_removals<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), KindError>>,
) -> Vec<&'n str> {
    if names.is_empty() {
        return Vec::new();
    }
    let removed_hosts = |batch: &[&str]| -> Option<Vec<String>> {
        let args = target(env).ok()?.removal_preview();
        let output = env.runner.query(&env.config.pacman, &args, batch).ok()?;
        (output.code == Some(0)).then(|| {
            pacman::parse_removal(&output.stdout_text())
                .into_iter()
                .filter(|name| host_packages.iter().any(|h| h == name))
                .map(str::to_string)
                .collect()
        })
    };
    match removed_hosts(names) {
        Some(hosts) if hosts.is_empty() => return names.to_vec(),
        None if names.len() == 1 => return names.to_vec(),
        _ => {}
    }
    let mut allowed = Vec::new();
    for &name in names {
        match removed_hosts(&[name]).and_then(|hosts| hosts.into_iter().next()) {
            Some(host) => {
                results.insert(
                    name,
                    Err(KindError::from(format!(
                        "refused: removing {name} with its dependencies would remove {host}, \
                         the host's own package (installed as its dependency; pacman -Rsp); \
                         mesh-host never manages itself"
                    ))),
                );
            }
            None => allowed.push(name),
        }
    }
    allowed
}

pub(super) fn not_found(name: &str) -> String {
    format!(
        "target not found: {name} (no sync database has a package of that name; mesh-host \
         declares packages by name, not groups or provisions)"
    )
}

/// Why installing `info` would take a host package over, if it would.
pub(super) fn takes_over(info: &SyncInfo, host_packages: &[String]) -> Option<String> {
    let names = |entries: &[&str]| -> Option<String> {
        entries.iter().find_map(|entry| {
            let bare = entry.split(['<', '>', '=']).next().unwrap_or(entry);
            host_packages
                .iter()
                .find(|h| h.as_str() == bare)
                .map(|h| h.to_string())
        })
    };
    for (relation, entries, effect) in [
        ("replaces", &info.replaces, "would remove the host"),
        ("conflicts with", &info.conflicts, "would remove the host"),
        ("provides", &info.provides, "would stand in for the host"),
        // --ignore or not: `--noconfirm` answers yes to installing an ignored dependency.
        (
            "depends on",
            &info.depends,
            "would install or upgrade the host",
        ),
    ] {
        if let Some(host) = names(entries) {
            return Some(format!(
                "refused: {} {relation} {host}, the host's own package (pacman -Si); installing \
                 it {effect}; mesh-host never manages itself",
                info.name
            ));
        }
    }
    None
}
