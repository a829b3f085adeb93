//! podman containers. One `podman ps -a --format json` observes them all. Containers the host
//! creates carry labels marking them as owned and holding a digest of their spec, so ownership and
//! a changed spec are visible from podman itself; a container without the label is never touched
//! by pruning. Missing -> create and start; spec changed -> recreate; stopped -> start.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    batch_then_each, Action, Change, Env, Hints, Kind, KindError, LedgerAfter, Observations,
    Outcome, RunContext, Step,
};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::containers::{digest, encoding, Containers, Spec};
use crate::model::spec::{KindSpec, NoOriginal};
use crate::store::{Digest, Entry, Ledger};
use crate::tools::podman::{self, State};
use crate::util::codec;

mod legacy;

/// Label marking a container as created by mesh-host.
pub const OWNED_LABEL: &str = "mesh-host.owned";
/// Label holding the digest of the spec a container was created from.
pub const SPEC_LABEL: &str = "mesh-host.spec";

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub exists: bool,
    pub running: bool,
    /// Paused by someone (`podman pause`): neither `start` nor `stop` accepts it until unpaused.
    pub paused: bool,
    /// Created by mesh-host (it carries the owned label).
    pub ours: bool,
    pub spec_digest: Option<String>,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    /// Create (removing an older one of ours first) and, if it should run, start.
    Create {
        remove_first: bool,
        start: bool,
    },
    Start,
    Stop,
    /// Unpause a paused container, then stop it if it should not run.
    Unpause {
        stop: bool,
    },
    Remove,
    Forget,
}

impl Kind for Containers {
    // In phases over every container (removals, then stops, then creates): split, a create
    // could come before the removal that frees its name or port.
    const APPLIED_IN_CHUNKS: bool = false;
    type Observed = Observed;
    type Op = Op;
    type Facts = ();

    fn digest_observed(spec: &Spec, _: Option<&Observed>) -> Digest {
        Self::digest(spec)
    }

