//! The one timestamp format of every bundle document (DESIGN 5): RFC 3339 in UTC with exactly
//! three fractional digits (milliseconds, truncated), e.g. `2026-11-30T01:02:03.456Z`. Used for
//! bundle.json `created`/`finished`, run.json `start`/`end`, provenance.json `captured-at` and the
//! times in notes. A leaf: imports no other module of the crate.

use std::time::SystemTime;

/// `t` as RFC 3339 UTC with millisecond precision (`YYYY-MM-DDTHH:MM:SS.mmmZ`, always 24
/// characters for years 0000-9999). A time outside jiff's range (before year -9999 or after 9999)
/// gives an empty string.
pub fn rfc3339(t: SystemTime) -> String {
    let Ok(ts) = jiff::Timestamp::try_from(t) else {
        return String::new();
    };
    // Formatted from the civil time in UTC, whose fraction is never negative (a `Timestamp`'s
    // own `subsec_nanosecond` is negative before 1970). `%.3f` truncates to milliseconds.
    ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The current time as [`rfc3339`] text.
pub fn now() -> String {
    rfc3339(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fixed_precision() {
        let at = |secs: u64, nanos: u32| rfc3339(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_795_914_123, 456_789_123), "2026-11-29T01:02:03.456Z");
        assert_eq!(at(1, 999_999_999), "1970-01-01T00:00:01.999Z");
        assert_eq!(at(1, 5_000_000), "1970-01-01T00:00:01.005Z");
        let now = now();
        assert_eq!(now.len(), 24, "{now}");
        now.parse::<jiff::Timestamp>().unwrap();
    }

    #[test]
    fn before_1970_the_fraction_is_not_negative() {
        let before = |secs: u64, nanos: u32| rfc3339(SystemTime::UNIX_EPOCH - Duration::new(secs, nanos));
        // 9.98 s before the epoch is 23:59:50.020, not `23:59:50.-980`.
        assert_eq!(before(9, 980_000_000), "1969-12-31T23:59:50.020Z");
        assert_eq!(before(0, 1), "1969-12-31T23:59:59.999Z");
        assert_eq!(before(1, 0), "1969-12-31T23:59:59.000Z");
        assert_eq!(before(86_400 * 365, 500_000_000), "1968-12-31T23:59:59.500Z");
    }
}
