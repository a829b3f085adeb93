//! When to reconcile, as pure bookkeeping over times the event loop passes in (milliseconds on a
//! monotonic clock). Triggers that come due while a reconcile runs collapse into one pending run.

use crate::model::run::{Trigger, Triggers};

pub struct Schedule {
    interval_ms: u64,
    next_timer: u64,
    pending: Triggers,
}

impl Schedule {
    /// The start run is pending at once; the drift timer starts counting after it.
    pub fn new(now: u64, interval_ms: u64, random: f64) -> Schedule {
        let mut schedule = Schedule {
            interval_ms,
            next_timer: 0,
            pending: Triggers::one(Trigger::Start),
        };
        schedule.rearm(now, random);
        schedule
    }

    pub fn add(&mut self, trigger: Trigger) {
        self.pending.insert(trigger);
    }

    /// The triggers of the run due at `now`, if one is; taking them clears them.
    pub fn take_due(&mut self, now: u64) -> Option<Triggers> {
        if now >= self.next_timer {
            self.pending.insert(Trigger::Timer);
        }
        if self.pending.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.pending))
    }

    /// After a run ends at `now`: the next drift run comes one interval later, randomised within
    /// ±10% (`random` in [0, 1)) so a fleet does not reconcile in step.
    pub fn rearm(&mut self, now: u64, random: f64) {
        let factor = 0.9 + 0.2 * random.clamp(0.0, 1.0);
        self.next_timer = now + (self.interval_ms as f64 * factor) as u64;
    }

    /// Whether a run waits to be taken (the timer's aside).
    pub fn pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn next_timer(&self) -> u64 {
        self.next_timer
    }

    /// When the loop must wake for this schedule: now if a run is pending, else the timer.
    pub fn deadline(&self, now: u64) -> u64 {
        if self.pending.is_empty() {
            self.next_timer
        } else {
            now
        }
    }

    pub fn set_interval(&mut self, interval_ms: u64) {
        self.interval_ms = interval_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_then_timer_with_jitter() {
        let mut s = Schedule::new(0, 600_000, 0.5);
        assert_eq!(s.take_due(0), Some(Triggers::one(Trigger::Start)));
        assert_eq!(s.take_due(1), None);
        s.rearm(1000, 0.0);
        assert_eq!(s.next_timer(), 1000 + 540_000);
        s.rearm(1000, 0.999_999);
        assert!(s.next_timer() <= 1000 + 660_000 && s.next_timer() > 1000 + 659_000);
        assert_eq!(s.take_due(1000 + 659_000), None);
        assert_eq!(
            s.take_due(1000 + 660_000),
            Some(Triggers::one(Trigger::Timer))
        );
    }

    #[test]
    fn triggers_collapse_into_one_run() {
        let mut s = Schedule::new(0, 600_000, 0.5);
        s.take_due(0);
        assert!(!s.pending());
        s.add(Trigger::Declaration);
        s.add(Trigger::Signal);
        s.add(Trigger::Declaration);
        assert!(s.pending());
        assert_eq!(s.deadline(5), 5);
        assert_eq!(
            s.take_due(5),
            Some(Triggers::from_iter([Trigger::Declaration, Trigger::Signal]))
        );
        assert_eq!(s.take_due(6), None);
        assert!(!s.pending());
    }
}
