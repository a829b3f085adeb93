//! The link protocol as a state machine with no sockets in it: bytes and the time come in
//! (`handle_input`, `handle_timeout`), events and bytes go out (`poll_event`, `pending_output`),
//! and it says when it next needs the clock (`poll_timeout`). The event loop only moves bytes.
//! Time is milliseconds on a monotonic clock the caller owns. A `declare` is two frames: its JSON
//! head, then the declaration's bytes as they are, which become its text without a copy.

pub mod frame;
pub mod messages;

use std::collections::VecDeque;
use std::fmt;

pub use messages::{
    json_len, Message, Node, ReconnectPolicy, Report, Reverted, MAX_REPORT_BYTES, REPORTED_CHANGES,
};

/// What the link tells the host.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The control plane accepted the hello.
    Welcome,
    Declare {
        revision: u64,
        /// The declaration's bytes, as the frame after the `declare` carried them.
        text: Vec<u8>,
        /// The `declare`'s own confirmation window, if it carries one.
        confirm_secs: Option<u64>,
    },
    Ack {
        id: u64,
    },
    /// The control plane's reconnect policy (in its welcome or a pong).
    Policy(ReconnectPolicy),
}

/// Why the link must be dropped (and retried).
#[derive(Debug, PartialEq)]
pub enum LinkError {
    Frame(frame::FrameError),
    /// Bytes that are not a message, or a message out of place.
    Protocol(String),
    /// No bytes for three heartbeats.
    Dead {
        silent_ms: u64,
    },
    /// The control plane said why it closes.
    Refused(String),
    /// A frame that started arriving did not finish within its deadline (a trickle).
    Stalled {
        length: Option<u64>,
        waited_ms: u64,
    },
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Frame(e) => write!(f, "{e}"),
            LinkError::Protocol(e) => write!(f, "protocol error: {e}"),
            LinkError::Dead { silent_ms } => write!(
                f,
                "no bytes from the control plane for {} s",
                silent_ms / 1000
            ),
            LinkError::Refused(e) => write!(f, "the control plane closed the link: {e}"),
            LinkError::Stalled { length, waited_ms } => write!(
                f,
                "a frame{} still incomplete after {} s, slower than {} bytes/s",
                length.map(|l| format!(" of {l} bytes")).unwrap_or_default(),
                waited_ms / 1000,
                MIN_FRAME_RATE * 1000,
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    AwaitingWelcome,
    Up,
}

pub struct Link {
    state: State,
    inbound: frame::Reader,
    outbound: Vec<u8>,
    events: VecDeque<Event>,
    heartbeat_ms: u64,
    last_received: u64,
    last_sent: u64,
    max_frame: usize,
    /// Pings received in the current heartbeat window, to refuse a flood.
    pings: u32,
    ping_window_start: u64,
    /// When the first byte of the frame now buffered (incomplete) arrived.
    frame_started: Option<u64>,
    /// A `declare` whose declaration is the next frame: its revision and `confirm_secs`.
    declaring: Option<(u64, Option<u64>)>,
}

/// More pings than this within one heartbeat is a peer trying to make the host queue pongs.
const MAX_PINGS_PER_HEARTBEAT: u32 = 64;
/// A started frame must finish within three heartbeats plus its length at this many bytes per
/// millisecond (64 KB/s): a byte-a-second trickle cannot hold the buffer.
const MIN_FRAME_RATE: u64 = 64;

impl Link {
    /// A new link that has just connected at `now`; the hello is queued.
    pub fn new(now: u64, hello: Message, heartbeat_ms: u64, max_frame: usize) -> Link {
        let mut link = Link {
            state: State::AwaitingWelcome,
            inbound: frame::Reader::default(),
            outbound: Vec::new(),
            events: VecDeque::new(),
            heartbeat_ms: heartbeat_ms.max(1),
            last_received: now,
            last_sent: now,
            max_frame,
            pings: 0,
            ping_window_start: now,
            frame_started: None,
            declaring: None,
        };
        link.send(now, &hello);
        link
    }

    fn send(&mut self, now: u64, message: &Message) {
        // Serialising our own message types cannot fail; an empty body would be a bug, not input.
        let body = serde_json::to_vec(message).unwrap_or_default();
        frame::encode(&body, &mut self.outbound);
        self.last_sent = now;
    }

