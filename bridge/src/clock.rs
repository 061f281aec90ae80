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

/// The last millisecond RFC 3339's four-digit years can write (`9999-12-31T23:59:59.999Z`).
const LAST_WRITABLE_MS: i64 = 253_402_300_799_999;

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds (`2026-12-02T10:56:20.123Z`),
/// through `humantime`, the one formatter of instants; an instant before 1970 is written as
/// 1970's first, one past 9999 as 9999's last (no stored instant comes near).
pub fn rfc3339(ms: i64) -> String {
    let ms = ms.clamp(0, LAST_WRITABLE_MS).unsigned_abs();
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
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
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_rfc3339_ms(&rfc3339(1_700_000_000_123)), Some(1_700_000_000_123));
    }
}
