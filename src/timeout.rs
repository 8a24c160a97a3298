//! Timeouts given as text (`MCORE_INIT_TIMEOUT`, the tools' `--timeout`) or as C milliseconds:
//! range-checked, never a panic, with "no limit" expressible.
//!
//! No limit is a finite [`NO_LIMIT`] of 2^31 s (about 68 years): every deadline computed from it
//! fits an `Instant`, and its milliseconds (and nanoseconds) fit the signed 64-bit counts that
//! backends such as Gloo keep. Any longer timeout means the same thing and is clamped to it.

use std::time::{Duration, Instant};

/// The longest timeout; it and anything longer mean "no limit".
pub const NO_LIMIT: Duration = Duration::from_secs(1 << 31);

/// [`NO_LIMIT`] in milliseconds (`MCORE_TIMEOUT_MAX_MS`).
pub const NO_LIMIT_MS: u64 = (1 << 31) * 1000;

/// `d`, or [`NO_LIMIT`] when longer.
pub fn clamp(d: Duration) -> Duration {
    d.min(NO_LIMIT)
}

/// A C timeout in milliseconds, clamped to [`NO_LIMIT`] (so `UINT64_MAX` is no limit).
pub fn from_millis(ms: u64) -> Duration {
    Duration::from_millis(ms.min(NO_LIMIT_MS))
}

/// Whether `d` means no limit.
pub fn is_unlimited(d: Duration) -> bool {
    d >= NO_LIMIT
}

/// A positive number of seconds (fractions allowed), or `none` / `inf` / `infinity` for no
/// limit; values of [`NO_LIMIT`] or more mean no limit too. `what` names the source in errors
/// (`MCORE_INIT_TIMEOUT`, `--timeout`).
pub fn parse_seconds(what: &str, text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(NO_LIMIT);
    }
    let bad = || {
        format!("{what}: {} is not a positive number of seconds (or 'none' for no limit)", crate::quote::quoted(text))
    };
    let secs: f64 = t.parse().map_err(|_| bad())?;
    // NaN is neither positive nor anything else; +inf is no limit.
    if secs.is_nan() || secs <= 0.0 {
        return Err(bad());
    }
    if secs >= NO_LIMIT.as_secs_f64() {
        return Ok(NO_LIMIT);
    }
    let d = Duration::from_secs_f64(secs);
    if d.is_zero() {
        return Err(format!("{what}: {} seconds rounds to zero", crate::quote::quoted(text)));
    }
    Ok(d)
}

/// A duration given as a floating-point number of seconds by a caller (a C `double`, a Python
/// float), `what` naming the parameter in the error: NaN, infinities, negative values and values
/// over [`NO_LIMIT`] (2^31 s) are refused with a message naming the parameter and the value,
/// never a panic (`Duration::from_secs_f64` panics on them). The one place such a value becomes
/// a `Duration`.
pub fn from_secs_f64(what: &str, secs: f64) -> Result<Duration, String> {
    let max = NO_LIMIT.as_secs_f64();
    if !(secs.is_finite() && (0.0..=max).contains(&secs)) {
        return Err(format!("{what} {secs:?} is not a number of seconds from 0 to {max} (2^31)"));
    }
    // In range: cannot fail, but a `try_` keeps any surprise an error rather than a panic.
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{what} {secs:?}: {e}"))
}

/// `d` for messages: seconds with milliseconds, or "no limit".
pub fn describe(d: Duration) -> String {
    if is_unlimited(d) {
        "no limit".into()
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

/// When a wait must be over: every step below bring-up gets what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    /// `d` from now (clamped to `timeout::NO_LIMIT`, so a long one never overflows).
    pub fn after(d: Duration) -> Deadline {
        Deadline { at: Instant::now() + clamp(d) }
    }

    /// At `at`.
    pub fn at(at: Instant) -> Deadline {
        Deadline { at }
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// What is left (at least 1 ms, so a store wait is never told zero).
    pub fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// `d` earlier (itself when that is before the clock's start).
    pub fn earlier_by(&self, d: Duration) -> Deadline {
        Deadline { at: self.at.checked_sub(d).unwrap_or(self.at) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_timeouts_are_range_checked_and_no_limit_is_expressible() {
        let p = |t: &str| parse_seconds("--timeout", t);
        assert_eq!(p("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(p(" 300 "), Ok(Duration::from_secs(300)));
        for unlimited in ["none", "NONE", "inf", "infinity", "+inf", "1e20", "1e300", "2147483648"] {
            assert_eq!(p(unlimited), Ok(NO_LIMIT), "{unlimited}");
        }
        assert_eq!(p("2147483647"), Ok(Duration::from_secs(2147483647)));
        for bad in ["0", "-1", "-inf", "nan", "", "ten", "1e-300", "0x10"] {
            let e = p(bad).unwrap_err();
            assert!(e.starts_with("--timeout: '") && e.contains(bad), "{bad}: {e}");
        }
        // Every deadline from the longest timeout fits an Instant.
        let _ = std::time::Instant::now() + NO_LIMIT;
    }

    #[test]
    fn float_seconds_out_of_range_are_errors_naming_the_parameter() {
        assert_eq!(from_secs_f64("window_seconds", 1.5), Ok(Duration::from_millis(1500)));
        assert_eq!(from_secs_f64("window_seconds", 0.0), Ok(Duration::ZERO));
        assert_eq!(from_secs_f64("window_seconds", NO_LIMIT.as_secs_f64()), Ok(NO_LIMIT));
        for (bad, shown) in [
            (1e300, "1e300"),
            (1.8e19, "1.8e19"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (-1.0, "-1.0"),
            (2147483648.5, "2147483648.5"),
        ] {
            let e = from_secs_f64("window_seconds", bad).unwrap_err();
            assert!(e.starts_with(&format!("window_seconds {shown} ")), "{e}");
        }
    }

    #[test]
    fn c_milliseconds_clamp_to_no_limit() {
        assert_eq!(from_millis(1500), Duration::from_millis(1500));
        assert_eq!(from_millis(u64::MAX), NO_LIMIT);
        assert_eq!(from_millis(1 << 63), NO_LIMIT);
        assert_eq!(NO_LIMIT.as_millis(), u128::from(NO_LIMIT_MS));
        assert!(i64::try_from(NO_LIMIT.as_nanos()).is_ok());
        assert_eq!(describe(from_millis(u64::MAX)), "no limit");
        assert_eq!(describe(Duration::from_millis(1500)), "1.500 s");
    }
}
