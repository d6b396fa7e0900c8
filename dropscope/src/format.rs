//! Number, duration and size formatting, shared by the TUI and the command-line output.
use std::time::Duration;

/// An exact count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate: one decimal below 100, whole numbers with separators above.
pub fn rate(r: f64) -> String {
    if !r.is_finite() || r < 0.0 {
        "-".into()
    } else if r < 100.0 {
        format!("{r:.1}")
    } else {
        count(r.round() as u64)
    }
}

/// An optional rate, `-` when unknown.
pub fn opt_rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), rate)
}

/// A duration as `H:MM:SS` (hours grow as needed), or `MM:SS` below an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m:02}:{s:02}")
    }
}

/// Milliseconds as `250ms` or `1.5s`.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// A duration as a person writes it in a message: `250ms`, `2s`, `24.9s`, `1m30s`, `2h`,
/// `1h0m5s` (tenths of a second below a minute, whole seconds above; humantime's parser reads
/// every form back).
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    // Rounded to the nearest tenth below a minute, to the nearest second above.
    let tenths = (ms + 50) / 100;
    if tenths < 600 {
        return if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let secs = (ms + 500) / 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 || (h > 0 && s > 0) {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// The progress of counting for a terminal: `counting 00:04 / 00:10, 1,234 drops` (without a
/// planned duration, `counting 00:04, ...`).
pub fn progress(elapsed: Duration, planned: Option<Duration>, drops: u64) -> String {
    match planned {
        Some(p) => format!(
            "counting {} / {}, {} drops",
            clock(elapsed.min(p)),
            clock(p),
            count(drops)
        ),
        None => format!(
            "counting {}, {} drops (Ctrl-C ends)",
            clock(elapsed),
            count(drops)
        ),
    }
}

/// A byte size: `512 B`, `12.3 KiB`, `4.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A playback speed: `0.25x`, `1x`, `16x`.
pub fn speed(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}x")
    } else {
        format!("{s}x")
    }
}

/// A unicode sparkline of the last `width` values, scaled to their maximum; zero is a blank.
/// Shorter histories are padded on the left.
pub fn sparkline<'a>(values: impl DoubleEndedIterator<Item = &'a u64>, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let mut last: Vec<u64> = values.rev().take(width).copied().collect();
    last.reverse();
    let max = last.iter().copied().max().unwrap_or(0);
    let mut out = " ".repeat(width - last.len());
    for v in last {
        if v == 0 || max == 0 {
            out.push(' ');
        } else {
            // Ceiling of v/max in eighths, so every non-zero value shows at least the lowest bar.
            let idx = ((v as u128 * 8).div_ceil(max as u128)).clamp(1, 8) as usize - 1;
            out.push(BARS[idx]);
        }
    }
    out
}

/// Cuts `s` to at most `width` characters, ending in `…` when cut.
pub fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// A kernel counter's name as shown: a qdisc's handle keeps one colon before the statistic
/// (`Qdisc:eth0:tbf 8002:drops`, not the key's `tbf 8002::drops`), and terminal controls are
/// escaped.
pub fn counter_name(name: &str) -> String {
    crate::sanitize::terminal(&name.replace("::", ":")).into_owned()
}

/// `YYYYmmdd-HHMMSSZ` in UTC: the stamp in the names of the files dropscope writes
/// (recordings, flamegraphs).
pub fn file_stamp(now: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter_map(|c| match c {
            '0'..='9' | 'Z' => Some(c),
            'T' => Some('-'),
            _ => None,
        })
        .collect()
}

/// A duration: a bare number is seconds (`2`, `0.5`), as Unix tools read it; else with units
/// (`10s`, `1m30s`, `500ms`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a duration in seconds"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 2, 10s, 1m30s, 500ms)"))
}

/// A ratio of two rates: `2.00x`, `new` where the earlier had none (and the later `count`
/// drops), `-` where neither had any.
pub fn ratio(ratio: Option<f64>, count: u64) -> String {
    match ratio {
        None if count == 0 => "-".into(),
        None => "new".into(),
        Some(x) if x < 10.0 => format!("{x:.2}x"),
        Some(x) => format!("{x:.0}x"),
    }
}

/// A p-value: three decimals, or two significant digits below 0.001.
pub fn p_value(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else if p < 1e-300 {
        "<1e-300".into()
    } else {
        format!("{p:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(rate(0.25), "0.2");
        assert_eq!(rate(12345.6), "12,346");
        assert_eq!(opt_rate(None), "-");
        assert_eq!(clock(Duration::from_secs(75)), "01:15");
        assert_eq!(clock(Duration::from_secs(3 * 3600 + 61)), "3:01:01");
        assert_eq!(millis(250), "250ms");
        assert_eq!(millis(2000), "2s");
        assert_eq!(millis(1500), "1.5s");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(
            progress(
                Duration::from_millis(4_200),
                Some(Duration::from_secs(10)),
                1234
            ),
            "counting 00:04 / 00:10, 1,234 drops"
        );
        assert_eq!(
            progress(Duration::from_secs(11), Some(Duration::from_secs(10)), 0),
            "counting 00:10 / 00:10, 0 drops",
            "never past the end"
        );
        assert_eq!(
            progress(Duration::from_secs(75), None, 5),
            "counting 01:15, 5 drops (Ctrl-C ends)"
        );
        let d = |ms: u64| duration(Duration::from_millis(ms));
        assert_eq!(d(0), "0ms");
        assert_eq!(d(250), "250ms");
        assert_eq!(d(1000), "1s");
        assert_eq!(d(2000), "2s");
        assert_eq!(d(24_909), "24.9s");
        assert_eq!(d(59_960), "1m");
        assert_eq!(d(90_000), "1m30s");
        assert_eq!(d(3_600_000), "1h");
        assert_eq!(d(3_605_000), "1h0m5s");
        assert_eq!(d(5_400_000), "1h30m");
        assert_eq!(
            duration(Duration::new(24, 909_720_321)),
            "24.9s",
            "not humantime's 24s 909ms 720us 321ns"
        );
        for ms in [
            0, 250, 1000, 24_900, 90_000, 3_605_000, 5_400_000, 86_400_000,
        ] {
            let back = humantime::parse_duration(&d(ms)).expect("humantime reads it back");
            assert_eq!(back, Duration::from_millis(ms), "{}", d(ms));
        }
        assert_eq!(bytes(12 * 1024 + 300), "12.3 KiB");
        assert_eq!(speed(0.25), "0.25x");
        assert_eq!(speed(16.0), "16x");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }

    #[test]
    fn sparkline_scales_and_pads() {
        let v = [0u64, 1, 4, 8];
        assert_eq!(sparkline(v.iter(), 6), "   ▁▄█");
        assert_eq!(sparkline(v.iter(), 2), "▄█");
        assert_eq!(sparkline([].iter(), 3), "   ");
        assert_eq!(sparkline([0u64, 0].iter(), 2), "  ");
    }
}
