//! pacman packages. One `pacman -Qi` observes them all; missing ones install in one
//! `pacman -S --needed` (or a full `-Syu` when the declaration asks: never a partial upgrade), and
//! removals go in one `pacman -Rs`. Only packages the host installed are removed on release.
//! Declared packages are kept explicitly installed, so no `-Rs` (the host's or a person's) takes
//! one away as a dependency nobody needs any more. A full upgrade takes the keyrings first, alone;
//! a transaction that would not fit on disk is not started; `cache_keep` prunes pacman's cache.

use super::{Change, Env, Hints, Kind, KindError, Observations, Outcome, Place, RunContext, Step};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::packages::{Packages, Spec};
use crate::model::spec::KindSpec;
use crate::store::{Digest, Entry, Ledger};
use crate::tools::pacman::InstallReason;
use crate::util::sorted;

mod apply;
mod checks;
mod lock;
mod observe;
mod plan;
mod room;
mod state;

pub use state::{Facts, Observed, Op};

impl Kind for Packages {
    // One pacman transaction for the kind: a package removed in one chunk may be needed by one
    // removed in a later chunk, which pacman refuses apart.
    const APPLIED_IN_CHUNKS: bool = false;
    type Observed = Observed;
    type Op = Op;
    type Facts = Facts;

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
        _cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<InstallReason>>,
    ) -> Step<Op, InstallReason> {
        plan::plan(key, desired, observed, owned)
    }

    fn apply(
        env: &Env,
        cx: &RunContext,
        _ledger: &mut Ledger,
        changes: &[Change<Op, InstallReason>],
    ) -> Vec<Outcome> {
        apply::apply(env, cx, changes)
    }

    fn note(
        _: &Declaration,
        facts: &mut Facts,
        change: &Change<Op, InstallReason>,
        outcome: &Outcome,
    ) {
        if change.op == Op::Install && *outcome != Outcome::Done {
            facts.failed.insert(change.key.clone());
        }
    }

    fn called_by_facts(_: &super::Facts) -> bool {
        false
    }

    fn take_refused(_: &mut Facts) -> Vec<(String, String)> {
        Vec::new()
    }

    fn owing<'d>(_: &'d Declaration, _: &super::Facts) -> Vec<(&'d str, &'d str)> {
        Vec::new()
    }

    fn pacnew(_: &Env, _: &Declaration, _: &Ledger, _: &mut QuietDirs) -> Vec<Pacnew> {
        Vec::new()
    }

    /// pacman's local database: a transaction, ours or anyone's, changes it, and may have
    /// changed any declared or owned package.
    fn watch<'d>(declaration: &'d Declaration, ledger: &'d Ledger, hints: &mut dyn Hints<'d>) {
        let declared = declaration.packages.keys().map(String::as_str);
        for name in sorted::union(declared, ledger.owned_keys::<Packages>()) {
            hints.any(Place::PacmanDb, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::checks::takes_over;
    use super::*;
    use crate::model::declaration::tests::{check_refused, problems};
    use crate::model::spec::packages::digest;
    use crate::tools::pacman::{self, SyncInfo};

    #[test]
    fn names_follow_pacmans_rules_and_never_become_options() {
        for (name, message) in [
            ("-Syu", "starts with '-'"),
            ("--config=/tmp/x", "starts with '-'"),
            (".hidden", "starts with '.'"),
            ("a b", "whitespace"),
            ("nginx;rm", "contains ';'"),
            ("", "empty"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "packages": {{{}: {{}}}}}}"#,
                serde_json::Value::String(name.into())
            );
            check_refused(&json, &[message]);
        }
        assert!(problems(r#"{"schema": 1, "packages": {"lib32-gcc-libs": {}, "gtk+3": {}, "x@y_z.1": {"state": "absent"}}}"#).is_empty());
    }

    #[test]
    fn refuses_the_hosts_own_package() {
        check_refused(
            r#"{"schema": 1, "packages": {"nox-mesh-host": {"state": "absent"}}}"#,
            &[
                "packages[\"nox-mesh-host\"]: refused",
                "the host's own package",
            ],
        );
        assert!(problems(
            r#"{"schema": 1, "packages": {"nox-mesh-hostile": {}, "mesh-host": {}, "Nox-Mesh-Host": {}}}"#
        )
        .is_empty());
    }

    #[test]
    fn sync_info_shows_what_would_take_the_host_over() {
        let host = vec!["nox-mesh-host".to_string()];
        for g in crate::tools::generations("pacman") {
            let text = g.read("pacman-Si.txt");
            let infos = pacman::parse_sync_info(&text);
            let why = takes_over(&infos[0], &host).unwrap();
            assert!(
                why.contains("mesh-usurper replaces nox-mesh-host, the host's own package"),
                "{}: {why}",
                g.name
            );
            assert_eq!(takes_over(&infos[1], &host), None, "{}", g.name);
        }
        for (field, entry, relation) in [
            ("conflicts", "nox-mesh-host>=1.0", "conflicts with"),
            ("provides", "nox-mesh-host", "provides"),
            ("depends", "nox-mesh-host>1.0", "depends on"),
        ] {
            let mut info = SyncInfo {
                name: "x",
                replaces: vec![],
                conflicts: vec![],
                provides: vec![],
                depends: vec![],
            };
            match field {
                "conflicts" => info.conflicts.push(entry),
                "provides" => info.provides.push(entry),
                _ => info.depends.push(entry),
            }
            let why = takes_over(&info, &host).unwrap();
            assert!(
                why.contains(&format!("x {relation} nox-mesh-host")),
                "{why}"
            );
        }
        // A look-alike is not the host's package.
        let info = SyncInfo {
            name: "x",
            replaces: vec!["nox-mesh-hostile"],
            conflicts: vec!["nox-mesh"],
            provides: vec!["mesh-host"],
            depends: vec!["nox-mesh-host-tools"],
        };
        assert_eq!(takes_over(&info, &host), None);
    }

    fn installed(version: &str, explicit: bool) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit,
            required_by: Vec::new(),
        }
    }

    /// Installed as a dependency of `by`.
    fn required(version: &str, by: &[&str]) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit: false,
            required_by: by.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn planner_cases() {
        let d = crate::model::declaration::tests::parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let created = Entry::created();
        let adopted = Entry::adopted(Some(InstallReason::Explicit));
        let by_older_version = Entry::adopted(None);
        let was_dependency = Entry::adopted(Some(InstallReason::Dependency));
        let dependency = installed("1", false);
        let installed = installed("1", true);
        let present = Spec { present: true };
        let absent = Spec { present: false };
        let op = |s: Step<Op, InstallReason>| match s {
            Step::InSync => "in sync".to_string(),
            Step::Adopt { .. } => "adopt".into(),
            Step::Change(c) => format!("{:?} {}", c.op, c.details.join("")),
            Step::Fail(e) | Step::Skip(e) => e,
        };
        let plan = |d, o, e| op(Packages::plan(&cx, "p", d, Some(o), e));
        assert_eq!(
            plan(Some(&present), &Observed::Missing, None),
            "Install install"
        );
        assert_eq!(plan(Some(&present), &installed, None), "adopt");
        assert_eq!(plan(Some(&present), &installed, Some(&created)), "in sync");
        assert_eq!(
            plan(Some(&absent), &installed, None),
            "Remove declared absent"
        );
        assert_eq!(
            plan(None, &installed, Some(&created)),
            "Remove released; mesh-host installed it"
        );
        let needed = required("1", &["web", "db"]);
        assert_eq!(
            plan(None, &needed, Some(&created)),
            "MarkDependency released; still required by web db, so marked installed as a dependency"
        );
        assert_eq!(
            plan(None, &installed, Some(&adopted)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(
            plan(None, &installed, Some(&by_older_version)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(plan(None, &installed, None), "in sync");
        assert_eq!(
            plan(Some(&present), &dependency, None),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(Some(&present), &dependency, Some(&created)),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(None, &installed, Some(&was_dependency)),
            "MarkDependency released; was installed as a dependency before mesh-host, marked so again"
        );
        assert_eq!(
            plan(None, &Observed::Missing, Some(&was_dependency)),
            "Forget released; already gone"
        );
    }

    /// The ledger's digests, pinned: `packages 0x00 0x01` and `present`, hashed.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        for (present, hex) in [
            (
                true,
                "36bdd7effe739b2dd6fbe11f951d6e3343f5f9c6c7379ade0ce86fc38c191ccd",
            ),
            (
                false,
                "ad0969de169591205fa8aa12ee1eee72d810c66546bc2a827c00a4d645e5bd27",
            ),
        ] {
            assert_eq!(digest(&Spec { present }).to_string(), hex);
        }
        let by_hand = crate::util::codec::sha256(b"packages\x00\x01\x01");
        assert_eq!(digest(&Spec { present: true }), Digest::Sha256(by_hand));
    }
}
