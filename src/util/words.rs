//! How durations and moments read for people: in `status`, `check`, `owned`, a run's notes and
//! the failure history's log lines.

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

/// `3 h 10 min`, `5 min`, `40 s`, `2 days 3 h`: how long something has lasted, for people.
pub fn duration_words(seconds: u64) -> String {
    let (days, hours, minutes) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60);
    match seconds {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{minutes} min"),
        s if s < 86_400 => format!("{hours} h {minutes} min"),
        _ => format!("{days} day{} {hours} h", if days == 1 { "" } else { "s" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_words(40), "40 s");
        assert_eq!(duration_words(11_400), "3 h 10 min");
        assert_eq!(duration_words(86_400 + 3 * 3600), "1 day 3 h");
    }
}
