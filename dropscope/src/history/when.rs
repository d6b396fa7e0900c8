//! Points in time on the command line and on screen: session time (`30s`) or wall-clock time,
//! local (`03:10`, `2026-11-27 03:10`) or RFC 3339 (`2026-11-27T03:10:00Z`).
use std::time::Duration;

use jiff::{Timestamp, Zoned, civil, tz::TimeZone};

/// A `--from` or `--to`: session time (a recording's own clock) or wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeArg {
    /// Time since the session started, as `replay` shows it.
    Session(Duration),
    /// Wall-clock time, ms since the Unix epoch.
    Wall(u64),
}

impl TimeArg {
    /// The session time this stands for in a session started at `started_unix_ms`.
    pub fn session(self, started_unix_ms: u64) -> Duration {
        match self {
            TimeArg::Session(d) => d,
            TimeArg::Wall(ms) => Duration::from_millis(ms.saturating_sub(started_unix_ms)),
        }
    }
}

/// Parses a `--from`/`--to`: a duration is session time; otherwise a wall-clock time.
pub fn parse_time(s: &str) -> Result<TimeArg, String> {
    if let Ok(d) = crate::format::parse_duration(s) {
        return Ok(TimeArg::Session(d));
    }
    parse_wall(s, &Zoned::now()).map(TimeArg::Wall)
}

/// Parses a wall-clock time given `now` (whose zone is the local one): an RFC 3339 stamp, a
/// local date and time, or a local time of day (the last such time at or before now).
pub fn parse_wall(s: &str, now: &Zoned) -> Result<u64, String> {
    let s = s.trim();
    let ms =
        |t: Timestamp| u64::try_from(t.as_millisecond()).map_err(|_| "before 1970".to_string());
    if let Ok(t) = s.parse::<Timestamp>() {
        return ms(t);
    }
    let zone = now.time_zone();
    if let Ok(dt) = s.parse::<civil::DateTime>() {
        let z = dt.to_zoned(zone.clone()).map_err(|e| e.to_string())?;
        return ms(z.timestamp());
    }
    if let Ok(t) = s.parse::<civil::Time>() {
        let today = now.date().to_datetime(t);
        let mut z = today.to_zoned(zone.clone()).map_err(|e| e.to_string())?;
        if z.timestamp() > now.timestamp() {
            let yesterday = now.date().yesterday().map_err(|e| e.to_string())?;
            z = yesterday
                .to_datetime(t)
                .to_zoned(zone.clone())
                .map_err(|e| e.to_string())?;
        }
        return ms(z.timestamp());
    }
    Err(format!(
        "{s:?} is neither a duration (30s) nor a time (03:10, 2026-11-27 03:10, \
         2026-11-27T03:10:00Z)"
    ))
}

/// `ms` since the epoch as local date and time, e.g. `2026-11-27 03:10:05`.
pub fn local(ms: u64) -> String {
    local_in(ms, &TimeZone::system())
}

/// [`local`] in zone `tz`.
pub fn local_in(ms: u64, tz: &TimeZone) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || format!("@{ms}ms"),
            |t| {
                t.to_zoned(tz.clone())
                    .strftime("%Y-%m-%d %H:%M:%S")
                    .to_string()
            },
        )
}

/// The local zone's offset now, e.g. `UTC+01:00`, for headers.
pub fn zone_label() -> String {
    let now = Zoned::now();
    format!("UTC{}", now.strftime("%:z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Zoned {
        "2026-11-27T09:00:00+01:00[Europe/Paris]"
            .parse()
            .expect("zoned")
    }

    #[test]
    fn durations_are_session_time_and_times_are_wall_clock() {
        assert_eq!(
            parse_time("30s"),
            Ok(TimeArg::Session(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_time("90"),
            Ok(TimeArg::Session(Duration::from_secs(90)))
        );
        let n = now();
        // 2026-11-27T08:00:00Z
        let eight_utc = 1_795_766_400_000;
        assert_eq!(parse_wall("2026-11-27T08:00:00Z", &n), Ok(eight_utc));
        assert_eq!(parse_wall("2026-11-27 09:00", &n), Ok(eight_utc));
        // A time of day is the last one at or before now: today at 03:10, yesterday at 10:00.
        assert_eq!(
            parse_wall("03:10", &n),
            Ok(eight_utc - (5 * 60 + 50) * 60_000)
        );
        assert_eq!(parse_wall("10:00", &n), Ok(eight_utc - 23 * 3_600_000));
        assert!(parse_wall("tomorrow", &n).is_err());
    }

    #[test]
    fn wall_time_maps_into_a_session() {
        assert_eq!(
            TimeArg::Wall(10_500).session(10_000),
            Duration::from_millis(500)
        );
        assert_eq!(TimeArg::Wall(9_000).session(10_000), Duration::ZERO);
        assert_eq!(
            local_in(1_795_766_400_000, &TimeZone::UTC),
            "2026-11-27 08:00:00"
        );
    }
}
