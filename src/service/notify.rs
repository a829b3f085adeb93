//! The `STATUS=` line `systemctl status mesh-host` shows, in the style of zincati: what the host
//! is doing now, how the last run ended and when, and when the next timer run is. Pure; the loop
//! sends it with `sd_notify` when it changes.

use crate::model::run::RunOutcome;
use crate::store::LinkStatus;

/// How the service's last run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct LastRun {
    pub outcome: RunOutcome,
    pub ended: u64,
    pub changed: usize,
    pub failed: usize,
}

/// The status line. `doing` is what the host is doing now (`idle`, `reconciling (timer)`).
pub fn status_text(
    doing: &str,
    last: Option<&LastRun>,
    next_timer: u64,
    link: LinkStatus,
) -> String {
    let last = match last {
        Some(run) => format!(
            "last run {} at {} ({} changed, {} failed)",
            run.outcome,
            utc(run.ended),
            run.changed,
            run.failed
        ),
        None => "no run yet".to_string(),
    };
    format!(
        "{doing}; {last}; next timer run at {}; link {link}",
        utc(next_timer)
    )
}

/// `2026-12-01 10:21:55 UTC`: absolute, since the line is read long after it was sent.
fn utc(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        for (unix, text) in [
            (0, "1970-01-01 00:00:00 UTC"),
            (951_782_400, "2000-02-29 00:00:00 UTC"),
            (1_796_120_515, "2026-12-01 10:21:55 UTC"),
            (4_107_542_399, "2100-02-28 23:59:59 UTC"),
        ] {
            assert_eq!(utc(unix), text);
        }
    }

    #[test]
    fn the_line_says_what_now_how_the_last_run_ended_and_what_next() {
        let last = LastRun {
            outcome: RunOutcome::Converged,
            ended: 1_796_120_515,
            changed: 2,
            failed: 0,
        };
        assert_eq!(
            status_text("idle", Some(&last), 1_796_122_315, LinkStatus::Connected),
            "idle; last run converged at 2026-12-01 10:21:55 UTC (2 changed, 0 failed); \
             next timer run at 2026-12-01 10:51:55 UTC; link connected"
        );
        assert_eq!(
            status_text("reconciling (start)", None, 0, LinkStatus::None),
            "reconciling (start); no run yet; next timer run at 1970-01-01 00:00:00 UTC; link none"
        );
    }
}
