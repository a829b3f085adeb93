//! Files under /etc: content, mode, owner and group. Written atomically beside the target, never
//! through a symlink; an adopted file's original is kept in the store and put back on release;
//! directories the host had to create are removed again once empty.

use std::path::Path;

use super::{Change, Env, Hints, Kind, KindError, Observations, Outcome, RunContext, Step};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{self, Pacnew, QuietDirs};
use crate::model::spec::files::{configures_unit, digest, is_secret, Files, Original, Spec};
use crate::model::spec::Named as _;
use crate::os::accounts::{Account, Accounts};
use crate::os::fsutil::{self, Dir};
use crate::store::{Digest, Entry, Ledger, Store};
use crate::util::sorted;

mod apply;
mod observe;
mod plan;
mod state;

use apply::{apply_each, directories_ahead, put_in_place, remove_unneeded_directories, ParentDirs};
pub use apply::{put_back, refused};
use observe::{Declared, IndexUse, Looking};
use plan::{plan_absent, plan_present, plan_release};
pub use state::Facts;
use state::{Held, Observed, Op, State};

impl Kind for Files {
    // Each file is written, renamed and synced on its own: nothing spans two chunks but the
    // directories they share, which are looked up and made again as needed.
    const APPLIED_IN_CHUNKS: bool = true;
    type Observed = Observed;
    type Op = Op;
    type Facts = Facts;

    fn digest_observed(spec: &Spec, observed: Option<&Observed>) -> Digest {
        match (spec, observed.map(|o| &o.state)) {
            (
                Spec::Present(_),
                Some(State::Regular {
                    held: Held::Declared { digest: of_spec },
                    ..
                }),
            ) => Digest::Sha256(*of_spec),
            _ => digest(spec),
        }
    }