    /// Queues a report; sent once the link is up (the outbox keeps it until acknowledged).
    pub fn send_report(&mut self, now: u64, report: &Report) {
        self.send(now, &Message::Report(report.clone()));
    }

    /// Says why the host closes, as its last frame.
    pub fn send_error(&mut self, now: u64, message: &str) {
        self.send(
            now,
            &Message::Error {
                message: message.to_string(),
            },
        );
    }

    /// Bytes waiting to be written.
    pub fn pending_output(&self) -> &[u8] {
        &self.outbound
    }

    /// `n` bytes of `pending_output` were written.
    pub fn consume_output(&mut self, n: usize) {
        self.outbound.drain(..n.min(self.outbound.len()));
    }

    /// Bytes read from the control plane.
    pub fn handle_input(&mut self, now: u64, bytes: &[u8]) -> Result<(), LinkError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.last_received = now;
        let mut rest = bytes;
        let mut completed = false;
        let result = loop {
            if rest.is_empty() {
                break Ok(());
            }
            let body = match self.inbound.read(rest, self.max_frame) {
                Ok((used, body)) => {
                    rest = &rest[used..];
                    body
                }
                Err(e) => break Err(LinkError::Frame(e)),
            };
            let Some(body) = body else { continue };
            completed = true;
            // The frame after a `declare` is its declaration: the frame's buffer becomes its text.
            if let Some((revision, confirm_secs)) = self.declaring.take() {
                self.queue_declaration(revision, body, confirm_secs);
                continue;
            }
            let message = messages::decode(&body).map_err(LinkError::Protocol);
            if let Err(e) = message.and_then(|m| self.handle_message(now, m)) {
                break Err(e);
            }
        };
        if self.inbound.is_empty() {
            self.frame_started = None;
        } else if completed || self.frame_started.is_none() {
            self.frame_started = Some(now);
        }
        result
    }

    fn handle_message(&mut self, now: u64, message: Message) -> Result<(), LinkError> {
        match (self.state, message) {
            (_, Message::Error { message }) => Err(LinkError::Refused(message)),
            (_, Message::Ping {}) => {
                if now.saturating_sub(self.ping_window_start) >= self.heartbeat_ms {
                    self.ping_window_start = now;
                    self.pings = 0;
                }
                self.pings += 1;
                if self.pings > MAX_PINGS_PER_HEARTBEAT {
                    return Err(LinkError::Protocol(format!(
                        "a flood of pings (more than {MAX_PINGS_PER_HEARTBEAT} within a heartbeat)"
                    )));
                }
                self.send(now, &Message::Pong { reconnect: None });
                Ok(())
            }
            (_, Message::Pong { reconnect }) => {
                self.events.extend(reconnect.map(Event::Policy));
                Ok(())
            }
            (State::AwaitingWelcome, Message::Welcome { reconnect }) => {
                self.state = State::Up;
                self.events.push_back(Event::Welcome);
                self.events.extend(reconnect.map(Event::Policy));
                Ok(())
            }
            (
                State::Up,
                Message::Declare {
                    revision,
                    confirm_secs,
                },
            ) => {
                self.declaring = Some((revision, confirm_secs));
                Ok(())
            }
            (State::Up, Message::Ack { id }) => {
                self.events.push_back(Event::Ack { id });
                Ok(())
            }
            (state, other) => Err(LinkError::Protocol(format!(
                "unexpected {} message while {}",
                kind(&other),
                if state == State::Up {
                    "up"
                } else {
                    "waiting for welcome"
                }
            ))),
        }
    }

