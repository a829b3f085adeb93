//! The link's messages as they are on the wire (documented in docs/protocol.md). Only this file
//! knows their JSON shape; unknown fields are ignored so either side can grow. A `declare` is
//! this JSON head; its declaration is the frame after it, bytes as they are (`mod.rs`).

use serde::{Deserialize, Serialize};

use crate::model::pacnew::Pacnew;
use crate::model::run::{Failing, ReportOutcome, ResourceResult, Triggers};
use crate::model::upkeep::Needs;
use crate::util::counted::Counted;

/// Protocol version spoken by this host: 2 carries a declaration in its own frame (1 had it as a
/// JSON string inside the `declare`).
pub const PROTOCOL: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Host -> control plane, first: who it is and what it holds.
    Hello {
        protocol: u32,
        node: String,
        secret: String,
        version: String,
        revision: Option<u64>,
        digest: Option<String>,
        /// What the node is (docs/protocol.md, "Facts"); absent from hosts before it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        facts: Option<Node>,
        /// The last declaration the host reverted, until a new one is put in force: so the
        /// control plane does not push it again unasked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reverted: Option<Reverted>,
    },
    /// Control plane -> host: the hello was accepted; maybe with the fleet's reconnect policy.
    Welcome {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reconnect: Option<ReconnectPolicy>,
    },
    /// Control plane -> host: a declaration follows, as the next frame (its bytes verbatim, so
    /// digests and signatures hold).
    Declare {
        revision: u64,
        /// How long the host waits for the ack of the report of the run that applies it before
        /// reverting it (0: no confirmation needed); absent, the host's `confirm_secs`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confirm_secs: Option<u64>,
    },
    /// Host -> control plane: one per run, or for a declaration ignored or rejected.
    Report(Report),
    /// Control plane -> host: reports up to `id` are stored; the host drops them from its outbox.
    Ack {
        id: u64,
    },
    Ping {},
    /// The answer to a ping; it may carry the reconnect policy again, so hosts that joined a
    /// growing fleet early learn its newer policy.
    Pong {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reconnect: Option<ReconnectPolicy>,
    },
    /// Either side, before closing: why.
    Error {
        message: String,
    },
}

/// How the control plane wants its hosts to come back after losing the link: the first
/// backoff ceiling and the cap (docs/protocol.md, "Reconnecting"). It knows how many hosts it
/// has; a host alone does not, so the control plane's word is taken over the host's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconnectPolicy {
    pub base_ms: u64,
    pub cap_ms: u64,
}

/// One run (or one refused declaration), as the control plane receives it; made from the run
/// record (`engine::converge`), its own type so the wire does not follow the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Increasing per host; acknowledged by `ack`.
    pub id: u64,
    pub revision: Option<u64>,
    pub digest: Option<String>,
    /// What caused the run: `start`, `declaration`, `timer`, `reconnect`, `signal`, `apply`, ...
    pub trigger: Triggers,
    pub outcome: ReportOutcome,
    pub started: u64,
    pub ended: u64,
    pub changes: Vec<ResourceResult>,
    pub failures: Vec<ResourceResult>,
    pub deferred: Vec<ResourceResult>,
    /// Changes that repaired drift: made in a run no new declaration caused.
    pub drift: Vec<ResourceResult>,
    /// Human text for `ignored`, `rejected` and `error`; for a run, that the declaration in
    /// force has expired.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Every resource failing after the run, with its streak (since when, how many runs), so a
    /// new failure can be told from an old one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<Failing>,
    /// Owned files with a `.pacnew` or `.pacsave` beside them after the run, with the diff size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pacnew: Vec<Pacnew>,
    /// What the machine needs after the run (`reboot_required`, `restart_required`,
    /// `reexec_required`), in every run's report made on the running system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Box<Needs>>,
    /// What the node is, when it changed since the hello or the last report that carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Node>,
    /// The run that reverted a declaration not confirmed in time: which, to what, when and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<Reverted>,
}

