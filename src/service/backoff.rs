//! Reconnect backoff: exponential with full jitter (a random wait between 0 and a ceiling that
//! starts at the base, 1 s by default, and doubles up to a 5-minute cap), reset once a link has
//! stayed up a minute, so a fleet that lost its control plane does not come back as a stampede.
//! A large fleet may raise the base (`reconnect_base_secs`) to spread its return further; the
//! control plane, which knows how many hosts it has, sends its own base and cap (welcome, pong),
//! which the host takes over its config.

const CAP_MS: u64 = 300_000;
/// Bounds on what a control plane may ask for: never a busy loop, never gone for hours.
const MIN_BASE_MS: u64 = 100;
const MAX_CAP_MS: u64 = 3_600_000;
/// A link that stayed up this long resets the backoff.
pub const STABLE_MS: u64 = 60_000;

#[derive(Debug)]
pub struct Backoff {
    base_ms: u64,
    cap_ms: u64,
    attempts: u32,
}

impl Backoff {
    pub fn new(base_ms: u64) -> Backoff {
        Backoff {
            base_ms: base_ms.clamp(1, CAP_MS),
            cap_ms: CAP_MS,
            attempts: 0,
        }
    }

    /// The host's own base (its config), with the default cap.
    pub fn set_base(&mut self, base_ms: u64) {
        self.base_ms = base_ms.clamp(1, CAP_MS);
        self.cap_ms = CAP_MS;
    }

    /// The control plane's policy, within bounds. Whether it changed anything.
    pub fn set_policy(&mut self, base_ms: u64, cap_ms: u64) -> bool {
        let before = (self.base_ms, self.cap_ms);
        self.cap_ms = cap_ms.clamp(MIN_BASE_MS, MAX_CAP_MS);
        self.base_ms = base_ms.clamp(MIN_BASE_MS, self.cap_ms);
        (self.base_ms, self.cap_ms) != before
    }

    /// The first ceiling and the cap in force (ms).
    pub fn policy(&self) -> (u64, u64) {
        (self.base_ms, self.cap_ms)
    }

    /// The wait before the next attempt, for `random` in [0, 1).
    pub fn next_delay(&mut self, random: f64) -> u64 {
        let ceiling = self
            .base_ms
            .saturating_mul(1u64 << self.attempts.min(20))
            .min(self.cap_ms);
        self.attempts = self.attempts.saturating_add(1);
        (ceiling as f64 * random.clamp(0.0, 1.0)) as u64
    }

    /// A link that was up for `up_ms` has ended.
    pub fn link_ended(&mut self, up_ms: u64) {
        if up_ms >= STABLE_MS {
            self.attempts = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_with_full_jitter() {
        let mut b = Backoff::new(1_000);
        let ceilings: Vec<u64> = (0..12).map(|_| b.next_delay(0.999_999)).collect();
        assert_eq!(&ceilings[..4], &[999, 1999, 3999, 7999]);
        assert_eq!(ceilings[11], 299_999);
        assert_eq!(b.next_delay(0.0), 0, "full jitter reaches zero");
    }

    #[test]
    fn a_larger_base_spreads_the_first_attempts_further() {
        let mut b = Backoff::new(20_000);
        assert_eq!(b.next_delay(0.999_999), 19_999);
        assert_eq!(b.next_delay(0.999_999), 39_999);
    }

    #[test]
    fn the_control_planes_policy_is_taken_within_bounds() {
        let mut b = Backoff::new(1_000);
        b.set_policy(20_000, 120_000);
        let ceilings: Vec<u64> = (0..4).map(|_| b.next_delay(0.999_999)).collect();
        assert_eq!(ceilings, [19_999, 39_999, 79_999, 119_999]);
        // Nothing below 100 ms, no cap beyond an hour, the base never above the cap.
        b.set_policy(0, u64::MAX);
        assert_eq!((b.base_ms, b.cap_ms), (MIN_BASE_MS, MAX_CAP_MS));
        b.set_policy(50_000, 10_000);
        assert_eq!((b.base_ms, b.cap_ms), (10_000, 10_000));
        // The host's own config (a reload) brings back its base and the default cap.
        b.set_base(1_000);
        assert_eq!((b.base_ms, b.cap_ms), (1_000, CAP_MS));
    }

    #[test]
    fn resets_only_after_a_stable_link() {
        let mut b = Backoff::new(1_000);
        for _ in 0..5 {
            b.next_delay(0.5);
        }
        b.link_ended(STABLE_MS - 1);
        assert_eq!(b.next_delay(0.999_999), 31_999);
        b.link_ended(STABLE_MS);
        assert_eq!(b.next_delay(0.999_999), 999);
    }
}
