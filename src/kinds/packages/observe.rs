//! Observing packages: one `pacman -Qi` for them all, asked again by halves when a name fails
//! the batch.

use super::state::Observed;
use crate::kinds::pacman::{pacman_failed, target};
use crate::kinds::{query_by_halves, Env, KindError, Observations};
use crate::os::exec::{CommandError, Failure};
use crate::tools::pacman::{self, InstallReason, Pacman};

/// Each of `keys` installed (with its version, install reason and dependents) or missing.
pub(super) fn observe<'k>(
    env: &Env,
    keys: &[&'k str],
) -> Result<Observations<'k, Observed>, KindError> {
    if keys.is_empty() {
        return Ok(Observations::default());
    }
    let args = target(env)?.query_info();
    let results = query_by_halves(env.runner, "`pacman -Qi`", keys, |batch| {
        let observing = |error| pacman_failed("observe", error);
        let output = env
            .runner
            .query(&env.config.pacman, &args, batch)
            .map_err(observing)?;
        // It exits 1 for a name not installed, and for a conf it cannot use.
        let complaint = pacman::parse_messages(&output.stderr).iter().any(|m| {
            !matches!(
                m,
                pacman::Message::PackageNotFound(_) | pacman::Message::Warning(_)
            )
        });
        if !Pacman::answered(output.code) || complaint {
            return Err(observing(CommandError {
                command: "pacman -Qi".into(),
                failure: Failure::Exit(output.code, output.stderr),
            }));
        }
        let stdout = output.stdout_text();
        let mut installed = pacman::parse_info(&stdout);
        Ok(batch
            .iter()
            .map(|name| match installed.remove(name) {
                Some(package) => Observed::Installed {
                    version: package.version,
                    explicit: package.reason == InstallReason::Explicit,
                    required_by: package.required_by,
                },
                None => Observed::Missing,
            })
            .collect())
    });
    Ok(keys.iter().copied().zip(results).collect())
}
