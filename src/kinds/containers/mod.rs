//! podman containers. One `podman ps -a --format json` observes them all. Containers the host
//! creates carry labels marking them as owned and holding a digest of their spec, so ownership and
//! a changed spec are visible from podman itself; a container without the label is never touched
//! by pruning. Missing -> create and start; spec changed -> recreate; stopped -> start.

use super::{Change, Env, Hints, Kind, KindError, Observations, Outcome, RunContext, Step};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::containers::{Containers, Spec};
use crate::model::spec::{KindSpec, NoOriginal};
use crate::store::{Digest, Entry, Ledger};

mod apply;
mod legacy;
mod observe;
mod plan;
mod state;

pub use state::{Observed, Op};

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

    fn observe<'k>(
        env: &Env,
        _cx: &RunContext,
        keys: &[&'k str],
    ) -> Result<Observations<'k, Observed>, KindError> {
        observe::observe(env, keys)
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<NoOriginal>>,
    ) -> Step<Op, NoOriginal> {
        plan::plan(cx, key, desired, observed, owned)
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
        apply::apply(env, cx, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::apply::{create_command, env_file};
    use super::observe::observed;
    use super::state::{absent, label_digest, labels};
    use super::*;
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};
    use crate::model::spec::containers::digest;
    use crate::util::codec;

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
