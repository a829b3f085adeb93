//! Resource kinds' effects. Each kind is one module with the same shape: observe every resource
//! it needs in one batched query, plan (a pure function of desired, observed and the ledger),
//! apply the plan, and release what it owns when it leaves the declaration. Its pure part (keys,
//! spec, parsing, self-refusal, digest) is its file in `model/spec/`. The reconciler drives all
//! kinds through the `Kind` trait, in the order of `model::spec::registry!`, the one list.

pub mod containers;
pub mod error;
pub mod files;
pub mod hints;
mod observations;
pub mod packages;
pub mod pacman;
pub mod units;

use std::path::Path;

use crate::model::config::Config;
use crate::model::declaration::{Declaration, Declared};
use crate::model::digest::Digest;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::KindSpec;
use crate::os::exec::Runner;
use crate::store::{Entry, Ledger, Owned, Store};
use crate::util::diff::ContentDiff;
use serde::Serialize;

/// What each kind did in this run, for later kinds: its part of `Facts` (given by the registry).
pub trait Noted {
    fn facts_mut(facts: &mut Facts) -> &mut <Self as Kind>::Facts
    where
        Self: Kind;
}

/// Something done once per kind, generic over it: `each` does it for every kind in converge
/// order.
pub trait Visit {
    type Out;
    fn visit<K: Kind>(&mut self) -> Self::Out;
}

macro_rules! kinds {
    ($($name:ident: $kind:ty,)*) => {
        $(impl Noted for $kind {
            fn facts_mut(f: &mut Facts) -> &mut <Self as Kind>::Facts {
                &mut f.$name
            }
        })*

        /// What each kind did in this run, for later kinds to act on (each kind's own type:
        /// `Kind::Facts`).
        #[derive(Debug, Default)]
        pub struct Facts {
            $(pub $name: <$kind as Kind>::Facts,)*
        }

        /// Does `visitor`'s work for every kind, in converge order.
        pub fn each<V: Visit>(visitor: &mut V) -> Vec<V::Out> {
            vec![$(visitor.visit::<$kind>()),*]
        }
    };
}
crate::model::spec::registry!(kinds);
pub use error::{BatchFailure, KindError};
pub use hints::{Hints, Place};
pub use observations::Observations;

/// The world a kind acts on.
pub struct Env<'a> {
    /// The target root: `/`, or a mounted root under `--root`.
    pub root: &'a Path,
    /// Applying into a mounted root: whatever needs the running system is deferred.
    pub offline: bool,
    /// Whether plans carry content diffs (`Change::diff`): for a person at the command line,
    /// not for the service, which prints none.
    pub diffs: bool,
    pub config: &'a Config,
    pub runner: &'a Runner<'a>,
    /// Absent when planning against a store that does not exist yet.
    pub store: Option<&'a Store>,
    /// Whether the host is being stopped: checked between resources, so the one being applied
    /// finishes (a pacman transaction is never cut short) and the rest wait for the next run.
    pub interrupted: &'a dyn Fn() -> bool,
    /// Where the reboot and restart look is made (`upkeep`): pacman's root and database on the
    /// running system; `None` under `--root` (the running kernel and processes are not the
    /// mounted root's) or when pacman could not say.
    pub upkeep: Option<&'a crate::model::upkeep::Where>,
    /// Where the kinds take time from (a manual clock in tests): the run's stale-process look,
    /// pacman's lock wait.
    pub clock: &'a crate::os::clock::Clock,
}

/// What earlier kinds did in this run, for later ones to act on.
pub struct RunContext<'a> {
    pub declaration: &'a Declaration,
    /// Each kind's facts, written by its `note` (units read `facts.files.changed` and
    /// `facts.packages.failed`).
    pub facts: Facts,
    pub offline: bool,
    /// Whether `plan` puts a content diff in each change it makes (`Change::diff`): `Env::diffs`,
    /// turned off by the reconciler once the run holds `reconcile::DIFFS_KEPT` of them.
    pub diffs: bool,
    /// The store's digest key, when the declaration has secret content and there is a store:
    /// what `secret_summary` and containers' spec labels (`containers::label_digest`) key with.
    pub digest_key: Option<[u8; 32]>,
}