    fn observe<'k>(
        env: &Env,
        cx: &RunContext,
        keys: &[&'k str],
    ) -> Result<Observations<'k, Observed>, KindError> {
        let root = Dir::open(env.root).map_err(|e| format!("root {}: {e}", env.root.display()))?;
        let mut accounts: Option<Accounts> = None;
        let kept = cx.facts.files.index.take();
        let index = IndexUse::load(env.store, kept, &cx.declaration.digest);
        let max = env.config.limits.max_file_bytes;
        let mut looking = Looking::new(&root, index, max, env.diffs);
        looking.fence = env.store.and_then(Store::fence);
        let mut out = Vec::with_capacity(keys.len());
        let mut with_content = 0;
        // Keys come in order: the declared files are walked beside them from the chunk's first
        // (one search), not searched for each, nor walked from the first declared; a key not
        // met on the walk (undeclared, or asked out of order) is searched for.
        let mut declared_files = keys
            .first()
            .map(|first| sorted::Walk::from(&cx.declaration.files, first));
        for &key in keys {
            let spec = (declared_files.as_mut())
                .and_then(|walk| walk.at(key))
                .or_else(|| cx.declaration.files.get(key));
            let content = match spec {
                Some(Spec::Present(c)) => Some(c),
                _ => None,
            };
            let (owner, group) = match content {
                Some(c) => (c.owner(), c.group()),
                None => (None, None),
            };
            let mut resolve =
                |account: Option<&Account>, user: bool| -> Result<Option<u32>, String> {
                    let Some(account) = account else {
                        return Ok(None);
                    };
                    let table = accounts.get_or_insert_with(|| Accounts::read(env.root));
                    if user {
                        table.uid(account)
                    } else {
                        table.gid(account)
                    }
                    .map(Some)
                };
            let uid = resolve(owner, true);
            let gid = resolve(group, false);
            with_content += usize::from(content.is_some());
            let declared = content.map(Declared::of);
            let state = looking.at(key, declared.as_ref());
            // Released (not declared at all): an adopted file's original is put back.
            let original = match (spec, env.store) {
                (None, Some(store)) if env.diffs => {
                    store.read_backup(&super::backup_key(Files::NAME, key)).ok()
                }
                _ => None,
            };
            // A path that cannot be read is that file's own problem (`State::Blocked`).
            let observed = Observed {
                state,
                uid,
                gid,
                original,
            };
            out.push((key, Ok(observed)));
        }
        let complete = {
            let mut coverage = cx.facts.files.coverage.borrow_mut();
            coverage.look(keys, with_content);
            coverage.complete(cx.declaration)
        };
        *cx.facts.files.index.borrow_mut() = looking.index.save(env.store, complete);
        Ok(out.into_iter().collect())
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let Some(observed) = observed else {
            return Step::Fail(format!("{key} was not observed"));
        };
        match desired {
            Some(Spec::Present(content)) => {
                plan_present(cx, key, content, observed, owned, cx.diffs)
            }
            Some(Spec::Absent) => plan_absent(key, observed, owned, cx.diffs),
            None => plan_release(key, observed, owned, cx.diffs),
        }
    }

    fn apply(
        env: &Env,
        cx: &RunContext,
        ledger: &mut Ledger,
        changes: &[Change<Op, Original>],
    ) -> Vec<Outcome> {
        let fail_all = |message: String| -> Vec<Outcome> {
            changes
                .iter()
                .map(|_| Outcome::Failed(message.clone().into()))
                .collect()
        };
        // The index a chunk's observation kept describes the files before this apply: the next
        // chunk reads the one `verify` leaves.
        cx.facts.files.index.take();
        let root = match Dir::open(env.root) {
            Ok(root) => root,
            Err(e) => return fail_all(format!("root {}: {e}", env.root.display())),
        };
        if let Err(e) = directories_ahead(env, &root, ledger, changes) {
            return fail_all(e);
        }
        let mut parents = ParentDirs::new(&root, env);
        let (mut outcomes, written) = apply_each(env, cx, &mut parents, ledger, changes);
        put_in_place(&mut parents, changes, written, &mut outcomes);
        drop(parents);
        remove_unneeded_directories(&root, cx, ledger);
        outcomes
    }

    fn note(
        declaration: &Declaration,
        facts: &mut Facts,
        change: &Change<Op, Original>,
        outcome: &Outcome,
    ) {
        if *outcome != Outcome::Done || matches!(change.op, Op::Forget) {
            return;
        }
        if let Some(unit) = configures_unit(&change.key) {
            facts.unit_config.insert(unit.to_string());
        }
        if Path::new(&change.key)
            .components()
            .any(|c| c.as_os_str() == "systemd")
        {
            facts.in_systemd_dirs.insert(change.key.clone());
        }
        let units_act_on = facts.units_act_on.get_or_insert_with(|| {
            (declaration.units.values())
                .flat_map(|unit| unit.restart_on.iter().chain(&unit.reload_on))
                .cloned()
                .collect()
        });
        if units_act_on.contains(&change.key) {
            facts.changed.insert(change.key.clone());
        }
    }

    fn called_by_facts(_: &super::Facts) -> bool {
        false
    }

    fn take_refused(facts: &mut Facts) -> Vec<(String, String)> {
        facts.take_refused()
    }

    fn owing<'d>(_: &'d Declaration, _: &super::Facts) -> Vec<(&'d str, &'d str)> {
        Vec::new()
    }

    /// Beside each owned file: pacman leaves its own version of a file it ships and the host
    /// writes there.
    fn pacnew(
        env: &Env,
        declaration: &Declaration,
        ledger: &Ledger,
        quiet: &mut QuietDirs,
    ) -> Vec<Pacnew> {
        let mut found = pacnew::find(
            env.root,
            ledger.owned_keys::<Files>(),
            env.config.limits.max_file_bytes,
            quiet,
            fsutil::file_clock_now_ns(),
        );
        let files = &declaration.files;
        pacnew::withhold_secret(&mut found, |path| files.get(path).is_some_and(is_secret));
        found
    }

    /// Every declared or owned file, touching itself (units restarted on one add theirs).
    fn watch<'d>(declaration: &'d Declaration, ledger: &'d Ledger, hints: &mut dyn Hints<'d>) {
        // A file both declared and owned comes twice; the watcher makes it one entry.
        let declared = declaration.files.keys().map(String::as_str);
        for key in declared.chain(ledger.owned_keys::<Files>()) {
            hints.path(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::apply::missing_directories;
    use super::plan::adopted_entry;
    use super::state::Coverage;
    use super::*;
    use crate::kinds::Details;
    use crate::kinds::{Action, LedgerAfter};
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};
    use crate::model::spec::files::{
        content_digest, content_digest_of, is_secret, Content, Ownership,
    };
    use crate::os::fsutil::{self, FileType, Stamp, Stat};
    use crate::store::{Cached, FilesIndex, Store};
    use crate::util::codec;
    use std::path::PathBuf;

    /// Content of `bytes`, with nothing else declared.
    fn content(bytes: &[u8]) -> Content {
        Content {
            bytes: bytes.into(),
            mode: None,
            ownership: None,
            secret: None,
        }
    }

    /// What the files index keeps of a file found holding `bytes`, declared as `content`'s.
    fn spec_digest(bytes: &[u8]) -> [u8; 32] {
        content_digest_of(&content(bytes), &codec::sha256(bytes))
    }

    #[test]
    fn path_rules() {
        for (path, message) in [
            ("etc/x", "not absolute"),
            ("/etc/x/", "ends with '/'"),
            ("/etc//x", "empty component"),
            ("/etc/./x", "\".\" component"),
            ("/etc/../root/x", "\"..\" component"),
            ("/root/x", "not under /etc"),
            ("/etc", "not under /etc"),
            ("/etc\u{0}x", "NUL"),
            (
                "/etc/.motd.mesh-host.tmp",
                "ends with \".mesh-host.tmp\": mesh-host names its own temp files so",
            ),
            (
                "/etc/.0123456789abcdef0123456789abcdef.mesh-host.tmp",
                "own temp files",
            ),
        ] {
            let json = format!(
                r#"{{"schema": 1, "files": {{{}: {{"content": ""}}}}}}"#,
                serde_json::Value::String(path.into())
            );
            check_refused(&json, &[message]);
        }
    }

    #[test]
    fn field_rules() {
        let cases = [
            (
                r#"{"content": "x", "mode": "0999"}"#,
                r#"files["/etc/x"].mode: "0999" is not an octal mode"#,
            ),
            (
                r#"{"content": "x", "mode": "644x"}"#,
                "is not an octal mode",
            ),
            (
                r#"{"content": "x", "mode": 644}"#,
                "mode: must be a string, not a number",
            ),
            (r#"{"content": "x", "content_base64": "eA=="}"#, "not both"),
            (r#"{"mode": "0644"}"#, "content: missing"),
            (
                r#"{"content_base64": "e!=="}"#,
                "content_base64: is not valid base64",
            ),
            (
                r#"{"content": "x", "owner": "-r"}"#,
                "owner: \"-r\" is not a valid user or group name",
            ),
            (
                r#"{"state": "absent", "content": "x"}"#,
                "content: makes no sense for a file declared absent",
            ),
            (
                r#"{"state": "gone", "content": ""}"#,
                "state: \"gone\" is not a state",
            ),
            (
                r#"{"content": "x", "contnet": "y"}"#,
                "unknown field \"contnet\"",
            ),
        ];
        for (body, message) in cases {
            check_refused(
                &format!(r#"{{"schema": 1, "files": {{"/etc/x": {body}}}}}"#),
                &[message],
            );
        }
    }

    #[test]
    fn content_limit() {
        let mut config = crate::model::declaration::tests::test_config();
        config.limits.max_file_bytes = 4;
        let json = r#"{"schema": 1, "files": {"/etc/x": {"content": "12345"}}}"#;
        let err = crate::model::declaration::parse(
            json.as_bytes(),
            &crate::model::declaration::Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("content: is 5 bytes, more than the limit of 4 bytes"),
            "{err}"
        );
    }

    #[test]
    fn refuses_the_hosts_own_config_directory() {
        check_refused(
            r#"{"schema": 1, "files": {"/etc/mesh-host/config.json": {"content": "{}"}}}"#,
            &["refused", "/etc/mesh-host is the host's own configuration"],
        );
    }

    #[test]
    fn refuses_the_hosts_own_unit_file() {
        check_refused(
            r#"{"schema": 1, "files": {"/etc/systemd/system/mesh-host.service": {"content": ""}}}"#,
            &["refused", "own unit mesh-host.service"],
        );
    }

    #[test]
    fn refuses_the_hosts_own_drop_ins_and_links() {
        for path in [
            "/etc/systemd/system/mesh-host.service.d/override.conf",
            "/etc/systemd/system/multi-user.target.wants/mesh-host.service",
            "/etc/systemd/system/agent.service",
        ] {
            let json = format!(r#"{{"schema": 1, "files": {{"{path}": {{"content": ""}}}}}}"#);
            check_refused(&json, &["refused", "the host's own unit"]);
        }
    }

    #[test]
    fn refuses_the_hosts_own_store() {
        // The test config puts the store at /srv/mesh-store; files must be under /etc, so use a
        // store under /etc to show the refusal names the store.
        let mut config = crate::model::declaration::tests::test_config();
        config
            .identity
            .state_dirs
            .push(PathBuf::from("/etc/mesh-store"));
        let json = r#"{"schema": 1, "files": {"/etc/mesh-store/ledger.json": {"content": "{}"}}}"#;
        let err = crate::model::declaration::parse(
            json.as_bytes(),
            &crate::model::declaration::Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("/etc/mesh-store is the host's own store"),
            "{err}"
        );
    }

    #[test]
    fn other_units_files_are_fine() {
        assert!(problems(r#"{"schema": 1, "files": {"/etc/systemd/system/mesh-hostile.service": {"content": ""}}}"#).is_empty());
    }

    fn observed(state: State) -> Observed {
        Observed {
            state,
            uid: Ok(None),
            gid: Ok(None),
            original: None,
        }
    }

    fn stat(size: usize, mode: u32) -> Stat {
        Stat {
            file_type: FileType::Regular,
            mode,
            uid: 0,
            gid: 0,
            size: size as u64,
            links: 1,
        }
    }

    /// A file holding something other than the declared content.
    fn regular(bytes: &[u8], mode: u32) -> State {
        State::Regular {
            stat: stat(bytes.len(), mode),
            held: Held::Other(bytes.to_vec()),
        }
    }

    /// A file holding the declared content.
    fn as_declared(size: usize, mode: u32) -> State {
        State::Regular {
            stat: stat(size, mode),
            held: Held::Declared { digest: [0; 32] },
        }
    }

    /// `state` (a regular file) with `links` hard links.
    fn linked(state: State, links: u64) -> State {
        match state {
            State::Regular { mut stat, held } => {
                stat.links = links;
                State::Regular { stat, held }
            }
            other => other,
        }
    }

    fn plan_for(
        json_spec: &str,
        state: State,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/x": {json_spec}}}}}"#
        ))
        .unwrap();
        let cx = RunContext::new(&d, false);
        Files::plan(
            &cx,
            "/etc/x",
            d.files.get("/etc/x"),
            Some(&observed(state)),
            owned,
        )
    }

    fn summary(step: Step<Op, Original>) -> String {
        match step {
            Step::InSync => "in sync".into(),
            Step::Adopt { intent, .. } => format!("adopt {:?}", intent.origin),
            Step::Fail(e) | Step::Skip(e) => format!("fail: {e}"),
            Step::Change(c) => format!(
                "{} {} intent={:?} backup={} {:?}",
                c.action.symbol(),
                c.details.join(", "),
                c.intent.map(|e| e.origin),
                c.backup.is_some(),
                c.op
            )
            .split(" {")
            .next()
            .unwrap_or_default()
            .to_string(),
        }
    }

    #[test]
    fn planner_cases() {
        let created = Entry::created();
        let adopted = adopted_entry(
            "/etc/x",
            &Stat {
                file_type: FileType::Regular,
                mode: 0o600,
                uid: 0,
                gid: 0,
                size: 3,
                links: 1,
            },
        );
        let cases: Vec<(&str, State, Option<&Entry<Original>>, &str)> = vec![
            (
                r#"{"content": "hi"}"#,
                State::Missing,
                None,
                "+ 2 bytes, mode 0644 intent=Some(Created) backup=false Write",
            ),
            (
                r#"{"content": "hi"}"#,
                as_declared(2, 0o600),
                None,
                "adopt Adopted",
            ),
            (
                r#"{"content": "hi"}"#,
                as_declared(2, 0o600),
                Some(&created),
                "in sync",
            ),
            (
                r#"{"content": "hi", "mode": "0644"}"#,
                as_declared(2, 0o600),
                Some(&created),
                "~ mode 0600 -> 0644 intent=None backup=false SetAttributes",
            ),
            (
                r#"{"content": "hi", "mode": "0644"}"#,
                linked(as_declared(2, 0o600), 2),
                Some(&created),
                "~ mode 0600 -> 0644, written as a new file: its other hard link keeps its own \
                 intent=None backup=false Write",
            ),
            (
                r#"{"content": "hi"}"#,
                linked(as_declared(2, 0o600), 3),
                Some(&created),
                "in sync",
            ),
            (
                r#"{"content": "hi"}"#,
                regular(b"old", 0o600),
                None,
                "~ content (3 -> 2 bytes) intent=Some(Adopted) backup=true Write",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Other(FileType::Directory),
                None,
                "fail: /etc/x is a directory; mesh-host does not replace it",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Other(FileType::Symlink),
                None,
                "fail: /etc/x is a symlink; mesh-host does not replace it",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Blocked("/etc is a symlink".into()),
                None,
                "fail: /etc is a symlink",
            ),
            (r#"{"state": "absent"}"#, State::Missing, None, "in sync"),
            (
                r#"{"state": "absent"}"#,
                regular(b"x", 0o644),
                None,
                "- declared absent intent=None backup=false Remove",
            ),
            (
                r#"{"state": "absent"}"#,
                State::Missing,
                Some(&created),
                "- already absent intent=None backup=false Forget",
            ),
        ];
        for (spec, state, owned, want) in cases {
            assert_eq!(summary(plan_for(spec, state, owned)), want, "{spec}");
        }
        let d = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let release = |state, owned| {
            summary(Files::plan(
                &cx,
                "/etc/x",
                None,
                Some(&observed(state)),
                owned,
            ))
        };
        assert_eq!(release(regular(b"x", 0o644), None), "in sync");
        assert_eq!(
            release(regular(b"x", 0o644), Some(&created)),
            "- released; mesh-host created it intent=None backup=false Remove"
        );
        assert_eq!(
            release(State::Missing, Some(&created)),
            "- released; already gone intent=None backup=false Forget"
        );
        assert!(release(regular(b"x", 0o644), Some(&adopted))
            .starts_with("~ released; original restored"));
    }

    /// `is_secret`: declared, or by default a mode that lets others not read the file.
    #[test]
    fn a_file_is_secret_when_declared_or_by_its_mode() {
        for (spec, secret) in [
            (r#"{"content": "x"}"#, false),
            (r#"{"content": "x", "mode": "0644"}"#, false),
            (r#"{"content": "x", "mode": "0600"}"#, true),
            (r#"{"content": "x", "mode": "0640"}"#, true),
            (r#"{"content": "x", "mode": "0400"}"#, true),
            (r#"{"content": "x", "mode": "4750"}"#, true),
            (
                r#"{"content": "x", "mode": "0600", "secret": false}"#,
                false,
            ),
            (r#"{"content": "x", "mode": "0644", "secret": true}"#, true),
            (r#"{"content": "x", "secret": true}"#, true),
            (r#"{"state": "absent"}"#, false),
        ] {
            let d = parse_with_defaults(&format!(
                r#"{{"schema": 1, "files": {{"/etc/x": {spec}}}}}"#
            ))
            .unwrap();
            assert_eq!(is_secret(&d.files["/etc/x"]), secret, "{spec}");
        }
        check_refused(
            r#"{"schema": 1, "files": {"/etc/x": {"state": "absent", "secret": true}}}"#,
            &["secret: makes no sense for a file declared absent"],
        );
        check_refused(
            r#"{"schema": 1, "files": {"/etc/x": {"content": "x", "secret": "yes"}}}"#,
            &["secret: must be"],
        );
    }

    /// A secret file's change shows sizes and keyed digests (the same content, the same digest;
    /// another key, another digest), never the content nor its plain SHA-256.
    #[test]
    fn a_secret_files_change_shows_sizes_and_keyed_digests_only() {
        let canary = "password=canary-7f3a";
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/x": {{"content": "{canary}\n", "mode": "0600"}}}}}}"#
        ))
        .unwrap();
        let details = |key: Option<[u8; 32]>, state: State| {
            let mut cx = RunContext::new(&d, false);
            cx.digest_key = key;
            let step = Files::plan(
                &cx,
                "/etc/x",
                d.files.get("/etc/x"),
                Some(&observed(state)),
                None,
            );
            summary(step)
        };
        let key = Some([7; 32]);
        let keyed =
            |bytes: &[u8]| codec::hex(&codec::hmac_sha256(&[7; 32], bytes))[..16].to_string();
        let new = keyed(
            format!(
                "{canary}
"
            )
            .as_bytes(),
        );
        assert_eq!(
            details(
                key,
                regular(
                    b"password=old
",
                    0o600
                )
            ),
            format!(
                "~ secret content (13 bytes, keyed digest {} -> 21 bytes, keyed digest {new}) \
                 intent=Some(Adopted) backup=true Write",
                keyed(
                    b"password=old
"
                )
            )
        );
        assert_eq!(
            details(key, State::Missing),
            format!("+ secret, 21 bytes, keyed digest {new}, mode 0600 intent=Some(Created) backup=false Write")
        );
        let other_key = details(Some([8; 32]), State::Missing);
        assert!(!other_key.contains(&new), "{other_key}");
        let plain = codec::sha256_hex(
            format!(
                "{canary}
"
            )
            .as_bytes(),
        );
        for shown in [
            details(key, State::Missing),
            details(None, regular(b"x", 0o600)),
            other_key,
        ] {
            assert!(
                !shown.contains("canary") && !shown.contains(&plain[..16]),
                "{shown}"
            );
        }
        assert_eq!(
            details(None, regular(b"x", 0o600)),
            "~ secret content (1 bytes -> 21 bytes) intent=Some(Adopted) backup=true Write"
        );
        let undeclared_mode = plan_for(r#"{"content": "x", "secret": true}"#, State::Missing, None);
        assert_eq!(
            summary(undeclared_mode),
            "+ secret, 1 bytes, mode 0600 intent=Some(Created) backup=false Write"
        );
    }

    /// A refusal quoting a line of secret content (a directive naming the host's unit) is
    /// shown with the line scrubbed.
    #[test]
    fn a_refusal_of_secret_content_does_not_quote_it() {
        let json = r#"{"schema": 1, "files": {"/etc/systemd/system/a.service.d/x.conf": {"content": "[Unit]\nRequires=mesh-host.service canary-unit\n", "secret": true}}}"#;
        let err = problems(json).join("\n");
        assert!(err.contains("the host's own unit"), "{err}");
        assert!(!err.contains("canary-unit"), "{err}");
        let plain = json.replace(r#", "secret": true"#, "");
        assert!(problems(&plain).join("\n").contains("canary-unit"));
    }

    #[test]
    fn missing_directories_are_found_outermost_first() {
        let tmp = crate::util::testutil::TempDir::new("missing-dirs");
        std::fs::create_dir_all(tmp.path().join("etc/app")).unwrap();
        let root = Dir::open(tmp.path()).unwrap();
        assert_eq!(
            missing_directories(&root, Path::new("/etc/app/a/b/conf")),
            vec![PathBuf::from("/etc/app/a"), PathBuf::from("/etc/app/a/b")]
        );
        assert!(missing_directories(&root, Path::new("/etc/app/conf")).is_empty());
    }

    #[test]
    fn observation_keeps_a_files_content_only_when_it_differs() {
        let tmp = crate::util::testutil::TempDir::new("observe-held");
        std::fs::create_dir_all(tmp.path().join("etc/app")).unwrap();
        std::fs::write(tmp.path().join("etc/app/same"), "declared").unwrap();
        std::fs::write(tmp.path().join("etc/app/other"), "edited").unwrap();
        let root = Dir::open(tmp.path()).unwrap();
        let mut looking = Looking::new(&root, IndexUse::load(None, None, ""), 100, true);
        let mut observe = |key: &'static str, declared: Option<&[u8]>| {
            let declared = declared.map(content);
            held(looking.at(key, declared.as_ref().map(Declared::of).as_ref()))
        };
        assert_eq!(observe("/etc/app/same", Some(b"declared")), "Declared");
        assert_eq!(
            observe("/etc/app/other", Some(b"declared")),
            format!("{:?}", Held::Other(b"edited".to_vec()))
        );
        // No content declared (to be removed or released): what it holds, for the plan's diff.
        assert_eq!(
            observe("/etc/app/other", None),
            format!("{:?}", Held::Other(b"edited".to_vec()))
        );
        assert_eq!(observe("/etc/app/gone", Some(b"declared")), "Missing");
        // The directory was walked to once for all four: it, /etc and the root are held.
        assert_eq!(looking.parents.len(), 3);
    }

    #[test]
    fn an_observation_holds_few_directories_open_and_never_walks_a_symlink() {
        let tmp = crate::util::testutil::TempDir::new("observe-dirs");
        for i in 0..150 {
            let dir = tmp.path().join(format!("etc/many/d{i:03}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("f"), "declared").unwrap();
        }
        std::os::unix::fs::symlink("many/d000", tmp.path().join("etc/link")).unwrap();
        let root = Dir::open(tmp.path()).unwrap();
        let keys: Vec<String> = (0..150).map(|i| format!("/etc/many/d{i:03}/f")).collect();
        let mut looking = Looking::new(&root, IndexUse::load(None, None, ""), 100, false);
        let declared = content(b"declared");
        for key in &keys {
            let state = looking.at(key, Some(&Declared::of(&declared)));
            assert_eq!(held(state), "Declared", "{key}");
            assert!(looking.parents.len() <= fsutil::Dirs::KEPT + 1);
        }
        // Below a symlink, as deep as it goes, and beside a missing directory.
        for key in ["/etc/link/f", "/etc/link/sub/f"] {
            match looking.at(key, Some(&Declared::of(&declared))) {
                State::Blocked(e) => assert!(e.contains("/etc/link is a symlink"), "{e}"),
                other => panic!("{key}: {other:?}"),
            }
        }
        let missing = looking.at("/etc/gone/sub/f", Some(&Declared::of(&declared)));
        assert_eq!(held(missing), "Missing");
    }

    #[test]
    fn unknown_owner_fails_that_file_only() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/x": {"content": "a", "owner": "www"}}}"#,
        )
        .unwrap();
        let cx = RunContext::new(&d, false);
        let obs = Observed {
            state: State::Missing,
            uid: Err("user \"www\" does not exist".into()),
            gid: Ok(None),
            original: None,
        };
        let step = Files::plan(&cx, "/etc/x", d.files.get("/etc/x"), Some(&obs), None);
        assert_eq!(summary(step), "fail: owner: user \"www\" does not exist");
    }

    /// A scratch root holding `/etc/app/conf` ("declared") and a store beside it.
    fn root_with_one_file(label: &str) -> (crate::util::testutil::TempDir, Dir, Store) {
        let tmp = crate::util::testutil::TempDir::new(label);
        std::fs::create_dir_all(tmp.path().join("root/etc/app")).unwrap();
        std::fs::write(tmp.path().join("root/etc/app/conf"), "declared").unwrap();
        let root = Dir::open(&tmp.path().join("root")).unwrap();
        let store = Store::open(&tmp.path().join("store"), true)
            .unwrap()
            .unwrap();
        (tmp, root, store)
    }

    /// Observes `/etc/app/conf` against `declared` with the store's index, saving it after; the
    /// `Held` found. `observed_from_ns` stands for when the observation began.
    fn observe_indexed(
        root: &Dir,
        store: &Store,
        declared: &[u8],
        observed_from_ns: i64,
    ) -> String {
        let mut index = IndexUse::load(Some(store), None, "");
        index.observed_from_ns = observed_from_ns;
        let mut looking = Looking::new(root, index, 100, false);
        let state = looking.at("/etc/app/conf", Some(&Declared::of(&content(declared))));
        looking.index.save(Some(store), false);
        held(state)
    }

    /// What a state holds, `Declared` without its digest.
    fn held(state: State) -> String {
        match state {
            State::Regular {
                held: Held::Declared { .. },
                ..
            } => "Declared".to_string(),
            State::Regular { held, .. } => format!("{held:?}"),
            other => format!("{other:?}"),
        }
    }

    fn stamp_of_conf(root: &Dir) -> Stamp {
        let etc = fsutil::walk_to_dir(root, Path::new("/etc/app"), false)
            .unwrap()
            .unwrap();
        etc.stat_stamped(std::ffi::OsStr::new("conf"))
            .unwrap()
            .unwrap()
            .1
    }

    /// Well after any file in the test changed.
    const LATER: i64 = i64::MAX / 2;

    #[test]
    fn an_index_is_kept_for_the_next_chunk_only_while_unchanged() {
        let (_tmp, root, store) = root_with_one_file("index-kept");
        let observe = |mut index: IndexUse<'static>| {
            index.observed_from_ns = LATER;
            let mut looking = Looking::new(&root, index, 100, false);
            looking.at("/etc/app/conf", Some(&Declared::of(&content(b"declared"))));
            looking.index
        };
        // The first observation records the file: the index changed, so it is read again.
        let index = observe(IndexUse::load(Some(&store), None, ""));
        assert!(index.save(Some(&store), false).is_none());
        // The next finds it as recorded: the index as read is handed on, and vouches again.
        let index = observe(IndexUse::load(Some(&store), None, ""));
        let kept = index.save(Some(&store), false).expect("unchanged, kept");
        let index = IndexUse::load(None, Some(kept), "");
        assert!(vouched(&index, &stamp_of_conf(&root), b"declared"));
    }

    /// Whether `index` vouches for `/etc/app/conf`, stamped `stamp`, holding `bytes` (declared
    /// with nothing else).
    fn vouched(index: &IndexUse, stamp: &Stamp, bytes: &[u8]) -> bool {
        let declared = content(bytes);
        (index.vouches("/etc/app/conf", stamp, &Declared::of(&declared))).is_some()
    }

    /// `/etc/app/conf` observed as declared, and the entry the index then keeps of it.
    fn recorded(root: &Dir, store: &Store) -> Cached {
        assert_eq!(observe_indexed(root, store, b"declared", LATER), "Declared");
        store.files_index().get("/etc/app/conf").expect("recorded")
    }

    #[test]
    fn a_file_the_index_vouches_for_is_not_read() {
        let (_tmp, root, store) = root_with_one_file("index-hit");
        let cached = recorded(&root, &store);
        assert_eq!(cached.stamp, stamp_of_conf(&root));
        assert_eq!(cached.digest, spec_digest(b"declared"));
        // An index claiming the file holds other content of the same size, with the file's very
        // stamp: believed, which shows the file was not read.
        let forged = Cached {
            digest: spec_digest(b"12345678"),
            ..cached
        };
        store
            .save_files_index(
                &FilesIndex::default(),
                vec![("/etc/app/conf", Some(forged))],
                None,
            )
            .unwrap();
        assert_eq!(
            observe_indexed(&root, &store, b"12345678", LATER),
            "Declared"
        );
        // Another declared content does not match the entry's digest: read and compared.
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared",
            "read: the file does hold it"
        );
        assert_eq!(
            store.files_index().get("/etc/app/conf").map(|c| c.digest),
            Some(spec_digest(b"declared"))
        );
    }

    /// `/etc/app/conf` observed against `declared` under the declaration whose digest is
    /// `declaration`, the index saved after as by an observation `complete` or not.
    fn observe_under(
        root: &Dir,
        store: &Store,
        declared: &[u8],
        declaration: [u8; 32],
        complete: bool,
    ) -> State {
        let hex = crate::util::codec::hex(&declaration);
        let mut index = IndexUse::load(Some(store), None, &hex);
        index.observed_from_ns = LATER;
        let mut looking = Looking::new(root, index, 100, false);
        let state = looking.at("/etc/app/conf", Some(&Declared::of(&content(declared))));
        looking.index.save(Some(store), complete);
        state
    }

    #[test]
    fn an_index_agreeing_with_the_declaration_gives_the_declared_specs_digest() {
        let (_tmp, root, store) = root_with_one_file("index-agrees");
        let cached = recorded(&root, &store);
        let (under, other) = ([1; 32], [2; 32]);
        // An entry of the file's very stamp saying it holds other content (of the same size),
        // in an index agreeing with declaration `under`: its digest is taken as the declared
        // spec's, neither hashed nor made (which a forged entry shows).
        let forged = Cached {
            digest: spec_digest(b"12345678"),
            ..cached
        };
        let entry = vec![("/etc/app/conf", Some(forged))];
        store
            .save_files_index(&FilesIndex::default(), entry, Some(under))
            .unwrap();
        let digest_of = |state: State| match state {
            State::Regular {
                held: Held::Declared { digest },
                ..
            } => Some(digest),
            _ => None,
        };
        let state = observe_under(&root, &store, b"declared", under, false);
        assert_eq!(digest_of(state), Some(forged.digest));
        // Under another declaration the spec's digest is made, the entry does not match and the
        // file is read: it holds the declared content, recorded so; part of the declared files
        // looked at, the index no longer says it agrees with any.
        let state = observe_under(&root, &store, b"declared", other, false);
        assert_eq!(digest_of(state), Some(spec_digest(b"declared")));
        let index = store.files_index();
        assert_eq!(index.agrees_with, None);
        assert_eq!(
            index.get("/etc/app/conf").map(|c| c.digest),
            Some(cached.digest)
        );
        // Every declared file looked at: the index says it agrees, written even unchanged.
        observe_under(&root, &store, b"declared", other, true);
        assert_eq!(store.files_index().agrees_with, Some(other));
        // Other content is another declaration (its digest is of its bytes): hashed, found to
        // differ, read, and the file dropped from an index that agrees with none.
        let state = observe_under(&root, &store, b"DECLARED", [3; 32], false);
        assert_eq!(digest_of(state), None);
        assert_eq!(store.files_index().get("/etc/app/conf"), None);
        assert_eq!(store.files_index().agrees_with, None);
    }

    #[test]
    fn the_declared_files_are_covered_only_in_ascending_order_each_once() {
        let declaration = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/a": {"content": "a"}, "/etc/b": {"content": "b"},
                "/etc/c": {"state": "absent"}, "/etc/d": {"content": "d"}}}"#,
        )
        .unwrap();
        let mut coverage = Coverage::default();
        coverage.look(&["/etc/a", "/etc/b", "/etc/c"], 2);
        assert!(!coverage.complete(&declaration));
        coverage.look(&["/etc/d", "/etc/e"], 1);
        assert!(coverage.complete(&declaration));
        // A key again, or out of order: the count proves nothing from then on.
        let mut again = Coverage::default();
        again.look(&["/etc/a", "/etc/b"], 2);
        again.look(&["/etc/b", "/etc/d"], 1);
        assert!(!again.complete(&declaration));
        let mut unordered = Coverage::default();
        unordered.look(&["/etc/d", "/etc/a", "/etc/b"], 3);
        assert!(!unordered.complete(&declaration));
    }

    #[test]
    fn a_spec_declaring_another_mode_or_owner_of_the_same_content_is_not_vouched_for() {
        let (_tmp, root, store) = root_with_one_file("index-spec");
        let cached = recorded(&root, &store);
        let index = IndexUse::load(Some(&store), None, "");
        let stamp = stamp_of_conf(&root);
        assert!(vouched(&index, &stamp, b"declared"));
        let owner = Some(Box::new(Ownership {
            owner: Some(Account::Name("root".into())),
            group: None,
        }));
        for other in [
            Content {
                mode: Some(0o600),
                ..content(b"declared")
            },
            Content {
                ownership: owner,
                ..content(b"declared")
            },
        ] {
            // The entry's digest is the spec's, not only the content's: the file is read, and
            // its digest for the ledger is the new spec's.
            assert!(index
                .vouches("/etc/app/conf", &stamp, &Declared::of(&other))
                .is_none());
            assert_ne!(Declared::of(&other).digest(), cached.digest);
            assert_eq!(
                Files::digest_observed(
                    &Spec::Present(other.clone()),
                    Some(&observed(State::Regular {
                        stat: stat(8, 0o644),
                        held: Held::Declared {
                            digest: Declared::of(&other).digest()
                        },
                    }))
                ),
                content_digest(&other)
            );
        }
    }

    #[test]
    fn every_stamp_field_that_differs_means_the_file_is_read() {
        let (_tmp, root, store) = root_with_one_file("index-fields");
        let cached = recorded(&root, &store);
        let changes: [fn(&mut Stamp); 8] = [
            |s| s.device += 1,
            |s| s.inode += 1,
            |s| s.size += 1,
            |s| s.mode ^= 0o002,
            |s| s.uid += 1,
            |s| s.gid += 1,
            |s| s.mtime_ns += 1,
            |s| s.ctime_ns += 1,
        ];
        for change in changes {
            // The index says the file held other content with a stamp differing in one field:
            // not believed, the file is read (and holds the declared content after all).
            let mut stamp = cached.stamp;
            change(&mut stamp);
            let other = Cached {
                stamp,
                digest: spec_digest(b"12345678"),
            };
            let mut index = IndexUse::load(None, None, "");
            index.old = FilesIndex::decode(
                FilesIndex::default().updated(vec![("/etc/app/conf", Some(other))]),
            )
            .unwrap();
            assert!(!vouched(&index, &cached.stamp, b"12345678"));
        }
        let mut index = IndexUse::load(Some(&store), None, "");
        assert!(vouched(&index, &cached.stamp, b"declared"));
        index.old = FilesIndex::default();
        assert!(!vouched(&index, &cached.stamp, b"declared"));
    }

    #[test]
    fn a_file_changed_in_the_tick_of_its_read_is_not_kept_in_the_index() {
        let (tmp, root, store) = root_with_one_file("index-racy");
        // The observation began when the file was just written (git's "racy" case): a change
        // right after the read could keep the stamp, so it is not recorded.
        let ctime = stamp_of_conf(&root).ctime_ns;
        assert_eq!(
            observe_indexed(&root, &store, b"declared", ctime),
            "Declared"
        );
        assert_eq!(store.files_index().get("/etc/app/conf"), None);
        // A later observation, once that tick is past, records it.
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared"
        );
        assert!(store.files_index().get("/etc/app/conf").is_some());
        // A file found to differ is dropped from the index.
        std::fs::write(tmp.path().join("root/etc/app/conf"), "edited!!").unwrap();
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            format!("{:?}", Held::Other(b"edited!!".to_vec()))
        );
        assert_eq!(store.files_index().get("/etc/app/conf"), None);
    }

    #[test]
    fn a_corrupt_index_is_rebuilt_by_reading_the_files() {
        let (tmp, root, store) = root_with_one_file("index-corrupt");
        std::fs::write(tmp.path().join("store/files-index"), "{not an index").unwrap();
        assert!(store.files_index().get("/etc/app/conf").is_none());
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared"
        );
        assert!(store.files_index().get("/etc/app/conf").is_some());
    }

    #[test]
    fn a_run_keeps_only_the_changed_files_a_unit_acts_on() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/app.conf": {"content": "a"},
                "/etc/other.conf": {"content": "b"}, "/etc/app.env": {"content": "c"}},
                "units": {"app.service": {"restart_on": ["/etc/app.conf"],
                    "reload_on": ["/etc/app.env"]}}}"#,
        )
        .unwrap();
        let change = |key: &str, op| Change {
            key: key.to_string(),
            action: Action::Update,
            details: Details::default(),
            diff: None,
            intent: None,
            backup: None,
            after: LedgerAfter::Disown,
            op,
        };
        let mut facts = Facts::default();
        let write = || Op::Write {
            mode: 0o644,
            owner: None,
        };
        for key in ["/etc/app.conf", "/etc/other.conf", "/etc/app.env"] {
            Files::note(&d, &mut facts, &change(key, write()), &Outcome::Done);
        }
        // Failed, or only the ledger changed: the file did not change.
        let failed = Outcome::Failed("no".into());
        Files::note(&d, &mut facts, &change("/etc/app.conf", write()), &failed);
        let kept: Vec<&str> = facts.changed.iter().map(String::as_str).collect();
        assert_eq!(kept, ["/etc/app.conf", "/etc/app.env"]);
        let mut facts = Facts::default();
        Files::note(
            &d,
            &mut facts,
            &change("/etc/app.conf", Op::Forget),
            &Outcome::Done,
        );
        Files::note(&d, &mut facts, &change("/etc/app.env", write()), &failed);
        assert!(facts.changed.is_empty());
    }

    #[test]
    fn unit_files_and_drop_ins_are_known_by_their_look() {
        for (path, unit) in [
            (
                "/etc/systemd/system/a.service.d/override.conf",
                Some("a.service"),
            ),
            (
                "/etc/systemd/system/web@.service.d/10-x.conf",
                Some("web@.service"),
            ),
            ("/etc/systemd/system/service.d/all.conf", Some("service")),
            ("/etc/systemd/system/b.timer", Some("b.timer")),
            ("/etc/sysctl.d/99-x.conf", None),
            ("/etc/app.conf", None),
            ("/etc/systemd/system/a.service.d/notes.txt", None),
        ] {
            assert_eq!(configures_unit(path), unit, "{path}");
        }
    }

    /// The ledger's digests, pinned (empty content, unicode, secret content, owner and group by
    /// name and by id), and one written out byte by byte; found in sync, the same digest is
    /// made from the SHA-256 observation computed.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        assert_eq!(
            digest(&Spec::Absent).to_string(),
            "83b208da4b97f67861bad0f796de033f9c12769ae201077e08d187657cdc1a5c"
        );
        for (spec, hex) in [
            (
                r#"{"content": "a"}"#,
                "c91ca32061cdb2f9949baa0522e740bdc4a6431346349e8abfea4a0996fdccbd",
            ),
            (
                r#"{"content": "", "mode": "0600"}"#,
                "885a21c7e247344d8bfa613d6c772b6d4ea6f43a6dbf1e6808362cdf4db0ece6",
            ),
            (
                r#"{"content": "h\u00e9llo \u2713\n", "mode": "0644", "owner": "0", "group": "0"}"#,
                "c1c3e1870650384b0559e488ce62afa7d023178fff7c19d11f1c889256f1b67d",
            ),
            (
                r#"{"content": "token = s3cret \u2713\n", "secret": true, "mode": "0640", "group": "0"}"#,
                "2de80b889511c825f56dc78606eaff7d36ba1176124763d8f913330f391f0ad3",
            ),
            (
                r#"{"content": "x", "owner": "www-data", "group": "wheel"}"#,
                "8a65a67550d085435887f5d17c1312f479310f4a376510473021099d5bc88ca7",
            ),
        ] {
            let d = parse_with_defaults(&format!(
                r#"{{"schema": 1, "files": {{"/etc/x": {spec}}}}}"#
            ))
            .unwrap();
            let Some(Spec::Present(c)) = d.files.get("/etc/x") else {
                panic!("{spec}: not present");
            };
            assert_eq!(content_digest(c).to_string(), hex, "{spec}");
            // Found in sync, the digest is made from the SHA-256 observation computed.
            let obs = observed(State::Regular {
                stat: stat(c.bytes.len(), 0o644),
                held: Held::Declared {
                    digest: Declared::of(c).digest(),
                },
            });
            let spec = Spec::Present(c.clone());
            assert_eq!(Files::digest_observed(&spec, Some(&obs)), digest(&spec));
            assert_eq!(Files::digest_observed(&spec, None), digest(&spec));
        }
        assert_eq!(
            Files::digest_observed(&Spec::Absent, Some(&observed(State::Missing))),
            digest(&Spec::Absent)
        );
        // "a": present, the SHA-256 of "a", no mode, owner or group.
        let mut by_hand = b"files\x00\x01\x01".to_vec();
        by_hand.extend_from_slice(&codec::sha256(b"a"));
        by_hand.extend_from_slice(b"\x00\x00\x00");
        assert_eq!(
            digest(&Spec::Present(Content {
                bytes: Box::new(*b"a"),
                mode: None,
                ownership: None,
                secret: None,
            })),
            Digest::Sha256(codec::sha256(&by_hand))
        );
    }
}