/// A pending declaration taken back, not confirmed in time (docs/protocol.md, "Confirmation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reverted {
    /// The revision taken back, and its digest.
    pub revision: Option<u64>,
    pub digest: String,
    /// Unix seconds.
    pub at: u64,
    /// Why it was not confirmed, as the host knows it (the link's last error).
    pub why: String,
    /// The confirmed generation put back in force.
    pub to_revision: Option<u64>,
    pub to_digest: String,
    /// It is signed and its signature has expired: held anyway, to get the machine back.
    #[serde(default)]
    pub signature_expired: bool,
}

/// What the node is, for the control plane to target and judge it: the hello's and reports'
/// `facts` member (docs/protocol.md, "Facts"). Gathered by `crate::engine::node`; what the host
/// could not read is absent (null), never guessed. (A kind's `Facts` are what its run noted.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// os-release's `ID`, `VERSION_ID` and `BUILD_ID` (Arch has no `VERSION_ID`).
    pub os_id: Option<String>,
    pub os_version_id: Option<String>,
    pub os_build_id: Option<String>,
    /// `uname -r` of the running kernel.
    pub kernel_running: String,
    /// The releases the installed kernel packages ship (`/usr/lib/modules/RELEASE/vmlinuz`),
    /// sorted: one of them differs from `kernel_running` after a kernel upgrade until a reboot.
    pub kernels_installed: Vec<String>,
    /// `uname -m`.
    pub arch: String,
    pub boot_id: Option<String>,
    /// Seconds since boot. Not a change by itself: a report carries the facts again only when
    /// something else changed.
    pub uptime_secs: u64,
    pub cpus: u32,
    /// `MemTotal` of /proc/meminfo, in bytes.
    pub memory_bytes: Option<u64>,
    /// The installed `pacman` package's version.
    pub pacman_version: Option<String>,
    /// Installed packages (entries of the local database).
    pub packages: Option<u64>,
    /// Installed packages in no sync database (`pacman -Qm`), as the last run that counted them
    /// found; absent until one did (a run on the running system counts them when pacman's
    /// databases changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_packages: Option<u64>,
    /// Reboot, restarts and re-exec needed, as the last run that looked found (`upkeep`): in the
    /// hello too, so a control plane learns it before the node's next report. Absent until a run
    /// on the running system has looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Needs>,
}

impl Node {
    /// Whether `self` says something `other` does not: everything but the uptime compared.
    pub fn changed_from(&self, other: &Node) -> bool {
        let uptime = |f: &Node| Node {
            uptime_secs: 0,
            ..f.clone()
        };
        uptime(self) != uptime(other)
    }
}

/// A frame's body as a message (a `declare`'s declaration, the frame after it, is not one).
pub fn decode(body: &[u8]) -> Result<Message, String> {
    serde_json::from_slice(body).map_err(|e| format!("a frame that is not a message: {e}"))
}

/// The largest report the host sends: a control plane must accept frames of at least this size
/// (docs/protocol.md). A report over it is abridged, so one huge run or one huge rejected
/// declaration cannot exceed the control plane's limit and block every later report.
pub const MAX_REPORT_BYTES: usize = 1 << 20;
/// The most of a run's changes a report lists (its drift, the same changes, as many): the rest
/// are counted in its `message`. A 20,000-file converge would otherwise fill the report's MiB
/// with some 14,000 entries, held in memory beside the run's own (docs/performance.md, figure 11);
/// a thousand tell a person what happened, as the run record's hundred do.
pub const REPORTED_CHANGES: usize = 1000;
/// How many bytes `value` is as JSON, counted as it is written (a large report is not built
/// whole in memory just to be measured).
pub fn json_len<T: Serialize>(value: &T) -> usize {
    let mut counted = Counted::new(std::io::sink());
    // Writing to a sink cannot fail; a value that cannot be JSON counts as nothing.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.bytes
}