    fn observe(
        env: &Env,
        _cx: &RunContext,
        keys: &[&str],
    ) -> Result<Observations<Observed>, KindError> {
        if keys.is_empty() || env.offline {
            // Offline, podman's store is not ours to read: every container change is deferred.
            return Ok(keys.iter().map(|k| (k.to_string(), Ok(absent()))).collect());
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
            .map(|&k| {
                (
                    k.to_string(),
                    Ok(all.get(k).cloned().unwrap_or_else(absent)),
                )
            })
            .collect())
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<NoOriginal>>,
    ) -> Step<Op, NoOriginal> {
        let Some(obs) = observed else {
            return Step::Fail(format!("container {key} was not observed"));
        };
        let change = |action, details: Vec<String>, intent: Option<Entry<_>>, after, op| {
            Step::Change(Change {
                key: key.to_string(),
                action,
                details: details.into(),
                diff: None,
                intent: intent.map(Box::new),
                backup: None,
                after,
                op,
            })
        };
        let created = || Entry::created();
        if cx.offline {
            // Podman was not asked, so nothing is known about the container: whatever the
            // declaration wants waits for the running system, and the ledger keeps what it owns
            // (forgetting an owned container here would leave it running and never released).
            let needs_system = || vec!["needs the running system".to_string()];
            return match (desired, owned) {
                (Some(spec), _) if spec.present => change(
                    Action::Update,
                    needs_system(),
                    None,
                    LedgerAfter::Applied(digest(spec)),
                    Op::Forget,
                ),
                (_, Some(_)) => change(
                    Action::Remove,
                    needs_system(),
                    None,
                    LedgerAfter::Disown,
                    Op::Forget,
                ),
                (_, None) => Step::InSync,
            };
        }
        match desired {
            Some(spec) if spec.present => {
                let after = LedgerAfter::Applied(digest(spec));
                let create = |remove_first| Op::Create {
                    remove_first,
                    start: spec.running,
                };
                if !obs.exists {
                    return change(
                        Action::Create,
                        vec![format!("create from {}", spec.image)],
                        owned.is_none().then(created),
                        after,
                        create(false),
                    );
                }
                if !obs.ours {
                    return Step::Fail(format!(
                        "a container named {key} exists and was not created by mesh-host; remove or rename it to let mesh-host manage it"
                    ));
                }
                if !label_matches(obs.spec_digest.as_deref(), spec, cx.digest_key.as_ref()) {
                    return change(
                        Action::Update,
                        vec!["spec changed: recreate".into()],
                        owned.is_none().then(created),
                        after,
                        create(true),
                    );
                }
                let intent = owned.is_none().then(created);
                if obs.paused {
                    let (details, stop) = match spec.running {
                        true => (vec!["unpause".into()], false),
                        false => (vec!["unpause".into(), "stop".into()], true),
                    };
                    return change(Action::Update, details, intent, after, Op::Unpause { stop });
                }
                match (spec.running, obs.running) {
                    (true, false) => change(
                        Action::Update,
                        vec!["start".into()],
                        intent,
                        after,
                        Op::Start,
                    ),
                    (false, true) => {
                        change(Action::Update, vec!["stop".into()], intent, after, Op::Stop)
                    }
                    _ => match intent {
                        Some(intent) => Step::Adopt {
                            intent,
                            backup: None,
                        },
                        None => Step::InSync,
                    },
                }
            }
            Some(_) if obs.exists => change(
                Action::Remove,
                vec!["declared absent".into()],
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            Some(_) => match owned {
                Some(_) => change(
                    Action::Remove,
                    vec!["already absent".into()],
                    None,
                    LedgerAfter::Disown,
                    Op::Forget,
                ),
                None => Step::InSync,
            },
            None => match (owned, obs.exists && obs.ours) {
                (None, _) => Step::InSync,
                (Some(_), true) => change(
                    Action::Remove,
                    vec!["released; mesh-host created it".into()],
                    None,
                    LedgerAfter::Disown,
                    Op::Remove,
                ),
                (Some(_), false) => {
                    let why = if obs.exists {
                        "released; not created by mesh-host, left alone"
                    } else {
                        "released; already gone"
                    };
                    change(
                        Action::Remove,
                        vec![why.into()],
                        None,
                        LedgerAfter::Disown,
                        Op::Forget,
                    )
                }
            },
        }
    }

    /// Nothing comes after containers.
    fn note(_: &Declaration, _: &mut (), _: &Change<Op, NoOriginal>, _: &Outcome) {}

    fn called_by_facts(_: &super::Facts) -> bool {
        false
    }

    fn take_refused(_: &mut ()) -> Vec<(String, String)> {
        Vec::new()
    }

    fn owing<'d>(_: &'d Declaration, _: &super::Facts) -> Vec<(&'d str, &'d str)> {
        Vec::new()
    }

    fn pacnew(_: &Env, _: &Declaration, _: &Ledger, _: &mut QuietDirs) -> Vec<Pacnew> {
        Vec::new()
    }

