//! Reconnect backoff: exponential with full jitter (a random wait between 0 and a ceiling that
//! starts at the base, 1 s by default, and doubles up to a 5-minute cap), reset once a link has
//! stayed up a minute, so a fleet that lost its control plane does not come back as a stampede.
//! The ceiling doubles once the host has waited through it, not per failed attempt: an attempt
//! that full jitter made early (the control plane still down) must not push the host past the
//! base the control plane sized for its fleet, or a fleet returns with a tail of twice the base.
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
    /// How many times the ceiling has doubled since the last stable link.
    doublings: u32,
    /// What the host has waited under the ceiling in force (ms).
    waited_ms: u64,
}

impl Backoff {
    pub fn new(base_ms: u64) -> Backoff {
        Backoff {
            base_ms: base_ms.clamp(1, CAP_MS),
            cap_ms: CAP_MS,
            doublings: 0,
            waited_ms: 0,
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
            .saturating_mul(1u64 << self.doublings.min(20))
            .min(self.cap_ms);
        let delay = (ceiling as f64 * random.clamp(0.0, 1.0)) as u64;
        self.waited_ms = self.waited_ms.saturating_add(delay);
        if self.waited_ms >= ceiling {
            self.doublings = self.doublings.saturating_add(1);
            self.waited_ms = 0;
        }
        delay
    }

    /// A link that was up for `up_ms` has ended.
    pub fn link_ended(&mut self, up_ms: u64) {
        if up_ms >= STABLE_MS {
            self.doublings = 0;
            self.waited_ms = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ceilings a host waits under, each wait `random` of its ceiling.
    fn ceilings(b: &mut Backoff, random: f64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let (base, cap) = b.policy();
                let ceiling = base.saturating_mul(1 << b.doublings.min(20)).min(cap);
                assert_eq!(b.next_delay(random), (ceiling as f64 * random) as u64);
                ceiling
            })
            .collect()
    }

    #[test]
    fn doubles_to_the_cap_with_full_jitter() {
        let mut b = Backoff::new(1_000);
        let waits: Vec<u64> = (0..12).map(|_| b.next_delay(1.0)).collect();
        assert_eq!(&waits[..4], &[1_000, 2_000, 4_000, 8_000]);
        assert_eq!(waits[11], 300_000);
        assert_eq!(b.next_delay(0.0), 0, "full jitter reaches zero");
    }

    #[test]
    fn the_ceiling_doubles_once_waited_through_not_per_attempt() {
        // Quick attempts (a tenth of the ceiling each) stay under the base for ten of them.
        let mut b = Backoff::new(60_000);
        let seen = ceilings(&mut b, 0.1, 21);
        assert_eq!(&seen[..10], &[60_000; 10]);
        assert_eq!(&seen[10..20], &[120_000; 10]);
        assert_eq!(seen[20], 240_000);
        // So a host that tried (and failed) early while its control plane was down is still
        // under the base when it comes back: its next attempt is within the base of that.
        let mut b = Backoff::new(60_000);
        b.next_delay(0.05);
        b.next_delay(0.1);
        assert_eq!(ceilings(&mut b, 0.5, 1), [60_000]);
    }

    #[test]
    fn a_larger_base_spreads_the_first_attempts_further() {
        let mut b = Backoff::new(20_000);
        assert_eq!(b.next_delay(0.999_999), 19_999);
        assert_eq!(b.next_delay(0.999_999), 19_999);
        assert_eq!(b.next_delay(0.999_999), 39_999);
    }

    #[test]
    fn the_control_planes_policy_is_taken_within_bounds() {
        let mut b = Backoff::new(1_000);
        b.set_policy(20_000, 120_000);
        let waits: Vec<u64> = (0..4).map(|_| b.next_delay(1.0)).collect();
        assert_eq!(waits, [20_000, 40_000, 80_000, 120_000]);
        // Nothing below 100 ms, no cap beyond an hour, the base never above the cap.
        b.set_policy(0, u64::MAX);
        assert_eq!((b.base_ms, b.cap_ms), (MIN_BASE_MS, MAX_CAP_MS));
        b.set_policy(50_000, 10_000);
        assert_eq!((b.base_ms, b.cap_ms), (10_000, 10_000));
        // The host's own config (a reload) brings back its base and the default cap.
        b.set_base(1_000);
        assert_eq!((b.base_ms, b.cap_ms), (1_000, CAP_MS));
    }

    /// A fleet of 1,000 whose control plane is gone 10 s, under the 50 s base the reference
    /// control plane sends it: no second takes back more than 5 % of it, and every host is back
    /// within the base of the return, whatever the seed (docs/performance.md, figure 6).
    #[test]
    fn a_fleet_comes_back_spread_and_within_the_base() {
        let (hosts, down_ms, base_ms) = (1_000, 10_000, 50_000);
        for seed in 0..20u64 {
            let mut state = seed;
            let mut random = move || {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
            };
            let mut per_second = [0u32; 300];
            let mut last_back = 0;
            for _ in 0..hosts {
                let mut b = Backoff::new(1_000);
                b.set_policy(base_ms, CAP_MS);
                b.link_ended(STABLE_MS);
                let mut at = 0;
                while at < down_ms {
                    at += b.next_delay(random());
                }
                let back = at - down_ms;
                per_second[(back / 1_000) as usize] += 1;
                last_back = last_back.max(back);
            }
            let busiest = per_second.iter().max().copied().unwrap_or(0);
            assert!(busiest <= hosts / 20, "seed {seed}: {busiest} in a second");
            assert!(
                last_back < base_ms,
                "seed {seed}: the last back after {last_back} ms"
            );
        }
    }

    #[test]
    fn resets_only_after_a_stable_link() {
        let mut b = Backoff::new(1_000);
        for _ in 0..5 {
            b.next_delay(1.0);
        }
        b.link_ended(STABLE_MS - 1);
        assert_eq!(b.next_delay(1.0), 32_000);
        b.link_ended(STABLE_MS);
        assert_eq!(b.next_delay(1.0), 1_000);
    }
}
