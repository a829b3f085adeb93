//! Applying containers, in phases over every container: removals, unpauses, stops, creates,
//! starts, each batched (one name at a time when podman blames the names); the environment
//! only through a 0600 file that lives while `podman create` runs.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{label_digest, labels, Op};
use crate::kinds::{batch_then_each, Change, Env, KindError, Outcome, RunContext};
use crate::model::spec::containers::Spec;
use crate::model::spec::NoOriginal;
use crate::tools::podman;

/// One outcome per change, in order.
pub(super) fn apply(
    env: &Env,
    cx: &RunContext,
    changes: &[Change<Op, NoOriginal>],
) -> Vec<Outcome> {
    if env.offline {
        return changes
            .iter()
            .map(|_| Outcome::Deferred("containers need the running system".into()))
            .collect();
    }
    let names = |pick: fn(&Op) -> bool| -> Vec<&str> {
        (changes.iter())
            .filter(|c| pick(&c.op))
            .map(|c| c.key.as_str())
            .collect()
    };
    let mut phases = Phases::new(env);
    let remove = |op: &Op| {
        matches!(
            op,
            Op::Remove
                | Op::Create {
                    remove_first: true,
                    ..
                }
        )
    };
    phases.batch("remove", podman::remove(), names(remove));
    phases.batch(
        "unpause",
        podman::unpause(),
        names(|op| matches!(op, Op::Unpause { .. })),
    );
    let stop = names(|op| matches!(op, Op::Stop | Op::Unpause { stop: true }));
    let stop = phases.still_going(stop);
    phases.batch("stop", podman::stop(), stop);
    phases.create(cx, changes);
    let start = names(|op| matches!(op, Op::Start | Op::Create { start: true, .. }));
    let start = phases.still_going(start);
    phases.batch("start", podman::start(), start);
    changes
        .iter()
        .map(|c| match phases.errors.get(c.key.as_str()) {
            Some(e) => Outcome::Failed(e.clone()),
            None if phases.stopped.contains(c.key.as_str()) => Outcome::Stopped,
            None => Outcome::Done,
        })
        .collect()
}

/// How far the phases got with each container.
struct Phases<'e, 'a, 'n> {
    env: &'e Env<'a>,
    /// The first error of each container.
    errors: BTreeMap<&'n str, KindError>,
    /// Checked before each batched call and each create: once the host is stopping, what is
    /// left waits for the next run, which observes where it stopped.
    stopped: BTreeSet<&'n str>,
}

impl<'e, 'a, 'n> Phases<'e, 'a, 'n> {
    fn new(env: &'e Env<'a>) -> Self {
        Phases {
            env,
            errors: BTreeMap::new(),
            stopped: BTreeSet::new(),
        }
    }

    /// Of `names`, those neither failed nor left for the next run so far.
    fn still_going(&self, names: Vec<&'n str>) -> Vec<&'n str> {
        (names.into_iter())
            .filter(|name| !self.errors.contains_key(name) && !self.stopped.contains(name))
            .collect()
    }

    /// One batched podman call of `args` over `names` (`step` names it in errors), unless the
    /// host is stopping.
    fn batch(&mut self, step: &'static str, args: Vec<String>, names: Vec<&'n str>) {
        let env = self.env;
        if !names.is_empty() && (env.interrupted)() {
            self.stopped.extend(names);
            return;
        }
        let results = batch_then_each(env.runner, &names, |batch| {
            env.runner
                .run(&env.config.podman, &args, batch)
                .map(drop)
                .map_err(|e| KindError::command(step, e))
        });
        // Names past the results' end were not attempted (the host stopping).
        self.stopped.extend(names.iter().skip(results.len()));
        for (name, result) in names.iter().zip(results) {
            if let Err(e) = result {
                self.errors.entry(*name).or_insert(e);
            }
        }
    }

    /// Each container to create, one `podman create` at a time.
    fn create(&mut self, cx: &RunContext, changes: &'n [Change<Op, NoOriginal>]) {
        for change in changes {
            let key = change.key.as_str();
            if !matches!(change.op, Op::Create { .. })
                || self.errors.contains_key(key)
                || self.stopped.contains(key)
            {
                continue;
            }
            if (self.env.interrupted)() {
                self.stopped.insert(key);
                continue;
            }
            let created = match cx.declaration.containers.get(key) {
                Some(spec) => create(self.env, key, spec, cx.digest_key.as_ref()),
                None => Err("no longer declared, so there is nothing to create it from".into()),
            };
            if let Err(e) = created {
                self.errors.insert(key, e);
            }
        }
    }
}

/// `podman create` of `spec`, labelled as the host's with its digest, and, when the container
/// has an environment, `--env-file` from the store: written just before, removed just after.
fn create(env: &Env, name: &str, spec: &Spec, key: Option<&[u8; 32]>) -> Result<(), KindError> {
    let vars = Some(&spec.env).filter(|v| !v.is_empty());
    let env_file = match (vars, env.store) {
        (None, _) => None,
        (Some(vars), Some(store)) => Some(
            store
                .write_env_file(name, &env_file(vars))
                .map_err(|e| e.to_string())?,
        ),
        (Some(_), None) => return Err("no store to keep its environment file in".into()),
    };
    let env_file_text = env_file.as_ref().map(|p| p.display().to_string());
    let spec_digest = label_digest(spec, key);
    let labels = labels(&spec_digest);
    let command = create_command(name, spec, &labels, env_file_text.as_deref());
    let created = env
        .runner
        .run(
            &env.config.podman,
            &command.options(),
            &command.positional(),
        )
        .map(drop)
        .map_err(|e| KindError::command("create", e));
    match (env_file, env.store) {
        (Some(_), Some(store)) => created.and(
            store
                .remove_env_file(name)
                .map_err(|e| KindError::from(e.to_string())),
        ),
        _ => created,
    }
}

/// podman's `--env-file` format: `NAME=VALUE` lines, the value verbatim to the line's end (what
/// validation lets through: no line breaks or NULs, no leading quote).
pub(super) fn env_file(vars: &BTreeMap<String, String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in vars {
        out.extend_from_slice(format!("{name}={value}\n").as_bytes());
    }
    out
}

/// What `podman create` is given for `spec`. The environment is not in its arguments: it goes
/// in an `--env-file` (`env_file`), so its values never reach an argv.
pub(super) fn create_command<'a>(
    name: &'a str,
    spec: &'a Spec,
    labels: &'a [(&'a str, &'a str)],
    env_file: Option<&'a str>,
) -> podman::Create<'a> {
    podman::Create {
        name,
        labels,
        ports: &spec.ports,
        volumes: &spec.volumes,
        network: spec.network.as_deref(),
        init: spec.init,
        env_file,
        image: &spec.image,
        command: &spec.command,
    }
}