    /// None: a container's state is podman's, with no file event that cheaply says it changed;
    /// containers are left to the drift timer.
    fn watch<'d>(_: &'d Declaration, _: &'d Ledger, _: &mut dyn Hints<'d>) {}

    fn apply(
        env: &Env,
        cx: &RunContext,
        _ledger: &mut Ledger,
        changes: &[Change<Op, NoOriginal>],
    ) -> Vec<Outcome> {
        if env.offline {
            return changes
                .iter()
                .map(|_| Outcome::Deferred("containers need the running system".into()))
                .collect();
        }
        let tool = &env.config.podman;
        let mut errors: BTreeMap<&str, KindError> = BTreeMap::new();
        // Checked before each batched call and each create: once the host is stopping, what is
        // left waits for the next run, which observes where it stopped.
        let mut stopped: BTreeSet<&str> = BTreeSet::new();
        let names = |pick: fn(&Op) -> bool| -> Vec<&str> {
            changes
                .iter()
                .filter(|c| pick(&c.op))
                .map(|c| c.key.as_str())
                .collect()
        };
        let remove = names(|op| {
            matches!(
                op,
                Op::Remove
                    | Op::Create {
                        remove_first: true,
                        ..
                    }
            )
        });
        let remove = unless_stopping(env, remove, &mut stopped);
        let results = batch_then_each(env.runner, &remove, |batch| {
            env.runner
                .run(tool, &podman::remove(), batch)
                .map(drop)
                .map_err(|e| KindError::command("remove", e))
        });
        record_errors(&mut errors, &mut stopped, &remove, results);
        let unpause = unless_stopping(
            env,
            names(|op| matches!(op, Op::Unpause { .. })),
            &mut stopped,
        );
        let results = batch_then_each(env.runner, &unpause, |batch| {
            env.runner
                .run(tool, &podman::unpause(), batch)
                .map(drop)
                .map_err(|e| KindError::command("unpause", e))
        });
        record_errors(&mut errors, &mut stopped, &unpause, results);
        let stop: Vec<&str> = names(|op| matches!(op, Op::Stop | Op::Unpause { stop: true }))
            .into_iter()
            .filter(|name| !errors.contains_key(name) && !stopped.contains(name))
            .collect();
        let stop = unless_stopping(env, stop, &mut stopped);
        let results = batch_then_each(env.runner, &stop, |batch| {
            env.runner
                .run(tool, &podman::stop(), batch)
                .map(drop)
                .map_err(|e| KindError::command("stop", e))
        });
        record_errors(&mut errors, &mut stopped, &stop, results);
        for change in changes {
            if !matches!(change.op, Op::Create { .. })
                || errors.contains_key(change.key.as_str())
                || stopped.contains(change.key.as_str())
            {
                continue;
            }
            if (env.interrupted)() {
                stopped.insert(&change.key);
                continue;
            }
            let created = match cx.declaration.containers.get(&change.key) {
                Some(spec) => create(env, &change.key, spec, cx.digest_key.as_ref()),
                None => Err("no longer declared, so there is nothing to create it from".into()),
            };
            if let Err(e) = created {
                errors.insert(&change.key, e);
            }
        }
        let start: Vec<&str> = changes
            .iter()
            .filter(|c| {
                matches!(c.op, Op::Start | Op::Create { start: true, .. })
                    && !errors.contains_key(c.key.as_str())
                    && !stopped.contains(c.key.as_str())
            })
            .map(|c| c.key.as_str())
            .collect();
        let start = unless_stopping(env, start, &mut stopped);
        let results = batch_then_each(env.runner, &start, |batch| {
            env.runner
                .run(tool, &podman::start(), batch)
                .map(drop)
                .map_err(|e| KindError::command("start", e))
        });
        record_errors(&mut errors, &mut stopped, &start, results);
        changes
            .iter()
            .map(|c| match errors.get(c.key.as_str()) {
                Some(e) => Outcome::Failed(e.clone()),
                None if stopped.contains(c.key.as_str()) => Outcome::Stopped,
                None => Outcome::Done,
            })
            .collect()
    }
}

/// `names`, or none once the host is stopping (they go to `stopped`, for the next run).
fn unless_stopping<'a>(
    env: &Env,
    names: Vec<&'a str>,
    stopped: &mut BTreeSet<&'a str>,
) -> Vec<&'a str> {
    if names.is_empty() || !(env.interrupted)() {
        return names;
    }
    stopped.extend(names);
    Vec::new()
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
fn env_file(vars: &BTreeMap<String, String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in vars {
        out.extend_from_slice(format!("{name}={value}\n").as_bytes());
    }
    out
}

/// Keeps the first error of each resource; names past the results' end were not attempted (the
/// host stopping).
fn record_errors<'a>(
    errors: &mut BTreeMap<&'a str, KindError>,
    stopped: &mut BTreeSet<&'a str>,
    names: &[&'a str],
    results: Vec<Result<(), KindError>>,
) {
    stopped.extend(names.iter().skip(results.len()));
    for (name, result) in names.iter().zip(results) {
        if let Err(e) = result {
            errors.entry(*name).or_insert(e);
        }
    }
}

fn absent() -> Observed {
    Observed {
        exists: false,
        running: false,
        paused: false,
        ours: false,
        spec_digest: None,
    }
}

/// The digest a container's `mesh-host.spec` label holds, which `podman ps` shows and a create's
/// command line carries (into errors, traces and the debug log): the first 32 hex digits of the
/// SHA-256 of the spec's encoding. Of a spec with an environment, whose values are secret, it is
/// keyed with the host's digest key (the HMAC-SHA256 of the encoding, `codec::hmac_sha256`), so
/// no one can test a guessed value against it.
pub fn label_digest(spec: &Spec, key: Option<&[u8; 32]>) -> String {
    let encoding = encoding(spec);
    let digest = match key.filter(|_| !spec.env.is_empty()) {
        Some(key) => encoding.keyed_digest(key),
        None => encoding.digest(),
    };
    codec::hex(&digest)[..32].to_string()
}

