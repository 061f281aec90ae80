//! Injected time: wall-clock milliseconds for stored instants, tokio instants for timers.
//!
//! Deadlines are stored as Unix milliseconds. In production the wall clock is the system's;
//! in tests a [`Clock::following_tokio`] clock advances only with tokio's (paused) clock, so
//! deadlines and timers can be driven without sleeping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of "now".
#[derive(Debug, Clone)]
pub enum Clock {
    /// The system clock.
    System,
    /// Starts at `start_ms` and advances exactly as tokio's clock does from `start`.
    FollowingTokio {
        /// Unix milliseconds at `start`.
        start_ms: i64,
        /// The tokio instant the clock was created at.
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that follows tokio's (possibly paused) clock, starting at the current wall time.
    pub fn following_tokio() -> Clock {
        Clock::FollowingTokio { start_ms: system_now_ms(), start: tokio::time::Instant::now() }
    }

    /// Unix milliseconds now.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => system_now_ms(),
            Clock::FollowingTokio { start_ms, start } => {
                start_ms + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX / 2)
            }
        }
    }

    /// The tokio instant at which the wall clock will read `at_ms` (now, if already past).
    pub fn instant_at(&self, at_ms: i64) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let delta = at_ms.saturating_sub(self.now_ms());
        if delta <= 0 { now } else { now + Duration::from_millis(delta as u64) }
    }
}

fn system_now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX / 2)
}

/// Parses an RFC 3339 instant (`2026-12-04T10:00:00Z`, with or without fractions or an
/// offset's `Z`) to Unix milliseconds; `None` for anything else or before 1970.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(text.trim()).ok()?;
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()
}

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds (`2026-12-02T10:56:20.123Z`);
/// an instant before 1970 is written as 1970's first. Written by hand: a task view holds up to
/// seven of them, and formatting through `Display` cost more than the rest of a field.
pub fn rfc3339(ms: i64) -> String {
    let ms = ms.max(0);
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1_000 % 60, in_day % 1_000);
    let mut out = String::with_capacity(24);
    // Years past 9999 (no stored instant comes near) would need more digits than RFC 3339 has.
    let year = year.min(9999);
    for (value, width, after) in
        [(year, 4, '-'), (month, 2, '-'), (day, 2, 'T'), (h, 2, ':'), (m, 2, ':'), (s, 2, '.'), (milli, 3, 'Z')]
    {
        let mut digits = [b'0'; 4];
        let mut v = value;
        for d in digits[..width].iter_mut().rev() {
            *d = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out.extend(digits[..width].iter().map(|&d| char::from(d)));
        out.push(after);
    }
    out
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn following_clock_moves_with_paused_tokio_time() {
        let clock = Clock::following_tokio();
        let before = clock.now_ms();
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms() - before, 90_000);
        let target = clock.now_ms() + 5_000;
        let at = clock.instant_at(target);
        assert_eq!(at - tokio::time::Instant::now(), Duration::from_secs(5));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    proptest::proptest! {
        /// The hand-written formatter writes what humantime writes, and reads back to itself.
        #[test]
        fn rfc3339_agrees_with_humantime(ms in 0i64..253_402_300_800_000) {
            let t = UNIX_EPOCH + Duration::from_millis(ms as u64);
            let text = rfc3339(ms);
            proptest::prop_assert_eq!(&text, &humantime::format_rfc3339_millis(t).to_string());
            proptest::prop_assert_eq!(parse_rfc3339_ms(&text), Some(ms));
        }
    }
}
