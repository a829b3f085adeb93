//! Reconnect backoff: exponential with full jitter (a random wait between 0 and 1 s doubling up to
//! a 5-minute cap), reset once a link has stayed up a minute, so a fleet that lost its control
//! plane does not come back as a stampede.

const BASE_MS: u64 = 1_000;
const CAP_MS: u64 = 300_000;
/// A link that stayed up this long resets the backoff.
pub const STABLE_MS: u64 = 60_000;

#[derive(Debug, Default)]
pub struct Backoff {
    attempts: u32,
}

impl Backoff {
    /// The wait before the next attempt, for `random` in [0, 1).
    pub fn next_delay(&mut self, random: f64) -> u64 {
        let ceiling = BASE_MS
            .saturating_mul(1u64 << self.attempts.min(20))
            .min(CAP_MS);
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
        let mut b = Backoff::default();
        let ceilings: Vec<u64> = (0..12).map(|_| b.next_delay(0.999_999)).collect();
        assert_eq!(&ceilings[..4], &[999, 1999, 3999, 7999]);
        assert_eq!(ceilings[11], 299_999);
        assert_eq!(b.next_delay(0.0), 0, "full jitter reaches zero");
    }

    #[test]
    fn resets_only_after_a_stable_link() {
        let mut b = Backoff::default();
        for _ in 0..5 {
            b.next_delay(0.5);
        }
        b.link_ended(STABLE_MS - 1);
        assert_eq!(b.next_delay(0.999_999), 31_999);
        b.link_ended(STABLE_MS);
        assert_eq!(b.next_delay(0.999_999), 999);
    }
}
