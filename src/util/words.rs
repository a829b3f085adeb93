//! How durations and moments read for people: in `status`, `check`, `owned`, a run's notes and
//! the failure history's log lines. Moments are dates in UTC, never raw Unix seconds.

/// `expires 2026-12-06 20:15:29 UTC (in 3 h)` or `expired 2026-12-06 ... (2 h ago)`.
pub fn expiry(expires: u64, now: u64) -> String {
    if expires > now {
        format!("expires {} (in {})", utc(expires), age(expires - now))
    } else {
        format!("expired {} ({} ago)", utc(expires), age(now - expires))
    }
}

/// Unix seconds as a date and time people read, in UTC (`2026-12-06 20:15:29 UTC`): the
/// proleptic Gregorian calendar's civil date of the day count (Howard Hinnant's
/// `civil_from_days`), without a time zone database.
pub fn utc(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
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

    #[test]
    fn moments_read_as_dates_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_588_129), "2026-12-06 20:15:29 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
        assert_eq!(expiry(100, 40), "expires 1970-01-01 00:01:40 UTC (in 60 s)");
    }
}