/// The most of `message` a report carries (the first lines: a rejection's count and first problems).
pub const MAX_MESSAGE_BYTES: usize = 64 << 10;

impl Report {
    /// Cuts the report to at most `MAX_REPORT_BYTES` as JSON: `message` to its first lines within
    /// `MAX_MESSAGE_BYTES`, then the resource lists halved until it fits; what was left out is
    /// counted at the end of `message`.
    pub fn abridge(&mut self) {
        self.abridge_counting(0);
    }

    /// `abridge`, counting `omitted` entries its maker already left out (`report_of` builds no
    /// more entries than can fit) with those it leaves out.
    pub fn abridge_counting(&mut self, mut omitted: usize) {
        self.message = abridge_text(&self.message, MAX_MESSAGE_BYTES);
        while json_len(self) > MAX_REPORT_BYTES {
            // The longest list is halved, whichever it is (they hold different records).
            let lengths = [
                self.changes.len(),
                self.failures.len(),
                self.deferred.len(),
                self.drift.len(),
                self.failing.len(),
                self.pacnew.len(),
            ];
            let Some((longest, &len)) = lengths.iter().enumerate().max_by_key(|(_, l)| **l) else {
                break;
            };
            if len == 0 {
                break;
            }
            let keep = len / 2;
            omitted += len - keep;
            match longest {
                0 => self.changes.truncate(keep),
                1 => self.failures.truncate(keep),
                2 => self.deferred.truncate(keep),
                3 => self.drift.truncate(keep),
                4 => self.failing.truncate(keep),
                _ => self.pacnew.truncate(keep),
            }
        }
        if omitted > 0 {
            if !self.message.is_empty() {
                self.message.push('\n');
            }
            self.message.push_str(&format!(
                "{omitted} resource entries left out to keep this report under {} KiB; the \
                 host's run record lists the first of each",
                MAX_REPORT_BYTES >> 10
            ));
        }
    }
}