impl<'a> RunContext<'a> {
    /// The start of a run: nothing changed or failed yet.
    pub fn new(declaration: &'a Declaration, offline: bool) -> RunContext<'a> {
        RunContext {
            declaration,
            facts: Facts::default(),
            offline,
            diffs: false,
            digest_key: None,
        }
    }

    /// What a change's details show of secret content: its size and, with a digest key, the
    /// first 16 hex digits of its keyed digest (`codec::hmac_sha256`), enough to tell two
    /// contents apart, useless for testing a guess without the key.
    pub fn secret_summary(&self, bytes: &[u8]) -> String {
        match &self.digest_key {
            Some(key) => format!(
                "{} bytes, keyed digest {}",
                bytes.len(),
                &crate::util::codec::hex(&crate::util::codec::hmac_sha256(key, bytes))[..16]
            ),
            None => format!("{} bytes", bytes.len()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Remove,
}

impl Action {
    pub fn symbol(self) -> char {
        match self {
            Action::Create => '+',
            Action::Update => '~',
            Action::Remove => '-',
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Remove => "remove",
        }
    }
}

/// What the ledger says once a change succeeded.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerAfter {
    /// Owned, with this spec digest applied.
    Applied(Digest),
    /// No longer owned (released or explicitly removed).
    Disown,
}

/// What differs about a resource, for people: `content`, `mode 0600 -> 0644`, `restore
/// original`. Kept as one string, a line per detail, since a plan and a run's report of 20,000
/// changes hold 20,000 of them: in place when short (a new file's `80 bytes, mode 0644`), else
/// one allocation, never a list and a string per detail. A detail's own line breaks become
/// spaces. In JSON, a list of the details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details(Lines);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Lines {
    Short { len: u8, bytes: [u8; SHORT_DETAILS] },
    Long(Box<str>),
}

/// The longest details kept in place: what fits beside the length in the space of a boxed str
/// and its tag.
const SHORT_DETAILS: usize = 22;

impl Default for Details {
    fn default() -> Details {
        Details::from(Vec::new())
    }
}

impl Details {
    /// These details with `line` added at the end.
    pub fn with(&self, line: &str) -> Details {
        let mut lines: Vec<String> = self.iter().map(str::to_string).collect();
        lines.push(line.to_string());
        Details::from(lines)
    }

    /// The details' lines.
    fn text(&self) -> &str {
        match &self.0 {
            // Copied from a `str` at a line's end: valid UTF-8 (an empty text otherwise).
            Lines::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Lines::Long(text) => text,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let text = self.text();
        text.split('\n').filter(move |_| !text.is_empty())
    }

    /// The details in one line, `sep` between them.
    pub fn join(&self, sep: &str) -> String {
        self.text().replace('\n', sep)
    }
}

impl From<Vec<String>> for Details {
    fn from(details: Vec<String>) -> Details {
        let lines: Vec<String> = details.into_iter().map(|d| d.replace('\n', " ")).collect();
        let text = lines.join("\n");
        if text.len() > SHORT_DETAILS {
            return Details(Lines::Long(text.into_boxed_str()));
        }
        let mut bytes = [0; SHORT_DETAILS];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Details(Lines::Short {
            len: text.len() as u8,
            bytes,
        })
    }
}

impl Serialize for Details {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// One planned change to one resource; `O` is its kind's `Original`. A converge holds thousands
/// at once, so what few changes carry (an intent, an original) is boxed.
#[derive(Debug)]
pub struct Change<Op, O> {
    pub key: String,
    pub action: Action,
    pub details: Details,
    /// What changes in its content, for people (files and unit files; `None` for the rest).
    pub diff: Option<Box<ContentDiff>>,
    /// Written to the ledger before acting, for a resource the host does not own yet.
    pub intent: Option<Box<Entry<O>>>,
    /// An original to keep in the store before acting (`Store::save_backup(backup_key(..))`).
    pub backup: Option<Box<[u8]>>,
    pub after: LedgerAfter,
    pub op: Op,
}

pub enum Step<Op, O> {
    InSync,
    /// Already as declared but not owned yet: the host takes it over, keeping its original.
    Adopt {
        intent: Entry<O>,
        backup: Option<Vec<u8>>,
    },
    Change(Change<Op, O>),
    /// The resource cannot be converged (e.g. an unknown owner); the rest go on.
    Fail(String),
    /// Not attempted because something it needs failed in this run.
    Skip(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done,
    /// Cannot be done into a mounted root; a running system must do it.
    Deferred(String),
    Failed(KindError),
    /// Not attempted because the host is stopping: the intent stays in the ledger and the next
    /// run does it. Reported as deferred, saying `STOPPING`.
    Stopped,
}

/// What the report says of a change `Outcome::Stopped`.
pub const STOPPING: &str = "not applied: the host was stopping";

/// The name an adopted resource's original is kept under in the store.
pub fn backup_key(kind: &str, key: &str) -> String {
    crate::util::codec::sha256_hex(format!("{kind}:{key}").as_bytes())
}

/// A resource kind: its pure part (`KindSpec`, in `model::spec`), where it is in a declaration
/// (`Declared`) and in the ledger (`Owned`), and here what observing, planning and applying it
/// takes. Every item is required (no defaults), so a new kind that forgets one does not compile.
pub trait Kind: KindSpec + Declared + Owned + Noted {
    /// Whether a run may apply the kind's changes a chunk at a time (`reconcile`'s
    /// `OBSERVED_AT_ONCE` resources: each chunk planned, written ahead, applied, verified and
    /// recorded before the next is observed), so a converge holds one chunk's changes, not the
    /// kind's. Only for a kind whose changes stand alone: not where its tool acts on all of them
    /// in one transaction or in phases (every removal, then every install), which a split would
    /// reorder.
    const APPLIED_IN_CHUNKS: bool;
    type Observed: std::fmt::Debug;
    type Op: std::fmt::Debug;
    /// What it tells later kinds about this run (`()` when nothing); see `RunContext::facts`.
    type Facts: std::fmt::Debug + Default;

    /// `digest`, for a resource found in sync, from what observing it already computed where it
    /// can (files hash each declared content): a no-op checks it for every resource.
    fn digest_observed(spec: &Self::Spec, observed: Option<&Self::Observed>) -> Digest;
    /// Observes `keys` (declared and owned) in one batched query: a result per key, so one odd
    /// resource fails only itself; `Err` only when the kind as a whole could not be observed
    /// (its tool hung or could not start, the root cannot be opened).
    fn observe<'k>(
        env: &Env,
        cx: &RunContext,
        keys: &[&'k str],
    ) -> Result<Observations<'k, Self::Observed>, KindError>;
    /// Pure: what to do about one resource.
    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Self::Spec>,
        observed: Option<&Self::Observed>,
        owned: Option<&Entry<Self::Original>>,
    ) -> Step<Self::Op, Self::Original>;
    /// Carries out the changes (batched where the tool allows); one outcome per change, in order.
    /// `ledger` is for kind-specific bookkeeping; the reconciler records intents and outcomes.
    fn apply(
        env: &Env,
        cx: &RunContext,
        ledger: &mut Ledger,
        changes: &[Change<Self::Op, Self::Original>],
    ) -> Vec<Outcome>;
    /// Records in its own facts what later kinds need to know of a change's outcome (what the
    /// `declaration` has them act on).
    fn note(
        declaration: &Declaration,
        facts: &mut Self::Facts,
        change: &Change<Self::Op, Self::Original>,
        outcome: &Outcome,
    );

    // What the kind does for the others, and they for it: the reconciler and the watcher ask
    // every kind, and name none.

    /// Whether an apply calls on the kind though none of its resources is in the run, for what
    /// earlier kinds did (`facts`): units reload the manager for the unit files the files kind
    /// wrote, and systemd confirms them.
    fn called_by_facts(facts: &Facts) -> bool;
    /// This run's changes of the kind that a later kind refused and put back, with why, taken
    /// once: the reconciler moves them from the run's changes to its failures (files that
    /// systemd's confirmation, made by the units kind, refused).
    fn take_refused(facts: &mut Self::Facts) -> Vec<(String, String)>;
    /// The restarts and reloads the kind's resources will owe, as (unit, file), once the
    /// changes `facts` note are done: the reconciler writes them ahead (`store::Owed`), and
    /// takes back those whose file did not change after all.
    fn owing<'d>(declaration: &'d Declaration, facts: &Facts) -> Vec<(&'d str, &'d str)>;
    /// The `.pacnew` and `.pacsave` files pacman left beside the kind's owned resources, secret
    /// ones' differences withheld; `quiet` as `pacnew::find` takes it. A kind owning no file
    /// pacman writes finds none and leaves `quiet` alone.
    fn pacnew(
        env: &Env,
        declaration: &Declaration,
        ledger: &Ledger,
        quiet: &mut QuietDirs,
    ) -> Vec<Pacnew>;
    /// Where the service's watcher looks for the kind's declared and owned resources, and which
    /// of them an event there touches: hints, each checked again before anything runs. A kind
    /// with no cheap hint gives none and is left to the drift timer.
    fn watch<'d>(declaration: &'d Declaration, ledger: &'d Ledger, hints: &mut dyn Hints<'d>);
}

/// Runs `batch` over all `names` at once; if that fails because of the names, over each name
/// alone, so one bad name fails only its own resource. Returns one result per name, in order,
/// except when the host starts stopping during the calls one name at a time: they end there, and
/// the names past the results' end were not attempted. The calls after the first are counted as
/// retries of the run.
pub fn batch_then_each(
    runner: &Runner,
    names: &[&str],
    mut batch: impl FnMut(&[&str]) -> Result<(), KindError>,
) -> Vec<Result<(), KindError>> {
    if names.is_empty() {
        return Vec::new();
    }
    match batch(names) {
        Ok(()) => names.iter().map(|_| Ok(())).collect(),
        Err(e) if names.len() == 1 || !e.blames_names() => {
            names.iter().map(|_| Err(e.clone())).collect()
        }
        Err(_) => {
            let mut results = Vec::with_capacity(names.len());
            for name in names {
                if runner.stopping() {
                    break;
                }
                runner.count_retry();
                results.push(batch(std::slice::from_ref(name)));
            }
            results
        }
    }
}

/// How many extra queries one batched observation may spend finding the names that made it
/// fail: enough to single out a handful among thousands (each costs about 2 log2 n), while a
/// tool that refuses everything for its own reasons is not asked thousands of times.
pub const RETRY_BUDGET: usize = 64;

/// Runs the observation `query` over all `names` at once (it answers one item per name, in
/// order; `what` names it when it answers short); if that fails because of the names, over each
/// half, and so on, so the failure lands on the names that caused it and every other name is
/// still observed. A failure that does not blame the names (a timeout, a tool that cannot start)
/// is given to every name of its batch without retrying, as is any batch left when
/// `RETRY_BUDGET` is spent. Retries are counted.
pub fn query_by_halves<T, E: BatchFailure + Into<KindError>>(
    runner: &Runner,
    what: &str,
    names: &[&str],
    mut query: impl FnMut(&[&str]) -> Result<Vec<T>, E>,
) -> Vec<Result<T, KindError>> {
    let mut budget = RETRY_BUDGET;
    let mut out = Vec::with_capacity(names.len());
    halves(runner, what, names, &mut query, &mut budget, &mut out);
    out
}

fn halves<T, E: BatchFailure + Into<KindError>>(
    runner: &Runner,
    what: &str,
    names: &[&str],
    query: &mut impl FnMut(&[&str]) -> Result<Vec<T>, E>,
    budget: &mut usize,
    out: &mut Vec<Result<T, KindError>>,
) {
    if names.is_empty() {
        return;
    }
    let (error, blames_names): (KindError, bool) = match query(names) {
        Ok(items) if items.len() == names.len() => {
            out.extend(items.into_iter().map(Ok));
            return;
        }
        Ok(items) => (
            format!(
                "{what} answered for {} of the {} asked about",
                items.len(),
                names.len()
            )
            .into(),
            true,
        ),
        Err(e) => {
            let blames_names = e.blames_names();
            (e.into(), blames_names)
        }
    };
    if names.len() == 1 || !blames_names || *budget < 2 {
        out.extend(names.iter().map(|_| Err(error.clone())));
        return;
    }
    *budget -= 2;
    let (left, right) = names.split_at(names.len() / 2);
    for half in [left, right] {
        runner.count_retry();
        halves(runner, what, half, query, budget, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::{parse_with_defaults, problems};
    use crate::model::spec::{ABOUT, NAMES};

    /// Each kind's name, as visited one by one.
    struct Names;
    impl Visit for Names {
        type Out = &'static str;
        fn visit<K: Kind>(&mut self) -> &'static str {
            K::NAME
        }
    }

    #[test]
    fn the_registry_lists_each_kind_once_in_converge_order() {
        // Units need the packages that ship them and the files they restart on; containers
        // may use all three.
        assert_eq!(NAMES, ["packages", "files", "units", "containers"]);
        assert_eq!(each(&mut Names), NAMES);
        assert_eq!(ABOUT.len(), NAMES.len());
        let usage = crate::cli::args::usage();
        assert!(usage.contains(&ABOUT.join(", ")), "{usage}");
    }

    #[test]
    fn the_known_top_level_keys_are_the_declarations_fields_and_the_kinds() {
        let found = problems(r#"{"schema": 1, "mounts": {}}"#);
        let mut known: Vec<&str> = [
            "$schema",
            "expires",
            "packages_upgrade",
            "revision",
            "schema",
        ]
        .into_iter()
        .chain(NAMES.iter().copied())
        .collect();
        known.sort_unstable();
        assert_eq!(
            found,
            [format!(
                "unknown field \"mounts\" (known fields: {})",
                known.join(", ")
            )]
        );
    }

    #[test]
    fn every_kind_is_parsed_counted_and_checked_in_order() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "containers": {"web": {"image": "localhost/web"}},
                "units": {"a.service": {}}, "files": {"/etc/a": {"content": ""}},
                "packages": {"vim": {}, "nano": {}}}"#,
        )
        .unwrap();
        assert_eq!(d.count(), 5);
        struct Counts<'d>(&'d Declaration);
        impl Visit for Counts<'_> {
            type Out = (&'static str, usize);
            fn visit<K: Kind>(&mut self) -> Self::Out {
                (K::NAME, K::desired(self.0).len())
            }
        }
        assert_eq!(
            each(&mut Counts(&d)),
            [
                ("packages", 2),
                ("files", 1),
                ("units", 1),
                ("containers", 1)
            ]
        );
        // Problems come in the kinds' order, whatever order the JSON had them in.
        let found = problems(
            r#"{"schema": 1, "containers": {"-web": {"image": "x"}}, "packages": {"-vim": {}}}"#,
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].starts_with("packages["), "{found:#?}");
        assert!(found[1].starts_with("containers["), "{found:#?}");
    }

    #[test]
    fn details_are_one_string_and_a_list_in_json() {
        let details = Details::from(vec!["content".to_string(), "mode\n0644".to_string()]);
        assert_eq!(details.iter().collect::<Vec<_>>(), ["content", "mode 0644"]);
        assert_eq!(details.join(", "), "content, mode 0644");
        let json = serde_json::to_string(&details).unwrap();
        assert_eq!(json, r#"["content","mode 0644"]"#);
        let none = Details::from(Vec::new());
        assert_eq!(none.iter().count(), 0);
        assert_eq!(serde_json::to_string(&none).unwrap(), "[]");
        // Kept in place up to 22 bytes, boxed beyond: the same details either way.
        for text in [
            "80 bytes, mode 0644",
            "1234567890123456789012",
            "é",
            "a, b, c, d, e, f, g, h, i",
        ] {
            let lines: Vec<String> = text.split(", ").map(str::to_string).collect();
            let details = Details::from(lines.clone());
            assert_eq!(details.iter().collect::<Vec<_>>(), lines);
            assert_eq!(details.join(", "), text);
        }
        assert!(std::mem::size_of::<Details>() <= 24);
    }

    #[test]
    fn only_files_are_applied_a_chunk_at_a_time() {
        struct Chunked;
        impl Visit for Chunked {
            type Out = (&'static str, bool);
            fn visit<K: Kind>(&mut self) -> Self::Out {
                (K::NAME, K::APPLIED_IN_CHUNKS)
            }
        }
        // Packages are one pacman transaction; units and containers go in phases over all of
        // theirs (every stop before any start, one daemon-reload); each file stands alone.
        assert_eq!(
            each(&mut Chunked),
            [
                ("packages", false),
                ("files", true),
                ("units", false),
                ("containers", false)
            ]
        );
    }

    /// A query that fails as a whole when any of `bad` is in its batch, blaming the names (or
    /// not), and answers each name's length otherwise.
    fn ask(
        names: &[&str],
        bad: &[&str],
        blames_names: bool,
    ) -> (Vec<Result<usize, String>>, usize, usize) {
        struct Refused(bool);
        impl From<Refused> for KindError {
            fn from(_: Refused) -> KindError {
                "refused".into()
            }
        }
        impl BatchFailure for Refused {
            fn blames_names(&self) -> bool {
                self.0
            }
        }
        let runner = Runner::new(false);
        let mut queries = 0;
        let results = query_by_halves(&runner, "the query", names, |batch| {
            queries += 1;
            if batch.iter().any(|n| bad.contains(n)) {
                Err(Refused(blames_names))
            } else {
                Ok(batch.iter().map(|n| n.len()).collect())
            }
        });
        let results = results
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        (results, queries, runner.retries())
    }

    #[test]
    fn a_failed_batch_lands_on_the_name_that_caused_it() {
        let names: Vec<String> = (0..16).map(|i| format!("n{i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (results, queries, retries) = ask(&names, &["n05"], true);
        for (name, result) in names.iter().zip(&results) {
            match *name {
                "n05" => assert_eq!(*result, Err("refused".to_string())),
                _ => assert_eq!(*result, Ok(3)),
            }
        }
        // 1 + 2 per level of halving (16 -> 8 -> 4 -> 2 -> 1).
        assert_eq!((queries, retries), (9, 8));
        let (results, _, _) = ask(&names, &[], true);
        assert!(results.iter().all(|r| *r == Ok(3)));
    }

    #[test]
    fn a_failure_that_does_not_blame_the_names_is_not_retried() {
        let (results, queries, retries) = ask(&["a", "b", "c"], &["b"], false);
        assert!(results.iter().all(|r| *r == Err("refused".to_string())));
        assert_eq!((queries, retries), (1, 0));
    }

    #[test]
    fn retries_are_bounded() {
        let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Everything refused: the budget stops the halving, every name still gets its answer.
        let (results, queries, retries) = ask(&names, &names, true);
        assert_eq!(results.len(), 1000);
        assert!(results.iter().all(|r| r.is_err()));
        assert_eq!(retries, RETRY_BUDGET);
        assert_eq!(queries, RETRY_BUDGET + 1);
    }

    #[test]
    fn one_name_at_a_time_ends_where_the_host_starts_stopping() {
        // The pulse says "stopping" from its third turn on: two names are tried alone, the rest
        // are left (not attempted, not failed).
        let turns = std::cell::Cell::new(0);
        let pulse = || {
            turns.set(turns.get() + 1);
            turns.get() > 2
        };
        let runner = Runner::new(false).with_pulse(&pulse);
        let mut calls = Vec::new();
        let results = batch_then_each(&runner, &["a", "b", "c", "d"], |batch| {
            calls.push(batch.join(" "));
            match batch {
                [one] if *one != "a" => Ok(()),
                _ => Err(KindError::from("refused")),
            }
        });
        assert_eq!(results, vec![Err(KindError::from("refused")), Ok(())]);
        assert_eq!(calls, ["a b c d", "a", "b"]);
        assert_eq!(runner.retries(), 2);
        // Never stopping: every name gets its answer.
        let runner = Runner::new(false);
        let results = batch_then_each(&runner, &["a", "b"], |batch| match batch {
            [_] => Ok(()),
            _ => Err(KindError::from("refused")),
        });
        assert_eq!(results, vec![Ok(()), Ok(())]);
    }

    #[test]
    fn a_short_answer_is_a_failure_of_the_names() {
        let runner = Runner::new(false);
        let results = query_by_halves(&runner, "`tool`", &["a", "b"], |batch| {
            // One item whatever it is asked: short for two names, right for one.
            Ok::<_, KindError>(vec![batch.len().min(1)])
        });
        assert_eq!(results, vec![Ok(1), Ok(1)]);
        let results = query_by_halves(&runner, "`tool`", &["a"], |_| {
            Ok::<Vec<u8>, KindError>(vec![])
        });
        assert_eq!(
            results,
            vec![Err("`tool` answered for 0 of the 1 asked about".into())]
        );
    }
}
