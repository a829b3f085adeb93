//! pacman asked about the machine rather than about declared packages: where its root, database
//! and local database are (the reboot-and-restart look, the service's watcher), the foreign
//! packages (the facts), and the arguments and failures every pacman call of the host shares.

use std::path::PathBuf;

use super::{Env, KindError};
use crate::os::exec::{CommandError, Failure};
use crate::tools::pacman::{self, Pacman};

/// pacman's failure at `step`; one of its download sandbox (pacman.conf's `DownloadUser`) is
/// named with its cause and the option that turns it off, and blames no package.
pub(super) fn pacman_failed(step: &'static str, error: CommandError) -> KindError {
    let why = match &error.failure {
        Failure::Exit(_, stderr) => pacman::download_sandbox(stderr),
        _ => None,
    };
    match why {
        Some(why) => KindError::Setup { why, error },
        None => KindError::command(step, error),
    }
}

/// pacman's arguments for the target: under `--root`, the mounted system.
pub(super) fn target<'a>(env: &Env<'a>) -> Result<Pacman<'a>, String> {
    match env.offline {
        true => Pacman::mounted(env.root),
        false => Ok(Pacman::running()),
    }
}

/// pacman's local database directory, `DBPath/local`, as seen from this process: a transaction
/// adds or removes an entry in it, which the service's watcher takes as a hint to check packages.
pub fn local_db_dir(env: &Env) -> Result<PathBuf, String> {
    Ok(paths(env)?.db.join("local"))
}

/// pacman's root and database (`DBPath`) as seen from this process.
pub fn paths(env: &Env) -> Result<crate::model::upkeep::Where, String> {
    let printed = pacman_paths(env)?;
    Ok(crate::model::upkeep::Where {
        root: printed.path(pacman::parse_root, "Root")?,
        db: printed.path(pacman::parse_db_path, "DB Path")?,
    })
}

/// How many packages are foreign (installed, in no sync database: `pacman -Qmq`), for the facts.
pub fn foreign_count(env: &Env) -> Result<u64, String> {
    let args = target(env)?.foreign_names();
    let output = env
        .runner
        .query(&env.config.pacman, &args, &[])
        .map_err(|e| pacman_failed("count the foreign packages", e).to_string())?;
    pacman::parse_foreign(output.code, &output.stdout_text()).ok_or_else(|| {
        format!(
            "`pacman -Qmq` exited with status {:?}: {}",
            output.code,
            output.stderr.trim()
        )
    })
}

/// What `pacman -v -T` (a dependency test of nothing) printed: the paths pacman is configured
/// with, and where they are seen from this process.
pub(super) struct Verbose {
    text: String,
    pub(super) printed: pacman::Printed,
}

impl Verbose {
    /// One of the paths, as this process reaches it.
    pub(super) fn path(
        &self,
        parse: fn(&str) -> Option<PathBuf>,
        field: &str,
    ) -> Result<PathBuf, String> {
        parse(&self.text)
            .map(|path| self.printed.seen(&path))
            .ok_or_else(|| format!("`pacman -v -T` printed no `{field}`"))
    }
}

pub(super) fn pacman_paths(env: &Env) -> Result<Verbose, String> {
    let args = target(env)?.paths();
    let output = env
        .runner
        .run(&env.config.pacman, &args, &[])
        .map_err(|e| pacman_failed("read its paths", e).to_string())?;
    let text = output.stdout_text();
    let root = pacman::parse_root(&text).ok_or("`pacman -v -T` printed no `Root`")?;
    // pacman 7 prints the root resolved: a root given through a symlink is known both ways.
    let real = env
        .offline
        .then(|| std::fs::canonicalize(env.root).unwrap_or_else(|_| env.root.to_path_buf()));
    let printed = pacman::Printed::new(real.as_deref().map(|real| (env.root, real)), &root);
    Ok(Verbose { text, printed })
}
