//! How durations and moments read for people, in `status`, `check` and a run's notes.

/// `expires at unix time T (in 3 h)` or `expired at unix time T (2 h ago)`.
pub fn expiry(expires: u64, now: u64) -> String {
    if expires > now {
        format!("expires at unix time {expires} (in {})", age(expires - now))
    } else {
        format!(
            "expired at unix time {expires} ({} ago)",
            age(now - expires)
        )
    }
}

/// `40 s`, `12 min`, `5 h`, `3 days`: the coarse age `status` lists runs and links by.
pub fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}
