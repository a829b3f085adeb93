//! Observing containers: one `podman ps -a --format json` for them all.

use std::collections::BTreeMap;

use super::state::{absent, Observed, OWNED_LABEL, SPEC_LABEL};
use crate::kinds::{Env, KindError, Observations};
use crate::tools::podman::{self, State};

/// Each of `keys` as podman has it; under `--root`, absent (podman's store is not ours to read).
pub(super) fn observe<'k>(
    env: &Env,
    keys: &[&'k str],
) -> Result<Observations<'k, Observed>, KindError> {
    if keys.is_empty() || env.offline {
        // Offline, podman's store is not ours to read: every container change is deferred.
        return Ok(keys.iter().map(|&k| (k, Ok(absent()))).collect());
    }
    // `podman ps` names no container, so no container can make it fail: when it does, it
    // fails as a whole.
    let output = env
        .runner
        .run(&env.config.podman, &podman::ps(), &[])
        .map_err(|e| KindError::command("observe", e))?;
    let all = observed(&output.stdout)
        .map_err(|e| format!("`podman ps` printed something unexpected: {e}"))?;
    Ok(keys
        .iter()
        .map(|&k| (k, Ok(all.get(k).cloned().unwrap_or_else(absent))))
        .collect())
}

/// What `podman ps` says of each container, by name.
pub(super) fn observed(stdout: &[u8]) -> Result<BTreeMap<String, Observed>, serde_json::Error> {
    let mut out = BTreeMap::new();
    for container in podman::parse_ps(stdout)? {
        let observed = Observed {
            exists: true,
            running: container.state == State::Running,
            paused: container.state == State::Paused,
            ours: container.labels.get(OWNED_LABEL).map(String::as_str) == Some("1"),
            spec_digest: container.labels.get(SPEC_LABEL).cloned(),
        };
        for name in container.names {
            out.insert(name, observed.clone());
        }
    }
    Ok(out)
}