    /// Declarations that arrive while a run holds the loop collapse to the newest: only one is
    /// held however many come, and older ones would only be replaced.
    fn queue_declaration(&mut self, revision: u64, text: Vec<u8>, confirm_secs: Option<u64>) {
        let newest_queued = self.events.iter().find_map(|e| match e {
            Event::Declare { revision, .. } => Some(*revision),
            _ => None,
        });
        match newest_queued {
            Some(queued) if queued > revision => {
                log::info!("declare revision {revision} dropped: {queued} is queued");
            }
            _ => {
                if let Some(queued) = newest_queued {
                    log::info!("declare revision {queued} superseded by {revision}");
                }
                self.events.retain(|e| !matches!(e, Event::Declare { .. }));
                self.events.push_back(Event::Declare {
                    revision,
                    text,
                    confirm_secs,
                });
            }
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the frame now arriving must be complete.
    fn frame_deadline(&self) -> Option<u64> {
        let started = self.frame_started?;
        let length = self.inbound.announced().unwrap_or(0);
        Some(started + 3 * self.heartbeat_ms + length / MIN_FRAME_RATE)
    }

    /// Sends a ping after a heartbeat of silence from us; declares the link dead after three
    /// heartbeats without a byte from the control plane, or when a frame is not finished in time.
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), LinkError> {
        let silent = now.saturating_sub(self.last_received);
        if silent >= 3 * self.heartbeat_ms {
            return Err(LinkError::Dead { silent_ms: silent });
        }
        if let (Some(deadline), Some(started)) = (self.frame_deadline(), self.frame_started) {
            if now >= deadline {
                return Err(LinkError::Stalled {
                    length: self.inbound.announced(),
                    waited_ms: now - started,
                });
            }
        }
        if now.saturating_sub(self.last_sent) >= self.heartbeat_ms {
            self.send(now, &Message::Ping {});
        }
        Ok(())
    }

    /// When `handle_timeout` next has something to do.
    pub fn poll_timeout(&self) -> u64 {
        let heartbeat =
            (self.last_sent + self.heartbeat_ms).min(self.last_received + 3 * self.heartbeat_ms);
        heartbeat.min(self.frame_deadline().unwrap_or(u64::MAX))
    }
}

fn kind(message: &Message) -> &'static str {
    match message {
        Message::Hello { .. } => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Declare { .. } => "declare",
        Message::Report(_) => "report",
        Message::Ack { .. } => "ack",
        Message::Ping {} => "ping",
        Message::Pong { .. } => "pong",
        Message::Error { .. } => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEARTBEAT: u64 = 30_000;

    fn hello() -> Message {
        Message::Hello {
            protocol: messages::PROTOCOL,
            node: "n1".into(),
            secret: "s".into(),
            version: "0.1.0".into(),
            revision: Some(3),
            digest: None,
            facts: None,
            reverted: None,
        }
    }

    /// The control plane's side, as far as tests need it: frames in, messages out.
    struct Peer {
        inbound: frame::Reader,
    }

    impl Peer {
        fn new() -> Peer {
            Peer {
                inbound: frame::Reader::default(),
            }
        }
        fn frame(message: &Message) -> Vec<u8> {
            let mut out = Vec::new();
            frame::encode(&serde_json::to_vec(message).unwrap(), &mut out);
            out
        }
        /// A `declare` of `text`: its head, then the text as a frame of its own.
        fn declare(revision: u64, text: &str) -> Vec<u8> {
            let mut out = Peer::frame(&Message::Declare {
                revision,
                confirm_secs: None,
            });
            frame::encode(text.as_bytes(), &mut out);
            out
        }
        /// Takes everything the link has to send and decodes it.
        fn receive(&mut self, link: &mut Link) -> Vec<Message> {
            let mut bytes = link.pending_output();
            let mut out = Vec::new();
            while !bytes.is_empty() {
                let (used, body) = self.inbound.read(bytes, 1 << 20).unwrap();
                out.extend(body.map(|b| serde_json::from_slice(&b).unwrap()));
                bytes = &bytes[used..];
            }
            let n = link.pending_output().len();
            link.consume_output(n);
            out
        }
    }

    fn up_link() -> (Link, Peer) {
        let mut link = Link::new(0, hello(), HEARTBEAT, 1 << 20);
        let mut peer = Peer::new();
        assert_eq!(peer.receive(&mut link), vec![hello()]);
        link.handle_input(10, &Peer::frame(&Message::Welcome { reconnect: None }))
            .unwrap();
        assert_eq!(link.poll_event(), Some(Event::Welcome));
        (link, peer)
    }

    #[test]
    fn the_reconnect_policy_comes_with_the_welcome_and_pongs_and_old_peers_send_none() {
        let policy = ReconnectPolicy {
            base_ms: 20_000,
            cap_ms: 300_000,
        };
        let mut link = Link::new(0, hello(), HEARTBEAT, 1 << 20);
        let welcome = br#"{"type": "welcome", "reconnect": {"base_ms": 20000, "cap_ms": 300000}}"#;
        let mut bytes = Vec::new();
        frame::encode(welcome, &mut bytes);
        link.handle_input(10, &bytes).unwrap();
        assert_eq!(link.poll_event(), Some(Event::Welcome));
        assert_eq!(link.poll_event(), Some(Event::Policy(policy)));
        let newer = ReconnectPolicy {
            base_ms: 30_000,
            ..policy
        };
        let pong = Message::Pong {
            reconnect: Some(newer),
        };
        link.handle_input(20, &Peer::frame(&pong)).unwrap();
        assert_eq!(link.poll_event(), Some(Event::Policy(newer)));
        // A control plane that sends none (an older one) changes nothing.
        let mut bytes = Vec::new();
        frame::encode(br#"{"type": "pong"}"#, &mut bytes);
        link.handle_input(30, &bytes).unwrap();
        assert_eq!(link.poll_event(), None);
    }

    #[test]
    fn hello_welcome_declare_ack() {
        let (mut link, mut peer) = up_link();
        let declare = Peer::declare(4, "{\"schema\": 1}");
        // Byte by byte: incomplete frames are a normal outcome.
        for (i, b) in declare.iter().enumerate() {
            link.handle_input(20 + i as u64, &[*b]).unwrap();
        }
        assert_eq!(
            link.poll_event(),
            Some(Event::Declare {
                revision: 4,
                text: "{\"schema\": 1}".into(),
                confirm_secs: None,
            })
        );
        let report = Report {
            id: 1,
            revision: Some(4),
            digest: None,
            trigger: crate::model::run::Triggers::one(crate::model::run::Trigger::Declaration),
            outcome: crate::model::run::ReportOutcome::Converged,
            started: 1,
            ended: 2,
            changes: vec![],
            failures: vec![],
            deferred: vec![],
            drift: vec![],
            message: String::new(),
            failing: Vec::new(),
            facts: None,
            pacnew: Vec::new(),
            needs: None,
            reverted: None,
        };
        link.send_report(100, &report);
        assert_eq!(peer.receive(&mut link), vec![Message::Report(report)]);
        link.handle_input(200, &Peer::frame(&Message::Ack { id: 1 }))
            .unwrap();
        assert_eq!(link.poll_event(), Some(Event::Ack { id: 1 }));
    }

    #[test]
    fn pings_when_idle_and_dies_after_three_silent_heartbeats() {
        let (mut link, mut peer) = up_link();
        assert_eq!(link.poll_timeout(), HEARTBEAT);
        link.handle_timeout(HEARTBEAT).unwrap();
        assert_eq!(peer.receive(&mut link), vec![Message::Ping {}]);
        link.handle_input(HEARTBEAT + 5, &Peer::frame(&Message::Ping {}))
            .unwrap();
        assert_eq!(
            peer.receive(&mut link),
            vec![Message::Pong { reconnect: None }],
            "a ping is answered"
        );
        let silent_until = HEARTBEAT + 5 + 3 * HEARTBEAT;
        assert!(link.poll_timeout() <= silent_until);
        link.handle_timeout(silent_until - 1).unwrap();
        assert_eq!(
            link.handle_timeout(silent_until),
            Err(LinkError::Dead {
                silent_ms: 3 * HEARTBEAT
            })
        );
    }

    #[test]
    fn hostile_input_drops_the_link() {
        let (mut link, _) = up_link();
        assert!(matches!(
            link.handle_input(1, b"\x00\x00\x00\x03abc"),
            Err(LinkError::Protocol(_))
        ));
        let (mut link, _) = up_link();
        assert!(matches!(
            link.handle_input(1, &[0xff, 0xff, 0xff, 0xff]),
            Err(LinkError::Frame(_))
        ));
        let mut fresh = Link::new(0, hello(), HEARTBEAT, 1 << 20);
        let early = Peer::declare(1, "");
        assert!(
            matches!(fresh.handle_input(1, &early), Err(LinkError::Protocol(e)) if e.contains("waiting for welcome"))
        );
        let (mut link, _) = up_link();
        let refused = Peer::frame(&Message::Error {
            message: "bad secret".into(),
        });
        assert_eq!(
            link.handle_input(1, &refused),
            Err(LinkError::Refused("bad secret".into()))
        );
    }

    #[test]
    fn a_ping_flood_drops_the_link() {
        let (mut link, _) = up_link();
        let ping = Peer::frame(&Message::Ping {});
        for i in 0..MAX_PINGS_PER_HEARTBEAT {
            link.handle_input(100 + i as u64, &ping).unwrap();
        }
        assert!(
            matches!(link.handle_input(200, &ping), Err(LinkError::Protocol(e)) if e.contains("flood"))
        );
        // The same number spread over heartbeats is fine.
        let (mut link, _) = up_link();
        for i in 0..3 * MAX_PINGS_PER_HEARTBEAT as u64 {
            link.handle_input(i * HEARTBEAT / 60, &ping).unwrap();
        }
    }

    #[test]
    fn a_trickled_frame_must_finish_within_its_deadline() {
        let (mut link, mut peer) = up_link();
        // The declaration's frame (its head came whole).
        let mut declare = Vec::new();
        frame::encode("x".repeat(200).as_bytes(), &mut declare);
        let head = Peer::frame(&Message::Declare {
            revision: 4,
            confirm_secs: None,
        });
        link.handle_input(1_000, &head).unwrap();
        // One byte a second, answered pings keeping the link alive: the frame's deadline is three
        // heartbeats and its length at 64 KB/s (a few ms here) after its first byte.
        let length = declare.len() as u64 - 4;
        let deadline = 1_000 + 3 * HEARTBEAT + length / MIN_FRAME_RATE;
        let mut now = 1_000;
        let mut sent = 0;
        let err = loop {
            link.handle_input(now, &declare[sent..sent + 1]).unwrap();
            sent += 1;
            assert!(link.poll_timeout() <= deadline);
            now = (now + 1_000).min(deadline);
            if let Err(e) = link.handle_timeout(now) {
                break e;
            }
            peer.receive(&mut link);
        };
        assert_eq!(now, deadline);
        assert_eq!(
            err,
            LinkError::Stalled {
                length: Some(length),
                waited_ms: deadline - 1_000
            }
        );
        assert!(
            err.to_string().contains("still incomplete after 90 s"),
            "{err}"
        );
        // A frame that completes in time clears the deadline; the next one gets its own.
        let (mut link, _) = up_link();
        link.handle_input(100, &[&head[..], &declare[..10]].concat())
            .unwrap();
        link.handle_input(100 + 3 * HEARTBEAT - 1, &declare[10..])
            .unwrap();
        assert!(link.poll_event().is_some());
        link.handle_input(100 + 3 * HEARTBEAT, &declare[..10])
            .unwrap();
        link.handle_timeout(100 + 4 * HEARTBEAT).unwrap();
    }

    #[test]
    fn queued_declarations_collapse_to_the_newest() {
        let (mut link, _) = up_link();
        let declare = |revision: u64| Peer::declare(revision, &format!("r{revision}"));
        let mut bytes = declare(4);
        bytes.extend(Peer::frame(&Message::Ack { id: 1 }));
        bytes.extend(declare(6));
        bytes.extend(declare(5));
        link.handle_input(20, &bytes).unwrap();
        link.handle_input(30, &declare(7)).unwrap();
        assert_eq!(link.poll_event(), Some(Event::Ack { id: 1 }));
        assert_eq!(
            link.poll_event(),
            Some(Event::Declare {
                revision: 7,
                text: "r7".into(),
                confirm_secs: None,
            })
        );
        assert_eq!(link.poll_event(), None);
    }

    #[test]
    fn a_half_frame_then_silence_is_dead_after_three_heartbeats() {
        let (mut link, _) = up_link();
        link.handle_input(100, &[0, 0, 0, 50, b'{']).unwrap();
        assert!(link.poll_event().is_none());
        assert!(matches!(
            link.handle_timeout(100 + 3 * HEARTBEAT),
            Err(LinkError::Dead { .. })
        ));
    }
}