/// `text`'s first lines within `max` bytes, and how many lines were left out.
pub fn abridge_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut kept = String::new();
    let mut lines = text.lines();
    let total = text.lines().count();
    let mut count = 0;
    for line in lines.by_ref() {
        // A single line longer than the whole budget is cut at a character boundary.
        let room = max.saturating_sub(kept.len() + 1);
        if line.len() > room {
            if count == 0 {
                let mut end = room;
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                kept.push_str(&line[..end]);
                count = 1;
            }
            break;
        }
        if count > 0 {
            kept.push('\n');
        }
        kept.push_str(line);
        count += 1;
    }
    format!(
        "{kept}\n... cut to {max} bytes: {} more lines",
        total - count
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::run::{ResultAction, RunOutcome, Trigger};

    /// Built from JSON, so the test holds whatever optional fields reports grow.
    fn report(entries: usize, message: String) -> Report {
        let result = ResourceResult {
            kind: "files".into(),
            key: "/etc/some/long/path/of/a/file.conf".into(),
            action: ResultAction::Update,
            detail: "content (1000 -> 2000 bytes)".into(),
        };
        let mut report: Report = serde_json::from_value(serde_json::json!({
            "id": 7, "revision": 1, "digest": null, "trigger": ["declaration"],
            "outcome": "failed", "started": 0, "ended": 0, "changes": [], "failures": [],
            "deferred": [], "drift": [], "message": message}))
        .unwrap();
        report.changes = vec![result.clone(); entries];
        report.failures = vec![result; 3];
        report
    }

    #[test]
    fn node_json_is_pinned_and_uptime_alone_is_no_change() {
        let facts = Node {
            os_id: Some("arch".into()),
            os_build_id: Some("rolling".into()),
            kernel_running: "6.12.1-arch1-1".into(),
            kernels_installed: vec!["6.12.2-arch1-1".into()],
            arch: "x86_64".into(),
            uptime_secs: 42,
            cpus: 2,
            memory_bytes: Some(1 << 30),
            packages: Some(300),
            ..Node::default()
        };
        assert_eq!(
            serde_json::to_string(&facts).unwrap(),
            r#"{"os_id":"arch","os_version_id":null,"os_build_id":"rolling","kernel_running":"6.12.1-arch1-1","kernels_installed":["6.12.2-arch1-1"],"arch":"x86_64","boot_id":null,"uptime_secs":42,"cpus":2,"memory_bytes":1073741824,"pacman_version":null,"packages":300}"#
        );
        let later = Node {
            uptime_secs: 4200,
            ..facts.clone()
        };
        assert!(!later.changed_from(&facts));
        let upgraded = Node {
            packages: Some(301),
            ..later
        };
        assert!(upgraded.changed_from(&facts));
        let counted = Node {
            foreign_packages: Some(1),
            ..facts.clone()
        };
        assert!(counted.changed_from(&facts));
        assert!(serde_json::to_string(&counted)
            .unwrap()
            .ends_with(r#""packages":300,"foreign_packages":1}"#));
        let stale = Node {
            needs: Some(Needs {
                reboot: None,
                restart: vec!["sshd.service".into()],
                reexec: false,
            }),
            ..counted.clone()
        };
        assert!(stale.changed_from(&counted));
        assert!(serde_json::to_string(&stale).unwrap().ends_with(
            r#""foreign_packages":1,"needs":{"reboot_required":null,"restart_required":["sshd.service"],"reexec_required":false}}"#
        ));
    }

    #[test]
    fn a_huge_report_is_abridged_below_the_limit_and_says_so() {
        let problems: String = (0..100_000)
            .map(|i| format!("  - files./etc/x{i}: content is not a string\n"))
            .collect();
        let mut huge = report(200_000, format!("revision 1: 100000 problems:\n{problems}"));
        huge.abridge();
        let len = serde_json::to_vec(&huge).unwrap().len();
        assert!(len <= MAX_REPORT_BYTES, "{len}");
        assert!(huge
            .message
            .starts_with("revision 1: 100000 problems:\n  - files./etc/x0:"));
        assert!(
            huge.message.contains("more lines"),
            "the count of what was cut"
        );
        assert!(huge.message.contains("resource entries left out"));
        assert_eq!(huge.failures.len(), 3, "the short lists stay whole");
        assert!(huge.changes.len() > 1000);

        let mut small = report(10, "fine".into());
        let before = small.clone();
        small.abridge();
        assert_eq!(small, before, "a report under the limit is untouched");
    }

    /// The control plane reads this shape (docs/protocol.md): field names, order, the trigger
    /// as a list, the words of outcome and action.
    #[test]
    fn a_report_keeps_its_json_shape() {
        let result = |action| ResourceResult {
            kind: "files".into(),
            key: "/etc/x".into(),
            action,
            detail: "content".into(),
        };
        let report = Report {
            id: 3,
            revision: Some(4),
            digest: Some("ab".into()),
            trigger: [Trigger::Start, Trigger::Signal].into_iter().collect(),
            outcome: RunOutcome::Failed.into(),
            started: 5,
            ended: 6,
            changes: vec![result(ResultAction::Create)],
            failures: vec![result(ResultAction::Observe)],
            deferred: vec![result(ResultAction::Remove)],
            drift: vec![result(ResultAction::Update)],
            message: "expired".into(),
            failing: vec![Failing {
                kind: "files".into(),
                key: "/etc/x".into(),
                first_seen: 1,
                last_seen: 6,
                runs: 2,
                last_error: "observe failed: no".into(),
            }],
            facts: None,
            pacnew: vec![Pacnew {
                path: "/etc/x".into(),
                suffix: "pacnew".into(),
                added: 1,
                removed: 2,

                secret: false,
            }],
            needs: Some(Box::new(Needs {
                reboot: Some("the running kernel 6.1-1's modules are gone".into()),
                restart: vec!["nginx.service".into()],
                reexec: false,
            })),
            reverted: None,
        };
        let r = r#"{"kind":"files","key":"/etc/x","action":"ACTION","detail":"content"}"#;
        let expected = [
            r#"{"id":3,"revision":4,"digest":"ab","trigger":["start","signal"],"#,
            r#""outcome":"failed","started":5,"ended":6,"#,
            &format!(r#""changes":[{}],"#, r.replace("ACTION", "create")),
            &format!(r#""failures":[{}],"#, r.replace("ACTION", "observe")),
            &format!(r#""deferred":[{}],"#, r.replace("ACTION", "remove")),
            &format!(r#""drift":[{}],"#, r.replace("ACTION", "update")),
            r#""message":"expired","failing":[{"kind":"files","key":"/etc/x","first_seen":1,"#,
            r#""last_seen":6,"runs":2,"last_error":"observe failed: no"}],"#,
            r#""pacnew":[{"path":"/etc/x","suffix":"pacnew","added":1,"removed":2}],"#,
            r#""needs":{"reboot_required":"the running kernel 6.1-1's modules are gone","#,
            r#""restart_required":["nginx.service"],"reexec_required":false}}"#,
        ]
        .concat();
        assert_eq!(serde_json::to_string(&report).unwrap(), expected);
        assert_eq!(serde_json::from_str::<Report>(&expected).unwrap(), report);
        // Every outcome a report can carry, by its word.
        let words: Vec<String> = [
            ReportOutcome::Converged,
            ReportOutcome::Failed,
            ReportOutcome::Interrupted,
            ReportOutcome::Error,
            ReportOutcome::Ignored,
            ReportOutcome::Rejected,
            ReportOutcome::Contested,
        ]
        .iter()
        .map(|o| serde_json::to_string(o).unwrap() + " " + &o.to_string())
        .collect();
        assert_eq!(
            words,
            [
                r#""converged" converged"#,
                r#""failed" failed"#,
                r#""interrupted" interrupted"#,
                r#""error" error"#,
                r#""ignored" ignored"#,
                r#""rejected" rejected"#,
                r#""contested" contested"#,
            ]
        );
    }

    /// A `declare` head carries the revision and `confirm_secs`, the latter encoded only when set
    /// (a control plane from before it sends none, and reads none back); the declaration is not
    /// in it.
    #[test]
    fn a_declare_head_carries_its_revision_and_confirmation_window() {
        let with = br#"{"type":"declare","revision":3,"confirm_secs":0}"#;
        assert_eq!(
            decode(with),
            Ok(Message::Declare {
                revision: 3,
                confirm_secs: Some(0)
            })
        );
        let without = br#"{"type":"declare","revision":3}"#;
        let decoded = decode(without).unwrap();
        assert_eq!(
            decoded,
            Message::Declare {
                revision: 3,
                confirm_secs: None
            }
        );
        assert_eq!(serde_json::to_vec(&decoded).unwrap(), without);
        for (body, why) in [
            (&br#"{"type":"declare"}"#[..], "missing field `revision`"),
            (br#"{"type":"declare","revision":-1}"#, "invalid value"),
            (br#"{"type":"declare","revision":1"#, "EOF"),
            (b"\xff", "expected value"),
        ] {
            let e = decode(body).unwrap_err();
            assert!(
                e.starts_with("a frame that is not a message: ") && e.contains(why),
                "{e}"
            );
        }
    }

    #[test]
    fn one_long_line_is_cut_at_a_character_boundary() {
        let text = "é".repeat(100);
        let cut = abridge_text(&text, 51);
        assert!(cut.starts_with(&"é".repeat(25)), "{cut}");
        assert!(cut.ends_with("... cut to 51 bytes: 0 more lines"), "{cut}");
    }
}