/// Whether a container's label says it was created from `spec`: its label, or the one 21d51db
/// and earlier gave it (`legacy`), which it keeps until it is recreated for another reason.
fn label_matches(label: Option<&str>, spec: &Spec, key: Option<&[u8; 32]>) -> bool {
    let Some(label) = label else {
        return false;
    };
    label == label_digest(spec, key) || label == legacy::label_digest(spec, key)
}

/// The labels of a container the host creates: owned, and the digest of its spec.
fn labels(spec_digest: &str) -> [(&'static str, &str); 2] {
    [(OWNED_LABEL, "1"), (SPEC_LABEL, spec_digest)]
}

/// What `podman create` is given for `spec`. The environment is not in its arguments: it goes
/// in an `--env-file` (`env_file`), so its values never reach an argv.
fn create_command<'a>(
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

/// What `podman ps` says of each container, by name.
fn observed(stdout: &[u8]) -> Result<BTreeMap<String, Observed>, serde_json::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};

    #[test]
    fn validation() {
        check_refused(
            r#"{"schema": 1, "containers": {"-web": {"image": "x"}}}"#,
            &["starts with '-'"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"we b": {"image": "x"}}}"#,
            &["whitespace"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {}}}"#,
            &["image: missing"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "--privileged"}}}"#,
            &["image: image name \"--privileged\" starts with '-'"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "x", "ports": ["--net=host"]}}}"#,
            &["ports[0]"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "x", "env": {"A B": "1"}}}}"#,
            &["env[\"A B\"]"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "x", "volumes": ["/var/lib/mesh-host:/x"]}}}"#,
            &["refused", "own store"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "x", "volumes": ["/etc/mesh-host:/x:rw"]}}}"#,
            &["refused", "own configuration"],
        );
        check_refused(
            r#"{"schema": 1, "containers": {"web": {"image": "x", "imgae": "y"}}}"#,
            &["unknown field \"imgae\""],
        );
        assert!(problems(r#"{"schema": 1, "containers": {"web": {"image": "localhost/web:1", "command": ["--flag"], "env": {"A": "--x"}, "ports": ["127.0.0.1:8080:80/tcp"], "volumes": ["/srv/data:/data:ro", "cache:/c"], "network": "host"}}}"#).is_empty());
    }

    #[test]
    fn ports_are_podmans_forms_with_numbers_in_range() {
        use crate::model::spec::containers::valid_port;
        for good in [
            "80",
            "8080:80",
            "127.0.0.1:8080:80/tcp",
            "127.0.0.1::80",
            "[::1]:8080:80/udp",
            "0:80",
            "8000-8010:9000-9010/tcp,udp",
            "65535:65535/sctp",
        ] {
            assert!(valid_port(good), "{good}");
        }
        for bad in [
            "",
            "--net=host",
            "99999:80",
            "80:0",
            "0",
            "18446744073709551616:80",
            "1.5:80",
            "-1:80",
            "+80",
            "8010-8000:80",
            "80/xyz",
            "80/",
            "1.2.3.4.5:80:80",
            "[::1:80:80",
            "a:b:c:d",
        ] {
            assert!(!valid_port(bad), "{bad}");
        }
    }

    #[test]
    fn create_args_bind_values_to_options() {
        let d = parse_with_defaults(r#"{"schema": 1, "containers": {"web": {"image": "img", "command": ["--rm"], "env": {"A": "--privileged"}}}}"#).unwrap();
        let labels = labels("abc");
        let command = create_command("web", &d.containers["web"], &labels, None);
        let mut args = command.options();
        args.push("--".into());
        args.extend(command.positional().into_iter().map(String::from));
        assert_eq!(
            args,
            vec![
                "create",
                "--name=web",
                "--label=mesh-host.owned=1",
                "--label=mesh-host.spec=abc",
                "--",
                "img",
                "--rm"
            ]
        );
    }

    #[test]
    fn env_values_reach_podman_only_through_a_file() {
        let d = parse_with_defaults(r#"{"schema": 1, "containers": {"web": {"image": "img", "env": {"TOKEN": "s3cret=1", "EMPTY": ""}}}}"#).unwrap();
        let spec = &d.containers["web"];
        let labels = labels("abc");
        let command = create_command("web", spec, &labels, None);
        let args = format!(
            "{} {}",
            command.options().join(" "),
            command.positional().join(" ")
        );
        assert!(
            !args.contains("s3cret") && !args.contains("TOKEN"),
            "{args}"
        );
        assert_eq!(env_file(&spec.env), b"EMPTY=\nTOKEN=s3cret=1\n");
        for (value, problem) in [
            ("a\nb", "line break"),
            ("a\rb", "line break"),
            ("\"quoted\"", "starts with a quote"),
            ("'quoted'", "starts with a quote"),
        ] {
            let json = serde_json::json!({"schema": 1, "containers": {"web": {"image": "img", "env": {"TOKEN": value}}}});
            let found = problems(&json.to_string());
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].contains("env[\"TOKEN\"]") && found[0].contains(problem),
                "{found:?}"
            );
            assert!(
                !found[0].contains(value),
                "the value itself is never shown: {found:?}"
            );
        }
    }

    #[test]
    fn parses_ps_json() {
        let json = br#"[{"Names": ["web"], "State": "running", "Labels": {"mesh-host.owned": "1", "mesh-host.spec": "abc"}},
                        {"Names": ["other"], "State": "exited", "Labels": null}]"#;
        let all = observed(json).unwrap();
        assert_eq!(
            all["web"],
            Observed {
                exists: true,
                running: true,
                paused: false,
                ours: true,
                spec_digest: Some("abc".into())
            }
        );
        assert!(!all["other"].ours && !all["other"].running);
        assert!(observed(b"garbage").is_err());
    }

    #[test]
    fn parses_saved_podman_ps() {
        for g in crate::tools::generations("podman") {
            let all = observed(g.read("podman-ps.json").as_bytes()).unwrap();
            assert_eq!(all.len(), 2, "{}", g.name);
            assert_eq!(
                all["mesh-fix-running"],
                Observed {
                    exists: true,
                    running: true,
                    paused: false,
                    ours: true,
                    spec_digest: Some("abc123".into())
                },
                "{}",
                g.name
            );
            // `Labels: null`, `State: exited` (status 3): someone else's, stopped.
            assert_eq!(
                all["mesh-fix-exited"],
                Observed {
                    exists: true,
                    running: false,
                    paused: false,
                    ours: false,
                    spec_digest: None
                },
                "{}",
                g.name
            );
            let empty = observed(g.read("podman-ps-empty.json").as_bytes()).unwrap();
            assert!(empty.is_empty(), "{}", g.name);
        }
    }

    #[test]
    fn offline_defers_and_never_forgets_an_owned_container() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "containers": {"web": {"image": "img"}, "gone": {"state": "absent"}}}"#,
        )
        .unwrap();
        let cx = RunContext::new(&d, true);
        let owned = Entry::created();
        let plan = |key: &str, spec: Option<&Spec>, owned: Option<&Entry<NoOriginal>>| {
            match Containers::plan(&cx, key, spec, Some(&absent()), owned) {
                Step::InSync => "in sync".to_string(),
                Step::Change(c) => format!(
                    "{} {} {:?} {:?}",
                    c.action.symbol(),
                    c.details.join(", "),
                    c.after,
                    c.op
                ),
                _ => "other".into(),
            }
        };
        let web = &d.containers["web"];
        assert_eq!(
            plan("web", Some(web), None),
            format!(
                "~ needs the running system Applied({:?}) Forget",
                digest(web)
            )
        );
        for spec in [None, Some(&d.containers["gone"])] {
            assert_eq!(
                plan("x", spec, Some(&owned)),
                "- needs the running system Disown Forget"
            );
            assert_eq!(plan("x", spec, None), "in sync");
        }
    }

    /// A spec with an environment is labelled with its keyed digest, which the planner finds in
    /// sync under the same key; a spec without one keeps the plain digest it always had.
    #[test]
    fn a_spec_with_an_environment_is_labelled_with_its_keyed_digest() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "containers": {"web": {"image": "img", "env": {"TOKEN": "canary-1234"}},
                "plain": {"image": "img"}}}"#,
        )
        .unwrap();
        let (web, plain) = (&d.containers["web"], &d.containers["plain"]);
        let key = [3u8; 32];
        assert_eq!(label_digest(plain, Some(&key)), label_digest(plain, None));
        let keyed = label_digest(web, Some(&key));
        assert_eq!(keyed.len(), 32);
        assert_ne!(keyed, label_digest(web, None));
        assert_ne!(keyed, label_digest(web, Some(&[4; 32])));
        let mut cx = RunContext::new(&d, false);
        cx.digest_key = Some(key);
        let labelled = |label: String| Observed {
            exists: true,
            running: true,
            paused: false,
            ours: true,
            spec_digest: Some(label),
        };
        let plan = |label| Containers::plan(&cx, "web", Some(web), Some(&labelled(label)), None);
        assert!(matches!(plan(keyed), Step::Adopt { .. } | Step::InSync));
        assert!(matches!(plan(label_digest(web, None)), Step::Change(_)));
    }

    #[test]
    fn planner_cases() {
        let d = parse_with_defaults(r#"{"schema": 1, "containers": {"web": {"image": "img"}}}"#)
            .unwrap();
        let cx = RunContext::new(&d, false);
        let spec = &d.containers["web"];
        let ours = |running, digest_ok: bool| Observed {
            exists: true,
            running,
            paused: false,
            ours: true,
            spec_digest: Some(if digest_ok {
                label_digest(spec, None)
            } else {
                "old".into()
            }),
        };
        let owned = Entry::created();
        let show = |s: Step<Op, NoOriginal>| match s {
            Step::InSync => "in sync".to_string(),
            Step::Adopt { .. } => "adopt".into(),
            Step::Change(c) => format!("{} {}", c.action.symbol(), c.details.join(", ")),
            Step::Fail(e) | Step::Skip(e) => format!("fail: {e}"),
        };
        let plan =
            |d: Option<&Spec>, o: &Observed, e| show(Containers::plan(&cx, "web", d, Some(o), e));
        assert_eq!(plan(Some(spec), &absent(), None), "+ create from img");
        assert_eq!(plan(Some(spec), &ours(true, true), Some(&owned)), "in sync");
        assert_eq!(
            plan(Some(spec), &ours(false, true), Some(&owned)),
            "~ start"
        );
        assert_eq!(
            plan(Some(spec), &ours(true, false), Some(&owned)),
            "~ spec changed: recreate"
        );
        let paused = Observed {
            running: false,
            paused: true,
            ..ours(false, true)
        };
        assert_eq!(plan(Some(spec), &paused, Some(&owned)), "~ unpause");
        let stopped = parse_with_defaults(
            r#"{"schema": 1, "containers": {"web": {"image": "img", "running": false}}}"#,
        )
        .unwrap();
        assert_eq!(
            plan(Some(&stopped.containers["web"]), &paused, Some(&owned)),
            "~ unpause, stop"
        );
        let foreign = Observed {
            exists: true,
            running: true,
            paused: false,
            ours: false,
            spec_digest: None,
        };
        assert!(plan(Some(spec), &foreign, None).contains("was not created by mesh-host"));
        assert_eq!(
            plan(None, &foreign, Some(&owned)),
            "- released; not created by mesh-host, left alone"
        );
        assert_eq!(
            plan(None, &ours(true, true), Some(&owned)),
            "- released; mesh-host created it"
        );
        assert_eq!(plan(None, &foreign, None), "in sync");
    }

    /// The sandbox's test image, as its container tests declare it.
    const IMAGE: &str = "localhost/mesh-test-busybox:latest";

    fn spec(present: bool, image: &str, env: &[(&str, &str)]) -> Spec {
        Spec {
            present,
            image: image.into(),
            command: if present {
                vec!["sleep".into(), "1000".into()]
            } else {
                Vec::new()
            },
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ports: Vec::new(),
            volumes: Vec::new(),
            network: None,
            init: present,
            running: true,
        }
    }

    /// The ledger's digests and the labels, plain and keyed (a secret environment, unicode, an
    /// empty value), pinned; a spec declared absent written out byte by byte.
    #[test]
    fn digests_and_labels_are_pinned_to_their_canonical_encoding() {
        let key = codec::hex_decode_32(
            "53f0859326c6877a1546fbd38131179fe0d4d836954d8019d723fa7e0dacbec7",
        )
        .unwrap();
        let full = Spec {
            command: Vec::new(),
            ports: vec!["8080:80".into(), "127.0.0.1:8443:443/tcp".into()],
            volumes: vec!["/srv/data:/data:ro".into(), "name:/cache".into()],
            network: Some("host".into()),
            init: false,
            running: false,
            ..spec(true, "docker.io/library/nginx:1.25", &[])
        };
        let absent = spec(false, "", &[]);
        for (spec, hex, keyed) in [
            (
                spec(true, IMAGE, &[]),
                "4c28a9f0f1ea183571c46e65dd36f8cca79a87b103b637024a74a5c0022d8623",
                "4c28a9f0f1ea183571c46e65dd36f8cc",
            ),
            (
                spec(true, IMAGE, &[("TOKEN", "s3cret \u{2713}"), ("A", "")]),
                "ed89966f3d0a89825c1d02146158f4c2e4f4d9edd5a4a8d80fbeaeb420edfb2c",
                "7190e139c85bf7b8306a90ae7276e42a",
            ),
            (
                full,
                "589f1e9c48cf31e1ccd65a1f0372c3714b1eafcf8c6300ff03edfc13956269b7",
                "589f1e9c48cf31e1ccd65a1f0372c371",
            ),
            (
                absent.clone(),
                "2c3f221e7777f6df1e3aa0f01155838abdf37b428d7f8c26c4e3b4b7f7d85f61",
                "2c3f221e7777f6df1e3aa0f01155838a",
            ),
        ] {
            assert_eq!(digest(&spec).to_string(), hex, "{spec:?}");
            assert_eq!(label_digest(&spec, None), hex[..32], "{spec:?}");
            assert_eq!(label_digest(&spec, Some(&key)), keyed, "{spec:?}");
        }
        // Absent: present false, an empty image, no command, env, ports or volumes, no network,
        // no init.
        let mut by_hand = b"containers\x00\x01\x00".to_vec();
        by_hand.extend_from_slice(&[0; 40]);
        by_hand.extend_from_slice(b"\x00\x00");
        assert_eq!(digest(&absent), Digest::Sha256(codec::sha256(&by_hand)));
    }

    /// Containers 21d51db created carry the label it computed from the spec's `{:?}` text (here
    /// as it labelled two containers in the sandbox, with its store's digest key): found in sync,
    /// not recreated; another spec is still a change.
    #[test]
    fn a_label_written_by_21d51db_is_in_sync() {
        let key = codec::hex_decode_32(
            "53f0859326c6877a1546fbd38131179fe0d4d836954d8019d723fa7e0dacbec7",
        )
        .unwrap();
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "containers": {{
                "plain": {{"image": "{IMAGE}", "command": ["sleep", "1000"], "init": true}},
                "env": {{"image": "{IMAGE}", "command": ["sleep", "1000"], "init": true,
                         "env": {{"TOKEN": "s3cret \u2713", "A": ""}}}}}}}}"#
        ))
        .unwrap();
        let mut cx = RunContext::new(&d, false);
        cx.digest_key = Some(key);
        let labelled = |label: &str| Observed {
            exists: true,
            running: true,
            paused: false,
            ours: true,
            spec_digest: Some(label.into()),
        };
        let owned = Entry::created();
        for (name, label) in [
            ("plain", "40b8b1d9921210ecbd1c7ad9f7798cf4"),
            ("env", "2da8f30f42196195bff68fac1984f71e"),
        ] {
            let spec = &d.containers[name];
            assert_eq!(legacy::label_digest(spec, Some(&key)), label);
            assert_ne!(label_digest(spec, Some(&key)), label);
            let step =
                Containers::plan(&cx, name, Some(spec), Some(&labelled(label)), Some(&owned));
            assert!(matches!(step, Step::InSync), "{name}");
            let other = Spec {
                init: false,
                ..spec.clone()
            };
            let step = Containers::plan(
                &cx,
                name,
                Some(&other),
                Some(&labelled(label)),
                Some(&owned),
            );
            assert!(matches!(step, Step::Change(_)), "{name}");
        }
    }
}
