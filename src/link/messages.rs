//! The link's messages as they are on the wire (documented in docs/protocol.md). Only this file
//! knows their JSON shape; unknown fields are ignored so either side can grow.

use std::fmt;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::model::pacnew::Pacnew;
use crate::model::run::{Failing, ResourceResult, RunOutcome, Triggers};
use crate::model::upkeep::Needs;
use crate::util::json_in_place::{member, string_is, unescape_in_place};

/// Protocol version spoken by this host.
pub const PROTOCOL: u32 = 1;

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
        facts: Option<Facts>,
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
    /// Control plane -> host: a declaration (its JSON text, verbatim, so digests hold).
    Declare {
        revision: u64,
        declaration: String,
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
    /// The node's facts, when they changed since the hello or the last report that carried them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Facts>,
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

/// What the node is, for the control plane to target and judge it (docs/protocol.md, "Facts").
/// Gathered by `crate::engine::facts`; a fact the host could not read is absent (null), never guessed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
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

impl Facts {
    /// Whether `self` says something `other` does not: every fact but the uptime compared.
    pub fn changed_from(&self, other: &Facts) -> bool {
        let uptime = |f: &Facts| Facts {
            uptime_secs: 0,
            ..f.clone()
        };
        uptime(self) != uptime(other)
    }
}

/// How a reported run ended, or why a declaration did not lead to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportOutcome {
    Converged,
    Failed,
    Interrupted,
    Error,
    /// A declaration with a revision older than the one in force.
    Ignored,
    /// An invalid declaration, or one its signatures do not allow.
    Rejected,
    /// A resource another process keeps changing back.
    Contested,
}

impl From<RunOutcome> for ReportOutcome {
    fn from(outcome: RunOutcome) -> ReportOutcome {
        match outcome {
            RunOutcome::Converged => ReportOutcome::Converged,
            RunOutcome::Failed => ReportOutcome::Failed,
            RunOutcome::Interrupted => ReportOutcome::Interrupted,
            RunOutcome::Error => ReportOutcome::Error,
        }
    }
}

impl fmt::Display for ReportOutcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ReportOutcome::Converged => "converged",
            ReportOutcome::Failed => "failed",
            ReportOutcome::Interrupted => "interrupted",
            ReportOutcome::Error => "error",
            ReportOutcome::Ignored => "ignored",
            ReportOutcome::Rejected => "rejected",
            ReportOutcome::Contested => "contested",
        })
    }
}

/// A frame's body as a message. A `declare` is read without a copy of its declaration: the JSON
/// string is unescaped in place, to the front of the frame's own buffer, which then becomes the
/// text. (serde would hold the frame, its scratch buffer and the string at once: a frame at the
/// size limit three times.) Every other message is small and goes through serde.
pub fn decode(body: Vec<u8>) -> Result<Message, String> {
    let not_a_message = |e: &dyn fmt::Display| format!("a frame that is not a message: {e}");
    let declare = member(&body, "type").is_some_and(|r| string_is(&body[r], "declare"));
    if !declare {
        return serde_json::from_slice(&body).map_err(|e| not_a_message(&e));
    }
    /// The whole frame checked as JSON and as a `declare`, its declaration skipped unbuffered.
    #[derive(Deserialize)]
    struct Head {
        #[serde(rename = "type")]
        _type: IgnoredAny,
        revision: u64,
        #[serde(rename = "declaration")]
        _declaration: IgnoredAny,
        #[serde(default)]
        confirm_secs: Option<u64>,
    }
    let head: Head = serde_json::from_slice(&body).map_err(|e| not_a_message(&e))?;
    let span = member(&body, "declaration")
        .filter(|r| body[r.start] == b'"')
        .ok_or_else(|| not_a_message(&"`declaration` is not a string"))?;
    let declaration = unescape_in_place(body, span).map_err(|e| not_a_message(&e))?;
    Ok(Message::Declare {
        revision: head.revision,
        declaration,
        confirm_secs: head.confirm_secs,
    })
}

