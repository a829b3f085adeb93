//! The one clock. Everything above `os/` takes time from a `Clock` it is given, never from
//! `SystemTime::now` or `Instant::now`, so the service's state machine and the engine's
//! deadlines can be driven in virtual time by tests (quinn-proto's test pair is the model).
//!
//! Two readings: wall time (Unix seconds and milliseconds: what the store keeps and people
//! read; deadlines a person sets) and monotonic milliseconds (timeouts, the link, the
//! service's timers: never jumps when the wall clock is set).

#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(test)]
use std::sync::Arc;

/// A source of time: the system's, or (in unit tests) a manual one the test moves. The
/// service's core takes its time as arguments and is driven by made-up times in its own tests.
#[derive(Clone, Debug, Default)]
pub struct Clock(Source);

#[derive(Clone, Debug, Default)]
enum Source {
    #[default]
    System,
    #[cfg(test)]
    Manual(Arc<Manual>),
}

/// A manual clock's two readings, moved together by `advance`.
#[cfg(test)]
#[derive(Debug)]
struct Manual {
    unix_ms: AtomicU64,
    mono_ms: AtomicU64,
}

impl Clock {
    /// The machine's clocks.
    pub fn system() -> Clock {
        Clock(Source::System)
    }

    #[cfg(test)]
    /// A clock that stands still until `advance` moves it: wall time starts at `unix_secs`, the
    /// monotonic reading at one hour (not 0, so "never" and "at the start" stay apart).
    pub fn manual(unix_secs: u64) -> Clock {
        Clock(Source::Manual(Arc::new(Manual {
            unix_ms: AtomicU64::new(unix_secs * 1000),
            mono_ms: AtomicU64::new(3_600_000),
        })))
    }

    #[cfg(test)]
    /// Moves a manual clock (both readings) forward; the system clock is not moved.
    pub fn advance(&self, ms: u64) {
        if let Source::Manual(m) = &self.0 {
            m.unix_ms.fetch_add(ms, Ordering::SeqCst);
            m.mono_ms.fetch_add(ms, Ordering::SeqCst);
        }
    }

    #[cfg(test)]
    /// Sets a manual clock's wall time alone (a person setting the clock); monotonic time goes on.
    pub fn set_unix(&self, unix_secs: u64) {
        if let Source::Manual(m) = &self.0 {
            m.unix_ms.store(unix_secs * 1000, Ordering::SeqCst);
        }
    }

    /// Wall time, Unix seconds.
    pub fn unix(&self) -> u64 {
        self.unix_ms() / 1000
    }

    /// Wall time, Unix milliseconds.
    pub fn unix_ms(&self) -> u64 {
        match &self.0 {
            Source::System => system_unix_ms(),
            #[cfg(test)]
            Source::Manual(m) => m.unix_ms.load(Ordering::SeqCst),
        }
    }

    /// Monotonic milliseconds: only differences mean anything.
    pub fn mono_ms(&self) -> u64 {
        match &self.0 {
            Source::System => super::sys::now_ms(),
            #[cfg(test)]
            Source::Manual(m) => m.mono_ms.load(Ordering::SeqCst),
        }
    }
}

fn system_unix_ms() -> u64 {
    // Before 1970 only on a broken clock: read as 0, which every deadline treats as long past.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_both_readings_together() {
        let clock = Clock::manual(1_700_000_000);
        let copy = clock.clone();
        let mono = clock.mono_ms();
        assert_eq!(clock.unix(), 1_700_000_000);
        copy.advance(1_500);
        assert_eq!(
            (clock.unix_ms(), clock.mono_ms()),
            (1_700_000_001_500, mono + 1_500)
        );
        clock.set_unix(10);
        assert_eq!((clock.unix(), clock.mono_ms()), (10, mono + 1_500));
    }

    #[test]
    fn the_system_clock_is_after_2020_and_monotonic() {
        let clock = Clock::system();
        assert!(clock.unix() > 1_577_836_800);
        let a = clock.mono_ms();
        assert!(clock.mono_ms() >= a);
    }
}