/// The largest report the host sends: a control plane must accept frames of at least this size
/// (docs/protocol.md). A report over it is abridged, so one huge run or one huge rejected
/// declaration cannot exceed the control plane's limit and block every later report.
pub const MAX_REPORT_BYTES: usize = 1 << 20;
/// How many bytes `value` is as JSON, counted as it is written (a large report is not built
/// whole in memory just to be measured).
pub fn json_len<T: Serialize>(value: &T) -> usize {
    let mut counted = Counted::new(std::io::sink());
    // Writing to a sink cannot fail; a value that cannot be JSON counts as nothing.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.bytes
}

/// A writer that counts the bytes it passes on: what was written is measured as it is written.
pub struct Counted<W> {
    inner: W,
    pub bytes: usize,
}

impl<W> Counted<W> {
    pub fn new(inner: W) -> Counted<W> {
        Counted { inner, bytes: 0 }
    }
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.bytes += written;
        Ok(written)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
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
    use crate::store::{ResourceResult, ResultAction, Trigger};

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
    fn facts_json_is_pinned_and_uptime_alone_is_no_change() {
        let facts = Facts {
            os_id: Some("arch".into()),
            os_build_id: Some("rolling".into()),
            kernel_running: "6.12.1-arch1-1".into(),
            kernels_installed: vec!["6.12.2-arch1-1".into()],
            arch: "x86_64".into(),
            uptime_secs: 42,
            cpus: 2,
            memory_bytes: Some(1 << 30),
            packages: Some(300),
            ..Facts::default()
        };
        assert_eq!(
            serde_json::to_string(&facts).unwrap(),
            r#"{"os_id":"arch","os_version_id":null,"os_build_id":"rolling","kernel_running":"6.12.1-arch1-1","kernels_installed":["6.12.2-arch1-1"],"arch":"x86_64","boot_id":null,"uptime_secs":42,"cpus":2,"memory_bytes":1073741824,"pacman_version":null,"packages":300}"#
        );
        let later = Facts {
            uptime_secs: 4200,
            ..facts.clone()
        };
        assert!(!later.changed_from(&facts));
        let upgraded = Facts {
            packages: Some(301),
            ..later
        };
        assert!(upgraded.changed_from(&facts));
        let counted = Facts {
            foreign_packages: Some(1),
            ..facts.clone()
        };
        assert!(counted.changed_from(&facts));
        assert!(serde_json::to_string(&counted)
            .unwrap()
            .ends_with(r#""packages":300,"foreign_packages":1}"#));
        let stale = Facts {
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

    /// What serde makes of a frame's body: what `decode` must agree with, but for the copies.
    fn by_serde(body: &[u8]) -> Result<Message, ()> {
        serde_json::from_slice(body).map_err(|_| ())
    }

    #[test]
    fn a_declare_is_unescaped_in_its_own_buffer_to_what_serde_reads() {
        let texts = [
            String::new(),
            "{\"schema\": 1}".into(),
            "plain".into(),
            "quote \" backslash \\ slash / controls \u{8}\u{c}\n\r\t\u{1}\u{1f} end".into(),
            "é ü 日本 🦀 \u{7f} \u{80} \u{ffff} \u{10ffff}".into(),
            "\\\"\\\\".repeat(1000),
        ];
        for text in &texts {
            let frames = [
                serde_json::to_vec(&Message::Declare {
                    revision: 9,
                    declaration: text.clone(),
                    confirm_secs: None,
                })
                .unwrap(),
                // Members in another order, spaces, unknown ones holding what looks like a member.
                format!(
                    r#" {{ "declaration" : {} , "x": {{"declaration": "no", "a": [1, "]", {{}}]}}, "revision":9, "type" :"declare", "n": -1.5e3}} "#,
                    serde_json::to_string(text).unwrap()
                )
                .into_bytes(),
                // Every character \u-escaped, the way some encoders write non-ASCII (pairs for
                // characters past the BMP).
                format!(
                    r#"{{"type":"decl\u0061re","revision":9,"declaration":"{}"}}"#,
                    text.encode_utf16()
                        .map(|u| format!("\\u{u:04X}"))
                        .collect::<String>()
                )
                .into_bytes(),
            ];
            for body in frames {
                let decoded = decode(body.clone()).unwrap();
                assert_eq!(Ok(&decoded), by_serde(&body).as_ref(), "{text:?}");
                let Message::Declare { declaration, .. } = decoded else {
                    unreachable!()
                };
                assert_eq!(&declaration, text);
                assert_eq!(
                    declaration.capacity(),
                    declaration.len(),
                    "no spare buffer kept"
                );
            }
        }
    }

    /// A `declare`'s `confirm_secs` is read beside its declaration, and encoded only when set
    /// (a control plane from before it sends none, and reads none back).
    #[test]
    fn a_declare_carries_its_confirmation_window() {
        let with = br#"{"type":"declare","revision":3,"declaration":"d","confirm_secs":0}"#;
        let decoded = decode(with.to_vec()).unwrap();
        assert_eq!(Ok(&decoded), by_serde(with).as_ref());
        assert!(matches!(
            decoded,
            Message::Declare {
                confirm_secs: Some(0),
                ..
            }
        ));
        let without = br#"{"type":"declare","revision":3,"declaration":"d"}"#;
        let decoded = decode(without.to_vec()).unwrap();
        assert!(matches!(
            decoded,
            Message::Declare {
                confirm_secs: None,
                ..
            }
        ));
        assert_eq!(serde_json::to_vec(&decoded).unwrap(), without);
    }

    #[test]
    fn a_bad_declare_is_refused_by_name_as_serde_would_refuse_it() {
        let refused = [
            (
                r#"{"type":"declare","revision":1,"declaration":5}"#,
                "not a string",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":{"a":"b"}}"#,
                "not a string",
            ),
            (
                r#"{"type":"declare","revision":1}"#,
                "missing field `declaration`",
            ),
            (
                r#"{"type":"declare","declaration":""}"#,
                "missing field `revision`",
            ),
            (
                r#"{"type":"declare","revision":-1,"declaration":""}"#,
                "invalid value",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"a","declaration":"b"}"#,
                "duplicate field",
            ),
            (
                r#"{"type":"declare","type":"declare","revision":1,"declaration":""}"#,
                "duplicate field",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"\ud800"}"#,
                "surrogate",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"\udc00\ud800"}"#,
                "surrogate",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"\x"}"#,
                "escape",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"\u12g4"}"#,
                "escape",
            ),
            (
                "{\"type\":\"declare\",\"revision\":1,\"declaration\":\"a\nb\"}",
                "control character",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":"abc"#,
                "EOF",
            ),
            (
                r#"{"type":"declare","revision":1,"declaration":""} x"#,
                "trailing",
            ),
        ];
        for (body, why) in refused {
            let e = decode(body.as_bytes().to_vec()).unwrap_err();
            assert!(
                e.starts_with("a frame that is not a message: ") && e.contains(why),
                "{body}: {e}"
            );
            assert!(by_serde(body.as_bytes()).is_err(), "{body}");
        }
        let mut invalid_utf8 = br#"{"type":"declare","revision":1,"declaration":"#.to_vec();
        invalid_utf8.extend_from_slice(b"\"\xff\"}");
        assert!(decode(invalid_utf8).unwrap_err().contains("UTF-8"));
    }

    /// Every prefix of a declare and every byte of it replaced: `decode` never panics and agrees
    /// with serde on what is a message and what it says (the fuzz target `link_input` goes on).
    #[test]
    fn a_damaged_declare_decodes_as_serde_reads_it_or_not_at_all() {
        let body = br#"{"type": "declare", "revision": 12, "declaration": "{\"files\": {\"/etc/\u00e9\": [1, \"\\\/\"]}} \ud83e\udd80"}"#;
        let mut damaged: Vec<Vec<u8>> = (0..body.len()).map(|n| body[..n].to_vec()).collect();
        for at in 0..body.len() {
            for byte in [
                b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'u', b'0', b' ', 0x01, 0xc3, 0xff,
            ] {
                let mut one = body.to_vec();
                one[at] = byte;
                damaged.push(one);
            }
        }
        for one in damaged {
            assert_eq!(
                decode(one.clone()).ok(),
                by_serde(&one).ok(),
                "{}",
                String::from_utf8_lossy(&one)
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
